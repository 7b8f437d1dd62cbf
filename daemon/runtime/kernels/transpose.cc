// Transpose with ONNX `perm` (default: reverse the dimensions). Prepare
// merges input dimensions that stay adjacent and in order under `perm`, so
// e.g. NCHW->NHWC becomes a 2-D [C, HW] transpose per batch; Eval walks the
// output contiguously with an odometer over the input strides.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"

namespace tessera {
namespace {

class TransposeKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 1));
    const Shape& in = ctx.input_shapes[0];
    const size_t rank = in.size();
    std::vector<int64_t> perm(rank);
    std::iota(perm.rbegin(), perm.rend(), 0);
    perm = ctx.node.attrs.Ints("perm", perm);
    std::vector<bool> seen(rank, false);
    bool valid = perm.size() == rank;
    for (size_t i = 0; valid && i < rank; ++i) {
      valid = perm[i] >= 0 && perm[i] < static_cast<int64_t>(rank) && !seen[perm[i]];
      if (valid) seen[perm[i]] = true;
    }
    if (!valid) return NodeInvalid(ctx, "perm is not a permutation of the " + std::to_string(rank) + " input dims");
    Shape out(rank);
    for (size_t i = 0; i < rank; ++i) out[i] = in[perm[i]];
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, out));
    size_ = NumElements(in);
    // Drop unit dims, then merge runs of consecutive input dims.
    std::vector<int64_t> kept;  // input dims, in output order
    for (size_t i = 0; i < rank; ++i)
      if (in[perm[i]] != 1) kept.push_back(perm[i]);
    const std::vector<int64_t> in_strides = RowMajorStrides(in);
    dims_.clear();
    strides_.clear();
    for (size_t i = 0; i < kept.size(); ++i) {
      if (!dims_.empty() && kept[i - 1] < kept[i]) {
        // Input dims adjacent up to unit dims: the merged dim keeps the inner stride.
        bool contiguous = true;
        for (int64_t d = kept[i - 1] + 1; d < kept[i]; ++d) contiguous &= in[d] == 1;
        if (contiguous) {
          dims_.back() *= in[kept[i]];
          strides_.back() = in_strides[kept[i]];
          continue;
        }
      }
      dims_.push_back(in[kept[i]]);
      strides_.push_back(in_strides[kept[i]]);
    }
    identity_ = dims_.size() <= 1;
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override {
    const float* x = ctx.inputs[0];
    float* y = ctx.outputs[0];
    if (identity_) {
      std::memcpy(y, x, sizeof(float) * size_);
      return;
    }
    const size_t rank = dims_.size();
    const int64_t inner = dims_[rank - 1], inner_stride = strides_[rank - 1];
    const int64_t rows = size_ / inner;
    ParallelFor(rows, (ctx.threads > 1 && size_ > 65536) ? ctx.threads : 1, [&](int64_t r) {
      int64_t offset = 0, rest = r;
      for (int64_t i = static_cast<int64_t>(rank) - 2; i >= 0; --i) {
        offset += (rest % dims_[i]) * strides_[i];
        rest /= dims_[i];
      }
      float* dst = y + r * inner;
      const float* src = x + offset;
#pragma omp simd
      for (int64_t k = 0; k < inner; ++k) dst[k] = src[k * inner_stride];
    });
  }

 private:
  std::vector<int64_t> dims_, strides_;  // merged output dims and their input strides
  int64_t size_ = 0;
  bool identity_ = false;
};

}  // namespace

std::unique_ptr<Kernel> MakeTransposeKernel() { return std::make_unique<TransposeKernel>(); }

}  // namespace tessera
