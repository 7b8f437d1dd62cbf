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
// With attr tree_groups (darknet [region] tree=, YOLO9000's hierarchical
// softmax; group sizes in class order, summing to classes), the class
// entries get no logistic and instead darknet's tree softmax runs last, as
// darknet's CPU forward pass computes it: for each group j (first entry
// offset o_j = coords + 1 + the sizes before it) and each g in
// [0, num·H·W), a softmax over the k < size_j values at flat offset
//   b·num·E·H·W + o_j + g + k·num·H·W
// of the *input*, written to the same offsets of the output (later groups
// overwrite earlier ones where these ranges overlap). That flat stride is
// num·H·W, not the entry layout's H·W: the oracle is libdarknet, and models
// trained with it expect these values. The softmax temperature is 1: this
// darknet leaves a [region]'s temperature at 0 and so computes NaN there
// (the libdarknet oracle test sets it to 1 before comparing).
//
// Detection (darknet [detection], YOLOv1): the output is the input, read
// flat per image; with attr softmax=1 a softmax over the `classes` class
// scores of each of the side² cells (the first side²·classes values).
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
    tree_groups_ = a.Ints("tree_groups");
    int64_t tree_classes = 0;
    for (int64_t n : tree_groups_) {
      if (n <= 0) return NodeInvalid(ctx, "tree_groups must be positive sizes");
      tree_classes += n;
    }
    if (!tree_groups_.empty() && tree_classes != classes_)
      return NodeInvalid(
          ctx, "tree_groups sum to " + std::to_string(tree_classes) + ", classes is " + std::to_string(classes_));
    return CheckOutputShape(ctx, 0, x);
  }

  size_t ScratchBytes() const override {
    return tree_groups_.empty() ? 0 : static_cast<size_t>(num_ * (coords_ + classes_ + 1) * hw_) * sizeof(float);
  }

  void Eval(const EvalContext& ctx) const override {
    const float* in = ctx.inputs[0];
    float* out = ctx.outputs[0];
    const int64_t entries = coords_ + classes_ + 1;
    const int64_t total = batch_ * num_ * entries * hw_;
    const int64_t image = num_ * entries * hw_;
    if (out != in) std::memcpy(out, in, static_cast<size_t>(total) * sizeof(float));
    for (int64_t b = 0; b < batch_; ++b) {
      // The tree softmax reads the input as it was (out may alias in).
      if (!tree_groups_.empty()) std::memcpy(ctx.scratch, out + b * image, static_cast<size_t>(image) * sizeof(float));
      for (int64_t n = 0; n < num_; ++n) {
        float* anchor = out + (b * num_ + n) * entries * hw_;
        for (int64_t i = 0; i < 2 * hw_; ++i) anchor[i] = Logistic(anchor[i]);
        if (!background_)
          for (int64_t i = 0; i < hw_; ++i) anchor[coords_ * hw_ + i] = Logistic(anchor[coords_ * hw_ + i]);
        if (!tree_groups_.empty()) continue;
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
      if (!tree_groups_.empty()) TreeSoftmax(ctx.scratch, out + b * image);
    }
  }

 private:
  // darknet's tree softmax over one image (see the top of the file).
  void TreeSoftmax(const float* in, float* out) const {
    const int64_t stride = num_ * hw_;
    int64_t offset = coords_ + 1;
    for (int64_t size : tree_groups_) {
      for (int64_t g = 0; g < stride; ++g) {
        const float* x = in + offset + g;
        float* y = out + offset + g;
        float largest = -FLT_MAX;
        for (int64_t k = 0; k < size; ++k) largest = std::max(largest, x[k * stride]);
        float sum = 0.f;
        for (int64_t k = 0; k < size; ++k) {
          const float e = std::exp(x[k * stride] - largest);
          y[k * stride] = e;
          sum += e;
        }
        for (int64_t k = 0; k < size; ++k) y[k * stride] /= sum;
      }
      offset += size;
    }
  }

  int64_t num_ = 1, classes_ = 20, coords_ = 4;
  bool softmax_ = false, background_ = false;
  int64_t batch_ = 0, hw_ = 0;
  std::vector<int64_t> tree_groups_;
};

class DetectionKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1));
    const Attributes& a = ctx.node.attrs;
    classes_ = a.Int("classes", 1);
    side_ = a.Int("side", 7);
    softmax_ = a.Int("softmax", 0) != 0;
    const int64_t coords = a.Int("coords", 1), num = a.Int("num", 1);
    const Shape& x = ctx.input_shapes[0];
    if (x.empty() || x[0] <= 0) return NodeInvalid(ctx, "needs a batch dimension");
    batch_ = x[0];
    inputs_ = NumElements(x) / batch_;
    if (classes_ < 0 || coords < 0 || num <= 0 || side_ <= 0 ||
        inputs_ != side_ * side_ * ((1 + coords) * num + classes_))
      return NodeInvalid(ctx, "input " + ShapeToString(x) + " does not hold side²·((1 + coords)·num + classes) values");
    return CheckOutputShape(ctx, 0, x);
  }

  void Eval(const EvalContext& ctx) const override {
    const float* in = ctx.inputs[0];
    float* out = ctx.outputs[0];
    if (out != in) std::memcpy(out, in, static_cast<size_t>(batch_ * inputs_) * sizeof(float));
    if (!softmax_ || classes_ == 0) return;
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t cell = 0; cell < side_ * side_; ++cell) {
        float* p = out + b * inputs_ + cell * classes_;
        const float largest = *std::max_element(p, p + classes_);
        float sum = 0.f;
        for (int64_t k = 0; k < classes_; ++k) sum += (p[k] = std::exp(p[k] - largest));
        for (int64_t k = 0; k < classes_; ++k) p[k] /= sum;
      }
  }

 private:
  int64_t classes_ = 1, side_ = 7, batch_ = 0, inputs_ = 0;
  bool softmax_ = false;
};

}  // namespace

std::unique_ptr<Kernel> MakeRegionKernel() { return std::make_unique<RegionKernel>(); }
std::unique_ptr<Kernel> MakeDetectionKernel() { return std::make_unique<DetectionKernel>(); }

}  // namespace tessera
