// Byte-stream fault injection for serial links (issue 6 proof: "a fault
// injector that corrupts, drops and duplicates bytes"), and a relay that
// sits between two pseudo-terminals — the stand-in for a noisy UART cable.
//
//   UartLink(slave A) <-> master A  [SerialRelay + faults]  master B <-> UartLink(slave B) / QEMU
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "util/status.h"

namespace tessera {

// Per-byte probabilities.
struct ByteFaults {
  double corrupt = 0;    // flip one random bit
  double drop = 0;       // byte never arrives
  double duplicate = 0;  // byte arrives twice
  uint32_t seed = 1;
};

struct ByteFaultCounts {
  uint64_t bytes = 0, corrupted = 0, dropped = 0, duplicated = 0;
};

class ByteFaultInjector {
 public:
  explicit ByteFaultInjector(const ByteFaults& faults) : faults_(faults), rng_(faults.seed) {}
  // Appends the damaged version of `in` to `out`.
  void Apply(const char* in, size_t n, std::string* out);
  const ByteFaultCounts& counts() const { return counts_; }

 private:
  ByteFaults faults_;
  std::mt19937 rng_;
  ByteFaultCounts counts_;
};

// A pseudo-terminal in raw mode: the master end (kept by the creator) and
// the slave's path (what a UartLink or QEMU opens).
struct RawPty {
  int master = -1;
  int slave = -1;  // kept open so the slave's settings survive until a user opens it
  std::string slave_path;
};
Result<RawPty> OpenRawPty();
void ClosePty(RawPty* pty);

// Copies bytes between two file descriptors in both directions on its own
// thread, damaging each direction with its own faults.
class SerialRelay {
 public:
  // Does not take ownership of the descriptors.
  SerialRelay(int fd_a, int fd_b, const ByteFaults& a_to_b, const ByteFaults& b_to_a);
  ~SerialRelay();
  ByteFaultCounts a_to_b() const;
  ByteFaultCounts b_to_a() const;

 private:
  void Run();
  int fd_a_, fd_b_;
  ByteFaultInjector ab_, ba_;
  std::atomic<bool> stop_{false};
  mutable std::atomic<uint64_t> snapshot_[8] = {};
  std::thread thread_;
};

}  // namespace tessera
