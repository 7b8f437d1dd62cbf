// Issue 14, "Unbounded memory", against real `tessera worker` processes on
// loopback: this test is the hostile peer. A LoadProgram that announces
// 8 GiB must not make the worker reserve it; Exchange frames for requests
// the worker never runs (or already finished) must be dropped and counted,
// not kept; and the workers still answer correctly afterwards.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "daemon/cluster/gateway.h"
#include "tests/unit/daemon/cluster/cluster_test_support.h"
#include "daemon/cluster/gateway_plan.h"
#include "daemon/cluster/worker_tensor.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/import/model_import.h"
#include "util/limits.h"

extern char** environ;

using namespace tessera;

namespace {

constexpr const char* kModel = "/usr/share/darknet/cfg/yolov2-tiny.cfg";
const Shape kInputShape = {1, 3, 448, 448};

// /proc/PID/status field in bytes (VmRSS, VmSize, ...); -1 when absent.
int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  return -1;
}

// The binary the workers run: this build's, or $TESSERA_WORKER_BINARY (to
// show that an older build fails these tests).
std::string WorkerBinary() {
  const char* other = std::getenv("TESSERA_WORKER_BINARY");
  return other && *other ? other : TESSERA_BINARY;
}

// One `tessera worker` process on a free loopback port.
struct WorkerProcess {
  pid_t pid = -1;
  std::string address;
  std::filesystem::path dir;

  WorkerProcess(const std::string& name, const std::filesystem::path& scratch) : dir(scratch / name) {
    std::filesystem::create_directories(dir);
    const std::string port_file = (dir / "port").string();
    std::vector<std::string> args = {WorkerBinary(), "worker",      "--listen",    "127.0.0.1:0",
                                     "--name",       name,          "--port-file", port_file,
                                     "--data-dir",   (dir / "data").string()};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    REQUIRE(posix_spawn(&pid, args[0].c_str(), nullptr, nullptr, argv.data(), environ) == 0);
    for (int i = 0; i < 200 && address.empty(); ++i) {
      std::ifstream in(port_file);
      std::getline(in, address);
      if (address.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE_FALSE(address.empty());
  }
  bool alive() const { return ::kill(pid, 0) == 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
  ~WorkerProcess() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

proto::WorkerStatusReply WorkerStatus(proto::Worker::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  proto::WorkerStatusReply reply;
  REQUIRE(stub.Status(&ctx, proto::StatusRequest(), &reply).ok());
  return reply;
}

// Two worker processes holding the default plan of yolov2-tiny at 448²,
// a gateway (in this process) over them, an input and its reference answer.
struct LimitsCluster {
  std::filesystem::path scratch;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  Graph graph;
  ServedPlan served;
  std::unique_ptr<Gateway> gateway;
  TensorData input, reference;

  LimitsCluster() {
    scratch = std::filesystem::temp_directory_path() / ("tessera-worker-limits-" + std::to_string(::getpid()));
    std::filesystem::create_directories(scratch);
    ImportOptions io;
    io.input_shapes[""] = kInputShape;
    auto g = ImportModel(kModel, io);
    REQUIRE(g.ok());
    graph = std::move(*g);
    std::vector<WorkerEndpoint> endpoints;
    for (int i = 0; i < 2; ++i) {
      workers.push_back(std::make_unique<WorkerProcess>("w" + std::to_string(i), scratch));
      endpoints.push_back({"w" + std::to_string(i), workers.back()->address});
    }
    ServePlanOptions so;
    so.work_dir = (scratch / "plan").string();
    auto s = PrepareLoopbackPlan(graph, endpoints, so);
    REQUIRE(s.ok());
    served = std::move(*s);
    REQUIRE(served.programs.size() == 2);
    auto deployed = DeployPrograms(served.programs, served.plan_id, served.plan.source, served.workers,
                                   TransportSecurity{}, nullptr);
    INFO(deployed.status().ToString());
    REQUIRE(deployed.ok());
    GatewayOptions o;
    o.served = {served.plan_id, served.plan.source, served.workers, {}};
    o.signature = ModelSignature::Of(graph);
    auto gw = Gateway::Create(o);
    REQUIRE(gw.ok());
    gateway = std::move(*gw);
    input = SeededInput(kInputShape, 5);
    auto executor = Executor::Create(graph, ExecutorOptions{});
    REQUIRE(executor.ok());
    std::vector<TensorData> outputs;
    REQUIRE((*executor)->Run({input}, &outputs).ok());
    reference = outputs.at(0);
  }
  ~LimitsCluster() {
    gateway.reset();
    workers.clear();
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  // One inference through the gateway; its worker-side request id.
  uint64_t InferAndCheck() {
    auto r = gateway->Infer({input}, 0, 0);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(MaxRelDiff(r->outputs.at(0), reference) <= 1e-5);
    return r->request_id;
  }
};

// The largest message device `to` receives, as (from device, message id, bytes).
std::tuple<int, int64_t, int64_t> LargestReceived(const DeviceProgram& program) {
  std::tuple<int, int64_t, int64_t> best{-1, -1, 0};
  for (const auto& s : program.steps)
    if (s.kind == StepKind::kRecv && s.bytes() > std::get<2>(best)) best = {s.peer, s.message, s.bytes()};
  return best;
}

// Sends every frame of message `message` of `request` (chunked like a real
// peer) on an Exchange stream and collects the error acks.
struct HostilePeer {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<proto::TensorFrame, proto::ExchangeAck>> stream;
  int64_t seq = 0;

  explicit HostilePeer(proto::Worker::Stub& stub) { stream = stub.Exchange(&ctx); }
  void Send(const std::string& plan_id, int from, uint32_t request, int64_t message, const std::string& payload) {
    const int64_t id = (static_cast<int64_t>(request) << 32) | message;
    for (size_t off = 0; off < payload.size(); off += kChunkBytes) {
      proto::TensorFrame f;
      f.set_plan_id(plan_id);
      f.set_from_device(from);
      f.set_message(id);
      f.set_offset(static_cast<int64_t>(off));
      f.set_total_bytes(static_cast<int64_t>(payload.size()));
      f.set_data(payload.substr(off, kChunkBytes));
      f.set_seq(seq++);
      REQUIRE(stream->Write(f));
    }
  }
  // Ends the stream; the acks with a non-zero code, by code.
  std::map<int, int> Close() {
    stream->WritesDone();
    std::map<int, int> codes;
    proto::ExchangeAck ack;
    while (stream->Read(&ack))
      if (ack.code() != 0) ++codes[ack.code()];
    stream->Finish();
    return codes;
  }
};

}  // namespace

TEST_CASE("worker: a LoadProgram announcing 8 GiB is refused at once and reserves nothing (issue 14)",
          "[cluster][limits]") {
  const auto scratch = std::filesystem::temp_directory_path() / ("tessera-load-limit-" + std::to_string(::getpid()));
  WorkerProcess worker("w", scratch);
  auto stub = WorkerStub(worker.address);
  const int64_t vm_before = ProcStatusBytes(worker.pid, "VmSize");
  REQUIRE(vm_before > 0);
  for (const int64_t announced : {int64_t{8} << 30, kMaxProgramBytes}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    proto::LoadProgramReply reply;
    auto writer = stub->LoadProgram(&ctx, &reply);
    proto::ProgramChunk header;
    header.set_plan_id("p");
    header.set_seq(0);
    header.set_num_devices(1);
    header.set_total_bytes(announced);
    header.set_data(std::string(kChunkBytes, 'x'));
    writer->Write(header);
    // The stream stays open: whatever the worker reserves for the claim is held now.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int64_t vm_during = ProcStatusBytes(worker.pid, "VmSize");
    INFO("announced " << announced << " bytes; worker VmSize " << vm_before << " -> " << vm_during);
    CHECK(vm_during - vm_before < (int64_t{256} << 20));
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    REQUIRE_FALSE(st.ok());
    if (announced > kMaxProgramBytes) {
      CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
      CHECK_THAT(st.error_message(), Catch::Contains("out of range") && Catch::Contains(std::to_string(kMaxProgramBytes)));
    } else {
      CHECK(st.error_code() == grpc::StatusCode::DATA_LOSS);  // ended after 1 MiB of the announced size
    }
  }
  CHECK(worker.alive());
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
}

TEST_CASE("worker: exchange frames for requests it never runs or already finished are dropped, not kept (issue 14)",
          "[cluster][limits]") {
  LimitsCluster c;
  c.InferAndCheck();  // warm: runners and streams exist
  // The device that receives the largest message, and from whom.
  int target = -1;
  std::tuple<int, int64_t, int64_t> largest{-1, -1, 0};
  for (int d = 0; d < 2; ++d) {
    auto l = LargestReceived(c.served.programs[d]);
    if (std::get<2>(l) > std::get<2>(largest)) largest = l, target = d;
  }
  const auto [from, message, bytes] = largest;
  INFO("device " << target << " receives message " << message << " of " << bytes << " bytes from device " << from);
  REQUIRE(bytes >= (int64_t{1} << 20));  // large enough that keeping 100 of them shows
  int64_t per_request_from_peer = 0;
  for (const auto& s : c.served.programs[target].steps)
    if (s.kind == StepKind::kRecv && s.peer == from) per_request_from_peer += s.bytes();

  const pid_t pid = c.workers[target]->pid;
  auto stub = WorkerStub(c.workers[target]->address);
  const int64_t rss_before = ProcStatusBytes(pid, "VmRSS");
  const std::string payload(static_cast<size_t>(bytes), '\x01');
  {
    // 100 request ids nobody will run (far from the gateway's ids).
    HostilePeer peer(*stub);
    for (uint32_t r = 0; r < 100; ++r) peer.Send(c.served.plan_id, from, 0x7ff00000u + r, message, payload);
    auto codes = peer.Close();
    CHECK(codes[static_cast<int>(StatusCode::kResourceExhausted)] >= 100 - kMaxEarlyRequestsPerPeer);
  }
  const int64_t rss_after = ProcStatusBytes(pid, "VmRSS");
  const int64_t bound = (kMaxEarlyRequestsPerPeer + 1) * per_request_from_peer + (int64_t{48} << 20);
  INFO("worker RSS " << rss_before << " -> " << rss_after << " after 100 x " << bytes << " bytes; bound +" << bound);
  CHECK(rss_after - rss_before < bound);
  auto status = WorkerStatus(*stub);
  CHECK(status.exchange_dropped().early_over_limit() >= 100 - kMaxEarlyRequestsPerPeer);
  CHECK(status.exchange_dropped().early_bytes_held() <= kMaxEarlyRequestsPerPeer * per_request_from_peer);

  // A frame for a request that already finished here is dropped at once.
  const uint64_t done = c.InferAndCheck();
  {
    HostilePeer peer(*stub);
    peer.Send(c.served.plan_id, from, static_cast<uint32_t>(done), message, payload);
    auto codes = peer.Close();
    CHECK(codes[static_cast<int>(StatusCode::kFailedPrecondition)] >= 1);
  }
  // A message the program does not receive, and a size it does not expect.
  {
    HostilePeer peer(*stub);
    peer.Send(c.served.plan_id, from, static_cast<uint32_t>(done) + 1000, 0xfffffff, "abcd");
    proto::TensorFrame f;
    f.set_plan_id(c.served.plan_id);
    f.set_from_device(from);
    f.set_message((static_cast<int64_t>(done + 1001) << 32) | message);
    f.set_total_bytes(int64_t{1} << 40);  // a claim of 1 TiB
    f.set_data("x");
    REQUIRE(peer.stream->Write(f));
    auto codes = peer.Close();
    CHECK(codes[static_cast<int>(StatusCode::kInvalidArgument)] == 2);
  }
  status = WorkerStatus(*stub);
  CHECK(status.exchange_dropped().finished() >= 1);
  CHECK(status.exchange_dropped().unexpected() >= 2);
  // The workers survived all of it and still answer correctly.
  for (auto& w : c.workers) CHECK(w->alive());
  c.InferAndCheck();
}
