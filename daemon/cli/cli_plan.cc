// `tessera plan MODEL (--cluster FILE | --devices N) --objective
// memory|communication|latency|throughput [--json] [--out plan.pb]
// [--solver ...]`: runs the planner (METHODS §3–§5) and prints the
// per-layer / per-device table or JSON, optionally writing the Plan protobuf.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/cluster/plan_fit.h"
#include "partition/graph/metrics.h"
#include "planner/cluster.h"
#include "planner/layer_profile.h"
#include "planner/plan.h"

namespace tessera {

namespace {

struct PlanCommandOptions {
  ModelOptions model;
  std::string cluster_path;
  int devices = 0;
  std::string objective = "memory";
  std::string solver;
  bool json = false;
  bool with_weights = false;
  std::string out_path;
  std::string layer_profile;
  std::string tile_profile;
  std::string compact_profile;
  std::string memory_flow = "10%";
  std::string parts_search = "greedy";
  FitOptions fit;
};

int RunPlan(const PlanCommandOptions& o) {
  if (o.cluster_path.empty() == (o.devices <= 0))
    return ReportError("plan", Status::InvalidArgument("give exactly one of --cluster FILE or --devices N (N ≥ 1)"));
  auto objective = ParseObjective(o.objective);
  if (!objective.ok()) return ReportError("plan", objective.status());
  Cluster cluster;
  if (!o.cluster_path.empty()) {
    auto loaded = LoadClusterFile(o.cluster_path);
    if (!loaded.ok()) return ReportError("plan", loaded.status());
    cluster = std::move(loaded).value();
  } else {
    cluster = UniformCluster(o.devices);
  }
  const bool genetic = o.parts_search == "genetic";
  // The genetic choice of parts calibrates its slowdowns by running the model.
  auto graph = LoadModel(o.model, /*shapes_only=*/!o.with_weights && !genetic);
  if (!graph.ok()) return ReportError("plan", graph.status());
  auto layers = ComputeLayerFigures(*graph);
  auto profiled = ApplyProfiles(o.layer_profile, o.tile_profile, &layers, o.compact_profile);
  if (!profiled.ok()) return ReportError("plan", profiled.status());
  const std::string time_model = *profiled;
  FitOptions fit = o.fit;
  if (o.memory_flow == "off") {
    fit.memory_flow = false;
  } else {
    auto overhead = ParseMacOverhead(o.memory_flow);
    if (!overhead.ok())
      return ReportError("plan",
                         Status::InvalidArgument("--memory-flow '" + o.memory_flow +
                                                 "': give the recomputed MACs allowed (10%, 0.1, none) or off"));
    fit.max_mac_overhead = *overhead;
  }
  PartsTimeModel parts_time;
  if (genetic) {
    fit.parts.memory = fit.memory;
    fit.parts.repeat = 3;
    fit.parts.progress = [](const std::string& line) {
      std::fprintf(stderr, "plan: parts search: %s\n", line.c_str());
    };
    auto calibrated = CalibratePartsTime(*graph, SingleDevicePlan(graph->nodes.size()), 0, fit.parts);
    if (!calibrated.ok()) return ReportError("plan", calibrated.status());
    parts_time = std::move(*calibrated);
    fit.parts.progress = nullptr;
    fit.parts_time = &parts_time;
  }
  PlanOptions options;
  options.objective = *objective;
  options.solver = o.solver;
  // The per-device RAM is sized by the workers' own code and checked
  // against every device's ram: (daemon/cluster/plan_fit.h, issue 11).
  auto plan = PlanWithinMemory(*graph, layers, cluster, options, fit);
  if (!plan.ok()) return ReportError("plan", plan.status().WithContext(o.model.model_path));
  plan->time_model = time_model;
  if (!o.out_path.empty()) {
    Status st = WritePlanProto(*plan, o.out_path);
    if (!st.ok()) return ReportError("plan", st);
  }
  if (o.json) std::printf("%s\n", PlanToJson(*plan).dump(1).c_str());
  else std::printf("%s", FormatPlanTable(*plan).c_str());
  return 0;
}

}  // namespace

void RegisterPlanCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Plan how a model is cut across a cluster (METHODS §3-§5)");
  auto o = std::make_shared<PlanCommandOptions>();
  o->model.AddTo(*cmd);
  cmd->add_option("--cluster", o->cluster_path, "Cluster YAML file (devices, links)");
  cmd->add_option("--devices", o->devices, "N identical devices with unlimited memory instead of a cluster file");
  cmd->add_option("--objective", o->objective, "memory | communication | latency | throughput")
      ->capture_default_str();
  cmd->add_option(
      "--solver", o->solver,
      "memory/communication: cbc (default) | exact; latency/throughput: exact (default) | dp | bnb | "
      "exhaustive | bisection | ga (genetic search, not proven optimal; see bench/planner) | tiled (the tiled plan: "
      "every tileable layer cut into row tiles, halos exchanged)");
  cmd->add_option("--threads", o->fit.memory.threads, "The workers' --threads (sizes their per-thread scratch)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--in-flight", o->fit.memory.in_flight,
                  "Requests each worker runs at once (each needs its own pipeline buffers)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--compute-slots", o->fit.memory.compute_slots,
                  "The workers' --compute-slots (working memories shared by the requests in flight)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--memory-flow", o->memory_flow,
                  "A device over its ram: may compute stretches of its layers as tiles in turn, recomputing at most "
                  "this share of their MACs (10%, 0.1, none), or off")
      ->capture_default_str();
  cmd->add_option("--parts-search", o->parts_search,
                  "A device over its RAM: greedy tiles and parts (the memory flow), or genetic: the layers it "
                  "processes in parts chosen by a genetic search (slowdowns calibrated by running the model here)")
      ->capture_default_str()
      ->check(CLI::IsMember({"greedy", "genetic"}));
  cmd->add_flag("--json", o->json, "Print JSON instead of a table");
  cmd->add_flag("--with-weights", o->with_weights,
                "Import the weights too (plan reads shapes only; the plan is the same, this checks it)");
  cmd->add_option("--out", o->out_path, "Write the Plan protobuf here (plan.pb)");
  cmd->add_option("--layer-profile", o->layer_profile,
                  "Per-layer times of this model (`tessera run MODEL --profile --json > FILE`, any machine): each "
                  "layer's compute time follows its measured share instead of its MAC count");
  cmd->add_option("--tile-profile", o->tile_profile,
                  "Measured row tiles (`tessera run MODEL --plan PLAN --profile --json > FILE`): the tiled plan "
                  "prices a tile of r rows at its measured time instead of r/H of its layer's");
  cmd->add_option("--compact-profile", o->compact_profile,
                  "Per-layer times without Winograd (`tessera run MODEL --compact-weights --profile --json > FILE`, "
                  "same machine as --layer-profile, which it needs): a device given compact weights to fit its RAM "
                  "has its convs priced at that speed");
  cmd->callback([o] {
    if (int rc = RunPlan(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
