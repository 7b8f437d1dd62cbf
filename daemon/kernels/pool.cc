// MaxPool and AveragePool (2-D, NCHW), ONNX semantics: kernel_shape,
// strides, pads (top, left, bottom, right), dilations, ceil_mode, and for
// AveragePool count_include_pad.
//
// ceil_mode: ONNX's formula is ceil((in + pads - dilated_k) / s) + 1; newer
// runtimes (and PyTorch) drop a last window that would start inside the end
// padding. Both sizes are accepted — the graph's output shape decides, and a
// window that sees no input yields -inf (max) or 0 (average).
//
// Window geometry is separable, so Prepare tabulates per output row and per
// output column the range of kernel taps landing inside the input and the
// count used as the average's divisor; Eval just walks those ranges.
#include <algorithm>
#include <limits>

#include "daemon/kernels/kernel_factories.h"
#include "daemon/kernels/node_checks.h"

namespace tessera {
namespace {

// Kernel taps [lo, hi) of one output position, and its divisor share.
struct WindowSpan {
  int64_t start = 0;  // input coordinate of tap 0
  int64_t lo = 0, hi = 0;
  int64_t divisor = 0;
};

class PoolKernel : public Kernel {
 public:
  explicit PoolKernel(bool is_max) : is_max_(is_max) {}

  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 0, 4));
    const auto& a = ctx.node.attrs;
    const Shape& x = ctx.input_shapes[0];
    n_ = x[0], c_ = x[1], h_ = x[2], w_ = x[3];
    auto kernel = a.Ints("kernel_shape");
    auto strides = a.Ints("strides", {1, 1});
    auto pads = a.Ints("pads", {0, 0, 0, 0});
    auto dilations = a.Ints("dilations", {1, 1});
    if (kernel.size() != 2) return NodeInvalid(ctx, "kernel_shape must have 2 values (2-D pooling only)");
    if (strides.size() != 2 || pads.size() != 4 || dilations.size() != 2)
      return NodeInvalid(ctx, "strides/dilations need 2 values and pads 4");
    for (int i = 0; i < 2; ++i)
      if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1)
        return NodeInvalid(ctx, "kernel_shape, strides and dilations must be >= 1");
    for (int64_t p : pads)
      if (p < 0) return NodeInvalid(ctx, "negative pads are not allowed");
    const std::string auto_pad = a.String("auto_pad", "NOTSET");
    const bool ceil_mode = a.Int("ceil_mode", 0) != 0;
    const bool include_pad = a.Int("count_include_pad", 0) != 0;
    if (a.Int("storage_order", 0) != 0) return NodeNotSupported(ctx, "storage_order=1");
    const int64_t in[2] = {h_, w_};
    if (auto_pad == "VALID") {
      pads = {0, 0, 0, 0};
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      for (int i = 0; i < 2; ++i) {
        const int64_t out = (in[i] + strides[i] - 1) / strides[i];
        const int64_t total =
            std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in[i]);
        const int64_t small = total / 2, big = total - small;
        pads[i] = auto_pad == "SAME_UPPER" ? small : big;
        pads[i + 2] = auto_pad == "SAME_UPPER" ? big : small;
      }
    } else if (auto_pad != "NOTSET" && !auto_pad.empty()) {
      return NodeNotSupported(ctx, "auto_pad '" + auto_pad + "'");
    }
    if (ctx.output_shapes[0].size() != 4)
      return NodeInvalid(ctx, "output shape " + ShapeToString(ctx.output_shapes[0]) + " must have rank 4");
    std::vector<WindowSpan>* spans[2] = {&rows_, &cols_};
    int64_t out_dims[2];
    for (int i = 0; i < 2; ++i) {
      const int64_t extent = in[i] + pads[i] + pads[i + 2];
      const int64_t span = (kernel[i] - 1) * dilations[i] + 1;
      if (extent < span)
        return NodeInvalid(ctx, "the pooling window is larger than the padded input " + ShapeToString(x));
      const int64_t floor_out = (extent - span) / strides[i] + 1;
      const int64_t ceil_out = (extent - span + strides[i] - 1) / strides[i] + 1;
      const int64_t given = ctx.output_shapes[0][2 + i];
      int64_t out = floor_out;
      if (ceil_mode && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
        // The last window must start inside the input or the leading pad, or be the ONNX ceil count.
        const int64_t clipped = (ceil_out - 1) * strides[i] >= in[i] + pads[i] ? ceil_out - 1 : ceil_out;
        out = given == ceil_out ? ceil_out : clipped;
      } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        out = (in[i] + strides[i] - 1) / strides[i];
      }
      out_dims[i] = out;
      spans[i]->resize(out);
      for (int64_t o = 0; o < out; ++o) {
        WindowSpan& s = (*spans[i])[o];
        s.start = o * strides[i] - pads[i];
        s.lo = kernel[i];
        s.hi = 0;
        int64_t padded_taps = 0;
        for (int64_t t = 0; t < kernel[i]; ++t) {
          const int64_t pos = s.start + t * dilations[i];
          if (pos >= 0 && pos < in[i]) {
            s.lo = std::min(s.lo, t);
            s.hi = std::max(s.hi, t + 1);
          }
          if (pos >= -pads[i] && pos < in[i] + pads[i + 2]) ++padded_taps;
        }
        if (s.lo >= s.hi) s.lo = s.hi = 0;
        s.divisor = include_pad ? padded_taps : s.hi - s.lo;
      }
    }
    oh_ = out_dims[0];
    ow_ = out_dims[1];
    dh_ = dilations[0];
    dw_ = dilations[1];
    return CheckOutputShape(ctx, 0, {n_, c_, oh_, ow_});
  }

  void Eval(const EvalContext& ctx) const override {
    const float* x = ctx.inputs[0];
    float* y = ctx.outputs[0];
    const int64_t planes = n_ * c_;
#pragma omp parallel for num_threads(ctx.threads) if (ctx.threads > 1)
    for (int64_t p = 0; p < planes; ++p) {
      const float* xp = x + p * h_ * w_;
      float* yp = y + p * oh_ * ow_;
      for (int64_t oh = 0; oh < oh_; ++oh) {
        const WindowSpan& r = rows_[oh];
        for (int64_t ow = 0; ow < ow_; ++ow) {
          const WindowSpan& c = cols_[ow];
          float acc = is_max_ ? -std::numeric_limits<float>::infinity() : 0.f;
          for (int64_t i = r.lo; i < r.hi; ++i) {
            const float* row = xp + (r.start + i * dh_) * w_;
            if (is_max_) {
              for (int64_t j = c.lo; j < c.hi; ++j) acc = std::max(acc, row[c.start + j * dw_]);
            } else {
              for (int64_t j = c.lo; j < c.hi; ++j) acc += row[c.start + j * dw_];
            }
          }
          if (!is_max_) {
            const int64_t divisor = r.divisor * c.divisor;
            acc = divisor > 0 ? acc / static_cast<float>(divisor) : 0.f;
          }
          yp[oh * ow_ + ow] = acc;
        }
      }
    }
  }

 private:
  const bool is_max_;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0, dh_ = 1, dw_ = 1;
  std::vector<WindowSpan> rows_, cols_;
};

}  // namespace

std::unique_ptr<Kernel> MakeMaxPoolKernel() { return std::make_unique<PoolKernel>(true); }
std::unique_ptr<Kernel> MakeAveragePoolKernel() { return std::make_unique<PoolKernel>(false); }

}  // namespace tessera
