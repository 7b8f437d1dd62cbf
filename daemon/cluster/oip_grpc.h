// The Open Inference Protocol v2 gRPC service (`inference.GRPCInferenceService`,
// proto/oip.proto; issue 14 item 3), served on the gateway's gRPC port beside
// its own Gateway service (StartGatewayServer's `also`).
//
// ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata and
// ModelInfer. ModelInfer takes FP32 inputs as `contents.fp32_contents` or
// as `raw_input_contents` (little-endian bytes, one entry per input) and
// answers with `raw_output_contents`, as Triton does. The requests are
// checked like the REST ones (oip_codec.h): an unknown model or version is
// NOT_FOUND, a wrong input (name, datatype, shape, size) INVALID_ARGUMENT
// naming it; what happens on the cluster keeps the gateway's codes.
//
// Tokens (`--token-file`): every call needs `authorization: Bearer TOKEN`
// metadata (UNAUTHENTICATED otherwise, counted like Gateway.Infer's) except
// ServerLive and ServerReady, the probes, unless --protect-metrics.
#pragma once

#include "daemon/cluster/gateway.h"
#include "proto/oip.grpc.pb.h"

namespace tessera {

class OipService final : public inference::GRPCInferenceService::Service {
 public:
  // `gateway` is borrowed and outlives the service.
  explicit OipService(Gateway* gateway) : gateway_(gateway) {}

  grpc::Status ServerLive(grpc::ServerContext* context, const inference::ServerLiveRequest* request,
                          inference::ServerLiveResponse* reply) override;
  grpc::Status ServerReady(grpc::ServerContext* context, const inference::ServerReadyRequest* request,
                           inference::ServerReadyResponse* reply) override;
  grpc::Status ModelReady(grpc::ServerContext* context, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* reply) override;
  grpc::Status ServerMetadata(grpc::ServerContext* context, const inference::ServerMetadataRequest* request,
                              inference::ServerMetadataResponse* reply) override;
  grpc::Status ModelMetadata(grpc::ServerContext* context, const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* reply) override;
  grpc::Status ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* reply) override;

 private:
  // OK when the call may run: no tokens, a probe left open, or a token in
  // the call's metadata. `method` names the RPC in the refusal.
  Status Allow(const grpc::ServerContext& context, const char* method, bool probe);

  Gateway* const gateway_;
};

}  // namespace tessera
