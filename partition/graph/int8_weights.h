// Weights a QDQ model holds as int8 codes, found again in their float32
// values (issue 16 items 1 and 3: weights kept in an MCU's flash as int8).
//
// tessera imports a quantized model's weights dequantized (quantization.h):
// each value is float(k · s) for an integer code k (k = q − zero point) and
// its output channel's scale s. RecoverInt8Rows finds, for each row (one
// output channel), a scale s' and codes k in [−128, 127] such that
// float(k) · s' reproduces every value *bit for bit* in float32
// arithmetic; s' need not be the model's s, any s' that reproduces the
// values serves. A row it cannot reproduce so (a float model's weights, a
// NaN, a −0.0) makes the whole tensor stay float32. So a kernel that
// multiplies its code by its row's scale before using it computes with
// exactly the float weights the host executor uses. An MCU's flash holds
// its layers' weights (METHODS §5 feasibility); in this form a QDQ model's
// take about a quarter of the flash.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "partition/graph/graph.h"
#include "partition/graph/quantization.h"

namespace tessera {

struct Int8Rows {
  std::vector<float> scales;  // one per row
  std::vector<int8_t> codes;  // rows × per, row-major
  // What the codes take with their scales: 4 B per row, 1 B per value
  // (rounded up to whole 4-byte words, as a program stores them).
  int64_t bytes() const {
    return Int8RowsBytes(static_cast<int64_t>(scales.size()), static_cast<int64_t>(codes.size()));
  }
  static int64_t Int8RowsBytes(int64_t rows, int64_t values) { return 4 * rows + (values + 3) / 4 * 4; }
};

// `values` holds rows × per floats, row-major. nullopt when some row has
// no exact int8 form (or rows/per is 0).
std::optional<Int8Rows> RecoverInt8Rows(const float* values, int64_t rows, int64_t per);

// The int8 form when there is one and it is smaller than float32 (not with
// one value per row: 4 + 1 B against 4): what an MCU program stores.
std::optional<Int8Rows> SmallerAsInt8(const float* values, int64_t rows, int64_t per);

// The bytes `values` take in an MCU program: Int8Rows::bytes() of
// SmallerAsInt8, else 4 per value.
int64_t CompactWeightBytes(const float* values, int64_t rows, int64_t per);

// ---- Integer convolution (issue 16 item 1) ---------------------------------
// A Conv — or a dense layer (Gemm), a 1x1 conv of one pixel — whose input a
// QuantizeDequantize of an 8-bit grid produces (directly or through
// Reshape / Flatten / Identity), with
// int8 weights (per output channel: codes k and scale s_w, as
// RecoverInt8Rows finds them), computes each output in integers and rounds
// once, on the host (daemon/runtime/kernels/conv_int8.cc) and in the MCU
// firmware (firmware/mcu_kernels.h) alike:
//   acc = Σ k · (q − z)                                  (int32, exact)
//   y   = fma(float(acc), s_x · s_w, bias)               (one rounding)
// then the fused activation; q − z are the input's codes less its zero
// point. The sum being exact, every order of it — a tile, a slice of
// output channels, another machine — gives the same y, bit for bit.

// Terms a sum may have: |acc| ≤ 65535 · 255 · 128 < 2^31.
inline constexpr int64_t kMaxIntegerDotTerms = 65535;

// Whether weights of `rows` output channels × `per` values run as int8
// codes: what SmallerAsInt8 asks of the shape (smaller than float32, at
// most kMaxIntegerDotTerms a row). The MCU builder stores int8 weights, and
// the host runs the integer conv, under the same condition.
bool Int8WeightShapeFits(int64_t rows, int64_t per);

// The 8-bit grid of `conv`'s input when the conv runs in integers: conv is
// a Conv with a constant 4-D weight whose shape fits (Int8WeightShapeFits),
// or a canonical Gemm with a constant [out, in] weight that fits and a bias
// of one value per output,
// and its input is produced by a QuantizeDequantize of an 8-bit grid
// (ByteGrid) — found in `g`, or carried by the conv's attrs int8_input_*
// (a device program's copy of the conv, whose input's producer runs
// elsewhere: SetConvInputGrid). Whether the weights have an int8 form is
// for the caller to find (RecoverInt8Rows). nullopt otherwise.
std::optional<QuantGrid> IntegerConvInputGrid(const Graph& g, const Node& conv);
// The byte grid of conv's input alone (attrs, else its producer in g).
std::optional<QuantGrid> ConvInputByteGrid(const Graph& g, const Node& conv);
// Records `grid` in conv's attrs int8_input_scale / _zero_point / _qmin /
// _qmax, for the conv copied into a device program (program_compiler.cc).
void SetConvInputGrid(const QuantGrid& grid, Node* conv);

// `g` with every Conv and Gemm weight put on a symmetric int8 grid per
// output channel (scale = max |w| / 127, codes in [-127, 127]), the way
// `tessera quantize` quantizes weights, and held as a QDQ model's are after
// import (dequantized float32): the tests' and benches' quantized models
// built in memory.
Graph WithInt8GridWeights(Graph g);

// `src` as a QDQ model's graph (partition/graph/quantization.h): a
// QuantizeDequantize after its input and after every node, on assorted
// grids — int8 and uint8, zero points inside and at the edge of the range,
// scales of 0.011 … 0.039 so that larger values saturate. For the tests
// and benches of int8 activations (mcu_program.h version 5); not
// calibrated: `tessera quantize` makes real models.
Graph WithQdqActivations(const Graph& src);

}  // namespace tessera
