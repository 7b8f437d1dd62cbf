// Conv (2-D, NCHW): ONNX Conv with groups, strides, dilations and asymmetric
// pads, optional bias, and the producer's fused activation (graph.h).
//
// Three evaluation strategies, picked in Prepare:
//  * pointwise — 1x1 kernel, stride 1, no pad: the input plane already is the
//    GEMM operand, so Y_g[O/g, HW] = W_g[O/g, C/g] · X_g[C/g, HW] directly.
//  * depthwise — one input channel per group: a direct loop per output plane
//    whose inner loop runs along a row (vectorises for stride 1); a GEMM of
//    K = kH·kW would waste the packing.
//  * general — im2col of one group into scratch, then one Eigen GEMM
//    Y_g[O/g, OH·OW] = W_g[O/g, C/g·kH·kW] · col[C/g·kH·kW, OH·OW].
// Bias and activation are applied per output row right after its GEMM, while
// the rows are still in cache.
#include <algorithm>
#include <cstring>

#include <Eigen/Core>

#include "daemon/kernels/kernel_factories.h"
#include "daemon/kernels/node_checks.h"

namespace tessera {
namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix>;
using MatrixMap = Eigen::Map<RowMajorMatrix>;

// Output positions ow in [lo, hi) for which iw = ow*stride + offset lies in [0, width).
void ValidRange(int64_t offset, int64_t stride, int64_t width, int64_t out, int64_t* lo, int64_t* hi) {
  // ow >= ceil(-offset / stride), ow <= floor((width - 1 - offset) / stride)
  int64_t l = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t h = (width - 1 - offset) < 0 ? 0 : (width - 1 - offset) / stride + 1;
  l = std::min(l, out);
  h = std::clamp(h, l, out);
  *lo = l;
  *hi = h;
}

class ConvKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 2, 3));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 0, 4));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 1, 4));
    const Shape& x = ctx.input_shapes[0];
    const Shape& w = ctx.input_shapes[1];
    const auto& a = ctx.node.attrs;
    n_ = x[0], c_ = x[1], h_ = x[2], w_ = x[3];
    o_ = w[0];
    group_ = a.Int("group", 1);
    if (group_ < 1 || c_ % group_ != 0 || o_ % group_ != 0)
      return NodeInvalid(ctx, "group " + std::to_string(group_) + " does not divide input channels " +
                                  std::to_string(c_) + " and output channels " + std::to_string(o_));
    cg_ = c_ / group_;
    og_ = o_ / group_;
    if (w[1] != cg_)
      return NodeInvalid(ctx, "weight shape " + ShapeToString(w) + " needs " + std::to_string(cg_) +
                                  " input channels per group (input " + ShapeToString(x) + ", group " +
                                  std::to_string(group_) + ")");
    kh_ = w[2], kw_ = w[3];
    auto kernel_shape = a.Ints("kernel_shape", {kh_, kw_});
    if (kernel_shape.size() != 2 || kernel_shape[0] != kh_ || kernel_shape[1] != kw_)
      return NodeInvalid(ctx, "kernel_shape does not match weight shape " + ShapeToString(w));
    auto strides = a.Ints("strides", {1, 1});
    auto dilations = a.Ints("dilations", {1, 1});
    auto pads = a.Ints("pads", {0, 0, 0, 0});
    if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4)
      return NodeInvalid(ctx, "strides/dilations need 2 values and pads 4 (2-D convolution only)");
    sh_ = strides[0], sw_ = strides[1], dh_ = dilations[0], dw_ = dilations[1];
    if (sh_ < 1 || sw_ < 1 || dh_ < 1 || dw_ < 1) return NodeInvalid(ctx, "strides and dilations must be >= 1");
    for (int64_t p : pads)
      if (p < 0) return NodeInvalid(ctx, "negative pads are not allowed");
    const std::string auto_pad = a.String("auto_pad", "NOTSET");
    if (auto_pad == "VALID") {
      pads = {0, 0, 0, 0};
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t in[2] = {h_, w_}, k[2] = {kh_, kw_}, s[2] = {sh_, sw_}, d[2] = {dh_, dw_};
      for (int i = 0; i < 2; ++i) {
        int64_t out = (in[i] + s[i] - 1) / s[i];
        int64_t total = std::max<int64_t>(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in[i]);
        int64_t small = total / 2, big = total - small;
        pads[i] = auto_pad == "SAME_UPPER" ? small : big;
        pads[i + 2] = auto_pad == "SAME_UPPER" ? big : small;
      }
    } else if (auto_pad != "NOTSET" && !auto_pad.empty()) {
      return NodeNotSupported(ctx, "auto_pad '" + auto_pad + "'");
    }
    pt_ = pads[0], pl_ = pads[1];
    const int64_t pb = pads[2], pr = pads[3];
    oh_ = (h_ + pt_ + pb - dh_ * (kh_ - 1) - 1) / sh_ + 1;
    ow_ = (w_ + pl_ + pr - dw_ * (kw_ - 1) - 1) / sw_ + 1;
    if (h_ + pt_ + pb < dh_ * (kh_ - 1) + 1 || w_ + pl_ + pr < dw_ * (kw_ - 1) + 1)
      return NodeInvalid(ctx, "the (dilated) kernel is larger than the padded input " + ShapeToString(x));
    has_bias_ = HasInput(ctx, 2);
    if (has_bias_ && ctx.input_shapes[2] != Shape{o_})
      return NodeInvalid(ctx, "bias shape " + ShapeToString(ctx.input_shapes[2]) + " must be [" +
                                  std::to_string(o_) + "]");
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, {n_, o_, oh_, ow_}));
    auto act = FusedActivation::FromAttributes(a);
    if (!act.ok()) return NodeNotSupported(ctx, act.status().message());
    act_ = *act;

    if (cg_ == 1 && group_ > 1) {
      strategy_ = kDepthwise;
      // Per kernel column, the output columns whose input column is inside the image.
      col_lo_.resize(kw_);
      col_hi_.resize(kw_);
      for (int64_t j = 0; j < kw_; ++j) ValidRange(j * dw_ - pl_, sw_, w_, ow_, &col_lo_[j], &col_hi_[j]);
    } else if (kh_ == 1 && kw_ == 1 && sh_ == 1 && sw_ == 1 && pt_ == 0 && pl_ == 0 && pb == 0 && pr == 0) {
      strategy_ = kPointwise;
    } else {
      strategy_ = kIm2col;
      col_lo_.resize(kw_);
      col_hi_.resize(kw_);
      for (int64_t j = 0; j < kw_; ++j) ValidRange(j * dw_ - pl_, sw_, w_, ow_, &col_lo_[j], &col_hi_[j]);
    }
    return Status::OK();
  }

  size_t ScratchBytes() const override {
    if (strategy_ != kIm2col) return 0;
    return static_cast<size_t>(cg_ * kh_ * kw_ * oh_ * ow_) * sizeof(float);
  }

  void Eval(const EvalContext& ctx) const override {
    switch (strategy_) {
      case kDepthwise:
        EvalDepthwise(ctx);
        return;
      case kPointwise:
      case kIm2col:
        EvalGemm(ctx);
        return;
    }
  }

 private:
  enum Strategy { kIm2col, kPointwise, kDepthwise };

  // Bias and activation over one output row of `len` values.
  void FinishRow(float* row, int64_t len, float bias) const {
    if (bias != 0.f)
      for (int64_t i = 0; i < len; ++i) row[i] += bias;
    act_.Apply(row, static_cast<size_t>(len));
  }

  // Fills col[(c*kH + i)*kW + j][oh*OW + ow] = x[c][oh*sh - pt + i*dh][ow*sw - pl + j*dw] (0 outside).
  void Im2col(const float* x, float* col, int threads) const {
    const int64_t plane = oh_ * ow_;
#pragma omp parallel for num_threads(threads) if (threads > 1)
    for (int64_t c = 0; c < cg_; ++c) {
      const float* xc = x + c * h_ * w_;
      for (int64_t i = 0; i < kh_; ++i) {
        for (int64_t j = 0; j < kw_; ++j) {
          float* dst = col + ((c * kh_ + i) * kw_ + j) * plane;
          const int64_t lo = col_lo_[j], hi = col_hi_[j];
          const int64_t col_offset = j * dw_ - pl_;
          for (int64_t oh = 0; oh < oh_; ++oh) {
            float* d = dst + oh * ow_;
            const int64_t ih = oh * sh_ - pt_ + i * dh_;
            if (ih < 0 || ih >= h_) {
              std::memset(d, 0, sizeof(float) * ow_);
              continue;
            }
            const float* src = xc + ih * w_;
            for (int64_t ow = 0; ow < lo; ++ow) d[ow] = 0.f;
            if (sw_ == 1) {
              if (hi > lo) std::memcpy(d + lo, src + lo + col_offset, sizeof(float) * (hi - lo));
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) d[ow] = src[ow * sw_ + col_offset];
            }
            for (int64_t ow = hi; ow < ow_; ++ow) d[ow] = 0.f;
          }
        }
      }
    }
  }

  void EvalGemm(const EvalContext& ctx) const {
    const float* x = ctx.inputs[0];
    const float* wt = ctx.inputs[1];
    const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
    float* y = ctx.outputs[0];
    const int64_t plane = oh_ * ow_;
    const int64_t k = cg_ * kh_ * kw_;
    for (int64_t n = 0; n < n_; ++n) {
      for (int64_t g = 0; g < group_; ++g) {
        const float* xg = x + (n * c_ + g * cg_) * h_ * w_;
        const float* operand = xg;
        if (strategy_ == kIm2col) {
          Im2col(xg, ctx.scratch, ctx.threads);
          operand = ctx.scratch;
        }
        float* yg = y + (n * o_ + g * og_) * plane;
        ConstMatrixMap wmat(wt + g * og_ * k, og_, k);
        ConstMatrixMap cmat(operand, k, plane);
        MatrixMap ymat(yg, og_, plane);
        ymat.noalias() = wmat * cmat;
#pragma omp parallel for num_threads(ctx.threads) if (ctx.threads > 1)
        for (int64_t o = 0; o < og_; ++o) FinishRow(yg + o * plane, plane, bias ? bias[g * og_ + o] : 0.f);
      }
    }
  }

  void EvalDepthwise(const EvalContext& ctx) const {
    const float* x = ctx.inputs[0];
    const float* wt = ctx.inputs[1];
    const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
    float* y = ctx.outputs[0];
    const int64_t multiplier = og_;  // output channels per input channel
    const int64_t planes = n_ * o_;
#pragma omp parallel for num_threads(ctx.threads) if (ctx.threads > 1)
    for (int64_t p = 0; p < planes; ++p) {
      const int64_t n = p / o_, o = p % o_;
      const float* xc = x + (n * c_ + o / multiplier) * h_ * w_;
      const float* kernel = wt + o * kh_ * kw_;
      float* yp = y + p * oh_ * ow_;
      const float b = bias ? bias[o] : 0.f;
      for (int64_t oh = 0; oh < oh_; ++oh) {
        float* yrow = yp + oh * ow_;
        for (int64_t ow = 0; ow < ow_; ++ow) yrow[ow] = b;
        for (int64_t i = 0; i < kh_; ++i) {
          const int64_t ih = oh * sh_ - pt_ + i * dh_;
          if (ih < 0 || ih >= h_) continue;
          const float* xrow = xc + ih * w_;
          for (int64_t j = 0; j < kw_; ++j) {
            const float kv = kernel[i * kw_ + j];
            const int64_t offset = j * dw_ - pl_;
            const int64_t lo = col_lo_[j], hi = col_hi_[j];
            if (sw_ == 1) {
              const float* src = xrow + lo + offset;  // in bounds: lo + offset >= 0
              float* dst = yrow + lo;
              for (int64_t t = 0; t < hi - lo; ++t) dst[t] += kv * src[t];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += kv * xrow[ow * sw_ + offset];
            }
          }
        }
      }
      act_.Apply(yp, static_cast<size_t>(oh_ * ow_));
    }
  }

  Strategy strategy_ = kIm2col;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, o_ = 0, group_ = 1, cg_ = 0, og_ = 0;
  int64_t kh_ = 0, kw_ = 0, sh_ = 1, sw_ = 1, dh_ = 1, dw_ = 1, pt_ = 0, pl_ = 0, oh_ = 0, ow_ = 0;
  bool has_bias_ = false;
  FusedActivation act_;
  std::vector<int64_t> col_lo_, col_hi_;
};

}  // namespace

std::unique_ptr<Kernel> MakeConvKernel() { return std::make_unique<ConvKernel>(); }

}  // namespace tessera
