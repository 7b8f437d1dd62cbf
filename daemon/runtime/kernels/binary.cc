// Broadcasting elementwise ops with numpy (ONNX multidirectional) semantics:
// Add, Sub, Mul, Div, Pow, PRelu (two inputs) and Max, Min, Sum, Mean
// (variadic). Variadic ops fold left: y = in0 ∘ in1, then y = y ∘ in_k.
//
// Prepare turns every fold step into a BroadcastStep: the output shape with
// adjacent dimensions merged wherever both operands stay contiguous (or both
// broadcast) across them, so [N,C,H,W] + [1,C,1,1] runs as C rows of H·W
// with a scalar right operand per row. Eval walks rows; the inner loop sees
// only unit or zero strides and vectorises.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"

namespace tessera {
namespace {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kPow, kPRelu, kMax, kMin, kSum, kMean };

struct BinaryOpName {
  const char* name;
  BinaryOp op;
  bool variadic;
};

constexpr BinaryOpName kBinaryOps[] = {
    {"Add", BinaryOp::kAdd, false}, {"Sub", BinaryOp::kSub, false}, {"Mul", BinaryOp::kMul, false},
    {"Div", BinaryOp::kDiv, false}, {"Pow", BinaryOp::kPow, false}, {"PRelu", BinaryOp::kPRelu, false},
    {"Max", BinaryOp::kMax, true},  {"Min", BinaryOp::kMin, true},  {"Sum", BinaryOp::kSum, true},
    {"Mean", BinaryOp::kMean, true},
};

// One fold step y = lhs ∘ rhs over the (collapsed) output shape.
struct BroadcastStep {
  int lhs_input = 0;  // index into EvalContext::inputs, or -1 for the output itself
  int rhs_input = 1;
  std::vector<int64_t> dims;                      // collapsed output dims
  std::vector<int64_t> lhs_strides, rhs_strides;  // 0 where broadcast
  int64_t rows = 1;                               // product of all dims but the last
};

// Strides of `in` aligned right against `out` (0 on broadcast dims).
std::vector<int64_t> AlignedStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    strides[o] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  return strides;
}

BroadcastStep PlanStep(int lhs_input, const Shape& lhs, int rhs_input, const Shape& rhs, const Shape& out) {
  BroadcastStep step;
  step.lhs_input = lhs_input;
  step.rhs_input = rhs_input;
  std::vector<int64_t> ls = AlignedStrides(lhs, out), rs = AlignedStrides(rhs, out);
  // Drop unit dims, then merge dim i into i+1 when each operand is either
  // contiguous across them or broadcast along both.
  std::vector<int64_t> d, l, r;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 1) continue;
    d.push_back(out[i]);
    l.push_back(ls[i]);
    r.push_back(rs[i]);
  }
  if (d.empty()) {
    d = {1};
    l = {0};
    r = {0};
  }
  auto mergeable = [&](const std::vector<int64_t>& s, size_t i) {
    return (s[i] == 0 && s[i + 1] == 0) || (s[i] != 0 && s[i + 1] != 0 && s[i] == s[i + 1] * d[i + 1]);
  };
  for (size_t i = 0; i < d.size();) {
    if (i + 1 < d.size() && mergeable(l, i) && mergeable(r, i)) {
      d[i + 1] *= d[i];
      d.erase(d.begin() + i);
      l.erase(l.begin() + i);
      r.erase(r.begin() + i);
      i = i > 0 ? i - 1 : 0;
    } else {
      ++i;
    }
  }
  step.dims = d;
  step.lhs_strides = l;
  step.rhs_strides = r;
  for (size_t i = 0; i + 1 < d.size(); ++i) step.rows *= d[i];
  return step;
}

template <typename F>
void RunStep(const BroadcastStep& step, const float* lhs, const float* rhs, float* out, int threads, F f) {
  const size_t rank = step.dims.size();
  const int64_t len = step.dims[rank - 1];
  const int64_t ls = step.lhs_strides[rank - 1], rs = step.rhs_strides[rank - 1];
  ParallelFor(step.rows, (threads > 1 && step.rows > 1 && step.rows * len > 16384) ? threads : 1, [&](int64_t row) {
    int64_t lo = 0, ro = 0, rest = row;
    for (int64_t i = static_cast<int64_t>(rank) - 2; i >= 0; --i) {
      const int64_t idx = rest % step.dims[i];
      rest /= step.dims[i];
      lo += idx * step.lhs_strides[i];
      ro += idx * step.rhs_strides[i];
    }
    const float* a = lhs + lo;
    const float* b = rhs + ro;
    float* y = out + row * len;
    // omp simd: GCC's -O2 cost model would leave these scalar.
    if (ls == 1 && rs == 1) {
#pragma omp simd
      for (int64_t k = 0; k < len; ++k) y[k] = f(a[k], b[k]);
    } else if (ls == 1) {
      const float bv = b[0];
#pragma omp simd
      for (int64_t k = 0; k < len; ++k) y[k] = f(a[k], bv);
    } else if (rs == 1) {
      const float av = a[0];
#pragma omp simd
      for (int64_t k = 0; k < len; ++k) y[k] = f(av, b[k]);
    } else {
      const float v = f(a[0], b[0]);
      for (int64_t k = 0; k < len; ++k) y[k] = v;
    }
  });
}

// A step over one flat row, both operands of the output's shape (a
// ResNet's residual Add): contiguous chunks, each through the fused
// activation while it is still in L1; the activation was a second pass
// over the whole tensor from L2 or memory (resnext50_32x4d's 16 residual
// Add + ReLU: 3.0 ms of a 80 ms run against onnxruntime's Add fused into
// its convs). With several threads, rows of at least kFlatParallel values
// are cut into one contiguous range of whole chunks per thread: each
// core's own load and store streams add up (resnext50_32x4d at 2 threads,
// AVX-512 EPYC, three alternating runs of each: its 16 Adds 1.85-2.01 ms
// on one thread, 0.94-1.34 ms on two; the model 46.0-49.0 -> 44.6-47.7 ms).
// An earlier measurement on the same kind of 2-core VM had found two
// threads slower with the other core busy (Add + Relu of [1,256,56,56]:
// 0.64-3.5 ms against 0.50-0.71); the model's other kernels already take
// both cores, so a contended second core slows them as much.
constexpr int64_t kFlatChunk = 4096;
constexpr int64_t kFlatParallel = 1 << 16;

template <typename F>
void RunFlatRange(const float* a, const float* b, float* y, int64_t n, const FusedActivation& act, F f) {
  for (int64_t begin = 0; begin < n; begin += kFlatChunk) {
    const int64_t len = std::min(kFlatChunk, n - begin);
    const float* ac = a + begin;
    const float* bc = b + begin;
    float* yc = y + begin;
#pragma omp simd
    for (int64_t k = 0; k < len; ++k) yc[k] = f(ac[k], bc[k]);
    act.Apply(yc, static_cast<size_t>(len));
  }
}

template <typename F>
void RunFlat(const float* a, const float* b, float* y, int64_t n, const FusedActivation& act, F f, int threads) {
  if (threads <= 1 || n < kFlatParallel) return RunFlatRange(a, b, y, n, act, f);
  const int64_t chunks = (n + kFlatChunk - 1) / kFlatChunk;
  ParallelFor(threads, threads, [&](int64_t w) {
    const int64_t begin = chunks * w / threads * kFlatChunk;
    const int64_t end = std::min(n, chunks * (w + 1) / threads * kFlatChunk);
    if (begin < end) RunFlatRange(a + begin, b + begin, y + begin, end - begin, act, f);
  });
}

class BroadcastKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    auto it = std::find_if(std::begin(kBinaryOps), std::end(kBinaryOps),
                           [&](const BinaryOpName& b) { return ctx.node.op == b.name; });
    if (it == std::end(kBinaryOps)) return NodeNotSupported(ctx, "not a broadcasting elementwise op");
    op_ = it->op;
    TS_RETURN_IF_ERROR(it->variadic ? CheckArity(ctx, 1, 64) : CheckArity(ctx, 2, 2));
    for (size_t i = 0; i < ctx.node.inputs.size(); ++i)
      if (!HasInput(ctx, i)) return NodeInvalid(ctx, "input " + std::to_string(i) + " is missing");
    // Output shape: numpy broadcast of all inputs (PRelu: the slope broadcasts to X).
    Shape out;
    for (const Shape& s : ctx.input_shapes) {
      Shape merged(std::max(out.size(), s.size()), 1);
      for (size_t k = 0; k < merged.size(); ++k) {
        const int64_t a = k < out.size() ? out[out.size() - 1 - k] : 1;
        const int64_t b = k < s.size() ? s[s.size() - 1 - k] : 1;
        if (a != b && a != 1 && b != 1) {
          std::string shapes;
          for (const Shape& t : ctx.input_shapes) shapes += (shapes.empty() ? "" : " and ") + ShapeToString(t);
          return NodeInvalid(ctx, "input shapes " + shapes + " do not broadcast");
        }
        merged[merged.size() - 1 - k] = a == 1 ? b : a;
      }
      out = merged;
    }
    if (op_ == BinaryOp::kPRelu && out != ctx.input_shapes[0])
      return NodeInvalid(ctx, "slope " + ShapeToString(ctx.input_shapes[1]) + " does not broadcast to X " +
                                  ShapeToString(ctx.input_shapes[0]));
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, out));
    size_ = NumElements(out);
    inputs_ = static_cast<int>(ctx.input_shapes.size());
    // The merge of an integer conv's partial sums (program_compiler.h
    // CompileOptions::integer_partial_sums): operands hold int32 bits.
    integer_sum_ = ctx.node.attrs.Int("integer_sum", 0) != 0;
    integer_requant_ = ctx.node.attrs.Int("integer_requant", 0) != 0;
    if ((integer_sum_ || integer_requant_) && (op_ != BinaryOp::kAdd || inputs_ != 2))
      return NodeInvalid(ctx, "integer_sum / integer_requant are attributes of a two-input Add");
    if (integer_sum_ && (ctx.input_shapes[0] != out || ctx.input_shapes[1] != out))
      return NodeInvalid(ctx, "an integer sum adds two operands of the output's shape");
    if (integer_requant_) {
      // y = fma(float(sum), mult[c], bias[c]): the sum [N, C, ...], the bias C values.
      requant_mult_.clear();
      for (double m : ctx.node.attrs.Floats("int8_requant_mult")) requant_mult_.push_back(static_cast<float>(m));
      channels_ = out.size() >= 2 ? out[1] : 0;
      if (ctx.input_shapes[0] != out || channels_ < 1 || NumElements(ctx.input_shapes[1]) != channels_ ||
          (!ctx.shapes_only && static_cast<int64_t>(requant_mult_.size()) != channels_))
        return NodeInvalid(ctx, "an integer requantization needs a sum of the output's shape " + ShapeToString(out) +
                                    ", " + std::to_string(channels_) +
                                    " bias values and as many int8_requant_mult (has " +
                                    std::to_string(requant_mult_.size()) + ")");
      inner_ = 1;
      for (size_t k = 2; k < out.size(); ++k) inner_ *= out[k];
    }
    // darknet's [shortcut] is an Add carrying an activation (graph.h).
    auto act = FusedActivation::FromAttributes(ctx.node.attrs);
    if (!act.ok()) return NodeNotSupported(ctx, act.status().message());
    act_ = *act;
    // Segments (kernel.h): every output element reads only the same element
    // of an operand with the output's shape, so the output may overwrite
    // the first such operand; not a later one of a variadic fold, which
    // reads y after the first step wrote it.
    in_place_input_ = -1;
    if (ctx.input_shapes[0] == out) {
      in_place_input_ = 0;
    } else if (inputs_ == 2 && ctx.input_shapes[1] == out) {
      in_place_input_ = 1;
    }
    steps_.clear();
    if (inputs_ >= 2) {
      steps_.push_back(PlanStep(0, ctx.input_shapes[0], 1, ctx.input_shapes[1], out));
      for (int k = 2; k < inputs_; ++k) steps_.push_back(PlanStep(-1, out, k, ctx.input_shapes[k], out));
    }
    return Status::OK();
  }

  int InPlaceInput() const override { return in_place_input_; }

  void Eval(const EvalContext& ctx) const override {
    float* y = ctx.outputs[0];
    if (integer_sum_) {  // int32 bits; the compiler bounds the sum below 2^31 (int8_weights.h)
      // The step's own operands, in its order (Sub is not symmetric).
      const BroadcastStep& step = steps_[0];
      const float* a = step.lhs_input < 0 ? y : ctx.inputs[step.lhs_input];
      const float* b = ctx.inputs[step.rhs_input];
      ParallelFor((size_ + 4095) / 4096, ctx.threads, [&](int64_t chunk) {
        const int64_t end = std::min(size_, (chunk + 1) * 4096);
        for (int64_t i = chunk * 4096; i < end; ++i) {
          uint32_t x, z;
          std::memcpy(&x, a + i, sizeof x);
          std::memcpy(&z, b + i, sizeof z);
          x += z;
          std::memcpy(y + i, &x, sizeof x);
        }
      });
      return;
    }
    if (integer_requant_) {  // the one rounding of an integer conv split over devices (conv_int8.h)
      const float *sum = ctx.inputs[0], *bias = ctx.inputs[1];
      const int64_t planes = size_ / inner_;
      ParallelFor(planes, ctx.threads, [&](int64_t p) {
        const int64_t c = p % channels_;
        const float m = requant_mult_[static_cast<size_t>(c)], b = bias[c];
        for (int64_t i = p * inner_; i < (p + 1) * inner_; ++i) {
          int32_t acc;
          std::memcpy(&acc, sum + i, sizeof acc);
          y[i] = std::fma(static_cast<float>(acc), m, b);
        }
      });
      act_.Apply(y, static_cast<size_t>(size_));
      return;
    }
    if (inputs_ == 1) {  // variadic op over a single input
      if (y != ctx.inputs[0]) std::memcpy(y, ctx.inputs[0], sizeof(float) * size_);
      return;
    }
    if (steps_.size() == 1 && steps_[0].dims.size() == 1 && steps_[0].lhs_strides[0] == 1 &&
        steps_[0].rhs_strides[0] == 1 && op_ != BinaryOp::kMean) {
      // The step's own operands, in its order (Sub is not symmetric).
      const BroadcastStep& step = steps_[0];
      const float* a = step.lhs_input < 0 ? y : ctx.inputs[step.lhs_input];
      const float* b = ctx.inputs[step.rhs_input];
      switch (op_) {
        case BinaryOp::kAdd:
        case BinaryOp::kSum:
          return RunFlat(
              a, b, y, size_, act_, [](float u, float v) { return u + v; }, ctx.threads);
        case BinaryOp::kMul:
          return RunFlat(
              a, b, y, size_, act_, [](float u, float v) { return u * v; }, ctx.threads);
        case BinaryOp::kSub:
          return RunFlat(
              a, b, y, size_, act_, [](float u, float v) { return u - v; }, ctx.threads);
        default:
          break;  // the rows below
      }
    }
    for (const BroadcastStep& step : steps_) {
      const float* lhs = step.lhs_input < 0 ? y : ctx.inputs[step.lhs_input];
      const float* rhs = ctx.inputs[step.rhs_input];
      const int t = ctx.threads;
      switch (op_) {
        case BinaryOp::kAdd:
        case BinaryOp::kSum:
        case BinaryOp::kMean:
          RunStep(step, lhs, rhs, y, t, [](float a, float b) { return a + b; });
          break;
        case BinaryOp::kSub:
          RunStep(step, lhs, rhs, y, t, [](float a, float b) { return a - b; });
          break;
        case BinaryOp::kMul:
          RunStep(step, lhs, rhs, y, t, [](float a, float b) { return a * b; });
          break;
        case BinaryOp::kDiv:
          RunStep(step, lhs, rhs, y, t, [](float a, float b) { return a / b; });
          break;
        case BinaryOp::kPow:
          RunStep(step, lhs, rhs, y, t, [](float a, float b) { return std::pow(a, b); });
          break;
        case BinaryOp::kPRelu:
          RunStep(step, lhs, rhs, y, t, [](float a, float b) { return a < 0.f ? a * b : a; });
          break;
        case BinaryOp::kMax:
          RunStep(step, lhs, rhs, y, t, [](float a, float b) { return std::max(a, b); });
          break;
        case BinaryOp::kMin:
          RunStep(step, lhs, rhs, y, t, [](float a, float b) { return std::min(a, b); });
          break;
      }
    }
    if (op_ == BinaryOp::kMean) {
      const float inv = 1.f / static_cast<float>(inputs_);
#pragma omp simd
      for (int64_t i = 0; i < size_; ++i) y[i] *= inv;
    }
    act_.Apply(y, static_cast<size_t>(size_));
  }

 private:
  BinaryOp op_ = BinaryOp::kAdd;
  int inputs_ = 0;
  int in_place_input_ = -1;
  int64_t size_ = 0;
  FusedActivation act_;
  std::vector<BroadcastStep> steps_;
  bool integer_sum_ = false, integer_requant_ = false;
  std::vector<float> requant_mult_;
  int64_t channels_ = 0, inner_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> MakeBroadcastKernel() { return std::make_unique<BroadcastKernel>(); }

}  // namespace tessera
