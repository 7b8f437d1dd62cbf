// Softmax, opset-13 semantics: normalise along one axis (default -1); the
// input is viewed as [outer, axis, inner]. Subtracting the maximum keeps exp
// finite.
#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"

namespace tessera {
namespace {

class SoftmaxKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1));
    const Shape& in = ctx.input_shapes[0];
    if (in.empty()) return NodeInvalid(ctx, "input must have rank >= 1");
    const int64_t axis = NormalizeAxis(ctx.node.attrs.Int("axis", -1), in.size());
    if (axis < 0) return NodeInvalid(ctx, "axis is out of range for input " + ShapeToString(in));
    outer_ = 1;
    inner_ = 1;
    for (int64_t i = 0; i < axis; ++i) outer_ *= in[i];
    for (size_t i = axis + 1; i < in.size(); ++i) inner_ *= in[i];
    len_ = in[axis];
    return CheckOutputShape(ctx, 0, in);
  }

  void Eval(const EvalContext& ctx) const override {
    const float* x = ctx.inputs[0];
    float* y = ctx.outputs[0];
    if (inner_ == 1) {
      ParallelFor(outer_, (ctx.threads > 1 && outer_ > 1) ? ctx.threads : 1, [&](int64_t o) {
        Eigen::Map<const Eigen::ArrayXf> xr(x + o * len_, len_);
        Eigen::Map<Eigen::ArrayXf> yr(y + o * len_, len_);
        yr = (xr - xr.maxCoeff()).exp();
        yr /= yr.sum();
      });
      return;
    }
    // Strided axis: process `inner` columns at once, walking the axis.
    ParallelFor(outer_, (ctx.threads > 1 && outer_ > 1) ? ctx.threads : 1, [&](int64_t o) {
      const float* xo = x + o * len_ * inner_;
      float* yo = y + o * len_ * inner_;
      for (int64_t i = 0; i < inner_; ++i) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t a = 0; a < len_; ++a) m = std::max(m, xo[a * inner_ + i]);
        float sum = 0.f;
        for (int64_t a = 0; a < len_; ++a) {
          const float e = std::exp(xo[a * inner_ + i] - m);
          yo[a * inner_ + i] = e;
          sum += e;
        }
        const float inv = 1.f / sum;
        for (int64_t a = 0; a < len_; ++a) yo[a * inner_ + i] *= inv;
      }
    });
  }

 private:
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> MakeSoftmaxKernel() { return std::make_unique<SoftmaxKernel>(); }

}  // namespace tessera
