// DarknetShortcut (darknet-only op; darknet [shortcut] between layers of
// different shapes, as in darknet's ResNet cfgs; equal shapes import as Add).
//
// Inputs [X (previous layer), F (the `from` layer)]; output has X's shape;
// attr "activation" (+ act_alpha/act_beta) as for any fused activation.
// darknet forward_shortcut_layer + shortcut_cpu(w1,h1,c1 = F; w2,h2,c2 = X):
//   stride = max(1, w1 / w2), sample = max(1, w2 / w1),
//   out = X; for k < min(c1,c2), j < min(h1,h2), i < min(w1,w2):
//     out[k, j·sample, i·sample] += F[k, j·stride, i·stride]
//   then the activation over the whole output.
#include <algorithm>
#include <cstring>
#include <memory>

#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

class DarknetShortcutKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 2, 2));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 0, 4));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 1, 4));
    const Shape& x = ctx.input_shapes[0];
    const Shape& f = ctx.input_shapes[1];
    if (x[0] != f[0])
      return NodeInvalid(ctx, "inputs " + ShapeToString(x) + " and " + ShapeToString(f) + " differ in batch");
    n_ = x[0];
    c2_ = x[1];
    h2_ = x[2];
    w2_ = x[3];
    c1_ = f[1];
    h1_ = f[2];
    w1_ = f[3];
    if (w1_ / w2_ != h1_ / h2_ || w2_ / w1_ != h2_ / h1_)
      return NodeInvalid(
          ctx, "inputs " + ShapeToString(x) + " and " + ShapeToString(f) + " scale differently in height and width");
    stride_ = std::max<int64_t>(1, w1_ / w2_);
    sample_ = std::max<int64_t>(1, w2_ / w1_);
    auto act = FusedActivation::FromAttributes(ctx.node.attrs);
    if (!act.ok()) return NodeNotSupported(ctx, act.status().message());
    act_ = *act;
    return CheckOutputShape(ctx, 0, x);
  }

  void Eval(const EvalContext& ctx) const override {
    const float* x = ctx.inputs[0];
    const float* f = ctx.inputs[1];
    float* out = ctx.outputs[0];
    const size_t total = static_cast<size_t>(n_ * c2_ * h2_ * w2_);
    if (out != x) std::memcpy(out, x, total * sizeof(float));
    const int64_t minc = std::min(c1_, c2_), minh = std::min(h1_, h2_), minw = std::min(w1_, w2_);
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < minc; ++k)
        for (int64_t j = 0; j < minh; ++j)
          for (int64_t i = 0; i < minw; ++i)
            out[i * sample_ + w2_ * (j * sample_ + h2_ * (k + c2_ * b))] +=
                f[i * stride_ + w1_ * (j * stride_ + h1_ * (k + c1_ * b))];
    act_.Apply(out, total);
  }

 private:
  int64_t n_ = 0, c1_ = 0, h1_ = 0, w1_ = 0, c2_ = 0, h2_ = 0, w2_ = 0;
  int64_t stride_ = 1, sample_ = 1;
  FusedActivation act_;
};

}  // namespace

std::unique_ptr<Kernel> MakeDarknetShortcutKernel() { return std::make_unique<DarknetShortcutKernel>(); }

}  // namespace tessera
