// Issue 14 item 4, rejoin, on real gRPC servers on 127.0.0.1 (worker services
// and gateways in this process): a worker keeps the plan a deploy names
// (ProgramChunk.keep_plan_id) beside the new one, so the old plan answers
// until the gateway has swapped and retires it; a gateway takes a worker of
// its cluster back by the rule of GatewayOptions::propose and backs off when
// the attempt fails. The model is darknet yolov2-tiny (seeded weights) at
// 64x64. (Real processes, a kill and a restart: integration.gateway_rejoin.)
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "daemon/cluster/gateway.h"
#include "daemon/cluster/gateway_plan.h"
#include "daemon/cluster/worker.h"
#include "daemon/cluster/worker_tensor.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/import/model_import.h"
#include "tests/unit/daemon/cluster/cluster_test_support.h"
#include "transport/tls/cluster_ca.h"

using namespace tessera;

namespace {

constexpr const char* kModel = "/usr/share/darknet/cfg/yolov2-tiny.cfg";

struct InProcessWorker {
  std::unique_ptr<WorkerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::unique_ptr<InProcessWorker> StartWorker(const std::string& name) {
  auto w = std::make_unique<InProcessWorker>();
  WorkerOptions options;
  options.name = name;
  w->service = std::make_unique<WorkerService>(options);
  auto credentials = ServerCredentialsFor("127.0.0.1:0", options.security);
  REQUIRE(credentials.ok());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", *credentials, &port);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.RegisterService(w->service.get());
  w->server = builder.BuildAndStart();
  REQUIRE(w->server);
  w->address = "127.0.0.1:" + std::to_string(port);
  return w;
}

// The model, its input and reference answer, and `n` fresh workers.
struct Bench {
  Graph graph;
  TensorData input, reference;
  std::vector<std::unique_ptr<InProcessWorker>> workers;
  std::vector<WorkerEndpoint> endpoints;
  std::filesystem::path scratch;

  explicit Bench(int n) {
    ImportOptions io;
    io.input_shapes[""] = {1, 3, 64, 64};
    auto g = ImportModel(kModel, io);
    REQUIRE(g.ok());
    graph = std::move(*g);
    input = SeededInput({1, 3, 64, 64}, 14);
    auto executor = Executor::Create(graph, ExecutorOptions{});
    REQUIRE(executor.ok());
    std::vector<TensorData> outputs;
    REQUIRE((*executor)->Run({input}, &outputs).ok());
    reference = outputs.at(0);
    for (int i = 0; i < n; ++i) {
      workers.push_back(StartWorker("w" + std::to_string(i)));
      endpoints.push_back({"w" + std::to_string(i), workers.back()->address});
    }
    scratch = std::filesystem::temp_directory_path() / ("tessera-rejoin-test-" + std::to_string(::getpid()));
  }
  ~Bench() {
    for (auto& w : workers) w->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  // A plan for `on` (the first k workers); `tag` makes its plan id its own.
  ServedPlan Plan(size_t k, const std::string& tag) {
    ServePlanOptions so;
    so.work_dir = (scratch / tag).string();
    so.model_fingerprint = tag;
    auto served = PrepareLoopbackPlan(graph, std::vector<WorkerEndpoint>(endpoints.begin(), endpoints.begin() + k), so);
    INFO(served.status().ToString());
    REQUIRE(served.ok());
    return std::move(*served);
  }
  Status Deploy(const ServedPlan& plan, const std::string& keep_plan_id = "") {
    DeployOptions deploy;
    deploy.keep_plan_id = keep_plan_id;
    auto program = [&](int d) -> Result<DeviceProgram> { return plan.programs.at(d); };
    return DeployProgramsOneByOne(program, plan.plan_id, plan.plan.source, plan.workers, TransportSecurity{}, deploy)
        .status();
  }
  GatewayOptions Options(const ServedPlan& plan) {
    GatewayOptions o;
    o.served = ServedClusterOf(plan);
    o.signature = ModelSignature::Of(graph);
    o.health_interval = std::chrono::milliseconds(100);
    return o;
  }
  // One request through `gateway`, checked against the reference.
  Status InferAndCheck(Gateway& gateway) {
    auto r = gateway.Infer({input}, 0, UnixMillisNow() + 20000);
    if (!r.ok()) return r.status();
    if (MaxRelDiff(r->outputs.at(0), reference) > 1e-5) return Status::Internal("wrong answer");
    return Status::OK();
  }
};

proto::HealthReply Health(const std::string& address, const std::string& plan_id) {
  auto stub = WorkerStub(address);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  proto::HealthRequest req;
  req.set_plan_id(plan_id);
  proto::HealthReply reply;
  REQUIRE(stub->Health(&ctx, req, &reply).ok());
  return reply;
}

grpc::Status Retire(const std::string& address, const std::string& plan_id, proto::RetireReply* reply,
                    const TransportSecurity& security = {}) {
  auto channel = OpenChannel(address, security);
  REQUIRE(channel.ok());
  auto stub = proto::Worker::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  proto::RetireRequest req;
  req.set_plan_id(plan_id);
  return stub->Retire(&ctx, req, reply);
}

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace

TEST_CASE("rejoin: a worker keeps the plan a deploy names beside the new one until it is retired", "[rejoin]") {
  Bench b(2);
  const ServedPlan a = b.Plan(2, "plan-a"), next = b.Plan(2, "plan-b");
  REQUIRE(a.plan_id != next.plan_id);
  REQUIRE(b.Deploy(a).ok());
  auto old_gateway = Gateway::Create(b.Options(a));
  REQUIRE(old_gateway.ok());
  REQUIRE(b.InferAndCheck(**old_gateway).ok());

  // Requests on plan a run back to back while plan b is deployed (keeping
  // a): every one is answered, and correctly.
  std::atomic<bool> deploying{true};
  std::atomic<int> answered{0}, failed{0};
  std::mutex mu;
  std::string first_error;
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c)
    clients.emplace_back([&] {
      while (deploying) {
        const Status st = b.InferAndCheck(**old_gateway);
        (st.ok() ? answered : failed)++;
        std::lock_guard<std::mutex> lock(mu);
        if (!st.ok() && first_error.empty()) first_error = st.ToString();
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const Status deployed = b.Deploy(next, a.plan_id);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  deploying = false;
  for (auto& t : clients) t.join();
  INFO(deployed.ToString() << "; " << first_error);
  REQUIRE(deployed.ok());
  CHECK(answered > 0);
  CHECK(failed == 0);

  for (const auto& w : b.endpoints) {
    const proto::HealthReply h = Health(w.address, a.plan_id);
    CHECK(h.serving());
    CHECK(h.plan_id() == next.plan_id);
    CHECK(h.kept_plan_id() == a.plan_id);
    CHECK(Health(w.address, next.plan_id).serving());
  }
  auto new_gateway = Gateway::Create(b.Options(next));
  REQUIRE(new_gateway.ok());
  CHECK(b.InferAndCheck(**new_gateway).ok());
  CHECK(b.InferAndCheck(**old_gateway).ok());

  // The current plan is never retired; the kept one is, once.
  proto::RetireReply reply;
  grpc::Status st = Retire(b.endpoints[0].address, next.plan_id, &reply);
  CHECK(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(st.error_message(), Catch::Contains("current program"));
  for (const auto& w : b.endpoints) {
    reply.Clear();
    REQUIRE(Retire(w.address, a.plan_id, &reply).ok());
    CHECK(reply.released());
    CHECK(reply.plan_id() == next.plan_id);
    reply.Clear();
    REQUIRE(Retire(w.address, a.plan_id, &reply).ok());
    CHECK_FALSE(reply.released());
    const proto::HealthReply h = Health(w.address, a.plan_id);
    CHECK_FALSE(h.serving());
    CHECK(h.kept_plan_id().empty());
  }
  const Status gone = b.InferAndCheck(**old_gateway);
  CHECK(gone.code() == StatusCode::kFailedPrecondition);
  CHECK(b.InferAndCheck(**new_gateway).ok());
}

TEST_CASE("rejoin: without keep_plan_id a new plan replaces the old one", "[rejoin]") {
  Bench b(2);
  const ServedPlan a = b.Plan(2, "plan-a"), next = b.Plan(2, "plan-b"), third = b.Plan(2, "plan-c");
  REQUIRE(b.Deploy(a).ok());
  REQUIRE(b.Deploy(next).ok());
  for (const auto& w : b.endpoints) {
    CHECK_FALSE(Health(w.address, a.plan_id).serving());
    CHECK(Health(w.address, a.plan_id).kept_plan_id().empty());
  }
  // At most two programs: a third plan keeps the one named, drops the other.
  REQUIRE(b.Deploy(a, next.plan_id).ok());
  REQUIRE(b.Deploy(third, next.plan_id).ok());
  for (const auto& w : b.endpoints) {
    CHECK(Health(w.address, third.plan_id).serving());
    CHECK(Health(w.address, next.plan_id).serving());
    CHECK_FALSE(Health(w.address, a.plan_id).serving());
  }
}

TEST_CASE("rejoin: a worker outside the plan is taken back when the plan over it predicts less", "[rejoin]") {
  Bench b(2);
  const ServedPlan one = b.Plan(1, "one"), two = b.Plan(2, "two");
  REQUIRE(one.predicted_cost > 0);
  REQUIRE(two.predicted_cost > 0);
  REQUIRE(two.predicted_cost < one.predicted_cost);  // memory: the footprint shrinks with a second worker
  REQUIRE(b.Deploy(one).ok());
  GatewayOptions o = b.Options(one);
  o.cluster_workers = b.endpoints;
  std::atomic<int> proposals{0};
  o.propose = [&]() -> Result<PlanProposal> {
    ++proposals;
    PlanProposal p;
    p.cluster = ServedClusterOf(two);
    p.deploy = [&](const std::string& keep) { return b.Deploy(two, keep); };
    return p;
  };
  auto gateway = Gateway::Create(o);
  REQUIRE(gateway.ok());
  REQUIRE(WaitFor([&] { return (*gateway)->Served().workers.size() == 2; }, std::chrono::seconds(10)));
  CHECK((*gateway)->Served().plan_id == two.plan_id);
  CHECK((*gateway)->replans("rejoin") == 1);
  CHECK(proposals == 1);
  CHECK(b.InferAndCheck(**gateway).ok());
  CHECK_THAT((*gateway)->MetricsText(), Catch::Contains("tessera_gateway_replans_total{reason=\"rejoin\"} 1") &&
                                            Catch::Contains("tessera_gateway_plan_workers 2"));
  CHECK_THAT((*gateway)->DescribePlan(), Catch::Contains("on 2 workers: w0, w1"));
  // Once no request runs on it, the old plan is retired on w0.
  CHECK(WaitFor([&] { return Health(b.endpoints[0].address, "").kept_plan_id().empty(); }, std::chrono::seconds(5)));
}

TEST_CASE("rejoin: a plan that predicts more is declined and not asked for again", "[rejoin]") {
  Bench b(2);
  const ServedPlan one = b.Plan(1, "one"), two = b.Plan(2, "two");
  REQUIRE(b.Deploy(one).ok());
  GatewayOptions o = b.Options(one);
  o.cluster_workers = b.endpoints;
  std::atomic<int> proposals{0}, deploys{0};
  o.propose = [&]() -> Result<PlanProposal> {
    ++proposals;
    PlanProposal p;
    p.cluster = ServedClusterOf(two);
    p.cluster.predicted_cost = one.predicted_cost * 2;  // worse by the objective
    p.deploy = [&](const std::string&) {
      ++deploys;
      return Status::OK();
    };
    return p;
  };
  auto gateway = Gateway::Create(o);
  REQUIRE(gateway.ok());
  REQUIRE(WaitFor([&] { return proposals > 0; }, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // 8 more health rounds
  CHECK(proposals == 1);
  CHECK(deploys == 0);
  CHECK((*gateway)->Served().plan_id == one.plan_id);
  CHECK((*gateway)->replans("rejoin") == 0);
  CHECK(b.InferAndCheck(**gateway).ok());
}

TEST_CASE("rejoin: a failed deploy keeps the old plan serving and is retried after a growing backoff", "[rejoin]") {
  Bench b(2);
  const ServedPlan one = b.Plan(1, "one"), two = b.Plan(2, "two");
  REQUIRE(b.Deploy(one).ok());
  GatewayOptions o = b.Options(one);
  o.cluster_workers = b.endpoints;
  o.rejoin_backoff = std::chrono::milliseconds(200);
  std::mutex mu;
  std::vector<std::chrono::steady_clock::time_point> attempts;
  o.propose = [&]() -> Result<PlanProposal> {
    PlanProposal p;
    p.cluster = ServedClusterOf(two);
    p.deploy = [&](const std::string& keep) {
      std::lock_guard<std::mutex> lock(mu);
      attempts.push_back(std::chrono::steady_clock::now());
      // The worker "dies again" during the first two deploys.
      if (attempts.size() <= 2) return Status::Unavailable("worker w1 went away during the deploy");
      return b.Deploy(two, keep);
    };
    return p;
  };
  auto gateway = Gateway::Create(o);
  REQUIRE(gateway.ok());
  REQUIRE(WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return attempts.size() >= 1;
      },
      std::chrono::seconds(5)));
  CHECK(b.InferAndCheck(**gateway).ok());  // still served by the old plan
  REQUIRE(WaitFor([&] { return (*gateway)->Served().workers.size() == 2; }, std::chrono::seconds(10)));
  CHECK((*gateway)->replan_failures("rejoin") == 2);
  CHECK((*gateway)->replans("rejoin") == 1);
  CHECK_THAT((*gateway)->MetricsText(), Catch::Contains("tessera_gateway_replan_failures_total{reason=\"rejoin\"} 2"));
  {
    std::lock_guard<std::mutex> lock(mu);
    REQUIRE(attempts.size() == 3);
    CHECK(attempts[1] - attempts[0] >= std::chrono::milliseconds(200));
    CHECK(attempts[2] - attempts[1] >= std::chrono::milliseconds(400));  // doubled
  }
  CHECK(b.InferAndCheck(**gateway).ok());
}

TEST_CASE("rejoin: with TLS only who may start the kept plan's requests may retire it", "[rejoin][tls]") {
  namespace fs = std::filesystem;
  const fs::path pki = fs::temp_directory_path() / ("tessera-rejoin-pki-" + std::to_string(::getpid()));
  fs::remove_all(pki);
  CaOptions ca;
  ca.dir = pki.string();
  REQUIRE(CreateClusterCa(ca).ok());
  for (const char* name : {"w0", "w1", "deploy", "gateway", "mallory"}) {
    IssueOptions io;
    io.dir = pki.string();
    io.name = name;
    REQUIRE(IssueDeviceCertificate(io).ok());
  }
  auto identity = [&](const std::string& name) {
    auto security = MakeTransportSecurity(pki.string(), name, false);
    REQUIRE(security.ok());
    return *security;
  };
  TwoWorkerClusterOptions o;
  o.input_shape = {1, 3, 64, 64};
  o.worker_args = [&pki](const std::string&) { return std::vector<std::string>{"--tls-dir", pki.string()}; };
  o.deploy_security = identity("deploy");
  o.gateway_security = identity("gateway");
  o.run_callers = {"gateway"};
  TwoWorkerCluster c("rejoin-tls", o);
  c.InferAndCheck();

  // The same plan under another id, pushed by the gateway keeping the served one.
  ServePlanOptions so;
  so.work_dir = (c.scratch / "plan-b").string();
  so.model_fingerprint = "plan-b";
  so.security = o.gateway_security;
  auto next = PrepareLoopbackPlan(c.graph, c.served.workers, so);
  REQUIRE(next.ok());
  DeployOptions deploy;
  deploy.keep_plan_id = c.served.plan_id;
  auto program = [&](int d) -> Result<DeviceProgram> { return next->programs.at(d); };
  const Status deployed =
      DeployProgramsOneByOne(program, next->plan_id, next->plan.source, next->workers, o.gateway_security, deploy)
          .status();
  INFO(deployed.ToString());
  REQUIRE(deployed.ok());
  c.InferAndCheck();  // the kept plan still answers

  proto::RetireReply reply;
  const grpc::Status refused = Retire(c.workers[0]->address, c.served.plan_id, &reply, identity("mallory"));
  CHECK(refused.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(refused.error_message(), Catch::Contains("mallory"));
  c.InferAndCheck();
  for (auto& w : c.workers) {
    reply.Clear();
    const grpc::Status st = Retire(w->address, c.served.plan_id, &reply, identity("gateway"));
    INFO(st.error_message());
    REQUIRE(st.ok());
    CHECK(reply.released());
  }
  auto gone = c.gateway->Infer({c.input}, 0, 0);
  CHECK(gone.status().code() == StatusCode::kFailedPrecondition);
  fs::remove_all(pki);
}
