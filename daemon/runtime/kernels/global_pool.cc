// GlobalAveragePool / GlobalMaxPool: one value per (batch, channel) plane,
// over all spatial dimensions of an [N, C, ...] input; output [N, C, 1, ...].
#include <algorithm>

#include <Eigen/Core>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"

namespace tessera {
namespace {

class GlobalPoolKernel final : public Kernel {
 public:
  explicit GlobalPoolKernel(bool is_max) : is_max_(is_max) {}

  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1));
    const Shape& x = ctx.input_shapes[0];
    if (x.size() < 3) return NodeInvalid(ctx, "input " + ShapeToString(x) + " needs rank >= 3 ([N, C, spatial...])");
    planes_ = x[0] * x[1];
    plane_size_ = NumElements(x) / std::max<int64_t>(planes_, 1);
    Shape expected(x.size(), 1);
    expected[0] = x[0];
    expected[1] = x[1];
    if (plane_size_ == 0) return NodeInvalid(ctx, "input " + ShapeToString(x) + " has an empty spatial extent");
    return CheckOutputShape(ctx, 0, expected);
  }

  void Eval(const EvalContext& ctx) const override {
    const float* x = ctx.inputs[0];
    float* y = ctx.outputs[0];
    // Small maps (an SE block's 7x7 or 14x14) are not worth a parallel region.
    const bool parallel = planes_ * plane_size_ >= 16384;
    ParallelFor(planes_, parallel ? ctx.threads : 1, [&](int64_t p) {
      const float* xp = x + p * plane_size_;
      // Eigen's reductions are vectorised with per-lane partial sums, which
      // also keeps the float sum of a large plane (112x112) accurate.
      Eigen::Map<const Eigen::ArrayXf> plane(xp, plane_size_);
      y[p] = is_max_ ? plane.maxCoeff() : plane.sum() / static_cast<float>(plane_size_);
    });
  }

 private:
  const bool is_max_;
  int64_t planes_ = 0, plane_size_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeGlobalAveragePoolKernel() { return std::make_unique<GlobalPoolKernel>(false); }
std::unique_ptr<Kernel> MakeGlobalMaxPoolKernel() { return std::make_unique<GlobalPoolKernel>(true); }

}  // namespace tessera
