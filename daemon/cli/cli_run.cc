// `tessera run MODEL [--input x.npy]... [--output y.npy]... [--threads N]`:
// the single-device reference run, the oracle for every distributed result.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/isa.h"
#include "daemon/runtime/npy.h"
#include "daemon/runtime/program_runner.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/program_compiler.h"
#include "planner/arena_milp.h"
#include "planner/plan_file.h"
#include "util/quantity.h"

namespace tessera {

namespace {

struct RunOptions {
  ModelOptions model;
  std::vector<std::string> inputs, outputs;
  int threads = 1;
  int repeat = 1;
  int warmup = 0;
  bool json = false;
  bool profile = false;   // per-node times of the timed runs
  int profile_nodes = 12;  // how many of the slowest nodes --profile lists
  std::string plan_path;
  std::string force;      // ffmt|fdto|fdti|pairs|pipeline
  int devices = 2;        // with --force
  std::string grid = "2x2";  // with --force ffmt: RxC
  std::string arena_layout = "best";  // best | greedy-by-size | milp (METHODS §6)
  double arena_time_limit = 10.0;     // seconds for the MILP
  bool no_segments = false;           // ExecutorOptions::segments off
  bool compact_weights = false;       // every Conv keeps raw-size weights (no Winograd)
};

// max |a − b| and max |a − b| / max |b| over all outputs (relative to the
// largest reference magnitude, so values near zero do not blow it up).
std::pair<double, double> Differences(const std::vector<TensorData>& got, const std::vector<TensorData>& want) {
  double max_abs = 0, max_ref = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].values.size(); ++k) {
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(got[i].values[k] - want[i].values[k])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[i].values[k])));
    }
  return {max_abs, max_ref > 0 ? max_abs / max_ref : max_abs};
}

// --plan/--force with --profile: per device, the CPU time of every layer it
// computes alone in a step (one node: the tiled plan's row tiles, whole
// layers), with the same layer's time in the unsplit run. The planner reads
// this back (tessera plan --tile-profile) to price a tile of r rows from its
// measured time instead of r/H of the layer's (narrow tiles run their GEMMs
// on fewer columns: issue 15).
nlohmann::json TileProfile(const Graph& graph, const std::vector<DeviceProgram>& programs,
                           const std::vector<std::vector<double>>& step_cpu_seconds,
                           const std::vector<double>& unsplit_node_ms, const std::vector<std::string>& device_names) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t d = 0; d < programs.size() && d < step_cpu_seconds.size(); ++d) {
    const DeviceProgram& p = programs[d];
    std::map<int, int> steps_of_layer;  // compute steps per layer on this device
    for (const ProgramStep& s : p.steps)
      if (s.kind == StepKind::kCompute && s.layer > 0) ++steps_of_layer[s.layer];
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const ProgramStep& s = p.steps[i];
      if (s.kind != StepKind::kCompute || s.layer <= 0 || steps_of_layer[s.layer] != 1 || s.outputs.size() != 1)
        continue;
      if (p.subgraphs[s.subgraph].nodes.size() != 1) continue;  // a fused stack: not one layer's time
      const int node = s.layer - 1;
      if (node >= static_cast<int>(graph.nodes.size()) || graph.nodes[node].outputs.empty()) continue;
      const Shape& full = graph.values[graph.nodes[node].outputs[0]].shape;
      const Shape tile = p.buffers[s.outputs[0]].shape();
      if (full.size() != 4 || tile.size() != 4 || tile[3] != full[3]) continue;
      const double layer_ms = node < static_cast<int>(unsplit_node_ms.size()) ? unsplit_node_ms[node] : 0.0;
      // FDT slices (METHODS §4): a fan-out device computes `channels` of the
      // layer's output channels over the whole plane; a fan-in device reads
      // `channels` of its input channels and writes partial sums of every
      // output channel. Their time against that share of the layer's
      // prices FDT slices as row tiles are priced (tessera plan --tile-profile).
      auto slice = [&](const char* axis, int64_t channels, int64_t layer_channels) {
        out.push_back({{"device", device_names.at(d)},
                       {"index", s.layer},
                       {"node", graph.nodes[node].name},
                       {"op", graph.nodes[node].op},
                       {"axis", axis},
                       {"channels", channels},
                       {"layer_channels", layer_channels},
                       {"ms", step_cpu_seconds[d][i] * 1e3},
                       {"layer_ms", layer_ms}});
      };
      if (tile[2] == full[2] && tile[1] != full[1]) {
        slice("out_channels", tile[1], full[1]);
        continue;
      }
      const auto acts = graph.ActivationInputs(graph.nodes[node]);
      if (tile == full && !s.inputs.empty() && acts.size() == 1) {
        const Shape& whole_in = graph.values[acts[0]].shape;
        const Shape slice_in = p.buffers[s.inputs[0]].shape();
        if (whole_in.size() == 4 && slice_in.size() == 4 && slice_in[1] < whole_in[1] && slice_in[2] == whole_in[2])
          slice("in_channels", slice_in[1], whole_in[1]);
        continue;
      }
      if (tile[1] != full[1]) continue;  // row bands below
      out.push_back({{"device", device_names.at(d)},
                     {"index", s.layer},
                     {"node", graph.nodes[node].name},
                     {"op", graph.nodes[node].op},
                     {"rows", tile[2]},
                     {"layer_rows", full[2]},
                     {"ms", step_cpu_seconds[d][i] * 1e3},
                     {"layer_ms", layer_ms}});
    }
  }
  return out;
}

// `tessera run MODEL --plan plan.pb`: every device program in this process,
// one thread each, over in-process links; compared with the unsplit run.
int RunPlanned(const RunOptions& ro, const Graph& graph, const std::vector<TensorData>& inputs,
               const std::vector<TensorData>& reference, const std::vector<double>& unsplit_node_ms) {
  LoadedPlan plan;
  if (!ro.force.empty()) {
    auto scheme = ParseForcedScheme(ro.force);
    if (!scheme.ok()) return ReportError("run", scheme.status().WithContext("--force"));
    ForcedPlanOptions fo;
    fo.devices = ro.devices;
    auto grid = ParseShape(ro.grid);
    if (!grid.ok() || grid->size() != 2)
      return ReportError("run", Status::InvalidArgument("--grid must look like 2x2 (rows x columns)"));
    fo.grid_rows = (*grid)[0];
    fo.grid_cols = (*grid)[1];
    auto forced = MakeForcedPlan(graph, *scheme, fo);
    if (!forced.ok()) return ReportError("run", forced.status());
    plan.plan = std::move(*forced);
    plan.id = "forced-" + ro.force;
    for (int d = 0; d < ro.devices; ++d) plan.device_names.push_back("dev" + std::to_string(d + 1));
  } else {
    auto loaded = ReadPlanFile(ro.plan_path, graph);
    if (!loaded.ok()) return ReportError("run", loaded.status());
    plan = std::move(*loaded);
  }
  const std::string plan_name = ro.force.empty() ? ro.plan_path : "--force " + ro.force;
  auto* loaded = &plan;
  auto compiled = CompilePlan(graph, loaded->plan);
  if (!compiled.ok()) return ReportError("run", compiled.status().WithContext(plan_name));
  RunnerOptions opts;
  opts.threads = ro.threads;
  opts.time_steps = ro.profile;
  auto run = RunProgramsInProcess(graph, compiled->programs, inputs, opts, ro.repeat);
  if (!run.ok()) return ReportError("run", run.status());
  auto [max_abs, max_rel] = Differences(run->outputs, reference);
  nlohmann::json j;
  j["model"] = ro.model.model_path;
  j["plan"] = plan_name;
  j["devices"] = compiled->programs.size();
  j["max_abs_diff"] = max_abs;
  j["max_rel_diff"] = max_rel;
  j["links"] = nlohmann::json::array();
  for (const auto& l : run->links)
    j["links"].push_back({{"from", loaded->device_names.at(l.from)}, {"to", loaded->device_names.at(l.to)},
                          {"bytes", l.bytes}});
  j["total_bytes"] = run->total_bytes;
  j["halo_mac_overhead"] = compiled->halo_mac_overhead;
  j["device_memory_bytes"] = run->device_memory_bytes;
  j["seconds"] = run->seconds;  // median of --repeat runs, kernels prepared before
  j["prepare_seconds"] = run->prepare_seconds;
  j["device_cpu_seconds"] = run->device_cpu_seconds;  // per device, its thread's CPU in the median run
  if (ro.profile)
    j["tile_profile"] =
        TileProfile(graph, compiled->programs, run->step_cpu_seconds, unsplit_node_ms, loaded->device_names);
  if (ro.json) {
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("plan %s: %zu devices, in-process links\n", plan_name.c_str(), compiled->programs.size());
    for (const auto& l : j["links"])
      std::printf("  link %-12s -> %-12s %12lld bytes\n", l["from"].get<std::string>().c_str(),
                  l["to"].get<std::string>().c_str(), static_cast<long long>(l["bytes"].get<int64_t>()));
    for (size_t d = 0; d < run->device_memory_bytes.size(); ++d)
      std::printf("  device %-12s arena %12zu bytes (%s), CPU %.4f s\n", loaded->device_names.at(d).c_str(),
                  run->device_memory_bytes[d], FormatBytes(static_cast<double>(run->device_memory_bytes[d])).c_str(),
                  run->device_cpu_seconds.at(d));
    std::printf("total %lld bytes between devices; halo recompute %lld MACs\n",
                static_cast<long long>(run->total_bytes), static_cast<long long>(compiled->halo_mac_overhead));
    std::printf("against the unsplit run: max abs diff %.3g, max rel diff %.3g\n", max_abs, max_rel);
  }
  return 0;
}

int RunRun(const RunOptions& ro) {
  auto graph = LoadModel(ro.model);
  if (!graph.ok()) return ReportError("run", graph.status());
  // What a device given compact weights to fit its RAM runs (the compiler
  // marks its convs the same way; the planner's --compact-profile).
  if (ro.compact_weights)
    for (Node& n : graph->nodes)
      if (n.op == "Conv") n.attrs.Set("compact_weights", int64_t{1});
  if (!ro.inputs.empty() && ro.inputs.size() != graph->inputs.size())
    return ReportError("run", Status::InvalidArgument("the model takes " + std::to_string(graph->inputs.size()) +
                                                      " input(s); --input was given " +
                                                      std::to_string(ro.inputs.size()) + " time(s)"));
  if (!ro.outputs.empty() && ro.outputs.size() != graph->outputs.size())
    return ReportError("run", Status::InvalidArgument("the model has " + std::to_string(graph->outputs.size()) +
                                                      " output(s); --output was given " +
                                                      std::to_string(ro.outputs.size()) + " time(s)"));
  std::vector<TensorData> inputs;
  for (size_t i = 0; i < graph->inputs.size(); ++i) {
    const Value& v = graph->values[graph->inputs[i]];
    if (ro.inputs.empty()) {
      inputs.push_back(SeededInput(v.shape, ro.model.seed + i));
      continue;
    }
    auto t = ReadNpy(ro.inputs[i]);
    if (!t.ok()) return ReportError("run", t.status());
    if (t->shape != v.shape && NumElements(t->shape) == NumElements(v.shape)) t->shape = v.shape;  // e.g. missing batch dim
    if (t->shape != v.shape)
      return ReportError("run", Status::InvalidArgument(ro.inputs[i] + ": shape " + ShapeToString(t->shape) +
                                                        " does not match input '" + v.name + "' " +
                                                        ShapeToString(v.shape) + " (use --input-shape to change it)"));
    inputs.push_back(std::move(*t));
  }

  ExecutorOptions eo;
  eo.threads = ro.threads;
  eo.profile = ro.profile;
  // METHODS §6 arena layout: the default (best of the greedy orders) is what
  // workers and the planner's promise use; milp tries to shrink it further.
  std::unique_ptr<ArenaLayout> layout;
  if (ro.arena_layout == "greedy-by-size")
    layout = std::make_unique<GreedyBySizeLayout>(64);
  else if (ro.arena_layout == "milp")
    layout = std::make_unique<MilpArenaLayout>(ro.arena_time_limit, 64);
  eo.arena_layout = layout.get();
  eo.segments = !ro.no_segments;
  // The single-device run keeps each weight once, in its kernel's form
  // (a planned run still compiles device programs from the graph's weights).
  const bool planned = !ro.plan_path.empty() || !ro.force.empty();
  auto ex = planned ? Executor::Create(*graph, eo) : Executor::CreateReleasingWeights(&*graph, eo);
  if (!ex.ok()) return ReportError("run", ex.status());

  std::vector<TensorData> outputs;
  for (int w = 0; w < ro.warmup; ++w)
    if (Status st = (*ex)->Run(inputs, &outputs); !st.ok()) return ReportError("run", st);
  const std::vector<double> before_timed = (*ex)->StepSeconds();
  std::vector<double> ms;
  // --profile: every node's time in each timed run (ms), for its median: a
  // mean is pulled up by the odd run where a thread was descheduled (seen
  // at 2 threads on a shared VM: a conv of 0.25 ms median, 0.6-1.0 ms mean).
  std::vector<std::vector<double>> run_node_ms;
  std::vector<double> last = before_timed;
  for (int r = 0; r < std::max(1, ro.repeat); ++r) {
    auto t0 = std::chrono::steady_clock::now();
    Status st = (*ex)->Run(inputs, &outputs);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!st.ok()) return ReportError("run", st);
    if (ro.profile) {
      const auto& now = (*ex)->StepSeconds();
      std::vector<double> step(now.size());
      for (size_t n = 0; n < now.size(); ++n) step[n] = (now[n] - (n < last.size() ? last[n] : 0.0)) * 1e3;
      run_node_ms.push_back(std::move(step));
      last = now;
    }
  }
  auto node_median = [&](size_t n) {
    std::vector<double> v;
    for (const auto& r : run_node_ms) v.push_back(n < r.size() ? r[n] : 0.0);
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  if (!ro.plan_path.empty() || !ro.force.empty()) {
    std::vector<double> node_ms;  // the unsplit run's time per node (--profile), mean per timed run
    if (ro.profile) {
      const auto& total = (*ex)->StepSeconds();
      for (size_t k = 0; k < total.size(); ++k)
        node_ms.push_back((total[k] - (k < before_timed.size() ? before_timed[k] : 0.0)) * 1e3 / ms.size());
    }
    return RunPlanned(ro, *graph, inputs, outputs, node_ms);
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];

  for (size_t i = 0; i < ro.outputs.size(); ++i)
    if (Status st = WriteNpy(ro.outputs[i], outputs[i]); !st.ok()) return ReportError("run", st);

  nlohmann::json j;
  j["model"] = ro.model.model_path;
  j["threads"] = ro.threads;
  j["isa"] = IsaName(ActiveIsa());
  j["isa_detected"] = IsaName(DetectedIsa());
  j["arena_bytes"] = (*ex)->arena_bytes();
  j["weight_bytes"] = (*ex)->weight_bytes();  // as the kernels store them (packed, Winograd-transformed)
  j["load_peak_bytes"] = (*ex)->load_peak_bytes();  // weights held at once while the kernels repacked them
  j["unplanned_bytes"] = (*ex)->unplanned_bytes();
  j["arena_layout"] = (*ex)->arena_strategy();
  j["arena_lower_bound_bytes"] = (*ex)->arena_lower_bound();
  j["arena_optimal"] = (*ex)->arena_optimal();
  j["in_place_steps"] = (*ex)->in_place_steps();  // segments: outputs written over their inputs
  j["runs"] = ms.size();
  j["median_ms"] = median;
  j["seconds"] = median / 1000.0;
  j["outputs"] = nlohmann::json::array();
  bool finite = true;
  for (size_t i = 0; i < outputs.size(); ++i) {
    double sum = 0, abs_sum = 0;
    for (float x : outputs[i].values) {
      sum += x;
      abs_sum += std::fabs(x);
      finite &= std::isfinite(x);
    }
    j["outputs"].push_back({{"name", graph->values[graph->outputs[i]].name},
                            {"shape", outputs[i].shape},
                            {"checksum", sum},
                            {"abs_sum", abs_sum}});
  }
  j["finite"] = finite;
  // --profile: where the time goes, per node and per op (mean over the timed
  // runs; the sum is below the wall time by the executor's own overhead).
  std::vector<std::pair<double, int>> node_ms;
  std::map<std::string, std::pair<int, double>> op_ms;
  if (ro.profile) {
    const auto& total = (*ex)->StepSeconds();
    for (size_t n = 0; n < total.size(); ++n) {
      const double v = (total[n] - (n < before_timed.size() ? before_timed[n] : 0.0)) * 1e3 / ms.size();
      node_ms.push_back({v, static_cast<int>(n)});
      auto& e = op_ms[graph->nodes[n].op];
      e.first += 1;
      e.second += v;
    }
    std::sort(node_ms.rbegin(), node_ms.rend());
    nlohmann::json prof = nlohmann::json::array();
    for (const auto& [v, n] : node_ms)
      prof.push_back({{"index", n + 1},
                      {"node", graph->nodes[n].name},
                      {"op", graph->nodes[n].op},
                      {"ms", v},
                      {"median_ms", node_median(static_cast<size_t>(n))}});
    j["profile"] = prof;
  }
  if (ro.json) {
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    for (const auto& o : j["outputs"])
      std::printf("output %s: shape %s  checksum %.6g  abs-sum %.6g\n", o["name"].get<std::string>().c_str(),
                  ShapeToString(o["shape"].get<Shape>()).c_str(), o["checksum"].get<double>(),
                  o["abs_sum"].get<double>());
    std::printf("arena: %zu bytes (%.2f MiB; %.2f MiB without the arena plan); weights as stored %.2f MiB "
                "(%.2f MiB at once while repacking)\n",
                (*ex)->arena_bytes(), (*ex)->arena_bytes() / 1048576.0, (*ex)->unplanned_bytes() / 1048576.0,
                (*ex)->weight_bytes() / 1048576.0, (*ex)->load_peak_bytes() / 1048576.0);
    const size_t lb = (*ex)->arena_lower_bound();
    std::printf("arena layout: %s; lower bound (largest live sum) %zu bytes, gap %.1f %%%s\n",
                (*ex)->arena_strategy().c_str(), lb,
                lb ? 100.0 * (static_cast<double>((*ex)->arena_bytes()) - static_cast<double>(lb)) / lb : 0.0,
                (*ex)->arena_optimal() ? " (optimal)" : "");
    if ((*ex)->in_place_steps() > 0)
      std::printf("segments: %d step(s) write their output over their input (--no-segments to compare)\n",
                  (*ex)->in_place_steps());
    std::printf("time: %.3f ms median of %zu run(s), %d thread(s), kernels %s (CPU supports %s)\n", median,
                ms.size(), ro.threads, IsaName(ActiveIsa()), IsaName(DetectedIsa()));
    if (!finite) std::printf("warning: the output contains NaN or infinity\n");
    if (ro.profile) {
      double sum = 0;
      for (const auto& [v, n] : node_ms) sum += v;
      std::printf(
          "\nprofile: mean per run over %zu run(s) (slowest nodes: also the median); kernels %.3f ms of %.3f ms\n",
          ms.size(), sum, median);
      std::vector<std::pair<double, std::string>> ops;
      for (const auto& [op, e] : op_ms) ops.push_back({e.second, op});
      std::sort(ops.rbegin(), ops.rend());
      std::printf("%-24s %6s %10s %7s\n", "op", "nodes", "ms", "share");
      for (const auto& [v, op] : ops)
        std::printf("%-24s %6d %10.3f %6.1f%%\n", op.c_str(), op_ms[op].first, v, sum > 0 ? 100 * v / sum : 0.0);
      std::printf("\n%-40s %-18s %10s %10s\n", "slowest nodes", "op", "mean ms", "median ms");
      for (size_t k = 0; k < node_ms.size() && k < static_cast<size_t>(ro.profile_nodes); ++k)
        std::printf("%-40s %-18s %10.3f %10.3f\n", graph->nodes[node_ms[k].second].name.substr(0, 40).c_str(),
                    graph->nodes[node_ms[k].second].op.c_str(), node_ms[k].first,
                    node_median(static_cast<size_t>(node_ms[k].second)));
    }
  }
  return 0;
}

}  // namespace

void RegisterRunCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run a model on this device (the single-device reference)");
  auto ro = std::make_shared<RunOptions>();
  ro->model.AddTo(*cmd);
  cmd->add_option("--input", ro->inputs, ".npy file for each model input, in order (default: seeded random)");
  cmd->add_option("--output", ro->outputs, ".npy file to write for each model output, in order");
  cmd->add_option("--threads", ro->threads, "Intra-op threads")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--repeat", ro->repeat, "Run this many times and report the median time")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", ro->warmup, "Untimed runs before timing")->capture_default_str()->check(CLI::Range(0, 1000));
  cmd->add_flag("--json", ro->json, "Print JSON");
  cmd->add_option("--arena-layout", ro->arena_layout,
                  "Arena layout (METHODS §6): best (best greedy order, what workers use), greedy-by-size, or milp "
                  "(CBC big-M MILP when the greedy misses the lower bound)")
      ->capture_default_str()
      ->check(CLI::IsMember({"best", "greedy-by-size", "milp"}));
  cmd->add_option("--arena-time-limit", ro->arena_time_limit, "Seconds the arena MILP may take")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_flag("--no-segments", ro->no_segments,
                "Never write a step's output over its input (METHODS §6 segments), e.g. to compare arenas");
  cmd->add_flag("--compact-weights", ro->compact_weights,
                "Every conv keeps raw-size weights (no Winograd), as on a device the planner gives compact weights "
                "to fit its RAM; with --profile --json: the planner's --compact-profile");
  cmd->add_flag("--profile", ro->profile, "Time every node of the timed runs; print the time per op and the slowest nodes");
  cmd->add_option("--profile-nodes", ro->profile_nodes, "How many of the slowest nodes --profile lists")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--plan", ro->plan_path,
                  "Run a plan (tessera plan --out) with every device in this process and compare with the unsplit run");
  cmd->add_option("--force", ro->force,
                  "Instead of a plan file, force one scheme wherever it applies: ffmt|fdto|fdti|pairs|pipeline|parts "
                  "(row bands on one device, --grid Px1)|halo (FFMT tiles, each layer a stack: halo rows exchanged "
                  "between neighbours)");
  cmd->add_option("--devices", ro->devices, "Devices for --force")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--grid", ro->grid, "FFMT tile grid for --force ffmt|halo, ROWSxCOLS")->capture_default_str();
  cmd->callback([ro] {
    if (int rc = RunRun(*ro)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
