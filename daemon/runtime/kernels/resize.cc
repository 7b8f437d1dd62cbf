// Resize, mode "nearest" (ONNX opset 11+; also the opset-10 form). The
// graph's output shape is authoritative; per-dimension scales come from attr
// "scales", else a constant scales input, else output/input. Every
// coordinate_transformation_mode except tf_crop_and_resize and every
// nearest_mode is supported; the source index of each output coordinate is
// tabulated per dimension in Prepare (float arithmetic, as onnxruntime does,
// so ties round the same way).
#include <algorithm>
#include <cmath>

#include "daemon/runtime/kernels/index_gather.h"
#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"

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
    if (mode != "nearest") return NodeNotSupported(ctx, "mode '" + mode + "' (only nearest)");
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

  void Eval(const EvalContext& ctx) const override { gather_.Run(ctx.inputs[0], ctx.outputs[0], ctx.threads); }

 private:
  IndexGather gather_;
};

}  // namespace

std::unique_ptr<Kernel> MakeResizeKernel() { return std::make_unique<ResizeKernel>(); }

}  // namespace tessera
