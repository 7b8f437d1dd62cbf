#include "daemon/cluster/oip_http.h"

#include "daemon/cluster/http_endpoint.h"

namespace tessera {

namespace http = boost::beast::http;

OipModel OipModelOf(const ModelSignature& signature) {
  OipModel m;
  m.name = signature.model_name;
  m.input_names = signature.input_names;
  m.input_shapes = signature.input_shapes;
  m.output_names = signature.output_names;
  m.output_shapes = signature.output_shapes;
  return m;
}

OipModel OipModelNamed(const ModelSignature& signature, const std::string& name, std::string* scenario) {
  scenario->clear();
  for (const ModelSignature& part : signature.models)
    if (part.model_name == name && name != signature.model_name) {
      *scenario = name;
      return OipModelOf(part);
    }
  return OipModelOf(signature);
}

std::string OipNotReady(const Gateway& gateway) {
  if (gateway.AllWorkersUp()) return "";
  return "a worker of plan " + gateway.Served().plan_id + " is down";
}

bool IsOipHealthProbe(std::string_view target) {
  if (!IsOipTarget(target)) return false;
  const OipRoute::Kind kind = ParseOipRoute(target).kind;
  return kind == OipRoute::Kind::kServerLive || kind == OipRoute::Kind::kServerReady;
}

http::response<http::string_body> HandleOipRequest(Gateway& gateway, const HttpRequest& request) {
  http::response<http::string_body> res{http::status::ok, request.version()};
  res.keep_alive(request.keep_alive());
  auto reply = [&](int code, const char* type, std::string body) {
    res.result(static_cast<http::status>(code));
    if (type) res.set(http::field::content_type, type);
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
  };
  auto error = [&](int code, const std::string& message) {
    return reply(code, "application/json", OipErrorJson(message));
  };
  auto failed = [&](const Status& st) { return error(HttpCode(st.code()), st.message()); };
  // Health answers carry no body when true (the protocol's rule) and say why when false.
  auto health = [&](const std::string& not_ready) {
    return not_ready.empty() ? reply(200, nullptr, "") : error(400, "not ready: " + not_ready);
  };

  const std::string_view target(request.target().data(), request.target().size());
  const OipRoute route = ParseOipRoute(target);
  const bool post = route.kind == OipRoute::Kind::kModelInfer;
  if (route.kind != OipRoute::Kind::kUnknown && request.method() != (post ? http::verb::post : http::verb::get)) {
    res.set(http::field::allow, post ? "POST" : "GET");
    return error(405, std::string("use ") + (post ? "POST" : "GET") + " for " + std::string(target));
  }
  std::string scenario;
  const OipModel model = OipModelNamed(gateway.options().signature, route.model, &scenario);
  if (!route.model.empty())
    if (Status st = CheckOipModel(model, route.model, route.version); !st.ok()) return failed(st);
  switch (route.kind) {
    case OipRoute::Kind::kServerLive:
      return reply(200, nullptr, "");
    case OipRoute::Kind::kServerReady:
    case OipRoute::Kind::kModelReady:
      return health(OipNotReady(gateway));
    case OipRoute::Kind::kServerMetadata:
      return reply(200, "application/json", OipServerMetadataJson());
    case OipRoute::Kind::kModelMetadata:
      return reply(200, "application/json", OipModelMetadataJson(model));
    case OipRoute::Kind::kModelInfer:
      break;
    case OipRoute::Kind::kUnknown:
      return error(404, "no such v2 endpoint " + std::string(target) +
                            " (GET /v2, /v2/health/live, /v2/health/ready, /v2/models/" + model.name +
                            "[/ready]; POST /v2/models/" + model.name + "/infer)");
  }

  const auto header_length = request["Inference-Header-Content-Length"];
  auto parsed =
      ParseOipInferRequest(request.body(), std::string_view(header_length.data(), header_length.size()), model);
  if (!parsed.ok()) return failed(parsed.status());
  auto inputs = OipModelInputs(&*parsed, model);
  if (!inputs.ok()) return failed(inputs.status());
  auto choice = OipChooseOutputs(*parsed, model);
  if (!choice.ok()) return failed(choice.status());
  auto result = gateway.Infer(std::move(*inputs), 0, 0, scenario);
  if (!result.ok()) return failed(result.status());
  OipInferAnswer answer = RenderOipInferAnswer(model, parsed->id, *choice, result->outputs);
  if (!answer.binary) return reply(200, "application/json", std::move(answer.body));
  res.set("Inference-Header-Content-Length", std::to_string(answer.json_bytes));
  return reply(200, "application/octet-stream", std::move(answer.body));
}

}  // namespace tessera
