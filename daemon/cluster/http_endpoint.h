// The gateway's HTTP endpoint: POST /v1/infer (JSON array or .npy body),
// GET /healthz, GET /metrics (Prometheus text), and the Open Inference
// Protocol v2 under /v2 (oip_http.h).
//
// Asynchronous Boost.Beast server: one io_context run by `io_threads`
// threads accepts, reads and writes for every connection (each on a strand
// of its own), so threads do not grow with connections. Requests that may
// run an inference (POST) are handed to a pool of at most `handler_threads`
// threads, which call the blocking Gateway::Infer and post the answer back
// to the connection for an async write; the other routes are answered on
// the I/O threads (they only read the gateway's state). The pool's default
// size, max_in_flight + queue_capacity of the gateway, lets every request
// the gateway would queue wait in its queue, so its 429 "queue is full"
// comes as before; a POST that finds every handler thread busy is answered
// the same 429.
//
// Bounded (issue 14): at most `max_connections` connections are served at
// once (more are answered 503 and closed), a connection that sends no
// complete request header within `idle_timeout` (a new one or the next on
// keep-alive) is closed, a body must arrive within `body_timeout`, a body
// over `max_body_bytes` is answered 413 before it is read, and a failing
// listener (out of descriptors: EMFILE/ENFILE) retries every 100 ms, is
// counted in /metrics and reported by /healthz while it lasts, and serves
// again once descriptors free up.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "daemon/cluster/gateway.h"
#include "util/limits.h"

namespace tessera {

struct HttpEndpointOptions {
  std::string listen;  // "host:port" (port 0 = any)
  int64_t max_body_bytes = kMaxRequestBytes;
  // Plaintext HTTP off loopback (`--insecure`), the same rule as gRPC's.
  bool allow_remote = false;
  int max_connections = kMaxHttpConnections;
  std::chrono::milliseconds idle_timeout{kHttpIdleTimeoutMs};
  // Time to receive a body once its header arrived.
  std::chrono::milliseconds body_timeout{60000};
  // Threads running the io_context (accept, read, write; never blocked).
  int io_threads = 2;
  // Most threads calling the gateway for POST requests at once (started on
  // demand, kept); 0 = the gateway's max_in_flight + queue_capacity.
  int handler_threads = 0;
};

// FailedPrecondition when `listen` is not a loopback address and
// `allow_remote` is false (the gRPC guard's rule, transport/grpc/grpc_channel.h).
Status CheckHttpListenAddress(const std::string& listen, bool allow_remote);

// The HTTP status answering an error of `code` (400 bad input, 404, 401,
// 429 queue full, 503 unavailable, 504 deadline, ...).
int HttpCode(StatusCode code);

class HttpEndpoint {
 public:
  // Bound address via address(). Errors: a bad or refused address, a port in use.
  static Result<std::unique_ptr<HttpEndpoint>> Start(Gateway* gateway, const HttpEndpointOptions& options);
  ~HttpEndpoint();
  std::string address() const;

  struct State;  // daemon/cluster/http_endpoint.cc

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tessera
