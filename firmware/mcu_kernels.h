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

// x on the grid q = {scale, zero point, qmin, qmax} (kOpQuantize): what the
// host's QuantizeDequantize computes (partition/graph/quantization.h),
// bit for bit, without libm: clamp x / scale to [qmin - zp, qmax - zp]
// (at most 2^32 wide, so |v| < 2^23 for int8/uint8 grids), then round half
// to even by adding and subtracting 1.5·2^23 (IEEE single precision in the
// default rounding mode; no -ffast-math here).
inline float QuantizeDequantizeValue(float x, const float* q) {
  const float lo = q[2] - q[1], hi = q[3] - q[1];
  float v = x / q[0];
  if (!(v == v)) v = 0.0f;  // NaN: the zero point's code
  v = v < lo ? lo : (v > hi ? hi : v);
  if (v > -8388608.0f && v < 8388608.0f) {
    volatile float big = 12582912.0f;  // volatile: the compiler must not fold (v + big) - big into v
    v = (v + big) - big;
  }
  return v * q[0];
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
template <class Weights>
inline void PointwisePixelImpl(const Layer& l, const float* x, uint32_t xs, const Weights& w, const float* b,
                               float* dst, uint32_t ds) {
  const uint32_t C = l.c;
  uint32_t o = 0;
  for (; o + 4 <= l.oc; o += 4) {
    const auto w0 = w.Row(o), w1 = w.Row(o + 1), w2 = w.Row(o + 2), w3 = w.Row(o + 3);
    float a0 = b ? b[o] : 0.0f, a1 = b ? b[o + 1] : 0.0f, a2 = b ? b[o + 2] : 0.0f, a3 = b ? b[o + 3] : 0.0f;
    for (uint32_t c = 0; c < C; ++c) {
      const float v = x[c * xs];
      a0 += v * w0[c];
      a1 += v * w1[c];
      a2 += v * w2[c];
      a3 += v * w3[c];
    }
    dst[o * ds] = ApplyActivation(a0, l.activation);
    dst[(o + 1) * ds] = ApplyActivation(a1, l.activation);
    dst[(o + 2) * ds] = ApplyActivation(a2, l.activation);
    dst[(o + 3) * ds] = ApplyActivation(a3, l.activation);
  }
  for (; o < l.oc; ++o) {
    const auto wo = w.Row(o);
    float acc = b ? b[o] : 0.0f;
    for (uint32_t c = 0; c < C; ++c) acc += x[c * xs] * wo[c];
    dst[o * ds] = ApplyActivation(acc, l.activation);
  }
}

// A 1x1 conv (mcu_program.h IsPointwise), a pixel at a time. Every output
// still sums bias, then its input channels in order, as the general loop
// below does.
// Float weights inline (the hot loop of MLPerf's DS-CNN); int8 weights in
// one shared out-of-line copy (their extra conversion per weight dominates
// anyway): the firmware's code stays inside kFirmwareFlashBytes.
inline void PointwisePixel(const Layer& l, const float* x, uint32_t xs, const FloatWeights& w, const float* b,
                           float* dst, uint32_t ds) {
  PointwisePixelImpl(l, x, xs, w, b, dst, ds);
}
__attribute__((noinline)) inline void PointwisePixel(const Layer& l, const float* x, uint32_t xs, const Int8Weights& w,
                                                     const float* b, float* dst, uint32_t ds) {
  PointwisePixelImpl(l, x, xs, w, b, dst, ds);
}

template <class Weights>
inline void PointwiseConv(const Layer& l, const float* in, const Weights& w, const float* b, float* out) {
  const uint32_t plane = l.h * l.w;
  for (uint32_t p = 0; p < plane; ++p) PointwisePixel(l, in + p, plane, w, b, out + p, plane);
}

// Per output value: bias, then input channels in order, each over its valid
// taps row by row (the padding's taps add nothing and are not visited), so
// the inner loop has no bounds test (bench/mcu: MLPerf's DS-CNN 26.9 ->
// 21.3 M instructions; its 10x4 conv 20.9 -> 9.5 per MAC).
// Not inlined into its callers (ConvInPlace, RunWeighted): one copy per
// weight form keeps the firmware's code inside kFirmwareFlashBytes.
template <class Weights>
__attribute__((noinline)) void Conv(const Layer& l, const float* in, const Weights& w, const float* b, float* out) {
  if (IsPointwise(l)) {
    PointwiseConv(l, in, w, b, out);
    return;
  }
  const int32_t cg = int32_t(l.c / l.group), og = int32_t(l.oc / l.group);
  const int32_t H = int32_t(l.h), W = int32_t(l.w), KH = int32_t(l.kh), KW = int32_t(l.kw);
  const int32_t dh = int32_t(l.dh), dw = int32_t(l.dw);
  const uint32_t plane_size = uint32_t(H * W), taps = uint32_t(KH * KW);
  // Output columns whose taps all lie inside the row: no division for them.
  const int32_t sw = int32_t(l.sw), pl = int32_t(l.pad_left);
  const int32_t span = W - 1 - (KW - 1) * dw + pl;
  const int32_t inner_lo = (pl + sw - 1) / sw;
  int32_t inner_hi = span < 0 ? 0 : span / sw + 1;
  if (inner_hi > int32_t(l.ow)) inner_hi = int32_t(l.ow);
  for (int32_t oc = 0; oc < int32_t(l.oc); ++oc) {
    const int32_t g = oc / og;
    const auto wo = w.Row(uint32_t(oc));
    const float* planes = in + uint32_t(g * cg) * plane_size;
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
      float* out_row = out + (uint32_t(oc) * l.oh + uint32_t(oy)) * l.ow;
      for (int32_t ox = 0; ox < int32_t(l.ow); ++ox) {
        const int32_t ix0 = ox * sw - pl;
        if (unrolled && ox >= inner_lo && ox < inner_hi) {
          const float* r0 = planes + iy0 * W + ix0;
          const float* r1 = r0 + W;
          const float* r2 = r1 + W;
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
          out_row[ox] = ApplyActivation(acc, l.activation);
          continue;
        }
        int32_t kx_lo = 0, kx_hi = KW;
        if (ox < inner_lo || ox >= inner_hi) ValidTaps(ix0, dw, W, KW, &kx_lo, &kx_hi);
        float acc = b ? b[oc] : 0.0f;
        for (int32_t ic = 0; ic < cg; ++ic) {
          const float* plane = planes + uint32_t(ic) * plane_size;
          const auto wk = wo + uint32_t(ic) * taps;
          for (int32_t ky = ky_lo; ky < ky_hi; ++ky) {
            const float* row = plane + (iy0 + ky * dh) * W + ix0;
            const auto wr = wk + uint32_t(ky * KW);
            for (int32_t kx = kx_lo; kx < kx_hi; ++kx) acc += row[kx * dw] * wr[uint32_t(kx)];
          }
        }
        out[(uint32_t(oc) * l.oh + uint32_t(oy)) * l.ow + uint32_t(ox)] = ApplyActivation(acc, l.activation);
      }
    }
  }
}

template <class Weights>
inline void Dense(const Layer& l, const float* in, const Weights& w, const float* b, float* out) {
  const uint32_t n = l.c * l.h * l.w;
  for (uint32_t o = 0; o < l.oc; ++o) {
    float acc = b ? b[o] : 0.0f;
    const auto row = w.Row(o);
    for (uint32_t i = 0; i < n; ++i) acc += row[i] * in[i];
    out[o] = ApplyActivation(acc, l.activation);
  }
}

inline void Pool(const Layer& l, const float* in, float* out, bool max) {
  const int32_t H = int32_t(l.h), W = int32_t(l.w);
  for (uint32_t c = 0; c < l.c; ++c) {
    const float* plane = in + c * l.h * l.w;
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
        out[(c * l.oh + uint32_t(oy)) * l.ow + uint32_t(ox)] = ApplyActivation(acc, l.activation);
      }
    }
  }
}

inline void GlobalAvgPool(const Layer& l, const float* in, float* out) {
  const uint32_t n = l.h * l.w;
  for (uint32_t c = 0; c < l.c; ++c) {
    float acc = 0.0f;
    for (uint32_t i = 0; i < n; ++i) acc += in[c * n + i];
    out[c] = ApplyActivation(acc / float(n), l.activation);
  }
}

// Segments (METHODS §6, mcu_program.h InPlaceScratchFloats): the conv's
// output overwrites its input (io), `scratch` holds what is still needed.
// Pointwise: pixel by pixel, its C inputs copied out first (C <= OC) or its
// OC outputs computed into scratch and copied in after; out[o, p] lands on
// in[o, p] only. Depthwise: plane by plane in order, each input plane
// copied out first; output plane c lands on input planes <= c. Sums run in
// Conv's order: the answers are Conv's, bit for bit.
template <class Weights>
inline void ConvInPlace(const Layer& l, float* io, const Weights& w, const float* b, float* scratch) {
  if (IsPointwise(l)) {
    const uint32_t plane = l.h * l.w;
    for (uint32_t p = 0; p < plane; ++p) {
      if (l.c <= l.oc) {  // the pixel's inputs out first, then its outputs over them
        for (uint32_t c = 0; c < l.c; ++c) scratch[c] = io[c * plane + p];
        PointwisePixel(l, scratch, 1, w, b, io + p, plane);
      } else {  // its outputs into scratch, then over its inputs
        PointwisePixel(l, io + p, plane, w, b, scratch, 1);
        for (uint32_t o = 0; o < l.oc; ++o) io[o * plane + p] = scratch[o];
      }
    }
    return;
  }
  Layer one = l;  // one channel of the depthwise conv
  one.c = one.oc = one.group = 1;
  const uint32_t in_plane = l.h * l.w, out_plane = l.oh * l.ow;
  for (uint32_t c = 0; c < l.c; ++c) {
    for (uint32_t i = 0; i < in_plane; ++i) scratch[i] = io[c * in_plane + i];
    Conv(one, scratch, w.From(c), b ? b + c : nullptr, io + c * out_plane);
  }
}

// A conv or a dense layer with its weights in their stored form.
template <class Weights>
inline void RunWeighted(const Layer& l, float* act, const Weights& w, const float* b) {
  if (l.op == kOpDense) {
    Dense(l, act + l.in0, w, b, act + l.out);
  } else if (l.out == l.in0) {
    ConvInPlace(l, act + l.in0, w, b, act + l.in1);
  } else {
    Conv(l, act + l.in0, w, b, act + l.out);
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
    switch (l.op) {
      case kOpConv:
      case kOpDense: {
        const uint32_t per = l.op == kOpDense ? l.c * l.h * l.w : l.c / l.group * l.kh * l.kw;
        if (l.weight_format == kWeightsInt8) {
          RunWeighted(l, act, Int8Weights{w, reinterpret_cast<const int8_t*>(w + l.oc), per}, b);
        } else {
          RunWeighted(l, act, FloatWeights{w, per}, b);
        }
        break;
      }
      case kOpMaxPool: Pool(l, act + l.in0, act + l.out, true); break;
      case kOpAvgPool: Pool(l, act + l.in0, act + l.out, false); break;
      case kOpGlobalAvgPool: GlobalAvgPool(l, act + l.in0, act + l.out); break;
      case kOpRelu:
        for (uint32_t k = 0; k < n; ++k) act[l.out + k] = ApplyActivation(act[l.in0 + k], kActRelu);
        break;
      case kOpAdd:
        for (uint32_t k = 0; k < n; ++k) act[l.out + k] = ApplyActivation(act[l.in0 + k] + act[l.in1 + k], l.activation);
        break;
      case kOpCopy:
        memcpy(act + l.out, act + l.in0, size_t{n} * sizeof(float));
        break;
      case kOpQuantize:
        for (uint32_t k = 0; k < n; ++k) act[l.out + k] = QuantizeDequantizeValue(act[l.in0 + k], w);
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
