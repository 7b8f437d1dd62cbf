// Issue 14 item 6, "Bounded by construction", against real `tessera worker`
// processes on loopback; this test is the hostile peer.
//   * Exchange frames injected for future request ids (guessed from an
//     answer) never change an answer; frames from a device that is no peer,
//     or (TLS) from a certificate that is not the plan's sender, are dropped
//     and counted; a Run from a certificate the plan does not name is refused.
//   * A program is its SHA-256: another program under a loaded plan id is
//     refused and the data dir keeps the first; the same program again is
//     accepted without change; a deploy of other weights gets another plan id.
// $TESSERA_WORKER_BINARY runs the workers of another build (main's fails these).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/cluster/worker_tensor.h"
#include "partition/compile/program_codec.h"
#include "tests/unit/daemon/cluster/cluster_test_support.h"
#include "transport/tls/cluster_ca.h"
#include "transport/tls/content_hash.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

std::string ReadBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The device of `c` that receives something, and its largest message.
struct Target {
  int device = -1, from = -1;
  int64_t message = -1, bytes = 0;
};
Target LargestMessage(const TwoWorkerCluster& c) {
  Target t;
  for (int d = 0; d < 2; ++d) {
    const auto [from, message, bytes] = LargestReceived(c.served.programs[d]);
    if (bytes > t.bytes) t = {d, from, message, bytes};
  }
  REQUIRE(t.device >= 0);
  return t;
}

// Float32 values far from any activation: merged into an answer they show.
std::string GarbagePayload(int64_t bytes) {
  std::string payload(static_cast<size_t>(bytes), '\0');
  const float big = 1e4f;
  for (size_t i = 0; i + 4 <= payload.size(); i += 4) std::memcpy(&payload[i], &big, 4);
  return payload;
}

// A Run of request `id` of c's plan on worker `device`, as the gateway sends it.
grpc::Status RunOn(const TwoWorkerCluster& c, const std::shared_ptr<grpc::Channel>& channel, uint32_t id,
                   bool fan_out, TensorData* output) {
  proto::RunRequest req;
  req.set_plan_id(c.served.plan_id);
  req.set_request_id(id);
  req.set_deadline_unix_ms(UnixMillisNow() + 30000);
  req.set_fan_out(fan_out);
  *req.add_inputs() = ToTensorMsg(c.input);
  req.add_input_values(c.graph.inputs.at(0));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  proto::RunReply reply;
  auto stub = proto::Worker::NewStub(channel);
  grpc::Status st = stub->Run(&ctx, req, &reply);
  for (int k = 0; st.ok() && output && k < reply.outputs_size(); ++k)
    if (reply.output_values(k) == c.graph.outputs.at(0)) {
      auto t = FromTensorMsg(reply.outputs(k), "output");
      REQUIRE(t.ok());
      *output = std::move(*t);
    }
  return st;
}

// A cluster CA in `dir` with the identities of two workers, the deployer, the
// gateway and "mallory" (whom the CA vouches for, and no plan names).
void MakePki(const fs::path& dir) {
  CaOptions ca;
  ca.dir = dir.string();
  REQUIRE(CreateClusterCa(ca).ok());
  for (const char* name : {"w0", "w1", "deploy", "gateway", "mallory"}) {
    IssueOptions io;
    io.dir = dir.string();
    io.name = name;
    REQUIRE(IssueDeviceCertificate(io).ok());
  }
}

TransportSecurity Identity(const fs::path& dir, const std::string& name) {
  auto security = MakeTransportSecurity(dir.string(), name, false);
  INFO(security.status().ToString());
  REQUIRE(security.ok());
  return *security;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address, const TransportSecurity& security) {
  auto channel = OpenChannel(address, security);
  REQUIRE(channel.ok());
  return *channel;
}

}  // namespace

TEST_CASE(
    "worker: frames injected for guessed future request ids never change an answer and wrong senders are "
    "counted (issue 14)",
    "[cluster][identity]") {
  TwoWorkerClusterOptions o;
  o.input_shape = {1, 3, 160, 160};
  TwoWorkerCluster c("peer-identity-plain", o);
  const InferResult first = c.InferAndCheck();
  const Target t = LargestMessage(c);
  INFO("device " << t.device << " receives message " << t.message << " (" << t.bytes << " bytes) from device "
                 << t.from);
  auto stub = WorkerStub(c.workers[t.device]->address);
  const std::string payload = GarbagePayload(t.bytes);
  {
    // What the probe did: the next ids after the one an answer showed, from
    // the device that really sends the message (plaintext proves nothing
    // more). They must never be the ids of the next requests.
    HostilePeer peer(*stub);
    // Three of each: the early-frame cap (kMaxEarlyRequestsPerPeer) keeps
    // room for the real peer's frames, so the requests below cannot fail.
    for (uint32_t k = 1; k <= 3; ++k)
      for (uint64_t seen : {first.request_id, static_cast<uint64_t>(first.worker_request_id)})
        peer.Send(c.served.plan_id, t.from, static_cast<uint32_t>(seen + k) & 0x7fffffff, t.message, payload);
    peer.Close();
  }
  std::map<int, int> wrong;
  {
    // A device index the plan does not have, and the target itself.
    HostilePeer unknown(*stub);
    unknown.Send(c.served.plan_id, 7, first.worker_request_id + 1, t.message, "abcd");
    wrong = unknown.Close();
    HostilePeer self(*stub);
    self.Send(c.served.plan_id, t.device, first.worker_request_id + 1, t.message, "abcd");
    for (const auto& [code, n] : self.Close()) wrong[code] += n;
  }
  CHECK(wrong[static_cast<int>(StatusCode::kInvalidArgument)] == 2);
  {
    // One stream speaks for one device: a frame claiming another is dropped.
    HostilePeer switching(*stub);
    switching.Send(c.served.plan_id, t.from, 0x7fff0000u, t.message, payload.substr(0, 4096));
    switching.Send(c.served.plan_id, t.device, 0x7fff0000u, t.message, payload.substr(0, 4096));
    CHECK(switching.Close()[static_cast<int>(StatusCode::kPermissionDenied)] == 1);
  }
  for (int i = 0; i < 3; ++i) c.InferAndCheck();
  const proto::WorkerStatusReply status = WorkerStatus(*stub);
  CHECK(status.exchange_dropped().wrong_sender() == 3);
  CHECK(status.requests_failed() == 0);
  for (auto& w : c.workers) CHECK(w->alive());
}

TEST_CASE("worker: with TLS, frames and Runs from a certificate the plan does not name are refused (issue 14)",
          "[cluster][identity][tls]") {
  const fs::path pki = fs::temp_directory_path() / ("tessera-identity-pki-" + std::to_string(::getpid()));
  fs::remove_all(pki);
  MakePki(pki);
  TwoWorkerClusterOptions o;
  o.input_shape = {1, 3, 160, 160};
  o.worker_args = [&pki](const std::string&) { return std::vector<std::string>{"--tls-dir", pki.string()}; };
  o.deploy_security = Identity(pki, "deploy");
  o.gateway_security = Identity(pki, "gateway");
  o.run_callers = {"gateway"};
  TwoWorkerCluster c("peer-identity-tls", o);
  c.InferAndCheck();  // the cluster's own peers and gateway get through

  const Target t = LargestMessage(c);
  const int source = c.served.plan.source;
  const int other = 1 - source;
  const TransportSecurity mallory = Identity(pki, "mallory");
  const std::string payload = GarbagePayload(t.bytes);
  const uint32_t id = 0x12345;
  const int frames = static_cast<int>((t.bytes + static_cast<int64_t>(kChunkBytes) - 1) / kChunkBytes);
  {
    // Frames of the next request, claiming the device that really sends
    // them: from mallory, and from the receiving device's own certificate.
    auto channel = Channel(c.workers[t.device]->address, mallory);
    auto stub = proto::Worker::NewStub(channel);
    HostilePeer peer(*stub);
    peer.Send(c.served.plan_id, t.from, id, t.message, payload);
    CHECK(peer.Close()[static_cast<int>(StatusCode::kPermissionDenied)] == frames);
    auto own = Channel(c.workers[t.device]->address, Identity(pki, "w" + std::to_string(t.device)));
    auto own_stub = proto::Worker::NewStub(own);
    HostilePeer impostor(*own_stub);
    impostor.Send(c.served.plan_id, t.from, id, t.message, payload);
    CHECK(impostor.Close()[static_cast<int>(StatusCode::kPermissionDenied)] == frames);
  }
  // The request those frames were meant for, started as the gateway would.
  TensorData answer;
  grpc::Status run = RunOn(c, Channel(c.workers[source]->address, Identity(pki, "gateway")), id, true, &answer);
  INFO(run.error_message());
  REQUIRE(run.ok());
  CHECK(MaxRelDiff(answer, c.reference) <= 1e-5);

  // Runs: mallory may neither start a request nor join one; a device may not
  // start one either (only the deployer and the gateways it named may).
  grpc::Status start = RunOn(c, Channel(c.workers[source]->address, mallory), id + 1, true, nullptr);
  CHECK(start.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(start.error_message(), Catch::Contains("mallory") && Catch::Contains("gateway"));
  grpc::Status join = RunOn(c, Channel(c.workers[other]->address, mallory), id + 2, false, nullptr);
  CHECK(join.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_THAT(join.error_message(), Catch::Contains("source device"));
  grpc::Status device_starts = RunOn(
      c, Channel(c.workers[source]->address, Identity(pki, "w" + std::to_string(other))), id + 3, true, nullptr);
  CHECK(device_starts.error_code() == grpc::StatusCode::PERMISSION_DENIED);

  const TransportSecurity deployer = Identity(pki, "deploy");
  const auto target_status = WorkerStatus(*proto::Worker::NewStub(Channel(c.workers[t.device]->address, deployer)));
  CHECK(target_status.exchange_dropped().wrong_sender() == 2 * frames);
  const auto source_status = WorkerStatus(*proto::Worker::NewStub(Channel(c.workers[source]->address, deployer)));
  CHECK(source_status.requests_refused() == 2);
  const auto other_status = WorkerStatus(*proto::Worker::NewStub(Channel(c.workers[other]->address, deployer)));
  CHECK(other_status.requests_refused() == 1);
  for (int i = 0; i < 3; ++i) c.InferAndCheck();
  for (auto& w : c.workers) CHECK(w->alive());
  fs::remove_all(pki);
}

TEST_CASE("worker: another program under a loaded plan id is refused and its data dir keeps the first (issue 14)",
          "[cluster][identity]") {
  const fs::path scratch = fs::temp_directory_path() / ("tessera-program-identity-" + std::to_string(::getpid()));
  fs::remove_all(scratch);
  const Shape shape = {1, 3, 96, 96};
  auto import = [&](uint64_t seed) {
    ImportOptions io;
    io.input_shapes[""] = shape;
    io.seed = seed;
    auto g = ImportModel(TwoWorkerCluster::kModel, io);
    REQUIRE(g.ok());
    return std::move(*g);
  };
  const Graph graph = import(1), other_weights = import(2);
  auto worker = std::make_unique<WorkerProcess>("w", scratch);
  const std::vector<WorkerEndpoint> endpoints = {{"w", worker->address}};
  ServePlanOptions so;
  so.work_dir = (scratch / "plan").string();
  auto first = PrepareLoopbackPlan(graph, endpoints, so);
  auto second = PrepareLoopbackPlan(other_weights, endpoints, so);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  // The plan file's id does not see weights: the probe's second deploy.
  REQUIRE(first->plan_id == second->plan_id);
  const std::string plan_id = first->plan_id;
  auto deploy = [&](const ServedPlan& p) {
    return DeployPrograms(p.programs, plan_id, 0, p.workers, TransportSecurity{}, nullptr);
  };
  REQUIRE(deploy(*first).ok());
  const fs::path data = worker->dir / "data";
  const std::string program = ReadBytes(data / "program.pb"), header = ReadBytes(data / "program.header");
  REQUIRE_FALSE(program.empty());
  const std::string sha = Sha256Hex(program);
  CHECK(WorkerStatus(*WorkerStub(worker->address)).program_sha256() == sha);
  const std::string other_sha = Sha256Hex(SerializeProgram(second->programs[0], plan_id));
  REQUIRE(other_sha != sha);

  auto refused = deploy(*second);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kAlreadyExists);
  CHECK_THAT(refused.status().message(), Catch::Contains(plan_id) && Catch::Contains(sha.substr(0, 12)) &&
                                             Catch::Contains(other_sha.substr(0, 12)));
  CHECK(ReadBytes(data / "program.pb") == program);
  CHECK(ReadBytes(data / "program.header") == header);

  // The same program again: accepted, nothing changes.
  auto again = deploy(*first);
  INFO(again.status().ToString());
  CHECK(again.ok());
  CHECK(ReadBytes(data / "program.pb") == program);

  // It still answers with the first weights; after a restart too, and the
  // restarted worker still refuses the other program.
  auto answer_is_first = [&] {
    GatewayOptions go;
    go.served = {plan_id, 0, {{"w", worker->address}}, {}};
    go.signature = ModelSignature::Of(graph);
    auto gw = Gateway::Create(go);
    REQUIRE(gw.ok());
    const TensorData input = SeededInput(shape, 3);
    auto r = (*gw)->Infer({input}, 0, 0);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    auto executor = Executor::Create(graph, ExecutorOptions{});
    REQUIRE(executor.ok());
    std::vector<TensorData> reference;
    REQUIRE((*executor)->Run({input}, &reference).ok());
    CHECK(MaxRelDiff(r->outputs.at(0), reference.at(0)) <= 1e-5);
  };
  answer_is_first();
  worker.reset();
  worker = std::make_unique<WorkerProcess>("w", scratch);
  CHECK(WorkerStatus(*WorkerStub(worker->address)).program_sha256() == sha);
  auto after_restart = DeployPrograms(second->programs, plan_id, 0, {{"w", worker->address}}, TransportSecurity{},
                                      nullptr);
  CHECK(after_restart.status().code() == StatusCode::kAlreadyExists);
  CHECK(ReadBytes(data / "program.pb") == program);
  answer_is_first();
  worker.reset();
  fs::remove_all(scratch);
}

TEST_CASE("deploy: other weights, another model file or other workers make another plan id (issue 14)",
          "[cluster][identity]") {
  const fs::path scratch = fs::temp_directory_path() / ("tessera-deployment-id-" + std::to_string(::getpid()));
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  ImportOptions io;
  io.input_shapes[""] = {1, 3, 96, 96};
  auto graph = ImportModel(TwoWorkerCluster::kModel, io);
  REQUIRE(graph.ok());
  auto fingerprint = [&](uint64_t seed, const std::string& path) {
    ImportOptions o = io;
    o.seed = seed;
    auto f = ModelFingerprint({path, o});
    REQUIRE(f.ok());
    return *f;
  };
  const std::string copy = (scratch / "copy.cfg").string();
  fs::copy_file(TwoWorkerCluster::kModel, copy);
  std::ofstream(copy, std::ios::app) << "\n# edited\n";
  CHECK(fingerprint(1, TwoWorkerCluster::kModel) == fingerprint(1, TwoWorkerCluster::kModel));
  CHECK(fingerprint(1, TwoWorkerCluster::kModel) != fingerprint(2, TwoWorkerCluster::kModel));
  CHECK(fingerprint(1, TwoWorkerCluster::kModel) != fingerprint(1, copy));
  auto missing = ModelFingerprint({(scratch / "nowhere.cfg").string(), io});
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("nowhere.cfg"));

  auto id = [&](const std::string& model_fingerprint, const std::string& address) {
    ServePlanOptions so;
    so.work_dir = scratch.string();
    so.only_healthy = false;
    so.model_fingerprint = model_fingerprint;
    auto served = PrepareLoopbackPlan(*graph, {{"w", address}}, so);
    REQUIRE(served.ok());
    return served->plan_id;
  };
  const std::string base = id("", "127.0.0.1:1");
  const std::string a = id(fingerprint(1, TwoWorkerCluster::kModel), "127.0.0.1:1");
  CHECK(a.rfind(base + "-", 0) == 0);
  CHECK(a == id(fingerprint(1, TwoWorkerCluster::kModel), "127.0.0.1:1"));
  CHECK(a != id(fingerprint(2, TwoWorkerCluster::kModel), "127.0.0.1:1"));
  CHECK(a != id(fingerprint(1, TwoWorkerCluster::kModel), "127.0.0.1:2"));
  fs::remove_all(scratch);
}
