#include "daemon/runtime/parts_search.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/program_runner.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/op_traits.h"

namespace tessera {

double PartsTimeModel::Predict(int64_t gene, const std::vector<bool>& in_parts) const {
  double extra = 0;
  for (size_t k = 0; k < in_parts.size() && k < layer_seconds.size(); ++k)
    if (in_parts[k]) extra += layer_seconds[k];
  const double alpha = gene >= 0 && gene < static_cast<int64_t>(slowdown.size()) ? slowdown[gene] : 0.0;
  return unsplit_seconds + alpha * extra;
}

int PartsPoint::layers_in_parts() const {
  int n = 0;
  for (const MemoryPath& p : paths) n += p.last - p.first + 1;
  return n;
}

std::vector<int> PartsEligibleLayers(const Graph& graph, const PartitionPlan& base, int device) {
  std::vector<int> out;
  for (int k = 0; k < static_cast<int>(graph.nodes.size()) && k < static_cast<int>(base.layers.size()); ++k) {
    const LayerAssignment& a = base.layers[k];
    if (a.devices.size() != 1 || a.devices[0] != device || !CheckTileable(graph, k).ok()) continue;
    if (graph.nodes[k].outputs.empty() || graph.values[graph.nodes[k].outputs[0]].shape.size() != 4) continue;
    out.push_back(k);
  }
  return out;
}

std::vector<MemoryPath> PartsPaths(const Graph& graph, const std::vector<bool>& in_parts, int64_t bands,
                                   int max_path_layers) {
  std::vector<MemoryPath> paths;
  const int n = static_cast<int>(std::min(in_parts.size(), graph.nodes.size()));
  auto close = [&](int a, int b) {
    const Shape& out = graph.values[graph.nodes[b].outputs[0]].shape;
    const int64_t rows = std::min<int64_t>(bands, out.size() == 4 ? out[2] : 1);
    if (rows >= 2) paths.push_back(MemoryPath{a, b, rows, 1, 0, "", true});
  };
  for (int k = 0; k < n;) {
    if (!in_parts[k]) {
      ++k;
      continue;
    }
    int b = k;
    while (b + 1 < n && in_parts[b + 1] && b + 1 - k + 1 <= max_path_layers) ++b;
    close(k, b);
    k = b + 1;
  }
  return paths;
}

std::vector<PartsPoint> ParetoFront(std::vector<PartsPoint> points) {
  std::sort(points.begin(), points.end(), [](const PartsPoint& a, const PartsPoint& b) {
    if (a.size.need() != b.size.need()) return a.size.need() < b.size.need();
    return a.predicted_seconds < b.predicted_seconds;
  });
  std::vector<PartsPoint> front;
  double best = std::numeric_limits<double>::infinity();
  for (PartsPoint& p : points)
    if (p.predicted_seconds < best) {
      best = p.predicted_seconds;
      front.push_back(std::move(p));
    }
  return front;
}

namespace {

std::string Mib(int64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

// One genome: a bit per eligible layer and the index of its band count.
struct Genome {
  std::vector<bool> bits;
  int band = 0;
  // Evaluated:
  double memory = 0, time = 0;  // objectives (memory: +inf when the compiler refuses it)
  int rank = 0;
  double crowding = 0;
};

bool Dominates(const Genome& a, const Genome& b) {
  return a.memory <= b.memory && a.time <= b.time && (a.memory < b.memory || a.time < b.time);
}

// Non-dominated sorting (rank 0 = the front) and crowding distance within
// each rank (NSGA-II). Returns the ranks' members.
std::vector<std::vector<int>> RankAndCrowd(std::vector<Genome>& pop) {
  const int n = static_cast<int>(pop.size());
  std::vector<std::vector<int>> dominated(n);
  std::vector<int> count(n, 0);
  std::vector<std::vector<int>> fronts(1);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      if (Dominates(pop[i], pop[j]))
        dominated[i].push_back(j);
      else if (Dominates(pop[j], pop[i]))
        ++count[i];
    }
    if (count[i] == 0) pop[i].rank = 0, fronts[0].push_back(i);
  }
  for (size_t f = 0; !fronts[f].empty(); ++f) {
    std::vector<int> next;
    for (int i : fronts[f])
      for (int j : dominated[i])
        if (--count[j] == 0) pop[j].rank = static_cast<int>(f) + 1, next.push_back(j);
    fronts.push_back(std::move(next));
  }
  fronts.pop_back();
  for (auto& front : fronts) {
    for (int i : front) pop[i].crowding = 0;
    for (int objective = 0; objective < 2; ++objective) {
      auto value = [&](int i) { return objective == 0 ? pop[i].memory : pop[i].time; };
      std::sort(front.begin(), front.end(), [&](int a, int b) { return value(a) < value(b); });
      const double lo = value(front.front()), hi = value(front.back());
      pop[front.front()].crowding = pop[front.back()].crowding = std::numeric_limits<double>::infinity();
      if (!(hi > lo) || !std::isfinite(hi - lo)) continue;
      for (size_t k = 1; k + 1 < front.size(); ++k)
        pop[front[k]].crowding += (value(front[k + 1]) - value(front[k - 1])) / (hi - lo);
    }
  }
  return fronts;
}

bool Better(const Genome& a, const Genome& b) { return a.rank != b.rank ? a.rank < b.rank : a.crowding > b.crowding; }

// The median of `repeat` runs of `plan` (one device program per plan
// device, in process), with its outputs.
Result<InProcessRun> TimePlan(const Graph& graph, const PartitionPlan& plan, const std::vector<TensorData>& inputs,
                              const PartsSearchOptions& options) {
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, plan));
  RunnerOptions ro;
  ro.threads = options.memory.threads;
  return RunProgramsInProcess(graph, compiled.programs, inputs, ro, std::max(1, options.repeat));
}

double MaxRelDiff(const std::vector<TensorData>& want, const std::vector<TensorData>& got) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (i >= got.size() || got[i].values.size() != want[i].values.size())
      return std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < want[i].values.size(); ++k) {
      diff = std::max(diff, static_cast<double>(std::fabs(want[i].values[k] - got[i].values[k])));
      scale = std::max(scale, static_cast<double>(std::fabs(want[i].values[k])));
    }
  }
  return scale > 0 ? diff / scale : diff;
}

std::vector<TensorData> Inputs(const Graph& graph) {
  std::vector<TensorData> inputs;
  for (size_t i = 0; i < graph.inputs.size(); ++i)
    inputs.push_back(SeededInput(graph.values[graph.inputs[i]].shape, 1 + i));
  return inputs;
}

Result<PartsTimeModel> Calibrate(const Graph& graph, const PartitionPlan& base, int device,
                                 const PartsSearchOptions& options, std::vector<TensorData>* unsplit_outputs) {
  if (options.bands.empty()) return Status::InvalidArgument("parts search: no band counts to try");
  const std::vector<TensorData> inputs = Inputs(graph);
  PartsTimeModel model;
  TS_ASSIGN_OR_RETURN(InProcessRun unsplit, TimePlan(graph, base, inputs, options));
  model.unsplit_seconds = unsplit.seconds;
  if (unsplit_outputs) *unsplit_outputs = unsplit.outputs;
  // Each layer's share of T_1: the executor's per-node times of the whole graph.
  ExecutorOptions eo;
  eo.threads = options.memory.threads;
  eo.profile = true;
  TS_ASSIGN_OR_RETURN(auto executor, Executor::Create(graph, eo));
  std::vector<TensorData> outputs;
  for (int r = 0; r < std::max(1, options.repeat); ++r) TS_RETURN_IF_ERROR(executor->Run(inputs, &outputs));
  const std::vector<double>& node_seconds = executor->StepSeconds();
  double total = 0;
  for (double s : node_seconds) total += s;
  model.layer_seconds.assign(graph.nodes.size(), 0.0);
  for (size_t k = 0; k < node_seconds.size() && k < graph.nodes.size(); ++k)
    model.layer_seconds[k] = total > 0 ? model.unsplit_seconds * node_seconds[k] / total : 0.0;

  const std::vector<int> eligible = PartsEligibleLayers(graph, base, device);
  std::vector<bool> all(graph.nodes.size(), false);
  for (int k : eligible) all[k] = true;
  for (int64_t n : options.bands) {
    const std::vector<MemoryPath> paths = PartsPaths(graph, all, n, options.max_path_layers);
    std::vector<bool> used(graph.nodes.size(), false);
    double whole = 0;
    for (const MemoryPath& p : paths)
      for (int k = p.first; k <= p.last; ++k) used[k] = true, whole += model.layer_seconds[k];
    auto run = TimePlan(graph, PlanOf(base, device, paths), inputs, options);
    if (!run.ok())
      return Status(run.status().code(), "parts search: timing every eligible layer in " + std::to_string(n) +
                                             " bands: " + run.status().message());
    model.bands.push_back(n);
    model.all_parts_seconds.push_back(run->seconds);
    model.slowdown.push_back(whole > 0 ? std::max(0.0, (run->seconds - model.unsplit_seconds) / whole) : 0.0);
    if (options.progress) {
      char line[200];
      std::snprintf(line, sizeof line, "calibration: %lld bands: %.2f ms against %.2f ms unsplit, alpha %.3f",
                    static_cast<long long>(n), run->seconds * 1e3, model.unsplit_seconds * 1e3, model.slowdown.back());
      options.progress(line);
    }
  }
  return model;
}

}  // namespace

Result<PartsTimeModel> CalibratePartsTime(const Graph& graph, const PartitionPlan& base, int device,
                                          const PartsSearchOptions& options) {
  return Calibrate(graph, base, device, options, nullptr);
}

Result<PartsSearchResult> GeneticParts(const Graph& graph, const PartitionPlan& base, int device,
                                       const PartsTimeModel& time, const PartsSearchOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (base.layers.size() != graph.nodes.size() || device < 0 || device >= base.num_devices)
    return Status::InvalidArgument("parts search: the plan does not match the model, or has no device " +
                                   std::to_string(device));
  if (time.bands != options.bands)
    return Status::InvalidArgument("parts search: the time model was calibrated for other band counts");
  if (options.population < 4 || options.generations < 0)
    return Status::InvalidArgument("parts search: population must be at least 4 and generations not negative");
  PartsSearchResult result;
  result.time = time;
  result.eligible = PartsEligibleLayers(graph, base, device);
  const int m = static_cast<int>(result.eligible.size());
  const int nb = static_cast<int>(options.bands.size());
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  std::map<std::string, PartsPoint> archive;  // paths key -> point
  std::map<std::string, bool> refused;        // paths key the compiler refused
  auto evaluate = [&](Genome& g) -> Status {
    ++result.evaluated;
    std::vector<bool> in_parts(graph.nodes.size(), false);
    for (int i = 0; i < m; ++i) in_parts[result.eligible[i]] = g.bits[i];
    PartsPoint p;
    p.bands = options.bands[g.band];
    p.paths = PartsPaths(graph, in_parts, p.bands, options.max_path_layers);
    p.in_parts.assign(graph.nodes.size(), false);
    for (const MemoryPath& q : p.paths)
      for (int k = q.first; k <= q.last; ++k) p.in_parts[k] = true;
    p.predicted_seconds = time.Predict(g.band, p.in_parts);
    g.time = p.predicted_seconds;
    const std::string key = PathsKey(p.paths);
    if (refused.count(key)) {
      g.memory = std::numeric_limits<double>::infinity();
      return Status::OK();
    }
    auto found = archive.find(key);
    if (found == archive.end()) {
      auto sized = SizeOneDevicePlan(graph, PlanOf(base, device, p.paths), options.memory, device);
      ++result.sized;
      if (!sized.ok()) {
        spdlog::debug("parts search: {} refused: {}", key, sized.status().ToString());
        refused[key] = true;
        g.memory = std::numeric_limits<double>::infinity();
        return Status::OK();
      }
      p.size = *sized;
      found = archive.emplace(key, std::move(p)).first;
    }
    g.memory = static_cast<double>(found->second.size.need());
    return Status::OK();
  };

  // First population: no parts, all in parts at each N, random densities.
  std::vector<Genome> pop;
  pop.push_back(Genome{std::vector<bool>(m, false), 0});
  for (int b = 0; b < nb; ++b) pop.push_back(Genome{std::vector<bool>(m, true), b});
  while (static_cast<int>(pop.size()) < options.population) {
    Genome g{std::vector<bool>(m), static_cast<int>(rng() % nb)};
    const double density = unit(rng);
    for (int i = 0; i < m; ++i) g.bits[i] = unit(rng) < density;
    pop.push_back(std::move(g));
  }
  pop.resize(options.population);
  for (Genome& g : pop) TS_RETURN_IF_ERROR(evaluate(g));
  RankAndCrowd(pop);

  const double flip = m > 0 ? 1.0 / m : 0.0;
  auto tournament = [&]() -> const Genome& {
    const Genome& a = pop[rng() % pop.size()];
    const Genome& b = pop[rng() % pop.size()];
    return Better(a, b) ? a : b;
  };
  for (int gen = 1; gen <= options.generations; ++gen) {
    std::vector<Genome> next = pop;
    while (next.size() < 2 * pop.size()) {
      const Genome& a = tournament();
      const Genome& b = tournament();
      Genome child{a.bits, unit(rng) < 0.5 ? a.band : b.band};
      if (unit(rng) < options.crossover)
        for (int i = 0; i < m; ++i)
          if (unit(rng) < 0.5) child.bits[i] = b.bits[i];
      for (int i = 0; i < m; ++i)
        if (unit(rng) < flip) child.bits[i] = !child.bits[i];
      if (unit(rng) < 0.1) child.band = static_cast<int>(rng() % nb);
      TS_RETURN_IF_ERROR(evaluate(child));
      next.push_back(std::move(child));
    }
    const auto ranks = RankAndCrowd(next);
    std::vector<int> order(next.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return Better(next[a], next[b]); });
    pop.clear();
    for (int i = 0; i < options.population; ++i) pop.push_back(next[order[i]]);
    RankAndCrowd(pop);
    result.generations = gen;
    if (options.progress && (gen % 10 == 0 || gen == options.generations))
      options.progress("generation " + std::to_string(gen) + "/" + std::to_string(options.generations) + ": " +
                       std::to_string(ranks.empty() ? 0 : ranks[0].size()) + " on the front, " +
                       std::to_string(result.sized) + " programs sized");
  }
  std::vector<PartsPoint> all;
  for (auto& [key, p] : archive) all.push_back(p);
  result.front = ParetoFront(std::move(all));
  auto none = SizeOneDevicePlan(graph, base, options.memory, device);
  if (!none.ok()) return none.status();
  result.unsplit.size = *none;
  result.unsplit.in_parts.assign(graph.nodes.size(), false);
  result.unsplit.predicted_seconds = time.unsplit_seconds;
  result.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

Result<PartsSearchResult> SearchParts(const Graph& graph, const PartitionPlan& base, int device,
                                      const PartsSearchOptions& options) {
  // Points the time model puts below this share of the target are not run:
  // measured against predicted, the model was within 11 % on yolov2-tiny
  // (bench/parts/run --genetic prints both for every point it runs).
  constexpr double kPredictedShare = 0.9;
  std::vector<TensorData> want;
  TS_ASSIGN_OR_RETURN(PartsTimeModel time, Calibrate(graph, base, device, options, &want));
  const Graph shapes = graph.ShapesOnly();
  TS_ASSIGN_OR_RETURN(PartsSearchResult r, GeneticParts(shapes, base, device, time, options));
  const auto t0 = std::chrono::steady_clock::now();
  r.unsplit.measured_seconds = time.unsplit_seconds;
  r.unsplit.max_rel_diff = 0;
  const std::vector<TensorData> inputs = Inputs(graph);
  int measured = 0, fitting = 0;
  double correction = 1.0;
  double best_fps = 0, fastest_fitting = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < r.front.size() && r.chosen < 0; ++i) {
    PartsPoint& p = r.front[i];
    if (options.ram_bytes >= 0 && p.size.need() > options.ram_bytes) continue;
    ++fitting;
    fastest_fitting = std::min(fastest_fitting, p.predicted_seconds);
    // After a run, the model's predictions are scaled by what that run
    // measured against its prediction: neighbours on the front share the
    // model's error, and every run that misses costs `repeat` frames.
    if (options.min_fps > 0 && 1.0 / (p.predicted_seconds * correction) < kPredictedShare * options.min_fps) continue;
    if (measured >= options.max_measured) break;
    ++measured;
    TS_ASSIGN_OR_RETURN(InProcessRun run, TimePlan(graph, PlanOf(base, device, p.paths), inputs, options));
    p.measured_seconds = run.seconds;
    p.max_rel_diff = MaxRelDiff(want, run.outputs);
    best_fps = std::max(best_fps, 1.0 / run.seconds);
    if (p.predicted_seconds > 0) correction = run.seconds / p.predicted_seconds;
    if (options.progress) {
      char line[200];
      std::snprintf(line, sizeof line, "measured: %s in %d layer(s), %lld bands: %.2f ms (predicted %.2f ms)",
                    Mib(p.size.need()).c_str(), p.layers_in_parts(), static_cast<long long>(p.bands), run.seconds * 1e3,
                    p.predicted_seconds * 1e3);
      options.progress(line);
    }
    if (options.min_fps <= 0 || 1.0 / run.seconds >= options.min_fps) r.chosen = static_cast<int>(i);
  }
  if (r.chosen < 0) {
    char why[400];
    if (fitting == 0)
      std::snprintf(why, sizeof why, "no choice of parts fits %s: the least memory found is %s (arena + weights)",
                    Mib(options.ram_bytes).c_str(), r.front.empty() ? "?" : Mib(r.front.front().size.need()).c_str());
    else if (measured == 0)
      std::snprintf(why, sizeof why,
                    "%d choice(s) fit the memory limit but the time model puts all of them below %.1fx %.2f fps "
                    "(the fastest that fits is predicted at %.2f fps)",
                    fitting, kPredictedShare, options.min_fps, 1.0 / fastest_fitting);
    else
      std::snprintf(
          why, sizeof why,
          "%d choice(s) fit the memory limit; %d measured, the fastest at %.2f fps, below the %.2f fps target", fitting,
          measured, best_fps, options.min_fps);
    r.why_none = why;
  }
  r.measure_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace tessera
