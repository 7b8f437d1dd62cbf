#include "daemon/runtime/memory_flow.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "daemon/runtime/program_runner.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/metrics.h"
#include "partition/graph/op_traits.h"

namespace tessera {

std::string DescribeMemoryPath(const Graph& g, const MemoryPath& p) {
  char how[160];
  if (p.channel_slices > 1)
    std::snprintf(how, sizeof how, "in %lld channel slices (%s -> PART -> %s on one device, no MAC added)",
                  static_cast<long long>(p.channel_slices), p.fan_out ? "FDTO" : "SPLIT", p.fan_in ? "FDTI" : "CONCAT");
  else if (p.parts)
    std::snprintf(how, sizeof how, "in %lld row bands (processed in parts: overlaps kept, no MAC twice)",
                  static_cast<long long>(p.grid_rows));
  else
    std::snprintf(how, sizeof how, "as %lldx%lld tiles", static_cast<long long>(p.grid_rows),
                  static_cast<long long>(p.grid_cols));
  return "layers " + std::to_string(p.first + 1) + "-" + std::to_string(p.last + 1) + " ('" + g.nodes[p.first].name +
         "' .. '" + g.nodes[p.last].name + "') " + how;
}

std::string PathsKey(const std::vector<MemoryPath>& paths) {
  std::string key;
  for (const MemoryPath& q : paths)
    key += std::to_string(q.first) + ":" + std::to_string(q.last) + ":" + std::to_string(q.grid_rows) + "x" +
           std::to_string(q.grid_cols) + (q.parts ? "p" : "") +
           (q.channel_slices > 1 ? "c" + std::to_string(q.channel_slices) : "") + ";";
  return key;
}

Result<SizedPlan> SizeOneDevicePlan(const Graph& graph, const PartitionPlan& plan, const DeviceMemoryOptions& options,
                                    int device) {
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, plan));
  TS_ASSIGN_OR_RETURN(DeviceMemory m, SizeDeviceProgram(compiled.programs.at(device), options));
  SizedPlan sized;
  sized.arena_bytes = m.arena_bytes;
  sized.weight_bytes = m.weight_bytes;
  sized.load_peak_bytes = m.load_peak_bytes;
  sized.halo_macs = compiled.halo_mac_overhead;
  sized.live_desc = std::move(m.step_live_bytes);
  std::sort(sized.live_desc.begin(), sized.live_desc.end(), std::greater<int64_t>());
  return sized;
}

PartitionPlan PlanOf(const PartitionPlan& base, int device, const std::vector<MemoryPath>& paths) {
  PartitionPlan plan = base;
  for (const MemoryPath& p : paths)
    for (int k = p.first; k <= p.last; ++k) {
      if (p.channel_slices > 1) {  // one device named once per slice (program_compiler.cc, "Channel paths")
        LayerScheme scheme = LayerScheme::kPart;
        if (k == p.first && p.fan_out) scheme = LayerScheme::kFdt1;
        if (k == p.last && p.fan_in) scheme = LayerScheme::kFdt2;
        LayerAssignment& a = plan.layers[k] = LayerAssignment();
        a.scheme = scheme;
        a.devices.assign(static_cast<size_t>(p.channel_slices), device);
        continue;
      }
      plan.layers[k] = LayerAssignment{LayerScheme::kFfmt, {device}, {}, p.grid_rows, p.grid_cols, {}, {}};
      plan.layers[k].parts = p.parts;
    }
  return plan;
}

namespace {

int64_t ValueBytes(const Graph& g, int v) {
  return NumElements(g.values[v].shape) * static_cast<int64_t>(sizeof(float));
}

// The graph values whose shrinking would lower the peak of `program`:
// "Critical buffers" of METHODS §6, read off the program's liveness rather
// than its layout (a value alive at the step of most live bytes is in every
// chain of buffers that reaches the arena top there). Live bytes per step:
// every buffer over the steps the runner keeps it (PreparedProgram::
// buffer_requests) plus the step's own arena (`step_bytes`: a
// Compute step's intermediates and kernel scratch). When the peak step's own
// arena is the largest part, its layer's input and output come first (a tile
// of the layer needs less scratch), and a tile step's path values too (a
// finer grid or a longer path shrinks them). Then the buffers alive at the
// peak, largest first.
std::vector<int> CriticalValues(const Graph& g, const DeviceProgram& program, const PreparedProgram& prepared,
                                const std::vector<MemoryPath>& paths) {
  const std::vector<size_t>& step_bytes = prepared.step_bytes();
  const std::vector<BufferRequest>& buffers = prepared.buffer_requests();
  const int steps = static_cast<int>(program.steps.size());
  if (steps == 0 || static_cast<int>(step_bytes.size()) != steps || buffers.size() != program.buffers.size()) return {};
  const std::vector<int64_t> live = prepared.live_bytes();
  const int peak = static_cast<int>(std::max_element(live.begin(), live.end()) - live.begin());

  std::map<int, int64_t> bytes;  // graph value -> its rank (bytes)
  int64_t largest_buffer = 0;
  for (size_t b = 0; b < program.buffers.size(); ++b)
    if (buffers[b].first <= peak && peak <= buffers[b].last && program.buffers[b].value >= 0) {
      bytes[program.buffers[b].value] += program.buffers[b].box.volume() * 4;
      largest_buffer = std::max(largest_buffer, program.buffers[b].box.volume() * 4);
    }
  const int layer = program.steps[peak].layer - 1;
  const int64_t own = static_cast<int64_t>(step_bytes[peak]);
  if (layer >= 0 && layer < static_cast<int>(g.nodes.size())) {
    bool in_path = false;
    for (const MemoryPath& p : paths)
      if (p.first <= layer && layer <= p.last) {
        in_path = true;
        for (int k = p.first; k < p.last; ++k)
          for (int v : g.nodes[k].outputs) bytes[v] = std::max(bytes[v], own + ValueBytes(g, v));
      }
    if (!in_path && own > largest_buffer) {
      for (int v : g.ActivationInputs(g.nodes[layer])) bytes[v] = std::max(bytes[v], own);
      for (int v : g.nodes[layer].outputs) bytes[v] = std::max(bytes[v], own + 1);
    }
  }
  std::vector<std::pair<int64_t, int>> order;
  for (const auto& [v, n] : bytes) order.push_back({n, v});
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::vector<int> out;
  for (const auto& [n, v] : order) out.push_back(v);
  return out;
}

}  // namespace

namespace {

// True when `a` is below `b` by at least `margin` at the first step where
// they differ (both largest first; a missing step counts 0).
bool LowerBy(const std::vector<int64_t>& a, const std::vector<int64_t>& b, int64_t margin) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const int64_t x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    if (x != y) return x + margin <= y;
  }
  return false;
}

bool OneGroupWeightLayer(const Graph& g, const Node& node) {
  return IsWeightSplitLayer(g, node) && (node.op != "Conv" || node.attrs.Int("group", 1) == 1);
}

// Layers [i, j] as the channel path the compiler takes on one device
// (program_compiler.cc, "Channel paths"), or nullopt: a chain in which each
// layer reads the one before and only the next layer reads what a layer
// makes; first a fan-out (a Conv with one group or a Gemm) or a channel-wise
// layer reading a slice of its input (SPLIT); channel-wise layers between;
// last a fan-in (a Conv with one group or a Gemm) or a channel-wise layer
// (CONCAT); every layer over the same channels.
std::optional<MemoryPath> ChannelPathAt(const Graph& g, const std::vector<std::vector<int>>& consumers,
                                        const std::set<int>& graph_outputs, int i, int j) {
  if (j <= i) return std::nullopt;
  MemoryPath path{i, j, 1, 1, 0, "", false};
  int64_t channels = -1;
  for (int n = i; n <= j; ++n) {
    const Node& node = g.nodes[n];
    if (node.outputs.size() != 1) return std::nullopt;
    const auto acts = g.ActivationInputs(node);
    if (acts.empty()) return std::nullopt;
    if (n > i && acts[0] != g.nodes[n - 1].outputs[0]) return std::nullopt;
    if (n < j) {
      const int v = node.outputs[0];
      if (graph_outputs.count(v) || consumers[v].size() != 1 || consumers[v][0] != n + 1) return std::nullopt;
    }
    const Shape& in = g.values[acts[0]].shape;
    const Shape& out = g.values[node.outputs[0]].shape;
    if (in.size() < 2 || out.size() < 2) return std::nullopt;
    int64_t c = -1;
    if (n == i && OneGroupWeightLayer(g, node)) {
      path.fan_out = true;
      c = out[1];
    } else if (n == j && OneGroupWeightLayer(g, node)) {
      path.fan_in = true;
      c = in[1];
    } else if (CheckPerChannel(g, node).ok()) {
      c = in[1];
    } else {
      return std::nullopt;
    }
    if (channels >= 0 && c != channels) return std::nullopt;
    channels = c;
  }
  path.channel_slices = channels;  // the caller sets the slice count
  return path;
}

// One greedy descent under `budget` (a share of the model's MACs, < 0: none),
// trying tiles (`tiles_too`), paths processed in parts (`parts_too`) and
// channel paths (`channels_too`). `seen` caches sized plans across descents.
Result<MemoryFlowResult> GreedyFlow(const Graph& graph, const PartitionPlan& base, int device,
                                    const MemoryFlowOptions& options, double budget, bool tiles_too, bool parts_too,
                                    bool channels_too, std::map<std::string, SizedPlan>& seen) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(graph.nodes.size());
  if (base.layers.size() != graph.nodes.size() || device < 0 || device >= base.num_devices)
    return Status::InvalidArgument("memory flow: the plan does not match the model, or has no device " +
                                   std::to_string(device));
  MemoryFlowResult result;
  // Only layers the device runs whole may join a path; the budget is a share of their MACs.
  std::vector<bool> tileable(n), mine(n);
  const auto figures = ComputeLayerFigures(graph);
  for (int k = 0; k < n; ++k) {
    const LayerAssignment& a = base.layers[k];
    // A layer on this device alone (WHOLE, or a one-device FFMT / FDT: the
    // planner's memory objective on one device) is the device's to cut.
    mine[k] = a.devices.size() == 1 && a.devices[0] == device;
    tileable[k] = mine[k] && CheckTileable(graph, k).ok();
    if (mine[k]) result.model_macs += figures[k].R;
  }
  const int64_t mac_budget =
      budget < 0 ? INT64_MAX : static_cast<int64_t>(budget * static_cast<double>(result.model_macs));
  std::vector<int> producer(graph.values.size(), -1);
  for (int k = 0; k < n; ++k)
    for (int v : graph.nodes[k].outputs) producer[v] = k;
  const auto consumers = graph.Consumers();
  const std::set<int> graph_outputs(graph.outputs.begin(), graph.outputs.end());

  std::vector<MemoryPath> paths;
  TS_ASSIGN_OR_RETURN(SizedPlan current, SizeOneDevicePlan(graph, PlanOf(base, device, paths), options.memory, device));
  result.arena_before_bytes = current.arena_bytes;
  result.weight_before_bytes = current.weight_bytes;
  result.load_peak_before_bytes = current.load_peak_bytes;
  SizedPlan least = current;  // the first state of least need
  int plateau_rounds = 0;     // rounds in a row that kept the need
  std::vector<MemoryPath> least_paths;
  int least_rounds = 0;

  for (int round = 1; round <= options.max_rounds; ++round) {
    TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, PlanOf(base, device, paths)));
    RunnerOptions ro;
    ro.threads = options.memory.threads;
    ro.shapes_only = true;
    TS_ASSIGN_OR_RETURN(auto prepared, PreparedProgram::Prepare(compiled.programs.at(device), ro));
    const std::vector<int> critical = CriticalValues(graph, compiled.programs.at(device), *prepared, paths);
    if (spdlog::should_log(spdlog::level::debug))
      for (size_t k = 0; k < critical.size() && k < 6; ++k)
        spdlog::debug("optimize-memory: round {}: critical value '{}' ({} bytes)", round,
                      graph.values[critical[k]].name, ValueBytes(graph, critical[k]));

    struct Best {
      std::vector<MemoryPath> paths;
      SizedPlan size;
      std::string critical;
      MemoryPath added;
    };
    std::optional<Best> best;
    // Sizes `trial` (the paths with `added` among them) and keeps it if it
    // needs the least so far within the MAC budget.
    auto consider = [&](std::vector<MemoryPath> trial, const MemoryPath& added, int v) {
      std::sort(trial.begin(), trial.end(), [](const MemoryPath& x, const MemoryPath& y) { return x.first < y.first; });
      const std::string key = PathsKey(trial);
      auto found = seen.find(key);
      if (found == seen.end()) {
        auto sized = SizeOneDevicePlan(graph, PlanOf(base, device, trial), options.memory, device);
        ++result.candidates;
        if (!sized.ok()) {  // the compiler refused this cut: not a candidate
          spdlog::debug("optimize-memory: {} refused: {}", DescribeMemoryPath(graph, added), sized.status().ToString());
          return;
        }
        found = seen.emplace(key, *sized).first;
      }
      const SizedPlan& s = found->second;
      spdlog::trace("optimize-memory: round {}: {}: arena {} + weights {} bytes, {} halo MACs", round,
                    DescribeMemoryPath(graph, added), s.arena_bytes, s.weight_bytes, s.halo_macs);
      if (s.halo_macs > mac_budget) return;
      // Ties: fewer MACs, then (channel paths) the lower steps elsewhere:
      // a stretch cut finer peaks lower, which pays once another stretch
      // no longer sets the peak.
      bool better = !best || s.need() < best->size.need();
      if (best && s.need() == best->size.need()) {
        better = s.halo_macs < best->size.halo_macs;
        if (channels_too && s.halo_macs == best->size.halo_macs) better = LowerBy(s.live_desc, best->size.live_desc, 1);
      }
      if (better) best = Best{std::move(trial), s, graph.values[v].name, added};
    };
    int tried_values = 0;
    for (int v : critical) {
      if (tried_values >= options.critical_values) break;
      const int p = producer[v];
      if (p < 0 || consumers[v].empty() || graph_outputs.count(v)) continue;  // never inside a path
      const int last_use = *std::max_element(consumers[v].begin(), consumers[v].end());
      ++tried_values;
      for (int i = std::max(0, p - options.reach); i <= p; ++i)
        for (int j = last_use; j <= std::min(n - 1, last_use + options.reach); ++j) {
          // Grow over the paths it meets (a path's tiles are one stack).
          int a = i, b = j;
          std::vector<MemoryPath> kept;
          for (bool grew = true; grew;) {
            grew = false;
            kept.clear();
            for (const MemoryPath& q : paths) {
              if (q.last < a || q.first > b) {
                kept.push_back(q);
              } else if (q.first < a || q.last > b) {
                a = std::min(a, q.first), b = std::max(b, q.last);
                grew = true;
              }
            }
          }
          if (b - a + 1 > options.max_path_layers) continue;
          bool ok = true;
          for (int k = a; k <= b && ok; ++k) ok = tileable[k];
          for (const MemoryPath& q : paths)  // a channel path is not tiled again
            if (q.channel_slices > 1 && q.first >= a && q.last <= b) ok = false;
          if (!ok) continue;
          const Shape& out = graph.values[graph.nodes[b].outputs[0]].shape;
          if (out.size() != 4) continue;
          struct Cut {
            int64_t rows, cols;
            bool parts;
          };
          std::vector<Cut> cuts;
          if (tiles_too)
            for (int g = 2; g <= options.max_grid; ++g) cuts.push_back({g, 1, false}), cuts.push_back({g, g, false});
          if (parts_too) {
            for (int g = 2; g <= options.max_grid; ++g) cuts.push_back({g, 1, true});
            for (int g : {8, 16})
              if (g > options.max_grid) cuts.push_back({g, 1, true});
          }
          for (const auto& [rows, cols, parts] : cuts) {
            if (rows > out[2] || cols > out[3]) continue;
            std::vector<MemoryPath> trial = kept;
            MemoryPath added{a, b, rows, cols, 0, graph.values[v].name, parts};
            // A neighbour with the same grid would fuse with it (partition_plan.h): one path.
            for (auto it = trial.begin(); it != trial.end();)
              if (it->channel_slices <= 1 && it->grid_rows == rows && it->grid_cols == cols && it->parts == parts &&
                  (it->last + 1 == a || b + 1 == it->first)) {
                added.first = std::min(added.first, it->first), added.last = std::max(added.last, it->last);
                it = trial.erase(it);
              } else {
                ++it;
              }
            trial.push_back(added);
            consider(std::move(trial), added, v);
          }
        }
      // Channel paths (issue 17 item 3) that make v inside them: v's
      // producer is in the chain and not its last layer. A channel path
      // replaces the channel paths it overlaps (so a later round can slice
      // a stretch finer once another stretch no longer sets the peak) and
      // never overlaps tiles.
      if (!channels_too) continue;
      for (int i = std::max(0, p - options.reach); i <= p; ++i)
        for (int j = p + 1; j <= std::min(n - 1, i + options.max_path_layers - 1); ++j) {
          bool ok = true;
          for (int k = i; k <= j && ok; ++k) ok = mine[k];
          std::vector<MemoryPath> kept;
          for (const MemoryPath& q : paths)
            if (q.last < i || q.first > j)
              kept.push_back(q);
            else
              ok = ok && q.channel_slices > 1;
          if (!ok) continue;
          std::optional<MemoryPath> chain = ChannelPathAt(graph, consumers, graph_outputs, i, j);
          if (!chain) continue;
          const int64_t channels = chain->channel_slices;
          for (int64_t slices : options.channel_slices) {
            if (slices < 2 || slices > channels) continue;
            MemoryPath added = *chain;
            added.channel_slices = slices;
            added.critical = graph.values[v].name;
            std::vector<MemoryPath> trial = kept;
            trial.push_back(added);
            consider(std::move(trial), added, v);
          }
        }
    }
    // A round must pay: at least 64 bytes and 0.5 % of the arena (not of
    // arena + weights: where weights dominate, that would refuse every step,
    // e.g. resnet18's stem saves 181 KiB of a 4.3 MiB arena beside 52 MiB).
    const int64_t needed = std::max<int64_t>(64, current.arena_bytes / 200);
    // With channel paths, a round may also keep the need and lower the
    // steps below the peak as much (a plateau: two stretches at the same
    // peak, each of which must be cut before the arena drops); the descent
    // returns the first state of least need, so a plateau that leads
    // nowhere costs nothing but time: at most kPlateauRounds in a row.
    constexpr int kPlateauRounds = 3;
    const bool pays = best && best->size.need() <= current.need() - needed;
    const bool plateau = channels_too && best && best->size.need() <= current.need() &&
                         plateau_rounds < kPlateauRounds && LowerBy(best->size.live_desc, current.live_desc, needed);
    if (!pays && !plateau) break;
    plateau_rounds = pays ? 0 : plateau_rounds + 1;
    for (MemoryPath& q : best->paths)
      if (q.first == best->added.first && q.last == best->added.last) q.arena_bytes = best->size.arena_bytes;
    paths = best->paths;
    result.rounds = round;
    if (spdlog::should_log(spdlog::level::debug)) {
      char line[512];
      std::snprintf(
          line, sizeof line,
          "round %d: %s for '%s': arena + weights %lld -> %lld bytes, halo %+.2f %% MACs (%lld programs sized, %.1f s)",
          round, DescribeMemoryPath(graph, best->added).c_str(), best->critical.c_str(),
          static_cast<long long>(current.need()), static_cast<long long>(best->size.need()),
          result.model_macs ? 100.0 * best->size.halo_macs / result.model_macs : 0.0,
          static_cast<long long>(result.candidates),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      spdlog::debug("optimize-memory: {}", line);
    }
    current = best->size;
    if (current.need() < least.need()) least = current, least_paths = paths, least_rounds = round;
  }
  paths = least_paths;
  current = least;
  result.rounds = least_rounds;
  result.paths = paths;
  result.plan = PlanOf(base, device, paths);
  result.arena_after_bytes = current.arena_bytes;
  result.weight_after_bytes = current.weight_bytes;
  result.load_peak_after_bytes = current.load_peak_bytes;
  result.halo_macs = current.halo_macs;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace

Result<MemoryFlowResult> OptimizeMemory(const Graph& graph, const MemoryFlowOptions& options) {
  return OptimizeDeviceMemory(graph, SingleDevicePlan(graph.nodes.size()), 0, options);
}

Result<MemoryFlowResult> OptimizeDeviceMemory(const Graph& graph, const PartitionPlan& base, int device,
                                              const MemoryFlowOptions& options) {
  // Greedy is not monotone in the budget: an early cut that is best alone
  // (one long path with a large halo) can block two cheaper cuts that end
  // lower (measured: a 3x3 stem, 503 KiB with no limit, 401 KiB within 10 %).
  // So the descent runs under the user's budget and under each smaller step
  // of a fixed ladder, and the smallest arena wins (ties: fewer MACs); a
  // budget on the ladder is never beaten by a smaller one. Each budget is
  // descended twice, with and without paths processed in parts (a zero-MAC
  // parts path taken early can block better tiles later: extraction@224
  // ends at 3648 KiB with parts tried, 1615 KiB without), when allowed; and
  // channel paths have a descent of their own (below).
  const auto t0 = std::chrono::steady_clock::now();
  // Every candidate is compiled and sized, never run: without weight values
  // no compile copies weight slices (most of the flow's time before).
  const Graph shapes = graph.ShapesOnly();
  std::vector<double> budgets;
  for (double b : {0.0, 0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 1.0})
    if (options.max_mac_overhead < 0 || b < options.max_mac_overhead) budgets.push_back(b);
  budgets.push_back(options.max_mac_overhead);
  std::map<std::string, SizedPlan> seen;  // plan key -> its size (candidates recur across rounds and descents)
  std::optional<MemoryFlowResult> best;
  int64_t candidates = 0;
  int rounds = 0;
  struct Descent {
    double budget;
    bool tiles, parts, channels;
  };
  std::vector<Descent> descents;
  for (double b : budgets) {
    if (options.tiles) descents.push_back({b, true, false, false});
    if (options.parts) descents.push_back({b, options.tiles, true, false});
  }
  // Channel paths add no MAC: one descent of channel paths alone (a few
  // candidates a round). Mixed with the tile descents they found little
  // more and doubled the flow's time (densenet121: 11.5 -> 26 s).
  if (options.channels) descents.push_back({budgets.front(), false, false, true});
  for (const auto& [b, tiles_too, parts_too, channels_too] : descents) {
    TS_ASSIGN_OR_RETURN(MemoryFlowResult r,
                        GreedyFlow(shapes, base, device, options, b, tiles_too, parts_too, channels_too, seen));
    candidates += r.candidates;
    rounds += r.rounds;
    if (options.progress) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "within %s MACs, %s: arena %lld + weights %lld bytes, %zu path(s), %.2f %% MACs recomputed",
                    b < 0 ? "unlimited" : (std::to_string(static_cast<int>(std::lround(b * 100))) + " %").c_str(),
                    channels_too               ? "channel paths"
                    : (tiles_too && parts_too) ? "tiles and row bands"
                    : tiles_too                ? "tiles"
                                               : "row bands",
                    static_cast<long long>(r.arena_after_bytes), static_cast<long long>(r.weight_after_bytes),
                    r.paths.size(), 100.0 * r.mac_overhead());
      options.progress(line);
    }
    if (!best || r.need_after() < best->need_after() ||
        (r.need_after() == best->need_after() && r.halo_macs < best->halo_macs))
      best = std::move(r);
  }
  if (!best) return Status::InvalidArgument("memory flow: no kind of path to try (tiles, parts or channels)");
  best->candidates = candidates;
  best->rounds = rounds;
  best->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::move(*best);
}

}  // namespace tessera
