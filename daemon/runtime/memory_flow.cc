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
  char how[96];
  if (p.parts)
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
           std::to_string(q.grid_cols) + (q.parts ? "p" : "") + ";";
  return key;
}

Result<SizedPlan> SizeOneDevicePlan(const Graph& graph, const PartitionPlan& plan, const DeviceMemoryOptions& options,
                                    int device) {
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, plan));
  TS_ASSIGN_OR_RETURN(DeviceMemory m, SizeDeviceProgram(compiled.programs.at(device), options));
  return SizedPlan{m.arena_bytes, m.weight_bytes, m.load_peak_bytes, compiled.halo_mac_overhead};
}

PartitionPlan PlanOf(const PartitionPlan& base, int device, const std::vector<MemoryPath>& paths) {
  PartitionPlan plan = base;
  for (const MemoryPath& p : paths)
    for (int k = p.first; k <= p.last; ++k) {
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
  std::vector<int64_t> live(step_bytes.begin(), step_bytes.end());
  for (const BufferRequest& b : buffers)
    for (int s = std::max(b.first, 0); s <= std::min(b.last, steps - 1); ++s) live[s] += static_cast<int64_t>(b.size);
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

// One greedy descent under `budget` (a share of the model's MACs, < 0: none),
// trying paths processed in parts too when `parts_too`. `seen` caches sized plans
// across descents.
Result<MemoryFlowResult> GreedyFlow(const Graph& graph, const PartitionPlan& base, int device,
                                    const MemoryFlowOptions& options, double budget, bool parts_too,
                                    std::map<std::string, SizedPlan>& seen) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(graph.nodes.size());
  if (base.layers.size() != graph.nodes.size() || device < 0 || device >= base.num_devices)
    return Status::InvalidArgument("memory flow: the plan does not match the model, or has no device " +
                                   std::to_string(device));
  MemoryFlowResult result;
  // Only layers the device runs whole may join a path; the budget is a share of their MACs.
  std::vector<bool> tileable(n);
  const auto figures = ComputeLayerFigures(graph);
  for (int k = 0; k < n; ++k) {
    const LayerAssignment& a = base.layers[k];
    // A layer on this device alone (WHOLE, or a one-device FFMT / FDT: the
    // planner's memory objective on one device) is the device's to cut.
    const bool mine = a.devices.size() == 1 && a.devices[0] == device;
    tileable[k] = mine && CheckTileable(graph, k).ok();
    if (mine) result.model_macs += figures[k].R;
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
      int64_t rows = 0, cols = 0;
      int first = 0, last = 0;
      bool parts = false;
    };
    std::optional<Best> best;
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
          if (!ok) continue;
          const Shape& out = graph.values[graph.nodes[b].outputs[0]].shape;
          if (out.size() != 4) continue;
          struct Cut {
            int64_t rows, cols;
            bool parts;
          };
          std::vector<Cut> cuts;
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
              if (it->grid_rows == rows && it->grid_cols == cols && it->parts == parts &&
                  (it->last + 1 == a || b + 1 == it->first)) {
                added.first = std::min(added.first, it->first), added.last = std::max(added.last, it->last);
                it = trial.erase(it);
              } else {
                ++it;
              }
            trial.push_back(added);
            std::sort(trial.begin(), trial.end(),
                      [](const MemoryPath& x, const MemoryPath& y) { return x.first < y.first; });
            const std::string key = PathsKey(trial);
            auto found = seen.find(key);
            if (found == seen.end()) {
              auto sized = SizeOneDevicePlan(graph, PlanOf(base, device, trial), options.memory, device);
              ++result.candidates;
              if (!sized.ok()) {  // the compiler refused this cut: not a candidate
                spdlog::debug("optimize-memory: {} refused: {}", DescribeMemoryPath(graph, added),
                              sized.status().ToString());
                continue;
              }
              found = seen.emplace(key, *sized).first;
            }
            const SizedPlan& s = found->second;
            spdlog::trace("optimize-memory: round {}: {}: arena {} + weights {} bytes, {} halo MACs", round,
                          DescribeMemoryPath(graph, added), s.arena_bytes, s.weight_bytes, s.halo_macs);
            if (s.halo_macs > mac_budget) continue;
            if (!best || s.need() < best->size.need() ||
                (s.need() == best->size.need() && s.halo_macs < best->size.halo_macs))
              best = Best{trial, s, graph.values[v].name, rows, cols, added.first, added.last, parts};
          }
        }
    }
    // A round must pay: at least 64 bytes and 0.5 % of the arena (not of
    // arena + weights: where weights dominate, that would refuse every step,
    // e.g. resnet18's stem saves 181 KiB of a 4.3 MiB arena beside 52 MiB).
    const int64_t needed = std::max<int64_t>(64, current.arena_bytes / 200);
    if (!best || best->size.need() > current.need() - needed) break;
    for (MemoryPath& q : best->paths)
      if (q.first == best->first && q.last == best->last) q.arena_bytes = best->size.arena_bytes;
    paths = best->paths;
    result.rounds = round;
    if (spdlog::should_log(spdlog::level::debug)) {
      char line[512];
      const MemoryPath chosen{best->first, best->last, best->rows, best->cols, 0, "", best->parts};
      std::snprintf(
          line, sizeof line,
          "round %d: %s for '%s': arena + weights %lld -> %lld bytes, halo %+.2f %% MACs (%lld programs sized, %.1f s)",
          round, DescribeMemoryPath(graph, chosen).c_str(), best->critical.c_str(),
          static_cast<long long>(current.need()), static_cast<long long>(best->size.need()),
          result.model_macs ? 100.0 * best->size.halo_macs / result.model_macs : 0.0,
          static_cast<long long>(result.candidates),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      spdlog::debug("optimize-memory: {}", line);
    }
    current = best->size;
  }
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
  // ends at 3648 KiB with parts tried, 1615 KiB without), when allowed.
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
  std::vector<std::pair<double, bool>> descents;
  for (double b : budgets) {
    descents.push_back({b, false});
    if (options.parts) descents.push_back({b, true});
  }
  for (const auto& [b, parts_too] : descents) {
    TS_ASSIGN_OR_RETURN(MemoryFlowResult r, GreedyFlow(shapes, base, device, options, b, parts_too, seen));
    candidates += r.candidates;
    rounds += r.rounds;
    if (options.progress) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "within %s MACs%s: arena %lld + weights %lld bytes, %zu path(s), %.2f %% MACs recomputed",
                    b < 0 ? "unlimited" : (std::to_string(static_cast<int>(std::lround(b * 100))) + " %").c_str(),
                    parts_too ? ", parts too" : "", static_cast<long long>(r.arena_after_bytes),
                    static_cast<long long>(r.weight_after_bytes), r.paths.size(), 100.0 * r.mac_overhead());
      options.progress(line);
    }
    if (!best || r.need_after() < best->need_after() ||
        (r.need_after() == best->need_after() && r.halo_macs < best->halo_macs))
      best = std::move(r);
  }
  best->candidates = candidates;
  best->rounds = rounds;
  best->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::move(*best);
}

}  // namespace tessera
