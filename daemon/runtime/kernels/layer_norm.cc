// LayerNormalization (ONNX opset 17, graph.h): every row of the trailing dims
// [axis, rank) of X is normalised on its own,
//   y = (x − mean) / sqrt(var + epsilon) · scale + bias,
// mean and var (biased) over the row. Scale and the optional bias are
// constants broadcastable (numpy rules) to X.shape[axis:]; Prepare expands
// them to one value per row element. Optional outputs 1 and 2 are ONNX's Mean
// and InvStdDev = 1/sqrt(var + epsilon), one per row (shape X.shape[:axis]
// followed by ones).
// The importer also fuses PyTorch's exported form (ReduceMean, Sub, Pow,
// ReduceMean, Add, Sqrt, Div, Mul, Add over the last axis) into this op.
// Attr "span" (graph.h; not ONNX) normalises only dims [axis, axis + span),
// separately at every index of the dims after them: axis 1, span 1 on NCHW
// is a LayerNorm over the channels at each position (what PyTorch's
// permute -> LayerNorm -> permute computes), a spatially point-wise layer.
// The Mean and InvStdDev outputs are not offered with a span.
#include <algorithm>
#include <cmath>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"

namespace tessera {
namespace {

// `data` (shape `from`) broadcast to `to` (numpy rules, right-aligned) as a
// dense row-major vector; false when not broadcastable.
bool BroadcastTo(const TensorData& data, const Shape& to, std::vector<float>* out) {
  const Shape& from = data.shape;
  if (from.size() > to.size()) {
    // Leading unit dims beyond `to` are allowed ([1, C] onto [C]).
    for (size_t i = 0; i < from.size() - to.size(); ++i)
      if (from[i] != 1) return false;
  }
  const size_t lead = from.size() > to.size() ? from.size() - to.size() : 0;
  Shape f(to.size(), 1);
  for (size_t i = lead; i < from.size(); ++i) f[to.size() - (from.size() - i)] = from[i];
  for (size_t i = 0; i < to.size(); ++i)
    if (f[i] != 1 && f[i] != to[i]) return false;
  const std::vector<int64_t> fs = RowMajorStrides(f);
  const int64_t n = NumElements(to);
  out->resize(static_cast<size_t>(n));
  std::vector<int64_t> idx(to.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t src = 0;
    for (size_t d = 0; d < to.size(); ++d)
      if (f[d] != 1) src += idx[d] * fs[d];
    (*out)[static_cast<size_t>(k)] = data.values[static_cast<size_t>(src)];
    for (int64_t d = static_cast<int64_t>(to.size()) - 1; d >= 0; --d) {
      if (++idx[d] < to[d]) break;
      idx[d] = 0;
    }
  }
  return true;
}

class LayerNormKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    const size_t outputs = ctx.node.outputs.size();
    if (outputs < 1 || outputs > 3) return NodeInvalid(ctx, "expects 1..3 outputs (Y, Mean, InvStdDev)");
    TS_RETURN_IF_ERROR(CheckArity(ctx, 2, 3, outputs));
    const Shape& x = ctx.input_shapes[0];
    const int64_t axis = NormalizeAxis(ctx.node.attrs.Int("axis", -1), x.size());
    if (axis < 0) return NodeInvalid(ctx, "axis out of range for input " + ShapeToString(x));
    epsilon_ = static_cast<float>(ctx.node.attrs.Float("epsilon", 1e-5));
    const int64_t rank = static_cast<int64_t>(x.size());
    const int64_t span = ctx.node.attrs.Int("span", rank - axis);
    if (span < 1 || axis + span > rank)
      return NodeInvalid(ctx, "span " + std::to_string(span) + " does not fit from axis " + std::to_string(axis) +
                                  " in " + ShapeToString(x));
    if (span != rank - axis && outputs > 1)
      return NodeNotSupported(ctx, "the Mean and InvStdDev outputs with a span (graph.h)");
    const Shape row_shape(x.begin() + axis, x.begin() + axis + span);
    row_ = NumElements(row_shape);
    inner_ = NumElements(Shape(x.begin() + axis + span, x.end()));
    rows_ = row_ == 0 ? 0 : NumElements(x) / row_;
    TS_ASSIGN_OR_RETURN(const TensorData* scale, RequireConstant(ctx, 1, "scale"));
    const TensorData* bias = HasInput(ctx, 2) ? ConstantOrNull(ctx, 2) : nullptr;
    if (HasInput(ctx, 2) && bias == nullptr) return NodeNotSupported(ctx, "bias (input 2) must be a constant");
    if (!ctx.shapes_only) {
      if (!BroadcastTo(*scale, row_shape, &scale_))
        return NodeInvalid(ctx, "scale " + ShapeToString(scale->shape) + " does not broadcast to the normalised " +
                                    ShapeToString(row_shape));
      bias_.assign(static_cast<size_t>(row_), 0.f);
      if (bias != nullptr && !BroadcastTo(*bias, row_shape, &bias_))
        return NodeInvalid(ctx, "bias " + ShapeToString(bias->shape) + " does not broadcast to the normalised " +
                                    ShapeToString(row_shape));
    }
    Shape stats_shape(x.begin(), x.begin() + axis);
    stats_shape.resize(x.size(), 1);
    for (size_t k = 1; k < outputs; ++k)
      if (NumElements(ctx.output_shapes[k]) != rows_)
        return NodeInvalid(ctx, "output " + std::to_string(k) + " must have shape " + ShapeToString(stats_shape));
    return CheckOutputShape(ctx, 0, x);
  }

  bool ReadsConstantInEval(int) const override { return false; }
  size_t OwnedWeightBytes() const override { return 2 * static_cast<size_t>(row_) * sizeof(float); }

  // Row r (index o of the dims before axis, k of the dims after the span)
  // holds the row_ values o·row_·inner_ + i·inner_ + k; inner_ is 1 without
  // a span, so a row is contiguous.
  void Eval(const EvalContext& ctx) const override {
    const int64_t threads = (ctx.threads > 1 && rows_ * row_ > (1 << 14)) ? ctx.threads : 1;
    const int64_t step = inner_;
    ParallelFor(rows_, static_cast<int>(threads), [&](int64_t r) {
      const int64_t first = (r / step) * row_ * step + r % step;
      const float* in = ctx.inputs[0] + first;
      float* out = ctx.outputs[0] + first;
      double sum = 0;
      for (int64_t i = 0; i < row_; ++i) sum += in[i * step];
      const float mean = static_cast<float>(sum / static_cast<double>(row_));
      double sq = 0;
      for (int64_t i = 0; i < row_; ++i) {
        const float d = in[i * step] - mean;
        sq += static_cast<double>(d) * d;
      }
      const float inv = 1.f / std::sqrt(static_cast<float>(sq / static_cast<double>(row_)) + epsilon_);
      for (int64_t i = 0; i < row_; ++i) out[i * step] = (in[i * step] - mean) * inv * scale_[i] + bias_[i];
      if (ctx.outputs.size() > 1 && ctx.outputs[1] != nullptr) ctx.outputs[1][r] = mean;
      if (ctx.outputs.size() > 2 && ctx.outputs[2] != nullptr) ctx.outputs[2][r] = inv;
    });
  }

 private:
  float epsilon_ = 1e-5f;
  int64_t row_ = 0, rows_ = 0, inner_ = 1;
  std::vector<float> scale_, bias_;
};

}  // namespace

std::unique_ptr<Kernel> MakeLayerNormalizationKernel() { return std::make_unique<LayerNormKernel>(); }

}  // namespace tessera
