// The Open Inference Protocol v2 REST routes of the gateway's HTTP endpoint
// (issue 14 item 3): http_endpoint.cc hands every target under /v2 here.
//
//   GET  /v2/health/live                          200 while the process answers
//   GET  /v2/health/ready                         200 when every worker of the plan is up, else 400
//   GET  /v2                                      server metadata (extensions: binary_tensor_data)
//   GET  /v2/models/{name}[/versions/1]           model metadata: inputs and outputs, FP32
//   GET  /v2/models/{name}[/versions/1]/ready     200 / 400 like /v2/health/ready; 404 for another model
//   POST /v2/models/{name}[/versions/1]/infer     JSON tensors, or JSON + binary tensor data
//
// Errors are {"error": "..."}: 400 for a request the model cannot take
// (malformed JSON, unknown input or output, wrong shape or datatype, sizes
// that do not add up), 404 for another model or version or an unknown
// route, 405 for a wrong method, and the gateway's own codes for what
// happens on the cluster (503 a worker down, 429 queue full, 504 deadline).
// Tokens: the endpoint's Authorize (http_endpoint.cc) runs before any of
// this; the two /v2/health probes stay open like /healthz.
#pragma once

#include <boost/beast/http.hpp>
#include <string>
#include <string_view>

#include "daemon/cluster/gateway.h"
#include "daemon/cluster/http_request.h"
#include "daemon/cluster/oip_codec.h"

namespace tessera {

// The served model as v2 clients see it (REST and gRPC).
OipModel OipModelOf(const ModelSignature& signature);
// The model a v2 request names: one of merged models (ModelSignature::models;
// `*scenario` = its name, for Gateway::Infer) or the served graph as a whole
// (`*scenario` = ""). Each merged model is a v2 model of its own.
OipModel OipModelNamed(const ModelSignature& signature, const std::string& name, std::string* scenario);

// "" when the gateway can run requests now (every worker of the served plan
// answers), else why not. What /v2/health/ready and ModelReady report.
std::string OipNotReady(const Gateway& gateway);

// Whether `target` is one of the two v2 health probes, which need no token
// unless --protect-metrics (like /healthz).
bool IsOipHealthProbe(std::string_view target);

// The answer to `request`. REQUIRES: IsOipTarget(request.target()).
boost::beast::http::response<boost::beast::http::string_body> HandleOipRequest(Gateway& gateway,
                                                                               const HttpRequest& request);

}  // namespace tessera
