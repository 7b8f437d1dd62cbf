// PackedGemm (packed_gemm.h): register-blocked AVX-512 GEMM with the conv
// epilogue (bias + relu/clip) applied in registers.
#include "daemon/kernels/packed_gemm.h"

#include "daemon/kernels/parallel_for.h"

#include <algorithm>

#if defined(__AVX512F__)
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own
// _mm512_undefined_ps placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <Eigen/Core>
#endif

namespace tessera {

void PackedMatrix::Pack(const float* a, int64_t m, int64_t k, int64_t lda) {
  m_ = m;
  k_ = k;
  const int64_t panels = (m + kRows - 1) / kRows;
  data_.assign(static_cast<size_t>(panels * k * kRows), 0.f);
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t r = 0; r < kRows && p * kRows + r < m; ++r) {
      const float* row = a + (p * kRows + r) * lda;
      float* dst = data_.data() + p * k * kRows + r;
      for (int64_t i = 0; i < k; ++i) dst[i * kRows] = row[i];
    }
#if !defined(__AVX512F__)
  unpacked_.resize(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) std::copy(a + r * lda, a + r * lda + k, unpacked_.begin() + r * k);
#endif
}

#if defined(__AVX512F__)
namespace {

constexpr int kLanes = 16;
constexpr int kRows = static_cast<int>(PackedMatrix::kRows);

// The in-register part of the epilogue; other activations run on the stored
// rows afterwards (they are transcendental and rare in the conv models).
enum class Clamp { kNone, kRelu, kClip };

// acc[r][v] = Σ_k A[r][k] · B[k][v·16 .. v·16+16) for one panel of kRows rows
// and NV vectors of columns (the last one masked to `last` lanes), then
// bias, clamp, and a store of the first `rows` rows.
template <int NV>
inline void MicroKernel(const float* __restrict ap, const float* __restrict b, int64_t ldb, int64_t k,
                        __mmask16 last, float* __restrict c, int64_t ldc, int rows, const float* bias, Clamp clamp,
                        float lo, float hi) {
  __m512 acc[kRows][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
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
    b += ldb;
  }
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    const __m512 bias_v = _mm512_set1_ps(bias ? bias[r] : 0.f);
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 x = _mm512_add_ps(acc[r][v], bias_v);
      if (clamp != Clamp::kNone) x = _mm512_min_ps(_mm512_max_ps(x, vlo), vhi);
      if (v == NV - 1)
        _mm512_mask_storeu_ps(cr + v * kLanes, last, x);
      else
        _mm512_storeu_ps(cr + v * kLanes, x);
    }
  }
}

}  // namespace

void PackedGemm(const PackedMatrix& a, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc,
                const float* bias, const FusedActivation& act, int threads) {
  const int64_t m = a.rows(), k = a.depth();
  const int64_t panels = (m + kRows - 1) / kRows;
  Clamp clamp = Clamp::kNone;
  float lo = 0.f, hi = 0.f;
  if (act.kind == FusedActivation::kRelu) {
    clamp = Clamp::kRelu, lo = 0.f, hi = __builtin_inff();
  } else if (act.kind == FusedActivation::kClip) {
    clamp = Clamp::kClip, lo = act.alpha, hi = act.beta;
  }
  const bool post_activation = act.kind != FusedActivation::kNone && clamp == Clamp::kNone;
  constexpr int64_t kTile = 3 * kLanes;  // columns per full micro-tile
  const int64_t full = n / kTile, rest = n - full * kTile;
  const int rest_vectors = static_cast<int>((rest + kLanes - 1) / kLanes);
  const __mmask16 rest_mask =
      rest == 0 ? 0 : static_cast<__mmask16>((1u << (rest - (rest_vectors - 1) * kLanes)) - 1u);
  const __mmask16 all = static_cast<__mmask16>(0xFFFF);
  ParallelFor(panels, (threads > 1 && panels > 1) ? threads : 1, [&](int64_t p) {
    const float* ap = a.Panel(p);
    const int rows = static_cast<int>(std::min<int64_t>(kRows, m - p * kRows));
    float* cp = c + p * kRows * ldc;
    const float* bp = bias ? bias + p * kRows : nullptr;
    for (int64_t t = 0; t < full; ++t)
      MicroKernel<3>(ap, b + t * kTile, ldb, k, all, cp + t * kTile, ldc, rows, bp, clamp, lo, hi);
    const int64_t col = full * kTile;
    switch (rest_vectors) {
      case 1:
        MicroKernel<1>(ap, b + col, ldb, k, rest_mask, cp + col, ldc, rows, bp, clamp, lo, hi);
        break;
      case 2:
        MicroKernel<2>(ap, b + col, ldb, k, rest_mask, cp + col, ldc, rows, bp, clamp, lo, hi);
        break;
      case 3:
        MicroKernel<3>(ap, b + col, ldb, k, rest_mask, cp + col, ldc, rows, bp, clamp, lo, hi);
        break;
      default:
        break;
    }
    if (post_activation)
      for (int r = 0; r < rows; ++r) act.Apply(cp + r * ldc, static_cast<size_t>(n));
  });
}

#else  // !__AVX512F__: Eigen on the unpacked weights.

void PackedGemm(const PackedMatrix& a, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc,
                const float* bias, const FusedActivation& act, int threads) {
  using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t m = a.rows(), k = a.depth();
  Eigen::Map<const RowMajorMatrix> am(a.Unpacked(), m, k);
  Eigen::Map<const RowMajorMatrix, 0, Eigen::OuterStride<>> bm(b, k, n, Eigen::OuterStride<>(ldb));
  Eigen::Map<RowMajorMatrix, 0, Eigen::OuterStride<>> cm(c, m, n, Eigen::OuterStride<>(ldc));
  cm.noalias() = am * bm;
  for (int64_t r = 0; r < m; ++r) {
    float* row = c + r * ldc;
    if (bias != nullptr) Eigen::Map<Eigen::ArrayXf>(row, n) += bias[r];
    act.Apply(row, static_cast<size_t>(n));
  }
}

#endif

}  // namespace tessera
