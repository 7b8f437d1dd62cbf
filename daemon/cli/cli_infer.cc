// `tessera infer --gateway ADDR --input x.npy [--output y.npy]`: the client
// of Gateway.Infer.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/cli/cli_tls_options.h"
#include "daemon/runtime/npy.h"
#include "daemon/cluster/gateway_tokens.h"
#include "daemon/cluster/worker_tensor.h"
#include "proto/services.grpc.pb.h"
#include "transport/grpc/grpc_channel.h"

namespace tessera {

void RegisterInferCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("infer", "Send one inference request to a gateway");
  struct Args {
    std::string gateway = "127.0.0.1:7000";
    std::vector<std::string> inputs, outputs;
    int64_t deadline_ms = 60000;
    TlsOptions tls;
    std::string token_file;
    std::string model;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--gateway", a->gateway, "Gateway gRPC address")->capture_default_str();
  cmd->add_option("--input", a->inputs, "Input .npy, one per model input, in order")->required();
  cmd->add_option("--output", a->outputs, "Write the outputs here (.npy), one per model output");
  cmd->add_option("--model-name", a->model,
                  "One model of a gateway serving merged models (--with-model): send its inputs, get its outputs; "
                  "only its layers run");
  cmd->add_option("--deadline-ms", a->deadline_ms, "Deadline of the request")->capture_default_str();
  cmd->add_option("--token-file", a->token_file,
                  "Send the first token of FILE as 'authorization: Bearer TOKEN' (the gateway's --token-file)");
  a->tls.AddTo(*cmd, "infer", "Allow plaintext gRPC to a non-loopback gateway");
  cmd->callback([a] {
    proto::InferRequest req;
    for (const auto& path : a->inputs) {
      auto t = ReadNpy(path);
      if (!t.ok()) throw CLI::RuntimeError(ReportError("infer", t.status()));
      *req.add_inputs() = ToTensorMsg(*t);
    }
    req.set_deadline_unix_ms(UnixMillisNow() + a->deadline_ms);
    req.set_model(a->model);
    auto security = a->tls.Resolve("infer");
    if (!security.ok()) throw CLI::RuntimeError(ReportError("infer", security.status()));
    auto channel = OpenChannel(a->gateway, *security);
    if (!channel.ok()) throw CLI::RuntimeError(ReportError("infer", channel.status()));
    // A refused TLS handshake says so here, with what to check, instead of
    // a bare UNAVAILABLE from the call.
    const auto connect_within = std::chrono::milliseconds(std::clamp<int64_t>(a->deadline_ms, 1, 10000));
    if (Status st = WaitUntilConnected(*channel, a->gateway, *security, connect_within); !st.ok())
      throw CLI::RuntimeError(ReportError("infer", st.WithContext("gateway " + a->gateway)));
    auto stub = proto::Gateway::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineFromUnixMillis(req.deadline_unix_ms()));
    if (!a->token_file.empty()) {
      auto token = GatewayTokens::FirstToken(a->token_file);
      if (!token.ok()) throw CLI::RuntimeError(ReportError("infer", token.status()));
      ctx.AddMetadata("authorization", "Bearer " + *token);
    }
    proto::InferReply reply;
    if (Status st = FromGrpcStatus(stub->Infer(&ctx, req, &reply), "gateway " + a->gateway); !st.ok())
      throw CLI::RuntimeError(ReportError("infer", st));
    if (!a->outputs.empty() && static_cast<int>(a->outputs.size()) != reply.outputs_size())
      throw CLI::RuntimeError(ReportError("infer", Status::InvalidArgument(
          "the model has " + std::to_string(reply.outputs_size()) + " outputs; --output was given " +
          std::to_string(a->outputs.size()) + " time(s)")));
    std::printf("request %llu of plan %s: %d output(s) in %.2f ms\n",
                static_cast<unsigned long long>(reply.request_id()), reply.plan_id().c_str(), reply.outputs_size(),
                reply.seconds() * 1000);
    for (int o = 0; o < reply.outputs_size(); ++o) {
      auto t = FromTensorMsg(reply.outputs(o), "output " + std::to_string(o));
      if (!t.ok()) throw CLI::RuntimeError(ReportError("infer", t.status()));
      std::printf("  output %d: shape %s\n", o, ShapeToString(t->shape).c_str());
      if (o < static_cast<int>(a->outputs.size()))
        if (Status st = WriteNpy(a->outputs[o], *t); !st.ok()) throw CLI::RuntimeError(ReportError("infer", st));
    }
  });
}

}  // namespace tessera
