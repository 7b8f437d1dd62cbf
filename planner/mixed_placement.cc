#include "planner/mixed_placement.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "planner/plan.h"

namespace tessera {

namespace {

// Every device of `must_use` computes something: at least one of its layers
// has MACs (a Reshape or Flatten alone, an alias on an MCU, is no use of it).
bool UsesAll(const std::vector<int>& dev, const std::vector<int>& must_use, const std::vector<int64_t>& macs) {
  for (int m : must_use) {
    bool computes = false;
    for (size_t j = 0; j < dev.size() && !computes; ++j) computes = dev[j] == m && macs[j] > 0;
    if (!computes) return false;
  }
  return true;
}

// The planner's latency plan as a whole-layer placement, if it is one.
bool WholeLayerPlacement(const Plan& plan, size_t layers, std::vector<int>* dev) {
  dev->clear();
  for (const auto& l : plan.layers) {
    if (l.scheme != "whole" || l.devices.size() != 1) return false;
    dev->push_back(l.devices[0]);
  }
  return dev->size() == layers;
}

}  // namespace

double ContiguousPipelines(int layers, int devices) {
  // Σ over k devices used: (ordered choices of k devices) · (ways to cut the
  // chain into k non-empty runs) = P(devices, k) · C(layers − 1, k − 1).
  double total = 0, ordered = 1, cuts = 1;
  for (int k = 1; k <= std::min(layers, devices); ++k) {
    ordered *= devices - k + 1;
    if (k > 1) cuts = cuts * (layers - k + 1) / (k - 1);
    total += ordered * cuts;
  }
  return total;
}

Result<std::map<int, McuProgramImage>> BuildMcuPrograms(const Cluster& cluster, const CompiledPlan& compiled) {
  std::map<int, McuProgramImage> images;
  for (int i = 0; i < cluster.size() && i < static_cast<int>(compiled.programs.size()); ++i) {
    const Device& dev = cluster.devices[i];
    if (dev.kind != DeviceKind::kMcu) continue;
    TS_ASSIGN_OR_RETURN(McuProgramImage image, BuildMcuProgram(compiled.programs[i], McuProgramOptions{}));
    const std::string preset = dev.preset.empty() ? "its ram:/flash:" : "preset " + dev.preset;
    if (static_cast<int64_t>(image.flash_bytes()) > dev.flash_bytes)
      return Status::ResourceExhausted(dev.name + " needs " + std::to_string(image.flash_bytes()) +
                                       " bytes of flash (program and weights); " + preset + " leaves " +
                                       std::to_string(dev.flash_bytes) + " beside the firmware");
    if (static_cast<int64_t>(image.ram_bytes()) > dev.ram_bytes)
      return Status::ResourceExhausted(dev.name + " needs " + std::to_string(image.ram_bytes()) +
                                       " bytes of RAM (activations); " + preset + " leaves " +
                                       std::to_string(dev.ram_bytes) + " beside the firmware");
    images[i] = std::move(image);
  }
  return images;
}

Status McuProgramsFit(const Graph& graph, const Cluster& cluster, const std::vector<int>& device_of_layer) {
  PartitionPlan pp;
  pp.num_devices = cluster.size();
  pp.source = 0;
  for (int d : device_of_layer) {
    LayerAssignment a;
    a.scheme = LayerScheme::kWhole;
    a.devices = {d};
    pp.layers.push_back(a);
  }
  CompileOptions co;
  co.integer_partial_sums = false;  // MCU devices merge FDT partial sums in float
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, pp, co));
  return BuildMcuPrograms(cluster, compiled).status();
}

Result<MixedPlacement> FastestPipelineUsing(const PlacementProblem& problem, const std::vector<int>& must_use,
                                            int layers, int devices, const std::vector<int>& may_use,
                                            const PlacementCheck& fits) {
  std::vector<bool> allowed(devices, may_use.empty());
  for (int d : may_use)
    if (d >= 0 && d < devices) allowed[d] = true;
  const double candidates = ContiguousPipelines(
      layers, may_use.empty() ? devices : static_cast<int>(std::count(allowed.begin(), allowed.end(), true)));
  if (candidates > kMaxMixedCandidates)
    return Status::InvalidArgument(
        "the mixed pipeline search tries every contiguous pipeline: " + std::to_string(layers) + " layers on " +
        std::to_string(devices) + " devices make " + std::to_string(static_cast<int64_t>(candidates)) +
        " of them, over its limit of " + std::to_string(static_cast<int64_t>(kMaxMixedCandidates)) +
        " (use --force SCHEME, or fewer devices)");
  MixedPlacement out;
  out.forced = true;
  int refused_by_check = 0;
  std::string first_refusal;
  std::vector<int> dev(layers, 0);
  std::vector<bool> used(devices, false);
  double best = std::numeric_limits<double>::infinity();
  // Each device takes one run of consecutive layers (or none): choose the
  // next run's device among the unused ones and where the run ends.
  std::function<void(int)> next_run = [&](int start) {
    if (start == layers) {
      if (!UsesAll(dev, must_use, problem.macs)) return;
      PlacementCost cost = EvaluatePlacement(problem, dev);
      if (!cost.feasible || cost.latency_s >= best) return;
      if (fits) {
        if (Status st = fits(dev); !st.ok()) {
          if (++refused_by_check == 1) first_refusal = st.message();
          return;
        }
      }
      best = cost.latency_s;
      out.device_of_layer = dev;
      out.cost = cost;
      return;
    }
    for (int d = 0; d < devices; ++d) {
      if (used[d] || !allowed[d]) continue;
      used[d] = true;
      for (int end = start + 1; end <= layers; ++end) {
        dev[end - 1] = d;
        next_run(end);
      }
      used[d] = false;
    }
  };
  if (layers > 0) next_run(0);
  const std::string built = refused_by_check == 0
                                ? ""
                                : " (" + std::to_string(refused_by_check) +
                                      " fit by the layers' figures but not once their MCU programs were built, e.g. " +
                                      first_refusal + ")";
  if (out.device_of_layer.empty())
    return Status::ResourceExhausted(
        may_use.empty() ? "no contiguous pipeline gives every MCU a layer within its RAM and flash" + built
                        : "no contiguous pipeline over the " + std::to_string(may_use.size()) +
                              " MCUs alone fits their RAM and flash" + built +
                              " (every layer whole on one MCU; a layer larger than an MCU's flash or RAM does not "
                              "fit any)");
  if (refused_by_check > 0)
    out.note = std::to_string(refused_by_check) + " faster pipelines refused once built" + built;
  return out;
}

Result<MixedPlacement> PlaceMixed(const Graph& graph, const Cluster& cluster, bool mcus_only) {
  const auto figures = ComputeLayerFigures(graph);
  if (figures.size() != graph.nodes.size()) return Status::Internal("layer figures do not match the graph's nodes");
  PlacementProblem problem = MakePlacementProblem(graph, figures, cluster);
  problem.source = 0;
  std::vector<int> mcus;
  for (int i = 0; i < cluster.size(); ++i)
    if (cluster.devices[i].kind == DeviceKind::kMcu) mcus.push_back(i);
  const PlacementCheck built_fit = [&](const std::vector<int>& dev) { return McuProgramsFit(graph, cluster, dev); };
  if (mcus_only) {
    if (mcus.empty()) return Status::InvalidArgument("an MCU-only placement needs MCUs in the cluster");
    for (int j = 0; j < problem.layers(); ++j)
      if (!problem.Runs(mcus[0], j))
        return Status::NotSupported("--mcu-only: " + problem.names[j] +
                                    " cannot run on an MCU: " + problem.mcu_refusals[j]);
    auto found =
        FastestPipelineUsing(problem, mcus, static_cast<int>(graph.nodes.size()), cluster.size(), mcus, built_fit);
    if (!found.ok() && found.status().code() == StatusCode::kResourceExhausted) {
      // Name the shortfall: the weights against the MCUs' flash.
      // And the RAM: the layer whose input and output take the most.
      int64_t weights = 0, largest = 0, flash = 0, largest_flash = 0, buffers = 0, largest_ram = 0;
      int widest = 0;
      for (int j = 0; j < problem.layers(); ++j) {
        const int64_t w = problem.WeightBytes(mcus[0], j);  // as an MCU program stores them
        weights += w;
        largest = std::max<int64_t>(largest, w);
        if (problem.BufferBytes(mcus[0], j) > buffers) buffers = problem.BufferBytes(mcus[0], j), widest = j;
      }
      for (int m : mcus) {
        flash += cluster.devices[m].flash_bytes;
        largest_flash = std::max(largest_flash, cluster.devices[m].flash_bytes);
        largest_ram = std::max(largest_ram, cluster.devices[m].ram_bytes);
      }
      const std::string ram = buffers > largest_ram
                                  ? "; " + problem.names[widest] + " takes " + std::to_string(buffers) +
                                        " B of RAM for its input and output, more than the largest MCU's " +
                                        std::to_string(largest_ram) + " B (a layer runs whole on one MCU here)"
                                  : " (RAM: activations, checked per device)";
      return Status::ResourceExhausted(found.status().message() + ": the layers' weights are " +
                                       std::to_string(weights) +
                                       " B (int8 where exact, else float32), the MCUs' flash " + std::to_string(flash) +
                                       " B in all; the largest layer's weights " + std::to_string(largest) +
                                       " B, the largest MCU's flash " + std::to_string(largest_flash) + " B" + ram);
    }
    TS_ASSIGN_OR_RETURN(MixedPlacement out, std::move(found));
    out.note = "every layer on the MCUs (--mcu-only): the fastest contiguous pipeline over them; " +
               cluster.devices[0].name + " only sends the input and takes the output" +
               (out.note.empty() ? "" : "; " + out.note);
    return out;
  }
  PlanOptions po;
  po.objective = Objective::kLatency;
  auto plan = BuildPlan(graph, figures, cluster, po);
  std::string note, table;
  if (plan.ok()) {
    table = FormatPlanTable(*plan);
    std::vector<int> dev;
    if (WholeLayerPlacement(*plan, graph.nodes.size(), &dev) && UsesAll(dev, mcus, problem.macs) &&
        McuProgramsFit(graph, cluster, dev).ok()) {
      MixedPlacement out;
      out.device_of_layer = dev;
      out.cost = EvaluatePlacement(problem, dev);
      out.note = "planner (latency objective) placement used as is";
      out.planner_table = table;
      return out;
    }
    note = "the planner put no layer on some MCU (predicted " + std::to_string(plan->latency_s * 1e3) +
           " ms on Linux alone); forced the fastest contiguous pipeline giving each MCU at least one layer";
  } else {
    note = "the planner failed (" + plan.status().ToString() + "); forced a contiguous pipeline";
  }
  TS_ASSIGN_OR_RETURN(MixedPlacement out, FastestPipelineUsing(problem, mcus, static_cast<int>(graph.nodes.size()),
                                                               cluster.size(), {}, built_fit));
  out.note = note + (out.note.empty() ? "" : "; " + out.note);
  out.planner_table = table;
  return out;
}

}  // namespace tessera
