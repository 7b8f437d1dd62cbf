// Conv (2-D, NCHW): ONNX Conv with groups, strides, dilations and asymmetric
// pads, optional bias, and the producer's fused activation (graph.h).
//
// Three evaluation strategies, picked in Prepare:
//  * pointwise — 1x1 kernel, stride 1, no pad: the input plane already is the
//    GEMM operand, so Y_g[O/g, HW] = W_g[O/g, C/g] · X_g[C/g, HW] directly.
//  * depthwise — one input channel per group: the input plane is copied with
//    zero borders into per-thread scratch (polyphase, below), then 3x3 and
//    5x5 kernels at stride 1 or 2 run the row-blocked microkernel straight
//    into the output (a few output rows share each input load), any other
//    one a flat tap loop over the whole plane; a GEMM of K = kH·kW would
//    waste the packing.
//  * general — im2col of one group into scratch, then one Eigen GEMM
//    Y_g[O/g, OH·OW] = W_g[O/g, C/g·kH·kW] · col[C/g·kH·kW, OH·OW].
//    With constant weights on a K-blocked ISA level, and when its scratch is
//    at most twice the im2col tile's, the im2col matrix is implicit instead
//    ("indirect"): the group's input planes are copied once into the
//    polyphase layout of the depthwise path, where row (c, i, j) of the
//    im2col matrix over the flat output (OH rows of the sub-plane width,
//    junk columns included) is the plane shifted by a constant offset. The
//    GEMM reads B through those offsets (GemmPanelArgs::b_rows) into its
//    packed blocks, a tile of flat columns at a time, and the valid columns
//    are copied out. No im2col pass, and a grouped conv's small groups no
//    longer pay for one (resnext50's 3×3/g32 convs).
// The GEMM paths run in column tiles of OH·OW sized to stay in L2 (im2col
// tile, output tile); bias and activation are applied to each output tile
// right after its GEMM, while it is still in cache. With several threads the
// tiles are spread over threads.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <Eigen/Core>
#include <omp.h>

#include "daemon/runtime/kernels/conv_int8.h"
#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/microkernels.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/packed_gemm.h"
#include "daemon/runtime/kernels/parallel_for.h"
#include "daemon/runtime/kernels/weight_forms.h"
#include "partition/graph/int8_weights.h"

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
    pb_ = pads[2], pr_ = pads[3];
    const int64_t pb = pb_, pr = pr_;
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
    act_in_epilogue_ = EpilogueFor(act_, &epilogue_);

    prepared_threads_ = std::max(1, ctx.threads);
    microkernels_ = &MicrokernelsFor(ActiveIsa());
    // On an 8-bit grid's codes with int8 weights: the integer path
    // (conv_int8.h), unless a test asks for the float one.
    int8_.reset();
    in_place_ = kNoInPlace;
    // An FDTI slice of such a conv (attr integer_partial) always is: its
    // merge adds int32 sums, whatever the slice's own weight shape.
    const bool partial_sum = a.Int("integer_partial", 0) != 0;
    const auto grid = partial_sum ? ConvInputByteGrid(ctx.graph, ctx.node) : IntegerConvInputGrid(ctx.graph, ctx.node);
    if (partial_sum && (!grid || ConstantOrNull(ctx, 1) == nullptr))
      return NodeInvalid(ctx, "an integer partial sum needs constant weights and an input on an 8-bit grid");
    if (grid && (partial_sum || a.Int("integer_conv", 1) != 0)) {
      auto path = std::make_unique<Int8Conv>();
      const ConvGeometry geometry{n_,  c_,  h_,  w_,  o_,  group_, cg_, og_, kh_,
                                  kw_, sh_, sw_, dh_, dw_, pt_,    pl_, oh_, ow_};
      TS_ASSIGN_OR_RETURN(const bool exact, path->Prepare(ctx, geometry, *grid, act_));
      if (exact) {
        int8_ = std::move(path);
        return Status::OK();
      }
    }
    wino_min_channels_ = a.Int("winograd_min_channels", 16);
    indirect_allowed_ = a.Int("indirect_im2col", 1) != 0;  // tests compare both general paths
    // A device short of RAM keeps weights at their raw size (graph.h).
    const bool compact_weights = a.Int("compact_weights", 0) != 0;
    tile_ = TileColumns(cg_ * kh_ * kw_, og_, oh_ * ow_);
    dw_rows_ = dw_channels_ = grouped_lanes_eligible_ = grouped_lanes_ = false;
    if (cg_ == 1 && group_ > 1) {
      strategy_ = kDepthwise;
      PrepareDepthwise();
      // The row-blocked microkernel's shapes (DepthwiseRowsArgs): the
      // output rows straight from the polyphase plane, no flat buffer.
      const bool square =
          kh_ == kw_ && (kh_ == 3 || kh_ == 5) && sh_ == sw_ && (sh_ == 1 || sh_ == 2) && dh_ == 1 && dw_ == 1;
      dw_rows_ = square && a.Int("depthwise_rows", 1) != 0;
      // Channels in the lanes (DepthwiseChannelsArgs) when there is no
      // channel multiplier, in bands of output rows whose scratch stays in
      // the core's L2 (kDepthwiseBandBytes) and within an eighth of the
      // input (or the plane-at-a-time path's scratch, if larger): a small
      // model on a small device keeps its arena. mobilenet_v2 (AVX-512
      // EPYC, one thread): the 7x7 960-channel layers 0.060 -> 0.035 ms,
      // the 56x56 144-channel one 0.259 -> 0.207 ms.
      if (square && og_ == 1 && microkernels_->depthwise_channels != nullptr && a.Int("depthwise_channels", 1) != 0) {
        const int64_t input_bytes = n_ * c_ * h_ * w_ * static_cast<int64_t>(sizeof(float));
        const int64_t budget = std::min<int64_t>(kDepthwiseBandBytes, input_bytes / 8);
        const int64_t band =
            DepthwiseChannelsBandRows(budget, w_, pl_, oh_, ow_, static_cast<int>(kh_), static_cast<int>(sh_));
        const DepthwiseChannelsShape shape = DepthwiseChannelsShapeFor(
            kDepthwiseMaxLanes, w_, pl_, ow_, static_cast<int>(kh_), static_cast<int>(sh_), band);
        const int64_t plane_path = sh_ * sw_ * dw_sub_size_ + dw_flat_size_;
        dw_channels_ = shape.total_floats * static_cast<int64_t>(sizeof(float)) <=
                       std::max(budget, plane_path * static_cast<int64_t>(sizeof(float)));
        if (dw_channels_) dw_channel_shape_ = shape;
      }
    } else if (kh_ == 1 && kw_ == 1 && sh_ == 1 && sw_ == 1 && pt_ == 0 && pl_ == 0 && pb == 0 && pr == 0) {
      strategy_ = kPointwise;
      tile_ = ThreadTileColumns(tile_, oh_ * ow_, prepared_threads_);
    } else if (!compact_weights && kh_ == 3 && kw_ == 3 && sh_ == 1 && sw_ == 1 && dh_ == 1 && dw_ == 1 &&
               group_ == 1 && c_ >= wino_min_channels_ && o_ >= wino_min_channels_ && oh_ * ow_ >= 64 &&
               ConstantOrNull(ctx, 1) != nullptr) {
      // First measured against Eigen's im2col, Winograd won only from ~128
      // channels. Against today's packed and indirect im2col GEMMs it wins
      // from 16 (AVX-512 EPYC, one thread): resnet18's 64-channel layer1
      // convs 1.04 -> 0.65 ms each, squeezenet1_0 (16-64 input channels)
      // 7.5 -> 6.6 ms in all; threshold 16/32/48/64/96: squeezenet 6.61/
      // 6.75/7.26/7.57/7.51 ms, resnet18 15.5/15.3/15.9/15.8/16.3 ms.
      strategy_ = kWinograd;
      WinogradGeometry();
    } else {
      strategy_ = kIm2col;
      // A group of 16 or 32 output channels on a small plane: the output
      // channels in the lanes (GroupedLanesArgs) when the level has it,
      // else the GEMM; the scratch covers both (shapes only).
      grouped_lanes_eligible_ = group_ > 1 && cg_ > 1 && og_ % 16 == 0 && og_ <= 32 && dh_ == 1 && dw_ == 1 &&
                                sh_ == sw_ && oh_ * ow_ <= 1024 && a.Int("grouped_lanes", 1) != 0;
      if (grouped_lanes_eligible_)
        grouped_shape_ = GroupedLanesShapeFor(cg_, og_, h_, w_, pt_, pl_, oh_, ow_, static_cast<int>(kh_),
                                              static_cast<int>(kw_), static_cast<int>(sh_));
      col_lo_.resize(kw_);
      col_hi_.resize(kw_);
      for (int64_t j = 0; j < kw_; ++j) ValidRange(j * dw_ - pl_, sw_, w_, ow_, &col_lo_[j], &col_hi_[j]);
    }
    // Segments (METHODS §6): with batch 1 the output may overwrite its input.
    //  * pointwise (group 1, constant weights): Y[O, HW] = W · X[C, HW] a
    //    block of pixel columns at a time; out[o, p] lands on in[o, p] of the
    //    same pixel only, so a block's min(C, O) rows go through scratch;
    //  * depthwise, one output per input channel: output plane c lands on
    //    input planes <= c, and plane c is already copied into the
    //    polyphase scratch. A smaller output plane (stride 2) also lands on
    //    earlier planes, which only a single worker taking planes in order
    //    has consumed: then only when prepared for one thread.
    in_place_ = kNoInPlace;
    if (n_ == 1 && strategy_ == kPointwise && group_ == 1 && ConstantOrNull(ctx, 1) != nullptr) {
      in_place_ = kPointwiseInPlace;
    } else if (strategy_ == kDepthwise && og_ == 1 &&
               (oh_ * ow_ == h_ * w_ || (oh_ * ow_ < h_ * w_ && prepared_threads_ == 1))) {
      in_place_ = kDepthwiseInPlace;
    }
    packed_.reset();
    indirect_ = indirect_eligible_ = false;
    repacks_weights_ = false;
    owned_bytes_ = 0;
    made_form_ = false;
    streamed_weights_ = ctx.streamed_inputs.size() > 1 && ctx.streamed_inputs[1];
    // Depthwise reads the weights as they are in Eval: a streamed weight is
    // read whole (ReadsConstantInEval says so).
    if (strategy_ == kDepthwise) return MaterializeConstant(ctx, 1);
    if (ConstantOrNull(ctx, 1) == nullptr) return Status::OK();
    // Constant weights: packed once for PackedGemm (one matrix per group), or
    // Winograd-transformed and packed per position ξ; the form is shared
    // with every kernel of the program that reads the same weight the same
    // way (weight_forms.h), e.g. the other tiles of an FFMT stack.
    repacks_weights_ = true;
    const int64_t k = cg_ * kh_ * kw_;
    const std::string form = strategy_ == kWinograd ? "conv-winograd"
                                                    : "conv-gemm|g" + std::to_string(group_) + "|m" +
                                                          std::to_string(og_) + "|k" + std::to_string(k);
    Status read;
    packed_ = WeightForms::Share<std::vector<PackedMatrix>>(
        ctx, 1, form,
        [&] {
          auto made = std::make_shared<std::vector<PackedMatrix>>();
          read = strategy_ == kWinograd ? PrepareWinograd(ctx, made.get()) : PackGemmWeights(ctx, k, made.get());
          return made;
        },
        &made_form_);
    TS_RETURN_IF_ERROR(read);
    ChooseIndirect();
    grouped_lanes_ = grouped_lanes_eligible_ && microkernels_->grouped_lanes != nullptr;
    if (made_form_)
      owned_bytes_ = strategy_ == kWinograd ? 16 * PackedMatrix::BytesFor(o_, c_)
                                            : static_cast<size_t>(group_) * PackedMatrix::BytesFor(og_, k);
    return Status::OK();
  }

  size_t ScratchBytes() const override {
    if (int8_) return int8_->ScratchBytes();
    if (strategy_ == kWinograd)  // each thread's padded rows of one channel, then V and M of one chunk per band
      return static_cast<size_t>(prepared_threads_ * WinogradPadFloats() +
                                 wino_workers_ * 16 * (c_ + o_) * wino_chunk_) *
             sizeof(float);
    if (strategy_ == kDepthwise)  // polyphase input plane and flat output per thread
      return static_cast<size_t>(prepared_threads_ * DepthwiseScratchFloats()) * sizeof(float);
    if (strategy_ != kIm2col) return 0;
    // One im2col tile per thread, or the indirect path's (ChooseIndirect).
    int64_t floats =
        indirect_eligible_ ? std::max(IndirectScratchFloats(), Im2colScratchFloats()) : Im2colScratchFloats();
    if (grouped_lanes_eligible_) floats = std::max(floats, prepared_threads_ * grouped_shape_.total_floats);
    return static_cast<size_t>(floats) * sizeof(float);
  }

  int InPlaceInput() const override { return in_place_ == kNoInPlace ? -1 : 0; }
  size_t InPlaceScratchBytes() const override {
    if (in_place_ != kPointwiseInPlace) return ScratchBytes();
    return static_cast<size_t>(prepared_threads_ * std::min(c_, o_) * InPlaceColumns()) * sizeof(float);
  }

  // Packed (im2col, pointwise) and Winograd-transformed weights replace the
  // graph's: Eval reads them only on the unpacked and depthwise paths.
  bool ReadsConstantInEval(int input) const override { return input != 1 || (!repacks_weights_ && !int8_); }
  // The weights are packed a block of output channels at a time (a
  // streamed weight is read a block at a time into a staging block);
  // Winograd builds U = G g Gᵀ of one block at a time.
  size_t PrepareTransientBytes() const override {
    if (int8_) return int8_->PrepareTransientBytes();
    if (!made_form_ || strategy_ == kDepthwise) return 0;
    const int64_t row = strategy_ == kWinograd ? c_ * 9 : cg_ * kh_ * kw_;
    const int64_t rows = BlockRows();
    int64_t floats = streamed_weights_ ? rows * row : 0;
    if (strategy_ == kWinograd) floats += 16 * rows * c_;
    return static_cast<size_t>(floats) * sizeof(float);
  }
  // Output channels per block: a block's raw weights (and for Winograd its
  // 16 transformed planes, 16 values per 9) within kConstantBlockBytes, the
  // deploy's chunk: what loading holds beyond the forms so far.
  int64_t BlockRows() const {
    const int64_t row = strategy_ == kWinograd ? c_ * (9 + 16) : cg_ * kh_ * kw_;
    return std::min(ConstantBlockRows(row), o_);
  }
  bool StreamsConstant(int input) const override { return input == 1; }
  // Only the kernel that made a shared form counts it (weight_forms.h).
  size_t OwnedWeightBytes() const override { return int8_ ? int8_->OwnedWeightBytes() : owned_bytes_; }

  void Eval(const EvalContext& ctx) const override {
    if (int8_) {
      int8_->Eval(ctx);
      return;
    }
    switch (strategy_) {
      case kDepthwise:
        EvalDepthwise(ctx);
        return;
      case kPointwise:
        if (ctx.outputs[0] == ctx.inputs[0]) {
          EvalPointwiseInPlace(ctx);
          return;
        }
        EvalGemm(ctx);
        return;
      case kIm2col:
        if (grouped_lanes_ && packed_ != nullptr)
          EvalGroupedLanes(ctx);
        else if (indirect_)
          EvalIndirect(ctx);
        else
          EvalGemm(ctx);
        return;
      case kWinograd:
        EvalWinograd(ctx);
        return;
    }
  }

 private:
  enum Strategy { kIm2col, kPointwise, kDepthwise, kWinograd };

  // Winograd F(2x2, 3x3) (Lavin & Gray 2016) for 3x3 stride-1 dense convs:
  // each 2x2 output tile comes from a 4x4 input patch d as
  //   Y = Aᵀ [ Σ_c (G g_oc Gᵀ) ⊙ (Bᵀ d_c B) ] A,
  // i.e. 16 GEMMs M_ξ[O, tiles] = U_ξ[O, C] · V_ξ[C, tiles], one per position
  // ξ of the 4x4 transformed tile — 2.25x fewer multiplies than im2col.
  // U = G g Gᵀ is computed once here from the constant weights.
  // Built a block of output channels at a time (about kConstantBlockBytes
  // of raw weights), each block's rows of the 16 planes packed before the
  // next block is read: while loading, U is held for one block only, and a
  // streamed weight is never held whole (issue 11: the whole U of YOLOv2's
  // 1024x1024 3x3 conv was 64 MiB on top of its raw and packed forms). Same
  // arithmetic, element by element, as building U whole.
  Status PrepareWinograd(const KernelContext& ctx, std::vector<PackedMatrix>* wino_packed) {
    wino_packed->resize(16);
    for (PackedMatrix& m : *wino_packed) m.Reset(o_, c_);
    const int64_t block = BlockRows();
    std::vector<float> staging, u_block(static_cast<size_t>(16 * block * c_));
    for (int64_t o0 = 0; o0 < o_; o0 += block) {
      const int64_t rows = std::min(block, o_ - o0);
      TS_ASSIGN_OR_RETURN(const float* weights, ConstantRows(ctx, 1, o0, rows, c_ * 9, &staging));
      for (int i = 0; i < 4; ++i)
        for (int64_t o = 0; o < rows; ++o)
          for (int64_t c = 0; c < c_; ++c) {
            const float* g = weights + (o * c_ + c) * 9;
            float t[3];  // row i of G g
            for (int j = 0; j < 3; ++j) {
              switch (i) {
                case 0:
                  t[j] = g[j];
                  break;
                case 1:
                  t[j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
                  break;
                case 2:
                  t[j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
                  break;
                default:
                  t[j] = g[6 + j];
                  break;
              }
            }
            const float u[4] = {t[0], 0.5f * (t[0] + t[1] + t[2]), 0.5f * (t[0] - t[1] + t[2]), t[2]};
            for (int j = 0; j < 4; ++j) u_block[((i * 4 + j) * block + o) * c_ + c] = u[j];
          }
      for (int xi = 0; xi < 16; ++xi) (*wino_packed)[xi].PackRows(u_block.data() + xi * block * c_, o0, rows, c_);
    }
    return Status::OK();
  }

  // The weight [O, cg·kh·kw] as one packed matrix per group, packed a block
  // of output channels at a time (a block may span two groups).
  Status PackGemmWeights(const KernelContext& ctx, int64_t k, std::vector<PackedMatrix>* packed) {
    packed->resize(group_);
    for (PackedMatrix& m : *packed) m.Reset(og_, k);
    const int64_t block = BlockRows();
    std::vector<float> staging;
    for (int64_t o0 = 0; o0 < o_; o0 += block) {
      const int64_t rows = std::min(block, o_ - o0);
      TS_ASSIGN_OR_RETURN(const float* w, ConstantRows(ctx, 1, o0, rows, k, &staging));
      for (int64_t r = 0; r < rows;) {
        const int64_t at = o0 + r, in_group = at % og_;
        const int64_t n = std::min(rows - r, og_ - in_group);
        (*packed)[at / og_].PackRows(w + r * k, in_group, n, k);
        r += n;
      }
    }
    return Status::OK();
  }

  // Tile counts and the chunk of tiles Eval transforms at once (ScratchBytes).
  void WinogradGeometry() {
    tiles_h_ = (oh_ + 1) / 2;
    tiles_w_ = (ow_ + 1) / 2;
    // Chunk of tiles whose V and M (16·(C+O)·chunk floats) stay within ~2 MiB.
    const int64_t budget = (2 << 20) / static_cast<int64_t>(sizeof(float));
    // Whole tile rows per chunk, so the transforms run along rows.
    int64_t rows = std::clamp<int64_t>(budget / (16 * (c_ + o_)) / tiles_w_, 1, tiles_h_);
    // With several threads, each takes a band of tile rows through all three
    // stages in its own chunk (EvalWinograd): V and M stay in the cache of
    // the core that wrote them and the stages need no barrier between them.
    // Each thread then reads all 16 transformed weight matrices (16·C·O
    // floats) instead of its share of them: bands where the tiles' V and M
    // (16·(C+O) floats a tile) are at least 0.15 of the weights. With
    // chunks, each chunk takes four parallel regions (padding, input
    // transform, GEMMs, output transform) and the threads wait at each.
    // Measured (AVX-512 EPYC, 2 threads, one conv alone, 3 runs each,
    // chunks -> bands): 54² 16->64 (data/weights 3.6) 0.43 -> 0.28 ms,
    // 56² 64->64 (1.5) 0.81 -> 0.60, 27² 32->128 (0.48) 0.24 -> 0.24,
    // resnet18's 28² 128->128 (0.19) 0.63 -> 0.57, 13² 48->192 and
    // 64->256 (0.07, 0.06) 0.135 -> 0.137 and 0.19 -> 0.20, 14² 256->256
    // (0.024) 0.48 -> 0.66. (An earlier machine had 27² and 13² planes
    // 6-50 % slower in bands; the threshold was 1.5.)
    wino_workers_ = 1;
    const int64_t t = prepared_threads_;
    const int64_t tiles = tiles_h_ * tiles_w_;
    if (t > 1 && tiles_h_ >= t && 20 * tiles * (c_ + o_) >= 3 * 16 * c_ * o_) {
      wino_workers_ = static_cast<int>(t);
      rows = std::min((tiles_h_ + t - 1) / t, rows);
    }
    wino_chunk_ = rows * tiles_w_;
  }

  // One channel's zero-padded rows under one chunk of tile rows (2·rows + 2
  // rows of 2·tiles_w + 2 values): each thread pads the rows it transforms
  // just before it transforms them (EvalWinograd).
  int64_t WinogradPadFloats() const { return (2 * (wino_chunk_ / tiles_w_) + 2) * (2 * tiles_w_ + 2); }

  void EvalWinograd(const EvalContext& ctx) const {
    const float* x = ctx.inputs[0];
    const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
    float* y = ctx.outputs[0];
    const int64_t wp = 2 * tiles_w_ + 2;  // a zero-padded row covering every patch
    float* pads = ctx.scratch;            // per thread: one channel's padded rows under a chunk
    float* scratch_chunks = pads + prepared_threads_ * WinogradPadFloats();  // V [16][C][chunk], then M [16][O][chunk]
    const int threads = std::max(1, ctx.threads);
    // Bands of tile rows per thread only with the thread count the scratch
    // was sized for (WinogradGeometry); else chunks in turn, each stage
    // spread over the threads.
    const int workers = threads == prepared_threads_ ? wino_workers_ : 1;
    const int64_t rows_per_chunk = wino_chunk_ / tiles_w_;
    const int64_t chunk_floats = 16 * (c_ + o_) * wino_chunk_;
    for (int64_t n = 0; n < n_; ++n) {
      const float* xn = x + n * c_ * h_ * w_;
      float* yn = y + n * o_ * oh_ * ow_;
      // Input transform V = Bᵀ d B of channel c, tile rows [ty0, ty1),
      // vectorised across the tiles of a row. The thread first copies the
      // 2·(ty1 - ty0) + 2 input rows under those tiles into `pad` with
      // their zero padding (no padded copy of the whole input: a thread
      // reads only the input rows its own tiles cover, which in bands are
      // the rows the previous conv's same thread wrote, and the copy stays
      // in its L1).
      const int64_t cols = std::min(w_, wp - pl_);
      auto input_transform = [&](int64_t c, int64_t ty0, int64_t ty1, float* v, float* pad) {
        const int64_t pad_rows = 2 * (ty1 - ty0) + 2;
        for (int64_t r = 0; r < pad_rows; ++r) {
          float* row = pad + r * wp;
          const int64_t ih = 2 * ty0 + r - pt_;
          if (ih < 0 || ih >= h_) {
            std::fill(row, row + wp, 0.f);
            continue;
          }
          std::fill(row, row + pl_, 0.f);
          std::memcpy(row + pl_, xn + (c * h_ + ih) * w_, sizeof(float) * cols);
          std::fill(row + pl_ + cols, row + wp, 0.f);
        }
        for (int64_t ty = ty0; ty < ty1; ++ty) {
          const float* p0 = pad + 2 * (ty - ty0) * wp;
          const float *p1 = p0 + wp, *p2 = p1 + wp, *p3 = p2 + wp;
          float* vk = v + c * wino_chunk_ + (ty - ty0) * tiles_w_;
          const int64_t stride = c_ * wino_chunk_;  // between transformed positions
          const int64_t tw = tiles_w_;
#pragma omp simd
          for (int64_t tx = 0; tx < tw; ++tx) {
            const int64_t q = 2 * tx;
            float d[4][4] = {{p0[q], p0[q + 1], p0[q + 2], p0[q + 3]},
                             {p1[q], p1[q + 1], p1[q + 2], p1[q + 3]},
                             {p2[q], p2[q + 1], p2[q + 2], p2[q + 3]},
                             {p3[q], p3[q + 1], p3[q + 2], p3[q + 3]}};
            float bd[4][4];
            for (int j = 0; j < 4; ++j) {
              bd[0][j] = d[0][j] - d[2][j];
              bd[1][j] = d[1][j] + d[2][j];
              bd[2][j] = d[2][j] - d[1][j];
              bd[3][j] = d[1][j] - d[3][j];
            }
            for (int i = 0; i < 4; ++i) {
              vk[(i * 4 + 0) * stride + tx] = bd[i][0] - bd[i][2];
              vk[(i * 4 + 1) * stride + tx] = bd[i][1] + bd[i][2];
              vk[(i * 4 + 2) * stride + tx] = bd[i][2] - bd[i][1];
              vk[(i * 4 + 3) * stride + tx] = bd[i][1] - bd[i][3];
            }
          }
        }
      };
      // One of the 16 independent GEMMs, one per transformed position ξ.
      auto gemm = [&](int64_t xi, int64_t count, const float* v, float* m, int gemm_threads) {
        PackedGemm((*packed_)[xi], v + xi * c_ * wino_chunk_, wino_chunk_, count, m + xi * o_ * wino_chunk_,
                   wino_chunk_, nullptr, FusedActivation{}, gemm_threads);
      };
      // Output transform Y = Aᵀ M A + bias of output channel o, tile rows
      // [ty0, ty1), vectorised across a tile row. `finish` is the
      // activation where it is one comparison (relu, clip, leaky relu),
      // applied in the same loop; other activations run on each finished
      // output row while it is in cache.
      auto output_rows = [&](auto finish, bool row_activation, int64_t o, int64_t ty0, int64_t ty1, const float* m) {
        const float b = bias ? bias[o] : 0.f;
        float* yo = yn + o * oh_ * ow_;
        const float* mo = m + o * wino_chunk_;
        const int64_t stride = o_ * wino_chunk_;
        for (int64_t ty = ty0; ty < ty1; ++ty) {
          const float* mk = mo + (ty - ty0) * tiles_w_;
          float* y0 = yo + 2 * ty * ow_;
          const bool second_row = 2 * ty + 1 < oh_;
          float* y1 = second_row ? y0 + ow_ : y0;  // rewritten by row 0 below when absent
          const int64_t full = ow_ / 2;
#pragma omp simd
          for (int64_t tx = 0; tx < full; ++tx) {
            float q[16];
            for (int xi = 0; xi < 16; ++xi) q[xi] = mk[xi * stride + tx];
            float a0[4], a1[4];
            for (int j = 0; j < 4; ++j) {
              a0[j] = q[j] + q[4 + j] + q[8 + j];
              a1[j] = q[4 + j] - q[8 + j] - q[12 + j];
            }
            y1[2 * tx] = finish(a1[0] + a1[1] + a1[2] + b);
            y1[2 * tx + 1] = finish(a1[1] - a1[2] - a1[3] + b);
            y0[2 * tx] = finish(a0[0] + a0[1] + a0[2] + b);
            y0[2 * tx + 1] = finish(a0[1] - a0[2] - a0[3] + b);
          }
          if (ow_ % 2 == 1) {  // last tile column: only its left output exists
            const int64_t tx = full;
            float q[16];
            for (int xi = 0; xi < 16; ++xi) q[xi] = mk[xi * stride + tx];
            y0[2 * tx] = finish(q[0] + q[4] + q[8] + q[1] + q[5] + q[9] + q[2] + q[6] + q[10] + b);
            if (second_row) y1[2 * tx] = finish(q[4] - q[8] - q[12] + q[5] - q[9] - q[13] + q[6] - q[10] - q[14] + b);
          }
          if (row_activation) {
            act_.Apply(y0, static_cast<size_t>(ow_));
            if (second_row) act_.Apply(y1, static_cast<size_t>(ow_));
          }
        }
      };
      auto output_transform = [&](int64_t o, int64_t ty0, int64_t ty1, const float* m) {
        const float lo = act_.alpha, hi = act_.beta;
        switch (act_.kind) {
          case FusedActivation::kNone:
            return output_rows([](float v) { return v; }, false, o, ty0, ty1, m);
          case FusedActivation::kRelu:
            return output_rows([](float v) { return v > 0.f ? v : 0.f; }, false, o, ty0, ty1, m);
          case FusedActivation::kClip:
            return output_rows([lo, hi](float v) { return std::min(std::max(v, lo), hi); }, false, o, ty0, ty1, m);
          case FusedActivation::kLeakyRelu:
            return output_rows([lo](float v) { return v < 0.f ? lo * v : v; }, false, o, ty0, ty1, m);
          default:
            return output_rows([](float v) { return v; }, true, o, ty0, ty1, m);
        }
      };
      if (workers > 1) {
        // Each thread: its band of tile rows, chunk by chunk, in its own V and M.
        ParallelFor(workers, workers, [&](int64_t worker) {
          float* v = scratch_chunks + worker * chunk_floats;
          float* m = v + 16 * c_ * wino_chunk_;
          float* pad = pads + worker * WinogradPadFloats();
          const int64_t band0 = tiles_h_ * worker / workers, band1 = tiles_h_ * (worker + 1) / workers;
          for (int64_t ty0 = band0; ty0 < band1; ty0 += rows_per_chunk) {
            const int64_t ty1 = std::min(band1, ty0 + rows_per_chunk);
            for (int64_t c = 0; c < c_; ++c) input_transform(c, ty0, ty1, v, pad);
            for (int64_t xi = 0; xi < 16; ++xi) gemm(xi, (ty1 - ty0) * tiles_w_, v, m, 1);
            for (int64_t o = 0; o < o_; ++o) output_transform(o, ty0, ty1, m);
          }
        });
        continue;
      }
      float* v = scratch_chunks;
      float* m = v + 16 * c_ * wino_chunk_;
      for (int64_t ty0 = 0; ty0 < tiles_h_; ty0 += rows_per_chunk) {
        const int64_t ty1 = std::min(tiles_h_, ty0 + rows_per_chunk);
        const int64_t count = (ty1 - ty0) * tiles_w_;
        // Channels in contiguous ranges, one per thread (as ParallelFor's
        // static schedule would), each padded in that thread's own rows.
        const int pad_threads = std::min(threads, prepared_threads_);
        ParallelFor(pad_threads, pad_threads, [&](int64_t t) {
          float* pad = pads + t * WinogradPadFloats();
          for (int64_t c = c_ * t / pad_threads; c < c_ * (t + 1) / pad_threads; ++c)
            input_transform(c, ty0, ty1, v, pad);
        });
        // With several threads each takes whole GEMMs (16 divides evenly
        // over 2 or 4): one parallel region instead of one per GEMM, and
        // every thread packs only the B blocks of its own GEMMs.
        if (threads > 1 && 16 % threads == 0) {
          ParallelForBalanced(16, threads, [&](int64_t xi) { gemm(xi, count, v, m, 1); });
        } else {
          for (int xi = 0; xi < 16; ++xi) gemm(xi, count, v, m, threads);
        }
        ParallelForBalanced(o_, threads, [&](int64_t o) { output_transform(o, ty0, ty1, m); });
      }
    }
  }

  // Bias and activation over one output row of `len` values.
  void FinishRow(float* row, int64_t len, float bias) const {
    if (bias != 0.f) Eigen::Map<Eigen::ArrayXf>(row, len) += bias;
    act_.Apply(row, static_cast<size_t>(len));
  }

  // im2col of output columns [p0, p0 + len) of one group:
  // col[(c*kH + i)*kW + j][p - p0] = x[c][oh*sh - pt + i*dh][ow*sw - pl + j*dw]
  // with p = oh*OW + ow, and 0 where that falls in the padding.
  // Channels [c0, c1) only when given (the rows of those channels).
  void Im2colTile(const float* x, int64_t p0, int64_t len, float* col, int64_t c0 = 0, int64_t c1 = -1) const {
    const int64_t first_row = p0 / ow_, last_row = (p0 + len - 1) / ow_;
    if (c1 < 0) c1 = cg_;
    for (int64_t c = c0; c < c1; ++c) {
      const float* xc = x + c * h_ * w_;
      for (int64_t i = 0; i < kh_; ++i) {
        for (int64_t j = 0; j < kw_; ++j) {
          float* dst = col + ((c * kh_ + i) * kw_ + j) * len - p0;  // indexed by p
          const int64_t lo = col_lo_[j], hi = col_hi_[j];
          const int64_t col_offset = j * dw_ - pl_;
          for (int64_t oh = first_row; oh <= last_row; ++oh) {
            const int64_t row_start = oh * ow_;
            const int64_t b = std::max<int64_t>(0, p0 - row_start);          // first ow in the tile
            const int64_t e = std::min<int64_t>(ow_, p0 + len - row_start);  // end ow in the tile
            float* d = dst + row_start;
            const int64_t ih = oh * sh_ - pt_ + i * dh_;
            if (ih < 0 || ih >= h_) {
              for (int64_t ow = b; ow < e; ++ow) d[ow] = 0.f;
              continue;
            }
            const float* src = xc + ih * w_;
            const int64_t vb = std::clamp(lo, b, e), ve = std::clamp(hi, vb, e);
            for (int64_t ow = b; ow < vb; ++ow) d[ow] = 0.f;
            if (sw_ == 1) {
              if (ve > vb) std::memcpy(d + vb, src + vb + col_offset, sizeof(float) * (ve - vb));
            } else {
              const int64_t stride = sw_;
#pragma omp simd
              for (int64_t ow = vb; ow < ve; ++ow) d[ow] = src[ow * stride + col_offset];
            }
            for (int64_t ow = ve; ow < e; ++ow) d[ow] = 0.f;
          }
        }
      }
    }
  }

  // Columns per GEMM tile: the im2col tile and the output tile should both
  // stay in L2, so bias/activation run on cached rows and im2col never
  // streams the whole expanded input through memory.
  static int64_t TileColumns(int64_t k, int64_t rows, int64_t plane) {
    constexpr int64_t kBudgetFloats = 128 * 1024;  // 512 KiB each: within a core's L2 beside the weights
    int64_t t = std::min(kBudgetFloats / std::max<int64_t>(k, 1), kBudgetFloats / std::max<int64_t>(rows, 1));
    t = std::max<int64_t>(256, t);
    if (t >= plane) return plane;
    // Even out the tiles so the last one is not a sliver.
    const int64_t tiles = (plane + t - 1) / t;
    return std::min(plane, ((plane + tiles - 1) / tiles + 15) / 16 * 16);
  }

  // With several threads, a pointwise conv's tiles come in a multiple of the
  // thread count, so each thread takes whole tiles in one parallel region
  // and packs only its own columns of the input. Before, a plane of 2 or 3
  // tiles ran them in turn, each GEMM split by rows of weights, so every
  // thread packed the whole tile: mobilenet_v2's projections to 24-32
  // channels on 28² and 56² planes ran no faster on 2 threads than on 1
  // (0.071 -> 0.068 ms); now 0.045 ms, and the model 4.44 -> 4.03 ms
  // (2 threads, AVX-512). Planes under 256 columns a thread keep the split
  // by rows (14² planes ran slower in column halves).
  static int64_t ThreadTileColumns(int64_t tile, int64_t plane, int threads) {
    if (threads <= 1 || plane < 256 * threads) return tile;
    int64_t tiles = (plane + tile - 1) / tile;
    tiles = (tiles + threads - 1) / threads * threads;
    return std::min(plane, ((plane + tiles - 1) / tiles + 15) / 16 * 16);
  }

  void EvalGemm(const EvalContext& ctx) const {
    using StridedConstMap = Eigen::Map<const RowMajorMatrix, 0, Eigen::OuterStride<>>;
    using StridedMap = Eigen::Map<RowMajorMatrix, 0, Eigen::OuterStride<>>;
    const float* x = ctx.inputs[0];
    const float* wt = ctx.inputs[1];
    const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
    float* y = ctx.outputs[0];
    const int64_t plane = oh_ * ow_;
    const int64_t k = cg_ * kh_ * kw_;
    const int64_t tiles = (plane + tile_ - 1) / tile_;
    const int64_t items = n_ * group_ * tiles;
    // Enough tiles: one per thread, each GEMM single-threaded (Eigen runs
    // sequentially inside a parallel region). Too few: tiles in sequence
    // and Eigen parallelises inside each GEMM instead.
    const int threads = std::max(1, std::min(ctx.threads, prepared_threads_));
    const bool tile_parallel =
        threads > 1 && (items >= 2 * threads || (strategy_ == kPointwise && items % threads == 0));
    ParallelFor(items, (tile_parallel) ? threads : 1, [&](int64_t item) {
      const int64_t t = item % tiles, g = (item / tiles) % group_, n = item / (tiles * group_);
      const int64_t p0 = t * tile_, len = std::min(tile_, plane - p0);
      const float* xg = x + (n * c_ + g * cg_) * h_ * w_;
      float* yg = y + (n * o_ + g * og_) * plane;
      const int gemm_threads = tile_parallel ? 1 : threads;
      if (packed_ != nullptr) {
        const float* gb = bias ? bias + g * og_ : nullptr;
        if (strategy_ == kPointwise) {
          PackedGemm((*packed_)[g], xg + p0, plane, len, yg + p0, plane, gb, act_, gemm_threads);
        } else {
          float* col = ctx.scratch + static_cast<int64_t>(omp_get_thread_num()) * k * tile_;
          // One tile on several threads (a 7² or 14² plane): each builds
          // the rows of its share of the channels first. resnet18's
          // layer4 3x3 convs alone (k = 4608, 49 columns, 2 threads):
          // 1.04-1.31 -> 1.00-1.05 ms; the model 1-4 % faster.
          if (gemm_threads > 1) {
            ParallelFor(gemm_threads, gemm_threads, [&](int64_t w) {
              Im2colTile(xg, p0, len, col, cg_ * w / gemm_threads, cg_ * (w + 1) / gemm_threads);
            });
          } else {
            Im2colTile(xg, p0, len, col);
          }
          PackedGemm((*packed_)[g], col, len, len, yg + p0, plane, gb, act_, gemm_threads);
        }
        return;
      }
      ConstMatrixMap wmat(wt + g * og_ * k, og_, k);
      StridedMap ymat(yg + p0, og_, len, Eigen::OuterStride<>(plane));
      if (strategy_ == kPointwise) {
        ymat.noalias() = wmat * StridedConstMap(xg + p0, k, len, Eigen::OuterStride<>(plane));
      } else {
        float* col = ctx.scratch + static_cast<int64_t>(omp_get_thread_num()) * k * tile_;
        Im2colTile(xg, p0, len, col);
        ymat.noalias() = wmat * ConstMatrixMap(col, k, len);
      }
      for (int64_t o = 0; o < og_; ++o) FinishRow(yg + o * plane + p0, len, bias ? bias[g * og_ + o] : 0.f);
    });
  }

  int64_t Im2colScratchFloats() const { return prepared_threads_ * cg_ * kh_ * kw_ * tile_; }

  // Flat output columns per GEMM of the indirect path: 8 AVX2 tiles; a
  // C tile of og_ rows this wide per thread.
  static constexpr int64_t kIndirectColumns = 192;
  int64_t PolyphaseFloats() const { return sh_ * sw_ * dw_sub_size_; }  // one channel's sub-planes
  // Group 1: the input's polyphase planes, shared by the threads, and a C
  // tile per thread. Groups: each thread polyphases its own groups.
  int64_t IndirectScratchFloats() const {
    if (group_ == 1) return c_ * PolyphaseFloats() + prepared_threads_ * og_ * indirect_cols_;
    return prepared_threads_ * (cg_ * PolyphaseFloats() + og_ * indirect_cols_);
  }

  // Called by Prepare once the weights are known to be packed (or would
  // be: shapes only): the indirect path when its scratch stays within
  // twice the im2col tile's and the level takes an indirect B. Large
  // planes (yolov2's 608² layers) keep im2col: their padded copy would cost
  // far more memory than one tile. The scratch a kernel asks for depends on
  // the shapes only, never on the ISA level (ScratchBytes: the larger of the
  // two when the shapes allow both), so a plan's memory promise made on one
  // machine holds on a worker with another CPU.
  void ChooseIndirect() {
    indirect_ = indirect_eligible_ = false;
    if (strategy_ != kIm2col || !repacks_weights_ || !indirect_allowed_) return;
    PrepareDepthwise();  // the polyphase geometry (dw_*), the same for any conv
    indirect_cols_ = std::min<int64_t>(oh_ * dw_sub_w_, kIndirectColumns);
    if (IndirectScratchFloats() > 2 * Im2colScratchFloats()) return;
    // The junk columns of the flat output (sub-plane width − OW per row) are
    // multiplied like the rest: past 30 % more MACs the im2col copy costs
    // less. A 7x7 plane padded to 9 columns (29 %) stays indirect: its im2col
    // is many 7-float copies (resnext50's layer4 3x3/g32 convs, when their
    // groups took the GEMM: 0.85 -> 0.64 ms; was 15 %).
    if (20 * oh_ * dw_sub_w_ > 26 * oh_ * ow_) return;
    // Weights the level would stream once per column tile of an indirect
    // GEMM, but once in all with B in place (Microkernels::blocked_max_a).
    if (microkernels_->blocked_max_a > 0 && og_ * cg_ * kh_ * kw_ > microkernels_->blocked_max_a) return;
    indirect_eligible_ = true;
    if (microkernels_->panels_per_call != 0) return;  // the level's GEMM reads B in place only
    b_rows_.clear();
    for (int64_t c = 0; c < cg_; ++c)
      for (int64_t offset : dw_tap_offsets_) b_rows_.push_back(c * PolyphaseFloats() + offset);
    indirect_ = true;
  }

  void EvalIndirect(const EvalContext& ctx) const {
    const float* x = ctx.inputs[0];
    const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
    const int64_t per_channel = PolyphaseFloats();
    const int64_t tiles = (oh_ * dw_sub_w_ + indirect_cols_ - 1) / indirect_cols_;
    const int threads = std::max(1, std::min(ctx.threads, prepared_threads_));
    for (int64_t n = 0; n < n_; ++n) {
      const float* xn = x + n * c_ * h_ * w_;
      float* yn = ctx.outputs[0] + n * o_ * oh_ * ow_;
      if (group_ == 1) {
        float* poly = ctx.scratch;
        float* c_tiles = poly + c_ * per_channel;
        ParallelFor(c_, threads, [&](int64_t c) { PolyphasePlane(xn + c * h_ * w_, poly + c * per_channel, true); });
        const bool tile_parallel = threads > 1 && tiles >= 2 * threads;
        ParallelFor(tiles, tile_parallel ? threads : 1, [&](int64_t t) {
          float* ct = c_tiles + static_cast<int64_t>(omp_get_thread_num()) * og_ * indirect_cols_;
          IndirectTile(0, poly, t, ct, yn, bias, tile_parallel ? 1 : threads);
        });
        continue;
      }
      // One contiguous run of groups per worker, each with its own scratch.
      const int workers = static_cast<int>(std::min<int64_t>(threads, group_));
      ParallelFor(workers, workers, [&](int64_t worker) {
        float* poly = ctx.scratch + worker * (cg_ * per_channel + og_ * indirect_cols_);
        float* ct = poly + cg_ * per_channel;
        bool clear = true;  // the zeros around each plane are written once
        for (int64_t g = group_ * worker / workers; g < group_ * (worker + 1) / workers; ++g) {
          for (int64_t c = 0; c < cg_; ++c) PolyphasePlane(xn + (g * cg_ + c) * h_ * w_, poly + c * per_channel, clear);
          clear = false;
          for (int64_t t = 0; t < tiles; ++t) IndirectTile(g, poly, t, ct, yn, bias, 1);
        }
      });
    }
  }

  // One contiguous run of groups per worker, each with its own scratch
  // (GroupedLanesArgs).
  void EvalGroupedLanes(const EvalContext& ctx) const {
    const int threads = std::max(1, std::min(ctx.threads, prepared_threads_));
    const int64_t items = n_ * group_;
    const int workers = static_cast<int>(std::min<int64_t>(threads, items));
    const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
    ParallelFor(workers, workers, [&](int64_t worker) {
      bool clear = true;
      for (int64_t item = items * worker / workers; item < items * (worker + 1) / workers; ++item) {
        const int64_t n = item / group_, g = item % group_;
        GroupedLanesArgs d;
        d.x = ctx.inputs[0] + (n * c_ + g * cg_) * h_ * w_;
        d.in_plane = h_ * w_;
        d.h = h_;
        d.w = w_;
        d.cg = cg_;
        d.og = og_;
        d.a = (*packed_)[g].Panel(0);
        d.k = cg_ * kh_ * kw_;
        d.bias = bias ? bias + g * og_ : nullptr;
        d.kh = static_cast<int>(kh_);
        d.kw = static_cast<int>(kw_);
        d.stride = static_cast<int>(sh_);
        d.pad_top = pt_;
        d.pad_left = pl_;
        d.oh = oh_;
        d.ow = ow_;
        d.epilogue = epilogue_;
        d.scratch = ctx.scratch + worker * grouped_shape_.total_floats;
        d.clear = clear;
        d.out = ctx.outputs[0] + (n * o_ + g * og_) * oh_ * ow_;
        d.out_plane = oh_ * ow_;
        microkernels_->grouped_lanes(d);
        clear = false;
        if (!act_in_epilogue_) act_.Apply(d.out, static_cast<size_t>(og_ * oh_ * ow_));
      }
    });
  }

  // Flat columns [t·cols, +cols) of group g: the GEMM into the C tile ct,
  // then each output row's valid columns into y.
  void IndirectTile(int64_t g, const float* poly, int64_t t, float* ct, float* yn, const float* bias,
                    int gemm_threads) const {
    const int64_t ws = dw_sub_w_, plane = oh_ * ow_;
    const int64_t q0 = t * indirect_cols_, len = std::min(indirect_cols_, oh_ * ws - q0);
    PackedGemm((*packed_)[g], poly + q0, 0, len, ct, len, bias ? bias + g * og_ : nullptr, act_, gemm_threads,
               b_rows_.data());
    for (int64_t o = 0; o < og_; ++o) {
      float* yo = yn + (g * og_ + o) * plane;
      const float* co = ct + o * len - q0;  // indexed by flat column
      for (int64_t oh = q0 / ws; oh * ws < q0 + len; ++oh) {
        const int64_t b = std::max(q0, oh * ws), e = std::min(q0 + len, oh * ws + ow_);
        if (b < e) std::memcpy(yo + oh * ow_ + (b - oh * ws), co + b, sizeof(float) * (e - b));
      }
    }
  }

  // Pixel columns per block of an in-place pointwise conv: the scratch is
  // min(C, O) rows of this many, per thread. Wide enough for the
  // microkernels' vectors, narrow enough to stay a small part of a plane.
  int64_t InPlaceColumns() const { return std::min<int64_t>(oh_ * ow_, 32); }

  // Pointwise with y == x (segments, InPlaceInput): each block of pixel
  // columns [p0, p0 + len) reads in[:, block] and writes out[:, block], and
  // out[o, p] overlaps in[o, p] only. C <= O: the block's inputs are copied
  // to scratch first and the GEMM writes the arena; C > O: the GEMM reads
  // the arena into scratch, which is copied out after. Blocks are disjoint,
  // so threads take whole blocks.
  void EvalPointwiseInPlace(const EvalContext& ctx) const {
    float* y = ctx.outputs[0];
    const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
    const int64_t plane = oh_ * ow_, cols = InPlaceColumns();
    const int64_t rows = std::min(c_, o_);
    const int64_t blocks = (plane + cols - 1) / cols;
    const int threads = std::max(1, std::min(ctx.threads, prepared_threads_));
    const int workers = static_cast<int>(std::min<int64_t>(threads, blocks));
    ParallelFor(workers, workers, [&](int64_t worker) {
      float* s = ctx.scratch + worker * rows * cols;
      for (int64_t b = blocks * worker / workers; b < blocks * (worker + 1) / workers; ++b) {
        const int64_t p0 = b * cols, len = std::min(cols, plane - p0);
        if (c_ <= o_) {
          for (int64_t c = 0; c < c_; ++c) std::memcpy(s + c * len, y + c * plane + p0, sizeof(float) * len);
          PackedGemm((*packed_)[0], s, len, len, y + p0, plane, bias, act_, 1);
        } else {
          PackedGemm((*packed_)[0], y + p0, plane, len, s, len, bias, act_, 1);
          for (int64_t o = 0; o < o_; ++o) std::memcpy(y + o * plane + p0, s + o * len, sizeof(float) * len);
        }
      }
    });
  }

  // Depthwise planes are evaluated in "polyphase" form: the zero-padded
  // input plane is split by (row mod stride, column mod stride) into
  // sh·sw sub-planes of width ws, so every tap (i, j) of output position
  // q = oh·ws + ow reads sub-plane ((i·dh) mod sh, (j·dw) mod sw) at
  // q + ⌊i·dh/sh⌋·ws + ⌊j·dw/sw⌋ — a contiguous, unit-stride stream for
  // any stride and dilation. The whole output plane (ws − OW junk columns
  // per row included) is then one flat vectorised loop per tap set, even for
  // 7x7 planes where a loop over one output row would be mostly remainder;
  // the valid columns are copied out with the activation.
  void PrepareDepthwise() {
    const int64_t hp = std::max(h_ + pt_ + pb_, (oh_ - 1) * sh_ + (kh_ - 1) * dh_ + 1);
    const int64_t wp = std::max(w_ + pl_ + pr_, (ow_ - 1) * sw_ + (kw_ - 1) * dw_ + 1);
    dw_sub_w_ = (wp + sw_ - 1) / sw_;
    const int64_t sub_h = (hp + sh_ - 1) / sh_;
    // One spare row: the junk columns of the last output row read past the end.
    dw_sub_size_ = ((sub_h + 1) * dw_sub_w_ + 15) / 16 * 16;
    dw_flat_size_ = (oh_ * dw_sub_w_ + 15) / 16 * 16;
    dw_row_offsets_.resize(h_);
    for (int64_t r = 0; r < h_; ++r) {
      const int64_t pr = r + pt_;
      dw_row_offsets_[r] = (pr % sh_) * sw_ * dw_sub_size_ + (pr / sh_) * dw_sub_w_;
    }
    dw_tap_offsets_.clear();
    for (int64_t i = 0; i < kh_; ++i)
      for (int64_t j = 0; j < kw_; ++j) {
        const int64_t sub = ((i * dh_) % sh_) * sw_ + (j * dw_) % sw_;
        dw_tap_offsets_.push_back(sub * dw_sub_size_ + (i * dh_ / sh_) * dw_sub_w_ + j * dw_ / sw_);
      }
  }

  // Per thread: the plane-at-a-time path's polyphase plane and flat output,
  // or the block path's (which may fall back to the former, EvalDepthwiseChannels).
  int64_t DepthwiseScratchFloats() const {
    const int64_t plane_path = sh_ * sw_ * dw_sub_size_ + dw_flat_size_;
    return dw_channels_ ? std::max(plane_path, dw_channel_shape_.total_floats) : plane_path;
  }

  // Scatters input plane x into the polyphase sub-planes. Every plane lands
  // on the same positions, so the zeros elsewhere need writing (`clear`)
  // only before the first plane a scratch area receives.
  void PolyphasePlane(const float* x, float* poly, bool clear) const {
    if (clear) std::memset(poly, 0, sizeof(float) * sh_ * sw_ * dw_sub_size_);
    for (int64_t r = 0; r < h_; ++r) {
      const float* src = x + r * w_;
      float* row = poly + dw_row_offsets_[r];
      if (sw_ == 1) {
        std::memcpy(row + pl_, src, sizeof(float) * w_);
      } else if (sw_ == 2) {  // de-interleave: padded column pc goes to phase pc % 2, position pc / 2
        float* phase[2] = {row, row + dw_sub_size_};
        const int64_t first = pl_ % 2;  // phase of input column 0
        float* even = phase[first] + pl_ / 2;                 // input columns 0, 2, 4, ...
        float* odd = phase[1 - first] + (pl_ + 1) / 2;        // input columns 1, 3, 5, ...
        microkernels_->deinterleave(src, w_, even, odd);
      } else {
        for (int64_t c = 0; c < w_; ++c) {
          const int64_t pc = c + pl_;
          row[(pc % sw_) * dw_sub_size_ + pc / sw_] = src[c];
        }
      }
    }
  }

  void EvalDepthwise(const EvalContext& ctx) const {
    const int64_t multiplier = og_;  // output channels per input channel
    const int64_t planes = n_ * o_;
    const int64_t per_thread = DepthwiseScratchFloats();
    const int threads = std::max(1, std::min(ctx.threads, prepared_threads_));
    if (dw_channels_) return EvalDepthwiseChannels(ctx, threads);
    // One contiguous run of planes per worker, each with its own scratch.
    const int workers = static_cast<int>(std::min<int64_t>(threads, planes));
    ParallelFor(workers, workers, [&](int64_t worker) {
      float* poly = ctx.scratch + worker * per_thread;
      float* flat = poly + sh_ * sw_ * dw_sub_size_;
      const int64_t begin = planes * worker / workers, end = planes * (worker + 1) / workers;
      int64_t loaded = -1;  // input plane now in poly
      for (int64_t p = begin; p < end; ++p) {
        const int64_t n = p / o_, o = p % o_;
        // With a channel multiplier the same input plane serves consecutive outputs.
        const int64_t in_plane = n * c_ + o / multiplier;
        DepthwisePlane(ctx, p, poly, flat, loaded < 0, in_plane != loaded);
        loaded = in_plane;
      }
    });
  }

  // Output plane p (image n, channel o) from its input plane: scattered
  // into the polyphase scratch when `load` (its zeros written first when
  // `clear`), then by the row-blocked microkernel or the flat tap loop.
  void DepthwisePlane(const EvalContext& ctx, int64_t p, float* poly, float* flat, bool clear, bool load = true) const {
    const int64_t n = p / o_, o = p % o_;
    const float* bias = has_bias_ ? ctx.inputs[2] : nullptr;
    if (load) PolyphasePlane(ctx.inputs[0] + (n * c_ + o / og_) * h_ * w_, poly, clear);
    const float* kernel = ctx.inputs[1] + o * kh_ * kw_;
    const float b = bias ? bias[o] : 0.f;
    float* yp = ctx.outputs[0] + p * oh_ * ow_;
    if (dw_rows_) {
      DepthwiseRowsArgs d;
      d.poly = poly;
      d.sub_size = dw_sub_size_;
      d.ws = dw_sub_w_;
      d.kernel = kernel;
      d.size = static_cast<int>(kh_);
      d.stride = static_cast<int>(sh_);
      d.bias = b;
      d.epilogue = epilogue_;
      d.rows = oh_;
      d.width = ow_;
      d.out = yp;
      microkernels_->depthwise_rows(d);
      if (!act_in_epilogue_) act_.Apply(yp, static_cast<size_t>(oh_ * ow_));
      return;
    }
    // The whole plane as one flat loop (the ws − OW junk columns of each
    // row included), then the valid columns. Row by row straight into the
    // output was slower even for 112-wide rows: every row ended in a
    // masked step (AVX2 masked stores are slow), 0.80 → 0.45 ms for
    // mobilenet_v2's 144-channel 56² layer.
    DepthwiseTapsDispatch(poly, kernel, b, oh_ * dw_sub_w_, flat);
    for (int64_t r = 0; r < oh_; ++r) std::memcpy(yp + r * ow_, flat + r * dw_sub_w_, sizeof(float) * ow_);
    if (!act_in_epilogue_) act_.Apply(yp, static_cast<size_t>(oh_ * ow_));
  }

  // Blocks of the microkernel's lanes of channels (DepthwiseChannelsArgs),
  // never across images; a contiguous run of blocks per worker, in order.
  // Written over its input (segments), a block in bands is safe when the
  // microkernel's carried-over rows make it so (same plane shape, stride 1,
  // pad_top < K: each band reads only rows below those already written), or
  // when the block's output planes end before its first input plane (a
  // smaller output plane, one worker: the planes they land on are consumed).
  // Any other block (the first ones of a stride-2 conv written in place)
  // takes the plane-at-a-time path, plane by plane: the same sums.
  void EvalDepthwiseChannels(const EvalContext& ctx, int threads) const {
    const int lanes = microkernels_->depthwise_channel_lanes;
    const int64_t per_image = (o_ + lanes - 1) / lanes, blocks = n_ * per_image;
    const int workers = static_cast<int>(std::min<int64_t>(threads, blocks));
    const int64_t per_thread = DepthwiseScratchFloats();
    const int64_t in_plane = h_ * w_, out_plane = oh_ * ow_;
    const bool aliased = ctx.inputs[0] == ctx.outputs[0];
    const bool bands_safe = dw_channel_shape_.band_rows >= oh_ || (oh_ == h_ && ow_ == w_ && sh_ == 1 && pt_ < kh_);
    ParallelFor(workers, workers, [&](int64_t worker) {
      float* scratch = ctx.scratch + worker * per_thread;
      const int64_t begin = blocks * worker / workers, end = blocks * (worker + 1) / workers;
      bool clear = true;  // the scratch's padding is written before its first block
      for (int64_t b = begin; b < end; ++b) {
        const int64_t n = b / per_image, c0 = (b % per_image) * lanes;
        const int channels = static_cast<int>(std::min<int64_t>(lanes, o_ - c0));
        const int64_t plane0 = n * c_ + c0;  // the block's first plane, input and output
        float* out = ctx.outputs[0] + plane0 * out_plane;
        if (aliased && !bands_safe && (plane0 + channels) * out_plane > plane0 * in_plane) {
          float* poly = scratch;
          float* flat = poly + sh_ * sw_ * dw_sub_size_;
          for (int c = 0; c < channels; ++c) DepthwisePlane(ctx, plane0 + c, poly, flat, c == 0);
          clear = true;  // the plane path's zeros are not the block path's
          continue;
        }
        DepthwiseChannelsArgs d;
        d.x = ctx.inputs[0] + plane0 * in_plane;
        d.in_plane = in_plane;
        d.h = h_;
        d.w = w_;
        d.channels = channels;
        d.kernel = ctx.inputs[1] + c0 * kh_ * kw_;
        d.bias = has_bias_ ? ctx.inputs[2] + c0 : nullptr;
        d.size = static_cast<int>(kh_);
        d.stride = static_cast<int>(sh_);
        d.pad_top = pt_;
        d.pad_left = pl_;
        d.oh = oh_;
        d.ow = ow_;
        d.epilogue = epilogue_;
        d.scratch = scratch;
        d.clear = clear;
        d.out = out;
        d.out_plane = out_plane;
        d.band_rows = dw_channel_shape_.band_rows;
        microkernels_->depthwise_channels(d);
        clear = false;
        if (!act_in_epilogue_) act_.Apply(d.out, static_cast<size_t>(d.channels * out_plane));
      }
    });
  }

  // out[q] = bias + Σ_t kernel[t] · poly[q + offset[t]], the activation in
  // registers where the epilogue has it: the CPU's microkernel (microkernels.h).
  void DepthwiseTapsDispatch(const float* poly, const float* kernel, float bias, int64_t count, float* out) const {
    DepthwiseTapArgs d;
    d.poly = poly;
    d.offsets = dw_tap_offsets_.data();
    d.kernel = kernel;
    d.taps = static_cast<int>(dw_tap_offsets_.size());
    d.bias = bias;
    d.epilogue = epilogue_;
    d.count = count;
    d.out = out;
    microkernels_->depthwise_taps(d);
  }

  Strategy strategy_ = kIm2col;
  std::unique_ptr<Int8Conv> int8_;  // the integer path, when Prepare chose it
  enum InPlace { kNoInPlace, kPointwiseInPlace, kDepthwiseInPlace };
  InPlace in_place_ = kNoInPlace;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, o_ = 0, group_ = 1, cg_ = 0, og_ = 0;
  int64_t kh_ = 0, kw_ = 0, sh_ = 1, sw_ = 1, dh_ = 1, dw_ = 1, pt_ = 0, pl_ = 0, pb_ = 0, pr_ = 0;
  int64_t oh_ = 0, ow_ = 0;
  int prepared_threads_ = 1;
  int64_t tile_ = 1;  // output columns per GEMM tile
  // Winograd: tile grid, tiles per chunk.
  bool repacks_weights_ = false;  // Eval reads packed_, not the graph's weight
  // Constant weights only: im2col/pointwise, one PackedMatrix per group;
  // Winograd, U = G g Gᵀ packed per position ξ (16). Possibly shared.
  std::shared_ptr<const std::vector<PackedMatrix>> packed_;
  bool streamed_weights_ = false;  // KernelContext::streamed_inputs[1]
  bool made_form_ = false;         // this kernel made packed_ (or would have: shapes_only)
  size_t owned_bytes_ = 0;         // packed_'s bytes when made_form_, else 0
  int64_t tiles_h_ = 0, tiles_w_ = 0, wino_chunk_ = 1;
  int wino_workers_ = 1;            // threads that each take a band of tile rows (WinogradGeometry)
  int64_t wino_min_channels_ = 16;  // tests change it through attr "winograd_min_channels"
  bool has_bias_ = false;
  // The indirect im2col (ChooseIndirect): B's row offsets into one group's
  // polyphase planes, and flat columns per GEMM.
  bool indirect_ = false;
  bool indirect_eligible_ = false;  // the shapes allow it (on some ISA level)
  bool indirect_allowed_ = true;
  std::vector<int64_t> b_rows_;
  int64_t indirect_cols_ = 0;
  FusedActivation act_;
  bool act_in_epilogue_ = true;  // act_ is applied by the depthwise microkernel (epilogue_)
  bool dw_rows_ = false;         // depthwise by Microkernels::depthwise_rows, else the flat taps
  bool dw_channels_ = false;     // depthwise by Microkernels::depthwise_channels (before dw_rows_)
  DepthwiseChannelsShape dw_channel_shape_;
  bool grouped_lanes_eligible_ = false;  // the shapes allow Microkernels::grouped_lanes
  bool grouped_lanes_ = false;           // and Eval takes it
  GroupedLanesShape grouped_shape_;
  Epilogue epilogue_;
  std::vector<int64_t> col_lo_, col_hi_;
  // Depthwise polyphase layout: sub-plane width and size, flat output size,
  // and each tap's offset from the output position (kh·kw entries).
  int64_t dw_sub_w_ = 0, dw_sub_size_ = 0, dw_flat_size_ = 0;
  std::vector<int64_t> dw_tap_offsets_;
  std::vector<int64_t> dw_row_offsets_;  // where input row r starts in the polyphase scratch
  const Microkernels* microkernels_ = &BaselineMicrokernels();
};

}  // namespace

std::unique_ptr<Kernel> MakeConvKernel() { return std::make_unique<ConvKernel>(); }

}  // namespace tessera
