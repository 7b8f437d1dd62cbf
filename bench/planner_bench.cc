// bench/planner: solve times of every planner objective, CBC vs the exact /
// DP paths, on darknet's yolov2 and vgg-16 (and any extra model paths given
// on the command line, e.g. a resnet50 .onnx), for N = 2, 6, 10, 16.
// Targets (issue 3): exact/DP under 50 ms per plan, CBC under 1 s. Then the
// throughput pipeline DP (issue 18 item 1) and the genetic search beside it
// (issue 18 item 6; `--genetic` runs that section alone).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "partition/graph/metrics.h"
#include "partition/import/model_import.h"
#include "planner/cluster.h"
#include "planner/memory_split.h"
#include "planner/placement.h"
#include "planner/weight_partition.h"

using namespace tessera;

namespace {

// Median wall time of `repeats` runs, in milliseconds.
double MedianMs(int repeats, const std::function<void()>& run) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// 4 kinds x 4 devices: 1.2, 2, 3.75 and 6 GMAC/s, 100 Mbit/s links.
Cluster FourKinds() {
  Cluster mixed = UniformCluster(16);
  const double speeds[] = {3.75e9, 2e9, 6e9, 1.2e9};
  for (int i = 0; i < 16; ++i) mixed.devices[i].macs_per_s = speeds[i / 4];
  mixed.default_link.bytes_per_s = 100e6 / 8;
  return mixed;
}

// Issue 18 item 1: throughput over pipelines, densenet201 (224²) on 16/64/256
// identical devices (targets: < 1 s, proven optimal) and on 16 devices of 4
// kinds (target < 5 s), beside branch-and-bound (200000 nodes) as before.
void PipelineSection() {
  ImportOptions options;
  options.input_shapes[""] = {1, 3, 224, 224};
  auto graph = ImportModel("/usr/share/darknet/cfg/densenet201.cfg", options);
  if (!graph.ok()) {
    std::printf("densenet201: skipped (%s)\n", graph.status().message().c_str());
    return;
  }
  const auto layers = ComputeLayerFigures(*graph);
  std::printf("\nthroughput, densenet201 224x224 (%zu layers): pipeline DP vs branch-and-bound\n", layers.size());
  std::printf("%-26s %10s %8s %11s %11s %11s  %12s %11s\n", "cluster", "dp time", "optimal", "period s", "bound s",
              "any-bound s", "bnb time", "bnb period");
  auto row = [&](const std::string& label, const Cluster& cluster) {
    PlacementProblem problem = MakePlacementProblem(*graph, layers, cluster);
    problem.source = 0;
    Result<PlacementResult> pipe = Status::Internal("not run");
    const double ms = MedianMs(3, [&] { pipe = PlacePipeline(problem); });
    char bnb_time[32] = "-", bnb_period[32] = "-";
    if (cluster.size() <= 16) {
      auto seed = PlaceBisection(problem, PlacementObjective::kThroughput);
      Result<PlacementResult> bt = Status::Internal("not run");
      const double bms = MedianMs(1, [&] {
        bt = PlaceBranchAndBound(problem, PlacementObjective::kThroughput, seed.ok() ? &seed.value() : nullptr, 200000);
      });
      std::snprintf(bnb_time, sizeof bnb_time, "%.0f ms%s", bms, bt.ok() && bt->solver.optimal ? "" : "*");
      if (bt.ok()) std::snprintf(bnb_period, sizeof bnb_period, "%.6f", bt->cost.period_s);
    }
    if (!pipe.ok()) {
      std::printf("%-26s %s\n", label.c_str(), pipe.status().message().c_str());
      return;
    }
    std::printf("%-26s %7.1f ms %8s %11.6f %11.6f %11.6f  %12s %11s\n", label.c_str(), ms,
                pipe->solver.optimal ? "yes" : "no", pipe->cost.period_s, pipe->solver.bound, pipe->solver.bound_any,
                bnb_time, bnb_period);
  };
  for (int n : {16, 64, 256}) row(std::to_string(n) + " identical (1 Gbit/s)", UniformCluster(n));
  row("16 of 4 kinds (100 Mbit/s)", FourKinds());
}

// Issue 18 item 6: the genetic search beside the exact pipeline DP: the
// periods both find and the time they take (GA median of 3 seeds' times; its
// period is the best and worst of the 3 seeds).
void GeneticSection() {
  std::printf("\nthroughput: genetic search (%s) vs pipeline DP\n", DescribeGeneticOptions({}).c_str());
  std::printf("%-14s %-26s %10s %11s %8s  %10s %11s %11s %7s\n", "model", "cluster", "dp time", "dp period", "optimal",
              "ga time", "ga best", "ga worst", "ga/dp");
  const Cluster mixed = FourKinds();
  const std::pair<const char*, std::vector<int64_t>> models[] = {
      {"densenet201", {1, 3, 224, 224}}, {"resnet50", {1, 3, 224, 224}}, {"yolov2", {1, 3, 416, 416}}};
  for (const auto& [name, shape] : models) {
    ImportOptions options;
    options.input_shapes[""] = shape;
    auto graph = ImportModel(std::string("/usr/share/darknet/cfg/") + name + ".cfg", options);
    if (!graph.ok()) continue;
    const auto layers = ComputeLayerFigures(*graph);
    for (const auto& [label, cluster] : {std::pair<std::string, Cluster>{"16 identical (1 Gbit/s)", UniformCluster(16)},
                                         std::pair<std::string, Cluster>{"16 of 4 kinds (100 Mbit/s)", mixed}}) {
      PlacementProblem problem = MakePlacementProblem(*graph, layers, cluster);
      problem.source = 0;
      Result<PlacementResult> pipe = Status::Internal("not run");
      const double dp_ms = MedianMs(1, [&] { pipe = PlacePipeline(problem); });
      std::vector<double> ms, periods;
      for (uint64_t seed : {1, 2, 3}) {
        GeneticOptions go;
        go.seed = seed;
        Result<PlacementResult> ga = Status::Internal("not run");
        ms.push_back(MedianMs(1, [&] { ga = PlaceGenetic(problem, PlacementObjective::kThroughput, go); }));
        periods.push_back(ga.ok() ? ga->cost.period_s : -1);
      }
      std::sort(ms.begin(), ms.end());
      const auto [lo, hi] = std::minmax_element(periods.begin(), periods.end());
      const double dp_period = pipe.ok() ? pipe->cost.period_s : -1;
      std::printf("%-14s %-26s %7.1f ms %11.6f %8s  %7.0f ms %11.6f %11.6f %6.2fx\n", name, label.c_str(), dp_ms,
                  dp_period, pipe.ok() && pipe->solver.optimal ? "yes" : "no", ms[1], *lo, *hi,
                  dp_period > 0 ? *lo / dp_period : 0.0);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--genetic") {  // that section alone
    GeneticSection();
    return 0;
  }
  std::vector<std::string> models = {"/usr/share/darknet/cfg/yolov2.cfg", "/usr/share/darknet/cfg/vgg-16.cfg"};
  for (int i = 1; i < argc; ++i) models.push_back(argv[i]);
  std::printf("%-14s %3s  %10s %10s  %10s %10s  %12s %12s  %14s %12s  %s\n", "model", "N", "mem exact", "mem cbc",
              "comm dp", "comm cbc", "lat dp", "lat bnb", "thr bnb", "thr bisect", "agree");
  for (const auto& path : models) {
    auto graph = ImportModel(path, ImportOptions{});
    if (!graph.ok()) {
      std::printf("%s: skipped (%s)\n", path.c_str(), graph.status().message().c_str());
      continue;
    }
    const auto layers = ComputeLayerFigures(*graph);
    std::string name = graph->name.size() > 14 ? graph->name.substr(0, 14) : graph->name;
    for (int n : {2, 6, 10, 16}) {
      MemorySplit exact, ilp;
      OwpPlan dp, owp;
      const double mem_exact = MedianMs(5, [&] { exact = SolveMemorySplitExact(layers, n); });
      const double mem_cbc = MedianMs(3, [&] { ilp = *SolveMemorySplitIlp(layers, n); });
      const auto chain = WeightPartitionedChain(*graph, layers, exact.switch_layer);
      const double comm_dp = MedianMs(5, [&] { dp = SolveOwpDp(chain, n); });
      const double comm_cbc = MedianMs(3, [&] { owp = *SolveOwpIlp(chain, n); });
      const bool agree = std::abs(exact.footprint - ilp.footprint) <= 1e-9 * exact.footprint &&
                         std::abs(dp.values - owp.values) <= 1e-9 * std::max(1.0, dp.values);

      const Cluster cluster = UniformCluster(n);
      const PlacementProblem problem = MakePlacementProblem(*graph, layers, cluster);
      char lat_dp[32] = "n/a (DAG)", lat_bnb[32], thr_bnb[32], thr_bis[32];
      if (problem.IsChain()) {
        const double ms = MedianMs(3, [&] { (void)PlaceLatencyDp(problem); });
        std::snprintf(lat_dp, sizeof lat_dp, "%.2f ms", ms);
      }
      auto seed_l = PlaceBisection(problem, PlacementObjective::kLatency);
      Result<PlacementResult> bl = Status::Internal("not run");
      const double bnb_ms = MedianMs(1, [&] {
        bl = PlaceBranchAndBound(problem, PlacementObjective::kLatency, seed_l.ok() ? &seed_l.value() : nullptr, 200000);
      });
      std::snprintf(lat_bnb, sizeof lat_bnb, "%.1f ms%s", bnb_ms, bl.ok() && bl->solver.optimal ? "" : "*");
      Result<PlacementResult> bis = Status::Internal("not run");
      const double bis_ms = MedianMs(3, [&] { bis = PlaceBisection(problem, PlacementObjective::kThroughput); });
      Result<PlacementResult> bt = Status::Internal("not run");
      const double thr_ms = MedianMs(1, [&] {
        bt = PlaceBranchAndBound(problem, PlacementObjective::kThroughput, bis.ok() ? &bis.value() : nullptr, 200000);
      });
      std::snprintf(thr_bnb, sizeof thr_bnb, "%.1f ms%s", thr_ms, bt.ok() && bt->solver.optimal ? "" : "*");
      std::snprintf(thr_bis, sizeof thr_bis, "%.2f ms", bis_ms);
      std::printf("%-14s %3d  %7.3f ms %7.2f ms  %7.3f ms %7.2f ms  %12s %12s  %14s %12s  %s\n", name.c_str(), n,
                  mem_exact, mem_cbc, comm_dp, comm_cbc, lat_dp, lat_bnb, thr_bnb, thr_bis, agree ? "yes" : "NO");
    }
  }
  std::printf("* = branch-and-bound stopped at its 200000-node limit (best found, not proven optimal)\n");
  PipelineSection();
  GeneticSection();
  return 0;
}
