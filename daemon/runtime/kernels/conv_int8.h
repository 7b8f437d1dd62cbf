// The integer path of the Conv kernel (issue 16 item 1): a conv on an 8-bit
// grid's codes with int8 weights sums in int32 and rounds once
// (partition/graph/int8_weights.h "Integer convolution" gives the formula,
// which the MCU firmware computes too). conv.cc picks it in Prepare when
// IntegerConvInputGrid says the conv qualifies and the weights have an int8
// form; the float path otherwise.
//
// Per image: the input is read back into its codes less the zero point
// (int16, one pass; every value is on the grid by construction, so the
// product x · (1/scale) is within 1e-4 of an integer), then
//  * pair path: per group and block of output columns an im2col of those
//    codes, two k at a time (Int16PairGemmArgs' layout), and the ISA's
//    Int16PairGemm over four output channels × 16 columns at a time, which
//    also applies the one rounding;
//  * direct path (one input channel per output: depthwise): per output
//    channel, the zero-padded plane split into its stride's polyphase
//    planes (so every tap reads with stride 1), every tap summed at once
//    over the whole output plane (Int16TapPairs, two taps per vpmaddwd;
//    one Int16Axpy per tap for kernels over 64 taps), then RequantRow per row;
//  * dense path (one pixel in and out): dot products over the codes.
// The fused activation follows on each block while it is in cache.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/runtime/kernels/kernel.h"
#include "daemon/runtime/kernels/microkernels.h"
#include "partition/graph/quantization.h"

namespace tessera {

// A 2-D conv's geometry as conv.cc resolved it (pads after auto_pad).
struct ConvGeometry {
  int64_t n = 1, c = 0, h = 0, w = 0, o = 0, group = 1, cg = 0, og = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0;
  int64_t oh = 0, ow = 0;
};

class Int8Conv {
 public:
  // Reads the weights (constant input 1, streamed or not) into int16 pairs;
  // false when some output channel's weights have no int8 form (the caller
  // takes the float path). With ctx.shapes_only it reads nothing and
  // answers true: the sizes are those of the integer path.
  // An FDTI / FDT2 partial conv (attr "integer_partial", program_compiler.h
  // CompileOptions::integer_partial_sums) writes each sum's int32 bits
  // instead (no bias, no activation: the merge rounds once), its codes
  // counted in the full rows' scales (attr "int8_row_scales"); weights
  // without that form are an error there, not a float fallback.
  Result<bool> Prepare(const KernelContext& ctx, const ConvGeometry& geometry, const QuantGrid& input_grid,
                       const FusedActivation& activation);
  size_t ScratchBytes() const;
  size_t OwnedWeightBytes() const { return owned_bytes_; }
  size_t PrepareTransientBytes() const { return transient_bytes_; }
  // inputs[2], when given, is the bias.
  void Eval(const EvalContext& ctx) const;

  // The weights as Eval reads them, shared through WeightForms.
  struct Form {
    std::vector<int32_t> pairs;  // [group][og rounded up to 4 / 4][kp][4] (pair path)
    std::vector<int32_t> taps;   // [o][kh·kw] (direct path)
    std::vector<float> mult;     // per output channel: input scale · weight scale
    bool exact = true;           // every row had an int8 form
  };

 private:
  int64_t ColumnsPerBlock() const;
  int64_t CodeScratchValues() const;  // int16 values of one image's codes, rounded to 32
  int64_t PairScratchValues() const;  // int16 values of one thread's pair block
  void BuildPairs(const int16_t* codes, int64_t p0, int64_t cols, int16_t* xp) const;
  // One input channel per output channel (depthwise): per output channel,
  // its padded input plane in polyphase planes and every tap summed over
  // the whole output plane (int16_tap_pairs), no im2col.
  void EvalDirect(const int16_t* codes, const float* bias, float* y, int threads, int16_t* scratch) const;
  int64_t DirectScratchValues() const;  // int16 per thread: phase planes, 16 of slack, the int32 sums
  // One pixel in, one out (a dense layer, or a 1x1 conv of a 1x1 map):
  // dot products over the codes as they are.
  void EvalDense(const int16_t* codes, const float* bias, float* y) const;

  ConvGeometry g_;
  int64_t k_ = 0, kp_ = 0, row_blocks_ = 0, block_cols_ = 16;
  float inv_scale_ = 1.0f;
  float lo_ = 0.0f, hi_ = 0.0f;  // codes less the zero point: qmin − z, qmax − z
  int prepared_threads_ = 1;
  bool has_bias_ = false;
  bool raw_ = false;  // an integer partial sum
  bool direct_ = false, dense_ = false;
  int64_t phase_h_ = 0, phase_w_ = 0;  // the direct path's polyphase planes
  FusedActivation act_;
  std::shared_ptr<const Form> form_;
  size_t owned_bytes_ = 0, transient_bytes_ = 0;
  const Microkernels* microkernels_ = nullptr;
};

}  // namespace tessera
