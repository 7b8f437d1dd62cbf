// FFMT halo mathematics (METHODS §2, "FFMT – fused feature-map tiling").
//
// A fused stack is a chain of spatial layers (conv, depthwise conv, pool,
// element-wise). Its last layer's output is cut into an n×m grid; for every
// tile we walk backwards through the stack and compute the input region each
// layer needs. Per axis, a layer with kernel k, stride s, dilation d and
// leading padding p maps an output range [o0, o1) to the input range
//
//     [o0·s − p,  (o1−1)·s + (k−1)·d + 1 − p)          (unclipped)
//
// Parts of that range outside [0, size) are padding: a border tile runs the
// layer with pad_begin = max(0, −start), pad_end = max(0, end − size) over the
// clipped range, and produces exactly o1 − o0 outputs. Interior tiles see no
// padding — their "padding" is real data from the neighbour, the halo, which
// is recomputed by both tiles (the MAC overhead the planner counts).
//
// A ConvTranspose (kernel k, stride s, dilation d, leading padding p) maps
// the other way: input i adds into outputs i·s − p + j·d, j < k. Outputs
// [o0, o1) gather from the inputs i with o0 ≤ i·s − p + j·d < o1 for some j:
// per j, i ∈ [⌈(o0 + p − j·d)/s⌉, ⌊(o1 − 1 + p − j·d)/s⌋]; the region is the
// hull of those ranges within the input (exact: its first and last rows
// contribute). A tile runs the ConvTranspose on that region with leading
// padding p + o0 − i0·s (may be negative) and drops what falls outside it.
// When no input reaches the tile (output_padding rows, stride gaps) the region
// is one input row whose contributions all fall outside: the tile is bias.
//
// A Resize is the other per-axis map: outputs [o0, o1) read the input rows
// its coordinate transform sends them to (resize_map.h), a range that never
// leaves the input, so a Resize tile sees no padding; it is told its place in
// the whole map instead (resize_map.h, tile_* attributes). InputRangeOf is
// the one output-range → input-range function both kinds go through.
#pragma once

#include <cstdint>
#include <vector>

#include "partition/graph/graph.h"
#include "partition/graph/resize_map.h"
#include "util/status.h"

namespace tessera {

// Half-open index range [begin, end).
struct Range1D {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range1D&) const = default;
};

struct TileRegion {
  Range1D rows, cols;
  bool operator==(const TileRegion&) const = default;
};

// How a layer's output positions map to the input positions they read.
enum class SpatialMap {
  kWindow,      // kernel, stride, dilation, padding (conv, pool, pad, element-wise)
  kResize,      // ONNX Resize's coordinate transform (`resize`)
  kTransposed,  // ConvTranspose: input i scatters to outputs i·s − p + k·d
};

// The spatial footprint of one layer, per axis (0 = rows/H, 1 = cols/W).
struct SpatialWindow {
  SpatialMap map = SpatialMap::kWindow;
  ResizeAxis resize[2];  // map == kResize: the whole map's H and W axes
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t dilation[2] = {1, 1};
  int64_t pad_begin[2] = {0, 0};
  int64_t in_size[2] = {0, 0};   // input H, W
  int64_t out_size[2] = {0, 0};  // output H, W
  // MACs per output position (all output channels): R / (H_out·W_out).
  int64_t macs_per_output = 1;
};

// What one layer of a tile stack computes.
struct TileLayerRegion {
  TileRegion input;                    // clipped region of the layer's input
  int64_t pad_begin[2] = {0, 0};       // padding this tile sees (top, left)
  int64_t pad_end[2] = {0, 0};         // (bottom, right)
  TileRegion output;                   // region of the layer's output
};

// The window of a node that may sit in a fused stack: Conv, MaxPool,
// AveragePool, Resize (NCHW, nearest or linear over H and W only),
// ConvTranspose (2-D, explicit pads), and 1×1
// element-wise ops (activations, BatchNormalization, Add/Mul with one
// activation input). NotSupported, naming the node, for
// anything else (softmax, concat, reshape, dense ...).
Result<SpatialWindow> SpatialWindowOf(const Graph& graph, const Node& node);

// The input range that outputs `out` of axis `axis` read, before clipping to
// the input: [o0·s − p, (o1−1)·s + (k−1)·d + 1 − p) for a window, the range
// of resize_map.h for a Resize, the contributing inputs for a ConvTranspose
// (the last two always inside the input).
// REQUIRES: out is non-empty and inside the layer's output.
Range1D InputRangeOf(const SpatialWindow& w, int axis, Range1D out);

// The most input indices that any `out_len` consecutive outputs along `axis`
// read, at most the whole input (the planner's size of a tile's input).
int64_t MaxInputSpan(const SpatialWindow& w, int axis, int64_t out_len);

// Walks `output_tile` of the stack's last layer back through `stack`
// (first layer first). Result[i] is layer i's region. InvalidArgument when
// the tile lies outside the output.
Result<std::vector<TileLayerRegion>> BackPropagateTile(const std::vector<SpatialWindow>& stack,
                                                       const TileRegion& output_tile);

// Splits `total` into parts proportional to `weights` (≥ 0), largest
// remainders first, earlier parts first on ties: 64 over {1,1,1} -> 22,21,21.
// A zero weight gets nothing; all-zero weights mean equal shares.
std::vector<int64_t> SplitProportional(int64_t total, const std::vector<double>& weights);

// The n×m grid over an output of `rows`×`cols` with the given row and column
// weights (uneven grids for devices of unequal speed); row-major.
std::vector<TileRegion> GridTiles(int64_t rows, int64_t cols, const std::vector<double>& row_weights,
                                  const std::vector<double>& col_weights);

// Σ over tiles of every layer's computed outputs × macs_per_output, minus the
// same for the unsplit stack: the MACs recomputed in halos.
int64_t HaloMacOverhead(const std::vector<SpatialWindow>& stack, const std::vector<TileRegion>& tiles);

}  // namespace tessera
