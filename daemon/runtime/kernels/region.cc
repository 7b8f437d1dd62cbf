// Region (graph.h darknet-only op; darknet [region], and [yolo] imported as
// Region with coords=4, softmax=0): the activations darknet's
// forward_region_layer / forward_yolo_layer apply at inference. Box decoding
// (anchors, thresholds, NMS) is post-processing and not part of the op.
//
// Attrs: num (anchors), classes, coords, softmax (0/1), background (0/1).
// Input = output = [N, num·(coords + classes + 1), H, W].
//
// Entry layout (darknet entry_index): channel = a·(coords + classes + 1) + e
// for anchor a and entry e, i.e. value (b, a, e, y, x) sits at
//   b·num·E·H·W + a·E·H·W + e·H·W + y·W + x,   E = coords + classes + 1.
// Entries: 0..coords-1 box (x, y, w, h, ...), coords = objectness,
// coords+1 .. coords+classes = class scores.
// Per anchor, at every location:
//   entries 0, 1 (x, y)            -> logistic
//   entry coords (objectness)      -> logistic, unless background=1
//   class entries                  -> softmax over the classes+background
//                                     entries starting at coords+!background
//                                     (stride H·W) if softmax=1, else logistic
//   the other entries (w, h, ...)  -> unchanged
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>

#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

inline float Logistic(float x) { return 1.f / (1.f + std::exp(-x)); }

class RegionKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 0, 4));
    const Attributes& a = ctx.node.attrs;
    num_ = a.Int("num", 1);
    classes_ = a.Int("classes", 20);
    coords_ = a.Int("coords", 4);
    softmax_ = a.Int("softmax", 0) != 0;
    background_ = a.Int("background", 0) != 0;
    if (num_ <= 0 || classes_ < 0 || coords_ < 2)
      return NodeInvalid(ctx, "needs num > 0, classes >= 0 and coords >= 2");
    const Shape& x = ctx.input_shapes[0];
    batch_ = x[0];
    hw_ = x[2] * x[3];
    if (x[1] != num_ * (coords_ + classes_ + 1))
      return NodeInvalid(ctx, "input " + ShapeToString(x) + " does not have num·(coords+classes+1) = " +
                                  std::to_string(num_ * (coords_ + classes_ + 1)) + " channels");
    return CheckOutputShape(ctx, 0, x);
  }

  void Eval(const EvalContext& ctx) const override {
    const float* in = ctx.inputs[0];
    float* out = ctx.outputs[0];
    const int64_t entries = coords_ + classes_ + 1;
    const int64_t total = batch_ * num_ * entries * hw_;
    if (out != in) std::memcpy(out, in, static_cast<size_t>(total) * sizeof(float));
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t n = 0; n < num_; ++n) {
        float* anchor = out + (b * num_ + n) * entries * hw_;
        for (int64_t i = 0; i < 2 * hw_; ++i) anchor[i] = Logistic(anchor[i]);
        if (!background_)
          for (int64_t i = 0; i < hw_; ++i) anchor[coords_ * hw_ + i] = Logistic(anchor[coords_ * hw_ + i]);
        float* cls = anchor + (coords_ + (background_ ? 0 : 1)) * hw_;
        if (!softmax_) {
          for (int64_t i = 0; i < classes_ * hw_; ++i) cls[i] = Logistic(cls[i]);
          continue;
        }
        // darknet softmax(): max-shifted exp, per location over the class entries.
        const int64_t count = classes_ + (background_ ? 1 : 0);
        for (int64_t loc = 0; loc < hw_; ++loc) {
          float largest = -FLT_MAX;
          for (int64_t k = 0; k < count; ++k) largest = std::max(largest, cls[k * hw_ + loc]);
          float sum = 0.f;
          for (int64_t k = 0; k < count; ++k) {
            const float e = std::exp(cls[k * hw_ + loc] - largest);
            cls[k * hw_ + loc] = e;
            sum += e;
          }
          for (int64_t k = 0; k < count; ++k) cls[k * hw_ + loc] /= sum;
        }
      }
  }

 private:
  int64_t num_ = 1, classes_ = 20, coords_ = 4;
  bool softmax_ = false, background_ = false;
  int64_t batch_ = 0, hw_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeRegionKernel() { return std::make_unique<RegionKernel>(); }

}  // namespace tessera
