// Link: the one narrow interface between two devices (ARCHITECTURE.md;
// STYLE.md "a narrow Link interface with in-process, gRPC and UART
// implementations and a fault-injecting wrapper"). transport/ knows nothing
// of models: a link moves numbered messages of bytes.
//
// Contract:
//  * Send() queues the message and returns; it does not wait for the peer to
//    receive (so programs whose steps are in a consistent global order cannot
//    deadlock). Unavailable when the link is closed or broken.
//  * Recv() waits for the message with that id from this link's peer, up to
//    `timeout`; messages may arrive in any order. DeadlineExceeded on timeout,
//    DataLoss when the link detected corruption it could not repair.
//  * Thread-safety: Send and Recv may be called from different threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "util/status.h"

namespace tessera {

class Link {
 public:
  virtual ~Link() = default;
  Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  virtual Status Send(int64_t message, std::string bytes) = 0;
  virtual Result<std::string> Recv(int64_t message, std::chrono::milliseconds timeout) = 0;
  // Payload bytes handed to Send so far (framing excluded).
  virtual int64_t bytes_sent() const = 0;
  // "inproc 0->1", "grpc 10.0.0.2:7070", "uart /dev/ttyUSB0" — for logs and metrics.
  virtual std::string description() const = 0;
};

// A connected pair of in-process links: what one end sends, the other receives.
std::pair<std::unique_ptr<Link>, std::unique_ptr<Link>> MakeInProcessLinkPair(const std::string& a_name,
                                                                             const std::string& b_name);

}  // namespace tessera
