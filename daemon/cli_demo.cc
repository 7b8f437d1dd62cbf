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
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon/cli.h"
#include "daemon/cli_model_options.h"
#include "daemon/executor.h"
#include "daemon/gateway.h"
#include "daemon/seeded_input.h"
#include "daemon/worker_tensor.h"
#include "partition/forced_plan.h"
#include "partition/metrics.h"
#include "partition/program_compiler.h"
#ifdef TESSERA_HAVE_PLANNER
#include "daemon/gateway_plan.h"
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

Result<std::vector<std::string>> StartWorkers(int n, const std::string& dir, int threads) {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const std::string level = spdlog::level::to_string_view(spdlog::get_level()).data();
  for (int i = 0; i < n; ++i) {
    const std::string name = "w" + std::to_string(i + 1);
    const std::string port_file = dir + "/" + name + ".port";
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return Status::FromErrno(errno, "fork");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      const std::string t = std::to_string(threads), data = dir + "/" + name;
      execl("/proc/self/exe", "tessera", "--log-level", level.c_str(), "worker", "--listen", "127.0.0.1:0", "--name",
            name.c_str(), "--port-file", port_file.c_str(), "--data-dir", data.c_str(), "--threads", t.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    g_workers[i] = pid;
    g_num_workers = i + 1;
  }
  std::vector<std::string> addresses(n);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; i < n; ++i) {
    const std::string port_file = dir + "/w" + std::to_string(i + 1) + ".port";
    while (!std::filesystem::exists(port_file)) {
      int wstatus = 0;
      if (waitpid(g_workers[i], &wstatus, WNOHANG) == g_workers[i]) {
        g_workers[i] = 0;
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
};

int RunDemo(const DemoOptions& d) {
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
  char dir_template[] = "/tmp/tessera-demo-XXXXXX";
  if (!mkdtemp(dir_template)) return ReportError("demo", Status::FromErrno(errno, "mkdtemp"));
  const std::string dir = dir_template;
  struct DirCleanup {
    std::string dir;
    bool keep;
    ~DirCleanup() {
      std::error_code ec;
      if (!keep) std::filesystem::remove_all(dir, ec);
    }
  } dir_cleanup{dir, d.keep};
  WorkerProcesses workers_guard;
  auto addresses = StartWorkers(d.devices, dir, d.threads);
  if (!addresses.ok()) return ReportError("demo", addresses.status());
  std::vector<WorkerEndpoint> endpoints;
  for (int i = 0; i < d.devices; ++i) endpoints.push_back({"w" + std::to_string(i + 1), (*addresses)[i]});

  PlanForDemo pd;
#ifdef TESSERA_HAVE_PLANNER
  if (d.force.empty()) {
    ServePlanOptions so;
    so.objective = d.objective;
    so.work_dir = dir;
    auto served = PrepareLoopbackPlan(*graph, endpoints, so);
    if (served.ok()) {
      pd.plan_id = served->plan_id;
      pd.table = served->table;
      pd.programs = std::move(served->programs);
      pd.predicted_sent_bytes = served->predicted_sent_bytes;
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
    pd.plan_id = "forced-" + (d.force.empty() ? std::string("ffmt") : d.force) + "-" + std::to_string(d.devices);
    pd.table = "forced plan: " + (d.force.empty() ? std::string("ffmt") : d.force) + " over " +
               std::to_string(d.devices) + " devices\n";
  }

  // The payload bytes each link carries for one request: the programs' Send steps.
  std::map<std::pair<int, int>, int64_t> expected_link_bytes;
  for (const auto& p : pd.programs)
    for (const auto& s : p.steps)
      if (s.kind == StepKind::kSend) expected_link_bytes[std::make_pair(p.device, s.peer)] += s.bytes();

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
  go.workers = endpoints;
  go.plan_id = pd.plan_id;
  go.signature = ModelSignature::Of(*graph);
  go.max_in_flight = std::max(1, d.clients);
  auto gateway = Gateway::Create(go);
  if (!gateway.ok()) return ReportError("demo", gateway.status());
  GatewayService service(gateway->get());
  std::string gateway_address;
  auto server = StartGatewayServer(&service, "127.0.0.1:0", TransportSecurity{}, &gateway_address);
  if (!server.ok()) return ReportError("demo", server.status());
  auto channel = OpenChannel(gateway_address, TransportSecurity{});
  if (!channel.ok()) return ReportError("demo", channel.status());
  auto stub = proto::Gateway::NewStub(*channel);

  std::mutex mu;
  std::vector<double> latencies;
  double max_rel = 0;
  int answered = 0, matched = 0;
  std::string first_error;
  std::atomic<int> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < std::max(1, d.clients); ++c)
    clients.emplace_back([&] {
      for (int r; (r = next++) < d.requests;) {
        const int k = r % kinds;
        proto::InferRequest req;
        req.set_request_id(static_cast<uint64_t>(r) + 1);
        req.set_deadline_unix_ms(UnixMillisNow() + 120000);
        for (const auto& t : inputs[k]) *req.add_inputs() = ToTensorMsg(t);
        grpc::ClientContext ctx;
        proto::InferReply reply;
        const auto s0 = std::chrono::steady_clock::now();
        grpc::Status gs = stub->Infer(&ctx, req, &reply);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
        std::vector<TensorData> outputs;
        Status st = FromGrpcStatus(gs, "Infer");
        for (int o = 0; st.ok() && o < reply.outputs_size(); ++o) {
          auto t = FromTensorMsg(reply.outputs(o), "output");
          if (!t.ok()) st = t.status(); else outputs.push_back(std::move(*t));
        }
        std::lock_guard<std::mutex> lock(mu);
        if (!st.ok()) {
          if (first_error.empty()) first_error = st.ToString();
          continue;
        }
        ++answered;
        latencies.push_back(ms);
        const double rel = Differences(outputs, reference[k]).second;
        max_rel = std::max(max_rel, rel);
        if (rel <= 1e-5) ++matched;
      }
    });
  for (auto& t : clients) t.join();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool all_match = answered == d.requests && matched == d.requests;
  const double latency = Median(latencies);
  const double throughput = wall_s > 0 ? answered / wall_s : 0;

  (*gateway)->RefreshWorkerState();
  const auto links = (*gateway)->Links();
  int64_t measured_payload = 0, measured_wire = 0, expected_total = 0;
  nlohmann::json jlinks = nlohmann::json::array();
  for (const auto& l : links) {
    const int64_t expected = expected_link_bytes.count(std::make_pair(l.from, l.to)) ? expected_link_bytes[std::make_pair(l.from, l.to)] : 0;
    measured_payload += l.payload_bytes;
    measured_wire += l.wire_bytes;
    expected_total += expected * answered;
    jlinks.push_back({{"from", endpoints[l.from].name}, {"to", endpoints[l.to].name},
                      {"payload_bytes", l.payload_bytes}, {"wire_bytes", l.wire_bytes},
                      {"expected_payload_bytes", expected * answered},
                      {"wire_over_expected", expected ? static_cast<double>(l.wire_bytes) / (expected * answered) : 0.0}});
  }
  int64_t predicted_per_request = 0;
  for (int64_t b : pd.predicted_sent_bytes) predicted_per_request += b;

  server->get()->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  if (d.json) {
    nlohmann::json j = {{"devices", d.devices},
                        {"requests", d.requests},
                        {"answered", answered},
                        {"all_match", all_match},
                        {"max_rel_diff", max_rel},
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
                        {"planner_predicted_bytes_per_request", predicted_per_request}};
    nlohmann::json mem = nlohmann::json::array();
    for (size_t i = 0; i < deployed->size(); ++i)
      mem.push_back({{"device", endpoints[i].name}, {"address", endpoints[i].address},
                     {"memory_bytes", (*deployed)[i].memory_bytes}, {"weight_bytes", (*deployed)[i].weight_bytes},
                     {"program_bytes", (*deployed)[i].program_bytes}});
    j["device_memory"] = mem;
    if (!first_error.empty()) j["error"] = first_error;
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("tessera demo — %s, %.2f MiB weights, %.2f GMACs, on %d worker processes (loopback)\n",
                d.model.c_str(), totals.weights * 4.0 / 1048576.0, totals.macs / 1e9, d.devices);
    std::printf("\n%s", pd.table.c_str());
    std::printf("\nplan %s deployed in %.2f s\n", pd.plan_id.c_str(), deploy_s);
    std::printf("%-6s %-22s %14s %14s %14s\n", "device", "address", "weights MiB", "working MiB", "program MiB");
    for (size_t i = 0; i < deployed->size(); ++i)
      std::printf("%-6s %-22s %14.2f %14.2f %14.2f\n", endpoints[i].name.c_str(), endpoints[i].address.c_str(),
                  (*deployed)[i].weight_bytes / 1048576.0, (*deployed)[i].memory_bytes / 1048576.0,
                  (*deployed)[i].program_bytes / 1048576.0);
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
                answered, d.requests, d.clients, matched, max_rel);
    std::printf("latency: %.2f ms median on %d devices, %.2f ms on one device (this process)\n", latency, d.devices,
                single_latency);
    std::printf("throughput: %.2f inferences/s vs %.2f on one device\n", throughput,
                single_latency > 0 ? 1000.0 / single_latency : 0.0);
    std::printf("(loopback: no bandwidth limit and all workers share this machine's cores)\n");
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  return all_match ? 0 : 2;
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
  cmd->callback([d] {
    if (int rc = RunDemo(*d)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
