// MatMul with numpy semantics (ONNX MatMul): A[..., M, K] · B[..., K, N] with
// broadcast batch dimensions; a 1-D A is a row [1, K] and a 1-D B a column
// [K, 1], their unit dimension dropped from the result. Either input may be
// an activation or a constant.
#include <algorithm>

#include <Eigen/Core>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

class MatMulKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 2, 2));
    Shape a = ctx.input_shapes[0], b = ctx.input_shapes[1];
    if (a.empty() || b.empty()) return NodeInvalid(ctx, "inputs must have rank >= 1");
    const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
    if (a_vector) a.insert(a.begin(), 1);
    if (b_vector) b.push_back(1);
    m_ = a[a.size() - 2];
    k_ = a[a.size() - 1];
    n_ = b[b.size() - 1];
    if (b[b.size() - 2] != k_)
      return NodeInvalid(ctx, "inner dimensions differ: " + ShapeToString(ctx.input_shapes[0]) + " x " +
                                  ShapeToString(ctx.input_shapes[1]));
    // Broadcast the batch dimensions, right-aligned.
    const size_t a_batch = a.size() - 2, b_batch = b.size() - 2;
    const size_t rank = std::max(a_batch, b_batch);
    Shape batch(rank);
    std::vector<int64_t> a_dims(rank, 1), b_dims(rank, 1);
    for (size_t i = 0; i < a_batch; ++i) a_dims[rank - a_batch + i] = a[i];
    for (size_t i = 0; i < b_batch; ++i) b_dims[rank - b_batch + i] = b[i];
    for (size_t i = 0; i < rank; ++i) {
      if (a_dims[i] != b_dims[i] && a_dims[i] != 1 && b_dims[i] != 1)
        return NodeInvalid(ctx, "batch dimensions do not broadcast: " + ShapeToString(ctx.input_shapes[0]) +
                                    " x " + ShapeToString(ctx.input_shapes[1]));
      batch[i] = std::max(a_dims[i], b_dims[i]);
    }
    Shape expected = batch;
    if (!a_vector) expected.push_back(m_);
    if (!b_vector) expected.push_back(n_);
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, expected));
    // Offsets (in matrices) of A and B for every output batch entry.
    const int64_t count = NumElements(batch);
    a_offsets_.assign(count, 0);
    b_offsets_.assign(count, 0);
    std::vector<int64_t> a_strides(rank), b_strides(rank);
    int64_t sa = 1, sb = 1;
    for (int64_t i = static_cast<int64_t>(rank) - 1; i >= 0; --i) {
      a_strides[i] = a_dims[i] == 1 ? 0 : sa;
      b_strides[i] = b_dims[i] == 1 ? 0 : sb;
      sa *= a_dims[i];
      sb *= b_dims[i];
    }
    for (int64_t flat = 0; flat < count; ++flat) {
      int64_t rest = flat, oa = 0, ob = 0;
      for (int64_t i = static_cast<int64_t>(rank) - 1; i >= 0; --i) {
        const int64_t idx = rest % batch[i];
        rest /= batch[i];
        oa += idx * a_strides[i];
        ob += idx * b_strides[i];
      }
      a_offsets_[flat] = oa;
      b_offsets_[flat] = ob;
    }
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override {
    const int64_t count = static_cast<int64_t>(a_offsets_.size());
    for (int64_t i = 0; i < count; ++i) {
      Eigen::Map<const RowMajorMatrix> a(ctx.inputs[0] + a_offsets_[i] * m_ * k_, m_, k_);
      Eigen::Map<const RowMajorMatrix> b(ctx.inputs[1] + b_offsets_[i] * k_ * n_, k_, n_);
      Eigen::Map<RowMajorMatrix> y(ctx.outputs[0] + i * m_ * n_, m_, n_);
      y.noalias() = a * b;
    }
  }

 private:
  int64_t m_ = 0, k_ = 0, n_ = 0;
  std::vector<int64_t> a_offsets_, b_offsets_;
};

}  // namespace

std::unique_ptr<Kernel> MakeMatMulKernel() { return std::make_unique<MatMulKernel>(); }

}  // namespace tessera
