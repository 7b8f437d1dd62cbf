// The gateway's HTTP endpoint (Boost.Beast, synchronous, one thread per
// connection): POST /v1/infer (JSON array or .npy body), GET /healthz,
// GET /metrics (Prometheus text), and the Open Inference Protocol v2 under
// /v2 (oip_http.h).
//
// Bounded (issue 14): at most `max_connections` connections are served at
// once (more are answered 503 and closed), a connection that sends no
// complete request header within `idle_timeout` is closed, a body over
// `max_body_bytes` is answered 413 before it is read, and a failing
// listener (out of descriptors) is reported by /healthz while it lasts.
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
