// Slice (ONNX): starts/ends/axes/steps as attrs (opset 1 form, canonical) or
// as constant inputs 1..4 (opset 10+). Indices are clamped as ONNX says:
// negative counts from the end; for step > 0 into [0, dim], for step < 0
// into [0, dim-1] (start) and [-1, dim-1] (end).
#include <algorithm>
#include <limits>

#include "daemon/runtime/kernels/index_gather.h"
#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

class SliceKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 5));
    const Shape& in = ctx.input_shapes[0];
    const auto& a = ctx.node.attrs;
    std::vector<int64_t> starts = a.Ints("starts"), ends = a.Ints("ends"), axes = a.Ints("axes"),
                         steps = a.Ints("steps");
    std::vector<int64_t>* from_inputs[] = {&starts, &ends, &axes, &steps};
    for (size_t i = 1; i < ctx.node.inputs.size(); ++i) {
      if (!HasInput(ctx, i)) continue;
      const TensorData* t = ConstantOrNull(ctx, i);
      if (t == nullptr) return NodeNotSupported(ctx, "starts/ends/axes/steps must be constants");
      from_inputs[i - 1]->clear();
      for (float v : t->values) {
        // INT64 max/min sentinels arrive as huge floats; saturate them.
        const double d = v;
        from_inputs[i - 1]->push_back(d >= 9.2e18 ? std::numeric_limits<int64_t>::max()
                                      : d <= -9.2e18 ? std::numeric_limits<int64_t>::min()
                                                     : static_cast<int64_t>(d));
      }
    }
    if (starts.size() != ends.size()) return NodeInvalid(ctx, "starts and ends differ in length");
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (axes.size() != starts.size() || steps.size() != starts.size())
      return NodeInvalid(ctx, "axes/steps must have one value per start");
    std::vector<std::vector<int64_t>> maps(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      maps[d].resize(in[d]);
      for (int64_t i = 0; i < in[d]; ++i) maps[d][i] = i;
    }
    std::vector<bool> seen(in.size(), false);
    Shape out = in;
    for (size_t k = 0; k < starts.size(); ++k) {
      const int64_t axis = NormalizeAxis(axes[k], in.size());
      if (axis < 0 || seen[axis]) return NodeInvalid(ctx, "axes has an out-of-range or repeated axis");
      seen[axis] = true;
      const int64_t dim = in[axis], step = steps[k];
      if (step == 0) return NodeInvalid(ctx, "steps must not be 0");
      // Negative indices count from the end (saturating first, so INT64_MIN stays finite).
      int64_t start = starts[k] < 0 ? std::max<int64_t>(starts[k], -dim - 1) + dim : starts[k];
      int64_t end = ends[k] < 0 ? std::max<int64_t>(ends[k], -dim - 1) + dim : ends[k];
      if (step > 0) {
        start = std::clamp<int64_t>(start, 0, dim);
        end = std::clamp<int64_t>(end, 0, dim);
      } else {
        start = std::clamp<int64_t>(start, 0, dim - 1);
        end = std::clamp<int64_t>(end, -1, dim - 1);
      }
      const int64_t len = step > 0 ? std::max<int64_t>(0, (end - start + step - 1) / step)
                                   : std::max<int64_t>(0, (start - end + (-step) - 1) / (-step));
      out[axis] = len;
      maps[axis].resize(len);
      for (int64_t i = 0; i < len; ++i) maps[axis][i] = start + i * step;
    }
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, out));
    gather_.Init(in, std::move(maps), 0.f);
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override { gather_.Run(ctx.inputs[0], ctx.outputs[0], ctx.threads); }

 private:
  IndexGather gather_;
};

}  // namespace

std::unique_ptr<Kernel> MakeSliceKernel() { return std::make_unique<SliceKernel>(); }

}  // namespace tessera
