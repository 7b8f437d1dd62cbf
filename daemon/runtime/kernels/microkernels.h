// Microkernels: the innermost loops of the conv kernels, one implementation
// per instruction-set level (isa.h), picked when a kernel is prepared.
//
// Each level lives in its own translation unit compiled with that level's
// flags (microkernels_avx512.cc: -mavx512f -mfma, microkernels_avx2.cc:
// -mavx2 -mfma, microkernels_baseline.cc: the build's default flags). Those
// files include nothing but this header and <immintrin.h>, and keep every
// helper in an anonymous namespace: an inline function from a shared header,
// compiled there with AVX-512 and merged by the linker, could otherwise end
// up called on a CPU without it.
//
// Contract of every function: computes, never allocates, never fails; the
// caller checked the shapes when it prepared.
#pragma once

#include <algorithm>
#include <cstdint>

#include "daemon/runtime/kernels/isa.h"

namespace tessera {

// Rows of a packed weight panel (PackedMatrix, packed_gemm.h): panel p holds
// rows [8p, 8p + 8) k-major, A_panel[i][r] = A[8p + r][i], zero-padded.
inline constexpr int64_t kPanelRows = 8;

// What a microkernel applies to each result, in registers, after the bias
// and before its single store: the producer's fused activation (kernel.h)
// when it is one of these, so no second pass over the output is needed.
//   kClamp        min(max(x, lo), hi)                 (relu, clip)
//   kLeaky        x < 0 ? alpha·x : x                 (leaky relu, darknet's leaky)
//   kSigmoid      1 / (1 + e^−x)                      (microkernels_logistic.inc)
//   kSilu         x / (1 + e^−x)
//   kHardSigmoid  min(max(alpha·x + beta, 0), 1)
//   kHardSwish    x · min(max(alpha·x + beta, 0), 1)
struct Epilogue {
  enum Kind { kNone, kClamp, kLeaky, kSigmoid, kSilu, kHardSigmoid, kHardSwish } kind = kNone;
  float lo = 0.f, hi = 0.f;
  float alpha = 0.f, beta = 0.f;
};

// C[rows × n] = A[rows × k] · B[k × n] (+ bias[r]), then the epilogue
// applied to the accumulators before the final store. A is a run of
// ⌈rows / kPanelRows⌉ consecutive packed panels (panel p at a + p·k·kPanelRows).
// B has row stride ldb, C row stride ldc. A level whose panels_per_call is
// 1 takes one panel per call (rows ≤ kPanelRows); 0 means any number
// (microkernels_gemm_blocked.inc: B is packed in blocks of rows on the
// stack and reused by every panel of the run).
struct GemmPanelArgs {
  const float* a = nullptr;  // the run's first panel, k × kPanelRows floats each
  const float* b = nullptr;
  int64_t ldb = 0;
  int64_t k = 0, n = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  int rows = 0;                  // valid rows of the run (≤ kPanelRows · panels)
  const float* bias = nullptr;   // `rows` values, or nullptr
  Epilogue epilogue;
  // An indirect B (levels with panels_per_call 0 only): row i of B is at
  // b + b_rows[i] and ldb is unused. The conv's implicit im2col (conv.cc):
  // row (c, i, j) of the im2col matrix is a shifted view of the padded input.
  const int64_t* b_rows = nullptr;
};

// out[q] = bias + Σ_t kernel[t] · poly[q + offsets[t]] for q in [0, count),
// then the epilogue. The depthwise conv's polyphase tap
// loop (conv.cc); poly is readable at every q + offsets[t].
struct DepthwiseTapArgs {
  const float* poly = nullptr;
  const int64_t* offsets = nullptr;
  const float* kernel = nullptr;
  int taps = 0;
  float bias = 0.f;
  Epilogue epilogue;
  int64_t count = 0;
  float* out = nullptr;
};

// A depthwise conv's whole output plane straight from its polyphase input
// (conv.cc), for a square kernel of `size` 3 or 5, the same `stride` 1 or
// 2 along both axes and no dilation:
//   out[r·width + c] = epilogue(bias + Σ_{i,j} kernel[i·size + j] ·
//       poly[((i mod s)·s + j mod s)·sub_size + (r + ⌊i/s⌋)·ws + c + ⌊j/s⌋])
// for r < rows, c < width; nothing else of out is written. poly is
// readable at every such index, and when width < 16 up to 15 floats past
// each (the lanes of a vector beyond the row, discarded). Same sums as
// depthwise_taps over the flat plane (microkernels_depthwise_rows.inc
// says why this is faster).
struct DepthwiseRowsArgs {
  const float* poly = nullptr;  // sub-plane (0, 0)
  int64_t sub_size = 0;         // floats from one sub-plane to the next
  int64_t ws = 0;               // sub-plane width
  const float* kernel = nullptr;
  int size = 3, stride = 1;
  float bias = 0.f;
  Epilogue epilogue;
  int64_t rows = 0, width = 0;
  float* out = nullptr;
};

// A depthwise conv (one output per input channel, no multiplier) over a
// block of `channels` ≤ Microkernels::depthwise_channel_lanes planes, the
// channels in the vector lanes (microkernels_depthwise_channels.inc): for
// a square kernel of `size` 3 or 5, the same `stride` 1 or 2 along both
// axes, no dilation,
//   out[c·out_plane + r·ow + s] = epilogue(bias[c] + Σ_{i,j}
//       kernel[c·size² + i·size + j] · x[c·in_plane + (r·stride + i − pad_top)·w + s·stride + j − pad_left])
// with x read as 0 outside its h × w plane, for c < channels, r < oh,
// s < ow; nothing else of out is written. Same sums as depthwise_rows.
// The output is made band_rows rows at a time; scratch holds
// DepthwiseChannelsShapeFor(...).total_floats floats; its
// padded image is zeroed when `clear` (the first block on this scratch):
// later blocks of the same shape rewrite only its interior (and its rows
// above or below the input, zeroed again).
struct DepthwiseChannelsArgs {
  const float* x = nullptr;  // the block's first input plane
  int64_t in_plane = 0;      // floats from one input plane to the next
  int64_t h = 0, w = 0;
  int channels = 0;
  const float* kernel = nullptr;  // channels × size × size
  const float* bias = nullptr;    // channels values, or nullptr (0)
  int size = 3, stride = 1;
  int64_t pad_top = 0, pad_left = 0;
  int64_t oh = 0, ow = 0;
  Epilogue epilogue;
  float* scratch = nullptr;
  bool clear = true;
  float* out = nullptr;   // the block's first output plane
  int64_t out_plane = 0;  // floats from one output plane to the next
  int64_t band_rows = 1;
};
// The scratch of depthwise_channels for `lanes` channels, the output made
// `band_rows` rows at a time: the band's zero-padded interleaved input
// image (th × tw pixels of `lanes` floats) and its interleaved outputs,
// then the per-tap weight vectors and the bias.
// f floats rounded up to whole 64-byte lines: the scratch areas below
// start on a line (and a vector) when the scratch does.
inline constexpr int64_t RoundFloats64(int64_t f) { return (f + 15) / 16 * 16; }
struct DepthwiseChannelsShape {
  int64_t band_rows = 0, th = 0, tw = 0;
  int64_t image_floats = 0, out_floats = 0, total_floats = 0;
};
inline DepthwiseChannelsShape DepthwiseChannelsShapeFor(int lanes, int64_t w, int64_t pad_left, int64_t ow, int size,
                                                        int stride, int64_t band_rows) {
  DepthwiseChannelsShape s;
  s.band_rows = band_rows;
  s.tw = std::max<int64_t>((ow - 1) * stride + size, pad_left + w);
  s.th = (band_rows - 1) * stride + size;
  s.image_floats = RoundFloats64(s.th * s.tw * lanes);
  s.out_floats = RoundFloats64(band_rows * ow * lanes);
  s.total_floats = s.image_floats + s.out_floats + RoundFloats64(int64_t{size} * size * lanes + lanes);
  return s;
}
// The most lanes any level has: the conv sizes its scratch for these, so
// what it asks for depends on the shapes only, never on the CPU.
inline constexpr int kDepthwiseMaxLanes = 16;
// The most scratch a conv gives depthwise_channels: its band then stays in
// a core's L2.
inline constexpr int64_t kDepthwiseBandBytes = 96 << 10;
// The most output rows a band may have for the scratch to stay within
// budget_bytes (at least 1, at most oh).
inline int64_t DepthwiseChannelsBandRows(int64_t budget_bytes, int64_t w, int64_t pad_left, int64_t oh, int64_t ow,
                                         int size, int stride) {
  const DepthwiseChannelsShape one = DepthwiseChannelsShapeFor(kDepthwiseMaxLanes, w, pad_left, ow, size, stride, 1);
  const int64_t per_row = (stride * one.tw + ow) * kDepthwiseMaxLanes;
  const int64_t spare = budget_bytes / static_cast<int64_t>(sizeof(float)) - one.total_floats;
  return std::clamp<int64_t>(1 + spare / per_row, 1, std::max<int64_t>(oh, 1));
}
// One group of a grouped conv (cg > 1 input channels per group) with its
// og output channels (a multiple of 16, at most 32) in the vector lanes
// (microkernels_grouped_lanes.inc), no dilation:
//   out[o·out_plane + r·ow + s] = epilogue((Σ_{c,i,j} A[o][(c·kh + i)·kw + j] ·
//       x[c·in_plane + (r·stride + i − pad_top)·w + s·stride + j − pad_left]) + bias[o])
// with x read as 0 outside its h × w plane and the sum over k = (c, i, j)
// in order, one FMA each from 0 (the GEMM path's sums). A is the group's
// packed weight panels (PackedMatrix, k = cg·kh·kw floats × 8 rows each);
// scratch holds GroupedLanesShapeFor(...).total_floats floats, its
// padding zeroed when `clear` (the first group on this scratch).
struct GroupedLanesArgs {
  const float* x = nullptr;  // the group's first input plane
  int64_t in_plane = 0, h = 0, w = 0;
  int64_t cg = 0, og = 0;
  const float* a = nullptr;
  int64_t k = 0;
  const float* bias = nullptr;  // og values, or nullptr (0)
  int kh = 3, kw = 3, stride = 1;
  int64_t pad_top = 0, pad_left = 0;
  int64_t oh = 0, ow = 0;
  Epilogue epilogue;
  float* scratch = nullptr;
  bool clear = true;
  float* out = nullptr;  // the group's first output plane
  int64_t out_plane = 0;
};
// Its scratch: the group's cg zero-padded input planes (th × tw), then the
// outputs pixel-major (oh·ow × og). Shapes only: the same on every level.
struct GroupedLanesShape {
  int64_t th = 0, tw = 0, planes_floats = 0, total_floats = 0;
};
inline GroupedLanesShape GroupedLanesShapeFor(int64_t cg, int64_t og, int64_t h, int64_t w, int64_t pad_top,
                                              int64_t pad_left, int64_t oh, int64_t ow, int kh, int kw, int stride) {
  GroupedLanesShape s;
  s.th = std::max<int64_t>((oh - 1) * stride + kh, pad_top + h);
  s.tw = std::max<int64_t>((ow - 1) * stride + kw, pad_left + w);
  s.planes_floats = RoundFloats64(cg * s.th * s.tw);
  s.total_floats = s.planes_floats + RoundFloats64(oh * ow * og);
  return s;
}
// y[r] = Σ_i a[r·lda + i] · x[i] for r in [0, m): a fully connected layer's
// weight rows against one input row, the weights read in place (each is
// used once per row of input, so packing them would cost more than it saves).
struct DotRowsArgs {
  const float* a = nullptr;
  int64_t lda = 0;
  const float* x = nullptr;
  int64_t k = 0, m = 0;
  float* y = nullptr;
};

// The integer convolution's tile (conv_int8.cc, issue 16 item 1): four
// output rows × 16 columns of
//   acc[r][c] = Σ_j w_lo[j][r] · x[j][2c] + w_hi[j][r] · x[j][2c + 1]
// in int32, exact (the caller keeps |acc| < 2^31: IntegerDotFits), then
//   y[r][c] = fma(float(acc[r][c]), mult[r], bias[r])
// rounded once (std::fma; the firmware's integer conv computes the same
// expression, firmware/mcu_kernels.h), stored for r < rows, c < cols.
// w holds kp × 4 int32, each two int16 weights (low half: even k, high
// half: odd k) of row r at w[4j + r]; x is kp rows of 16 column pairs
// (x[j][2c], x[j][2c + 1] = the column's values at k = 2j, 2j + 1).
struct Int16PairGemmArgs {
  const int32_t* w = nullptr;
  const int16_t* x = nullptr;
  int64_t kp = 0;
  int64_t x_stride = 0;  // int16 values from one k pair's row to the next
  const float* mult = nullptr;
  const float* bias = nullptr;  // 4 values
  float* y = nullptr;
  int64_t ldy = 0;
  int rows = 0, cols = 0;
  // Store acc itself, its int32 bits in y's place (an FDTI partial sum,
  // conv_int8.h), instead of the rounded y.
  bool raw = false;
};
inline constexpr int kInt16PairRows = 4;
inline constexpr int kInt16PairCols = 16;

struct Microkernels {
  Isa isa;
  void (*gemm_panel)(const GemmPanelArgs&);
  void (*depthwise_taps)(const DepthwiseTapArgs&);
  void (*dot_rows)(const DotRowsArgs&);
  // even[i] = src[2i] and odd[i] = src[2i + 1] for the i with those indices
  // < n: one input row of a stride-2 depthwise conv split into its two
  // column phases (conv.cc). Writes nothing past them.
  void (*deinterleave)(const float* src, int64_t n, float* even, float* odd);
  // x[i] = 1 / (1 + e^−x[i]), or x[i] times that (SiLU) when times_input;
  // relative error < 1e-6 (microkernels_logistic.inc).
  void (*logistic)(float* x, int64_t n, bool times_input);
  // Panels one gemm_panel call may take: 0 = any (K-blocked levels, which
  // also take an indirect B, GemmPanelArgs::b_rows), 1 = one.
  int64_t panels_per_call = 1;
  // A level with panels_per_call 0 that runs a GEMM whose A (rows × k) has
  // more floats than this panel by panel instead, each panel over all the
  // columns, when B is in place (not indirect): A then streams from memory
  // once rather than once per column tile. 0: never (always K-blocked).
  // The conv keeps such GEMMs off the indirect path (conv.cc ChooseIndirect).
  int64_t blocked_max_a = 0;
  void (*int16_pair_gemm)(const Int16PairGemmArgs&) = nullptr;
  // acc[i] += k · x[i] for i < n (int32, exact): one tap of the integer
  // depthwise conv over a whole polyphase output plane (conv_int8.cc).
  void (*int16_axpy)(const int16_t* x, int64_t n, int32_t k, int32_t* acc) = nullptr;
  // y[i] = fma(float(acc[i]), mult, bias) for i < n: the integer conv's one
  // rounding (Int16PairGemmArgs).
  void (*requant_row)(const int32_t* acc, int64_t n, float mult, float bias, float* y) = nullptr;
  // acc[r] = Σ_j w_lo[j][r] · x[2j] + w_hi[j][r] · x[2j + 1] for r < 4: four
  // rows of a dense layer's pairs (Int16PairGemmArgs' w layout) against one
  // input column; x holds 2·kp values.
  void (*int16_pair_dot4)(const int32_t* w, const int16_t* x, int64_t kp, int32_t* acc) = nullptr;
  // out[i] = round_half_even(clamp(x[i] · inv, lo, hi)), NaN to lo: values
  // on an 8-bit grid back to their codes less the zero point (conv_int8.h;
  // |lo|, |hi| <= 255).
  void (*codes_of)(const float* x, int64_t n, float inv, float lo, float hi, int16_t* out) = nullptr;
  // y[i] = the value x[i]'s code on an 8-bit grid stands for (a QDQ
  // model's QuantizeDequantize, partition/graph/quantization.h), bit for
  // bit: clamp(round_half_even(x[i] / scale), lo, hi) · scale, NaN to 0,
  // with lo, hi = qmin − zero point, qmax − zero point (whole numbers).
  void (*quantize_dequantize)(const float* x, int64_t n, float scale, float lo, float hi, float* y) = nullptr;
  // acc[i] = Σ_p k_lo[p] · src[2p][i] + k_hi[p] · src[2p + 1][i] for i < n
  // (int32, exact; k[p] holds the int16 pair k_lo | k_hi << 16): every tap
  // of the integer depthwise conv over a whole polyphase output plane at
  // once, summed in registers (conv_int8.cc; replaces an int16_axpy per tap).
  // May read up to 15 values past src[t] + n (the caller's scratch has them).
  void (*int16_tap_pairs)(const int16_t* const* src, const int32_t* k, int64_t pairs, int64_t n,
                          int32_t* acc) = nullptr;
  // dst[i] = std::max(a[i], b[i]) for i < n, NaN as std::max has it (a NaN
  // b keeps a); dst may be a or b. Max pooling's row and column passes
  // (pool.cc).
  void (*max_of)(float* dst, const float* a, const float* b, int64_t n) = nullptr;
  // DepthwiseRowsArgs: a 3x3 or 5x5, stride 1 or 2 depthwise plane.
  void (*depthwise_rows)(const DepthwiseRowsArgs&) = nullptr;
  // out[o] = std::max(std::max(v[2o], v[2o + 1]), v[2o + 2]) for o < n:
  // max pooling's column pass for 3-wide windows at stride 2 (pool.cc),
  // in registers instead of a deinterleave and two max_of passes. Reads
  // v[0 .. 2n] only; writes nothing past out[n − 1].
  void (*max3_stride2)(const float* v, int64_t n, float* out) = nullptr;
  // DepthwiseChannelsArgs: blocks of up to depthwise_channel_lanes
  // channels of a 3x3 or 5x5, stride 1 or 2 depthwise conv.
  void (*depthwise_channels)(const DepthwiseChannelsArgs&) = nullptr;
  int depthwise_channel_lanes = 0;
  // GroupedLanesArgs: one group of a grouped conv, output channels in the
  // lanes (nullptr: the level has none; the conv takes its GEMM path).
  void (*grouped_lanes)(const GroupedLanesArgs&) = nullptr;
};

// The microkernels of `isa`. REQUIRES: the CPU supports it (isa.h refuses
// to activate a level it does not).
const Microkernels& MicrokernelsFor(Isa isa);

// Per level; defined in microkernels_<level>.cc (x86-64 only for avx*).
const Microkernels& BaselineMicrokernels();
const Microkernels& Avx2Microkernels();
const Microkernels& Avx512Microkernels();

}  // namespace tessera
