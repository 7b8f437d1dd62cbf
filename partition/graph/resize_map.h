// ONNX Resize coordinate mathematics for one spatial axis: which input
// indices an output index reads. The one definition that the Resize kernel
// (daemon/runtime/kernels/resize.cc) evaluates and the FFMT halo code
// (halo.h, METHODS §2) inverts, so that a tile's input region is exactly the
// set of rows the kernel reads and a tiled run equals the whole run bit for
// bit.
//
// For output coordinate x, ONNX's x_original s is given by the
// coordinate_transformation_mode (half_pixel, pytorch_half_pixel,
// align_corners, asymmetric, tf_half_pixel_for_nn, half_pixel_symmetric;
// tf_crop_and_resize is not supported). Then
//  * nearest: index = round(s) by nearest_mode (round_prefer_floor,
//    round_prefer_ceil, floor, ceil), clamped to [0, n_in − 1]. Float
//    arithmetic, as onnxruntime does, so ties round the same way.
//  * linear: i0 = floor(s), t = s − i0 (s in double, as the ONNX reference);
//    taps lo = clamp(i0), hi = clamp(i0 + 1) (edge padding). When t == 0 the
//    hi tap has no weight and is set to lo, so the output reads one row.
// Both are non-decreasing in x for a positive scale, so outputs [o0, o1)
// read exactly the input rows [first read of o0, last read of o1 − 1].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace tessera {

// One axis of a Resize over the whole (untiled) map.
struct ResizeAxis {
  bool linear = false;
  std::string transform = "half_pixel";         // coordinate_transformation_mode
  std::string rounding = "round_prefer_floor";  // nearest_mode (nearest only)
  double scale = 1.0;                           // output/input, as given by "scales" or computed
  float scale_f = 1.f;                          // the float scale nearest mode uses (see MakeResizeAxis)
  int64_t in_size = 0, out_size = 0;
};

// The linear taps of one output index: reads `lo` with weight 1 − t and `hi`
// with weight t.
struct LinearTap {
  int64_t lo = 0, hi = 0;
  float t = 0.f;
};

// An FFMT tile of a Resize (METHODS §2). The program compiler sets these
// attributes, each [rows, cols] of the last two dims, on the Resize node of
// a tile's subgraph; the kernel then maps the tile's local indices through
// the whole map's coordinate transform, so it computes exactly the values
// the untiled run computes at those positions:
//   tile_output_origin  global index of the tile's first output row, col
//   tile_input_origin   global index of its input region's first row, col
//   tile_full_input     the whole input's H, W
//   tile_full_output    the whole output's H, W
inline constexpr const char* kResizeTileOutputOrigin = "tile_output_origin";
inline constexpr const char* kResizeTileInputOrigin = "tile_input_origin";
inline constexpr const char* kResizeTileFullInput = "tile_full_input";
inline constexpr const char* kResizeTileFullOutput = "tile_full_output";

// Checks the mode strings: NotSupported naming the unsupported one.
Status CheckResizeModes(const std::string& mode, const std::string& transform, const std::string& rounding);

// Axis `d` of a Resize from `n_in` to `n_out` with the node's `scales` (one
// per dim, or empty: then n_out/n_in). InvalidArgument when a scale is not
// positive, a size is empty, or n_out is not floor(n_in·scale) within 1.
Result<ResizeAxis> MakeResizeAxis(bool linear, const std::string& transform, const std::string& rounding,
                                  const std::vector<double>& scales, size_t d, int64_t n_in, int64_t n_out);

// The input index nearest mode reads for output `o` (0 ≤ o < out_size).
int64_t NearestSource(const ResizeAxis& axis, int64_t o);
// The taps linear mode reads for output `o`.
LinearTap LinearSource(const ResizeAxis& axis, int64_t o);

// The input indices [begin, end) that outputs [o0, o1) read (within
// [0, in_size); REQUIRES: 0 ≤ o0 < o1 ≤ out_size).
void ResizeInputRange(const ResizeAxis& axis, int64_t o0, int64_t o1, int64_t* begin, int64_t* end);

}  // namespace tessera
