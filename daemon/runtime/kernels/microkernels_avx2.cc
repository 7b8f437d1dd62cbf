// AVX2 + FMA microkernels (microkernels.h). Compiled with -mavx2 -mfma only
// this file; nothing here may be reached unless DetectedIsa() >= kAvx2.
//
// 16 ymm registers: the GEMM tile is 4 rows × 3 vectors (24 columns) = 12
// accumulators + 3 B vectors + 1 broadcast; a packed panel of 8 rows runs as
// two such halves (the packed layout stays the same for every level).
#include "daemon/runtime/kernels/microkernels.h"

#include <immintrin.h>

namespace tessera {
namespace {

constexpr int kLanes = 8;
constexpr int kHalfRows = 4;

// Lane i is loaded/stored when i < n (n >= 8: all lanes).
inline __m256i TailMask(int64_t n) {
  const int k = n >= kLanes ? kLanes : static_cast<int>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// rows [r0, r0 + 4) of the panel (those < g.rows stored), NV vectors of
// columns, the last one masked by `last`.
template <int NV, bool kMasked>
inline void GemmTile(const GemmPanelArgs& g, int r0, const float* __restrict b, float* __restrict c, __m256i last) {
  __m256 acc[kHalfRows][NV];
#pragma GCC unroll 4
  for (int r = 0; r < kHalfRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  const float* __restrict ap = g.a + r0;
  for (int64_t i = 0; i < g.k; ++i) {
    __m256 bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v)
      bv[v] = (kMasked && v == NV - 1) ? _mm256_maskload_ps(b + v * kLanes, last) : _mm256_loadu_ps(b + v * kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < kHalfRows; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    ap += kPanelRows;
    b += g.ldb;
  }
  const __m256 vlo = _mm256_set1_ps(g.lo), vhi = _mm256_set1_ps(g.hi);
#pragma GCC unroll 4
  for (int r = 0; r < kHalfRows; ++r) {
    if (r0 + r >= g.rows) break;
    const __m256 bias_v = _mm256_set1_ps(g.bias ? g.bias[r0 + r] : 0.f);
    float* cr = c + (r0 + r) * g.ldc;
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      __m256 x = _mm256_add_ps(acc[r][v], bias_v);
      if (g.clamp) x = _mm256_min_ps(_mm256_max_ps(x, vlo), vhi);
      if (kMasked && v == NV - 1)
        _mm256_maskstore_ps(cr + v * kLanes, last, x);
      else
        _mm256_storeu_ps(cr + v * kLanes, x);
    }
  }
}

void GemmPanel(const GemmPanelArgs& g) {
  constexpr int64_t kTile = 3 * kLanes;
  const int64_t full = g.n / kTile, rest = g.n - full * kTile;
  const int vectors = static_cast<int>((rest + kLanes - 1) / kLanes);
  const __m256i last = TailMask(rest - (vectors - 1) * kLanes);
  const __m256i all = TailMask(kLanes);
  for (int r0 = 0; r0 < g.rows; r0 += kHalfRows) {
    for (int64_t t = 0; t < full; ++t) GemmTile<3, false>(g, r0, g.b + t * kTile, g.c + t * kTile, all);
    const int64_t col = full * kTile;
    if (vectors == 1) GemmTile<1, true>(g, r0, g.b + col, g.c + col, last);
    if (vectors == 2) GemmTile<2, true>(g, r0, g.b + col, g.c + col, last);
    if (vectors == 3) GemmTile<3, true>(g, r0, g.b + col, g.c + col, last);
  }
}

template <int T>
void Taps(const DepthwiseTapArgs& d) {
  __m256 kv[T];
  for (int t = 0; t < T; ++t) kv[t] = _mm256_set1_ps(d.kernel[t]);
  int64_t off[T];
  for (int t = 0; t < T; ++t) off[t] = d.offsets[t];
  const __m256 vb = _mm256_set1_ps(d.bias);
  const __m256 vlo = _mm256_set1_ps(d.lo), vhi = _mm256_set1_ps(d.hi);
  const float* poly = d.poly;
  float* out = d.out;
  int64_t q = 0;
  for (; q + 16 <= d.count; q += 16) {
    __m256 a0 = vb, a1 = vb;
#pragma GCC unroll 25
    for (int t = 0; t < T; ++t) {
      a0 = _mm256_fmadd_ps(kv[t], _mm256_loadu_ps(poly + q + off[t]), a0);
      a1 = _mm256_fmadd_ps(kv[t], _mm256_loadu_ps(poly + q + 8 + off[t]), a1);
    }
    if (d.clamp) {
      a0 = _mm256_min_ps(_mm256_max_ps(a0, vlo), vhi);
      a1 = _mm256_min_ps(_mm256_max_ps(a1, vlo), vhi);
    }
    _mm256_storeu_ps(out + q, a0);
    _mm256_storeu_ps(out + q + 8, a1);
  }
  for (; q < d.count; q += 8) {
    const __m256i m = TailMask(d.count - q);
    __m256 a0 = vb;
#pragma GCC unroll 25
    for (int t = 0; t < T; ++t) a0 = _mm256_fmadd_ps(kv[t], _mm256_maskload_ps(poly + q + off[t], m), a0);
    if (d.clamp) a0 = _mm256_min_ps(_mm256_max_ps(a0, vlo), vhi);
    _mm256_maskstore_ps(out + q, m, a0);
  }
}

void TapsAny(const DepthwiseTapArgs& d) {
  const __m256 vlo = _mm256_set1_ps(d.lo), vhi = _mm256_set1_ps(d.hi);
  for (int64_t q = 0; q < d.count; q += 8) {
    const __m256i m = TailMask(d.count - q);
    __m256 acc = _mm256_set1_ps(d.bias);
    for (int t = 0; t < d.taps; ++t)
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d.kernel[t]), _mm256_maskload_ps(d.poly + q + d.offsets[t], m), acc);
    if (d.clamp) acc = _mm256_min_ps(_mm256_max_ps(acc, vlo), vhi);
    _mm256_maskstore_ps(d.out + q, m, acc);
  }
}

void DepthwiseTaps(const DepthwiseTapArgs& d) {
  if (d.taps == 9) return Taps<9>(d);
  if (d.taps == 25) return Taps<25>(d);
  TapsAny(d);
}

constexpr int kLogisticLanes = 8;
typedef float LVec __attribute__((vector_size(32)));
typedef int32_t LIVec __attribute__((vector_size(32)));
#include "daemon/runtime/kernels/microkernels_logistic.inc"

}  // namespace

const Microkernels& Avx2Microkernels() {
  static const Microkernels k{Isa::kAvx2, &GemmPanel, &DepthwiseTaps, &Logistic};
  return k;
}

}  // namespace tessera
