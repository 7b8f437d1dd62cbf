// Baseline microkernels (microkernels.h): portable C++ with GCC vector
// extensions of 4 floats, which compile to SSE2 on every x86-64 CPU and to
// NEON on every arm64 one. Built with the build's default flags plus
// -ffp-contract=fast (NEON fuses a*b+c into one fma; SSE2 has none).
#include "daemon/runtime/kernels/microkernels.h"

#include <cstring>

#include <cmath>

namespace tessera {
namespace {

constexpr int kLanes = 4;
constexpr int kHalfRows = 4;
constexpr int kVectors = 3;  // 4 rows × 3 vectors: 12 accumulators + 3 B + 1 A = 16 registers

typedef float Vec __attribute__((vector_size(16)));
// The same vector, readable and writable at any float-aligned address.
typedef float UnalignedVec __attribute__((vector_size(16), aligned(4)));

inline Vec Load(const float* p) { return *reinterpret_cast<const UnalignedVec*>(p); }
inline void Store(float* p, Vec v) { *reinterpret_cast<UnalignedVec*>(p) = v; }
inline Vec Splat(float x) { return Vec{x, x, x, x}; }
inline Vec Clamp(Vec x, Vec lo, Vec hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

constexpr int kLogisticLanes = 4;
typedef float LVec __attribute__((vector_size(16)));
typedef int32_t LIVec __attribute__((vector_size(16)));
__attribute__((always_inline)) inline LVec LogisticReciprocal(LVec d) { return Splat(1.f) / d; }
#include "daemon/runtime/kernels/microkernels_int16.inc"
#include "daemon/runtime/kernels/microkernels_logistic.inc"

// The epilogue (microkernels.h) on one vector of results.
// Always inlined: a call from GemmTile would spill its live accumulators.
__attribute__((always_inline)) inline Vec Finish(Vec x, const Epilogue& e) {
  switch (e.kind) {
    case Epilogue::kNone:
      return x;
    case Epilogue::kClamp:
      return Clamp(x, Splat(e.lo), Splat(e.hi));
    case Epilogue::kLeaky:
      return x < Splat(0.f) ? x * Splat(e.alpha) : x;
    case Epilogue::kSigmoid:
      return LogisticLanes(x, false);
    case Epilogue::kSilu:
      return LogisticLanes(x, true);
    case Epilogue::kHardSigmoid:
      return Clamp(x * Splat(e.alpha) + Splat(e.beta), Splat(0.f), Splat(1.f));
    case Epilogue::kHardSwish:
      return x * Clamp(x * Splat(e.alpha) + Splat(e.beta), Splat(0.f), Splat(1.f));
  }
  return x;
}
inline float FinishScalar(float x, const Epilogue& e) { return e.kind == Epilogue::kNone ? x : Finish(Splat(x), e)[0]; }

// kc steps of half a panel times NV packed vectors of B columns: the tile
// of microkernels_gemm_blocked.inc (4 rows × 3 vectors at most).
template <int NV>
inline void BlockTile(const float* __restrict ap, const float* __restrict bp, int64_t kc, float* __restrict c,
                      int64_t ldc, int rows, bool first, bool last, const float* bias, const Epilogue& e) {
  Vec acc[kHalfRows][NV];
  for (int r = 0; r < kHalfRows; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = first || r >= rows ? Splat(0.f) : Load(c + r * ldc + v * kLanes);
  for (int64_t i = 0; i < kc; ++i) {
    Vec bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = Load(bp + v * kLanes);
    for (int r = 0; r < kHalfRows; ++r) {
      const Vec av = Splat(ap[r]);
      for (int v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
    ap += kPanelRows;
    bp += NV * kLanes;
  }
  for (int r = 0; r < kHalfRows && r < rows; ++r) {
    float* cr = c + r * ldc;
    const Vec bias_v = Splat(last && bias ? bias[r] : 0.f);
    for (int v = 0; v < NV; ++v) Store(cr + v * kLanes, last ? Finish(acc[r][v] + bias_v, e) : acc[r][v]);
  }
}

// The last n < 4 columns of a run of panels, one column of one panel at a time.
void NarrowColumns(const GemmPanelArgs& g, int64_t col, int64_t n) {
  for (int64_t r0 = 0; r0 < g.rows; r0 += kPanelRows) {
    const int64_t rows = g.rows - r0 < kPanelRows ? g.rows - r0 : kPanelRows;
    for (int64_t j = col; j < col + n; ++j) {
      float acc[kPanelRows] = {};
      const float* ap = g.a + r0 * g.k;  // panel r0 / kPanelRows: k × kPanelRows floats
      for (int64_t i = 0; i < g.k; ++i) {
        const float bv = (g.b_rows ? g.b + g.b_rows[i] : g.b + i * g.ldb)[j];
        for (int r = 0; r < kPanelRows; ++r) acc[r] += ap[r] * bv;
        ap += kPanelRows;
      }
      for (int64_t r = 0; r < rows; ++r)
        g.c[(r0 + r) * g.ldc + j] = FinishScalar(acc[r] + (g.bias ? g.bias[r0 + r] : 0.f), g.epilogue);
    }
  }
}

constexpr int kTileVectors = kVectors;
// 256 rows of B per block (24 KiB for AVX2).
constexpr int64_t kBlockDepth = 256;
#include "daemon/runtime/kernels/microkernels_gemm_blocked.inc"

void DepthwiseTaps(const DepthwiseTapArgs& d) {
  int64_t q = 0;
  for (; q + kLanes <= d.count; q += kLanes) {
    Vec acc = Splat(d.bias);
    for (int t = 0; t < d.taps; ++t) acc += Splat(d.kernel[t]) * Load(d.poly + q + d.offsets[t]);
    Store(d.out + q, Finish(acc, d.epilogue));
  }
  for (; q < d.count; ++q) {
    float acc = d.bias;
    for (int t = 0; t < d.taps; ++t) acc += d.kernel[t] * d.poly[q + d.offsets[t]];
    d.out[q] = FinishScalar(acc, d.epilogue);
  }
}

typedef Vec DwVec;
inline DwVec DwLoad(const float* p) { return Load(p); }
inline void DwStore(float* p, DwVec v) { Store(p, v); }
inline void DwStoreFirst(float* p, DwVec v, int n) {
  for (int i = 0; i < n; ++i) p[i] = v[i];
}
inline DwVec DwSplat(float x) { return Splat(x); }
inline DwVec DwFma(DwVec w, DwVec x, DwVec acc) { return acc + w * x; }
#include "daemon/runtime/kernels/microkernels_depthwise_rows.inc"
inline DwVec DwLoadFirst(const float* p, int n) {
  DwVec v = Splat(0.f);
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
inline DwVec DwZero() { return Splat(0.f); }
inline void DwTranspose(DwVec v[4]) {
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) {
      const float a = v[i][j];
      v[i][j] = v[j][i];
      v[j][i] = a;
    }
}
constexpr int kDwChannelCols = 4;
#include "daemon/runtime/kernels/microkernels_depthwise_channels.inc"

void DotRows(const DotRowsArgs& d) {
  const int64_t full = d.k / kLanes * kLanes;
  for (int64_t r = 0; r < d.m; ++r) {
    const float* a = d.a + r * d.lda;
    Vec s = Splat(0.f);
    for (int64_t i = 0; i < full; i += kLanes) s += Load(a + i) * Load(d.x + i);
    float sum = (s[0] + s[1]) + (s[2] + s[3]);
    for (int64_t i = full; i < d.k; ++i) sum += a[i] * d.x[i];
    d.y[r] = sum;
  }
}

void MaxOf(float* dst, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] < b[i] ? b[i] : a[i];
}

void Max3Stride2(const float* v, int64_t n, float* out) {
  for (int64_t o = 0; o < n; ++o) {
    const float* w = v + 2 * o;
    const float m = w[0] < w[1] ? w[1] : w[0];
    out[o] = m < w[2] ? w[2] : m;
  }
}

void Deinterleave(const float* src, int64_t n, float* even, float* odd) {
  for (int64_t i = 0; 2 * i < n; ++i) even[i] = src[2 * i];
  for (int64_t i = 0; 2 * i + 1 < n; ++i) odd[i] = src[2 * i + 1];
}

}  // namespace

const Microkernels& BaselineMicrokernels() {
  static const Microkernels k{Isa::kBaseline,
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
                              kLanes};
  return k;
}

const Microkernels& MicrokernelsFor(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512) return Avx512Microkernels();
  if (isa == Isa::kAvx2) return Avx2Microkernels();
#endif
  return BaselineMicrokernels();
}

}  // namespace tessera
