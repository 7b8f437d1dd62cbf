// Run-time ISA selection (isa.h).
#include "daemon/runtime/kernels/isa.h"

#include <atomic>
#include <cstdlib>

namespace tessera {
namespace {

Isa Detect() {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's cpu model also checks that the OS saves the AVX / AVX-512
  // register state (XGETBV), not only the CPUID bits.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

// -1: not chosen yet; else the Isa value.
std::atomic<int> g_active{-1};

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kBaseline:
      break;
  }
#if defined(__aarch64__)
  return "neon";
#else
  return "baseline";
#endif
}

Result<Isa> ParseIsa(const std::string& name) {
  if (name == "avx512") return Isa::kAvx512;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "baseline" || name == "sse2" || name == "neon") return Isa::kBaseline;
  return Status::InvalidArgument("unknown ISA level '" + name + "'; use baseline, avx2 or avx512");
}

Isa DetectedIsa() {
  static const Isa detected = Detect();
  return detected;
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(DetectedIsa()); ++i) {
#if !(defined(__x86_64__) || defined(__i386__))
    if (i > 0) break;
#endif
    out.push_back(static_cast<Isa>(i));
  }
  return out;
}

Status SetActiveIsa(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(DetectedIsa()))
    return Status::InvalidArgument(std::string("this CPU does not support ") + IsaName(isa) + " (best: " +
                                   IsaName(DetectedIsa()) + ")");
  g_active.store(static_cast<int>(isa));
  return Status::OK();
}

Isa ActiveIsa() {
  int v = g_active.load();
  if (v >= 0) return static_cast<Isa>(v);
  Isa isa = DetectedIsa();
  if (const char* env = std::getenv("TESSERA_ISA"); env != nullptr && *env != '\0') {
    // A level the CPU lacks is capped to what it has: an environment
    // variable must never make the binary die with SIGILL. The CLI reports
    // the level it runs at (tessera run, bench).
    auto wanted = ParseIsa(env);
    if (wanted.ok() && static_cast<int>(*wanted) < static_cast<int>(isa)) isa = *wanted;
  }
  int expected = -1;
  g_active.compare_exchange_strong(expected, static_cast<int>(isa));
  return static_cast<Isa>(g_active.load());
}

}  // namespace tessera
