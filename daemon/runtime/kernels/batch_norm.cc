// BatchNormalization, inference form (ONNX; graph.h keeps it only where it
// could not be folded into a producer): y = (x - mean) / sqrt(var + eps) ·
// scale + B per channel (dim 1). With constant parameters Prepare folds them
// into y = x · a_c + b_c.
#include <cmath>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"

namespace tessera {
namespace {

class BatchNormalizationKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 5, 5));
    const Shape& x = ctx.input_shapes[0];
    if (x.size() < 2) return NodeInvalid(ctx, "input " + ShapeToString(x) + " needs rank >= 2 ([N, C, ...])");
    if (ctx.node.attrs.Int("training_mode", 0) != 0) return NodeNotSupported(ctx, "training_mode=1");
    n_ = x[0];
    c_ = x[1];
    plane_ = 1;
    for (size_t i = 2; i < x.size(); ++i) plane_ *= x[i];
    epsilon_ = static_cast<float>(ctx.node.attrs.Float("epsilon", 1e-5));
    static const char* kNames[] = {"scale", "B", "mean", "var"};
    for (size_t i = 1; i < 5; ++i)
      if (NumElements(ctx.input_shapes[i]) != c_ || ctx.input_shapes[i].size() != 1)
        return NodeInvalid(ctx, std::string(kNames[i - 1]) + " shape " + ShapeToString(ctx.input_shapes[i]) +
                                    " must be [" + std::to_string(c_) + "]");
    folded_ = true;
    for (size_t i = 1; i < 5; ++i) folded_ &= ConstantOrNull(ctx, i) != nullptr;
    if (folded_ && !ctx.shapes_only) {
      multiplier_.resize(c_);
      offset_.resize(c_);
      for (int64_t c = 0; c < c_; ++c)
        ChannelAffine(ctx.constant_inputs[1]->values[c], ctx.constant_inputs[2]->values[c],
                      ctx.constant_inputs[3]->values[c], ctx.constant_inputs[4]->values[c], &multiplier_[c],
                      &offset_[c]);
    }
    return CheckOutputShape(ctx, 0, x);
  }

  void Eval(const EvalContext& ctx) const override {
    const float* x = ctx.inputs[0];
    float* y = ctx.outputs[0];
    const int64_t planes = n_ * c_;
    ParallelFor(planes, (ctx.threads > 1 && planes * plane_ > 65536) ? ctx.threads : 1, [&](int64_t p) {
      const int64_t c = p % c_;
      float a, b;
      if (folded_) {
        a = multiplier_[c];
        b = offset_[c];
      } else {
        ChannelAffine(ctx.inputs[1][c], ctx.inputs[2][c], ctx.inputs[3][c], ctx.inputs[4][c], &a, &b);
      }
      const float* xp = x + p * plane_;
      float* yp = y + p * plane_;
#pragma omp simd
      for (int64_t i = 0; i < plane_; ++i) yp[i] = xp[i] * a + b;
    });
  }

 private:
  void ChannelAffine(float scale, float bias, float mean, float var, float* a, float* b) const {
    *a = scale / std::sqrt(var + epsilon_);
    *b = bias - mean * *a;
  }

  int64_t n_ = 0, c_ = 0, plane_ = 1;
  float epsilon_ = 1e-5f;
  bool folded_ = false;
  std::vector<float> multiplier_, offset_;
};

}  // namespace

std::unique_ptr<Kernel> MakeBatchNormalizationKernel() { return std::make_unique<BatchNormalizationKernel>(); }

}  // namespace tessera
