// The MCU bridge of a Linux worker (issue 6, "Mixed cluster"): a
// microcontroller is not on the network, so the worker it hangs off (`via:`
// in the cluster file) serves it. That worker process runs one extra Worker
// service per MCU (WorkerOptions::mcu); the gateway and the peers see the MCU
// as an ordinary device at that address, and this bridge turns
//  * LoadProgram  -> BuildMcuProgram(DeviceProgram) + a PROGRAM frame on the
//                    MCU's UART, checked with a STATUS round trip;
//  * Run          -> the MCU device's Recv steps: receive from the peer over
//                    gRPC, send on as DATA frames; its Send steps: receive the
//                    DATA frame from the MCU, forward to the peer over gRPC.
//                    Steps over a direct MCU<->MCU UART (uart_port > 0)
//                    are the MCUs' own: the bridge skips them.
//  * Status       -> a STATUS frame: program id, arena size, free RAM.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/wire/mcu_program.h"
#include "partition/compile/device_program.h"
#include "util/status.h"
#include "transport/link.h"
#include "transport/uart/uart_link.h"

namespace tessera {

struct McuBridgeOptions {
  std::string name;    // the MCU's device name ("mcu1")
  std::string serial;  // its UART: /dev/ttyUSB0, a QEMU `-serial pty` slave
  uint32_t baud = 115200;
};

// What the MCU holds after a load.
struct McuLoadInfo {
  int64_t program_bytes = 0;  // the compact program, weights included
  int64_t arena_bytes = 0;    // activations the firmware places in its RAM arena (the program is in flash)
  int64_t macs = 0;
  mcu::McuStatus status{};    // STATUS right after the load
};

class McuBridge {
 public:
  // IOError naming the port when it cannot be opened.
  static Result<std::unique_ptr<McuBridge>> Open(const McuBridgeOptions& options);

  // NotSupported (from BuildMcuProgram) for steps the MCU cannot run;
  // Unavailable when the MCU does not answer; FailedPrecondition when it
  // refuses the program (its error code named).
  Result<McuLoadInfo> Load(const DeviceProgram& program, const std::string& plan_id);

  // One request of the loaded program: `peers[d]` is the gRPC link to
  // device d. One request at a time on the MCU (the firmware runs one).
  Status Relay(const DeviceProgram& program, const std::vector<Link*>& peers,
               std::chrono::steady_clock::time_point deadline);

  // STATUS round trip; also remembered for last_status().
  Result<mcu::McuStatus> QueryStatus(std::chrono::milliseconds timeout);
  mcu::McuStatus last_status() const;
  bool has_status() const;
  UartLinkCounters counters() const { return link_->counters(); }
  const McuBridgeOptions& options() const { return options_; }

 private:
  explicit McuBridge(McuBridgeOptions options) : options_(std::move(options)) {}
  McuBridgeOptions options_;
  std::unique_ptr<UartLink> link_;
  std::mutex run_mu_;            // one request (or load) on the UART at a time
  std::timed_mutex status_io_mu_;  // one STATUS round trip at a time
  mutable std::mutex status_mu_;
  mcu::McuStatus last_status_{};  // GUARDED_BY(status_mu_)
  bool has_status_ = false;       // GUARDED_BY(status_mu_)
  uint32_t next_status_id_ = 1;   // GUARDED_BY(status_mu_)
};

}  // namespace tessera
