#include "planner/mixed_placement.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "planner/plan.h"

namespace tessera {

namespace {

// Each device's layers are one consecutive range (or none).
bool Contiguous(const std::vector<int>& dev, int devices) {
  for (int d = 0; d < devices; ++d) {
    int first = -1, last = -1, count = 0;
    for (int j = 0; j < static_cast<int>(dev.size()); ++j)
      if (dev[j] == d) {
        if (first < 0) first = j;
        last = j;
        ++count;
      }
    if (count && last - first + 1 != count) return false;
  }
  return true;
}

bool UsesAll(const std::vector<int>& dev, const std::vector<int>& must_use) {
  for (int m : must_use)
    if (std::count(dev.begin(), dev.end(), m) == 0) return false;
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

Result<MixedPlacement> FastestPipelineUsing(const PlacementProblem& problem, const std::vector<int>& must_use,
                                           int layers, int devices) {
  if (layers > kMaxMixedChainLayers)
    return Status::InvalidArgument("the mixed pipeline search is for small chains (<= " +
                                   std::to_string(kMaxMixedChainLayers) + " layers); this model has " +
                                   std::to_string(layers));
  MixedPlacement out;
  out.forced = true;
  std::vector<int> dev(layers, 0);
  double best = std::numeric_limits<double>::infinity();
  const auto total = static_cast<int64_t>(std::pow(devices, layers));
  for (int64_t code = 0; code < total; ++code) {
    int64_t c = code;
    for (int j = 0; j < layers; ++j, c /= devices) dev[j] = static_cast<int>(c % devices);
    if (!Contiguous(dev, devices) || !UsesAll(dev, must_use)) continue;
    PlacementCost cost = EvaluatePlacement(problem, dev);
    if (!cost.feasible || cost.latency_s >= best) continue;
    best = cost.latency_s;
    out.device_of_layer = dev;
    out.cost = cost;
  }
  if (out.device_of_layer.empty())
    return Status::ResourceExhausted("no contiguous pipeline gives every MCU a layer within its RAM and flash");
  return out;
}

Result<MixedPlacement> PlaceMixed(const Graph& graph, const Cluster& cluster) {
  const auto figures = ComputeLayerFigures(graph);
  if (figures.size() != graph.nodes.size()) return Status::Internal("layer figures do not match the graph's nodes");
  PlacementProblem problem = MakePlacementProblem(graph, figures, cluster);
  problem.source = 0;
  std::vector<int> mcus;
  for (int i = 0; i < cluster.size(); ++i)
    if (cluster.devices[i].kind == DeviceKind::kMcu) mcus.push_back(i);
  PlanOptions po;
  po.objective = Objective::kLatency;
  auto plan = BuildPlan(graph, figures, cluster, po);
  std::string note, table;
  if (plan.ok()) {
    table = FormatPlanTable(*plan);
    std::vector<int> dev;
    if (WholeLayerPlacement(*plan, graph.nodes.size(), &dev) && UsesAll(dev, mcus)) {
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
  TS_ASSIGN_OR_RETURN(MixedPlacement out,
                      FastestPipelineUsing(problem, mcus, static_cast<int>(graph.nodes.size()), cluster.size()));
  out.note = note;
  out.planner_table = table;
  return out;
}

}  // namespace tessera
