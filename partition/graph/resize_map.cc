#include "partition/graph/resize_map.h"

#include <algorithm>
#include <cmath>

namespace tessera {

namespace {

// x_original in float (nearest mode; onnxruntime's arithmetic).
float NearestCoordinate(const ResizeAxis& a, float x) {
  const float scale = a.scale_f;
  const std::string& t = a.transform;
  if (t == "half_pixel") return (x + 0.5f) / scale - 0.5f;
  if (t == "pytorch_half_pixel") return a.out_size > 1 ? (x + 0.5f) / scale - 0.5f : 0.f;
  if (t == "align_corners")
    return a.out_size == 1 ? 0.f : x * static_cast<float>(a.in_size - 1) / static_cast<float>(a.out_size - 1);
  if (t == "asymmetric") return x / scale;
  if (t == "tf_half_pixel_for_nn") return (x + 0.5f) / scale;
  // half_pixel_symmetric (opset 19)
  const float adjustment = static_cast<float>(a.out_size) / (scale * static_cast<float>(a.in_size));
  const float center = static_cast<float>(a.in_size) / 2.f;
  return center * (1.f - adjustment) + (x + 0.5f) / scale - 0.5f;
}

// x_original in double (linear mode; the ONNX reference's arithmetic, with
// length_resized = length·scale).
double LinearCoordinate(const ResizeAxis& a, double x) {
  const double scale = a.scale;
  const double resized = static_cast<double>(a.in_size) * scale;
  const std::string& t = a.transform;
  if (t == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (t == "pytorch_half_pixel") return a.out_size > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (t == "align_corners") return resized <= 1.0 ? 0.0 : x * static_cast<double>(a.in_size - 1) / (resized - 1.0);
  if (t == "asymmetric") return x / scale;
  if (t == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  const double adjustment = static_cast<double>(a.out_size) / resized;  // half_pixel_symmetric
  const double center = static_cast<double>(a.in_size) / 2.0;
  return center * (1.0 - adjustment) + (x + 0.5) / scale - 0.5;
}

}  // namespace

Status CheckResizeModes(const std::string& mode, const std::string& transform, const std::string& rounding) {
  if (mode != "nearest" && mode != "linear")
    return Status::NotSupported("mode '" + mode + "' (nearest and linear only)");
  if (transform != "half_pixel" && transform != "pytorch_half_pixel" && transform != "align_corners" &&
      transform != "asymmetric" && transform != "tf_half_pixel_for_nn" && transform != "half_pixel_symmetric")
    return Status::NotSupported("coordinate_transformation_mode '" + transform + "'");
  if (rounding != "round_prefer_floor" && rounding != "round_prefer_ceil" && rounding != "floor" && rounding != "ceil")
    return Status::NotSupported("nearest_mode '" + rounding + "'");
  return Status::OK();
}

Result<ResizeAxis> MakeResizeAxis(bool linear, const std::string& transform, const std::string& rounding,
                                  const std::vector<double>& scales, size_t d, int64_t n_in, int64_t n_out) {
  if ((linear && n_out == 0) || (n_out > 0 && n_in == 0))
    return Status::InvalidArgument("cannot resize an empty dimension");
  ResizeAxis a;
  a.linear = linear;
  a.transform = transform;
  a.rounding = rounding;
  a.in_size = n_in;
  a.out_size = n_out;
  if (scales.empty()) {
    // Nearest divides in float, linear in double (the two references).
    a.scale = n_in == 0 ? 1.0 : static_cast<double>(n_out) / static_cast<double>(n_in);
    a.scale_f = n_in == 0 ? 1.f : static_cast<float>(n_out) / static_cast<float>(n_in);
    return a;
  }
  a.scale = scales.at(d);
  a.scale_f = static_cast<float>(scales[d]);
  if (!(a.scale > 0.0) || !(a.scale_f > 0.f)) return Status::InvalidArgument("scales must be positive");
  // With explicit scales ONNX sizes the output floor(in * scale); allow a
  // rounding slack because scales often are out/in stored as float.
  if (std::fabs(static_cast<double>(n_out) - static_cast<double>(n_in) * a.scale) >= 1.0)
    return Status::InvalidArgument("output dimension " + std::to_string(d) + " (" + std::to_string(n_out) +
                                   ") does not match floor(" + std::to_string(n_in) + " * scale " +
                                   std::to_string(a.scale) + ")");
  return a;
}

int64_t NearestSource(const ResizeAxis& a, int64_t o) {
  const float src = NearestCoordinate(a, static_cast<float>(o));
  int64_t i;
  if (a.rounding == "floor") {
    i = static_cast<int64_t>(std::floor(src));
  } else if (a.rounding == "ceil") {
    i = static_cast<int64_t>(std::ceil(src));
  } else {
    const float base = std::floor(src);
    if (src - base == 0.5f) {
      i = static_cast<int64_t>(a.rounding == "round_prefer_floor" ? base : base + 1.f);
    } else {
      i = static_cast<int64_t>(std::round(src));
    }
  }
  return std::clamp<int64_t>(i, 0, a.in_size - 1);
}

LinearTap LinearSource(const ResizeAxis& a, int64_t o) {
  const double s = LinearCoordinate(a, static_cast<double>(o));
  const double base = std::floor(s);
  const int64_t i0 = static_cast<int64_t>(base);
  LinearTap tap;
  tap.lo = std::clamp<int64_t>(i0, 0, a.in_size - 1);
  tap.t = static_cast<float>(s - base);
  // A zero weight reads nothing: the tap stays on lo, so a tile's input
  // region need not hold the row after it (resize_map.h).
  tap.hi = tap.t == 0.f ? tap.lo : std::clamp<int64_t>(i0 + 1, 0, a.in_size - 1);
  return tap;
}

void ResizeInputRange(const ResizeAxis& a, int64_t o0, int64_t o1, int64_t* begin, int64_t* end) {
  // Monotone in the output index (resize_map.h): the ends decide.
  if (a.linear) {
    *begin = LinearSource(a, o0).lo;
    *end = LinearSource(a, o1 - 1).hi + 1;
  } else {
    *begin = NearestSource(a, o0);
    *end = NearestSource(a, o1 - 1) + 1;
  }
}

}  // namespace tessera
