// `tessera demo`: the README's main command — a local cluster on loopback.
//
// Starts N `tessera worker` processes (fork/exec of this binary) on free
// loopback ports, plans a model the project builds itself (darknet's
// yolov2-tiny.cfg from Debian's `darknet` package, seeded weights — nothing is
// downloaded) with the planner, deploys the programs, starts a gateway in this
// process, sends requests through its gRPC API, checks every answer against
// the single-device Executor run and prints the plan, per-device memory,
// bytes per link, latency and throughput against one device. The worker
// processes are always stopped on exit (also on error and on SIGINT/SIGTERM;
// each child also gets SIGKILL from the kernel if this process dies).
#include <CLI/CLI.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fcntl.h>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "daemon/cli/cli.h"
#include "daemon/runtime/device_memory.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/runtime/executor.h"
#include "daemon/cluster/gateway.h"
#include "daemon/runtime/seeded_input.h"
#include "daemon/cluster/worker_tensor.h"
#include "partition/compile/forced_plan.h"
#include "partition/graph/metrics.h"
#include "partition/compile/program_compiler.h"
#include "daemon/cluster/worker_mcu_bridge.h"
#include "partition/compile/mcu_program_builder.h"
#ifdef TESSERA_HAVE_PLANNER
#include "daemon/cluster/gateway_plan.h"
#include "planner/cluster.h"
#include "planner/placement.h"
#include "planner/plan.h"
#endif

namespace tessera {

namespace {

constexpr const char* kDefaultModel = "/usr/share/darknet/cfg/yolov2-tiny.cfg";

struct DemoOptions {
  std::string model = kDefaultModel;
  std::vector<std::string> input_shapes;
  int devices = 4;
  int threads = 1;
  int requests = 8;
  int clients = 1;
  std::string objective = "memory";
  std::string force;  // a forced scheme instead of the planner
  bool json = false;
  bool keep = false;
  int mcu = 0;  // > 0: the mixed Linux + MCU cluster under QEMU (issue 6)
  bool unplug = false;  // SIGKILL the last worker half-way; the gateway fails over
};

// Worker processes of this demo; also read by the signal handler.
constexpr int kMaxWorkers = 64;
pid_t g_workers[kMaxWorkers];
volatile sig_atomic_t g_num_workers = 0;

void KillWorkers(int sig) {
  for (int i = 0; i < g_num_workers; ++i)
    if (g_workers[i] > 0) kill(g_workers[i], sig);
}

void OnSignal(int sig) {
  KillWorkers(SIGKILL);
  _exit(128 + sig);
}

// Stops and reaps the workers when the demo leaves, however it leaves.
struct WorkerProcesses {
  ~WorkerProcesses() {
    KillWorkers(SIGTERM);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (int i = 0; i < g_num_workers; ++i) {
      while (g_workers[i] > 0 && waitpid(g_workers[i], nullptr, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > until) {
          kill(g_workers[i], SIGKILL);
          waitpid(g_workers[i], nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      g_workers[i] = 0;
    }
    g_num_workers = 0;
  }
};

// Starts a child process that dies with the demo (PR_SET_PDEATHSIG) and is
// stopped by WorkerProcesses: `program` is a path ("/proc/self/exe") or a
// name looked up on PATH; stdout and stderr go to `log_path` when given.
// Returns its index in g_workers.
Result<int> SpawnChild(const std::string& program, std::vector<std::string> args, const std::string& log_path) {
  if (g_num_workers >= kMaxWorkers) return Status::ResourceExhausted("too many child processes");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (!log_path.empty()) {
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(program.c_str(), argv.data());
    _exit(127);
  }
  const int index = g_num_workers;
  g_workers[index] = pid;
  g_num_workers = index + 1;
  return index;
}

// Starts n worker processes w1..wn on loopback ports; returns their
// addresses, and their g_workers indices in *slots when given.
Result<std::vector<std::string>> StartWorkers(int n, const std::string& dir, int threads,
                                              const std::vector<std::vector<std::string>>& extra_args = {},
                                              std::vector<int>* slots = nullptr) {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const std::string level = spdlog::level::to_string_view(spdlog::get_level()).data();
  std::vector<int> slot(n);
  for (int i = 0; i < n; ++i) {
    const std::string name = "w" + std::to_string(i + 1);
    const std::string port_file = dir + "/" + name + ".port";
    const std::string t = std::to_string(threads), data = dir + "/" + name;
    std::vector<std::string> args = {"tessera", "--log-level", level, "worker", "--listen", "127.0.0.1:0", "--name",
                                     name, "--port-file", port_file, "--data-dir", data, "--threads", t};
    if (i < static_cast<int>(extra_args.size())) args.insert(args.end(), extra_args[i].begin(), extra_args[i].end());
    TS_ASSIGN_OR_RETURN(slot[i], SpawnChild("/proc/self/exe", args, ""));
  }
  if (slots) *slots = slot;
  std::vector<std::string> addresses(n);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; i < n; ++i) {
    const std::string port_file = dir + "/w" + std::to_string(i + 1) + ".port";
    const pid_t pid = g_workers[slot[i]];
    while (!std::filesystem::exists(port_file)) {
      int wstatus = 0;
      if (waitpid(pid, &wstatus, WNOHANG) == pid) {
        g_workers[slot[i]] = 0;
        return Status::Unavailable("worker w" + std::to_string(i + 1) + " exited before listening");
      }
      if (std::chrono::steady_clock::now() > until)
        return Status::DeadlineExceeded("worker w" + std::to_string(i + 1) + " did not start listening within 30 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream(port_file) >> addresses[i];
  }
  return addresses;
}

std::pair<double, double> Differences(const std::vector<TensorData>& got, const std::vector<TensorData>& want) {
  double max_abs = 0, max_ref = 0;
  for (size_t o = 0; o < want.size(); ++o) {
    if (o >= got.size() || got[o].values.size() != want[o].values.size()) return {INFINITY, INFINITY};
    for (size_t k = 0; k < want[o].values.size(); ++k) {
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(got[o].values[k] - want[o].values[k])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[o].values[k])));
    }
  }
  return {max_abs, max_ref > 0 ? max_abs / max_ref : max_abs};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct PlanForDemo {
  std::string plan_id, table;
  std::vector<DeviceProgram> programs;
  std::vector<int64_t> predicted_sent_bytes;
  bool planner_used = false;
  // Per device: what its worker was promised to hold (issue 11 item 5:
  // printed beside the measured peak RSS).
  std::vector<DeviceMemory> memory;
};

// The demo's temporary directory (worker data, port files, QEMU logs);
// removed when the demo leaves unless --keep.
class DemoDirectory {
 public:
  static Result<std::unique_ptr<DemoDirectory>> Create(const std::string& prefix, bool keep) {
    std::string path = "/tmp/" + prefix + "-XXXXXX";
    if (!mkdtemp(path.data())) return Status::FromErrno(errno, "mkdtemp " + path);
    return std::unique_ptr<DemoDirectory>(new DemoDirectory(path, keep));
  }
  ~DemoDirectory() {
    std::error_code ec;
    if (!keep_) std::filesystem::remove_all(path_, ec);
  }
  DemoDirectory(const DemoDirectory&) = delete;
  DemoDirectory& operator=(const DemoDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  DemoDirectory(std::string path, bool keep) : path_(std::move(path)), keep_(keep) {}
  const std::string path_;
  const bool keep_;
};

// A gateway in this process, served on a loopback port and reached through
// its own gRPC API like any client would.
struct LocalGateway {
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<GatewayService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<proto::Gateway::Stub> stub;
  ~LocalGateway() {
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
};

Result<std::unique_ptr<LocalGateway>> StartLocalGateway(GatewayOptions options) {
  auto lg = std::make_unique<LocalGateway>();
  TS_ASSIGN_OR_RETURN(lg->gateway, Gateway::Create(std::move(options)));
  lg->service = std::make_unique<GatewayService>(lg->gateway.get());
  std::string address;
  TS_ASSIGN_OR_RETURN(lg->server, StartGatewayServer(lg->service.get(), "127.0.0.1:0", TransportSecurity{}, &address));
  TS_ASSIGN_OR_RETURN(auto channel, OpenChannel(address, TransportSecurity{}));
  lg->stub = proto::Gateway::NewStub(channel);
  return lg;
}

// One Gateway.Infer call; *ms gets its wall time.
Status InferThroughGateway(proto::Gateway::Stub& stub, const std::vector<TensorData>& inputs, uint64_t request_id,
                           int64_t timeout_ms, std::vector<TensorData>* outputs, double* ms) {
  proto::InferRequest req;
  req.set_request_id(request_id);
  req.set_deadline_unix_ms(UnixMillisNow() + timeout_ms);
  for (const auto& t : inputs) *req.add_inputs() = ToTensorMsg(t);
  grpc::ClientContext ctx;
  proto::InferReply reply;
  const auto s0 = std::chrono::steady_clock::now();
  grpc::Status gs = stub.Infer(&ctx, req, &reply);
  *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
  TS_RETURN_IF_ERROR(FromGrpcStatus(gs, "Infer"));
  outputs->clear();
  for (int o = 0; o < reply.outputs_size(); ++o) {
    TS_ASSIGN_OR_RETURN(auto t, FromTensorMsg(reply.outputs(o), "output " + std::to_string(o)));
    outputs->push_back(std::move(t));
  }
  return Status::OK();
}

// Worker.Status of the worker at `address`: the most requests it ran at once
// (a pipelined plan keeps several inferences in flight); -1 if it does not answer.
// A worker's Status (in-flight counts, current and peak RSS); nullopt if it
// does not answer.
std::optional<proto::WorkerStatusReply> WorkerStatus(const std::string& address) {
  auto channel = OpenChannel(address, TransportSecurity{});
  if (!channel.ok()) return std::nullopt;
  auto stub = proto::Worker::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  proto::StatusRequest req;
  proto::WorkerStatusReply reply;
  if (!stub->Status(&ctx, req, &reply).ok()) return std::nullopt;
  return reply;
}

// What the demo's requests came back with, compared with the single-device
// run (a match is max|a-b|/max|b| <= 1e-5, issue 5).
struct RequestTally {
  std::vector<double> latencies_ms;
  double max_rel = 0;
  int answered = 0, matched = 0;
  std::string first_error;

  void Record(const Status& st, const std::vector<TensorData>& outputs, const std::vector<TensorData>& reference,
              double ms) {
    if (!st.ok()) {
      if (first_error.empty()) first_error = st.ToString();
      return;
    }
    ++answered;
    latencies_ms.push_back(ms);
    const double rel = Differences(outputs, reference).second;
    max_rel = std::max(max_rel, rel);
    if (rel <= 1e-5) ++matched;
  }
  bool AllMatch(int requests) const { return answered == requests && matched == requests; }
};

int RunMixedDemo(const DemoOptions& d);

int RunDemo(const DemoOptions& d) {
  if (d.mcu > 0) return RunMixedDemo(d);
  if (!std::filesystem::exists(d.model))
    return ReportError("demo", Status::NotFound(d.model + " does not exist; install Debian's 'darknet' package "
                                                "(deploy/install-deps.sh) or pass --model FILE"));
  if (d.devices < 1 || d.devices > kMaxWorkers)
    return ReportError("demo", Status::InvalidArgument("--devices must be 1.." + std::to_string(kMaxWorkers)));
  ModelOptions mo;
  mo.model_path = d.model;
  mo.input_shapes = d.input_shapes;
  auto graph = LoadModel(mo);
  if (!graph.ok()) return ReportError("demo", graph.status());
  const ModelTotals totals = ComputeTotals(ComputeLayerFigures(*graph));

  // The oracle: the whole model on one device, a few distinct inputs.
  ExecutorOptions eo;
  eo.threads = d.threads;
  auto ex = Executor::Create(*graph, eo);
  if (!ex.ok()) return ReportError("demo", ex.status());
  const int kinds = std::min(d.requests, 4);
  std::vector<std::vector<TensorData>> inputs(kinds), reference(kinds);
  std::vector<double> single_ms;
  for (int k = 0; k < kinds; ++k) {
    for (size_t i = 0; i < graph->inputs.size(); ++i)
      inputs[k].push_back(SeededInput(graph->values[graph->inputs[i]].shape, 1 + k * 16 + i));
    for (int rep = 0; rep < (k == 0 ? 3 : 1); ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      if (Status st = (*ex)->Run(inputs[k], &reference[k]); !st.ok()) return ReportError("demo", st);
      single_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  const double single_latency = Median(single_ms);

  // The local cluster.
  auto demo_dir = DemoDirectory::Create("tessera-demo", d.keep);
  if (!demo_dir.ok()) return ReportError("demo", demo_dir.status());
  const std::string dir = (*demo_dir)->path();
  WorkerProcesses workers_guard;
  std::vector<int> worker_slots;
  auto addresses = StartWorkers(d.devices, dir, d.threads, {}, &worker_slots);
  if (!addresses.ok()) return ReportError("demo", addresses.status());
  std::vector<WorkerEndpoint> endpoints;
  for (int i = 0; i < d.devices; ++i) endpoints.push_back({"w" + std::to_string(i + 1), (*addresses)[i]});

  PlanForDemo pd;
#ifdef TESSERA_HAVE_PLANNER
  if (d.force.empty()) {
    ServePlanOptions so;
    so.objective = d.objective;
    so.work_dir = dir;
    so.memory.threads = d.threads;
    so.memory.in_flight = std::max(1, d.clients);  // the demo's gateway runs that many at once
    auto served = PrepareLoopbackPlan(*graph, endpoints, so);
    if (served.ok()) {
      pd.plan_id = served->plan_id;
      pd.table = served->table;
      pd.programs = std::move(served->programs);
      pd.predicted_sent_bytes = served->predicted_sent_bytes;
      pd.memory = served->memory;
      pd.planner_used = true;
      endpoints = served->workers;
    } else {
      spdlog::warn("the planner could not plan the demo ({}); using a forced FFMT plan", served.status().ToString());
    }
  }
#endif
  if (!pd.planner_used) {
    ForcedPlanOptions fo;
    fo.devices = d.devices;
    fo.grid_rows = d.devices;
    auto scheme = ParseForcedScheme(d.force.empty() ? "ffmt" : d.force);
    if (!scheme.ok()) return ReportError("demo", scheme.status());
    auto forced = MakeForcedPlan(*graph, *scheme, fo);
    if (!forced.ok()) return ReportError("demo", forced.status());
    auto compiled = CompilePlan(*graph, *forced);
    if (!compiled.ok()) return ReportError("demo", compiled.status());
    pd.programs = std::move(compiled->programs);
    for (const DeviceProgram& program : pd.programs) {
      auto m = SizeDeviceProgram(program, {d.threads, std::max(1, d.clients)});
      if (!m.ok()) return ReportError("demo", m.status());
      pd.memory.push_back(*m);
    }
    pd.plan_id = "forced-" + (d.force.empty() ? std::string("ffmt") : d.force) + "-" + std::to_string(d.devices);
    pd.table = "forced plan: " + (d.force.empty() ? std::string("ffmt") : d.force) + " over " +
               std::to_string(d.devices) + " devices\n";
  }

  // The payload bytes each link carries for one request: the programs' Send steps.
  auto expected_link_bytes = PlannedLinkBytes(pd.programs);

  // Deploy.
  const auto td = std::chrono::steady_clock::now();
  int last_percent = -1;
  auto deployed = DeployPrograms(pd.programs, pd.plan_id, 0, endpoints, TransportSecurity{},
                                 [&](int64_t sent, int64_t total) {
                                   const int percent = total ? static_cast<int>(100 * sent / total) : 100;
                                   if (!d.json && percent / 5 != last_percent / 5) {
                                     std::fprintf(stderr, "\rdeploy [%-20s] %3d%%", std::string(percent / 5, '#').c_str(),
                                                  percent);
                                     last_percent = percent;
                                   }
                                 });
  if (!d.json) std::fprintf(stderr, "\n");
  if (!deployed.ok()) return ReportError("demo", deployed.status());
  const double deploy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - td).count();

  // Gateway in this process, reached through its gRPC API.
  GatewayOptions go;
  go.served = {pd.plan_id, 0, endpoints, expected_link_bytes};
  go.signature = ModelSignature::Of(*graph);
  go.max_in_flight = std::max(1, d.clients);
#ifdef TESSERA_HAVE_PLANNER
  if (d.unplug) {
    // Failover: plan again for the workers still alive (the planner, as at
    // start) and deploy; the gateway swaps plans and retries the request.
    go.failover = [&](const std::vector<std::string>& down) -> Result<ServedCluster> {
      std::vector<WorkerEndpoint> alive;
      for (const auto& w : endpoints)
        if (std::find(down.begin(), down.end(), w.name) == down.end()) alive.push_back(w);
      ServePlanOptions so;
      so.objective = d.objective;
      so.work_dir = dir;
      so.probe_timeout = std::chrono::milliseconds(1000);
      TS_ASSIGN_OR_RETURN(ServedPlan next, PrepareLoopbackPlan(*graph, alive, so));
      return DeployServedPlan(next, TransportSecurity{});
    };
  }
#endif
  auto local = StartLocalGateway(go);
  if (!local.ok()) return ReportError("demo", local.status());
  Gateway* gateway = (*local)->gateway.get();

  // --unplug: the last worker is killed (SIGKILL, no goodbye) when half the
  // requests have been sent, while others are in flight.
  std::atomic<bool> unplugged{false};
  const int unplug_at = d.requests / 2;
  auto maybe_unplug = [&](int r) {
    if (!d.unplug || r != unplug_at || unplugged.exchange(true)) return;
    const int victim = d.devices - 1;
    if (!d.json)
      std::fprintf(stderr, "unplugging %s (%s) before request %d\n", endpoints[victim].name.c_str(),
                   endpoints[victim].address.c_str(), r + 1);
    kill(g_workers[worker_slots[victim]], SIGKILL);
  };

  std::mutex mu;
  RequestTally tally;
  std::atomic<int> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < std::max(1, d.clients); ++c)
    clients.emplace_back([&] {
      for (int r; (r = next++) < d.requests;) {
        const int k = r % kinds;
        maybe_unplug(r);
        std::vector<TensorData> outputs;
        double ms = 0;
        Status st = InferThroughGateway(*(*local)->stub, inputs[k], static_cast<uint64_t>(r) + 1, 120000, &outputs, &ms);
        std::lock_guard<std::mutex> lock(mu);
        tally.Record(st, outputs, reference[k], ms);
      }
    });
  for (auto& t : clients) t.join();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool all_match = tally.AllMatch(d.requests);
  const double latency = Median(tally.latencies_ms);
  const double throughput = wall_s > 0 ? tally.answered / wall_s : 0;

  gateway->RefreshWorkerState();
  const auto links = gateway->Links();
  // After a failover the counters are the new plan's (its device numbers);
  // the first plan's expected bytes no longer apply.
  const bool replanned = gateway->failovers() > 0;
  const std::vector<WorkerEndpoint> link_names = gateway->Served().workers;
  int64_t measured_payload = 0, measured_wire = 0, expected_total = 0;
  nlohmann::json jlinks = nlohmann::json::array();
  for (const auto& l : links) {
    const auto key = std::make_pair(l.from, l.to);
    const int64_t expected = !replanned && expected_link_bytes.count(key) ? expected_link_bytes[key] : 0;
    measured_payload += l.payload_bytes;
    measured_wire += l.wire_bytes;
    expected_total += expected * tally.answered;
    jlinks.push_back({{"from", link_names[l.from].name}, {"to", link_names[l.to].name},
                      {"payload_bytes", l.payload_bytes}, {"wire_bytes", l.wire_bytes},
                      {"expected_payload_bytes", expected * tally.answered},
                      {"wire_over_expected", expected ? static_cast<double>(l.wire_bytes) / (expected * tally.answered) : 0.0}});
  }
  int64_t predicted_per_request = 0;
  for (int64_t b : pd.predicted_sent_bytes) predicted_per_request += b;

  // Promised vs measured memory per worker (issue 11 item 5).
  nlohmann::json mem = nlohmann::json::array();
  for (size_t i = 0; i < deployed->size(); ++i) {
    const auto status = WorkerStatus(endpoints[i].address);
    const int64_t promised = i < pd.memory.size() ? pd.memory[i].total_bytes() : 0;
    const int64_t peak = status ? status->peak_rss_bytes() : 0;
    mem.push_back({{"device", endpoints[i].name}, {"address", endpoints[i].address},
                   {"memory_bytes", (*deployed)[i].memory_bytes}, {"weight_bytes", (*deployed)[i].weight_bytes},
                   {"program_bytes", (*deployed)[i].program_bytes},
                   {"peak_in_flight", status ? status->peak_in_flight() : -1},
                   {"promised_bytes", promised},
                   {"peak_rss_bytes", peak},
                   {"rss_bytes", status ? status->rss_bytes() : 0},
                   {"peak_over_promised", promised > 0 ? static_cast<double>(peak) / promised : 0.0}});
  }

  if (d.json) {
    nlohmann::json j = {{"devices", d.devices},
                        {"requests", d.requests},
                        {"answered", tally.answered},
                        {"all_match", all_match},
                        {"max_rel_diff", tally.max_rel},
                        {"latency_ms", latency},
                        {"single_device_latency_ms", single_latency},
                        {"throughput_per_s", throughput},
                        {"single_device_throughput_per_s", single_latency > 0 ? 1000.0 / single_latency : 0.0},
                        {"clients", d.clients},
                        {"model", d.model},
                        {"plan_id", pd.plan_id},
                        {"planner", pd.planner_used},
                        {"deploy_seconds", deploy_s},
                        {"links", jlinks},
                        {"measured_payload_bytes", measured_payload},
                        {"measured_wire_bytes", measured_wire},
                        {"expected_payload_bytes", expected_total},
                        {"planner_predicted_bytes_per_request", predicted_per_request},
                        {"failovers", gateway->failovers()},
                        {"final_devices", gateway->Served().workers.size()}};
    if (d.unplug) j["unplugged"] = endpoints[d.devices - 1].name;
    j["device_memory"] = mem;
    if (!tally.first_error.empty()) j["error"] = tally.first_error;
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("tessera demo — %s, %.2f MiB weights, %.2f GMACs, on %d worker processes (loopback)\n",
                d.model.c_str(), totals.weights * 4.0 / 1048576.0, totals.macs / 1e9, d.devices);
    std::printf("\n%s", pd.table.c_str());
    std::printf("\nplan %s deployed in %.2f s\n", pd.plan_id.c_str(), deploy_s);
    std::printf("%-6s %-22s %12s %12s %12s %12s %12s %9s\n", "device", "address", "weights MiB", "working MiB",
                "program MiB", "promised MiB", "peak RSS MiB", "peak/prom");
    for (const auto& row : mem) {
      const double promised = row["promised_bytes"].get<int64_t>() / 1048576.0;
      const double peak = row["peak_rss_bytes"].get<int64_t>() / 1048576.0;
      std::printf("%-6s %-22s %12.2f %12.2f %12.2f %12.2f %12.2f %9.2f\n", row["device"].get<std::string>().c_str(),
                  row["address"].get<std::string>().c_str(), row["weight_bytes"].get<int64_t>() / 1048576.0,
                  row["memory_bytes"].get<int64_t>() / 1048576.0, row["program_bytes"].get<int64_t>() / 1048576.0,
                  promised, peak, promised > 0 ? peak / promised : 0.0);
    }
    std::printf("promised = worker baseline + max(weights as stored + %d x (arena + request I/O), weights while "
                "loading); peak RSS = the worker's VmHWM (Worker.Status)\n",
                pd.memory.empty() ? 1 : pd.memory[0].in_flight);
    std::printf("\n%-5s %-5s %16s %16s %16s %8s\n", "from", "to", "payload bytes", "expected bytes", "wire bytes",
                "wire/exp");
    for (const auto& l : jlinks)
      std::printf("%-5s %-5s %16lld %16lld %16lld %8.4f\n", l["from"].get<std::string>().c_str(),
                  l["to"].get<std::string>().c_str(), static_cast<long long>(l["payload_bytes"].get<int64_t>()),
                  static_cast<long long>(l["expected_payload_bytes"].get<int64_t>()),
                  static_cast<long long>(l["wire_bytes"].get<int64_t>()), l["wire_over_expected"].get<double>());
    std::printf("total: %lld payload bytes (expected %lld), %lld on the wire; planner predicted %lld bytes/request\n",
                static_cast<long long>(measured_payload), static_cast<long long>(expected_total),
                static_cast<long long>(measured_wire), static_cast<long long>(predicted_per_request));
    std::printf("\nrequests: %d answered of %d (%d clients), %d match the single-device run (max rel diff %.3g)\n",
                tally.answered, d.requests, d.clients, tally.matched, tally.max_rel);
    std::printf("latency: %.2f ms median on %d devices, %.2f ms on one device (this process)\n", latency, d.devices,
                single_latency);
    std::printf("throughput: %.2f inferences/s vs %.2f on one device\n", throughput,
                single_latency > 0 ? 1000.0 / single_latency : 0.0);
    std::printf("(loopback: no bandwidth limit and all workers share this machine's cores)\n");
    if (d.unplug)
      std::printf("unplugged %s half-way: %lld failover(s), the last requests ran on %zu workers (plan %s)%s\n",
                  endpoints[d.devices - 1].name.c_str(), static_cast<long long>(gateway->failovers()),
                  gateway->Served().workers.size(), gateway->Served().plan_id.c_str(),
                  tally.AllMatch(d.requests) ? "; every request was answered correctly" : "");
    if (!tally.first_error.empty()) std::printf("first error: %s\n", tally.first_error.c_str());
  }
  return all_match ? 0 : 2;
}

// ---- `tessera demo --mcu 2`: the mixed Linux + MCU cluster (issue 6) --------
//
// Two worker processes w1, w2 on loopback; two QEMU mps2-an386 machines run
// the MCU firmware with their UART0 on a pty; w1 owns mcu1 and w2 owns mcu2
// (`tessera worker --mcu NAME=PTY`), exactly the shape of
// configs/mixed-2linux-2mcu.yaml (written here with the real addresses and
// ptys). The keyword-spotting CNN is planned with the latency objective on
// the STM32 presets; when the planner keeps every layer on a Linux worker
// (the UART makes any MCU hop slower than computing locally) the demo forces
// the fastest contiguous whole-layer pipeline that gives each MCU a layer.

// The firmware ELF: $TESSERA_MCU_FIRMWARE, else <dir of this binary>/firmware/.
std::string FindMcuFirmware() {
  if (const char* env = std::getenv("TESSERA_MCU_FIRMWARE")) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path() / "firmware" / "tessera_mcu_worker.elf").string();
}

bool QemuInstalled() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = p.find(':', start);
    const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && access((dir + "/qemu-system-arm").c_str(), X_OK) == 0) return true;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

// Boots one QEMU MCU; returns the pty of its UART0. The pid joins g_workers
// so it is stopped with the workers.
Result<std::string> BootQemuMcu(const std::string& firmware, const std::string& log_path) {
  TS_ASSIGN_OR_RETURN(const int slot,
                      SpawnChild("qemu-system-arm",
                                 {"qemu-system-arm", "-M", "mps2-an386", "-nodefaults", "-display", "none", "-monitor",
                                  "none", "-serial", "pty", "-kernel", firmware},
                                 log_path));
  const pid_t pid = g_workers[slot];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(log_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("/dev/pts/");
    if (at != std::string::npos) {
      size_t end = at + 9;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      if (end > at + 9) return text.substr(at, end - at);
    }
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid)
      return Status::Unavailable("qemu-system-arm exited at boot: " + text);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::DeadlineExceeded("qemu-system-arm did not report its serial pty within 10 s (" + log_path + ")");
}

#ifdef TESSERA_HAVE_PLANNER
struct MixedPlacement {
  std::vector<int> device_of_layer;
  PlacementCost cost;
  bool forced = false;
  std::string note;
};

// The planner's latency plan if it gives every MCU a layer (whole layers
// only: the MCU runs receive-all / compute / send-all programs); else the
// fastest feasible contiguous pipeline with at least one layer per MCU.
Result<MixedPlacement> PlaceMixed(const Graph& graph, const Cluster& cluster, std::string* table) {
  const auto figures = ComputeLayerFigures(graph);
  if (figures.size() != graph.nodes.size())
    return Status::Internal("layer figures do not match the graph's nodes");
  PlacementProblem problem = MakePlacementProblem(graph, figures, cluster);
  problem.source = 0;  // w1 takes the inputs from the gateway and returns the outputs
  std::vector<int> mcus;
  for (int i = 0; i < cluster.size(); ++i)
    if (cluster.devices[i].kind == DeviceKind::kMcu) mcus.push_back(i);
  MixedPlacement out;
  PlanOptions po;
  po.objective = Objective::kLatency;
  auto plan = BuildPlan(graph, figures, cluster, po);
  if (plan.ok()) {
    *table = FormatPlanTable(*plan);
    std::vector<int> dev;
    bool whole = true;
    for (const auto& l : plan->layers) {
      if (l.scheme != "whole" || l.devices.size() != 1) whole = false;
      dev.push_back(l.devices.empty() ? 0 : l.devices[0]);
    }
    bool every_mcu = true;
    for (int m : mcus) every_mcu = every_mcu && std::count(dev.begin(), dev.end(), m) > 0;
    if (whole && every_mcu && dev.size() == graph.nodes.size()) {
      out.device_of_layer = dev;
      out.cost = EvaluatePlacement(problem, dev);
      out.note = "planner (latency objective) placement used as is";
      return out;
    }
    out.note = "the planner put no layer on some MCU (predicted " + std::to_string(plan->latency_s * 1e3) +
               " ms on Linux alone); forced the fastest contiguous pipeline giving each MCU at least one layer";
  } else {
    out.note = "the planner failed (" + plan.status().ToString() + "); forced a contiguous pipeline";
  }
  out.forced = true;
  const int n = static_cast<int>(graph.nodes.size()), k = cluster.size();
  if (n > 10) return Status::InvalidArgument("the mixed demo's pipeline search is for small chains (<= 10 layers)");
  std::vector<int> dev(n, 0);
  double best = INFINITY;
  for (int64_t code = 0, total = static_cast<int64_t>(std::pow(k, n)); code < total; ++code) {
    int64_t c = code;
    for (int j = 0; j < n; ++j, c /= k) dev[j] = static_cast<int>(c % k);
    bool ok = true;  // each device's layers contiguous
    for (int d = 0; d < k && ok; ++d) {
      int first = -1, last = -1, count = 0;
      for (int j = 0; j < n; ++j)
        if (dev[j] == d) { if (first < 0) first = j; last = j; ++count; }
      if (count && last - first + 1 != count) ok = false;
    }
    for (int m : mcus) ok = ok && std::count(dev.begin(), dev.end(), m) > 0;
    if (!ok) continue;
    PlacementCost cost = EvaluatePlacement(problem, dev);
    if (!cost.feasible || cost.latency_s >= best) continue;
    best = cost.latency_s;
    out.device_of_layer = dev;
    out.cost = cost;
  }
  if (out.device_of_layer.empty())
    return Status::ResourceExhausted("no pipeline gives every MCU a layer within its RAM and flash");
  return out;
}
#endif

int RunMixedDemo(const DemoOptions& d) {
  const char* what = "demo --mcu";
  if (d.mcu != 2) return ReportError(what, Status::InvalidArgument("--mcu supports 2 MCUs (2 Linux workers + 2 MCUs)"));
#ifndef TESSERA_HAVE_PLANNER
  return ReportError(what, Status::NotSupported("this tessera was built without the planner"));
#else
  if (!QemuInstalled()) {
    std::fprintf(stderr, "demo --mcu: qemu-system-arm is not installed (deploy/install-deps.sh installs "
                         "qemu-system-arm); cannot emulate the MCUs\n");
    return 77;
  }
  const std::string firmware = FindMcuFirmware();
  if (firmware.empty() || !std::filesystem::exists(firmware)) {
    std::fprintf(stderr, "demo --mcu: the MCU firmware %s is missing; build it with `cmake --build <build> --target "
                         "tessera_firmware` (needs gcc-arm-none-eabi) or set TESSERA_MCU_FIRMWARE\n",
                 firmware.c_str());
    return 77;
  }
  Graph graph = MakeKeywordSpottingGraph();
  if (Status st = graph.Validate(); !st.ok()) return ReportError(what, st);

  // The oracle: the whole model on one device.
  auto ex = Executor::Create(graph, ExecutorOptions{});
  if (!ex.ok()) return ReportError(what, ex.status());
  const int kinds = std::min(d.requests, 4);
  std::vector<std::vector<TensorData>> inputs(kinds), reference(kinds);
  std::vector<double> single_ms;
  for (int k = 0; k < kinds; ++k) {
    inputs[k].push_back(SeededInput(graph.values[graph.inputs[0]].shape, 1 + k * 16));
    const auto t0 = std::chrono::steady_clock::now();
    if (Status st = (*ex)->Run(inputs[k], &reference[k]); !st.ok()) return ReportError(what, st);
    single_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }

  auto demo_dir = DemoDirectory::Create("tessera-mixed", d.keep);
  if (!demo_dir.ok()) return ReportError(what, demo_dir.status());
  const std::string dir = (*demo_dir)->path();
  WorkerProcesses processes_guard;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  // Two emulated MCUs, then the workers that own them.
  std::vector<std::string> ptys;
  for (int m = 1; m <= 2; ++m) {
    auto pty = BootQemuMcu(firmware, dir + "/qemu-mcu" + std::to_string(m) + ".log");
    if (!pty.ok()) return ReportError(what, pty.status());
    ptys.push_back(*pty);
  }
  const uint32_t baud = 115200;
  auto addresses = StartWorkers(2, dir, d.threads,
                                {{"--mcu", "mcu1=" + ptys[0] + "@" + std::to_string(baud)},
                                 {"--mcu", "mcu2=" + ptys[1] + "@" + std::to_string(baud)}});
  if (!addresses.ok()) return ReportError(what, addresses.status());
  std::map<std::string, std::string> mcu_address;
  for (int w = 1; w <= 2; ++w) {
    std::ifstream in(dir + "/w" + std::to_string(w) + ".port");
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line))
      if (const size_t eq = line.find('='); eq != std::string::npos) mcu_address[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (!mcu_address.count("mcu1") || !mcu_address.count("mcu2"))
    return ReportError(what, Status::Unavailable("the workers did not report their MCU bridges (see " + dir + ")"));

  // The cluster of configs/mixed-2linux-2mcu.yaml with this run's addresses and ptys.
  const std::string yaml =
      "devices:\n"
      "  - { name: w1, kind: linux, address: " + (*addresses)[0] +
      ", ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }\n"
      "  - { name: w2, kind: linux, address: " + (*addresses)[1] +
      ", ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }\n"
      "  - { name: mcu1, kind: mcu, preset: STM32H743ZI, serial: " + ptys[0] + ", baud: " + std::to_string(baud) +
      ", via: w1 }\n"
      "  - { name: mcu2, kind: mcu, preset: STM32F446RE, serial: " + ptys[1] + ", baud: " + std::to_string(baud) +
      ", via: w2 }\n"
      "links:\n"
      "  default: { bandwidth: 10Gbit/s, latency: 20us }\n";
  auto cluster = ParseCluster(yaml, "mixed demo cluster", PresetDirectories());
  if (!cluster.ok()) return ReportError(what, cluster.status());
  std::string planner_table;
  auto placement = PlaceMixed(graph, *cluster, &planner_table);
  if (!placement.ok()) return ReportError(what, placement.status());

  PartitionPlan pp;
  pp.num_devices = cluster->size();
  pp.source = 0;
  std::string plan_id = "mixed-kws";
  for (size_t j = 0; j < graph.nodes.size(); ++j) {
    LayerAssignment a;
    a.scheme = LayerScheme::kWhole;
    a.devices = {placement->device_of_layer[j]};
    pp.layers.push_back(a);
    plan_id += "-" + cluster->devices[a.devices[0]].name;
  }
  auto compiled = CompilePlan(graph, pp);
  if (!compiled.ok()) return ReportError(what, compiled.status());
  std::vector<WorkerEndpoint> endpoints;
  for (const auto& dev : cluster->devices)
    endpoints.push_back({dev.name, dev.kind == DeviceKind::kMcu ? mcu_address[dev.name] : dev.address});
  auto expected_link_bytes = PlannedLinkBytes(compiled->programs);

  const auto td = std::chrono::steady_clock::now();
  auto deployed = DeployPrograms(compiled->programs, plan_id, 0, endpoints, TransportSecurity{}, nullptr);
  if (!deployed.ok()) return ReportError(what, deployed.status());
  const double deploy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - td).count();

  GatewayOptions go;
  go.served = {plan_id, 0, endpoints, expected_link_bytes};
  go.signature = ModelSignature::Of(graph);
  go.max_in_flight = 1;
  auto local = StartLocalGateway(go);
  if (!local.ok()) return ReportError(what, local.status());
  Gateway* gateway = (*local)->gateway.get();

  RequestTally tally;
  for (int r = 0; r < d.requests; ++r) {
    const int k = r % kinds;
    std::vector<TensorData> outputs;
    double ms = 0;
    Status st = InferThroughGateway(*(*local)->stub, inputs[k], static_cast<uint64_t>(r) + 1, 60000, &outputs, &ms);
    tally.Record(st, outputs, reference[k], ms);
  }
  const bool all_match = tally.AllMatch(d.requests);
  const double latency = Median(tally.latencies_ms);

  // Per-device memory; the MCUs' free RAM comes from their STATUS frames
  // through the owning worker (Worker.Status of the bridge).
  nlohmann::json mem = nlohmann::json::array();
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const auto& dev = cluster->devices[i];
    nlohmann::json row = {{"device", dev.name}, {"kind", DeviceKindName(dev.kind)}, {"address", endpoints[i].address},
                          {"memory_bytes", (*deployed)[i].memory_bytes}, {"weight_bytes", (*deployed)[i].weight_bytes},
                          {"program_bytes", (*deployed)[i].program_bytes}};
    if (dev.kind == DeviceKind::kMcu) {
      row["via"] = dev.via;
      row["serial"] = dev.serial;
      auto ch = OpenChannel(endpoints[i].address, TransportSecurity{});
      if (ch.ok()) {
        auto wstub = proto::Worker::NewStub(*ch);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        proto::StatusRequest sreq;
        proto::WorkerStatusReply sreply;
        if (wstub->Status(&ctx, sreq, &sreply).ok()) {
          const proto::McuState& m = sreply.mcu();
          row["mcu_status_present"] = sreply.has_mcu();
          row["mcu_arena_bytes"] = m.arena_bytes();
          row["mcu_free_ram_bytes"] = m.free_bytes();
          row["mcu_used_bytes"] = sreply.memory_bytes();
          row["mcu_runs"] = m.runs();
          row["mcu_last_run_ms"] = m.last_run_ms();
          row["mcu_plan_id"] = m.plan_id();
          row["uart_wire_bytes_sent"] = sreply.uart().wire_bytes_sent();
          row["uart_wire_bytes_received"] = sreply.uart().wire_bytes_received();
          row["uart_retransmissions"] = sreply.uart().retransmissions();
        }
      }
    }
    mem.push_back(row);
  }
  gateway->RefreshWorkerState();
  nlohmann::json jlinks = nlohmann::json::array();
  for (const auto& l : gateway->Links()) {
    const auto key = std::make_pair(l.from, l.to);
    const int64_t expected = expected_link_bytes.count(key) ? expected_link_bytes[key] * tally.answered : 0;
    const bool uart = cluster->devices[l.from].kind == DeviceKind::kMcu || cluster->devices[l.to].kind == DeviceKind::kMcu;
    jlinks.push_back({{"from", endpoints[l.from].name}, {"to", endpoints[l.to].name},
                      {"payload_bytes", l.payload_bytes}, {"wire_bytes", l.wire_bytes},
                      {"expected_payload_bytes", expected}, {"over_uart", uart}});
  }

  std::string placement_text;
  for (size_t j = 0; j < graph.nodes.size(); ++j)
    placement_text += (j ? ", " : "") + graph.nodes[j].name + "@" +
                      cluster->devices[placement->device_of_layer[j]].name;
  if (d.json) {
    nlohmann::json j = {{"devices", cluster->size()},
                        {"linux_workers", 2},
                        {"mcus", 2},
                        {"model", graph.name},
                        {"requests", d.requests},
                        {"answered", tally.answered},
                        {"all_match", all_match},
                        {"max_rel_diff", tally.max_rel},
                        {"latency_ms", latency},
                        {"predicted_latency_ms", placement->cost.latency_s * 1e3},
                        {"single_device_latency_ms", Median(single_ms)},
                        {"plan_id", plan_id},
                        {"forced_pipeline", placement->forced},
                        {"placement_note", placement->note},
                        {"placement", placement_text},
                        {"deploy_seconds", deploy_s},
                        {"device_memory", mem},
                        {"links", jlinks}};
    if (!tally.first_error.empty()) j["error"] = tally.first_error;
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("tessera demo --mcu 2 — %s on 2 Linux workers + 2 QEMU mps2-an386 MCUs (UART %u baud via ptys)\n",
                graph.name.c_str(), baud);
    if (!planner_table.empty()) std::printf("\nplanner (latency objective):\n%s", planner_table.c_str());
    std::printf("\n%s\nplacement: %s\n", placement->note.c_str(), placement_text.c_str());
    std::printf("plan %s deployed in %.2f s (MCU programs over the UART)\n\n", plan_id.c_str(), deploy_s);
    std::printf("%-6s %-6s %-22s %12s %12s %14s\n", "device", "kind", "address", "weights B", "memory B", "MCU free RAM B");
    for (const auto& row : mem)
      std::printf("%-6s %-6s %-22s %12lld %12lld %14s\n", row["device"].get<std::string>().c_str(),
                  row["kind"].get<std::string>().c_str(), row["address"].get<std::string>().c_str(),
                  static_cast<long long>(row["weight_bytes"].get<int64_t>()),
                  static_cast<long long>(row.contains("mcu_used_bytes") ? row["mcu_used_bytes"].get<int64_t>()
                                                                        : row["memory_bytes"].get<int64_t>()),
                  row.contains("mcu_free_ram_bytes") ? std::to_string(row["mcu_free_ram_bytes"].get<int64_t>()).c_str() : "-");
    std::printf("\n%-5s %-5s %14s %14s %s\n", "from", "to", "payload B", "expected B", "");
    for (const auto& l : jlinks)
      std::printf("%-5s %-5s %14lld %14lld %s\n", l["from"].get<std::string>().c_str(), l["to"].get<std::string>().c_str(),
                  static_cast<long long>(l["payload_bytes"].get<int64_t>()),
                  static_cast<long long>(l["expected_payload_bytes"].get<int64_t>()),
                  l["over_uart"].get<bool>() ? "(gRPC hop + UART to/from the MCU)" : "");
    for (const auto& row : mem)
      if (row.contains("uart_wire_bytes_sent"))
        std::printf("uart %s<->%s: %lld wire bytes to the MCU, %lld from it, %lld retransmissions\n",
                    row["via"].get<std::string>().c_str(), row["device"].get<std::string>().c_str(),
                    static_cast<long long>(row["uart_wire_bytes_sent"].get<int64_t>()),
                    static_cast<long long>(row["uart_wire_bytes_received"].get<int64_t>()),
                    static_cast<long long>(row["uart_retransmissions"].get<int64_t>()));
    std::printf("\nrequests: %d answered of %d, %d match the single-device run (max rel diff %.3g)\n", tally.answered,
                d.requests, tally.matched, tally.max_rel);
    std::printf("latency: predicted %.1f ms, measured %.1f ms median (single device in this process: %.3f ms)\n",
                placement->cost.latency_s * 1e3, latency, Median(single_ms));
    if (!tally.first_error.empty()) std::printf("first error: %s\n", tally.first_error.c_str());
  }
  return all_match ? 0 : 2;
#endif
}

}  // namespace

void RegisterDemoCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Run a local cluster of worker processes on loopback and check its answers");
  auto d = std::make_shared<DemoOptions>();
  cmd->add_option("--model", d->model, "Model to run (.cfg or .onnx)")->capture_default_str();
  cmd->add_option("--input-shape", d->input_shapes, "Input shape override, e.g. 1x3x160x160");
  cmd->add_option("--devices", d->devices, "Worker processes")->capture_default_str()->check(CLI::Range(1, kMaxWorkers));
  cmd->add_option("--threads", d->threads, "Intra-op threads per worker")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--requests", d->requests, "Inferences to send")->capture_default_str()->check(CLI::Range(1, 1000000));
  cmd->add_option("--clients", d->clients, "Concurrent clients")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--objective", d->objective, "Planner objective")->capture_default_str();
  cmd->add_option("--force", d->force, "Use a forced plan (ffmt|fdto|fdti|pairs|pipeline) instead of the planner");
  cmd->add_flag("--keep", d->keep, "Keep the demo's temporary directory (plan, worker data)");
  cmd->add_flag("--json", d->json, "Print JSON");
  cmd->add_option("--mcu", d->mcu,
                  "Mixed cluster: 2 Linux workers each owning one QEMU-emulated MCU (only 2 is supported), "
                  "keyword-spotting CNN, latency objective on the STM32 presets")
      ->check(CLI::Range(0, 2));
  cmd->add_flag("--unplug", d->unplug,
                "Kill the last worker (SIGKILL) half-way through the requests: the gateway fails over to the others "
                "and every request must still be answered correctly");
  cmd->callback([d] {
    if (int rc = RunDemo(*d)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
