// Resize (ONNX opset 11+; also the opset-10 form), modes "nearest" and
// "linear". The graph's output shape is authoritative; per-dimension scales
// come from attr "scales", else a constant scales input, else output/input.
// Every coordinate_transformation_mode except tf_crop_and_resize is
// supported; the source coordinate of each output coordinate is tabulated
// per dimension in Prepare.
//  * nearest: every nearest_mode; float arithmetic, as onnxruntime does, so
//    ties round the same way; evaluated as an IndexGather.
//  * linear: 2-D (bi)linear over the last two dims (every other dim must keep
//    its size, as in NCHW images). For source coordinate s (ONNX's
//    x_original, computed in double with length_resized = length·scale as
//    the ONNX reference does), i0 = floor(s), t = s − i0, and
//    y = (1 − t)·x[clamp(i0)] + t·x[clamp(i0 + 1)] per dim, indices clamped
//    to [0, length − 1] (the reference's edge padding). So an output row
//    reads input rows floor(s) and floor(s) + 1 (clamped): the op's window.
#include <algorithm>
#include <cmath>

#include "daemon/runtime/kernels/index_gather.h"
#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"

namespace tessera {
namespace {

class ResizeKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 4));
    const Shape& in = ctx.input_shapes[0];
    const Shape& out = ctx.output_shapes[0];
    const auto& a = ctx.node.attrs;
    const std::string mode = a.String("mode", "nearest");
    if (mode != "nearest" && mode != "linear")
      return NodeNotSupported(ctx, "mode '" + mode + "' (nearest and linear only)");
    if (mode == "linear" && a.Int("antialias", 0) != 0)
      return NodeNotSupported(ctx, "antialias=1 (linear without antialiasing only)");
    if (out.size() != in.size())
      return NodeInvalid(ctx, "output shape " + ShapeToString(out) + " has a different rank than input " +
                                  ShapeToString(in));
    std::vector<double> scales = a.Floats("scales");
    // Opset 11+: inputs (X, roi, scales, sizes); opset 10: (X, scales).
    const size_t scales_input = ctx.node.inputs.size() == 2 ? 1 : 2;
    if (scales.empty() && HasInput(ctx, scales_input)) {
      const TensorData* s = ConstantOrNull(ctx, scales_input);
      if (s != nullptr && !s->values.empty()) scales.assign(s->values.begin(), s->values.end());
    }
    if (!scales.empty() && scales.size() != in.size())
      return NodeInvalid(ctx, "scales has " + std::to_string(scales.size()) + " values for rank " +
                                  std::to_string(in.size()));
    const std::string transform = a.String("coordinate_transformation_mode", "half_pixel");
    const std::string rounding = a.String("nearest_mode", "round_prefer_floor");
    if (transform != "half_pixel" && transform != "pytorch_half_pixel" && transform != "align_corners" &&
        transform != "asymmetric" && transform != "tf_half_pixel_for_nn" && transform != "half_pixel_symmetric")
      return NodeNotSupported(ctx, "coordinate_transformation_mode '" + transform + "'");
    if (rounding != "round_prefer_floor" && rounding != "round_prefer_ceil" && rounding != "floor" &&
        rounding != "ceil")
      return NodeNotSupported(ctx, "nearest_mode '" + rounding + "'");
    if (mode == "linear") return PrepareLinear(ctx, scales, transform);
    std::vector<std::vector<int64_t>> maps(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      const int64_t n_in = in[d], n_out = out[d];
      if (n_out > 0 && n_in == 0) return NodeInvalid(ctx, "cannot resize an empty dimension");
      const float scale = scales.empty() ? static_cast<float>(n_out) / static_cast<float>(n_in)
                                         : static_cast<float>(scales[d]);
      if (!(scale > 0.f)) return NodeInvalid(ctx, "scales must be positive");
      // With explicit scales ONNX sizes the output floor(in * scale); allow a
      // rounding slack because scales often are out/in stored as float.
      if (!scales.empty() && std::fabs(static_cast<double>(n_out) - static_cast<double>(n_in) * scales[d]) >= 1.0)
        return NodeInvalid(ctx, "output dimension " + std::to_string(d) + " (" + std::to_string(n_out) +
                                    ") does not match floor(" + std::to_string(n_in) + " * scale " +
                                    std::to_string(scales[d]) + ")");
      maps[d].resize(n_out);
      for (int64_t o = 0; o < n_out; ++o) {
        const float x = static_cast<float>(o);
        float src = 0.f;
        if (transform == "half_pixel") {
          src = (x + 0.5f) / scale - 0.5f;
        } else if (transform == "pytorch_half_pixel") {
          src = n_out > 1 ? (x + 0.5f) / scale - 0.5f : 0.f;
        } else if (transform == "align_corners") {
          src = n_out == 1 ? 0.f : x * static_cast<float>(n_in - 1) / static_cast<float>(n_out - 1);
        } else if (transform == "asymmetric") {
          src = x / scale;
        } else if (transform == "tf_half_pixel_for_nn") {
          src = (x + 0.5f) / scale;
        } else {  // half_pixel_symmetric (opset 19)
          const float adjustment = static_cast<float>(n_out) / (scale * static_cast<float>(n_in));
          const float center = static_cast<float>(n_in) / 2.f;
          src = center * (1.f - adjustment) + (x + 0.5f) / scale - 0.5f;
        }
        int64_t i;
        if (rounding == "floor") {
          i = static_cast<int64_t>(std::floor(src));
        } else if (rounding == "ceil") {
          i = static_cast<int64_t>(std::ceil(src));
        } else {
          const float base = std::floor(src);
          const bool tie = src - base == 0.5f;
          if (tie) {
            i = static_cast<int64_t>(rounding == "round_prefer_floor" ? base : base + 1.f);
          } else {
            i = static_cast<int64_t>(std::round(src));
          }
        }
        maps[d][o] = std::clamp<int64_t>(i, 0, n_in - 1);
      }
    }
    gather_.Init(in, std::move(maps), 0.f);
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override {
    if (linear_) {
      EvalLinear(ctx);
      return;
    }
    gather_.Run(ctx.inputs[0], ctx.outputs[0], ctx.threads);
  }

 private:
  // One dimension's linear taps: output o reads lo[o] and hi[o] with weight
  // t[o] on hi.
  struct LinearTaps {
    std::vector<int64_t> lo, hi;
    std::vector<float> t;
  };

  // ONNX x_original for output coordinate x (linear mode; see the top).
  static double SourceCoordinate(const std::string& transform, double x, double scale, int64_t n_in, int64_t n_out) {
    const double resized = static_cast<double>(n_in) * scale;
    if (transform == "half_pixel") return (x + 0.5) / scale - 0.5;
    if (transform == "pytorch_half_pixel") return n_out > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
    if (transform == "align_corners") return resized <= 1.0 ? 0.0 : x * static_cast<double>(n_in - 1) / (resized - 1.0);
    if (transform == "asymmetric") return x / scale;
    if (transform == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
    // half_pixel_symmetric (opset 19)
    const double adjustment = static_cast<double>(n_out) / resized;
    const double center = static_cast<double>(n_in) / 2.0;
    return center * (1.0 - adjustment) + (x + 0.5) / scale - 0.5;
  }

  static LinearTaps Taps(const std::string& transform, double scale, int64_t n_in, int64_t n_out) {
    LinearTaps taps;
    taps.lo.resize(n_out);
    taps.hi.resize(n_out);
    taps.t.resize(n_out);
    for (int64_t o = 0; o < n_out; ++o) {
      const double s = SourceCoordinate(transform, static_cast<double>(o), scale, n_in, n_out);
      const double base = std::floor(s);
      const int64_t i0 = static_cast<int64_t>(base);
      taps.lo[o] = std::clamp<int64_t>(i0, 0, n_in - 1);
      taps.hi[o] = std::clamp<int64_t>(i0 + 1, 0, n_in - 1);
      taps.t[o] = static_cast<float>(s - base);
    }
    return taps;
  }

  Status PrepareLinear(const KernelContext& ctx, const std::vector<double>& scales, const std::string& transform) {
    const Shape& in = ctx.input_shapes[0];
    const Shape& out = ctx.output_shapes[0];
    const size_t rank = in.size();
    if (rank < 2) return NodeNotSupported(ctx, "linear mode needs rank >= 2 (resizes the last two dims)");
    for (size_t d = 0; d + 2 < rank; ++d)
      if (in[d] != out[d] || (!scales.empty() && scales[d] != 1.0))
        return NodeNotSupported(ctx, "linear mode resizes only the last two dims (dim " + std::to_string(d) +
                                         " changes); e.g. NCHW bilinear");
    for (size_t d = rank - 2; d < rank; ++d) {
      if (in[d] == 0 || out[d] == 0) return NodeInvalid(ctx, "cannot resize an empty dimension");
      const double scale = scales.empty() ? static_cast<double>(out[d]) / static_cast<double>(in[d]) : scales[d];
      if (!(scale > 0.0)) return NodeInvalid(ctx, "scales must be positive");
      if (!scales.empty() && std::fabs(static_cast<double>(out[d]) - static_cast<double>(in[d]) * scale) >= 1.0)
        return NodeInvalid(ctx, "output dimension " + std::to_string(d) + " (" + std::to_string(out[d]) +
                                    ") does not match floor(" + std::to_string(in[d]) + " * scale " +
                                    std::to_string(scale) + ")");
      (d == rank - 2 ? rows_ : cols_) = Taps(transform, scale, in[d], out[d]);
    }
    planes_ = 1;
    for (size_t d = 0; d + 2 < rank; ++d) planes_ *= in[d];
    in_h_ = in[rank - 2], in_w_ = in[rank - 1], out_h_ = out[rank - 2], out_w_ = out[rank - 1];
    linear_ = true;
    return Status::OK();
  }

  void EvalLinear(const EvalContext& ctx) const {
    const int64_t work = planes_ * out_h_;
    const int threads = (ctx.threads > 1 && work * out_w_ > 65536) ? ctx.threads : 1;
    ParallelFor(work, threads, [&](int64_t r) {
      const int64_t p = r / out_h_, oy = r % out_h_;
      const float* plane = ctx.inputs[0] + p * in_h_ * in_w_;
      const float* row0 = plane + rows_.lo[oy] * in_w_;
      const float* row1 = plane + rows_.hi[oy] * in_w_;
      const float ty = rows_.t[oy];
      float* y = ctx.outputs[0] + r * out_w_;
      for (int64_t ox = 0; ox < out_w_; ++ox) {
        const int64_t x0 = cols_.lo[ox], x1 = cols_.hi[ox];
        const float tx = cols_.t[ox];
        const float top = row0[x0] + tx * (row0[x1] - row0[x0]);
        const float bottom = row1[x0] + tx * (row1[x1] - row1[x0]);
        y[ox] = top + ty * (bottom - top);
      }
    });
  }

  IndexGather gather_;
  bool linear_ = false;
  LinearTaps rows_, cols_;
  int64_t planes_ = 0, in_h_ = 0, in_w_ = 0, out_h_ = 0, out_w_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeResizeKernel() { return std::make_unique<ResizeKernel>(); }

}  // namespace tessera
