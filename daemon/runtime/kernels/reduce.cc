// ReduceMean / ReduceSum / ReduceMax / ReduceMin (ONNX): reduce over `axes`
// (attr, or constant input 1 as in opset 18; empty = all axes unless
// noop_with_empty_axes), keepdims default 1. The output is viewed as the
// input with stride 0 along reduced axes; Eval accumulates input rows into it.
#include <algorithm>
#include <limits>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

enum class ReduceOp { kMean, kSum, kMax, kMin };

class ReduceKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    const std::string& name = ctx.node.op;
    if (name == "ReduceMean") op_ = ReduceOp::kMean;
    else if (name == "ReduceSum") op_ = ReduceOp::kSum;
    else if (name == "ReduceMax") op_ = ReduceOp::kMax;
    else if (name == "ReduceMin") op_ = ReduceOp::kMin;
    else return NodeNotSupported(ctx, "not a reduction");
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 2));
    const Shape& in = ctx.input_shapes[0];
    std::vector<int64_t> axes = ctx.node.attrs.Ints("axes");
    if (HasInput(ctx, 1)) {
      const TensorData* t = ConstantOrNull(ctx, 1);
      if (t == nullptr) return NodeNotSupported(ctx, "axes input must be a constant");
      axes.assign(t->values.begin(), t->values.end());
    }
    const bool keepdims = ctx.node.attrs.Int("keepdims", 1) != 0;
    std::vector<bool> reduced(in.size(), false);
    if (axes.empty()) {
      if (ctx.node.attrs.Int("noop_with_empty_axes", 0) == 0) reduced.assign(in.size(), true);
    }
    for (int64_t ax : axes) {
      const int64_t a = NormalizeAxis(ax, in.size());
      if (a < 0) return NodeInvalid(ctx, "axis " + std::to_string(ax) + " is out of range for " + ShapeToString(in));
      reduced[a] = true;
    }
    Shape out;
    Shape kept(in.size());
    count_ = 1;
    for (size_t d = 0; d < in.size(); ++d) {
      kept[d] = reduced[d] ? 1 : in[d];
      if (reduced[d]) count_ *= in[d];
      if (!reduced[d] || keepdims) out.push_back(kept[d]);
    }
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, out));
    // Output strides over the input's dims, 0 where reduced; then merge dims.
    const std::vector<int64_t> out_strides_full = RowMajorStrides(kept);
    dims_.clear();
    out_strides_.clear();
    for (size_t d = 0; d < in.size(); ++d) {
      if (in[d] == 1) continue;
      const int64_t s = reduced[d] ? 0 : out_strides_full[d];
      if (!dims_.empty() && ((s == 0 && out_strides_.back() == 0) || (s != 0 && out_strides_.back() == s * in[d]))) {
        dims_.back() *= in[d];
        out_strides_.back() = s;
        continue;
      }
      dims_.push_back(in[d]);
      out_strides_.push_back(s);
    }
    if (dims_.empty()) {
      dims_ = {1};
      out_strides_ = {0};
    }
    in_size_ = NumElements(in);
    out_size_ = NumElements(out);
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override {
    const float* x = ctx.inputs[0];
    float* y = ctx.outputs[0];
    const float init = op_ == ReduceOp::kMax   ? -std::numeric_limits<float>::infinity()
                       : op_ == ReduceOp::kMin ? std::numeric_limits<float>::infinity()
                                               : 0.f;
    std::fill(y, y + out_size_, init);
    if (in_size_ == 0) return;
    const size_t rank = dims_.size();
    const int64_t inner = dims_[rank - 1], inner_stride = out_strides_[rank - 1];
    const int64_t rows = in_size_ / inner;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t offset = 0, rest = r;
      for (int64_t i = static_cast<int64_t>(rank) - 2; i >= 0; --i) {
        offset += (rest % dims_[i]) * out_strides_[i];
        rest /= dims_[i];
      }
      const float* xr = x + r * inner;
      float* yr = y + offset;
      if (inner_stride == 0) {
        float acc = yr[0];
        switch (op_) {
          case ReduceOp::kMean:
          case ReduceOp::kSum:
            for (int64_t k = 0; k < inner; ++k) acc += xr[k];
            break;
          case ReduceOp::kMax:
            for (int64_t k = 0; k < inner; ++k) acc = std::max(acc, xr[k]);
            break;
          case ReduceOp::kMin:
            for (int64_t k = 0; k < inner; ++k) acc = std::min(acc, xr[k]);
            break;
        }
        yr[0] = acc;
      } else {
        switch (op_) {
          case ReduceOp::kMean:
          case ReduceOp::kSum:
            for (int64_t k = 0; k < inner; ++k) yr[k] += xr[k];
            break;
          case ReduceOp::kMax:
            for (int64_t k = 0; k < inner; ++k) yr[k] = std::max(yr[k], xr[k]);
            break;
          case ReduceOp::kMin:
            for (int64_t k = 0; k < inner; ++k) yr[k] = std::min(yr[k], xr[k]);
            break;
        }
      }
    }
    if (op_ == ReduceOp::kMean && count_ > 0) {
      const float inv = 1.f / static_cast<float>(count_);
      for (int64_t i = 0; i < out_size_; ++i) y[i] *= inv;
    }
  }

 private:
  ReduceOp op_ = ReduceOp::kMean;
  std::vector<int64_t> dims_, out_strides_;
  int64_t count_ = 1, in_size_ = 0, out_size_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeReduceKernel() { return std::make_unique<ReduceKernel>(); }

}  // namespace tessera
