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
#include "daemon/cli/cli_demo.h"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/cli/demo_support.h"
#include "daemon/cluster/gateway.h"
#include "daemon/cluster/gateway_plan.h"
#include "daemon/runtime/device_memory.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/metrics.h"
#include "planner/cluster.h"
#include "util/quantity.h"

namespace tessera {

namespace {

using demo::LocalGateway;
using demo::Reference;
using demo::RequestTally;

struct PlanForDemo {
  std::string plan_id, table;
  std::vector<DeviceProgram> programs;
  std::vector<int64_t> predicted_sent_bytes;
  bool planner_used = false;
  // Per device: what its worker was promised to hold (issue 11 item 5:
  // printed beside the measured peak RSS).
  std::vector<DeviceMemory> memory;
  std::vector<int> tiled_stretches;  // per device, planner plans only
  std::vector<int64_t> ram_bytes;    // per device: its ram: (planner plans only)
};

// The demo's figures after the requests, for the table and the JSON.
struct DemoReport {
  RequestTally tally;
  double wall_s = 0, deploy_s = 0, single_latency_ms = 0;
  nlohmann::json links = nlohmann::json::array(), memory = nlohmann::json::array();
  int64_t measured_payload = 0, measured_wire = 0, expected_total = 0, predicted_per_request = 0;
};

Result<Graph> LoadDemoModel(const DemoOptions& d) {
  if (!std::filesystem::exists(d.model))
    return Status::NotFound(d.model + " does not exist; install Debian's 'darknet' package "
                                      "(deploy/install-deps.sh) or pass --model FILE");
  if (d.devices < 1 || d.devices > demo::kMaxChildren)
    return Status::InvalidArgument("--devices must be 1.." + std::to_string(demo::kMaxChildren));
  ModelOptions mo;
  mo.model_path = d.model;
  mo.input_shapes = d.input_shapes;
  mo.with_models = d.with_models;
  return LoadModel(mo);
}

// The planner's plan for the workers (it may re-address them: *endpoints).
Result<PlanForDemo> PlanWithPlanner(const Graph& graph, const DemoOptions& d, const std::string& dir,
                                    std::vector<WorkerEndpoint>* endpoints) {
  ServePlanOptions so;
  so.objective = d.objective;
  so.work_dir = dir;
  so.memory.threads = d.threads;
  so.memory.in_flight = std::max(1, d.clients);  // the demo's gateway runs that many at once
  if (!d.ram.empty()) {
    TS_ASSIGN_OR_RETURN(so.loopback_ram_bytes, ParseByteSize(d.ram));
  }
  TS_ASSIGN_OR_RETURN(ServedPlan served, PrepareLoopbackPlan(graph, *endpoints, so));
  PlanForDemo pd;
  pd.plan_id = served.plan_id;
  pd.table = served.table;
  pd.programs = std::move(served.programs);
  pd.predicted_sent_bytes = served.predicted_sent_bytes;
  pd.memory = served.memory;
  pd.planner_used = true;
  // Stretches of layers a device computes alone as tiles in turn to fit its
  // ram: (the one-device memory flow, plan_fit.h): runs of FFMT layers on
  // that device alone.
  pd.tiled_stretches.assign(served.plan.num_devices, 0);
  for (size_t k = 0; k < served.plan.layers.size(); ++k) {
    const LayerAssignment& l = served.plan.layers[k];
    const bool alone = l.scheme == LayerScheme::kFfmt && l.devices.size() == 1;
    const bool continues = k > 0 && served.plan.layers[k - 1].scheme == LayerScheme::kFfmt &&
                           served.plan.layers[k - 1].devices == l.devices;
    if (alone && !continues && l.devices[0] < served.plan.num_devices) ++pd.tiled_stretches[l.devices[0]];
  }
  pd.ram_bytes = served.ram_bytes;
  *endpoints = served.workers;
  return pd;
}

// --force SCHEME (or the planner's fallback): a forced plan over every worker.
Result<PlanForDemo> PlanForced(const Graph& graph, const DemoOptions& d) {
  const std::string scheme_name = d.force.empty() ? "ffmt" : d.force;
  ForcedPlanOptions fo;
  fo.devices = d.devices;
  fo.grid_rows = d.devices;
  TS_ASSIGN_OR_RETURN(ForcedScheme scheme, ParseForcedScheme(scheme_name));
  TS_ASSIGN_OR_RETURN(PartitionPlan forced, MakeForcedPlan(graph, scheme, fo));
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, forced));
  PlanForDemo pd;
  pd.programs = std::move(compiled.programs);
  for (const DeviceProgram& program : pd.programs) {
    TS_ASSIGN_OR_RETURN(DeviceMemory m, SizeDeviceProgram(program, {d.threads, std::max(1, d.clients)}));
    pd.memory.push_back(m);
  }
  pd.plan_id = "forced-" + scheme_name + "-" + std::to_string(d.devices);
  pd.table = "forced plan: " + scheme_name + " over " + std::to_string(d.devices) + " devices\n";
  return pd;
}

Result<PlanForDemo> MakeDemoPlan(const Graph& graph, const DemoOptions& d, const std::string& dir,
                                 std::vector<WorkerEndpoint>* endpoints) {
  if (!d.force.empty()) return PlanForced(graph, d);
  auto planned = PlanWithPlanner(graph, d, dir, endpoints);
  if (planned.ok()) return planned;
  // A forced plan ignores ram:; with --ram the planner's refusal is the answer.
  if (!d.ram.empty()) return planned.status();
  spdlog::warn("the planner could not plan the demo ({}); using a forced FFMT plan", planned.status().ToString());
  return PlanForced(graph, d);
}

// Deploys with a progress bar on stderr (not with --json).
Result<std::vector<DeployedDevice>> DeployWithProgress(const PlanForDemo& pd,
                                                       const std::vector<WorkerEndpoint>& endpoints, bool quiet) {
  int last_percent = -1;
  auto deployed = DeployPrograms(pd.programs, pd.plan_id, 0, endpoints, TransportSecurity{},
                                 [&](int64_t sent, int64_t total) {
                                   const int percent = total ? static_cast<int>(100 * sent / total) : 100;
                                   if (!quiet && percent / 5 != last_percent / 5) {
                                     std::fprintf(stderr, "\rdeploy [%-20s] %3d%%",
                                                  std::string(percent / 5, '#').c_str(), percent);
                                     last_percent = percent;
                                   }
                                 });
  if (!quiet) std::fprintf(stderr, "\n");
  return deployed;
}

// The gateway's options; with --unplug, failover plans again for the workers
// still alive (the planner, as at start) and deploys, and the gateway swaps
// plans and retries the request.
GatewayOptions DemoGatewayOptions(const Graph& graph, const DemoOptions& d, const PlanForDemo& pd,
                                  const std::vector<WorkerEndpoint>& endpoints,
                                  const std::map<std::pair<int, int>, int64_t>& link_bytes, const std::string& dir) {
  GatewayOptions go;
  go.served = {pd.plan_id, 0, endpoints, link_bytes};
  go.signature = ModelSignature::Of(graph);
  go.max_in_flight = std::max(1, d.clients);
  if (!d.unplug) return go;
  const Graph* model = &graph;  // outlives the gateway (RunDemo's local)
  go.failover = [model, endpoints, dir, objective = d.objective,
                 ram = d.ram](const std::vector<std::string>& down) -> Result<ServedCluster> {
    std::vector<WorkerEndpoint> alive;
    for (const auto& w : endpoints)
      if (std::find(down.begin(), down.end(), w.name) == down.end()) alive.push_back(w);
    ServePlanOptions so;
    so.objective = objective;
    so.work_dir = dir;
    so.probe_timeout = std::chrono::milliseconds(1000);
    if (!ram.empty()) {
      TS_ASSIGN_OR_RETURN(so.loopback_ram_bytes, ParseByteSize(ram));
    }
    TS_ASSIGN_OR_RETURN(ServedPlan next, PrepareLoopbackPlan(*model, alive, so));
    return DeployServedPlan(next, TransportSecurity{});
  };
  return go;
}

// d.clients threads send d.requests requests through the gateway's gRPC API;
// with --unplug the last worker is killed (SIGKILL, no goodbye) when half the
// requests have been sent, while others are in flight.
void SendRequests(LocalGateway& local, const Reference& ref, const DemoOptions& d,
                  const std::vector<WorkerEndpoint>& endpoints, const std::vector<int>& worker_slots,
                  DemoReport* report) {
  std::atomic<bool> unplugged{false};
  const int unplug_at = d.requests / 2;
  const int kinds = static_cast<int>(ref.inputs.size());
  auto maybe_unplug = [&](int r) {
    if (!d.unplug || r != unplug_at || unplugged.exchange(true)) return;
    const int victim = d.devices - 1;
    if (!d.json)
      std::fprintf(stderr, "unplugging %s (%s) before request %d\n", endpoints[victim].name.c_str(),
                   endpoints[victim].address.c_str(), r + 1);
    demo::KillChild(worker_slots[victim], SIGKILL);
  };
  std::mutex mu;
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
        Status st = demo::InferThroughGateway(*local.stub, ref.inputs[k], static_cast<uint64_t>(r) + 1, 120000,
                                              &outputs, &ms);
        std::lock_guard<std::mutex> lock(mu);
        report->tally.Record(st, outputs, ref.outputs[k], ms);
      }
    });
  for (auto& t : clients) t.join();
  report->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Bytes per link, measured by the gateway's counters, against the programs'
// Send steps. After a failover the counters are the new plan's (its device
// numbers): the first plan's expected bytes no longer apply.
void ReportLinks(Gateway& gateway, std::map<std::pair<int, int>, int64_t> expected_link_bytes, DemoReport* report) {
  gateway.RefreshWorkerState();
  const bool replanned = gateway.failovers() > 0;
  const std::vector<WorkerEndpoint> names = gateway.Served().workers;
  const int answered = report->tally.answered;
  for (const auto& l : gateway.Links()) {
    const auto key = std::make_pair(l.from, l.to);
    const int64_t expected = !replanned && expected_link_bytes.count(key) ? expected_link_bytes[key] : 0;
    report->measured_payload += l.payload_bytes;
    report->measured_wire += l.wire_bytes;
    report->expected_total += expected * answered;
    report->links.push_back(
        {{"from", names[l.from].name},
         {"to", names[l.to].name},
         {"payload_bytes", l.payload_bytes},
         {"wire_bytes", l.wire_bytes},
         {"expected_payload_bytes", expected * answered},
         {"wire_over_expected", expected ? static_cast<double>(l.wire_bytes) / (expected * answered) : 0.0}});
  }
}

// Promised vs measured memory per worker (issue 11 item 5).
void ReportMemory(const std::vector<DeployedDevice>& deployed, const std::vector<WorkerEndpoint>& endpoints,
                  const PlanForDemo& pd, DemoReport* report) {
  for (size_t i = 0; i < deployed.size(); ++i) {
    const auto status = demo::WorkerStatus(endpoints[i].address);
    const int64_t promised = i < pd.memory.size() ? pd.memory[i].total_bytes() : 0;
    const int64_t peak = status ? status->peak_rss_bytes() : 0;
    report->memory.push_back(
        {{"device", endpoints[i].name},
         {"address", endpoints[i].address},
         {"memory_bytes", deployed[i].memory_bytes},
         {"weight_bytes", deployed[i].weight_bytes},
         {"program_bytes", deployed[i].program_bytes},
         {"peak_in_flight", status ? status->peak_in_flight() : -1},
         {"promised_bytes", promised},
         {"peak_rss_bytes", peak},
         {"rss_bytes", status ? status->rss_bytes() : 0},
         {"peak_over_promised", promised > 0 ? static_cast<double>(peak) / promised : 0.0},
         {"tiled_stretches", i < pd.tiled_stretches.size() ? pd.tiled_stretches[i] : 0},
         {"ram_bytes", i < pd.ram_bytes.size() && pd.ram_bytes[i] != kUnlimitedBytes ? nlohmann::json(pd.ram_bytes[i])
                                                                                     : nlohmann::json(nullptr)}});
  }
}

void PrintDemoJson(const DemoOptions& d, const PlanForDemo& pd, const DemoReport& r, Gateway& gateway,
                   const std::vector<WorkerEndpoint>& endpoints) {
  const double latency = demo::Median(r.tally.latencies_ms);
  nlohmann::json j = {{"devices", d.devices},
                      {"requests", d.requests},
                      {"answered", r.tally.answered},
                      {"all_match", r.tally.AllMatch(d.requests)},
                      {"max_rel_diff", r.tally.max_rel},
                      {"latency_ms", latency},
                      {"single_device_latency_ms", r.single_latency_ms},
                      {"throughput_per_s", r.wall_s > 0 ? r.tally.answered / r.wall_s : 0},
                      {"single_device_throughput_per_s", r.single_latency_ms > 0 ? 1000.0 / r.single_latency_ms : 0.0},
                      {"clients", d.clients},
                      {"model", d.model},
                      {"plan_id", pd.plan_id},
                      {"planner", pd.planner_used},
                      {"deploy_seconds", r.deploy_s},
                      {"links", r.links},
                      {"measured_payload_bytes", r.measured_payload},
                      {"measured_wire_bytes", r.measured_wire},
                      {"expected_payload_bytes", r.expected_total},
                      {"planner_predicted_bytes_per_request", r.predicted_per_request},
                      {"failovers", gateway.failovers()},
                      {"final_devices", gateway.Served().workers.size()}};
  if (d.unplug) j["unplugged"] = endpoints[d.devices - 1].name;
  j["device_memory"] = r.memory;
  if (!r.tally.first_error.empty()) j["error"] = r.tally.first_error;
  std::printf("%s\n", j.dump(1).c_str());
}

void PrintMemoryTable(const PlanForDemo& pd, const DemoReport& r) {
  std::printf("%-6s %-22s %12s %12s %12s %12s %12s %9s %9s %6s\n", "device", "address", "weights MiB", "working MiB",
              "program MiB", "promised MiB", "peak RSS MiB", "peak/prom", "ram MiB", "tiled");
  for (const auto& row : r.memory) {
    const double promised = row["promised_bytes"].get<int64_t>() / 1048576.0;
    const double peak = row["peak_rss_bytes"].get<int64_t>() / 1048576.0;
    char ram[32] = "-";
    if (!row["ram_bytes"].is_null())
      std::snprintf(ram, sizeof ram, "%.2f", row["ram_bytes"].get<int64_t>() / 1048576.0);
    std::printf("%-6s %-22s %12.2f %12.2f %12.2f %12.2f %12.2f %9.2f %9s %6d\n",
                row["device"].get<std::string>().c_str(), row["address"].get<std::string>().c_str(),
                row["weight_bytes"].get<int64_t>() / 1048576.0, row["memory_bytes"].get<int64_t>() / 1048576.0,
                row["program_bytes"].get<int64_t>() / 1048576.0, promised, peak, promised > 0 ? peak / promised : 0.0,
                ram, row["tiled_stretches"].get<int>());
  }
  std::printf(
      "promised = worker baseline + max(weights as stored + %d x (arena + request I/O), weights while "
      "loading); peak RSS = the worker's VmHWM (Worker.GetStatus); tiled = stretches of layers the device "
      "computes as tiles in turn to fit its ram: (--ram)\n",
      pd.memory.empty() ? 1 : pd.memory[0].in_flight);
}

void PrintLinkTable(const DemoReport& r) {
  std::printf("\n%-5s %-5s %16s %16s %16s %8s\n", "from", "to", "payload bytes", "expected bytes", "wire bytes",
              "wire/exp");
  for (const auto& l : r.links)
    std::printf("%-5s %-5s %16lld %16lld %16lld %8.4f\n", l["from"].get<std::string>().c_str(),
                l["to"].get<std::string>().c_str(), static_cast<long long>(l["payload_bytes"].get<int64_t>()),
                static_cast<long long>(l["expected_payload_bytes"].get<int64_t>()),
                static_cast<long long>(l["wire_bytes"].get<int64_t>()), l["wire_over_expected"].get<double>());
  std::printf("total: %lld payload bytes (expected %lld), %lld on the wire; planner predicted %lld bytes/request\n",
              static_cast<long long>(r.measured_payload), static_cast<long long>(r.expected_total),
              static_cast<long long>(r.measured_wire), static_cast<long long>(r.predicted_per_request));
}

void PrintDemoTable(const DemoOptions& d, const Graph& graph, const PlanForDemo& pd, const DemoReport& r,
                    Gateway& gateway, const std::vector<WorkerEndpoint>& endpoints) {
  const ModelTotals totals = ComputeTotals(ComputeLayerFigures(graph));
  const double single = r.single_latency_ms;
  std::printf("tessera demo — %s, %.2f MiB weights, %.2f GMACs, on %d worker processes (loopback)\n",
              d.model.c_str(), totals.weights * 4.0 / 1048576.0, totals.macs / 1e9, d.devices);
  std::printf("\n%s", pd.table.c_str());
  std::printf("\nplan %s deployed in %.2f s\n", pd.plan_id.c_str(), r.deploy_s);
  PrintMemoryTable(pd, r);
  PrintLinkTable(r);
  std::printf("\nrequests: %d answered of %d (%d clients), %d match the single-device run (max rel diff %.3g)\n",
              r.tally.answered, d.requests, d.clients, r.tally.matched, r.tally.max_rel);
  std::printf("latency: %.2f ms median on %d devices, %.2f ms on one device (this process)\n",
              demo::Median(r.tally.latencies_ms), d.devices, single);
  std::printf("throughput: %.2f inferences/s vs %.2f on one device\n", r.wall_s > 0 ? r.tally.answered / r.wall_s : 0,
              single > 0 ? 1000.0 / single : 0.0);
  std::printf("(loopback: no bandwidth limit and all workers share this machine's cores)\n");
  if (d.unplug)
    std::printf("unplugged %s half-way: %lld failover(s), the last requests ran on %zu workers (plan %s)%s\n",
                endpoints[d.devices - 1].name.c_str(), static_cast<long long>(gateway.failovers()),
                gateway.Served().workers.size(), gateway.Served().plan_id.c_str(),
                r.tally.AllMatch(d.requests) ? "; every request was answered correctly" : "");
  if (!r.tally.first_error.empty()) std::printf("first error: %s\n", r.tally.first_error.c_str());
}

}  // namespace

int RunDemo(const DemoOptions& d) {
  if (d.mcu > 0) return RunMixedDemo(d);
  auto graph = LoadDemoModel(d);
  if (!graph.ok()) return ReportError("demo", graph.status());
  // The oracle: the whole model on one device, a few distinct inputs.
  auto ref = demo::RunReference(*graph, d.threads, std::min(d.requests, 4), 3);
  if (!ref.ok()) return ReportError("demo", ref.status());
  DemoReport report;
  report.single_latency_ms = demo::Median(ref->ms);

  // The local cluster.
  auto demo_dir = demo::DemoDirectory::Create("tessera-demo", d.keep);
  if (!demo_dir.ok()) return ReportError("demo", demo_dir.status());
  const std::string dir = (*demo_dir)->path();
  demo::ChildProcesses children;
  std::vector<int> worker_slots;
  auto addresses = demo::StartWorkers(d.devices, dir, d.threads, {}, &worker_slots);
  if (!addresses.ok()) return ReportError("demo", addresses.status());
  std::vector<WorkerEndpoint> endpoints;
  for (int i = 0; i < d.devices; ++i) endpoints.push_back({"w" + std::to_string(i + 1), (*addresses)[i]});

  auto pd = MakeDemoPlan(*graph, d, dir, &endpoints);
  if (!pd.ok()) return ReportError("demo", pd.status());
  for (int64_t b : pd->predicted_sent_bytes) report.predicted_per_request += b;
  // The payload bytes each link carries for one request: the programs' Send steps.
  const auto expected_link_bytes = PlannedLinkBytes(pd->programs);

  const auto td = std::chrono::steady_clock::now();
  auto deployed = DeployWithProgress(*pd, endpoints, d.json);
  if (!deployed.ok()) return ReportError("demo", deployed.status());
  report.deploy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - td).count();

  auto local = demo::StartLocalGateway(DemoGatewayOptions(*graph, d, *pd, endpoints, expected_link_bytes, dir));
  if (!local.ok()) return ReportError("demo", local.status());
  Gateway& gateway = *(*local)->gateway;
  SendRequests(**local, *ref, d, endpoints, worker_slots, &report);
  ReportLinks(gateway, expected_link_bytes, &report);
  ReportMemory(*deployed, endpoints, *pd, &report);
  if (d.json)
    PrintDemoJson(d, *pd, report, gateway, endpoints);
  else
    PrintDemoTable(d, *graph, *pd, report, gateway, endpoints);
  return report.tally.AllMatch(d.requests) ? 0 : 2;
}

void RegisterDemoCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Run a local cluster of worker processes on loopback and check its answers");
  auto d = std::make_shared<DemoOptions>();
  cmd->add_option("--model", d->model, "Model to run (.cfg or .onnx)")->capture_default_str();
  cmd->add_option("--input-shape", d->input_shapes, "Input shape override, e.g. 1x3x160x160");
  cmd->add_option("--with-model", d->with_models,
                  "A further model every request runs too, merged with --model into one graph with identical layers "
                  "shared (repeatable)");
  cmd->add_option("--devices", d->devices, "Worker processes")
      ->capture_default_str()
      ->check(CLI::Range(1, demo::kMaxChildren));
  cmd->add_option("--threads", d->threads, "Intra-op threads per worker")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--requests", d->requests, "Inferences to send")->capture_default_str()->check(CLI::Range(1, 1000000));
  cmd->add_option("--clients", d->clients, "Concurrent clients")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--objective", d->objective, "Planner objective")->capture_default_str();
  cmd->add_option("--force", d->force,
                  "Use a forced plan (ffmt|fdto|fdti|pairs|pipeline) instead of the planner; with --mcu the split "
                  "layers run on the MCUs too (tiles and weight slices, in phases)");
  cmd->add_option("--ram", d->ram,
                  "ram: of every worker, e.g. 56MiB: the planner fits the plan into it (compact weights, layers as "
                  "tiles in turn, less work on it) or the demo stops naming the device short of it");
  cmd->add_flag("--keep", d->keep, "Keep the demo's temporary directory (plan, worker data)");
  cmd->add_flag("--json", d->json, "Print JSON");
  cmd->add_option("--mcu", d->mcu,
                  "Mixed cluster: 2 Linux workers owning N QEMU-emulated MCUs in turn (1-4), keyword-spotting CNN "
                  "(or --model), latency objective on the STM32 presets (or --force)")
      ->check(CLI::Range(0, 4));
  cmd->add_option("--mcu-preset", d->mcu_preset,
                  "With --mcu: every MCU's preset (../devices stm32.yaml, e.g. STM32F401RB); default STM32H743ZI and "
                  "STM32F446RE in turn. The plan must fit its flash and RAM");
  cmd->add_flag("--mcu-chain", d->mcu_chain,
                "With --mcu 2 or more: join the MCUs UART-to-UART in a chain (UART1 of mcuK to UART2 of mcuK+1, "
                "no Linux board in between); the cluster file gets these direct links, the planner prices them "
                "and tensors between neighbouring MCUs take them");
  cmd->add_flag("--mcu-only", d->mcu_only,
                "With --mcu: every layer on the MCUs (the fastest contiguous pipeline over them within their flash "
                "and RAM; where no MCU holds an early layer whole, a stem in row tiles over several MCUs first); the "
                "first Linux worker only sends the input and takes the answer");
  cmd->add_flag("--unplug", d->unplug,
                "Kill the last worker (SIGKILL) half-way through the requests: the gateway fails over to the others "
                "and every request must still be answered correctly");
  cmd->callback([d] {
    if (int rc = RunDemo(*d)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
