// PackedGemm (packed_gemm.h): packs constant weights once, then runs the
// CPU's register-blocked microkernel (microkernels.h) panel by panel with
// the conv epilogue (bias + relu/clip) applied in registers.
#include "daemon/runtime/kernels/packed_gemm.h"

#include <algorithm>
#include <cmath>

#include "daemon/runtime/kernels/parallel_for.h"

namespace tessera {

void PackedMatrix::Pack(const float* a, int64_t m, int64_t k, int64_t lda) {
  Reset(m, k);
  PackRows(a, 0, m, lda);
}

void PackedMatrix::Reset(int64_t m, int64_t k) {
  m_ = m;
  k_ = k;
  kernels_ = &MicrokernelsFor(ActiveIsa());
  const int64_t panels = (m + kRows - 1) / kRows;
  data_.assign(static_cast<size_t>(panels * k * kRows), 0.f);
}

void PackedMatrix::PackRows(const float* block, int64_t first, int64_t rows, int64_t lda) {
  for (int64_t r = 0; r < rows && first + r < m_; ++r) {
    const int64_t at = first + r, p = at / kRows;
    const float* row = block + r * lda;
    float* dst = data_.data() + p * k_ * kRows + at % kRows;
    for (int64_t i = 0; i < k_; ++i) dst[i * kRows] = row[i];
  }
}

bool EpilogueFor(const FusedActivation& act, Epilogue* epilogue) {
  Epilogue e;
  switch (act.kind) {
    case FusedActivation::kNone:
      break;
    case FusedActivation::kRelu:
      e.kind = Epilogue::kClamp, e.lo = 0.f, e.hi = INFINITY;
      break;
    case FusedActivation::kClip:
      e.kind = Epilogue::kClamp, e.lo = act.alpha, e.hi = act.beta;
      break;
    case FusedActivation::kLeakyRelu:
      e.kind = Epilogue::kLeaky, e.alpha = act.alpha;
      break;
    case FusedActivation::kSigmoid:
      e.kind = Epilogue::kSigmoid;
      break;
    case FusedActivation::kSilu:
      e.kind = Epilogue::kSilu;
      break;
    case FusedActivation::kHardSigmoid:
      e.kind = Epilogue::kHardSigmoid, e.alpha = act.alpha, e.beta = act.beta;
      break;
    case FusedActivation::kHardSwish:
      e.kind = Epilogue::kHardSwish, e.alpha = act.alpha, e.beta = act.beta;
      break;
    default:
      *epilogue = Epilogue{};
      return false;
  }
  *epilogue = e;
  return true;
}

void PackedGemm(const PackedMatrix& a, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc, const float* bias,
                const FusedActivation& act, int threads, const int64_t* b_rows) {
  const int64_t m = a.rows(), k = a.depth();
  const int64_t panels = (m + PackedMatrix::kRows - 1) / PackedMatrix::kRows;
  GemmPanelArgs base;
  base.b = b;
  base.ldb = ldb;
  base.k = k;
  base.n = n;
  base.ldc = ldc;
  base.b_rows = b_rows;
  // The activations of CNNs run on the accumulators; the rest (tanh, elu,
  // darknet's) are rare in conv models: applied to the stored rows.
  const bool post_activation = !EpilogueFor(act, &base.epilogue);
  const Microkernels& kernels = a.kernels();
  // Rows [r0, r1) (whole panels but the last) × columns [c0, c1) of C.
  auto block = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const int64_t step = kernels.panels_per_call == 0 ? r1 - r0 : kernels.panels_per_call * PackedMatrix::kRows;
    for (int64_t r = r0; r < r1; r += step) {
      GemmPanelArgs g = base;
      g.a = a.Panel(r / PackedMatrix::kRows);
      g.b = b + c0;
      g.n = c1 - c0;
      g.rows = static_cast<int>(std::min(step, r1 - r));
      g.c = c + r * ldc + c0;
      g.bias = bias ? bias + r : nullptr;
      kernels.gemm_panel(g);
    }
    if (post_activation)
      for (int64_t r = r0; r < r1; ++r) act.Apply(c + r * ldc + c0, static_cast<size_t>(c1 - c0));
  };
  // A parallel region costs microseconds: products smaller than that (an
  // SE block's 1x1 convs on a 1x1 map) stay on one thread.
  const int workers = threads > 1 && panels > 1 && m * n * k >= (1 << 17) ? threads : 1;
  if (workers == 1) return block(0, m, 0, n);
  // Each worker packs the B blocks it reads (microkernels.h), so workers
  // take runs of whole panels when there are enough to go round, else
  // ranges of columns (multiples of 48, whole tiles on every level).
  if (panels >= 2 * workers || n < 96 * workers) {
    ParallelFor(workers, workers, [&](int64_t w) {
      const int64_t p0 = panels * w / workers, p1 = panels * (w + 1) / workers;
      if (p0 < p1) block(p0 * PackedMatrix::kRows, std::min(m, p1 * PackedMatrix::kRows), 0, n);
    });
    return;
  }
  const int64_t chunks = (n + 47) / 48;
  ParallelFor(workers, workers, [&](int64_t w) {
    const int64_t c0 = chunks * w / workers * 48, c1 = std::min(n, chunks * (w + 1) / workers * 48);
    if (c0 < c1) block(0, m, c0, c1);
  });
}

}  // namespace tessera
