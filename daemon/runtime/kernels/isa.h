// Isa: which instruction-set level the hot kernels run at, chosen at run time
// so that one binary runs on any CPU of its architecture (issue 12: no
// -march=native in the default build).
//
// x86-64: kBaseline (SSE2, every x86-64 CPU), kAvx2 (AVX2 + FMA), kAvx512
// (AVX-512F). aarch64: kBaseline is NEON (every arm64 CPU has it). The
// detected level is the best the CPU (and the OS, for the AVX state) allows;
// TESSERA_ISA=baseline|avx2|avx512 in the environment lowers it, e.g. to
// measure the AVX2 path on an AVX-512 machine. Asking for a level the CPU
// lacks is refused, never silently granted (it would crash with SIGILL).
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace tessera {

enum class Isa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// "baseline" (or "neon" on aarch64), "avx2", "avx512".
const char* IsaName(Isa isa);
// Parses a name as IsaName prints it ("sse2" and "neon" mean baseline).
Result<Isa> ParseIsa(const std::string& name);

// The best level this CPU supports. Thread-safe.
Isa DetectedIsa();
// Every level this CPU supports, lowest first (tests run each).
std::vector<Isa> SupportedIsas();

// The level kernels prepared from now on use: TESSERA_ISA if set (and
// supported), else DetectedIsa(). Thread-safe.
Isa ActiveIsa();
// Overrides ActiveIsa() for kernels prepared after the call (tests, the
// bench). InvalidArgument if the CPU does not support `isa`.
Status SetActiveIsa(Isa isa);

}  // namespace tessera
