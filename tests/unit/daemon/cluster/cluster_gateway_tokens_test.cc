// Issue 14 item 2 over real gRPC: a gateway with bearer tokens (over two
// real worker processes) answers Gateway.Infer and Gateway.Status only to a
// call whose `authorization` metadata carries one of them; the token file's
// rules. HTTP and `tessera infer`: tests/integration/gateway_tokens.sh.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "daemon/cluster/gateway_tokens.h"
#include "daemon/cluster/worker_tensor.h"
#include "tests/unit/daemon/cluster/cluster_test_support.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

fs::path WriteTokenFile(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::ofstream(p) << text;
  return p;
}

}  // namespace

TEST_CASE("gateway tokens: one per line, comments and blanks ignored, an empty or unreadable file is refused",
          "[gateway][tokens]") {
  const fs::path good = WriteTokenFile("tokens-good", "# ops\n\n  alpha \r\nbeta\n");
  auto tokens = GatewayTokens::Load(good.string());
  REQUIRE(tokens.ok());
  CHECK(tokens->size() == 2);
  CHECK(tokens->Accepts("Bearer alpha"));
  CHECK(tokens->Accepts("bearer beta"));
  CHECK(tokens->Accepts("  BEARER   alpha  "));
  CHECK_FALSE(tokens->Accepts("Bearer alph"));
  CHECK_FALSE(tokens->Accepts("Bearer alphaa"));
  CHECK_FALSE(tokens->Accepts("Bearer "));
  CHECK_FALSE(tokens->Accepts("alpha"));
  CHECK_FALSE(tokens->Accepts("Basic alpha"));
  CHECK_FALSE(tokens->Accepts(""));
  auto first = GatewayTokens::FirstToken(good.string());
  REQUIRE(first.ok());
  CHECK(*first == "alpha");

  const fs::path empty = WriteTokenFile("tokens-empty", "# nothing\n\n   \n");
  auto none = GatewayTokens::Load(empty.string());
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::Contains(empty.string()) && Catch::Contains("no token"));
  auto missing = GatewayTokens::Load("/nonexistent/tokens");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("/nonexistent/tokens") && Catch::Contains("cannot be read"));
  const fs::path spaced = WriteTokenFile("tokens-spaced", "two words\n");
  auto bad = GatewayTokens::Load(spaced.string());
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("line 1"));
  for (const fs::path& p : {good, empty, spaced}) fs::remove(p);
}

TEST_CASE("gateway: gRPC Infer and Status need the authorization metadata of a token (issue 14)",
          "[cluster][gateway][tokens]") {
  TwoWorkerClusterOptions o;
  o.input_shape = {1, 3, 96, 96};
  TwoWorkerCluster c("gateway-tokens", o);
  const fs::path file = WriteTokenFile("tokens-grpc", "right-token\n");
  auto tokens = GatewayTokens::Load(file.string());
  REQUIRE(tokens.ok());
  fs::remove(file);
  GatewayOptions go = c.gateway->options();
  go.served = c.gateway->Served();
  go.tokens = std::make_shared<const GatewayTokens>(std::move(*tokens));
  auto gw = Gateway::Create(go);
  REQUIRE(gw.ok());
  GatewayService service(gw->get());
  std::string bound;
  auto server = StartGatewayServer(&service, "127.0.0.1:0", TransportSecurity{}, &bound);
  REQUIRE(server.ok());
  auto channel = OpenChannel(bound, TransportSecurity{});
  REQUIRE(channel.ok());
  auto stub = proto::Gateway::NewStub(*channel);

  auto call = [&](const char* authorization) {
    std::vector<grpc::Status> out;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      if (authorization) ctx.AddMetadata("authorization", authorization);
      proto::InferRequest req;
      *req.add_inputs() = ToTensorMsg(c.input);
      proto::InferReply reply;
      out.push_back(stub->Infer(&ctx, req, &reply));
      if (out.back().ok()) {
        auto t = FromTensorMsg(reply.outputs(0), "output");
        REQUIRE(t.ok());
        CHECK(MaxRelDiff(*t, c.reference) <= 1e-5);
      }
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      if (authorization) ctx.AddMetadata("authorization", authorization);
      proto::GatewayStatusReply reply;
      out.push_back(stub->Status(&ctx, proto::GatewayStatusRequest(), &reply));
      if (out.back().ok()) CHECK_FALSE(reply.metrics_text().empty());
    }
    return out;
  };
  for (const char* refused : {static_cast<const char*>(nullptr), "Bearer wrong-token", "right-token", "Bearer right"}) {
    for (const grpc::Status& st : call(refused)) {
      INFO((refused ? refused : "(none)") << ": " << st.error_message());
      CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      CHECK_THAT(st.error_message(), Catch::Contains("--token-file") && !Catch::Contains("wrong-token"));
    }
  }
  for (const grpc::Status& st : call("Bearer right-token")) {
    INFO(st.error_message());
    CHECK(st.ok());
  }
  CHECK_THAT((*gw)->MetricsText(), Catch::Contains("tessera_gateway_unauthenticated_total 8"));
  (*server)->Shutdown();
}
