// Which layers of a device process their input in parts (issue 18 item 4):
// a genetic search over one bit per layer, objectives memory and
// throughput, then the lowest-memory point that still meets the throughput
// target, within the device's memory limit.
//
// Genome. One bit per layer the device runs whole and could tile
// (CheckTileable, the layers the memory flow may cut), plus one gene for
// the number of row bands N (one of PartsSearchOptions::bands). A maximal
// run of consecutive set bits is one stretch processed in N row bands
// (MemoryPath::parts: overlaps kept, no MAC recomputed; at most
// max_path_layers layers, a longer run is cut; a run whose last map has
// fewer rows than N takes as many bands as it has rows).
//
// Objectives, both minimised:
//   memory: arena + weights of the compiled program as the runner sizes it
//           (SizeOneDevicePlan: exact, the number `tessera run` allocates);
//   time:   the time model below, in seconds per frame.
//
// Time model (PartsTimeModel, calibrated on this machine by
// CalibratePartsTime). Parts recompute nothing; they cost time through more
// and smaller steps (each band re-enters every kernel of the stretch with a
// band of rows). Measured: a layer in N bands runs (1 + α_N) times as long
// as whole, with α_N the measured slowdown of a program with every
// eligible layer in N bands divided by the time those layers take whole:
//   t(genome) = T_1 + α_N · Σ_{k in parts} t_k
// where T_1 is the measured unsplit program and t_k is layer k's share of it
// (the executor's per-node profile). It ranks genomes; the throughput that
// decides and is printed is measured: the points of the final front that
// fit the memory limit are run, least memory first, until one meets the
// target (PartsSearchResult::chosen).
//
// Search (NSGA-II style, elitist): population P, G generations; parents by
// binary tournament on (Pareto rank, crowding distance); uniform crossover
// with probability `crossover`, the band gene from either parent; each bit
// flips with probability 1 / (eligible layers), the band gene is redrawn
// with probability 0.1; parents and children are ranked together and the
// best P kept. The first population holds no parts, every eligible layer in
// parts at each N, and random genomes. Every genome evaluated is kept; the
// front is the non-dominated set of all of them (a genome is sized once:
// cached by its paths). Deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/runtime/device_memory.h"
#include "daemon/runtime/memory_flow.h"
#include "partition/compile/partition_plan.h"
#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

struct PartsTimeModel {
  double unsplit_seconds = 0;             // T_1
  std::vector<double> layer_seconds;      // t_k per graph node (0 for layers not timed)
  std::vector<int64_t> bands;             // N of each α
  std::vector<double> slowdown;           // α_N, >= 0
  std::vector<double> all_parts_seconds;  // measured T with every eligible layer in N bands
  double Predict(int64_t bands_gene_index, const std::vector<bool>& in_parts) const;
};

struct PartsSearchOptions {
  // 32 x 50: yolov2-tiny's 15 layers x 4 band counts reach the same least
  // memory from 3 seeds (24 x 30 did not: 46.5 or 46.7 MB), ~1 s.
  int population = 32;
  int generations = 50;
  double crossover = 0.9;
  uint64_t seed = 1;
  std::vector<int64_t> bands = {2, 4, 8, 16};
  int max_path_layers = 12;
  // Memory limit on arena + weights (< 0: none) and throughput target in
  // frames per second (<= 0: none).
  int64_t ram_bytes = -1;
  double min_fps = 0;
  int repeat = 5;        // timed runs per measured program (median)
  int max_measured = 6;  // front points run at most before giving up on the target
  DeviceMemoryOptions memory;
  std::function<void(const std::string&)> progress;
};

struct PartsPoint {
  int64_t bands = 1;
  std::vector<bool> in_parts;     // per graph node
  std::vector<MemoryPath> paths;  // the stretches, graph order
  SizedPlan size;                 // exact
  double predicted_seconds = 0;
  double measured_seconds = -1;  // median of `repeat` runs, < 0: not run
  double max_rel_diff = -1;      // of its answers against the unsplit program's, when run
  int layers_in_parts() const;
};

struct PartsSearchResult {
  std::vector<int> eligible;  // graph nodes with a gene
  PartsTimeModel time;
  PartsPoint unsplit;             // no parts (measured: the reference of the ratios)
  std::vector<PartsPoint> front;  // non-dominated (memory, predicted time), memory ascending
  int chosen = -1;                // index into `front`; -1: nothing meets the limit and target
  std::string why_none;           // when chosen < 0
  int generations = 0;
  int64_t evaluated = 0;  // genomes evaluated
  int64_t sized = 0;      // distinct programs compiled and sized
  double search_seconds = 0, measure_seconds = 0;
};

// Graph nodes that get a gene: run by `device` alone in `base` and tileable.
std::vector<int> PartsEligibleLayers(const Graph& graph, const PartitionPlan& base, int device);

// The stretches of a genome (see the header comment).
std::vector<MemoryPath> PartsPaths(const Graph& graph, const std::vector<bool>& in_parts, int64_t bands,
                                   int max_path_layers);

// The non-dominated points of `points` by (size.need(), predicted_seconds),
// need ascending; equal pairs once.
std::vector<PartsPoint> ParetoFront(std::vector<PartsPoint> points);

// Measures T_1, the per-layer shares and α_N for each N of `options.bands`
// (programs of `base` run in process, `options.repeat` times each).
// REQUIRES: `graph` with weight values.
Result<PartsTimeModel> CalibratePartsTime(const Graph& graph, const PartitionPlan& base, int device,
                                          const PartsSearchOptions& options);

// The genetic search alone under a given time model (deterministic, no
// run): the front of every genome it evaluated. `graph` may be shapes only.
Result<PartsSearchResult> GeneticParts(const Graph& graph, const PartitionPlan& base, int device,
                                       const PartsTimeModel& time, const PartsSearchOptions& options);

// Calibrate, search, then run the front's points that fit the memory limit,
// least memory first, until one meets min_fps (points the model predicts
// below 0.9x the target are skipped unrun). REQUIRES: weight values.
Result<PartsSearchResult> SearchParts(const Graph& graph, const PartitionPlan& base, int device,
                                      const PartsSearchOptions& options);

}  // namespace tessera
