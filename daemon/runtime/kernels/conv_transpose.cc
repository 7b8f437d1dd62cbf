// ConvTranspose (2-D, NCHW; ONNX ConvTranspose, graph.h): the gradient of a
// Conv with respect to its input. X [N, C, H, W], W [C, M/group, kH, kW],
// optional bias B [M]. Every input pixel (ih, iw) of channel c scatters
//   W[c, m, kh, kw] · x[c, ih, iw]  to  y[m, ih·sh − pt + kh·dh, iw·sw − pl + kw·dw]
// (m in c's group); positions outside the output are dropped. The output
// size is the graph's: sh·(H − 1) + op_h + (kH − 1)·dh + 1 − pt − pb (ONNX's
// formula with output_padding op; the importer resolves output_shape and
// auto_pad into explicit pads).
//
// Evaluation per group g: the GEMM
//   col[(M/g)·kH·kW, H·W] = Wᵀ_g[(M/g)·kH·kW, C/g] · X_g[C/g, H·W]
// on the packed GEMM (Wᵀ_g packed once in Prepare), in column tiles of H·W
// so the col scratch stays small, then col2im adds each col row into its
// output positions. The output starts as the bias; a fused activation
// (graph.h), if any, is applied at the end.
#include <algorithm>
#include <cstring>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/packed_gemm.h"
#include "daemon/runtime/kernels/weight_forms.h"

namespace tessera {
namespace {

// Columns of one col tile: keeps the col scratch near 1 MiB.
constexpr int64_t kColTileFloats = 1 << 18;

class ConvTransposeKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 2, 3));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 0, 4));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 1, 4));
    const Shape& x = ctx.input_shapes[0];
    const Shape& w = ctx.input_shapes[1];
    const Shape& y = ctx.output_shapes[0];
    const auto& a = ctx.node.attrs;
    n_ = x[0], c_ = x[1], h_ = x[2], w_ = x[3];
    group_ = a.Int("group", 1);
    if (group_ < 1 || c_ % group_ != 0) return NodeInvalid(ctx, "group must divide the input channels");
    if (w[0] != c_)
      return NodeInvalid(ctx, "weight shape " + ShapeToString(w) + " needs " + std::to_string(c_) +
                                  " rows (one per input channel of " + ShapeToString(x) + ")");
    cg_ = c_ / group_;
    mg_ = w[1];
    m_ = mg_ * group_;
    kh_ = w[2], kw_ = w[3];
    const auto kernel_shape = a.Ints("kernel_shape", {kh_, kw_});
    if (kernel_shape != std::vector<int64_t>{kh_, kw_})
      return NodeInvalid(ctx, "kernel_shape does not match weight shape " + ShapeToString(w));
    const auto strides = a.Ints("strides", {1, 1});
    const auto dilations = a.Ints("dilations", {1, 1});
    const auto pads = a.Ints("pads", {0, 0, 0, 0});
    const auto output_padding = a.Ints("output_padding", {0, 0});
    if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4 || output_padding.size() != 2)
      return NodeNotSupported(ctx, "only 2-D ConvTranspose (strides/dilations/output_padding 2 values, pads 4)");
    sh_ = strides[0], sw_ = strides[1], dh_ = dilations[0], dw_ = dilations[1];
    pt_ = pads[0], pl_ = pads[1];
    if (sh_ < 1 || sw_ < 1 || dh_ < 1 || dw_ < 1) return NodeInvalid(ctx, "strides and dilations must be >= 1");
    const int64_t oh = sh_ * (h_ - 1) + output_padding[0] + (kh_ - 1) * dh_ + 1 - pads[0] - pads[2];
    const int64_t ow = sw_ * (w_ - 1) + output_padding[1] + (kw_ - 1) * dw_ + 1 - pads[1] - pads[3];
    if (oh <= 0 || ow <= 0) return NodeInvalid(ctx, "pads leave an empty output");
    oh_ = oh, ow_ = ow;
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, Shape{n_, m_, oh_, ow_}));
    (void)y;
    if (HasInput(ctx, 2)) {
      TS_ASSIGN_OR_RETURN(const TensorData* b, RequireConstant(ctx, 2, "bias"));
      if (NumElements(b->shape) != m_)
        return NodeInvalid(ctx, "bias has " + std::to_string(NumElements(b->shape)) + " values for " +
                                    std::to_string(m_) + " output channels");
      if (!ctx.shapes_only) bias_.assign(b->values.begin(), b->values.end());
    } else {
      bias_.assign(static_cast<size_t>(m_), 0.f);
    }
    TS_ASSIGN_OR_RETURN(act_, FusedActivation::FromAttributes(a));
    const int64_t rows = mg_ * kh_ * kw_;
    plane_ = h_ * w_;
    tile_ = std::clamp<int64_t>(kColTileFloats / std::max<int64_t>(rows, 1), 1, plane_);
    TS_ASSIGN_OR_RETURN(const TensorData* weights, RequireConstant(ctx, 1, "weights"));
    // Wᵀ packed per group, shared with the kernels of the program that read
    // the same weight (weight_forms.h: the tiles of an FFMT stack).
    bool made = false;
    packed_ = WeightForms::Share<std::vector<PackedMatrix>>(
        ctx, 1, "conv-transpose|g" + std::to_string(group_),
        [&] {
          auto packed = std::make_shared<std::vector<PackedMatrix>>();
          PackWeights(weights->values.data(), packed.get());
          return packed;
        },
        &made);
    packed_bytes_ = made ? static_cast<size_t>(group_) * PackedMatrix::BytesFor(rows, cg_) : 0;
    return Status::OK();
  }

  size_t ScratchBytes() const override { return static_cast<size_t>(mg_ * kh_ * kw_ * tile_) * sizeof(float); }
  bool ReadsConstantInEval(int input) const override { return input != 1 && input != 2; }
  // The bias copy, and the packed weights when this kernel made them.
  size_t OwnedWeightBytes() const override { return packed_bytes_ + static_cast<size_t>(m_) * sizeof(float); }
  size_t PrepareTransientBytes() const override {
    return packed_bytes_ ? static_cast<size_t>(mg_ * kh_ * kw_ * cg_) * sizeof(float) : 0;
  }

  void Eval(const EvalContext& ctx) const override {
    const int64_t rows = mg_ * kh_ * kw_;
    const int64_t out_plane = oh_ * ow_;
    float* col = ctx.scratch;
    const FusedActivation none;
    for (int64_t b = 0; b < n_; ++b) {
      float* yb = ctx.outputs[0] + b * m_ * out_plane;
      for (int64_t m = 0; m < m_; ++m) std::fill(yb + m * out_plane, yb + (m + 1) * out_plane, bias_[m]);
      for (int64_t g = 0; g < group_; ++g) {
        const float* xg = ctx.inputs[0] + (b * c_ + g * cg_) * plane_;
        float* yg = yb + g * mg_ * out_plane;
        for (int64_t p0 = 0; p0 < plane_; p0 += tile_) {
          const int64_t len = std::min(tile_, plane_ - p0);
          PackedGemm((*packed_)[g], xg + p0, plane_, len, col, len, nullptr, none, ctx.threads);
          ScatterColumns(col, rows, p0, len, yg);
        }
      }
      act_.Apply(yb, static_cast<size_t>(m_ * out_plane));
    }
  }

 private:
  // Packs Wᵀ per group: A_g[(m, kh, kw), c'] = W[g·C/g + c', m, kh, kw].
  void PackWeights(const float* w, std::vector<PackedMatrix>* packed) const {
    const int64_t rows = mg_ * kh_ * kw_;
    std::vector<float> transposed(static_cast<size_t>(rows * cg_));
    packed->assign(static_cast<size_t>(group_), PackedMatrix());
    for (int64_t g = 0; g < group_; ++g) {
      for (int64_t c = 0; c < cg_; ++c) {
        const float* src = w + (g * cg_ + c) * rows;  // W[c] is [M/g, kH, kW] = `rows` values
        for (int64_t r = 0; r < rows; ++r) transposed[static_cast<size_t>(r * cg_ + c)] = src[r];
      }
      (*packed)[g].Pack(transposed.data(), rows, cg_, cg_);
    }
  }

  // col2im: col row (m, kh, kw), column j (input pixel p0 + j) adds into
  // y[m, ih·sh − pt + kh·dh, iw·sw − pl + kw·dw] when that lies inside.
  void ScatterColumns(const float* col, int64_t rows, int64_t p0, int64_t len, float* y) const {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t m = r / (kh_ * kw_), kh = (r / kw_) % kh_, kw = r % kw_;
      const float* src = col + r * len;
      float* ym = y + m * oh_ * ow_;
      int64_t ih = p0 / w_, iw = p0 % w_;
      for (int64_t j = 0; j < len; ++j) {
        const int64_t oy = ih * sh_ - pt_ + kh * dh_, ox = iw * sw_ - pl_ + kw * dw_;
        if (oy >= 0 && oy < oh_ && ox >= 0 && ox < ow_) ym[oy * ow_ + ox] += src[j];
        if (++iw == w_) iw = 0, ++ih;
      }
    }
  }

  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, m_ = 0, mg_ = 0, cg_ = 0, group_ = 1;
  int64_t kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, dh_ = 1, dw_ = 1, pt_ = 0, pl_ = 0, oh_ = 0, ow_ = 0;
  int64_t plane_ = 0, tile_ = 1;
  size_t packed_bytes_ = 0;  // packed_'s bytes when this kernel made it, else 0
  std::shared_ptr<const std::vector<PackedMatrix>> packed_;
  std::vector<float> bias_;
  FusedActivation act_;
};

}  // namespace

std::unique_ptr<Kernel> MakeConvTransposeKernel() { return std::make_unique<ConvTransposeKernel>(); }

}  // namespace tessera
