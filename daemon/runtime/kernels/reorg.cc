// Reorg (graph.h darknet-only op; darknet [reorg]): darknet's space-to-depth
// exactly as its CPU forward pass computes it, quirks included.
//
// Attrs: stride s, reverse (0/1). Input [N, C, H, W].
//
// reverse=0 (yolov2's passthrough layer): output [N, C·s², H/s, W/s].
//   darknet forward_reorg_layer calls reorg_cpu(input, W, H, C, N, s,
//   forward=0, output) with the *input* dims, which gathers
//     out[i + W·(j + H·(k + C·b))] = in[w2 + W·s·(h2 + H·s·(c2 + C/s²·b))]
//   for b < N, k < C, j < H, i < W, where
//     c2 = k mod (C/s²), off = k div (C/s²), w2 = i·s + off mod s, h2 = j·s + off div s.
//   Both sides are read as flat buffers: the input is indexed as if it were
//   [C/s², H·s, W·s] and the output as if it were [C, H, W]. The result is
//   not the "obvious" space-to-depth of the declared [C·s², H/s, W/s] shape,
//   but it is what darknet's weights were trained against.
// reverse=1: output [N, C/s², H·s, W·s], the scatter of the same formula
//   (reorg_cpu forward=1): out[w2 + W·s·(h2 + H·s·(c2 + C/s²·b))] = in[i + W·(j + H·(k + C·b))].
#include <memory>

#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

class ReorgKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 0, 4));
    stride_ = ctx.node.attrs.Int("stride", 1);
    reverse_ = ctx.node.attrs.Int("reverse", 0) != 0;
    if (stride_ <= 0) return NodeInvalid(ctx, "stride must be positive");
    const Shape& x = ctx.input_shapes[0];
    n_ = x[0];
    c_ = x[1];
    h_ = x[2];
    w_ = x[3];
    const int64_t s2 = stride_ * stride_;
    if (c_ % s2 != 0)
      return NodeInvalid(ctx,
                         "channels " + std::to_string(c_) + " are not divisible by stride² = " + std::to_string(s2));
    Shape expected;
    if (reverse_) {
      expected = {n_, c_ / s2, h_ * stride_, w_ * stride_};
    } else {
      if (h_ % stride_ != 0 || w_ % stride_ != 0)
        return NodeInvalid(
            ctx, "input " + ShapeToString(x) + " height/width not divisible by stride " + std::to_string(stride_));
      expected = {n_, c_ * s2, h_ / stride_, w_ / stride_};
    }
    return CheckOutputShape(ctx, 0, expected);
  }

  void Eval(const EvalContext& ctx) const override {
    const float* in = ctx.inputs[0];
    float* out = ctx.outputs[0];
    const int64_t s = stride_, out_c = c_ / (s * s);
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < c_; ++k) {
        const int64_t c2 = k % out_c, off = k / out_c;
        for (int64_t j = 0; j < h_; ++j) {
          const int64_t h2 = j * s + off / s;
          for (int64_t i = 0; i < w_; ++i) {
            const int64_t w2 = i * s + off % s;
            const int64_t flat = i + w_ * (j + h_ * (k + c_ * b));
            const int64_t spread = w2 + w_ * s * (h2 + h_ * s * (c2 + out_c * b));
            if (reverse_) {
              out[spread] = in[flat];
            } else {
              out[flat] = in[spread];
            }
          }
        }
      }
  }

 private:
  int64_t stride_ = 1;
  bool reverse_ = false;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeReorgKernel() { return std::make_unique<ReorgKernel>(); }

}  // namespace tessera
