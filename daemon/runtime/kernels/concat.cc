// Concat along any axis (negative counts from the end). Every input has the
// output's shape except along `axis`; the output is viewed as
// [outer, axis · inner] and each input fills its column band of every row.
#include <cstring>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

class ConcatKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1 << 16));
    const Shape& first = ctx.input_shapes[0];
    const int64_t axis = NormalizeAxis(ctx.node.attrs.Int("axis", 0), first.size());
    if (axis < 0) return NodeInvalid(ctx, "axis is out of range for input " + ShapeToString(first));
    Shape out = first;
    out[axis] = 0;
    for (size_t k = 0; k < ctx.input_shapes.size(); ++k) {
      const Shape& s = ctx.input_shapes[k];
      bool same = s.size() == first.size();
      for (size_t i = 0; same && i < s.size(); ++i) same = static_cast<int64_t>(i) == axis || s[i] == first[i];
      if (!same)
        return NodeInvalid(ctx, "input " + std::to_string(k) + " shape " + ShapeToString(s) +
                                    " differs from " + ShapeToString(first) + " outside axis " +
                                    std::to_string(axis));
      out[axis] += s[axis];
    }
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, out));
    outer_ = 1;
    for (int64_t i = 0; i < axis; ++i) outer_ *= out[i];
    int64_t inner = 1;
    for (size_t i = axis + 1; i < out.size(); ++i) inner *= out[i];
    row_ = out[axis] * inner;
    band_.clear();
    for (const Shape& s : ctx.input_shapes) band_.push_back(s[axis] * inner);
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override {
    float* y = ctx.outputs[0];
    int64_t column = 0;
    for (size_t k = 0; k < band_.size(); ++k) {
      const float* x = ctx.inputs[k];
      const int64_t band = band_[k];
      // Already in place: the executor had its producer write it there
      // (executor.cc, "Concat in place").
      if (outer_ == 1 && x == y + column) {
        column += band;
        continue;
      }
      for (int64_t r = 0; r < outer_; ++r) std::memcpy(y + r * row_ + column, x + r * band, sizeof(float) * band);
      column += band;
    }
  }

 private:
  int64_t outer_ = 1, row_ = 0;
  std::vector<int64_t> band_;
};

}  // namespace

std::unique_ptr<Kernel> MakeConcatKernel() { return std::make_unique<ConcatKernel>(); }

}  // namespace tessera
