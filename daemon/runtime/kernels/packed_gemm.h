// PackedGemm: C[M×N] = A[M×K] · B[K×N] (+ bias[m]) then a fused activation,
// for the conv kernels' GEMMs where A is a constant weight matrix.
//
// Why not Eigen's product: Eigen re-packs the constant weights on every call,
// allocates its packing buffers on the heap for large products (the executor
// promises kernels allocate nothing in Eval, kernel.h), and applies bias and
// activation in a second pass over C. Here A is packed once in Prepare into
// panels of kRows rows (k-major), B is read in place (row stride ldb: the
// im2col tile, the input plane of a 1x1 conv, a Winograd V matrix), and bias
// plus relu/clip are applied to the accumulators before the single store.
//
// The register-blocked micro-kernel is chosen per CPU when the matrix is
// packed (microkernels.h: AVX-512, AVX2+FMA, or portable SSE2/NEON vectors);
// every level reads the same packed layout and allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/runtime/kernels/kernel.h"
#include "daemon/runtime/kernels/microkernels.h"

namespace tessera {

class PackedMatrix {
 public:
  static constexpr int64_t kRows = kPanelRows;  // rows per panel
  // Packs a row-major A[m×k] with row stride lda; rows are zero-padded to a
  // multiple of kRows. PackedGemm on this matrix uses the microkernels of
  // ActiveIsa() at the time of packing (isa.h).
  void Pack(const float* a, int64_t m, int64_t k, int64_t lda);
  // The same a block of rows at a time (a weight streamed from the program's
  // file, kernel.h ConstantRows): Reset sizes the matrix (zeros), then
  // PackRows packs rows [first, first + rows) given as a row-major block.
  void Reset(int64_t m, int64_t k);
  void PackRows(const float* block, int64_t first, int64_t rows, int64_t lda);
  int64_t rows() const { return m_; }
  int64_t depth() const { return k_; }
  // Panel p: [k][kRows] floats.
  const float* Panel(int64_t p) const { return data_.data() + p * k_ * kRows; }
  const Microkernels& kernels() const { return *kernels_; }
  size_t bytes() const { return data_.size() * sizeof(float); }
  // bytes() of a matrix Pack(a, m, k, ...) would make, without making it.
  static size_t BytesFor(int64_t m, int64_t k) {
    return static_cast<size_t>((m + kRows - 1) / kRows * k * kRows) * sizeof(float);
  }

 private:
  std::vector<float> data_;
  int64_t m_ = 0, k_ = 0;
  const Microkernels* kernels_ = &BaselineMicrokernels();
};

// The microkernel epilogue (microkernels.h) that applies `act` in registers.
// False when `act` has none (tanh, elu, ...): the epilogue is then kNone and
// the caller applies `act` to the stored output.
bool EpilogueFor(const FusedActivation& act, Epilogue* epilogue);

// C = A·B + bias, then `act`. B: k×n, row stride ldb; C: m×n, row stride ldc.
// bias may be nullptr. threads > 1 splits runs of row panels (or, with few
// panels, ranges of columns) over OpenMP threads
// (pass 1 inside an enclosing parallel region).
// b_rows (optional; only when a.kernels().panels_per_call == 0): row i of B
// is at b + b_rows[i] instead of b + i·ldb (an indirect B, microkernels.h).
void PackedGemm(const PackedMatrix& a, const float* b, int64_t ldb, int64_t n, float* c, int64_t ldc, const float* bias,
                const FusedActivation& act, int threads, const int64_t* b_rows = nullptr);

}  // namespace tessera
