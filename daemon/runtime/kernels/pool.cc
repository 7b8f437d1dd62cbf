// MaxPool and AveragePool (2-D, NCHW), ONNX semantics: kernel_shape,
// strides, pads (top, left, bottom, right), dilations, ceil_mode, and for
// AveragePool count_include_pad.
//
// ceil_mode: ONNX's formula is ceil((in + pads - dilated_k) / s) + 1; newer
// runtimes (and PyTorch) drop a last window that would start inside the end
// padding. Both sizes are accepted — the graph's output shape decides, and a
// window that sees no input yields -inf (max) or 0 (average).
//
// Max pooling is separable and exact in any order: per output row, the
// maximum over the window's input rows (contiguous passes over the input,
// no padded copy; padding and ceil-mode overhang are -inf in the row
// buffer), then over its columns (stride 2 de-interleaved into two
// contiguous phases first). Average pooling copies each input plane into
// per-thread scratch with zero padding (large enough for ceil-mode
// overhang), then runs branch-free window loops whose inner loop over
// output columns vectorises; its divisor is separable (taps counted per
// dimension), so Prepare tabulates 1/divisor per output row and column.
#include <algorithm>
#include <cstring>
#include <limits>

#include <omp.h>

#include "daemon/runtime/kernels/isa.h"
#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/microkernels.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"

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
    std::vector<WindowSpan> rows, cols;
    std::vector<WindowSpan>* spans[2] = {&rows, &cols};
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
    kh_ = kernel[0], kw_ = kernel[1];
    sh_ = strides[0], sw_ = strides[1];
    dh_ = dilations[0], dw_ = dilations[1];
    pt_ = pads[0], pl_ = pads[1];
    padded_h_ = std::max(h_ + pads[0] + pads[2], (oh_ - 1) * sh_ + (kh_ - 1) * dh_ + 1);
    padded_w_ = std::max(w_ + pads[1] + pads[3], (ow_ - 1) * sw_ + (kw_ - 1) * dw_ + 1);
    threads_ = std::max(1, ctx.threads);
    microkernels_ = &MicrokernelsFor(ActiveIsa());
    inv_row_.resize(oh_);
    inv_col_.resize(ow_);
    for (int64_t o = 0; o < oh_; ++o) inv_row_[o] = rows[o].divisor > 0 ? 1.f / rows[o].divisor : 0.f;
    for (int64_t o = 0; o < ow_; ++o) inv_col_[o] = cols[o].divisor > 0 ? 1.f / cols[o].divisor : 0.f;
    return CheckOutputShape(ctx, 0, {n_, c_, oh_, ow_});
  }

  size_t ScratchBytes() const override { return static_cast<size_t>(threads_ * PerThreadFloats()) * sizeof(float); }

  void Eval(const EvalContext& ctx) const override {
    const float* x = ctx.inputs[0];
    float* y = ctx.outputs[0];
    const int64_t planes = n_ * c_;
    const int threads = std::max(1, std::min(ctx.threads, threads_));
    ParallelForBalanced(planes, threads, [&](int64_t p) {
      float* padded = ctx.scratch + static_cast<int64_t>(omp_get_thread_num()) * PerThreadFloats();
      if (is_max_) return MaxPlane(x + p * h_ * w_, padded, y + p * oh_ * ow_);
      PadPlane(x + p * h_ * w_, padded);
      PoolPlane(padded, y + p * oh_ * ow_);
    });
  }

 private:
  // Average pooling: the padded plane. Max pooling: three padded rows,
  // the window rows' maximum and its two column phases.
  int64_t PerThreadFloats() const { return is_max_ ? 3 * padded_w_ : padded_h_ * padded_w_; }

  // Max pooling of one input plane x through the row buffer `rows`
  // (3 · padded_w_ floats), reading the window's input rows in place: no
  // padded copy of the plane. Results are identical to the window loop
  // (max is exact in any order). squeezenet1_0's three 3×3/2 pools, one
  // thread, AVX2 EPYC: 3.6–4.0 ms as strided window loops, 1.6–1.8 ms so.
  // The passes are the level's max_of (microkernels.h): this file is built
  // for the baseline ISA, whose loops ran 4 lanes wide (AVX-512 EPYC: 0.67
  // ms for the three pools against onnxruntime's ~0.2). A 3-wide window at
  // stride 2 (those pools) takes its column pass from max3_stride2 in one
  // register pass, no deinterleave.
  void MaxPlane(const float* x, float* rows, float* y) const {
    constexpr float kLowest = -std::numeric_limits<float>::infinity();
    float* vm = rows;
    float* even = rows + padded_w_;
    float* odd = even + padded_w_;
    const int64_t width = padded_w_;
    std::fill(vm, vm + pl_, kLowest);  // padding and ceil-mode overhang stay -inf
    std::fill(vm + pl_ + w_, vm + width, kLowest);
    const auto max_of = microkernels_->max_of;
    for (int64_t oh = 0; oh < oh_; ++oh) {
      // vm[pl_ + c] = max over the window's rows inside the input of x[r][c]:
      // the first two rows in one pass, then one more row a pass.
      const float* first = nullptr;
      int64_t inside = 0;
      for (int64_t i = 0; i < kh_; ++i) {
        const int64_t r = oh * sh_ - pt_ + i * dh_;
        if (r < 0 || r >= h_) continue;
        const float* src = x + r * w_;
        float* dst = vm + pl_;
        if (inside++ == 0) {
          first = src;
          continue;
        }
        max_of(dst, inside == 2 ? first : dst, src, w_);
      }
      if (inside == 0) std::fill(vm + pl_, vm + pl_ + w_, kLowest);
      if (inside == 1) std::memcpy(vm + pl_, first, sizeof(float) * w_);
      float* yr = y + oh * ow_;
      const int64_t n = ow_;
      if (sw_ == 2 && dw_ == 1 && kw_ == 3) {  // the common 3x3/2 pool: one pass in registers
        microkernels_->max3_stride2(vm, n, yr);
        continue;
      }
      if (sw_ == 2 && dw_ == 1) {  // tap j reads phase j % 2 at ow + j / 2
        microkernels_->deinterleave(vm, width, even, odd);
        if (kw_ == 1) std::memcpy(yr, even, sizeof(float) * n);
        for (int64_t j = 1; j < kw_; ++j) max_of(yr, j == 1 ? even : yr, (j % 2 == 0 ? even : odd) + j / 2, n);
        continue;
      }
      for (int64_t ow = 0; ow < n; ++ow) yr[ow] = vm[ow * sw_];
      for (int64_t j = 1; j < kw_; ++j) {
        const float* src = vm + j * dw_;
        for (int64_t ow = 0; ow < n; ++ow) yr[ow] = std::max(yr[ow], src[ow * sw_]);
      }
    }
  }

  // Copies one input plane into `padded` with zeros around it, so the
  // average's windows need no bounds checks.
  void PadPlane(const float* x, float* padded) const {
    const float fill = 0.f;
    std::fill(padded, padded + pt_ * padded_w_, fill);
    for (int64_t r = 0; r < h_; ++r) {
      float* row = padded + (pt_ + r) * padded_w_;
      std::fill(row, row + pl_, fill);
      std::memcpy(row + pl_, x + r * w_, sizeof(float) * w_);
      std::fill(row + pl_ + w_, row + padded_w_, fill);
    }
    std::fill(padded + (pt_ + h_) * padded_w_, padded + padded_h_ * padded_w_, fill);
  }

  // One output plane of average pooling: taps outer, output columns inner
  // (vectorised).
  void PoolPlane(const float* padded, float* y) const {
    const int64_t sw = sw_, n = ow_;
    for (int64_t oh = 0; oh < oh_; ++oh) {
      float* yr = y + oh * ow_;
      const float* base = padded + oh * sh_ * padded_w_;
      if (n == 1) {  // one window across (a classifier's pool over the whole plane): one sum, same order
        float acc = 0.f;
        for (int64_t i = 0; i < kh_; ++i) {
          const float* row = base + i * dh_ * padded_w_;
          for (int64_t j = 0; j < kw_; ++j) acc += row[j * dw_];
        }
        yr[0] = acc * (inv_row_[oh] * inv_col_[0]);
        continue;
      }
      for (int64_t ow = 0; ow < n; ++ow) yr[ow] = 0.f;
      for (int64_t i = 0; i < kh_; ++i) {
        for (int64_t j = 0; j < kw_; ++j) {
          const float* src = base + i * dh_ * padded_w_ + j * dw_;
#pragma omp simd
          for (int64_t ow = 0; ow < n; ++ow) yr[ow] += src[ow * sw];
        }
      }
      const float row_scale = inv_row_[oh];
      const float* col_scale = inv_col_.data();
#pragma omp simd
      for (int64_t ow = 0; ow < n; ++ow) yr[ow] *= row_scale * col_scale[ow];
    }
  }

  const bool is_max_;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;
  int64_t kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, dh_ = 1, dw_ = 1, pt_ = 0, pl_ = 0;
  int64_t padded_h_ = 0, padded_w_ = 0;  // covers every window, ceil-mode overhang included
  int threads_ = 1;
  const Microkernels* microkernels_ = nullptr;
  // Average pooling: 1/divisor factors per output row and column (the
  // divisor is separable: taps counted per dimension).
  std::vector<float> inv_row_, inv_col_;
};

}  // namespace

std::unique_ptr<Kernel> MakeMaxPoolKernel() { return std::make_unique<PoolKernel>(true); }
std::unique_ptr<Kernel> MakeAveragePoolKernel() { return std::make_unique<PoolKernel>(false); }

}  // namespace tessera
