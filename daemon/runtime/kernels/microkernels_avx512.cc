// AVX-512F microkernels (microkernels.h). Compiled with -mavx512f -mfma only
// this file; nothing here may be reached unless DetectedIsa() >= kAvx512.
#include "daemon/runtime/kernels/microkernels.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own
// _mm512_undefined_ps placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace tessera {
namespace {

constexpr int kLanes = 16;
constexpr int kRows = static_cast<int>(kPanelRows);

inline __mmask16 TailMask(int64_t n) {
  return n >= kLanes ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// acc[r][v] = Σ_k A[r][k] · B[k][v·16 .. v·16+16) for one panel of kRows rows
// and NV vectors of columns (the last one masked to `last` lanes), then
// bias, clamp, and a store of the first `rows` rows: 8 × 3 accumulators.
template <int NV>
inline void GemmTile(const GemmPanelArgs& g, const float* __restrict b, float* __restrict c, __mmask16 last) {
  __m512 acc[kRows][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const float* __restrict ap = g.a;
  for (int64_t i = 0; i < g.k; ++i) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, b + v * kLanes) : _mm512_loadu_ps(b + v * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    ap += kRows;
    b += g.ldb;
  }
  const __m512 vlo = _mm512_set1_ps(g.lo), vhi = _mm512_set1_ps(g.hi);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    if (r >= g.rows) break;
    const __m512 bias_v = _mm512_set1_ps(g.bias ? g.bias[r] : 0.f);
    float* cr = c + r * g.ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 x = _mm512_add_ps(acc[r][v], bias_v);
      if (g.clamp) x = _mm512_min_ps(_mm512_max_ps(x, vlo), vhi);
      if (v == NV - 1)
        _mm512_mask_storeu_ps(cr + v * kLanes, last, x);
      else
        _mm512_storeu_ps(cr + v * kLanes, x);
    }
  }
}

void GemmPanel(const GemmPanelArgs& g) {
  constexpr int64_t kTile = 3 * kLanes;  // columns per full micro-tile
  const int64_t full = g.n / kTile, rest = g.n - full * kTile;
  for (int64_t t = 0; t < full; ++t)
    GemmTile<3>(g, g.b + t * kTile, g.c + t * kTile, static_cast<__mmask16>(0xFFFF));
  if (rest == 0) return;
  const int64_t col = full * kTile;
  const int vectors = static_cast<int>((rest + kLanes - 1) / kLanes);
  const __mmask16 last = TailMask(rest - (vectors - 1) * kLanes);
  if (vectors == 1) GemmTile<1>(g, g.b + col, g.c + col, last);
  if (vectors == 2) GemmTile<2>(g, g.b + col, g.c + col, last);
  if (vectors == 3) GemmTile<3>(g, g.b + col, g.c + col, last);
}

// Explicit vectors: left to itself GCC vectorises the short tap loop
// (a 9-way gather reduction) instead of the loop over positions.
template <int T>
void Taps(const DepthwiseTapArgs& d) {
  __m512 kv[T];
  for (int t = 0; t < T; ++t) kv[t] = _mm512_set1_ps(d.kernel[t]);
  int64_t off[T];
  for (int t = 0; t < T; ++t) off[t] = d.offsets[t];
  const __m512 vb = _mm512_set1_ps(d.bias);
  const __m512 vlo = _mm512_set1_ps(d.lo), vhi = _mm512_set1_ps(d.hi);
  const float* poly = d.poly;
  float* out = d.out;
  int64_t q = 0;
  for (; q + 32 <= d.count; q += 32) {
    __m512 a0 = vb, a1 = vb;
#pragma GCC unroll 25
    for (int t = 0; t < T; ++t) {
      a0 = _mm512_fmadd_ps(kv[t], _mm512_loadu_ps(poly + q + off[t]), a0);
      a1 = _mm512_fmadd_ps(kv[t], _mm512_loadu_ps(poly + q + 16 + off[t]), a1);
    }
    if (d.clamp) {
      a0 = _mm512_min_ps(_mm512_max_ps(a0, vlo), vhi);
      a1 = _mm512_min_ps(_mm512_max_ps(a1, vlo), vhi);
    }
    _mm512_storeu_ps(out + q, a0);
    _mm512_storeu_ps(out + q + 16, a1);
  }
  for (; q < d.count; q += 16) {
    const __mmask16 m = TailMask(d.count - q);
    __m512 a0 = vb;
#pragma GCC unroll 25
    for (int t = 0; t < T; ++t) a0 = _mm512_fmadd_ps(kv[t], _mm512_maskz_loadu_ps(m, poly + q + off[t]), a0);
    if (d.clamp) a0 = _mm512_min_ps(_mm512_max_ps(a0, vlo), vhi);
    _mm512_mask_storeu_ps(out + q, m, a0);
  }
}

void TapsAny(const DepthwiseTapArgs& d) {
  const __m512 vlo = _mm512_set1_ps(d.lo), vhi = _mm512_set1_ps(d.hi);
  for (int64_t q = 0; q < d.count; q += 16) {
    const __mmask16 m = TailMask(d.count - q);
    __m512 acc = _mm512_set1_ps(d.bias);
    for (int t = 0; t < d.taps; ++t)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(d.kernel[t]), _mm512_maskz_loadu_ps(m, d.poly + q + d.offsets[t]), acc);
    if (d.clamp) acc = _mm512_min_ps(_mm512_max_ps(acc, vlo), vhi);
    _mm512_mask_storeu_ps(d.out + q, m, acc);
  }
}

void DepthwiseTaps(const DepthwiseTapArgs& d) {
  if (d.taps == 9) return Taps<9>(d);
  if (d.taps == 25) return Taps<25>(d);
  TapsAny(d);
}

constexpr int kLogisticLanes = 16;
typedef float LVec __attribute__((vector_size(64)));
typedef int32_t LIVec __attribute__((vector_size(64)));
#include "daemon/runtime/kernels/microkernels_logistic.inc"

}  // namespace

const Microkernels& Avx512Microkernels() {
  static const Microkernels k{Isa::kAvx512, &GemmPanel, &DepthwiseTaps, &Logistic};
  return k;
}

}  // namespace tessera
