// Reshape, Flatten, Identity, Squeeze, Unsqueeze: the data does not change,
// only the graph's view of its shape. Canonical Reshape carries its resolved
// target in attr "shape" (graph.h); the output shape is the graph's. Eval is
// a copy (skipped when the executor aliases output and input).
#include <cstring>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

class CopyKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    // Reshape/Squeeze/Unsqueeze may still list their shape/axes constant input.
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 2));
    const Shape& in = ctx.input_shapes[0];
    const Shape& out = ctx.output_shapes[0];
    if (NumElements(in) != NumElements(out))
      return NodeInvalid(ctx, "output shape " + ShapeToString(out) + " has a different element count than input " +
                                  ShapeToString(in));
    if (ctx.node.op == "Identity" && in != out)
      return NodeInvalid(ctx, "output shape " + ShapeToString(out) + " differs from input " + ShapeToString(in));
    if (ctx.node.op == "Reshape" && ctx.node.attrs.Has("shape")) {
      // The resolved target must agree with the graph, up to ONNX's 0 (copy) and -1 (infer).
      const auto target = ctx.node.attrs.Ints("shape");
      bool agrees = target.size() == out.size();
      for (size_t i = 0; agrees && i < target.size(); ++i)
        agrees = target[i] == out[i] || target[i] == -1 || (target[i] == 0 && i < in.size() && in[i] == out[i]);
      if (!agrees)
        return NodeInvalid(ctx, "attr shape does not match the output shape " + ShapeToString(out));
    }
    if (ctx.node.op == "Flatten") {
      const int64_t axis = ctx.node.attrs.Int("axis", 1);
      const int64_t a = axis < 0 ? axis + static_cast<int64_t>(in.size()) : axis;
      if (a < 0 || a > static_cast<int64_t>(in.size())) return NodeInvalid(ctx, "axis is out of range");
      int64_t outer = 1;
      for (int64_t i = 0; i < a; ++i) outer *= in[i];
      TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, {outer, NumElements(in) / std::max<int64_t>(outer, 1)}));
    }
    bytes_ = static_cast<size_t>(NumElements(in)) * sizeof(float);
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override {
    if (ctx.outputs[0] != ctx.inputs[0]) std::memcpy(ctx.outputs[0], ctx.inputs[0], bytes_);
  }

 private:
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeCopyKernel() { return std::make_unique<CopyKernel>(); }

}  // namespace tessera
