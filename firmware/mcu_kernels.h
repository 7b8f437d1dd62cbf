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

inline void Conv(const Layer& l, const float* in, const float* w, const float* b, float* out) {
  const int32_t cg = int32_t(l.c / l.group), og = int32_t(l.oc / l.group);
  const int32_t H = int32_t(l.h), W = int32_t(l.w);
  for (int32_t oc = 0; oc < int32_t(l.oc); ++oc) {
    const int32_t g = oc / og;
    const float* wo = w + uint32_t(oc) * uint32_t(cg) * l.kh * l.kw;
    for (int32_t oy = 0; oy < int32_t(l.oh); ++oy) {
      for (int32_t ox = 0; ox < int32_t(l.ow); ++ox) {
        float acc = b ? b[oc] : 0.0f;
        for (int32_t ic = 0; ic < cg; ++ic) {
          const float* plane = in + uint32_t(g * cg + ic) * uint32_t(H * W);
          const float* wk = wo + uint32_t(ic) * l.kh * l.kw;
          for (int32_t ky = 0; ky < int32_t(l.kh); ++ky) {
            const int32_t iy = oy * int32_t(l.sh) - int32_t(l.pad_top) + ky * int32_t(l.dh);
            if (iy < 0 || iy >= H) continue;
            for (int32_t kx = 0; kx < int32_t(l.kw); ++kx) {
              const int32_t ix = ox * int32_t(l.sw) - int32_t(l.pad_left) + kx * int32_t(l.dw);
              if (ix < 0 || ix >= W) continue;
              acc += plane[iy * W + ix] * wk[ky * int32_t(l.kw) + kx];
            }
          }
        }
        out[(uint32_t(oc) * l.oh + uint32_t(oy)) * l.ow + uint32_t(ox)] = ApplyActivation(acc, l.activation);
      }
    }
  }
}

inline void Dense(const Layer& l, const float* in, const float* w, const float* b, float* out) {
  const uint32_t n = l.c * l.h * l.w;
  for (uint32_t o = 0; o < l.oc; ++o) {
    float acc = b ? b[o] : 0.0f;
    const float* row = w + o * n;
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
inline void ConvInPlace(const Layer& l, float* io, const float* w, const float* b, float* scratch) {
  if (IsPointwise(l)) {
    const uint32_t plane = l.h * l.w;
    for (uint32_t p = 0; p < plane; ++p) {
      if (l.c <= l.oc) {
        for (uint32_t c = 0; c < l.c; ++c) scratch[c] = io[c * plane + p];
        for (uint32_t o = 0; o < l.oc; ++o) {
          float acc = b ? b[o] : 0.0f;
          for (uint32_t c = 0; c < l.c; ++c) acc += scratch[c] * w[o * l.c + c];
          io[o * plane + p] = ApplyActivation(acc, l.activation);
        }
      } else {
        for (uint32_t o = 0; o < l.oc; ++o) {
          float acc = b ? b[o] : 0.0f;
          for (uint32_t c = 0; c < l.c; ++c) acc += io[c * plane + p] * w[o * l.c + c];
          scratch[o] = ApplyActivation(acc, l.activation);
        }
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
    Conv(one, scratch, w + c * l.kh * l.kw, b ? b + c : nullptr, io + c * out_plane);
  }
}

// Runs every layer of a validated program over the activation region.
// With `clock` (a free-running tick counter): layer_ticks[k] gets layer k's
// ticks, k < max_timed; later layers add to the last word.
inline void RunProgram(const ProgramView& p, float* act, uint32_t (*clock)() = nullptr, uint32_t* layer_ticks = nullptr,
                       uint32_t max_timed = 0) {
  if (clock)
    for (uint32_t k = 0; k < max_timed; ++k) layer_ticks[k] = 0;
  uint32_t before = clock ? clock() : 0;
  for (uint32_t i = 0; i < p.header->num_layers; ++i) {
    const Layer& l = p.layers[i];
    const float* w = l.weight == kNoWeights ? nullptr : p.weights + l.weight;
    const float* b = l.bias == kNoWeights ? nullptr : p.weights + l.bias;
    const uint32_t n = l.oc * l.oh * l.ow;
    switch (l.op) {
      case kOpConv:
        if (l.out == l.in0) {
          ConvInPlace(l, act + l.in0, w, b, act + l.in1);
        } else {
          Conv(l, act + l.in0, w, b, act + l.out);
        }
        break;
      case kOpDense: Dense(l, act + l.in0, w, b, act + l.out); break;
      case kOpMaxPool: Pool(l, act + l.in0, act + l.out, true); break;
      case kOpAvgPool: Pool(l, act + l.in0, act + l.out, false); break;
      case kOpGlobalAvgPool: GlobalAvgPool(l, act + l.in0, act + l.out); break;
      case kOpRelu:
        for (uint32_t k = 0; k < n; ++k) act[l.out + k] = ApplyActivation(act[l.in0 + k], kActRelu);
        break;
      case kOpAdd:
        for (uint32_t k = 0; k < n; ++k) act[l.out + k] = ApplyActivation(act[l.in0 + k] + act[l.in1 + k], l.activation);
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

}  // namespace tessera::mcu
