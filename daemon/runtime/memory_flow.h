// The one-device memory flow of METHODS §6 ("Critical buffers", "Path
// discovery"), FFMT paths: cut stretches of a model into spatial tiles that
// one device computes one after the other, so that the large feature maps
// inside a stretch never exist whole, and keep the cuts that shrink the
// device arena most within a budget of recomputed (halo) MACs.
//
// The transformation is a one-device PartitionPlan: its FFMT layers are the
// chosen paths, each with its grid. The program compiler turns it into the
// tiled program (tile subgraphs reading their input region with halos,
// writing their output tile), and every candidate is judged by the arena the
// runner itself would allocate for that program (SizeDeviceProgram: same
// kernels, same liveness, same layout), so the printed arena is what
// `tessera run MODEL --plan FILE` holds.
//
//   round:  program of the current plan
//           -> live bytes per step (buffers + the step's intermediates)
//           -> critical values: the largest feature maps alive at the peak
//           -> candidates: every stretch [i, j] of tileable layers that
//              holds a critical value inside it (produced and consumed in
//              it), merged with the paths it overlaps, × grids n×1 and n×n
//              (n = 2…5), and × processing in parts in n row bands (n =
//              2…5, 8, 16: the overlap rows kept between bands, no MAC
//              recomputed; issue 18 item 3)
//           -> keep the candidate with the smallest arena + weights as
//              stored (each weight once for all tiles; ties: fewer MACs)
//              if it shrinks the arena and the MAC budget allows it
//   until no candidate improves. The descent runs under the MAC budget and
//   under each smaller step of a fixed ladder (0, 1, 2, 5, 10, 25, 50,
//   100 %); the smallest arena wins (greedy is not monotone in the budget).
//
// Channel paths (issue 17 item 3): a chain SPLIT|FDTO -> PART* -> FDTI|CONCAT
// around a critical value, in N = 2…25 channel slices computed in turn, so
// the maps inside the chain exist one slice at a time (no MAC added);
// tried beside the row bands (MemoryFlowOptions::channels).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/runtime/device_memory.h"
#include "partition/compile/partition_plan.h"
#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

struct MemoryFlowOptions {
  // Recomputed halo MACs allowed, as a fraction of the model's MACs
  // (< 0: no limit, memory first).
  double max_mac_overhead = 0.10;
  int max_path_layers = 12;  // layers in one path
  int reach = 3;             // layers a candidate may start before / end after a critical value's use
  int critical_values = 3;   // largest values at the peak tried per round
  int max_grid = 5;          // grids n×1 and n×n, n = 2…max_grid
  int max_rounds = 32;
  // Try stretches as FFMT tiles (grids n×1 and n×n).
  bool tiles = true;
  // Also try stretches processed in parts (row bands, overlaps kept; issue
  // 18 item 3); each budget is then descended with and without them.
  bool parts = true;
  // Also try channel paths (issue 17 item 3) with these slice counts; each
  // budget is then descended once more with them (and with parts).
  bool channels = true;
  std::vector<int64_t> channel_slices = {2, 3, 4, 6, 8, 12, 16, 25};
  DeviceMemoryOptions memory;  // the runner's threads (per-thread scratch)
  // Called after each descent (one per budget of the ladder) with a one-line
  // summary: progress on long models. Rounds are logged at debug level.
  std::function<void(const std::string&)> progress;
};

// One chosen stretch of layers computed as tiles.
struct MemoryPath {
  int first = 0, last = 0;  // 0-based node indices, inclusive
  int64_t grid_rows = 1, grid_cols = 1;
  int64_t arena_bytes = 0;  // the arena once this path was added (or last grown)
  std::string critical;     // the value whose size picked it
  // Processed in parts (issue 18 item 3; LayerAssignment::parts): grid_rows
  // row bands, overlaps kept between bands, no MAC recomputed.
  bool parts = false;
  // A channel path (issue 17 item 3) when > 1: the stretch computed in this
  // many channel slices one after the other (program_compiler.cc, "Channel
  // paths"): first layer FDT1 (fan_out: its output channels) or PART on its
  // input's channels (SPLIT), PART in between, last layer FDT2 (fan_in: the
  // partial sums added slice by slice) or PART (CONCAT). No MAC is added.
  int64_t channel_slices = 0;
  bool fan_out = false, fan_in = false;
};

// "layers 12-15 ('a' .. 'b') as 5x5 tiles" or "... in 8 row bands (processed
// in parts ...)": for logs and the optimize-memory table.
std::string DescribeMemoryPath(const Graph& graph, const MemoryPath& path);

struct MemoryFlowResult {
  PartitionPlan plan;  // the base plan with the paths as FFMT stacks on the device
  int64_t arena_before_bytes = 0;
  int64_t arena_after_bytes = 0;
  // Weights as the kernels store them (each weight and each packed form once
  // per program, kernels/weight_forms.h). The flow minimises arena +
  // weights, the device's need beyond the worker baseline while it serves
  // one request. Also reported: the weight bytes held at once while the
  // program loads (PreparedProgram::load_peak_bytes: raw weights, then raw
  // + packed as subgraphs prepare), which tiling leaves about as it is and
  // which dominates a device's RAM where packing inflates weights
  // (Winograd: 16/9); the planner's fit counts both (device_memory.h).
  int64_t weight_before_bytes = 0, weight_after_bytes = 0;
  int64_t load_peak_before_bytes = 0, load_peak_after_bytes = 0;
  int64_t need_before() const { return arena_before_bytes + weight_before_bytes; }
  int64_t need_after() const { return arena_after_bytes + weight_after_bytes; }
  int64_t model_macs = 0;  // MACs of the layers the device runs alone (one device: the model's); the budget's base
  int64_t halo_macs = 0;   // recomputed by the tiles of `plan`
  double mac_overhead() const { return model_macs > 0 ? static_cast<double>(halo_macs) / model_macs : 0.0; }
  std::vector<MemoryPath> paths;  // in graph order
  int rounds = 0;
  int64_t candidates = 0;  // programs compiled and sized
  double seconds = 0;
};

// "first:last:RxC;" per path, in order: the identity of a set of paths (the
// flow's cache of sized plans, the id of a written plan).
std::string PathsKey(const std::vector<MemoryPath>& paths);

// `base` with the paths' layers as FFMT stacks on `device` alone.
PartitionPlan PlanOf(const PartitionPlan& base, int device, const std::vector<MemoryPath>& paths);

// The device arena of `plan`'s program for `device`, and the plan's halo MACs.
struct SizedPlan {
  int64_t arena_bytes = 0;
  int64_t weight_bytes = 0;     // as the kernels store them
  int64_t load_peak_bytes = 0;  // weights held at once while loading
  int64_t halo_macs = 0;
  // The live bytes of every step, largest first: of two plans with the
  // same need, the one whose steps peak lower elsewhere too (smaller in this
  // order) leaves the next round more to gain (the flow's ties and
  // plateau rounds).
  std::vector<int64_t> live_desc;
  int64_t need() const { return arena_bytes + weight_bytes; }
};
Result<SizedPlan> SizeOneDevicePlan(const Graph& graph, const PartitionPlan& plan, const DeviceMemoryOptions& options,
                                    int device = 0);

// The whole model on one device (SingleDevicePlan).
// REQUIRES: `graph` canonical and validated; weights may be shapes only.
Result<MemoryFlowResult> OptimizeMemory(const Graph& graph, const MemoryFlowOptions& options);

// The same flow for one device of a multi-device plan (the planner fitting a
// device's RAM, daemon/cluster/plan_fit.h): only stretches of layers `base`
// runs WHOLE on `device` become paths (FFMT stacks on that device alone);
// the arena judged is that device's.
Result<MemoryFlowResult> OptimizeDeviceMemory(const Graph& graph, const PartitionPlan& base, int device,
                                              const MemoryFlowOptions& options);

}  // namespace tessera
