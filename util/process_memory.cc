#include "util/process_memory.h"

#include <cstdio>
#include <cstring>

namespace tessera {

ProcessMemory ReadProcessMemory() {
  ProcessMemory m;
  // fopen/fgets, not iostreams: called from a daemon's status path.
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long kib = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) m.rss_bytes = kib * 1024;
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) m.peak_rss_bytes = kib * 1024;
  }
  std::fclose(f);
  return m;
}

}  // namespace tessera
