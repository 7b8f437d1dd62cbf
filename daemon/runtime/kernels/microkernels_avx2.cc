// AVX2 + FMA microkernels (microkernels.h). Compiled with -mavx2 -mfma only
// this file; nothing here may be reached unless DetectedIsa() >= kAvx2.
//
// 16 ymm registers: the GEMM tile is 4 rows × 3 vectors (24 columns) = 12
// accumulators + 3 B vectors + 1 broadcast; a packed panel of 8 rows runs as
// two such halves (the packed layout stays the same for every level).
#include "daemon/runtime/kernels/microkernels.h"

#include <cmath>
#include <cstring>

#include <immintrin.h>

namespace tessera {
namespace {

constexpr int kLanes = 8;
constexpr int kHalfRows = 4;

// Lane i is loaded/stored when i < n (n >= 8: all lanes; n <= 0: none).
inline __m256i TailMask(int64_t n) {
  const int k = n >= kLanes ? kLanes : static_cast<int>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

constexpr int kLogisticLanes = 8;
typedef float LVec __attribute__((vector_size(32)));
typedef int32_t LIVec __attribute__((vector_size(32)));
// 12-bit estimate, one Newton step r·(2 − d·r): error ~1.4e-7 plus rounding.
__attribute__((always_inline)) inline LVec LogisticReciprocal(LVec d) {
  const __m256 dv = (__m256)d, r = _mm256_rcp_ps(dv);
  return (LVec)_mm256_mul_ps(r, _mm256_fnmadd_ps(dv, r, _mm256_set1_ps(2.f)));
}
#include "daemon/runtime/kernels/microkernels_int16.inc"
#include "daemon/runtime/kernels/microkernels_logistic.inc"

inline __m256 HardSigmoid(__m256 x, const Epilogue& e) {
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(e.alpha), _mm256_set1_ps(e.beta));
  return _mm256_min_ps(_mm256_max_ps(t, _mm256_setzero_ps()), _mm256_set1_ps(1.f));
}

// The epilogue (microkernels.h) on one vector of results.
// Always inlined: a call from BlockTile would spill its live accumulators.
__attribute__((always_inline)) inline __m256 Finish(__m256 x, const Epilogue& e) {
  switch (e.kind) {
    case Epilogue::kNone:
      return x;
    case Epilogue::kClamp:
      return _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(e.lo)), _mm256_set1_ps(e.hi));
    case Epilogue::kLeaky:
      return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(e.alpha)),
                              _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    case Epilogue::kSigmoid:
      return (__m256)LogisticLanes((LVec)x, false);
    case Epilogue::kSilu:
      return (__m256)LogisticLanes((LVec)x, true);
    case Epilogue::kHardSigmoid:
      return HardSigmoid(x, e);
    case Epilogue::kHardSwish:
      return _mm256_mul_ps(x, HardSigmoid(x, e));
  }
  return x;
}

inline float Sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// kc steps of half a panel (ap, rows of kPanelRows floats) times NV packed
// vectors of B columns (bp, NV·kLanes floats per row): the tile of
// microkernels_gemm_blocked.inc. 12 accumulators + 3 B vectors + 1 broadcast.
template <int NV>
inline void BlockTile(const float* __restrict ap, const float* __restrict bp, int64_t kc, float* __restrict c,
                      int64_t ldc, int rows, bool first, bool last, const float* bias, const Epilogue& e) {
  __m256 acc[kHalfRows][NV];
#pragma GCC unroll 4
  for (int r = 0; r < kHalfRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v)
      acc[r][v] = first || r >= rows ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc + v * kLanes);
  for (int64_t i = 0; i < kc; ++i) {
    __m256 bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(bp + v * kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < kHalfRows; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
    ap += kPanelRows;
    bp += NV * kLanes;
  }
#pragma GCC unroll 4
  for (int r = 0; r < kHalfRows; ++r) {
    if (r >= rows) break;
    float* cr = c + r * ldc;
    if (!last) {
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) _mm256_storeu_ps(cr + v * kLanes, acc[r][v]);
      continue;
    }
    const __m256 bias_v = _mm256_set1_ps(bias ? bias[r] : 0.f);
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(cr + v * kLanes, Finish(_mm256_add_ps(acc[r][v], bias_v), e));
  }
}

// Row i of B (microkernels.h: through b_rows when the caller gives them).
inline const float* BRow(const GemmPanelArgs& g, int64_t i) { return g.b_rows ? g.b + g.b_rows[i] : g.b + i * g.ldb; }

// Panel p's narrow-tail sums (microkernels_narrow_columns.inc): bias and
// the epilogue on the 8 rows of each column, then the valid rows out.
template <int J>
void FinishColumns(const GemmPanelArgs& g, const __m256* acc, int64_t p, int64_t col) {
  const int64_t rows = g.rows - p * kPanelRows < kPanelRows ? g.rows - p * kPanelRows : kPanelRows;
  const float* pbias = g.bias ? g.bias + p * kPanelRows : nullptr;
  alignas(32) float t[J][kPanelRows];
  float bias[kPanelRows] = {};
  for (int64_t r = 0; r < rows && pbias; ++r) bias[r] = pbias[r];
  const __m256 bias_v = _mm256_loadu_ps(bias);
#pragma GCC unroll 8
  for (int j = 0; j < J; ++j) _mm256_store_ps(t[j], Finish(_mm256_add_ps(acc[j], bias_v), g.epilogue));
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = g.c + (p * kPanelRows + r) * g.ldc + col;
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) cr[j] = t[j][r];
  }
}

constexpr int kNarrowMax = 7;
#include "daemon/runtime/kernels/microkernels_narrow_columns.inc"

constexpr int kTileVectors = 3;
// 256 rows of B per block (24 KiB for AVX2).
constexpr int64_t kBlockDepth = 256;
#include "daemon/runtime/kernels/microkernels_gemm_blocked.inc"

// Four vectors of positions per step: each accumulator is a chain of T
// dependent FMAs, and four chains hide more of the FMA latency than two.
// The last < 32 positions are one masked step.
template <int T, bool kMasked>
__attribute__((always_inline)) inline void TapsStep(const DepthwiseTapArgs& d, const __m256* kv, const int64_t* off,
                                                    int64_t q, const __m256i* m) {
  __m256 a[4];
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) a[v] = _mm256_set1_ps(d.bias);
  const float* p = d.poly + q;
#pragma GCC unroll 25
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const float* src = p + v * kLanes + off[t];
      a[v] = _mm256_fmadd_ps(kv[t], kMasked ? _mm256_maskload_ps(src, m[v]) : _mm256_loadu_ps(src), a[v]);
    }
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    float* dst = d.out + q + v * kLanes;
    if (kMasked)
      _mm256_maskstore_ps(dst, m[v], Finish(a[v], d.epilogue));
    else
      _mm256_storeu_ps(dst, Finish(a[v], d.epilogue));
  }
}

template <int T>
void Taps(const DepthwiseTapArgs& d) {
  __m256 kv[T];
  for (int t = 0; t < T; ++t) kv[t] = _mm256_set1_ps(d.kernel[t]);
  int64_t off[T];
  for (int t = 0; t < T; ++t) off[t] = d.offsets[t];
  constexpr int64_t kStep = 4 * kLanes;
  int64_t q = 0;
  for (; q + kStep <= d.count; q += kStep) TapsStep<T, false>(d, kv, off, q, nullptr);
  if (q < d.count) {
    __m256i m[4];
    for (int v = 0; v < 4; ++v) m[v] = TailMask(d.count - q - v * kLanes);  // none past the end
    TapsStep<T, true>(d, kv, off, q, m);
  }
}

typedef __m256 DwVec;
inline DwVec DwLoad(const float* p) { return _mm256_loadu_ps(p); }
inline void DwStore(float* p, DwVec v) { _mm256_storeu_ps(p, v); }
// Plain stores of 4, 2 and 1 lanes: AVX2's masked store is slow on AMD.
inline void DwStoreFirst(float* p, DwVec v, int n) {
  __m128 h = _mm256_castps256_ps128(v);
  if (n & 4) {
    _mm_storeu_ps(p, h);
    h = _mm256_extractf128_ps(v, 1);
    p += 4;
  }
  if (n & 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(p), h);
    h = _mm_movehl_ps(h, h);
    p += 2;
  }
  if (n & 1) _mm_store_ss(p, h);
}
inline DwVec DwSplat(float x) { return _mm256_set1_ps(x); }
inline DwVec DwFma(DwVec w, DwVec x, DwVec acc) { return _mm256_fmadd_ps(w, x, acc); }
#include "daemon/runtime/kernels/microkernels_depthwise_rows.inc"
inline DwVec DwLoadFirst(const float* p, int n) { return _mm256_maskload_ps(p, TailMask(n)); }
inline DwVec DwZero() { return _mm256_setzero_ps(); }
// 8 x 8: pairs of rows interleaved by float, then by float pair (each
// 128-bit half then holds four rows of one column), then the halves joined.
__attribute__((always_inline)) inline void DwTranspose(__m256 v[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(v[2 * k], v[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(v[2 * k], v[2 * k + 1]);
  }
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {  // u[4k + m]: half l holds rows 4k .. 4k + 3 of column 4l + m
    u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
    u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
    u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    v[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
    v[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
  }
}
constexpr int kDwChannelCols = 4;
#include "daemon/runtime/kernels/microkernels_depthwise_channels.inc"
inline DwVec DwLoadPanels(const float* p0, const float*) { return _mm256_loadu_ps(p0); }
constexpr int kGroupAccumulators = 12;
#include "daemon/runtime/kernels/microkernels_grouped_lanes.inc"

void TapsAny(const DepthwiseTapArgs& d) {
  for (int64_t q = 0; q < d.count; q += 8) {
    const __m256i m = TailMask(d.count - q);
    __m256 acc = _mm256_set1_ps(d.bias);
    for (int t = 0; t < d.taps; ++t)
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d.kernel[t]), _mm256_maskload_ps(d.poly + q + d.offsets[t], m), acc);
    _mm256_maskstore_ps(d.out + q, m, Finish(acc, d.epilogue));
  }
}

void DepthwiseTaps(const DepthwiseTapArgs& d) {
  if (d.taps == 9) return Taps<9>(d);
  if (d.taps == 25) return Taps<25>(d);
  TapsAny(d);
}

// Four weight rows at a time share each load of x; one accumulator vector
// per row, summed across lanes at the end.
void DotRows(const DotRowsArgs& d) {
  const int64_t k = d.k, full = k / kLanes * kLanes;
  const __m256i tail = TailMask(k - full);
  int64_t r = 0;
  for (; r + 4 <= d.m; r += 4) {
    const float* a0 = d.a + r * d.lda;
    const float *a1 = a0 + d.lda, *a2 = a1 + d.lda, *a3 = a2 + d.lda;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < full; i += kLanes) {
      const __m256 xv = _mm256_loadu_ps(d.x + i);
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), xv, s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i), xv, s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + i), xv, s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + i), xv, s3);
    }
    if (full < k) {
      const __m256 xv = _mm256_maskload_ps(d.x + full, tail);
      s0 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + full, tail), xv, s0);
      s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a1 + full, tail), xv, s1);
      s2 = _mm256_fmadd_ps(_mm256_maskload_ps(a2 + full, tail), xv, s2);
      s3 = _mm256_fmadd_ps(_mm256_maskload_ps(a3 + full, tail), xv, s3);
    }
    d.y[r] = Sum(s0);
    d.y[r + 1] = Sum(s1);
    d.y[r + 2] = Sum(s2);
    d.y[r + 3] = Sum(s3);
  }
  for (; r < d.m; ++r) {
    const float* a0 = d.a + r * d.lda;
    __m256 s0 = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += kLanes) {
      const __m256i m = TailMask(k - i);
      s0 = _mm256_fmadd_ps(_mm256_maskload_ps(a0 + i, m), _mm256_maskload_ps(d.x + i, m), s0);
    }
    d.y[r] = Sum(s0);
  }
}

// 16 inputs per step: two loads; per phase one in-lane shuffle picks the
// phase from both, one cross-lane permute puts its halves in order.
// _mm256_max_ps(x, y) returns y when either is NaN: (b, a) is std::max(a, b).
void MaxOf(float* dst, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    _mm256_storeu_ps(dst + i, _mm256_max_ps(_mm256_loadu_ps(b + i), _mm256_loadu_ps(a + i)));
  for (; i < n; ++i) dst[i] = a[i] < b[i] ? b[i] : a[i];
}

// 8 outputs per step from v[2o0 .. 2o0 + 16]: the two phases as in
// Deinterleave, and the even phase moved down one lane with v[2o0 + 16]
// in the top lane for the third tap.
void Max3Stride2(const float* v, int64_t n, float* out) {
  const __m256i down_one = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
  int64_t o = 0;
  for (; o + kLanes <= n; o += kLanes) {
    const float* w = v + 2 * o;
    const __m256 a = _mm256_loadu_ps(w), b = _mm256_loadu_ps(w + kLanes);
    const __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    const __m256 d = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
    const __m256 e2 = _mm256_blend_ps(_mm256_permutevar8x32_ps(e, down_one), _mm256_broadcast_ss(w + 2 * kLanes), 0x80);
    _mm256_storeu_ps(out + o, _mm256_max_ps(e2, _mm256_max_ps(d, e)));
  }
  for (; o < n; ++o) {
    const float* w = v + 2 * o;
    const float m = w[0] < w[1] ? w[1] : w[0];
    out[o] = m < w[2] ? w[2] : m;
  }
}

void Deinterleave(const float* src, int64_t n, float* even, float* odd) {
  int64_t i = 0;  // outputs per phase so far; inputs so far 2i
  for (; 2 * i + 2 * kLanes <= n; i += kLanes) {
    const __m256 a = _mm256_loadu_ps(src + 2 * i), b = _mm256_loadu_ps(src + 2 * i + kLanes);
    // shuffle: [a0 a2 b0 b2 | a4 a6 b4 b6]; 64-bit lanes (0, 2, 1, 3) -> a0 a2 a4 a6 b0 b2 b4 b6
    const __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xDD);
    _mm256_storeu_ps(even + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
    _mm256_storeu_ps(odd + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8)));
  }
  for (; 2 * i < n; ++i) {
    even[i] = src[2 * i];
    if (2 * i + 1 < n) odd[i] = src[2 * i + 1];
  }
}

}  // namespace

const Microkernels& Avx2Microkernels() {
  static const Microkernels k{Isa::kAvx2,
                              &GemmPanels,
                              &DepthwiseTaps,
                              &DotRows,
                              &Deinterleave,
                              &Logistic,
                              0,
                              0,
                              &Int16PairGemm,
                              &Int16Axpy,
                              &RequantRow,
                              &Int16PairDot4,
                              &CodesOf,
                              &QuantizeDequantizeRow,
                              &Int16TapPairs,
                              &MaxOf,
                              &DepthwiseRows,
                              &Max3Stride2,
                              &DepthwiseChannels,
                              kLanes,
                              &GroupedLanes};
  return k;
}

}  // namespace tessera
