// libFuzzer target: the gateway's HTTP request parsing (daemon/cluster/
// http_request.h): Beast's parser with the endpoint's body limit (64 KiB
// here so that the limit is reachable), the header fields the endpoint
// reads, then the /v1/infer body as .npy or JSON for a 1x3x8x8 input, and
// under /v2 the Open Inference Protocol's route and infer body (with its
// Inference-Header-Content-Length) for a model with that input (oip_codec.h).
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/cluster/http_request.h"
#include "daemon/cluster/oip_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto request = tessera::ParseHttpRequest(bytes, 64 << 10);
  if (!request.ok()) return 0;
  const std::string target(request->target());
  const std::string content_type((*request)[http::field::content_type]);
  const std::string authorization((*request)[http::field::authorization]);
  (void)target;
  (void)authorization;
  (void)tessera::ParseInferBody(request->body(), content_type, tessera::Shape{1, 3, 8, 8});
  if (tessera::IsOipTarget(target)) {
    static const tessera::OipModel model = {"m", {"x"}, {"y", "z"}, {{1, 3, 8, 8}}, {{1, 4}, {2}}};
    (void)tessera::ParseOipRoute(target);
    const std::string header_length((*request)["Inference-Header-Content-Length"]);
    auto v2 = tessera::ParseOipInferRequest(request->body(), header_length, model);
    if (v2.ok()) {
      (void)tessera::OipChooseOutputs(*v2, model);
      (void)tessera::OipModelInputs(&*v2, model);
    }
  }
  return 0;
}
