// The gateway's HTTP endpoint (Boost.Beast, synchronous, one thread per
// connection): POST /v1/infer (JSON array or .npy body), GET /healthz,
// GET /metrics (Prometheus text).
#pragma once

#include <memory>
#include <string>

#include "daemon/cluster/gateway.h"

namespace tessera {

class HttpEndpoint {
 public:
  // `listen` "host:port" (port 0 = any). Bound address via address().
  static Result<std::unique_ptr<HttpEndpoint>> Start(Gateway* gateway, const std::string& listen,
                                                     int64_t max_body_bytes);
  ~HttpEndpoint();
  std::string address() const;

  struct State;  // daemon/cluster/http_endpoint.cc

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tessera
