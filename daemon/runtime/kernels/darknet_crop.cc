// DarknetCrop (graph.h darknet-only op; darknet [crop]) at test time:
// darknet forward_crop_layer with net.train = 0 takes the centred window
// (no flip, no random offset) and maps values as x·scale + shift, with
// scale = 2, shift = -1 (image [0,1] -> [-1,1]) unless the cfg says noadjust
// (then 1, 0). The importer resolves the window into attrs:
//   crop_height, crop_width, offset_h, offset_w, scale, shift.
// out[b, c, i, j] = in[b, c, i + offset_h, j + offset_w] · scale + shift.
#include <memory>

#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

class DarknetCropKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 0, 4));
    const Attributes& a = ctx.node.attrs;
    const Shape& x = ctx.input_shapes[0];
    n_ = x[0];
    c_ = x[1];
    h_ = x[2];
    w_ = x[3];
    oh_ = a.Int("crop_height", 0);
    ow_ = a.Int("crop_width", 0);
    dh_ = a.Int("offset_h", (h_ - oh_) / 2);
    dw_ = a.Int("offset_w", (w_ - ow_) / 2);
    scale_ = static_cast<float>(a.Float("scale", 2.0));
    shift_ = static_cast<float>(a.Float("shift", -1.0));
    if (oh_ <= 0 || ow_ <= 0 || dh_ < 0 || dw_ < 0 || dh_ + oh_ > h_ || dw_ + ow_ > w_)
      return NodeInvalid(ctx, "crop " + std::to_string(oh_) + "x" + std::to_string(ow_) + " at (" +
                                  std::to_string(dh_) + "," + std::to_string(dw_) + ") does not fit input " +
                                  ShapeToString(x));
    return CheckOutputShape(ctx, 0, {n_, c_, oh_, ow_});
  }

  void Eval(const EvalContext& ctx) const override {
    const float* in = ctx.inputs[0];
    float* out = ctx.outputs[0];
    for (int64_t p = 0; p < n_ * c_; ++p) {
      const float* plane = in + p * h_ * w_;
      for (int64_t i = 0; i < oh_; ++i) {
        const float* row = plane + (i + dh_) * w_ + dw_;
        for (int64_t j = 0; j < ow_; ++j) *out++ = row[j] * scale_ + shift_;
      }
    }
  }

 private:
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0, dh_ = 0, dw_ = 0;
  float scale_ = 2.f, shift_ = -1.f;
};

}  // namespace

std::unique_ptr<Kernel> MakeDarknetCropKernel() { return std::make_unique<DarknetCropKernel>(); }

}  // namespace tessera
