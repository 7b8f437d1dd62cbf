// AVX-512F microkernels (microkernels.h). Compiled with -mavx512f -mfma only
// this file; nothing here may be reached unless DetectedIsa() >= kAvx512.
#include "daemon/runtime/kernels/microkernels.h"

#include <cmath>
#include <cstring>

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

constexpr int kLogisticLanes = 16;
typedef float LVec __attribute__((vector_size(64)));
typedef int32_t LIVec __attribute__((vector_size(64)));
// 14-bit estimate, one Newton step r·(2 − d·r): error ~2⁻²⁷ plus rounding.
__attribute__((always_inline)) inline LVec LogisticReciprocal(LVec d) {
  const __m512 dv = (__m512)d, r = _mm512_rcp14_ps(dv);
  return (LVec)_mm512_mul_ps(r, _mm512_fnmadd_ps(dv, r, _mm512_set1_ps(2.f)));
}
#include "daemon/runtime/kernels/microkernels_int16.inc"
#include "daemon/runtime/kernels/microkernels_logistic.inc"

inline __m512 HardSigmoid(__m512 x, const Epilogue& e) {
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(e.alpha), _mm512_set1_ps(e.beta));
  return _mm512_min_ps(_mm512_max_ps(t, _mm512_setzero_ps()), _mm512_set1_ps(1.f));
}

// The epilogue (microkernels.h) on one vector of results.
// Always inlined: a call from GemmTile would spill its 24 live accumulators.
__attribute__((always_inline)) inline __m512 Finish(__m512 x, const Epilogue& e) {
  switch (e.kind) {
    case Epilogue::kNone:
      return x;
    case Epilogue::kClamp:
      return _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(e.lo)), _mm512_set1_ps(e.hi));
    case Epilogue::kLeaky:
      return _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), x, _mm512_set1_ps(e.alpha));
    case Epilogue::kSigmoid:
      return (__m512)LogisticLanes((LVec)x, false);
    case Epilogue::kSilu:
      return (__m512)LogisticLanes((LVec)x, true);
    case Epilogue::kHardSigmoid:
      return HardSigmoid(x, e);
    case Epilogue::kHardSwish:
      return _mm512_mul_ps(x, HardSigmoid(x, e));
  }
  return x;
}

// kc steps of a whole panel (ap, rows of kPanelRows floats) times NV packed
// vectors of B columns (bp, NV·kLanes floats per row, 64-byte aligned): the
// tile of microkernels_gemm_blocked.inc. 8 × 3 accumulators + 3 B vectors
// + 1 broadcast of the 32 registers.
template <int NV>
inline void BlockTile(const float* __restrict ap, const float* __restrict bp, int64_t kc, float* __restrict c,
                      int64_t ldc, int rows, bool first, bool last, const float* bias, const Epilogue& e) {
  __m512 acc[kRows][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v)
      acc[r][v] = first || r >= rows ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc + v * kLanes);
  for (int64_t i = 0; i < kc; ++i) {
    __m512 bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(bp + v * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r]);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    ap += kPanelRows;
    bp += NV * kLanes;
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    float* cr = c + r * ldc;
    if (!last) {
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(cr + v * kLanes, acc[r][v]);
      continue;
    }
    const __m512 bias_v = _mm512_set1_ps(bias ? bias[r] : 0.f);
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(cr + v * kLanes, Finish(_mm512_add_ps(acc[r][v], bias_v), e));
  }
}

// Steps of k ahead that GemmTile prefetches its panel of A. Measured on
// the GEMMs of resnext50's 1x1 convs at 14² and 7² with cold weights
// (AVX-512 Xeon, one thread): 16, 48 and 128 steps ahead were 5–15 %
// faster than none, 128 the most; with warm weights about even.
constexpr int64_t kPrefetchSteps = 128;

// acc[r][v] = Σ_k A[r][k] · B[k][v·16 .. v·16+16) for one panel of kRows rows
// and NV vectors of columns (the last one masked to `last` lanes), then
// bias, the epilogue, and a store of the first `rows` rows: 8 × 3 accumulators.
// kExtra: also the single column right after the tile (B and C at
// NV·16), the panel's 8 rows as one 8-lane vector: the odd last column of a
// 7x7 plane (49 = 48 + 1) rides along with the tile's k loop instead of a
// pass of its own, whose k FMAs formed one dependent chain (k = 4608 in
// resnet18's 512-channel convs: ~18 000 cycles a panel). 24 + 3 + 1 + 3
// registers. Same products summed in the same order as GemmColumnsPanels
// (microkernels_narrow_columns.inc).
template <int NV, bool kExtra = false>
inline void GemmTile(const GemmPanelArgs& g, const float* __restrict b, float* __restrict c, __mmask16 last) {
  __m512 acc[kRows][NV];
  __m256 extra = _mm256_setzero_ps();
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
    if (kExtra) extra = _mm256_fmadd_ps(_mm256_loadu_ps(ap), _mm256_broadcast_ss(b + NV * kLanes), extra);
    // A large A (GemmPanelsAny) comes from L3 or memory, the next panel's
    // right after this one's: one cache line (two steps) of it 4 KiB ahead.
    if ((i & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(ap + kPrefetchSteps * kRows), _MM_HINT_T0);
    ap += kRows;
    b += g.ldb;
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    if (r >= g.rows) break;
    const __m512 bias_v = _mm512_set1_ps(g.bias ? g.bias[r] : 0.f);
    float* cr = c + r * g.ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m512 x = Finish(_mm512_add_ps(acc[r][v], bias_v), g.epilogue);
      if (v == NV - 1)
        _mm512_mask_storeu_ps(cr + v * kLanes, last, x);
      else
        _mm512_storeu_ps(cr + v * kLanes, x);
    }
  }
  if (kExtra) {
    alignas(64) float t[2 * kRows] = {};
    float bias[2 * kRows] = {};
    for (int r = 0; r < g.rows && g.bias; ++r) bias[r] = g.bias[r];
    _mm256_store_ps(t, extra);
    _mm512_store_ps(t, Finish(_mm512_add_ps(_mm512_load_ps(t), _mm512_loadu_ps(bias)), g.epilogue));
    for (int r = 0; r < g.rows; ++r) c[r * g.ldc + NV * kLanes] = t[r];
  }
}

// Row i of B (microkernels.h: through b_rows when the caller gives them).
inline const float* BRow(const GemmPanelArgs& g, int64_t i) { return g.b_rows ? g.b + g.b_rows[i] : g.b + i * g.ldb; }

// Panel p's narrow-tail sums (microkernels_narrow_columns.inc): bias and
// the epilogue two columns per 16-lane vector, then the valid rows out.
template <int J>
void FinishColumns(const GemmPanelArgs& g, const __m256* acc, int64_t p, int64_t col) {
  const int rows = static_cast<int>(g.rows - p * kRows < kRows ? g.rows - p * kRows : kRows);
  const float* pbias = g.bias ? g.bias + p * kRows : nullptr;
  alignas(64) float t[J + 1][kRows];
  float bias[2 * kRows] = {};
  for (int r = 0; r < rows && pbias; ++r) bias[r] = bias[kRows + r] = pbias[r];
  const __m512 bias_v = _mm512_loadu_ps(bias);
#pragma GCC unroll 8
  for (int j = 0; j < J; ++j) _mm256_store_ps(t[j], acc[j]);
#pragma GCC unroll 4
  for (int j = 0; j < J; j += 2) _mm512_store_ps(t[j], Finish(_mm512_add_ps(_mm512_load_ps(t[j]), bias_v), g.epilogue));
  for (int r = 0; r < rows; ++r) {
    float* cr = g.c + (p * kRows + r) * g.ldc + col;
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) cr[j] = t[j][r];
  }
}

constexpr int kNarrowMax = 8;
#include "daemon/runtime/kernels/microkernels_narrow_columns.inc"

constexpr int kHalfRows = kRows;  // a tile is a whole panel: 24 accumulators fit the 32 registers
constexpr int kTileVectors = 3;
// 128 rows × 48 columns of B: 24 KiB on the stack, within L1 beside the panel.
constexpr int64_t kBlockDepth = 128;
#include "daemon/runtime/kernels/microkernels_gemm_blocked.inc"

// One panel over every column, each micro-tile over all of k reading B in
// place: the order for a large A (see GemmPanelsAny).
void GemmPanel(const GemmPanelArgs& g) {
  constexpr int64_t kTile = 3 * kLanes;  // columns per full micro-tile
  const int64_t full = g.n / kTile, rest = g.n - full * kTile;
  const bool one_more = full > 0 && rest == 1;  // a 7x7 plane: the last column rides with the last tile
  for (int64_t t = 0; t < full; ++t) {
    if (one_more && t == full - 1)
      GemmTile<3, true>(g, g.b + t * kTile, g.c + t * kTile, static_cast<__mmask16>(0xFFFF));
    else
      GemmTile<3>(g, g.b + t * kTile, g.c + t * kTile, static_cast<__mmask16>(0xFFFF));
  }
  if (rest == 0 || one_more) return;
  int64_t col = full * kTile;
  // Whole vectors, and a last part vector unless it is narrow enough for GemmColumns.
  const int64_t narrow = rest % kLanes <= kLanes / 2 ? rest % kLanes : 0;
  const int vectors = static_cast<int>((rest - narrow + kLanes - 1) / kLanes);
  if (vectors > 0) {
    const __mmask16 last = TailMask(rest - narrow - (vectors - 1) * kLanes);
    if (vectors == 1) GemmTile<1>(g, g.b + col, g.c + col, last);
    if (vectors == 2) GemmTile<2>(g, g.b + col, g.c + col, last);
    if (vectors == 3) GemmTile<3>(g, g.b + col, g.c + col, last);
    col += rest - narrow;
  }
  // While this panel of A is in cache (a second pass over all of a large A
  // would stream it from memory again).
  if (narrow > 0) GemmColumnsAny(g, col, narrow);
}

// The K-blocked driver packs B once per block and runs every panel over it,
// reading all of A once per column tile: right while A (the weights) stays
// in cache. Weights of more than 128 KiB (deep layers on small planes:
// resnet18's 512-channel convs, 9.4 MiB of A against 63 columns of B)
// would stream from memory once per tile; with B in place (not indirect)
// each panel instead goes over all the columns while its rows of A are in
// L2. A short k (≤ one block: a strip of B fits L1 as it is) gains nothing
// from packing B either (Winograd's GEMMs on 128 channels: 10 % faster in
// place). Same products in the same order either way.
//
// Except when B is a strip of a wide matrix (a column tile of a pointwise
// conv over a 28² or 56² plane: ldb ≥ 512 floats, so nearly every step of
// k lands on another 4 KiB page) several tiles wide: reading it in place
// once per panel then cost more than streaming A from L2. Such GEMMs run
// K-blocked on runs of panels whose A (≤ kRunA) stays in L2 while every
// column tile passes over it, B packed once per run. resnext50's 1x1
// convs at 28² and 56² (256–512 channels, one thread, AVX-512 Xeon):
// 15–24 % faster with warm weights, 0–16 % with cold ones; at 14² and 7²
// (B is the whole plane, ldb = n) in place stayed faster and is kept.
constexpr int64_t kLargeA = 48 * 1024;  // floats (192 KiB)
constexpr int64_t kRunA = 96 * 1024;    // floats (384 KiB)
constexpr int64_t kFarRows = 512;       // ldb in floats (2 KiB)

void GemmPanelsAny(const GemmPanelArgs& g) {
  if (g.b_rows != nullptr || (g.rows * g.k <= kLargeA && g.k > kBlockDepth)) return GemmPanels(g);
  if (g.k > kBlockDepth && g.ldb >= kFarRows && g.n >= 4 * kTileVectors * kLanes) {
    const int64_t panels = kRunA / g.k / kPanelRows;
    const int64_t run = (panels > 1 ? panels : 1) * kPanelRows;
    for (int64_t r0 = 0; r0 < g.rows; r0 += run) {
      GemmPanelArgs part = g;
      part.a = g.a + r0 * g.k;  // panel r0 / kPanelRows
      part.c = g.c + r0 * g.ldc;
      part.bias = g.bias ? g.bias + r0 : nullptr;
      part.rows = static_cast<int>(MinRows(run, g.rows - r0));
      GemmPanels(part);
    }
    return;
  }
  for (int64_t r0 = 0; r0 < g.rows; r0 += kPanelRows) {
    GemmPanelArgs one = g;
    one.a = g.a + r0 * g.k;
    one.c = g.c + r0 * g.ldc;
    one.bias = g.bias ? g.bias + r0 : nullptr;
    one.rows = static_cast<int>(g.rows - r0 < kPanelRows ? g.rows - r0 : kPanelRows);
    GemmPanel(one);
  }
}

// Explicit vectors: left to itself GCC vectorises the short tap loop
// (a 9-way gather reduction) instead of the loop over positions.
// Four vectors of positions per step: each accumulator is a chain of T
// dependent FMAs, and four chains keep the FMA unit busy where two left it
// waiting on FMA latency. The last < 64 positions are one masked step.
template <int T, bool kMasked>
__attribute__((always_inline)) inline void TapsStep(const DepthwiseTapArgs& d, const __m512* kv, const int64_t* off,
                                                    int64_t q, const __mmask16* m) {
  __m512 a[4];
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) a[v] = _mm512_set1_ps(d.bias);
  const float* p = d.poly + q;
#pragma GCC unroll 25
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const float* src = p + v * kLanes + off[t];
      a[v] = _mm512_fmadd_ps(kv[t], kMasked ? _mm512_maskz_loadu_ps(m[v], src) : _mm512_loadu_ps(src), a[v]);
    }
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    float* dst = d.out + q + v * kLanes;
    if (kMasked)
      _mm512_mask_storeu_ps(dst, m[v], Finish(a[v], d.epilogue));
    else
      _mm512_storeu_ps(dst, Finish(a[v], d.epilogue));
  }
}

template <int T>
void Taps(const DepthwiseTapArgs& d) {
  __m512 kv[T];
  for (int t = 0; t < T; ++t) kv[t] = _mm512_set1_ps(d.kernel[t]);
  int64_t off[T];
  for (int t = 0; t < T; ++t) off[t] = d.offsets[t];
  constexpr int64_t kStep = 4 * kLanes;
  int64_t q = 0;
  for (; q + kStep <= d.count; q += kStep) TapsStep<T, false>(d, kv, off, q, nullptr);
  if (q < d.count) {
    __mmask16 m[4];
    for (int v = 0; v < 4; ++v) {
      const int64_t left = d.count - q - v * kLanes;
      m[v] = left > 0 ? TailMask(left) : static_cast<__mmask16>(0);
    }
    TapsStep<T, true>(d, kv, off, q, m);
  }
}

typedef __m512 DwVec;
inline DwVec DwLoad(const float* p) { return _mm512_loadu_ps(p); }
inline void DwStore(float* p, DwVec v) { _mm512_storeu_ps(p, v); }
inline void DwStoreFirst(float* p, DwVec v, int n) { _mm512_mask_storeu_ps(p, TailMask(n), v); }
inline DwVec DwSplat(float x) { return _mm512_set1_ps(x); }
inline DwVec DwFma(DwVec w, DwVec x, DwVec acc) { return _mm512_fmadd_ps(w, x, acc); }
#include "daemon/runtime/kernels/microkernels_depthwise_rows.inc"
inline DwVec DwLoadFirst(const float* p, int n) { return _mm512_maskz_loadu_ps(TailMask(n), p); }
inline DwVec DwZero() { return _mm512_setzero_ps(); }
// 16 x 16: pairs of rows interleaved by float, then by float pair (each
// 128-bit lane then holds four rows of one column), then the 128-bit lanes
// of four vectors gathered for each column.
__attribute__((always_inline)) inline void DwTranspose(__m512 v[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]);
  }
  __m512 u[16];  // u[4k + m]: 128-bit lane l holds rows 4k .. 4k + 3 of column 4l + m
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512d a = _mm512_castps_pd(t[4 * k]), b = _mm512_castps_pd(t[4 * k + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * k + 2]), e = _mm512_castps_pd(t[4 * k + 3]);
    u[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
    u[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512 a = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x44), b = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xEE);
    const __m512 c = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x44),
                 e = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xEE);
    v[m] = _mm512_shuffle_f32x4(a, c, 0x88);
    v[4 + m] = _mm512_shuffle_f32x4(a, c, 0xDD);
    v[8 + m] = _mm512_shuffle_f32x4(b, e, 0x88);
    v[12 + m] = _mm512_shuffle_f32x4(b, e, 0xDD);
  }
}
constexpr int kDwChannelCols = 8;
#include "daemon/runtime/kernels/microkernels_depthwise_channels.inc"
inline DwVec DwLoadPanels(const float* p0, const float* p1) {
  const __m512d lo = _mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(p0)));
  return _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps(p1)), 1));
}
constexpr int kGroupAccumulators = 24;
#include "daemon/runtime/kernels/microkernels_grouped_lanes.inc"

void TapsAny(const DepthwiseTapArgs& d) {
  for (int64_t q = 0; q < d.count; q += 16) {
    const __mmask16 m = TailMask(d.count - q);
    __m512 acc = _mm512_set1_ps(d.bias);
    for (int t = 0; t < d.taps; ++t)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(d.kernel[t]), _mm512_maskz_loadu_ps(m, d.poly + q + d.offsets[t]), acc);
    _mm512_mask_storeu_ps(d.out + q, m, Finish(acc, d.epilogue));
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
  const __mmask16 tail = TailMask(k - full);
  int64_t r = 0;
  for (; r + 4 <= d.m; r += 4) {
    const float* a0 = d.a + r * d.lda;
    const float *a1 = a0 + d.lda, *a2 = a1 + d.lda, *a3 = a2 + d.lda;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < full; i += kLanes) {
      const __m512 xv = _mm512_loadu_ps(d.x + i);
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a0 + i), xv, s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a1 + i), xv, s1);
      s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a2 + i), xv, s2);
      s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a3 + i), xv, s3);
    }
    if (full < k) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, d.x + full);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a0 + full), xv, s0);
      s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a1 + full), xv, s1);
      s2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a2 + full), xv, s2);
      s3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a3 + full), xv, s3);
    }
    d.y[r] = _mm512_reduce_add_ps(s0);
    d.y[r + 1] = _mm512_reduce_add_ps(s1);
    d.y[r + 2] = _mm512_reduce_add_ps(s2);
    d.y[r + 3] = _mm512_reduce_add_ps(s3);
  }
  for (; r < d.m; ++r) {
    const float* a0 = d.a + r * d.lda;
    __m512 s0 = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += kLanes) {
      const __mmask16 m = TailMask(k - i);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a0 + i), _mm512_maskz_loadu_ps(m, d.x + i), s0);
    }
    d.y[r] = _mm512_reduce_add_ps(s0);
  }
}

// _mm512_max_ps(x, y) returns y when either is NaN: (b, a) is std::max(a, b).
void MaxOf(float* dst, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    _mm512_storeu_ps(dst + i, _mm512_max_ps(_mm512_loadu_ps(b + i), _mm512_loadu_ps(a + i)));
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_max_ps(_mm512_maskz_loadu_ps(m, b + i), _mm512_maskz_loadu_ps(m, a + i)));
  }
}

// 16 outputs per step from v[2o0 .. 2o0 + 32]: the two phases by
// two-source permutes (as Deinterleave), and the even phase moved down one
// lane with v[2o0 + 32] in the top lane for the third tap. The last < 16
// outputs are one masked step (reads stop at v[2n]).
void Max3Stride2(const float* v, int64_t n, float* out) {
  const __m512i even_lanes = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_lanes = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  auto step = [&](int64_t o, __m512 a, __m512 b, __m512 next, __mmask16 store) {
    const __m512 e = _mm512_permutex2var_ps(a, even_lanes, b), d = _mm512_permutex2var_ps(a, odd_lanes, b);
    const __m512 e2 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(next), _mm512_castps_si512(e), 1));
    _mm512_mask_storeu_ps(out + o, store, _mm512_max_ps(e2, _mm512_max_ps(d, e)));
  };
  int64_t o = 0;
  for (; o + kLanes <= n; o += kLanes) {
    const float* w = v + 2 * o;
    step(o, _mm512_loadu_ps(w), _mm512_loadu_ps(w + kLanes), _mm512_set1_ps(w[2 * kLanes]),
         static_cast<__mmask16>(0xFFFF));
  }
  if (o < n) {
    const float* w = v + 2 * o;
    const int64_t inputs = 2 * (n - o) + 1;  // < 32
    const __m512 a = _mm512_maskz_loadu_ps(TailMask(inputs), w);
    const __m512 b = inputs > kLanes ? _mm512_maskz_loadu_ps(TailMask(inputs - kLanes), w + kLanes) : a;
    step(o, a, b, a, TailMask(n - o));
  }
}

// 32 inputs per step: two loads, one two-source permute per phase.
void Deinterleave(const float* src, int64_t n, float* even, float* odd) {
  const __m512i even_lanes = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_lanes = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  int64_t i = 0;  // outputs per phase so far; inputs so far 2i
  for (; 2 * i + 2 * kLanes <= n; i += kLanes) {
    const __m512 a = _mm512_loadu_ps(src + 2 * i), b = _mm512_loadu_ps(src + 2 * i + kLanes);
    _mm512_storeu_ps(even + i, _mm512_permutex2var_ps(a, even_lanes, b));
    _mm512_storeu_ps(odd + i, _mm512_permutex2var_ps(a, odd_lanes, b));
  }
  const int64_t left = n - 2 * i;  // < 32
  if (left <= 0) return;
  const __m512 a = _mm512_maskz_loadu_ps(TailMask(left), src + 2 * i);
  const __m512 b = left > kLanes ? _mm512_maskz_loadu_ps(TailMask(left - kLanes), src + 2 * i + kLanes) : a;
  _mm512_mask_storeu_ps(even + i, TailMask((left + 1) / 2), _mm512_permutex2var_ps(a, even_lanes, b));
  _mm512_mask_storeu_ps(odd + i, TailMask(left / 2), _mm512_permutex2var_ps(a, odd_lanes, b));
}

}  // namespace

const Microkernels& Avx512Microkernels() {
  static const Microkernels k{Isa::kAvx512,
                              &GemmPanelsAny,
                              &DepthwiseTaps,
                              &DotRows,
                              &Deinterleave,
                              &Logistic,
                              0,
                              kLargeA,
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
