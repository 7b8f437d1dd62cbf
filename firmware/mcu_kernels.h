// Reference float32 kernels of the MCU worker and the program interpreter.
// Header-only, freestanding, no allocation: compiled into the Cortex-M
// firmware and into host tests, which compare them with the host executor's
// kernels (daemon/kernels) on the same inputs. Plain loops in NCHW order —
// the MCU has no cache to block for; what matters is no hidden memory.
#pragma once

#include <stdint.h>

#include "transport/wire/mcu_program.h"

namespace tessera::mcu {

inline float ApplyActivation(float v, uint32_t act) { return (act == kActRelu && v < 0.0f) ? 0.0f : v; }

// x on the grid q (kOpQuantize without an output grid): what the host's
// QuantizeDequantize computes (partition/graph/quantization.h), bit for bit.
inline float QuantizeDequantizeValue(float x, const float* q) { return QuantizeSteps(x, q) * q[0]; }

// Activations as the kernels read them (mcu_program.h, version 5): a float
// tensor, or int8 codes a reader decodes to float(q - zero_point) · scale
// (DecodeCode). Indexed like a float pointer, offsets may be negative (a
// conv's row pointer left of a padded edge).
struct FloatIn {
  const float* p;
  float operator[](int32_t i) const { return p[i]; }
  FloatIn operator+(int32_t n) const { return {p + n}; }
};
struct CodeIn {
  const uint8_t* p;
  int32_t off;  // qmin - zero point
  float scale;
  float operator[](int32_t i) const { return float(int32_t(p[i]) + off) * scale; }
  CodeIn operator+(int32_t n) const { return {p + n, off, scale}; }
};
inline CodeIn CodesAt(const uint8_t* p, const float* grid) { return {p, int32_t(grid[2]) - int32_t(grid[1]), grid[0]}; }

// Where a layer writes: floats, or codes on a grid (the QuantizeDequantize
// fused into the layer: EncodeCode of the value the float path stores).
// One test per stored value, none in the inner loops.
__attribute__((noinline)) inline void StoreCode(uint8_t* q, uint32_t i, float v, const float* grid) {
  q[i] = EncodeCode(v, grid);
}
struct Out {
  float* f;
  uint8_t* q;
  const float* grid;
  void Put(uint32_t i, float v) const {
    if (q) {
      StoreCode(q, i, v, grid);  // out of line: one copy, not one per kernel and store
    } else {
      f[i] = v;
    }
  }
  Out operator+(uint32_t n) const { return q ? Out{nullptr, q + n, grid} : Out{f + n, nullptr, grid}; }
};
// Floats only, no test per value (the float pointwise kernel's stores).
struct FloatOut {
  float* f;
  void Put(uint32_t i, float v) const { f[i] = v; }
};

// The region's byte `offset` as floats / bytes; a layer's operands.
inline float* FloatsAt(float* act, uint32_t offset) {
  return reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(act) + offset);
}
inline uint8_t* BytesAt(float* act, uint32_t offset) { return reinterpret_cast<uint8_t*>(act) + offset; }
// Int32 sums (kInt32Sums) are an Out of floats whose `grid` is set: the
// integer kernels store their sums' bits there (PutSum); nothing else
// writes sums (ValidateProgram).
inline Out OutAt(const ProgramView& p, float* act, uint32_t offset, uint32_t grid) {
  if (grid >= kInt32Sums) return {FloatsAt(act, offset), nullptr, grid == kInt32Sums ? p.weights : nullptr};
  return {nullptr, BytesAt(act, offset), p.weights + grid};
}
// Element k of an operand, either form (elementwise layers).
__attribute__((noinline)) inline float LoadAny(const ProgramView& p, float* act, uint32_t offset, uint32_t grid,
                                               uint32_t k) {
  return grid == kNoWeights ? FloatsAt(act, offset)[k] : DecodeCode(BytesAt(act, offset)[k], p.weights + grid);
}

// Taps k in [0, taps) whose input position base + k·step lies in [0, size):
// [*lo, *hi) (empty when *hi <= *lo).
inline void ValidTaps(int32_t base, int32_t step, int32_t size, int32_t taps, int32_t* lo, int32_t* hi) {
  *lo = base >= 0 ? 0 : (-base + step - 1) / step;
  *hi = size - 1 - base < 0 ? 0 : (size - 1 - base) / step + 1;
  if (*hi > taps) *hi = taps;
}

// Weights as the kernels read them (mcu_program.h WeightFormat): Rows(o)
// is output channel o's weights, a row indexed like a float pointer.
// Float32 rows are the floats; int8 rows give float(code) · scale, the very
// float the host checked each code and scale reproduce
// (partition/graph/int8_weights.h), so both forms sum the same values.
struct FloatRow {
  const float* w;
  float operator[](uint32_t i) const { return w[i]; }
  FloatRow operator+(uint32_t n) const { return {w + n}; }
};
struct FloatWeights {
  const float* w;
  uint32_t per;  // weights per output channel
  FloatRow Row(uint32_t o) const { return {w + o * per}; }
  FloatWeights From(uint32_t o) const { return {w + o * per, per}; }
};
struct Int8Row {
  const int8_t* k;
  float scale;
  float operator[](uint32_t i) const { return float(k[i]) * scale; }
  Int8Row operator+(uint32_t n) const { return {k + n, scale}; }
};
struct Int8Weights {
  const float* scales;  // per output channel; the codes follow the oc scales
  const int8_t* codes;
  uint32_t per;
  Int8Row Row(uint32_t o) const { return {codes + o * per, scales[o]}; }
  Int8Weights From(uint32_t o) const { return {scales + o, codes + o * per, per}; }
};

// One pixel of a 1x1 conv: dst[o·ds] = act(b[o] + Σ_c x[c·xs] · w[o, c])
// for every output channel o, four at a time (each x loaded once for four
// multiply-adds), channels summed in order.
template <class Weights, class In, class Dst>
__attribute__((always_inline)) inline void PointwisePixelImpl(const Layer& l, In x, int32_t xs, const Weights& w,
                                                              const float* b, const Dst& dst, uint32_t ds) {
  const int32_t C = int32_t(l.c);
  uint32_t o = 0;
  for (; o + 4 <= l.oc; o += 4) {
    const auto w0 = w.Row(o), w1 = w.Row(o + 1), w2 = w.Row(o + 2), w3 = w.Row(o + 3);
    float a0 = b ? b[o] : 0.0f, a1 = b ? b[o + 1] : 0.0f, a2 = b ? b[o + 2] : 0.0f, a3 = b ? b[o + 3] : 0.0f;
    for (int32_t c = 0; c < C; ++c) {
      const float v = x[c * xs];
      a0 += v * w0[uint32_t(c)];
      a1 += v * w1[uint32_t(c)];
      a2 += v * w2[uint32_t(c)];
      a3 += v * w3[uint32_t(c)];
    }
    dst.Put(o * ds, ApplyActivation(a0, l.activation));
    dst.Put((o + 1) * ds, ApplyActivation(a1, l.activation));
    dst.Put((o + 2) * ds, ApplyActivation(a2, l.activation));
    dst.Put((o + 3) * ds, ApplyActivation(a3, l.activation));
  }
  for (; o < l.oc; ++o) {
    const auto wo = w.Row(o);
    float acc = b ? b[o] : 0.0f;
    for (int32_t c = 0; c < C; ++c) acc += x[c * xs] * wo[uint32_t(c)];
    dst.Put(o * ds, ApplyActivation(acc, l.activation));
  }
}

// A 1x1 conv (mcu_program.h IsPointwise), a pixel at a time. Every output
// still sums bias, then its input channels in order, as the general loop
// below does.
// Float weights on float inputs inline (the hot loop of MLPerf's float
// DS-CNN); the other forms in one shared out-of-line copy each: the
// firmware's code stays inside kFirmwareFlashBytes.
inline void PointwisePixel(const Layer& l, FloatIn x, int32_t xs, const FloatWeights& w, const float* b, const Out& dst,
                           uint32_t ds) {
  if (dst.q) {
    PointwisePixelImpl(l, x, xs, w, b, dst, ds);
  } else {
    PointwisePixelImpl(l, x, xs, w, b, FloatOut{dst.f}, ds);
  }
}
template <class Weights, class In>
__attribute__((noinline)) void PointwisePixel(const Layer& l, In x, int32_t xs, const Weights& w, const float* b,
                                              const Out& dst, uint32_t ds) {
  PointwisePixelImpl(l, x, xs, w, b, dst, ds);
}

template <class Weights, class In>
inline void PointwiseConv(const Layer& l, In in, const Weights& w, const float* b, const Out& out) {
  const uint32_t plane = l.h * l.w;
  for (uint32_t p = 0; p < plane; ++p) PointwisePixel(l, in + int32_t(p), int32_t(plane), w, b, out + p, plane);
}

// Per output value: bias, then input channels in order, each over its valid
// taps row by row (the padding's taps add nothing and are not visited), so
// the inner loop has no bounds test (bench/mcu: MLPerf's DS-CNN 26.9 ->
// 21.3 M instructions; its 10x4 conv 20.9 -> 9.5 per MAC).
// Not inlined into its callers (ConvInPlace, RunWeighted): one copy per
// weight and input form keeps the firmware's code inside kFirmwareFlashBytes.
template <class Weights, class In>
__attribute__((noinline)) void Conv(const Layer& l, In in, const Weights& w, const float* b, const Out& out) {
  if (IsPointwise(l)) {
    PointwiseConv(l, in, w, b, out);
    return;
  }
  const int32_t cg = int32_t(l.c / l.group), og = int32_t(l.oc / l.group);
  const int32_t H = int32_t(l.h), W = int32_t(l.w), KH = int32_t(l.kh), KW = int32_t(l.kw);
  const int32_t dh = int32_t(l.dh), dw = int32_t(l.dw);
  const int32_t plane_size = H * W;
  const uint32_t taps = uint32_t(KH * KW);
  // Output columns whose taps all lie inside the row: no division for them.
  const int32_t sw = int32_t(l.sw), pl = int32_t(l.pad_left);
  const int32_t span = W - 1 - (KW - 1) * dw + pl;
  const int32_t inner_lo = (pl + sw - 1) / sw;
  int32_t inner_hi = span < 0 ? 0 : span / sw + 1;
  if (inner_hi > int32_t(l.ow)) inner_hi = int32_t(l.ow);
  for (int32_t oc = 0; oc < int32_t(l.oc); ++oc) {
    const int32_t g = oc / og;
    const auto wo = w.Row(uint32_t(oc));
    const In planes = in + g * cg * plane_size;
    for (int32_t oy = 0; oy < int32_t(l.oh); ++oy) {
      const int32_t iy0 = oy * int32_t(l.sh) - int32_t(l.pad_top);
      int32_t ky_lo, ky_hi;
      ValidTaps(iy0, dh, H, KH, &ky_lo, &ky_hi);
      // One input channel per output, 3x3, undilated, all rows inside: the
      // inner columns take their nine taps unrolled with the weights in
      // registers (depthwise convs; same order of sums as the loop below).
      const bool unrolled = cg == 1 && KH == 3 && KW == 3 && dh == 1 && dw == 1 && ky_lo == 0 && ky_hi == 3;
      const float w0 = unrolled ? wo[0] : 0.0f, w1 = unrolled ? wo[1] : 0.0f, w2 = unrolled ? wo[2] : 0.0f;
      const float w3 = unrolled ? wo[3] : 0.0f, w4 = unrolled ? wo[4] : 0.0f, w5 = unrolled ? wo[5] : 0.0f;
      const float w6 = unrolled ? wo[6] : 0.0f, w7 = unrolled ? wo[7] : 0.0f, w8 = unrolled ? wo[8] : 0.0f;
      const float bias = b ? b[oc] : 0.0f;
      const Out out_row = out + (uint32_t(oc) * l.oh + uint32_t(oy)) * l.ow;
      for (int32_t ox = 0; ox < int32_t(l.ow); ++ox) {
        const int32_t ix0 = ox * sw - pl;
        if (unrolled && ox >= inner_lo && ox < inner_hi) {
          const In r0 = planes + (iy0 * W + ix0);
          const In r1 = r0 + W;
          const In r2 = r1 + W;
          float acc = bias;
          acc += r0[0] * w0;
          acc += r0[1] * w1;
          acc += r0[2] * w2;
          acc += r1[0] * w3;
          acc += r1[1] * w4;
          acc += r1[2] * w5;
          acc += r2[0] * w6;
          acc += r2[1] * w7;
          acc += r2[2] * w8;
          out_row.Put(uint32_t(ox), ApplyActivation(acc, l.activation));
          continue;
        }
        int32_t kx_lo = 0, kx_hi = KW;
        if (ox < inner_lo || ox >= inner_hi) ValidTaps(ix0, dw, W, KW, &kx_lo, &kx_hi);
        float acc = bias;
        for (int32_t ic = 0; ic < cg; ++ic) {
          const In plane = planes + ic * plane_size;
          const auto wk = wo + uint32_t(ic) * taps;
          for (int32_t ky = ky_lo; ky < ky_hi; ++ky) {
            const In row = plane + ((iy0 + ky * dh) * W + ix0);
            const auto wr = wk + uint32_t(ky * KW);
            for (int32_t kx = kx_lo; kx < kx_hi; ++kx) acc += row[kx * dw] * wr[uint32_t(kx)];
          }
        }
        out_row.Put(uint32_t(ox), ApplyActivation(acc, l.activation));
      }
    }
  }
}

// ---- Integer convolution (issue 16 item 1) --------------------------------
// int8 weights on codes, a conv or a dense layer: each output sums
// k · (q − z) in int32, exactly,
// and rounds once, y = fma(float(acc), s_x · s_w, bias) — the formula of
// partition/graph/int8_weights.h, which the host's conv computes too
// (daemon/runtime/kernels/conv_int8.h). The sum being exact, its order does
// not matter: the answers are the host's bit for bit. The builder stores
// int8 weights only for rows of at most kMaxIntegerDotTerms values, so the
// sum cannot overflow.
inline float IntegerOut(int32_t acc, float mult, float bias) { return __builtin_fmaf(float(acc), mult, bias); }
// Stores an integer kernel's sum: rounded once with its bias and activation,
// or, into int32 sums, as the sum itself (an FDTI slice's partial sum).
__attribute__((noinline)) inline void PutSum(const Out& o, uint32_t i, int32_t acc, float mult, float bias,
                                             uint32_t act) {
  if (!o.q && o.grid) {
    memcpy(o.f + i, &acc, 4);
    return;
  }
  o.Put(i, ApplyActivation(IntegerOut(acc, mult, bias), act));
}

// One pixel of a 1x1 conv on codes, four output channels at a time.
__attribute__((noinline)) inline void PointwisePixel(const Layer& l, CodeIn x, int32_t xs, const Int8Weights& w,
                                                     const float* b, const Out& dst, uint32_t ds) {
  const int32_t C = int32_t(l.c);
  uint32_t o = 0;
  for (; o + 4 <= l.oc; o += 4) {
    const int8_t *k0 = w.codes + o * w.per, *k1 = k0 + w.per, *k2 = k1 + w.per, *k3 = k2 + w.per;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int32_t c = 0; c < C; ++c) {
      const int32_t v = int32_t(x.p[c * xs]) + x.off;
      a0 += v * k0[c];
      a1 += v * k1[c];
      a2 += v * k2[c];
      a3 += v * k3[c];
    }
    for (uint32_t i = 0; i < 4; ++i) {
      const int32_t a = i == 0 ? a0 : (i == 1 ? a1 : (i == 2 ? a2 : a3));
      PutSum(dst, (o + i) * ds, a, x.scale * w.scales[o + i], b ? b[o + i] : 0.0f, l.activation);
    }
  }
  for (; o < l.oc; ++o) {
    const int8_t* k = w.codes + o * w.per;
    int32_t a = 0;
    for (int32_t c = 0; c < C; ++c) a += (int32_t(x.p[c * xs]) + x.off) * k[c];
    PutSum(dst, o * ds, a, x.scale * w.scales[o], b ? b[o] : 0.0f, l.activation);
  }
}

// Any conv on codes, per output value over its valid taps: Conv's loop in
// integers (interior columns without a division, 3x3 depthwise rows
// unrolled with the weights in registers).
__attribute__((noinline)) inline void Conv(const Layer& l, CodeIn in, const Int8Weights& w, const float* b,
                                           const Out& out) {
  if (IsPointwise(l)) {
    const uint32_t plane = l.h * l.w;
    for (uint32_t p = 0; p < plane; ++p) PointwisePixel(l, in + int32_t(p), int32_t(plane), w, b, out + p, plane);
    return;
  }
  const int32_t cg = int32_t(l.c / l.group), og = int32_t(l.oc / l.group);
  const int32_t H = int32_t(l.h), W = int32_t(l.w), KH = int32_t(l.kh), KW = int32_t(l.kw);
  const int32_t dh = int32_t(l.dh), dw = int32_t(l.dw), sw = int32_t(l.sw), pl = int32_t(l.pad_left);
  const int32_t plane_size = H * W;
  const int32_t taps = KH * KW;
  const int32_t span = W - 1 - (KW - 1) * dw + pl;
  const int32_t inner_lo = (pl + sw - 1) / sw;
  int32_t inner_hi = span < 0 ? 0 : span / sw + 1;
  if (inner_hi > int32_t(l.ow)) inner_hi = int32_t(l.ow);
  const int32_t off = in.off;
  for (int32_t oc = 0; oc < int32_t(l.oc); ++oc) {
    const int8_t* wo = w.codes + uint32_t(oc) * w.per;
    const float mult = in.scale * w.scales[oc];
    const float bias = b ? b[oc] : 0.0f;
    const uint8_t* planes = in.p + (oc / og) * cg * plane_size;
    // Σ k · (p + off) over all nine taps = Σ k · p + off · Σ k.
    const int32_t w0 = wo[0], w1 = taps > 1 ? wo[1] : 0, w2 = taps > 2 ? wo[2] : 0, w3 = taps > 3 ? wo[3] : 0;
    const int32_t w4 = taps > 4 ? wo[4] : 0, w5 = taps > 5 ? wo[5] : 0, w6 = taps > 6 ? wo[6] : 0;
    const int32_t w7 = taps > 7 ? wo[7] : 0, w8 = taps > 8 ? wo[8] : 0;
    const int32_t all9 = off * (w0 + w1 + w2 + w3 + w4 + w5 + w6 + w7 + w8);
    for (int32_t oy = 0; oy < int32_t(l.oh); ++oy) {
      const int32_t iy0 = oy * int32_t(l.sh) - int32_t(l.pad_top);
      int32_t ky_lo, ky_hi;
      ValidTaps(iy0, dh, H, KH, &ky_lo, &ky_hi);
      const bool unrolled = cg == 1 && KH == 3 && KW == 3 && dh == 1 && dw == 1 && ky_lo == 0 && ky_hi == 3;
      const Out out_row = out + (uint32_t(oc) * l.oh + uint32_t(oy)) * l.ow;
      for (int32_t ox = 0; ox < int32_t(l.ow); ++ox) {
        const int32_t ix0 = ox * sw - pl;
        if (unrolled && ox >= inner_lo && ox < inner_hi) {
          const uint8_t* r0 = planes + (iy0 * W + ix0);
          const uint8_t* r1 = r0 + W;
          const uint8_t* r2 = r1 + W;
          const int32_t acc = all9 + r0[0] * w0 + r0[1] * w1 + r0[2] * w2 + r1[0] * w3 + r1[1] * w4 + r1[2] * w5 +
                              r2[0] * w6 + r2[1] * w7 + r2[2] * w8;
          PutSum(out_row, uint32_t(ox), acc, mult, bias, l.activation);
          continue;
        }
        int32_t kx_lo = 0, kx_hi = KW;
        if (ox < inner_lo || ox >= inner_hi) ValidTaps(ix0, dw, W, KW, &kx_lo, &kx_hi);
        int32_t acc = 0;
        for (int32_t ic = 0; ic < cg; ++ic) {
          const uint8_t* plane = planes + ic * plane_size;
          const int8_t* wk = wo + ic * taps;
          for (int32_t ky = ky_lo; ky < ky_hi; ++ky) {
            const uint8_t* row = plane + (iy0 + ky * dh) * W + ix0;
            const int8_t* wr = wk + ky * KW;
            for (int32_t kx = kx_lo; kx < kx_hi; ++kx) acc += (int32_t(row[kx * dw]) + off) * wr[kx];
          }
        }
        PutSum(out_row, uint32_t(ox), acc, mult, bias, l.activation);
      }
    }
  }
}

// A dense layer on codes with int8 weights: the same integer sum.
__attribute__((noinline)) inline void Dense(const Layer& l, CodeIn in, const Int8Weights& w, const float* b,
                                            const Out& out) {
  const uint32_t n = l.c * l.h * l.w;
  for (uint32_t o = 0; o < l.oc; ++o) {
    const int8_t* k = w.codes + o * w.per;
    int32_t acc = 0;
    for (uint32_t i = 0; i < n; ++i) acc += (int32_t(in.p[i]) + in.off) * k[i];
    PutSum(out, o, acc, in.scale * w.scales[o], b ? b[o] : 0.0f, l.activation);
  }
}

template <class Weights, class In>
inline void Dense(const Layer& l, In in, const Weights& w, const float* b, const Out& out) {
  const uint32_t n = l.c * l.h * l.w;
  for (uint32_t o = 0; o < l.oc; ++o) {
    float acc = b ? b[o] : 0.0f;
    const auto row = w.Row(o);
    for (uint32_t i = 0; i < n; ++i) acc += row[i] * in[int32_t(i)];
    out.Put(o, ApplyActivation(acc, l.activation));
  }
}

template <class In>
void Pool(const Layer& l, In in, const Out& out, bool max) {
  const int32_t H = int32_t(l.h), W = int32_t(l.w);
  for (uint32_t c = 0; c < l.c; ++c) {
    const In plane = in + int32_t(c * l.h * l.w);
    for (int32_t oy = 0; oy < int32_t(l.oh); ++oy) {
      for (int32_t ox = 0; ox < int32_t(l.ow); ++ox) {
        float acc = max ? -3.4028235e38f : 0.0f;
        int32_t n = 0, window = 0;
        for (int32_t ky = 0; ky < int32_t(l.kh); ++ky) {
          const int32_t iy = oy * int32_t(l.sh) - int32_t(l.pad_top) + ky * int32_t(l.dh);
          for (int32_t kx = 0; kx < int32_t(l.kw); ++kx) {
            const int32_t ix = ox * int32_t(l.sw) - int32_t(l.pad_left) + kx * int32_t(l.dw);
            ++window;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            const float v = plane[iy * W + ix];
            if (max) {
              acc = v > acc ? v : acc;
            } else {
              acc += v;
            }
            ++n;
          }
        }
        if (!max) acc = n ? acc / float(l.group ? window : n) : 0.0f;
        out.Put((c * l.oh + uint32_t(oy)) * l.ow + uint32_t(ox), ApplyActivation(acc, l.activation));
      }
    }
  }
}

template <class In>
void GlobalAvgPool(const Layer& l, In in, const Out& out) {
  const uint32_t n = l.h * l.w;
  for (uint32_t c = 0; c < l.c; ++c) {
    float acc = 0.0f;
    for (uint32_t i = 0; i < n; ++i) acc += in[int32_t(c * n + i)];
    out.Put(c, ApplyActivation(acc / float(n), l.activation));
  }
}

// Segments (METHODS §6, mcu_program.h InPlaceScratchFloats): the conv's
// output overwrites its input (`in` and `out` are one buffer, stored alike),
// the float `scratch` holds what is still needed, decoded. Pointwise: pixel
// by pixel, its C inputs copied out first (C <= OC) or its OC outputs
// computed into scratch and stored after; out[o, p] lands on in[o, p] only.
// Depthwise: plane by plane in order, each input plane copied out first;
// output plane c lands on input planes <= c. Sums run in Conv's order: the
// answers are Conv's, bit for bit.
template <class Weights, class In>
inline void ConvInPlace(const Layer& l, In in, const Out& out, const Weights& w, const float* b, float* scratch) {
  if (IsPointwise(l)) {
    const uint32_t plane = l.h * l.w;
    const Out to_scratch{scratch, nullptr, nullptr};
    for (uint32_t p = 0; p < plane; ++p) {
      if (l.c <= l.oc) {  // the pixel's inputs out first, then its outputs over them
        for (uint32_t c = 0; c < l.c; ++c) scratch[c] = in[int32_t(c * plane + p)];
        PointwisePixel(l, FloatIn{scratch}, 1, w, b, out + p, plane);
      } else {  // its outputs into scratch, then over its inputs
        PointwisePixel(l, in + int32_t(p), int32_t(plane), w, b, to_scratch, 1);
        for (uint32_t o = 0; o < l.oc; ++o) out.Put(o * plane + p, scratch[o]);
      }
    }
    return;
  }
  Layer one = l;  // one channel of the depthwise conv
  one.c = one.oc = one.group = 1;
  const uint32_t in_plane = l.h * l.w, out_plane = l.oh * l.ow;
  for (uint32_t c = 0; c < l.c; ++c) {
    for (uint32_t i = 0; i < in_plane; ++i) scratch[i] = in[int32_t(c * in_plane + i)];
    Conv(one, FloatIn{scratch}, w.From(c), b ? b + c : nullptr, out + c * out_plane);
  }
}
// The same on codes with int8 weights: the scratch keeps the codes (a byte
// each), so the integer conv reads what it would have read in place.
inline void ConvInPlace(const Layer& l, CodeIn in, const Out& out, const Int8Weights& w, const float* b,
                        float* scratch) {
  uint8_t* const held = reinterpret_cast<uint8_t*>(scratch);
  if (IsPointwise(l)) {
    const uint32_t plane = l.h * l.w;
    const Out to_scratch{scratch, nullptr, nullptr};
    for (uint32_t p = 0; p < plane; ++p) {
      if (l.c <= l.oc) {
        for (uint32_t c = 0; c < l.c; ++c) held[c] = in.p[c * plane + p];
        PointwisePixel(l, CodeIn{held, in.off, in.scale}, 1, w, b, out + p, plane);
      } else {
        PointwisePixel(l, in + int32_t(p), int32_t(plane), w, b, to_scratch, 1);
        for (uint32_t o = 0; o < l.oc; ++o) out.Put(o * plane + p, scratch[o]);
      }
    }
    return;
  }
  Layer one = l;
  one.c = one.oc = one.group = 1;
  const uint32_t in_plane = l.h * l.w, out_plane = l.oh * l.ow;
  for (uint32_t c = 0; c < l.c; ++c) {
    for (uint32_t i = 0; i < in_plane; ++i) held[i] = in.p[c * in_plane + i];
    Conv(one, CodeIn{held, in.off, in.scale}, w.From(c), b ? b + c : nullptr, out + c * out_plane);
  }
}

// A conv or a dense layer with its weights in their stored form, on its
// input in its stored form.
template <class Weights, class In>
inline void RunWeightedOn(const Layer& l, In in, const Out& out, float* act, const Weights& w, const float* b) {
  if (l.op == kOpDense) {
    Dense(l, in, w, b, out);
  } else if (l.out == l.in0) {
    ConvInPlace(l, in, out, w, b, FloatsAt(act, l.in1));
  } else {
    Conv(l, in, w, b, out);
  }
}
// Codes are read by layers with int8 weights only (ValidateProgram; the
// builder stores a layer's weights as int8 when it reads codes): three
// forms of each kernel, not four, keep the firmware's code inside
// kFirmwareFlashBytes.
inline void RunWeighted(const ProgramView& p, const Layer& l, float* act, const FloatWeights& w, const float* b) {
  RunWeightedOn(l, FloatIn{FloatsAt(act, l.in0)}, OutAt(p, act, l.out, l.out_grid), act, w, b);
}
inline void RunWeighted(const ProgramView& p, const Layer& l, float* act, const Int8Weights& w, const float* b) {
  const Out out = OutAt(p, act, l.out, l.out_grid);
  if (l.in0_grid == kNoWeights) {
    RunWeightedOn(l, FloatIn{FloatsAt(act, l.in0)}, out, act, w, b);
  } else {
    RunWeightedOn(l, CodesAt(BytesAt(act, l.in0), p.weights + l.in0_grid), out, act, w, b);
  }
}

// e^x for x <= 0 without libm (a softmax's exponents after the row's
// maximum is taken off): x = k·ln2 + r with |r| <= ln2/2, e^r by its Taylor
// series to r^7 (the next term is below 5e-9 of the result), 2^k put into the
// exponent bits. Within 1 ulp of glibc's expf over [-87.4, 0] (0.1 ulp on
// average; uart_mcu_program_test); below -87.5 (e^x < 1.1e-38) it is 0.
__attribute__((noinline)) inline float ExpNonPositive(float x) {
  if (!(x >= -87.5f)) return 0.0f;  // also NaN: a row of NaN has no answer to keep
  const float kf = x * 1.44269504f;
  const int32_t k = static_cast<int32_t>(kf - 0.5f);  // round to nearest for kf <= 0 (truncation is toward 0)
  const float r = (x - static_cast<float>(k) * 0.693145751953125f) - static_cast<float>(k) * 1.42860677e-06f;
  float e = 1.0f / 5040.0f;
  e = e * r + 1.0f / 720.0f;
  e = e * r + 1.0f / 120.0f;
  e = e * r + 1.0f / 24.0f;
  e = e * r + 1.0f / 6.0f;
  e = e * r + 0.5f;
  e = e * r + 1.0f;
  e = e * r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(k + 127) << 23;  // k in [-126, 0]
  float two_k;
  memcpy(&two_k, &bits, 4);
  return e * two_k;
}

// Softmax of the `l.group` values of a layer's input from element `row`:
// e^(x - max) / Σ e^(x - max), as the host's kernel divides.
__attribute__((noinline)) inline void Softmax(const ProgramView& p, float* act, const Layer& l, uint32_t row,
                                              const Out& out) {
  float m = LoadAny(p, act, l.in0, l.in0_grid, row);
  for (uint32_t k = 1; k < l.group; ++k) {
    const float v = LoadAny(p, act, l.in0, l.in0_grid, row + k);
    m = v > m ? v : m;
  }
  float sum = 0.0f;
  for (uint32_t k = 0; k < l.group; ++k) sum += ExpNonPositive(LoadAny(p, act, l.in0, l.in0_grid, row + k) - m);
  for (uint32_t k = 0; k < l.group; ++k)
    out.Put(row + k, ExpNonPositive(LoadAny(p, act, l.in0, l.in0_grid, row + k) - m) / sum);
}

// An Add on int32 sums (kInt32Sums): the merge of two partial sums, or the
// one requantization of the merged sum, per output channel, as the host's
// integer_requant Add (daemon/runtime/kernels/binary.cc).
__attribute__((noinline)) inline void AddSums(const ProgramView& p, float* act, const Layer& l, const Out& out,
                                              uint32_t n) {
  const uint8_t* s = BytesAt(act, l.in0);
  if (l.out_grid == kInt32Sums) {
    const uint8_t* t = BytesAt(act, l.in1);
    uint8_t* y = BytesAt(act, l.out);
    for (uint32_t k = 0; k < n; ++k) {
      uint32_t a, b;
      memcpy(&a, s + 4 * k, 4);
      memcpy(&b, t + 4 * k, 4);
      a += b;  // the builder bounds every sum below 2^31 (int8_weights.h)
      memcpy(y + 4 * k, &a, 4);
    }
    return;
  }
  const uint32_t plane = l.oh * l.ow;
  const float *m = p.weights + l.weight, *b = p.weights + l.bias;
  for (uint32_t k = 0; k < n; ++k) {
    int32_t a;
    memcpy(&a, s + 4 * k, 4);
    const uint32_t c = k / plane;
    out.Put(k, ApplyActivation(IntegerOut(a, m[c], b[c]), l.activation));
  }
}

// Runs layers [begin, end) of a validated program over the activation
// region (one phase of a run, mcu_program.h). With `clock` (a free-running
// tick counter): layer_ticks[k] gets layer k's ticks, k < max_timed; later
// layers add to the last word.
inline void RunLayers(const ProgramView& p, float* act, uint32_t begin, uint32_t end, uint32_t (*clock)() = nullptr,
                      uint32_t* layer_ticks = nullptr, uint32_t max_timed = 0) {
  uint32_t before = clock ? clock() : 0;
  for (uint32_t i = begin; i < end && i < p.header->num_layers; ++i) {
    const Layer& l = p.layers[i];
    const float* w = l.weight == kNoWeights ? nullptr : p.weights + l.weight;
    const float* b = l.bias == kNoWeights ? nullptr : p.weights + l.bias;
    const uint32_t n = l.oc * l.oh * l.ow;
    const Out out = OutAt(p, act, l.out, l.out_grid);
    const bool codes_in = l.in0_grid < kInt32Sums;
    const FloatIn fin{FloatsAt(act, l.in0)};
    const CodeIn cin = codes_in ? CodesAt(BytesAt(act, l.in0), p.weights + l.in0_grid) : CodeIn{nullptr, 0, 0.0f};
    switch (l.op) {
      case kOpConv:
      case kOpDense: {
        const uint32_t per = l.op == kOpDense ? l.c * l.h * l.w : l.c / l.group * l.kh * l.kw;
        if (l.weight_format == kWeightsInt8) {
          RunWeighted(p, l, act, Int8Weights{w, reinterpret_cast<const int8_t*>(w + l.oc), per}, b);
        } else {
          RunWeighted(p, l, act, FloatWeights{w, per}, b);
        }
        break;
      }
      case kOpMaxPool:
      case kOpAvgPool:
        if (codes_in) {
          Pool(l, cin, out, l.op == kOpMaxPool);
        } else {
          Pool(l, fin, out, l.op == kOpMaxPool);
        }
        break;
      case kOpGlobalAvgPool:
        if (codes_in) {
          GlobalAvgPool(l, cin, out);
        } else {
          GlobalAvgPool(l, fin, out);
        }
        break;
      case kOpRelu:
        for (uint32_t k = 0; k < n; ++k) out.Put(k, ApplyActivation(LoadAny(p, act, l.in0, l.in0_grid, k), kActRelu));
        break;
      case kOpAdd:
        if (l.in0_grid == kInt32Sums) {
          AddSums(p, act, l, out, n);
          break;
        }
        for (uint32_t k = 0; k < n; ++k)
          out.Put(k, ApplyActivation(LoadAny(p, act, l.in0, l.in0_grid, k) + LoadAny(p, act, l.in1, l.in1_grid, k),
                                     l.activation));
        break;
      case kOpCopy:  // a run of one tensor: the same form both sides (a plain copy), else decoded and stored
        if (l.in0_grid == l.out_grid) {
          memcpy(BytesAt(act, l.out), BytesAt(act, l.in0), size_t{n} * ValueBytes(l.in0_grid));
        } else {
          for (uint32_t k = 0; k < n; ++k) out.Put(k, LoadAny(p, act, l.in0, l.in0_grid, k));
        }
        break;
      case kOpQuantize:
        // Onto its grid, then stored: as the floats, or as codes of the
        // output's grid — its own (exact: the value is on it), or that of a
        // QuantizeDequantize fused after it (a requantization, rounded as
        // the host rounds the second step).
        for (uint32_t k = 0; k < n; ++k) out.Put(k, QuantizeDequantizeValue(LoadAny(p, act, l.in0, l.in0_grid, k), w));
        break;
      case kOpSoftmax:
        for (uint32_t r = 0; r < n; r += l.group) Softmax(p, act, l, r, out);
        break;
      default: break;  // rejected by ValidateProgram
    }
    if (clock && max_timed > 0) {
      const uint32_t now = clock();
      layer_ticks[i < max_timed ? i : max_timed - 1] += now - before;  // unsigned: wraps cleanly
      before = now;
    }
  }
}

// Runs every layer (a program's phases back to back: the host tests that
// hold every input at once).
inline void RunProgram(const ProgramView& p, float* act, uint32_t (*clock)() = nullptr, uint32_t* layer_ticks = nullptr,
                       uint32_t max_timed = 0) {
  if (clock)
    for (uint32_t k = 0; k < max_timed; ++k) layer_ticks[k] = 0;
  RunLayers(p, act, 0, p.header->num_layers, clock, layer_ticks, max_timed);
}

}  // namespace tessera::mcu
