// Issue 5 failure paths on real gRPC servers on 127.0.0.1 (no mocks): worker
// services and the gateway run in this process, talk over loopback sockets,
// and every refusal must carry the exact status code and a message naming
// what is wrong. The model is darknet yolov2-tiny (seeded weights) at 64x64,
// split over two workers by the default plan.
#include <atomic>
#include <cmath>
#include <filesystem>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <catch2/catch.hpp>

#include "daemon/runtime/executor.h"
#include "daemon/cluster/gateway.h"
#include "tests/unit/daemon/cluster/cluster_test_support.h"
#include "daemon/cluster/gateway_plan.h"
#include "daemon/cluster/http_endpoint.h"
#include "daemon/runtime/npy.h"
#include "daemon/runtime/seeded_input.h"
#include "daemon/cluster/worker.h"
#include "daemon/cluster/worker_tensor.h"
#include "partition/import/model_import.h"
#include "partition/compile/program_codec.h"

using namespace tessera;

namespace {

constexpr const char* kModel = "/usr/share/darknet/cfg/yolov2-tiny.cfg";

struct LoopbackWorker {
  std::unique_ptr<WorkerService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::unique_ptr<LoopbackWorker> StartWorker(const std::string& name) {
  auto w = std::make_unique<LoopbackWorker>();
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
  REQUIRE(port != 0);
  w->address = "127.0.0.1:" + std::to_string(port);
  return w;
}

// Two workers holding the default plan, a gateway over them (gRPC server),
// the model input and the single-device reference output. Built once and
// kept for the whole test binary: it is deliberately never destroyed, so no
// gRPC server is torn down during static destruction.
struct TestCluster {
  Graph graph;
  std::vector<std::unique_ptr<LoopbackWorker>> workers;
  std::vector<WorkerEndpoint> endpoints;
  ServedPlan served;
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<GatewayService> gateway_service;
  std::unique_ptr<grpc::Server> gateway_server;
  std::string gateway_address;
  TensorData input, reference;

  GatewayOptions BaseOptions() const {
    GatewayOptions o;
    o.served = {served.plan_id, served.plan.source, served.workers, {}};
    o.signature = ModelSignature::Of(graph);
    o.health_interval = std::chrono::milliseconds(200);
    return o;
  }
};

TestCluster* SharedCluster() {
  static TestCluster* cluster = [] {
    auto* c = new TestCluster();
    ImportOptions io;
    io.input_shapes[""] = {1, 3, 64, 64};
    auto graph = ImportModel(kModel, io);
    REQUIRE(graph.ok());
    c->graph = std::move(*graph);
    for (int i = 0; i < 2; ++i) {
      c->workers.push_back(StartWorker("w" + std::to_string(i)));
      c->endpoints.push_back({"w" + std::to_string(i), c->workers.back()->address});
    }
    ServePlanOptions so;
    so.work_dir = (std::filesystem::temp_directory_path() /
                   ("tessera-cluster-failures-" + std::to_string(::getpid())))
                      .string();
    auto served = PrepareLoopbackPlan(c->graph, c->endpoints, so);
    std::filesystem::remove_all(so.work_dir);
    REQUIRE(served.ok());
    c->served = std::move(*served);
    REQUIRE(c->served.programs.size() == 2);
    auto deployed = DeployPrograms(c->served.programs, c->served.plan_id, c->served.plan.source, c->served.workers,
                                   TransportSecurity{}, nullptr);
    INFO(deployed.status().ToString());
    REQUIRE(deployed.ok());
    auto gateway = Gateway::Create(c->BaseOptions());
    REQUIRE(gateway.ok());
    c->gateway = std::move(*gateway);
    c->gateway_service = std::make_unique<GatewayService>(c->gateway.get());
    auto server = StartGatewayServer(c->gateway_service.get(), "127.0.0.1:0", TransportSecurity{}, &c->gateway_address);
    REQUIRE(server.ok());
    c->gateway_server = std::move(*server);

    c->input = SeededInput({1, 3, 64, 64}, 11);
    auto executor = Executor::Create(c->graph, ExecutorOptions{});
    REQUIRE(executor.ok());
    std::vector<TensorData> outputs;
    REQUIRE((*executor)->Run({c->input}, &outputs).ok());
    REQUIRE(outputs.size() == 1);
    c->reference = outputs[0];
    return c;
  }();
  return cluster;
}

std::unique_ptr<proto::Gateway::Stub> GatewayStub(const std::string& address) {
  auto channel = OpenChannel(address, TransportSecurity{});
  REQUIRE(channel.ok());
  return proto::Gateway::NewStub(*channel);
}

grpc::Status CallInfer(proto::Gateway::Stub& stub, const proto::InferRequest& request, proto::InferReply* reply,
                       int deadline_ms = 20000) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  return stub.Infer(&ctx, request, reply);
}

proto::InferRequest RequestFor(const TensorData& input) {
  proto::InferRequest r;
  *r.add_inputs() = ToTensorMsg(input);
  return r;
}

// The answer of one Infer reply against the reference (≤ 1e-5 relative).
double ReplyDiff(const proto::InferReply& reply, const TensorData& reference) {
  if (reply.outputs_size() != 1) return INFINITY;
  auto t = FromTensorMsg(reply.outputs(0), "output");
  return t.ok() ? MaxRelDiff(*t, reference) : INFINITY;
}

// Streams `chunks` to LoadProgram and returns the worker's verdict.
grpc::Status LoadChunks(proto::Worker::Stub& stub, const std::vector<proto::ProgramChunk>& chunks) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  proto::LoadProgramReply reply;
  auto writer = stub.LoadProgram(&ctx, &reply);
  for (const auto& c : chunks)
    if (!writer->Write(c)) break;
  writer->WritesDone();
  return writer->Finish();
}

// A minimal HTTP/1.1 POST over a loopback socket; returns (status, body).
std::pair<int, std::string> HttpPost(const std::string& address, const std::string& target, const std::string& body,
                                     const std::string& content_type) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  const auto colon = address.rfind(':');
  socket.connect({asio::ip::make_address(address.substr(0, colon)),
                  static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))});
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, address);
  req.set(http::field::content_type, content_type);
  req.body() = body;
  req.prepare_payload();
  boost::beast::error_code ec;
  http::write(socket, req, ec);  // the server may answer and close before the whole body is read
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res, ec);
  if (ec) return {-1, ec.message()};
  return {static_cast<int>(res.result_int()), res.body()};
}

}  // namespace

TEST_CASE("cluster: the served plan answers like the single-device run", "[cluster]") {
  TestCluster* c = SharedCluster();
  auto stub = GatewayStub(c->gateway_address);
  proto::InferReply reply;
  grpc::Status st = CallInfer(*stub, RequestFor(c->input), &reply);
  INFO(st.error_message());
  REQUIRE(st.ok());
  CHECK(ReplyDiff(reply, c->reference) <= 1e-5);
}

TEST_CASE("cluster: a full gateway queue rejects with RESOURCE_EXHAUSTED and loses nothing", "[cluster]") {
  TestCluster* c = SharedCluster();
  GatewayOptions o = c->BaseOptions();
  o.max_in_flight = 1;
  o.queue_capacity = 1;
  auto gateway = Gateway::Create(o);
  REQUIRE(gateway.ok());
  GatewayService service(gateway->get());
  std::string address;
  auto server = StartGatewayServer(&service, "127.0.0.1:0", TransportSecurity{}, &address);
  REQUIRE(server.ok());

  constexpr int kClients = 10;
  int answered = 0, rejected = 0, other = 0;
  double worst = 0;
  std::vector<std::string> others;
  // Several rounds at most: a round where no two requests overlap proves nothing.
  for (int round = 0; round < 5 && rejected == 0; ++round) {
    std::vector<grpc::Status> status(kClients);
    std::vector<proto::InferReply> replies(kClients);
    std::atomic<int> ready{0};
    std::vector<std::thread> clients;
    std::vector<std::shared_ptr<grpc::Channel>> channels(kClients);
    std::vector<std::string> not_connected(kClients);
    for (int i = 0; i < kClients; ++i) {
      auto channel = OpenChannel(address, TransportSecurity{});
      REQUIRE(channel.ok());
      channels[i] = *channel;
    }
    for (int i = 0; i < kClients; ++i)
      clients.emplace_back([&, i] {
        // The subject is the gateway's queue, not TCP setup: each client is
        // connected before the ten calls start together (gRPC fails a call
        // fast when its channel's first connect attempt fails, which ten
        // simultaneous connects on a loaded 2-core machine occasionally do).
        const Status connected =
            WaitUntilConnected(channels[i], address, TransportSecurity{}, std::chrono::milliseconds(10000));
        if (!connected.ok()) not_connected[i] = connected.ToString();
        auto stub = proto::Gateway::NewStub(channels[i]);
        const proto::InferRequest req = RequestFor(c->input);
        ++ready;
        while (ready < kClients) std::this_thread::yield();
        status[i] = CallInfer(*stub, req, &replies[i]);
      });
    for (auto& t : clients) t.join();
    for (int i = 0; i < kClients; ++i) {
      INFO("client " << i << ": " << not_connected[i]);
      CHECK(not_connected[i].empty());
      if (status[i].ok()) {
        ++answered;
        worst = std::max(worst, ReplyDiff(replies[i], c->reference));
      } else if (status[i].error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        ++rejected;
        CHECK_THAT(status[i].error_message(), Catch::Contains("queue is full"));
      } else {
        ++other;
        others.push_back(std::to_string(status[i].error_code()) + ": " + status[i].error_message());
      }
    }
  }
  std::string other_errors;
  for (const auto& s : others) other_errors += "\n  " + s;
  INFO("answered " << answered << ", rejected " << rejected << ", other " << other << other_errors);
  CHECK(rejected >= 1);
  CHECK(answered >= 1);
  CHECK(other == 0);
  CHECK(worst <= 1e-5);
  // The gateway counted each rejection under its code.
  CHECK_THAT((*gateway)->MetricsText(), Catch::Contains("tessera_requests_total{code=\"ResourceExhausted\"} " +
                                                        std::to_string(rejected)));
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

TEST_CASE("cluster: a run for a plan the worker does not hold is FAILED_PRECONDITION", "[cluster]") {
  TestCluster* c = SharedCluster();
  auto stub = WorkerStub(c->served.workers[c->served.plan.source].address);
  proto::RunRequest req;
  req.set_plan_id("no-such-plan");
  req.set_request_id(77);
  req.set_fan_out(true);
  *req.add_inputs() = ToTensorMsg(c->input);
  req.add_input_values(c->graph.inputs[0]);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  proto::RunReply reply;
  grpc::Status st = stub->Run(&ctx, req, &reply);
  CHECK(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(st.error_message(), Catch::Contains("no-such-plan"));
  CHECK_THAT(st.error_message(), Catch::Contains(c->served.plan_id));

  // A worker with no program at all says so.
  auto empty = StartWorker("empty");
  auto empty_stub = WorkerStub(empty->address);
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  req.set_plan_id(c->served.plan_id);
  st = empty_stub->Run(&ctx2, req, &reply);
  CHECK(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(st.error_message(), Catch::Contains("holds no program"));
  empty->server->Shutdown(std::chrono::system_clock::now());

  // A worker that lost the served plan (here: the gateway is told to serve
  // another one) fails the request fast, naming the worker and both plans.
  GatewayOptions o = c->BaseOptions();
  o.served.plan_id = "retired-plan";
  auto stale = Gateway::Create(o);
  REQUIRE(stale.ok());
  auto r = (*stale)->Infer({c->input}, 0, 0);
  REQUIRE(!r.ok());
  CHECK(r.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(r.status().message(), Catch::Contains("retired-plan") && Catch::Contains(c->served.plan_id) &&
                                       Catch::Contains("worker w"));
}

TEST_CASE("cluster: a request naming a plan the gateway does not serve is INVALID_ARGUMENT", "[cluster]") {
  TestCluster* c = SharedCluster();
  auto gw = GatewayStub(c->gateway_address);
  proto::InferRequest ireq = RequestFor(c->input);
  ireq.set_plan_id("other-plan");
  proto::InferReply ireply;
  grpc::Status st = CallInfer(*gw, ireq, &ireply);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("unknown plan 'other-plan'"));
  ireq.set_plan_id(c->served.plan_id);
  st = CallInfer(*gw, ireq, &ireply);
  REQUIRE(st.ok());
  CHECK(ReplyDiff(ireply, c->reference) <= 1e-5);
}

TEST_CASE("cluster: wrong shape, dtype, size or an oversized input is INVALID_ARGUMENT", "[cluster]") {
  TestCluster* c = SharedCluster();
  auto stub = GatewayStub(c->gateway_address);
  proto::InferReply reply;

  TensorData small = SeededInput({1, 3, 32, 32}, 1);
  grpc::Status st = CallInfer(*stub, RequestFor(small), &reply);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("[1,3,32,32]") && Catch::Contains("[1,3,64,64]"));

  proto::InferRequest req = RequestFor(c->input);
  req.mutable_inputs(0)->set_dtype("float64");
  st = CallInfer(*stub, req, &reply);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("float64"));

  req = RequestFor(c->input);
  req.mutable_inputs(0)->mutable_data()->resize(100);
  st = CallInfer(*stub, req, &reply);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("bytes of data"));

  req = RequestFor(c->input);
  *req.add_inputs() = ToTensorMsg(c->input);
  st = CallInfer(*stub, req, &reply);
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("input(s)"));

  // Oversized: a gateway whose input limit is below one image.
  GatewayOptions o = c->BaseOptions();
  o.max_input_bytes = 1024;
  auto tight = Gateway::Create(o);
  REQUIRE(tight.ok());
  auto r = (*tight)->Infer({c->input}, 0, 0);
  REQUIRE(!r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("over the limit of 1024"));

  // Over HTTP a body over the limit is 413 with the reason (issue 14: was 400).
  HttpEndpointOptions ho;
  ho.listen = "127.0.0.1:0";
  ho.max_body_bytes = 8192;
  auto http = HttpEndpoint::Start(c->gateway.get(), ho);
  REQUIRE(http.ok());
  const std::string address = (*http)->address();
  auto [code, body] = HttpPost(address, "/v1/infer", SerializeNpy(c->input), "application/x-npy");
  CHECK(code == 413);
  CHECK_THAT(body, Catch::Contains("exceeds 8192 bytes"));
  // Far larger than the socket buffers: the client is still sending when the refusal comes.
  std::tie(code, body) = HttpPost(address, "/v1/infer", std::string(8 << 20, 'x'), "application/x-npy");
  CHECK(code == 413);
  CHECK_THAT(body, Catch::Contains("exceeds 8192 bytes"));
  std::tie(code, body) = HttpPost(address, "/v1/infer", "[1,2,3]", "application/json");
  CHECK(code == 400);
  CHECK_THAT(body, Catch::Contains("shape"));
  TensorData wrong = SeededInput({1, 3, 8, 8}, 2);
  std::tie(code, body) = HttpPost(address, "/v1/infer", SerializeNpy(wrong), "application/x-npy");
  CHECK(code == 400);
  CHECK_THAT(body, Catch::Contains("[1,3,8,8]"));
  // The endpoint still answers after refusing.
  TensorData tiny = SeededInput({1, 3, 4, 4}, 3);
  std::tie(code, body) = HttpPost(address, "/v1/infer", SerializeNpy(tiny), "application/x-npy");
  CHECK(code == 400);

  // Nothing wrong reached the cluster: the shared gateway still answers correctly.
  st = CallInfer(*stub, RequestFor(c->input), &reply);
  REQUIRE(st.ok());
  CHECK(ReplyDiff(reply, c->reference) <= 1e-5);
}

TEST_CASE("cluster: malformed program chunks are refused and the worker keeps serving", "[cluster]") {
  TestCluster* c = SharedCluster();
  const int victim = 1 - c->served.plan.source;  // a worker holding the served plan
  auto stub = WorkerStub(c->served.workers[victim].address);
  const std::string program = SerializeProgram(c->served.programs[victim], c->served.plan_id);
  auto header = [&](int64_t total) {
    proto::ProgramChunk h;
    h.set_plan_id(c->served.plan_id);
    h.set_seq(0);
    h.set_device(victim);
    h.set_num_devices(2);
    h.set_source(c->served.plan.source);
    h.set_total_bytes(total);
    for (int d = 0; d < 2; ++d) (*h.mutable_peers())[d] = c->served.workers[d].address;
    return h;
  };
  auto body = [&](int64_t seq, const std::string& data) {
    proto::ProgramChunk ch;
    ch.set_plan_id(c->served.plan_id);
    ch.set_seq(seq);
    ch.set_data(data);
    return ch;
  };
  const std::string half = program.substr(0, program.size() / 2);
  // The load is refused with `code` and a message containing `text`.
  auto refused = [&](const std::vector<proto::ProgramChunk>& chunks, grpc::StatusCode code, const std::string& text) {
    grpc::Status st = LoadChunks(*stub, chunks);
    CHECK(st.error_code() == code);
    CHECK_THAT(st.error_message(), Catch::Contains(text));
  };

  SECTION("chunks out of order") {
    auto h = header(static_cast<int64_t>(program.size()));
    h.set_data(half);
    refused({h, body(2, program.substr(half.size()))}, grpc::StatusCode::INVALID_ARGUMENT, "chunk 2 arrived, expected 1");
  }
  SECTION("no announced size") {
    auto h = header(0);
    h.set_data(program);
    refused({h}, grpc::StatusCode::INVALID_ARGUMENT, "program size 0");
  }
  SECTION("more bytes than announced") {
    auto h = header(static_cast<int64_t>(half.size()));
    h.set_data(program);
    refused({h}, grpc::StatusCode::INVALID_ARGUMENT, "exceed the announced");
  }
  SECTION("a load that stops early") {
    auto h = header(static_cast<int64_t>(program.size()));
    h.set_data(half);
    refused({h}, grpc::StatusCode::DATA_LOSS, "ended after " + std::to_string(half.size()));
  }
  // Under the plan id the worker holds, any other bytes are another program
  // and refused before they are decoded (issue 14); the decoder's own
  // refusals are seen under a plan id it does not hold.
  SECTION("bytes that are not a program, under the plan id held") {
    std::string garbage(program.size(), '\xff');
    auto h = header(static_cast<int64_t>(garbage.size()));
    h.set_data(garbage);
    refused({h}, grpc::StatusCode::ALREADY_EXISTS, "already holds plan " + c->served.plan_id);
  }
  SECTION("bytes that are not a program") {
    std::string garbage(program.size(), '\xff');
    auto h = header(static_cast<int64_t>(garbage.size()));
    h.set_plan_id("another-plan");
    h.set_data(garbage);
    grpc::Status st = LoadChunks(*stub, {h});
    CHECK((st.error_code() == grpc::StatusCode::DATA_LOSS || st.error_code() == grpc::StatusCode::INVALID_ARGUMENT));
    CHECK_THAT(st.error_message(), Catch::Contains("device " + std::to_string(victim)));
  }
  SECTION("a program for another device") {
    const std::string other_plan = SerializeProgram(c->served.programs[victim], "another-plan");
    auto h = header(static_cast<int64_t>(other_plan.size()));
    h.set_plan_id("another-plan");
    h.set_device(1 - victim);
    h.set_data(other_plan);
    refused({h}, grpc::StatusCode::INVALID_ARGUMENT, "for device " + std::to_string(victim));
  }
  SECTION("the served program placed as another device under the plan id held") {
    auto h = header(static_cast<int64_t>(program.size()));
    h.set_device(1 - victim);
    h.set_data(program);
    refused({h}, grpc::StatusCode::ALREADY_EXISTS, "placed among other devices");
  }
  SECTION("an empty load") {
    refused({}, grpc::StatusCode::INVALID_ARGUMENT, "empty program load");
  }

  // Still serving the plan it held, and the cluster answers correctly.
  proto::HealthRequest hreq;
  hreq.set_plan_id(c->served.plan_id);
  proto::HealthReply health;
  grpc::ClientContext hctx;
  hctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  REQUIRE(stub->Health(&hctx, hreq, &health).ok());
  CHECK(health.serving());
  CHECK(health.plan_id() == c->served.plan_id);
  auto gw = GatewayStub(c->gateway_address);
  proto::InferReply reply;
  grpc::Status st = CallInfer(*gw, RequestFor(c->input), &reply);
  INFO(st.error_message());
  REQUIRE(st.ok());
  CHECK(ReplyDiff(reply, c->reference) <= 1e-5);
}

// Issue 15: on a slow gateway link the source's answer to a health probe
// queues behind the requests in flight on that link, so the probe's deadline
// grows by their link time (Gateway::LinkBacklog). Here the source stops
// answering for 1.5 s (SIGSTOP) with a request in flight: with 3 s of link
// time per request the probe waits past the stall and the source stays up;
// with none (the control) the 500 ms probe calls it down. In both the request
// is answered once the source resumes.
TEST_CASE("cluster: a probe of the source waits for the link time of the requests in flight", "[cluster]") {
  for (const double link_s : {3.0, 0.0}) {
    CAPTURE(link_s);
    TwoWorkerClusterOptions options;
    options.input_shape = {1, 3, 160, 160};
    options.request_link_s = link_s;
    TwoWorkerCluster c(link_s > 0 ? "backlog" : "backlog-none", options);
    c.InferAndCheck();  // warm: channels open, the source up
    c.gateway->RefreshWorkerState();
    REQUIRE(c.gateway->AllWorkersUp());
    const pid_t source = c.workers.at(c.served.plan.source)->pid;
    REQUIRE(::kill(source, SIGSTOP) == 0);
    std::thread request([&] {
      auto r = c.gateway->Infer({c.input}, 0, 0);
      INFO(r.status().ToString());
      CHECK(r.ok());
      if (r.ok()) CHECK(MaxRelDiff(r->outputs.at(0), c.reference) <= 1e-5);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the request is in flight
    std::thread resume([source] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      ::kill(source, SIGCONT);
    });
    c.gateway->RefreshWorkerState();  // probes the stopped source
    const bool up = c.gateway->AllWorkersUp();
    resume.join();
    request.join();
    if (link_s > 0)
      CHECK(up);  // answered after the stall, within 0.5 s + 1 x 3 s
    else
      CHECK_FALSE(up);  // 500 ms without an answer: down
  }
}
