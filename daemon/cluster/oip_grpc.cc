#include "daemon/cluster/oip_grpc.h"

#include "daemon/cluster/oip_codec.h"
#include "daemon/cluster/oip_http.h"

namespace tessera {

namespace {

void FillTensorMetadata(const std::string& name, const Shape& shape,
                        inference::ModelMetadataResponse::TensorMetadata* t) {
  t->set_name(name);
  t->set_datatype(kOipFp32);
  for (int64_t d : shape) t->add_shape(d);
}

// Elements of `c` in any list other than fp32_contents.
int OtherContents(const inference::InferTensorContents& c) {
  return c.bool_contents_size() + c.int_contents_size() + c.int64_contents_size() + c.uint_contents_size() +
         c.uint64_contents_size() + c.fp64_contents_size() + c.bytes_contents_size();
}

// The request's inputs and outputs in the codec's terms (oip_codec.h); byte
// views point into `request`.
Result<OipInferRequest> FromModelInferRequest(const inference::ModelInferRequest& request) {
  OipInferRequest r;
  r.id = request.id();
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size())
    return Status::InvalidArgument("raw_input_contents has " + std::to_string(request.raw_input_contents_size()) +
                                   " entries for " + std::to_string(request.inputs_size()) +
                                   " inputs (one per input, in the order of inputs)");
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& in = request.inputs(i);
    OipTensor t;
    t.name = in.name();
    t.datatype = in.datatype();
    t.shape.emplace(in.shape().begin(), in.shape().end());
    const auto& c = in.contents();
    const int given = c.fp32_contents_size() + OtherContents(c);
    if (raw) {
      if (given > 0)
        return Status::InvalidArgument("input '" + t.name +
                                       "' has contents although the request uses raw_input_contents (one or the "
                                       "other for all inputs)");
      const std::string& bytes = request.raw_input_contents(i);
      t.bytes = std::string_view(bytes.data(), bytes.size());
    } else if (OtherContents(c) > 0 && t.datatype == kOipFp32) {
      return Status::InvalidArgument("input '" + t.name + "' is FP32 but its elements are not in fp32_contents");
    } else if (c.fp32_contents_size() > 0) {
      t.values.emplace(c.fp32_contents().begin(), c.fp32_contents().end());
    }
    r.inputs.push_back(std::move(t));
  }
  for (const auto& out : request.outputs()) r.outputs.push_back({out.name(), std::nullopt});
  return r;
}

std::string_view AuthorizationOf(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  return it == metadata.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
}

}  // namespace

Status OipService::Allow(const grpc::ServerContext& context, const char* method, bool probe) {
  if (probe && !gateway_->options().protect_metrics) return Status::OK();
  return gateway_->Authorize(AuthorizationOf(context), std::string("GRPCInferenceService.") + method);
}

grpc::Status OipService::ServerLive(grpc::ServerContext* context, const inference::ServerLiveRequest*,
                                    inference::ServerLiveResponse* reply) {
  if (Status st = Allow(*context, "ServerLive", /*probe=*/true); !st.ok()) return ToGrpcStatus(st);
  reply->set_live(true);
  return grpc::Status::OK;
}

grpc::Status OipService::ServerReady(grpc::ServerContext* context, const inference::ServerReadyRequest*,
                                     inference::ServerReadyResponse* reply) {
  if (Status st = Allow(*context, "ServerReady", /*probe=*/true); !st.ok()) return ToGrpcStatus(st);
  reply->set_ready(OipNotReady(*gateway_).empty());
  return grpc::Status::OK;
}

grpc::Status OipService::ModelReady(grpc::ServerContext* context, const inference::ModelReadyRequest* request,
                                    inference::ModelReadyResponse* reply) {
  if (Status st = Allow(*context, "ModelReady", /*probe=*/false); !st.ok()) return ToGrpcStatus(st);
  std::string scenario;
  const OipModel model = OipModelNamed(gateway_->options().signature, request->name(), &scenario);
  if (Status st = CheckOipModel(model, request->name(), request->version()); !st.ok()) return ToGrpcStatus(st);
  reply->set_ready(OipNotReady(*gateway_).empty());
  return grpc::Status::OK;
}

grpc::Status OipService::ServerMetadata(grpc::ServerContext* context, const inference::ServerMetadataRequest*,
                                        inference::ServerMetadataResponse* reply) {
  if (Status st = Allow(*context, "ServerMetadata", /*probe=*/false); !st.ok()) return ToGrpcStatus(st);
  const OipServerMetadata server = OipServer();
  reply->set_name(server.name);
  reply->set_version(server.version);
  for (const std::string& e : server.extensions) reply->add_extensions(e);
  return grpc::Status::OK;
}

grpc::Status OipService::ModelMetadata(grpc::ServerContext* context, const inference::ModelMetadataRequest* request,
                                       inference::ModelMetadataResponse* reply) {
  if (Status st = Allow(*context, "ModelMetadata", /*probe=*/false); !st.ok()) return ToGrpcStatus(st);
  std::string scenario;
  const OipModel model = OipModelNamed(gateway_->options().signature, request->name(), &scenario);
  if (Status st = CheckOipModel(model, request->name(), request->version()); !st.ok()) return ToGrpcStatus(st);
  reply->set_name(model.name);
  reply->add_versions(std::string(kOipModelVersion));
  reply->set_platform(kOipPlatform);
  for (size_t i = 0; i < model.input_names.size(); ++i)
    FillTensorMetadata(model.input_names[i], model.input_shapes[i], reply->add_inputs());
  for (size_t o = 0; o < model.output_names.size(); ++o)
    FillTensorMetadata(model.output_names[o], model.output_shapes[o], reply->add_outputs());
  return grpc::Status::OK;
}

grpc::Status OipService::ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* request,
                                    inference::ModelInferResponse* reply) {
  if (Status st = Allow(*context, "ModelInfer", /*probe=*/false); !st.ok()) return ToGrpcStatus(st);
  std::string scenario;
  const OipModel model = OipModelNamed(gateway_->options().signature, request->model_name(), &scenario);
  if (Status st = CheckOipModel(model, request->model_name(), request->model_version()); !st.ok())
    return ToGrpcStatus(st);
  auto parsed = FromModelInferRequest(*request);
  if (!parsed.ok()) return ToGrpcStatus(parsed.status());
  auto inputs = OipModelInputs(&*parsed, model);
  if (!inputs.ok()) return ToGrpcStatus(inputs.status());
  auto choice = OipChooseOutputs(*parsed, model);
  if (!choice.ok()) return ToGrpcStatus(choice.status());
  int64_t deadline = 0;
  if (context->deadline() != std::chrono::system_clock::time_point::max())
    deadline = std::chrono::duration_cast<std::chrono::milliseconds>(context->deadline().time_since_epoch()).count();
  auto result = gateway_->Infer(std::move(*inputs), 0, deadline, scenario);
  if (!result.ok()) return ToGrpcStatus(result.status());
  reply->set_model_name(model.name);
  reply->set_model_version(kOipModelVersion);
  reply->set_id(request->id());
  for (const OipOutputChoice& c : *choice) {
    const TensorData& t = result->outputs[c.output];
    auto* out = reply->add_outputs();
    out->set_name(model.output_names[c.output]);
    out->set_datatype(kOipFp32);
    for (int64_t d : t.shape) out->add_shape(d);
    reply->add_raw_output_contents(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
  }
  return grpc::Status::OK;
}

}  // namespace tessera
