// Per-layer figures of METHODS §1: Q (weight values, biases included),
// R (multiplications, MACs), M (input values, summed over all activation
// inputs), K (output values), for a Graph in canonical form (folds done).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "partition/graph/graph.h"

namespace tessera {

// What kind of work a layer's MACs are (issue 12 item 5): kernels of one kind
// run at a similar rate on a CPU, kernels of different kinds do not (a
// depthwise conv moves far more bytes per MAC than a 3x3 conv), so a device
// may carry a measured macs_per_s per kind (planner/cluster.h) and the
// planner's compute time L_ij (METHODS §5) divides by the rate of the layer's
// kind. `tessera calibrate` measures them.
enum class OpKind {
  kOther,        // rate: the device's single macs_per_s
  kConv,         // Conv (groups = 1) with a kernel larger than 1x1; ConvTranspose
  kConv1x1,      // pointwise Conv, groups = 1
  kDepthwise,    // Conv with one input channel per group
  kGroupedConv,  // Conv with 1 < groups < channels (ResNeXt)
  kDense,        // Gemm, MatMul
  kPool,         // MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool
  kElementwise,  // everything else that counts MACs (activations, Add, Mul, norms)
};
inline constexpr int kOpKinds = 8;
// "conv", "conv1x1", "depthwise", "grouped_conv", "dense", "pool",
// "elementwise"; "other" for kOther.
const char* OpKindName(OpKind kind);
// The kind named `name` (not "other"); false for an unknown name.
bool ParseOpKind(const std::string& name, OpKind* kind);
// The kind of a graph node (Conv's weight shape and group attribute decide).
OpKind OpKindOf(const Graph& graph, const Node& node);

struct LayerFigures {
  int index = 0;  // 1-based, the node's position in Graph::nodes
  int node = 0;   // 0-based node index
  std::string name;
  std::string op;
  std::vector<Shape> input_shapes;  // activation inputs only
  Shape output_shape;               // first output
  int64_t Q = 0, R = 0, M = 0, K = 0;
  OpKind kind = OpKind::kOther;  // of the R MACs
  // MAC-equivalents of the layer's measured time (planner/layer_profile.h);
  // < 0: not profiled, its time is R at the rate of its kind.
  double time_macs = -1;
  // Measured cost of a row tile of this layer (planner/layer_profile.h
  // ApplyTileProfile): (output rows, factor), rows ascending; a tile of r
  // rows takes factor × r/H of the layer's time. Empty: r/H exactly.
  std::vector<std::pair<int64_t, double>> tile_time_factor;
  // The same for FDT channel slices (METHODS §4; ApplyTileProfile): a
  // fan-out slice of c output channels takes factor × c/O of the layer's
  // time, a fan-in slice of c input channels factor × c/C. Empty: in
  // proportion.
  std::vector<std::pair<int64_t, double>> out_slice_time_factor, in_slice_time_factor;
  // The layer's measured time in its layer profile (ms; < 0: none), and how
  // much longer it runs with compact weights (no Winograd) on a device
  // the planner gives them (planner/layer_profile.h ApplyCompactProfile):
  // compact ms / profile ms, 1 when not measured.
  double profile_ms = -1;
  double compact_time_factor = 1;

  // What the planner's compute time divides by a device's rate.
  double TimeMacs() const { return time_macs >= 0 ? time_macs : static_cast<double>(R); }
  // The factor for a tile of `rows` output rows: measured at that height, or
  // linear between the nearest measured heights (the nearest beyond them); 1
  // when nothing was measured or the tile is the whole layer.
  double TileTimeFactor(int64_t rows) const;
  // The factor for a slice of `channels` output channels (fan_out) or input
  // channels, interpolated as TileTimeFactor's; 1 for the whole layer.
  double SliceTimeFactor(bool fan_out, int64_t channels) const;
  // Whose rate: a profiled layer runs at the device's whole-model rate.
  OpKind RateKind() const { return time_macs >= 0 ? OpKind::kOther : kind; }
};

struct ModelTotals {
  int64_t layers = 0;
  int64_t weights = 0;  // Σ Q
  int64_t macs = 0;     // Σ R
  int64_t max_io = 0;   // max (M + K)
};

std::vector<LayerFigures> ComputeLayerFigures(const Graph& graph);
ModelTotals ComputeTotals(const std::vector<LayerFigures>& layers);

}  // namespace tessera
