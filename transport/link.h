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
//  * Expect() names, ahead of RecvInto, the memory a message goes to: a link
//    that can (gRPC) writes its frames there as they arrive, so the message
//    never waits in a heap copy (issue 11 item 1). The memory stays the
//    link's until RecvInto of that message returns or Detach().
//    Links that cannot ignore it; RecvInto then copies what Recv returned.
//    SendFrom() is its mirror for sending (the device arena, not a copy).
//  * Thread-safety: Send and Recv may be called from different threads.
#pragma once

#include <chrono>
#include <cstddef>
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
  // Sends `bytes` bytes at `data`, which stay valid and unchanged until
  // WaitSent(message) or Detach() returns: a link that can (gRPC) reads the
  // message from there rather than from a copy. Default: copies and Send().
  virtual Status SendFrom(int64_t message, const void* data, size_t bytes);
  // Waits until the link no longer reads the memory SendFrom named for
  // `message` (in the transport's own buffers, or given up).
  virtual Status WaitSent(int64_t /*message*/) { return Status::OK(); }
  virtual void Expect(int64_t /*message*/, void* /*dst*/, size_t /*bytes*/) {}
  // Receives the message into `dst`; DataLoss when it is not `bytes` long.
  virtual Status RecvInto(int64_t message, void* dst, size_t bytes, std::chrono::milliseconds timeout);
  // Takes back every memory Expect or SendFrom named: after it returns the
  // link neither writes nor reads it (messages not yet written are dropped).
  virtual void Detach() {}
  // Payload bytes handed to Send so far (framing excluded).
  virtual int64_t bytes_sent() const = 0;
  // "inproc 0->1", "grpc 10.0.0.2:7070", "uart /dev/ttyUSB0" — for logs and metrics.
  virtual std::string description() const = 0;
};

// A connected pair of in-process links: what one end sends, the other receives.
std::pair<std::unique_ptr<Link>, std::unique_ptr<Link>> MakeInProcessLinkPair(const std::string& a_name,
                                                                             const std::string& b_name);

}  // namespace tessera
