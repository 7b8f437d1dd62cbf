#include "planner/mixed_placement.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>

#include "partition/graph/op_traits.h"
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

namespace {

// Whether MCU `dev`'s program image fits its flash and RAM (what the
// firmware leaves); ResourceExhausted naming its need and its preset.
Status McuImageFits(const Device& dev, const McuProgramImage& image) {
  const std::string preset = dev.preset.empty() ? "its ram:/flash:" : "preset " + dev.preset;
  if (static_cast<int64_t>(image.flash_bytes()) > dev.flash_bytes)
    return Status::ResourceExhausted(dev.name + " needs " + std::to_string(image.flash_bytes()) +
                                     " bytes of flash (program and weights); " + preset + " leaves " +
                                     std::to_string(dev.flash_bytes) + " beside the firmware");
  if (static_cast<int64_t>(image.ram_bytes()) > dev.ram_bytes)
    return Status::ResourceExhausted(dev.name + " needs " + std::to_string(image.ram_bytes()) +
                                     " bytes of RAM (activations); " + preset + " leaves " +
                                     std::to_string(dev.ram_bytes) + " beside the firmware");
  return Status::OK();
}

}  // namespace

Result<std::map<int, McuProgramImage>> BuildMcuPrograms(const Cluster& cluster, const CompiledPlan& compiled) {
  std::map<int, McuProgramImage> images;
  for (int i = 0; i < cluster.size() && i < static_cast<int>(compiled.programs.size()); ++i) {
    const Device& dev = cluster.devices[i];
    if (dev.kind != DeviceKind::kMcu) continue;
    TS_ASSIGN_OR_RETURN(McuProgramImage image, BuildMcuProgram(compiled.programs[i], McuProgramOptions{}));
    TS_RETURN_IF_ERROR(McuImageFits(dev, image));
    images[i] = std::move(image);
  }
  return images;
}

CompileOptions McuCompileOptions(const Cluster& cluster) {
  CompileOptions co;  // integer partial sums: the firmware merges them too (mcu::kInt32Sums)
  for (int i = 0; i < cluster.size(); ++i)
    if (cluster.devices[i].kind == DeviceKind::kMcu) co.contiguous_io_devices.insert(i);
  return co;
}

PartitionPlan MixedPartitionPlan(const MixedPlacement& placement, int devices) {
  PartitionPlan pp;
  pp.num_devices = devices;
  pp.source = 0;
  if (!placement.assignments.empty()) {
    pp.layers = placement.assignments;
    return pp;
  }
  for (int d : placement.device_of_layer) {
    LayerAssignment a;
    a.scheme = LayerScheme::kWhole;
    a.devices = {d};
    pp.layers.push_back(a);
  }
  return pp;
}

namespace {

Status McuPlanFits(const Graph& graph, const Cluster& cluster, const PartitionPlan& pp) {
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, pp, McuCompileOptions(cluster)));
  return BuildMcuPrograms(cluster, compiled).status();
}

// McuPlanFits for the candidates of one pipeline search, remembered per
// MCU and run of whole layers: an MCU's program (its layers, the tensors it
// receives and sends, its arena) depends on its own run, not on where the
// other layers are, so a run found too large on an MCU is refused without
// compiling again, and a candidate whose runs all fit is accepted.
class McuRunFits {
 public:
  McuRunFits(const Graph& graph, const Cluster& cluster) : graph_(graph), cluster_(cluster) {}

  Status Check(const PartitionPlan& pp) {
    std::map<int, std::pair<int, int>> run;  // MCU -> [first, last] whole layer
    for (size_t j = 0; j < pp.layers.size(); ++j) {
      const LayerAssignment& a = pp.layers[j];
      if (a.scheme != LayerScheme::kWhole || a.devices.size() != 1) continue;
      const int d = a.devices[0];
      auto [it, fresh] = run.emplace(d, std::make_pair(static_cast<int>(j), static_cast<int>(j)));
      if (!fresh) it->second.second = static_cast<int>(j);
    }
    bool all_known = true;
    for (int i = 0; i < cluster_.size(); ++i) {
      if (cluster_.devices[i].kind != DeviceKind::kMcu) continue;
      auto it = known_.find(Key(i, run));
      if (it == known_.end())
        all_known = false;
      else if (!it->second.ok())
        return it->second;
    }
    if (all_known) return Status::OK();
    TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph_, pp, McuCompileOptions(cluster_)));
    Status first = Status::OK();
    for (int i = 0; i < cluster_.size() && i < static_cast<int>(compiled.programs.size()); ++i) {
      if (cluster_.devices[i].kind != DeviceKind::kMcu) continue;
      auto image = BuildMcuProgram(compiled.programs[i], McuProgramOptions{});
      Status st = image.ok() ? McuImageFits(cluster_.devices[i], *image) : image.status();
      // Only a shortfall is a property of the run; other errors are returned as they are.
      if (st.ok() || st.code() == StatusCode::kResourceExhausted) known_[Key(i, run)] = st;
      if (first.ok() && !st.ok()) first = st;
    }
    return first;
  }

 private:
  static std::tuple<int, int, int> Key(int device, const std::map<int, std::pair<int, int>>& run) {
    auto it = run.find(device);
    return it == run.end() ? std::make_tuple(device, -1, -1)
                           : std::make_tuple(device, it->second.first, it->second.second);
  }
  const Graph& graph_;
  const Cluster& cluster_;
  std::map<std::tuple<int, int, int>, Status> known_;
};

}  // namespace

Status McuProgramsFit(const Graph& graph, const Cluster& cluster, const std::vector<int>& device_of_layer) {
  MixedPlacement whole;
  whole.device_of_layer = device_of_layer;
  return McuPlanFits(graph, cluster, MixedPartitionPlan(whole, cluster.size()));
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
      // A run that breaks the device's RAM, flash or ops is infeasible
      // (EvaluatePlacement's checks) and so is every longer one: cut there.
      const Device& device = problem.cluster->devices[d];
      int64_t weights = 0;
      for (int end = start + 1; end <= layers; ++end) {
        const int j = end - 1;
        weights += problem.WeightBytes(d, j);
        if (!problem.Runs(d, j) || problem.BufferBytes(d, j) > device.ram_bytes || weights > device.flash_bytes) break;
        dev[j] = d;
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

namespace {

// Layers [first, L) of `p` as a problem of their own: what they read from
// layers before `first` arrives like a model input (at the source).
PlacementProblem SuffixProblem(const PlacementProblem& p, int first) {
  PlacementProblem s = p;
  auto cut = [first](auto& v) {
    if (static_cast<int>(v.size()) > first) v.erase(v.begin(), v.begin() + first);
  };
  cut(s.names), cut(s.macs), cut(s.kinds), cut(s.weight_bytes), cut(s.mcu_weight_bytes), cut(s.mcu_refusals);
  cut(s.buffer_bytes), cut(s.mcu_buffer_bytes), cut(s.output_bytes), cut(s.producers), cut(s.model_inputs);
  cut(s.model_output_bytes);
  for (size_t j = 0; j < s.producers.size(); ++j) {
    std::vector<int> kept;
    for (int q : s.producers[j])
      if (q >= first)
        kept.push_back(q - first);
      else if (j < s.model_inputs.size())
        s.model_inputs[j].push_back({static_cast<int>(p.model_inputs.size()) + q, p.output_bytes[q]});
    s.producers[j] = kept;
  }
  return s;
}

// PlaceMixed's --mcu-only fallback: a stem of layers [0, s] in row tiles
// on the first k MCUs, the rest whole (see mixed_placement.h).
Result<MixedPlacement> PlaceTiledStem(const Graph& graph, const Cluster& cluster, const PlacementProblem& problem,
                                      const std::vector<int>& mcus) {
  if (mcus.size() < 2)
    return Status::ResourceExhausted("no stem in row tiles either: tiles need 2 or more MCUs, the cluster has " +
                                     std::to_string(mcus.size()));
  const int layers = problem.layers();
  int64_t largest_ram = 0;
  for (int m : mcus) largest_ram = std::max(largest_ram, cluster.devices[m].ram_bytes);
  // The shortest stem after which every layer fits one MCU whole.
  int first_after = layers;
  while (first_after > 0 && problem.BufferBytes(mcus[0], first_after - 1) <= largest_ram) --first_after;
  if (first_after == 0) return Status::Internal("every layer fits whole: no stem to tile");
  std::string last_refusal;
  int refused = 0;
  for (int s = first_after - 1; s < layers - 1; ++s) {
    Status tileable = Status::OK();
    for (int n = 0; n <= s && tileable.ok(); ++n) tileable = CheckTileable(graph, n);
    if (!tileable.ok()) {
      if (last_refusal.empty())
        return tileable.WithContext("no pipeline of whole layers fits and the stem cannot be tiled");
      break;
    }
    const Shape& ys = graph.values[graph.nodes[s].outputs[0]].shape;
    if (ys.size() != 4) break;
    const PlacementProblem suffix = SuffixProblem(problem, s + 1);
    for (size_t k = 2; k <= mcus.size() && static_cast<int64_t>(k) <= ys[2]; ++k) {
      const std::vector<int> stem(mcus.begin(), mcus.begin() + static_cast<std::ptrdiff_t>(k));
      MixedPlacement out;
      out.assignments.resize(layers);
      for (int n = 0; n <= s; ++n) {
        LayerAssignment& a = out.assignments[n];
        a.scheme = LayerScheme::kFfmt;
        a.devices = stem;
        a.grid_rows = static_cast<int64_t>(k);
      }
      auto with_suffix = [&](const std::vector<int>& dev) {
        for (size_t j = 0; j < dev.size(); ++j) {
          LayerAssignment& a = out.assignments[s + 1 + j];
          a = LayerAssignment{};
          a.devices = {dev[j]};
        }
        PartitionPlan pp;
        pp.num_devices = cluster.size();
        pp.source = 0;
        pp.layers = out.assignments;
        return pp;
      };
      // The stem's tiles alone (every later layer on the source) must fit
      // their MCUs, else no suffix helps: one compile instead of one per
      // candidate suffix.
      if (Status st = McuPlanFits(graph, cluster, with_suffix(std::vector<int>(layers - s - 1, 0))); !st.ok()) {
        last_refusal = "layers 1-" + std::to_string(s + 1) + " in " + std::to_string(k) + " tiles: " + st.message();
        ++refused;
        continue;
      }
      // Every MCU computes: those outside the stem take later layers.
      std::vector<int> rest;
      for (int m : mcus)
        if (std::find(stem.begin(), stem.end(), m) == stem.end()) rest.push_back(m);
      McuRunFits fits(graph, cluster);
      auto found = FastestPipelineUsing(suffix, rest, layers - s - 1, cluster.size(), mcus,
                                        [&](const std::vector<int>& dev) { return fits.Check(with_suffix(dev)); });
      if (!found.ok()) {
        if (found.status().code() != StatusCode::kResourceExhausted) return found.status();
        last_refusal = found.status().message();
        continue;
      }
      with_suffix(found->device_of_layer);
      out.device_of_layer.assign(s + 1, stem[0]);
      out.device_of_layer.insert(out.device_of_layer.end(), found->device_of_layer.begin(),
                                 found->device_of_layer.end());
      out.forced = true;
      std::string names;
      for (int m : stem) names += (names.empty() ? "" : "+") + cluster.devices[m].name;
      out.note = "no pipeline of whole layers fits the MCUs' RAM: layers 1-" + std::to_string(s + 1) + " (to " +
                 graph.nodes[s].name + ") in " + std::to_string(k) + " row tiles on " + names +
                 " (FFMT, each tile with its halo), the rest the fastest contiguous pipeline of whole layers; "
                 "no latency predicted for the tiles" +
                 (refused == 0 ? std::string()
                               : " (" + std::to_string(refused) +
                                     " shorter stems or fewer tiles did not fit, the last: " + last_refusal + ")");
      return out;
    }
  }
  return Status::ResourceExhausted("no stem in row tiles over up to " + std::to_string(mcus.size()) +
                                   " MCUs fits either" + (last_refusal.empty() ? "" : " (last: " + last_refusal + ")"));
}

}  // namespace

Result<MixedPlacement> PlaceMixed(const Graph& graph, const Cluster& cluster, bool mcus_only) {
  const auto figures = ComputeLayerFigures(graph);
  if (figures.size() != graph.nodes.size()) return Status::Internal("layer figures do not match the graph's nodes");
  PlacementProblem problem = MakePlacementProblem(graph, figures, cluster);
  problem.source = 0;
  std::vector<int> mcus;
  for (int i = 0; i < cluster.size(); ++i)
    if (cluster.devices[i].kind == DeviceKind::kMcu) mcus.push_back(i);
  McuRunFits fits(graph, cluster);
  const PlacementCheck built_fit = [&](const std::vector<int>& dev) {
    MixedPlacement whole;
    whole.device_of_layer = dev;
    return fits.Check(MixedPartitionPlan(whole, cluster.size()));
  };
  if (mcus_only) {
    if (mcus.empty()) return Status::InvalidArgument("an MCU-only placement needs MCUs in the cluster");
    for (int j = 0; j < problem.layers(); ++j)
      if (!problem.Runs(mcus[0], j))
        return Status::NotSupported("--mcu-only: " + problem.names[j] +
                                    " cannot run on an MCU: " + problem.mcu_refusals[j]);
    auto found =
        FastestPipelineUsing(problem, mcus, static_cast<int>(graph.nodes.size()), cluster.size(), mcus, built_fit);
    if (!found.ok() && found.status().code() == StatusCode::kResourceExhausted) {
      auto tiled = PlaceTiledStem(graph, cluster, problem, mcus);
      if (tiled.ok()) {
        tiled->note = "every layer on the MCUs (--mcu-only); " + tiled->note;
        return tiled;
      }
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
      const std::string stem = tiled.status().code() == StatusCode::kInternal ? "" : "; " + tiled.status().message();
      return Status::ResourceExhausted(found.status().message() + stem + ": the layers' weights are " +
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
