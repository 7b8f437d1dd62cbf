// Shared by the cluster tests (tests/unit/daemon/cluster/*_test.cc): the
// answer check, a plaintext loopback Worker stub, real `tessera worker`
// processes, a two-worker cluster over them with a gateway in this process,
// and a hostile peer that writes Exchange frames of its own.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "daemon/cluster/gateway.h"
#include "daemon/cluster/gateway_plan.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/graph/graph.h"
#include "partition/import/model_import.h"
#include "proto/services.grpc.pb.h"
#include "transport/grpc/grpc_channel.h"

extern char** environ;

namespace tessera {

// max|a-b| / max|b| (INFINITY when the shapes differ): issue 5's tolerance is 1e-5.
inline double MaxRelDiff(const TensorData& a, const TensorData& b) {
  if (a.shape != b.shape || a.values.size() != b.values.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a.values[i] - b.values[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b.values[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline std::unique_ptr<proto::Worker::Stub> WorkerStub(const std::string& address) {
  auto channel = OpenChannel(address, TransportSecurity{});
  REQUIRE(channel.ok());
  return proto::Worker::NewStub(*channel);
}

// /proc/PID/status field in bytes (VmRSS, VmSize, ...); -1 when absent.
inline int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  return -1;
}

// The binary the workers run: this build's, or $TESSERA_WORKER_BINARY (to
// show that an older build fails these tests).
inline std::string WorkerBinary() {
  const char* other = std::getenv("TESSERA_WORKER_BINARY");
  return other && *other ? other : TESSERA_BINARY;
}

// One `tessera worker --name NAME` process on a free loopback port, with its
// data dir in scratch/NAME/data and `extra` arguments (e.g. --tls-dir).
struct WorkerProcess {
  pid_t pid = -1;
  std::string address;
  std::filesystem::path dir;

  // with_data_dir = false: a worker without --data-dir (it receives into a
  // scratch file of its own).
  WorkerProcess(const std::string& name, const std::filesystem::path& scratch,
                const std::vector<std::string>& extra = {}, bool with_data_dir = true)
      : dir(scratch / name) {
    std::filesystem::create_directories(dir);
    const std::string port_file = (dir / "port").string();
    std::filesystem::remove(port_file);  // a restart: not the address of the process before
    std::vector<std::string> args = {WorkerBinary(), "worker", "--listen",    "127.0.0.1:0",
                                     "--name",       name,     "--port-file", port_file};
    if (with_data_dir) args.insert(args.end(), {"--data-dir", (dir / "data").string()});
    args.insert(args.end(), extra.begin(), extra.end());
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

inline proto::WorkerStatusReply WorkerStatus(proto::Worker::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  proto::WorkerStatusReply reply;
  REQUIRE(stub.GetStatus(&ctx, proto::StatusRequest(), &reply).ok());
  return reply;
}

struct TwoWorkerClusterOptions {
  Shape input_shape = {1, 3, 448, 448};
  // Arguments of worker "w<i>" besides the defaults (e.g. --tls-dir).
  std::function<std::vector<std::string>(const std::string& name)> worker_args;
  TransportSecurity deploy_security, gateway_security;
  std::vector<std::string> run_callers;  // DeployPrograms's
  // ServedCluster::request_link_s: the gateway's link time of one request
  // to the source (0 = the gateway sits on the source's network for free).
  double request_link_s = 0;
};

// Two worker processes ("w0", "w1") holding the default plan of
// yolov2-tiny, a gateway (in this process) over them, an input and its
// reference answer.
struct TwoWorkerCluster {
  static constexpr const char* kModel = "/usr/share/darknet/cfg/yolov2-tiny.cfg";
  std::filesystem::path scratch;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  Graph graph;
  ServedPlan served;
  std::unique_ptr<Gateway> gateway;
  TensorData input, reference;

  explicit TwoWorkerCluster(const std::string& tag, const TwoWorkerClusterOptions& options = {}) {
    scratch = std::filesystem::temp_directory_path() / ("tessera-" + tag + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(scratch);
    ImportOptions io;
    io.input_shapes[""] = options.input_shape;
    auto g = ImportModel(kModel, io);
    REQUIRE(g.ok());
    graph = std::move(*g);
    std::vector<WorkerEndpoint> endpoints;
    for (int i = 0; i < 2; ++i) {
      const std::string name = "w" + std::to_string(i);
      workers.push_back(std::make_unique<WorkerProcess>(
          name, scratch, options.worker_args ? options.worker_args(name) : std::vector<std::string>{}));
      endpoints.push_back({name, workers.back()->address});
    }
    ServePlanOptions so;
    so.work_dir = (scratch / "plan").string();
    so.security = options.deploy_security;
    auto s = PrepareLoopbackPlan(graph, endpoints, so);
    INFO(s.status().ToString());
    REQUIRE(s.ok());
    served = std::move(*s);
    REQUIRE(served.programs.size() == 2);
    auto deployed = DeployPrograms(served.programs, served.plan_id, served.plan.source, served.workers,
                                   options.deploy_security, nullptr, options.run_callers);
    INFO(deployed.status().ToString());
    REQUIRE(deployed.ok());
    GatewayOptions o;
    o.served = {served.plan_id, served.plan.source, served.workers, {}};
    o.served.request_link_s = options.request_link_s;
    o.signature = ModelSignature::Of(graph);
    o.security = options.gateway_security;
    auto gw = Gateway::Create(o);
    REQUIRE(gw.ok());
    gateway = std::move(*gw);
    input = SeededInput(options.input_shape, 5);
    auto executor = Executor::Create(graph, ExecutorOptions{});
    REQUIRE(executor.ok());
    std::vector<TensorData> outputs;
    REQUIRE((*executor)->Run({input}, &outputs).ok());
    reference = outputs.at(0);
  }
  ~TwoWorkerCluster() {
    gateway.reset();
    workers.clear();
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  // One inference through the gateway, checked against the reference.
  InferResult InferAndCheck() {
    auto r = gateway->Infer({input}, 0, 0);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(MaxRelDiff(r->outputs.at(0), reference) <= 1e-5);
    return std::move(*r);
  }
};

// The largest message a program receives, as (from device, message id, bytes).
inline std::tuple<int, int64_t, int64_t> LargestReceived(const DeviceProgram& program) {
  std::tuple<int, int64_t, int64_t> best{-1, -1, 0};
  for (const auto& s : program.steps)
    if (s.kind == StepKind::kRecv && WireBytes(program, s) > std::get<2>(best))
      best = {s.peer, s.message, WireBytes(program, s)};
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

}  // namespace tessera
