// Linear quantization as ONNX defines it (QuantizeLinear / DequantizeLinear,
// issue 16 item 1), shared by the importer's constant folds, the
// QuantizeDequantize kernel and `tessera quantize`, so that all three round
// the same way:
//   q = saturate(round_half_to_even(x / scale) + zero_point, qmin, qmax)
//   x' = (q - zero_point) * scale                       (float32 arithmetic)
// int8 is [-128, 127], uint8 [0, 255], int32 (biases) its full range.
//
// How tessera runs a quantized (QDQ) model today: a tensor that ONNX holds as
// int8 codes is held as the float32 value those codes stand for, x', and the
// canonical op QuantizeDequantize (graph.h) puts a float tensor on its grid.
// Weights are dequantized once at import. Every op then computes on exactly
// the values an int8 runtime dequantizes to; where an int8 runtime rounds
// differently inside an op (its int32 accumulator requantized with a float
// multiplier), the two answers differ by at most one step of the output's
// grid (one LSB). Storage and transfers are still float32.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

namespace tessera {

struct QuantGrid {
  float scale = 1.0f;
  int32_t zero_point = 0;
  int32_t qmin = -128;
  int32_t qmax = 127;
};

// The integer code of `x` on `g`. std::nearbyint rounds half to even in the
// default floating-point environment, as ONNX requires; NaN saturates to
// qmin's side like a cast would not, so it is mapped to the zero point.
inline int32_t QuantizeToCode(float x, const QuantGrid& g) {
  const float r = std::nearbyint(x / g.scale);
  if (!(r == r)) return g.zero_point;  // NaN
  const float lo = static_cast<float>(g.qmin - g.zero_point), hi = static_cast<float>(g.qmax - g.zero_point);
  const float c = r < lo ? lo : (r > hi ? hi : r);
  return static_cast<int32_t>(c) + g.zero_point;
}

inline float DequantizeCode(int32_t q, const QuantGrid& g) { return static_cast<float>(q - g.zero_point) * g.scale; }

// x put on the grid: DequantizeCode(QuantizeToCode(x)).
inline float QuantizeDequantize(float x, const QuantGrid& g) { return DequantizeCode(QuantizeToCode(x, g), g); }

// A grid whose codes fit one byte: a positive finite scale, qmin <= zero
// point <= qmax, at most 256 codes; else nullopt. A tensor on such a grid is
// held and moved as one byte a value, q - qmin (ByteCode): in an MCU's RAM
// and on its UARTs (transport/wire/mcu_program.h version 5), and in the
// messages between any two devices (partition/compile/device_program.h
// WireGrid): a quarter of its float bytes, issue 16 item 1.
inline std::optional<QuantGrid> ByteGrid(const std::optional<QuantGrid>& grid) {
  if (!grid) return std::nullopt;
  const QuantGrid& g = *grid;
  if (!(g.scale > 0) || !std::isfinite(g.scale) || g.qmin > g.zero_point || g.zero_point > g.qmax ||
      int64_t{g.qmax} - g.qmin > 255)
    return std::nullopt;
  return grid;
}

// The byte of x on a ByteGrid, and the float a byte stands for. For x on the
// grid (a QuantizeDequantize's output) ByteValue(ByteCode(x)) == x exactly.
inline uint8_t ByteCode(float x, const QuantGrid& g) { return static_cast<uint8_t>(QuantizeToCode(x, g) - g.qmin); }
inline float ByteValue(uint8_t code, const QuantGrid& g) { return DequantizeCode(int32_t{code} + g.qmin, g); }

}  // namespace tessera
