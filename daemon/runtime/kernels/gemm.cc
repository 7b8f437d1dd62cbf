// Gemm, canonical form (graph.h): Y[N, out] = X[N, in] · W[out, in]ᵀ + B,
// then the fused activation. Importers fold ONNX alpha/beta/transA/transB
// away; if a graph still carries them they keep their ONNX meaning (transB
// absent means the canonical [out, in] layout).
#include <algorithm>

#include <Eigen/Core>

#include "daemon/runtime/kernels/conv_int8.h"
#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/microkernels.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"
#include "partition/graph/int8_weights.h"

namespace tessera {
namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

class GemmKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 2, 3));
    const auto& a = ctx.node.attrs;
    // flatten_input=1 (graph.h): X [N, C, H, W] is read as [N, C·H·W] —
    // row-major, so the same memory serves without a copy.
    const bool flatten = a.Int("flatten_input", 0) != 0;
    if (!flatten) TS_RETURN_IF_ERROR(CheckRank(ctx, 0, 2));
    TS_RETURN_IF_ERROR(CheckRank(ctx, 1, 2));
    if (a.Int("transA", 0) != 0) return NodeNotSupported(ctx, "transA=1 (the importer should fold it)");
    alpha_ = static_cast<float>(a.Float("alpha", 1.0));
    beta_ = static_cast<float>(a.Float("beta", 1.0));
    w_transposed_ = a.Int("transB", 1) != 0;  // canonical: W is [out, in]
    Shape x = ctx.input_shapes[0];
    if (flatten && !x.empty()) x = {x[0], NumElements(x) / std::max<int64_t>(1, x[0])};
    if (x.size() != 2) return NodeInvalid(ctx, "input must have rank 2, has shape " + ShapeToString(x));
    const Shape& w = ctx.input_shapes[1];
    rows_ = x[0];
    in_ = x[1];
    out_ = w_transposed_ ? w[0] : w[1];
    const int64_t w_in = w_transposed_ ? w[1] : w[0];
    if (w_in != in_)
      return NodeInvalid(ctx, "weight shape " + ShapeToString(w) + " does not fit input " + ShapeToString(x));
    bias_ = kNoBias;
    if (HasInput(ctx, 2)) {
      const int64_t nb = NumElements(ctx.input_shapes[2]);
      const Shape& b = ctx.input_shapes[2];
      if (nb == 1) {
        bias_ = kScalarBias;
      } else if (nb == out_ && (b.size() == 1 || (b.size() == 2 && b[0] == 1))) {
        bias_ = kRowBias;
      } else if (b == Shape{rows_, out_}) {
        bias_ = kFullBias;
      } else if (b == Shape{rows_, 1}) {
        bias_ = kColumnBias;
      } else {
        return NodeInvalid(ctx, "bias shape " + ShapeToString(b) + " does not broadcast to [" +
                                    std::to_string(rows_) + "," + std::to_string(out_) + "]");
      }
    }
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, {rows_, out_}));
    auto act = FusedActivation::FromAttributes(a);
    if (!act.ok()) return NodeNotSupported(ctx, act.status().message());
    act_ = *act;
    dot_rows_ = MicrokernelsFor(ActiveIsa()).dot_rows;
    // On an 8-bit grid's codes with int8 weights: the integer conv's path
    // (conv_int8.h), as a 1x1 conv of one pixel per input row.
    int8_.reset();
    const bool partial_sum = a.Int("integer_partial", 0) != 0;
    const auto grid = partial_sum ? ConvInputByteGrid(ctx.graph, ctx.node) : IntegerConvInputGrid(ctx.graph, ctx.node);
    const bool canonical = w_transposed_ && alpha_ == 1.f && beta_ == 1.f && (bias_ == kNoBias || bias_ == kRowBias) &&
                           ConstantOrNull(ctx, 1) != nullptr;
    if (partial_sum && (!grid || !canonical))
      return NodeInvalid(ctx,
                         "an integer partial sum needs constant [out, in] weights, no scaling and an input on an "
                         "8-bit grid");
    if (grid && canonical && (partial_sum || a.Int("integer_conv", 1) != 0)) {
      auto path = std::make_unique<Int8Conv>();
      const ConvGeometry geometry{rows_, in_, 1, 1, out_, 1, in_, out_, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
      TS_ASSIGN_OR_RETURN(const bool exact, path->Prepare(ctx, geometry, *grid, act_));
      if (exact) int8_ = std::move(path);
    }
    return Status::OK();
  }

  size_t ScratchBytes() const override { return int8_ ? int8_->ScratchBytes() : 0; }
  bool ReadsConstantInEval(int input) const override { return input != 1 || !int8_; }
  size_t OwnedWeightBytes() const override { return int8_ ? int8_->OwnedWeightBytes() : 0; }
  size_t PrepareTransientBytes() const override { return int8_ ? int8_->PrepareTransientBytes() : 0; }

  void Eval(const EvalContext& ctx) const override {
    if (int8_) {
      int8_->Eval(ctx);
      return;
    }
    Eigen::Map<const RowMajorMatrix> x(ctx.inputs[0], rows_, in_);
    Eigen::Map<RowMajorMatrix> y(ctx.outputs[0], rows_, out_);
    if (w_transposed_ && rows_ <= kMaxDotRows) {
      // A classifier on a batch of one: each weight row is used once per
      // input row, so the CPU's dot-product microkernel reads it in place
      // (Eigen's GEMV runs at the build's baseline ISA).
      constexpr int64_t kChunk = 64;  // output rows per work item
      const int64_t chunks = (out_ + kChunk - 1) / kChunk;
      const bool parallel = ctx.threads > 1 && out_ * in_ >= (1 << 16);
      for (int64_t r = 0; r < rows_; ++r)
        ParallelFor(chunks, parallel ? ctx.threads : 1, [&](int64_t c) {
          DotRowsArgs d;
          d.a = ctx.inputs[1] + c * kChunk * in_;
          d.lda = in_;
          d.x = ctx.inputs[0] + r * in_;
          d.k = in_;
          d.m = std::min(kChunk, out_ - c * kChunk);
          d.y = ctx.outputs[0] + r * out_ + c * kChunk;
          dot_rows_(d);
        });
    } else if (w_transposed_) {
      Eigen::Map<const RowMajorMatrix> w(ctx.inputs[1], out_, in_);
      y.noalias() = x * w.transpose();
    } else {
      Eigen::Map<const RowMajorMatrix> w(ctx.inputs[1], in_, out_);
      y.noalias() = x * w;
    }
    if (alpha_ != 1.f) y *= alpha_;
    const float* b = bias_ != kNoBias ? ctx.inputs[2] : nullptr;
    for (int64_t r = 0; r < rows_; ++r) {
      float* row = ctx.outputs[0] + r * out_;
      switch (bias_) {
        case kNoBias:
          break;
        case kScalarBias:
          for (int64_t o = 0; o < out_; ++o) row[o] += beta_ * b[0];
          break;
        case kRowBias:
#pragma omp simd
          for (int64_t o = 0; o < out_; ++o) row[o] += beta_ * b[o];
          break;
        case kColumnBias:
          for (int64_t o = 0; o < out_; ++o) row[o] += beta_ * b[r];
          break;
        case kFullBias:
          for (int64_t o = 0; o < out_; ++o) row[o] += beta_ * b[r * out_ + o];
          break;
      }
      act_.Apply(row, static_cast<size_t>(out_));
    }
  }

 private:
  enum BiasForm { kNoBias, kScalarBias, kRowBias, kColumnBias, kFullBias };
  static constexpr int64_t kMaxDotRows = 4;  // input rows up to which Eval uses dot_rows_
  int64_t rows_ = 0, in_ = 0, out_ = 0;
  bool w_transposed_ = true;
  float alpha_ = 1.f, beta_ = 1.f;
  BiasForm bias_ = kNoBias;
  FusedActivation act_;
  void (*dot_rows_)(const DotRowsArgs&) = nullptr;
  std::unique_ptr<Int8Conv> int8_;  // the integer path, when Prepare chose it
};

}  // namespace

std::unique_ptr<Kernel> MakeGemmKernel() { return std::make_unique<GemmKernel>(); }

}  // namespace tessera
