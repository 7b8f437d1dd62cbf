// The memory this process really uses, as the kernel counts it (issue 11:
// every memory figure tessera prints is checked against this).
#pragma once

#include <cstdint>

namespace tessera {

struct ProcessMemory {
  int64_t rss_bytes = 0;       // VmRSS: resident now
  int64_t peak_rss_bytes = 0;  // VmHWM: the most ever resident
};

// Reads /proc/self/status. Zeros where the kernel does not say (not Linux).
ProcessMemory ReadProcessMemory();

}  // namespace tessera
