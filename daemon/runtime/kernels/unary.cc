// Pointwise unary ops (ONNX semantics and attribute defaults): Relu,
// LeakyRelu(alpha=0.01), Clip(min/max as attrs, or constant inputs 1/2 as in
// opset 11+; missing = unbounded), Sigmoid, HardSigmoid(alpha=0.2, beta=0.5),
// HardSwish, Tanh, Elu(alpha=1), Softplus, Exp, Log, Sqrt, Neg, Abs,
// Reciprocal, Floor, Ceil, Erf, and Gelu (ONNX opset 20: approximate "none"
// = x·½·(1 + erf(x/√2)), or "tanh"; also what the importer fuses PyTorch's
// exported erf subgraph into, graph.h). Output has the input's shape. Eigen
// array expressions give vectorised exp/tanh/logistic; erf is std::erf per
// element (Eigen's erf lives in its unsupported module). QuantizeDequantize
// (attrs scale, zero_point, qmin, qmax) puts x on its int8/uint8 grid
// (partition/graph/quantization.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Core>

#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/microkernels.h"
#include "daemon/runtime/kernels/node_checks.h"
#include "daemon/runtime/kernels/parallel_for.h"
#include "partition/graph/quantization.h"

namespace tessera {
namespace {

enum class UnaryOp {
  kRelu,
  kLeakyRelu,
  kClip,
  kSigmoid,
  kHardSigmoid,
  kHardSwish,
  kTanh,
  kElu,
  kSoftplus,
  kExp,
  kLog,
  kSqrt,
  kNeg,
  kAbs,
  kReciprocal,
  kFloor,
  kCeil,
  kErf,
  kGelu,
  kGeluTanh,
  kQuantizeDequantize,
};

struct UnaryOpName {
  const char* name;
  UnaryOp op;
};

constexpr UnaryOpName kUnaryOps[] = {
    {"Relu", UnaryOp::kRelu},
    {"LeakyRelu", UnaryOp::kLeakyRelu},
    {"Clip", UnaryOp::kClip},
    {"Sigmoid", UnaryOp::kSigmoid},
    {"HardSigmoid", UnaryOp::kHardSigmoid},
    {"HardSwish", UnaryOp::kHardSwish},
    {"Tanh", UnaryOp::kTanh},
    {"Elu", UnaryOp::kElu},
    {"Softplus", UnaryOp::kSoftplus},
    {"Exp", UnaryOp::kExp},
    {"Log", UnaryOp::kLog},
    {"Sqrt", UnaryOp::kSqrt},
    {"Neg", UnaryOp::kNeg},
    {"Abs", UnaryOp::kAbs},
    {"Reciprocal", UnaryOp::kReciprocal},
    {"Floor", UnaryOp::kFloor},
    {"Ceil", UnaryOp::kCeil},
    {"Erf", UnaryOp::kErf},
    {"Gelu", UnaryOp::kGelu},
    {"QuantizeDequantize", UnaryOp::kQuantizeDequantize},
};

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;

// Elements per parallel chunk: large enough to amortise a thread hand-off.
constexpr int64_t kChunk = 1 << 14;

class UnaryKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    const std::string& name = ctx.node.op;
    auto it = std::find_if(std::begin(kUnaryOps), std::end(kUnaryOps),
                           [&](const UnaryOpName& u) { return name == u.name; });
    if (it == std::end(kUnaryOps)) return NodeNotSupported(ctx, "not a pointwise unary op");
    op_ = it->op;
    const auto& a = ctx.node.attrs;
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, op_ == UnaryOp::kClip ? 3 : 1));
    switch (op_) {
      case UnaryOp::kLeakyRelu:
        alpha_ = static_cast<float>(a.Float("alpha", 0.01));
        break;
      case UnaryOp::kHardSigmoid:
        alpha_ = static_cast<float>(a.Float("alpha", 0.2));
        beta_ = static_cast<float>(a.Float("beta", 0.5));
        break;
      case UnaryOp::kElu:
        alpha_ = static_cast<float>(a.Float("alpha", 1.0));
        break;
      case UnaryOp::kGelu: {
        const std::string approximate = a.String("approximate", "none");
        if (approximate == "tanh") {
          op_ = UnaryOp::kGeluTanh;
        } else if (approximate != "none") {
          return NodeNotSupported(ctx, "approximate '" + approximate + "' (none or tanh)");
        }
        break;
      }
      case UnaryOp::kClip: {
        alpha_ = static_cast<float>(a.Float("min", -std::numeric_limits<double>::infinity()));
        beta_ = static_cast<float>(a.Float("max", std::numeric_limits<double>::infinity()));
        for (size_t i = 1; i < 3; ++i) {
          if (!HasInput(ctx, i)) continue;
          const TensorData* bound = ConstantOrNull(ctx, i);
          if (bound == nullptr || bound->values.size() != 1)
            return NodeNotSupported(ctx, std::string(i == 1 ? "min" : "max") + " must be a constant scalar");
          (i == 1 ? alpha_ : beta_) = bound->values[0];
        }
        break;
      }
      case UnaryOp::kQuantizeDequantize: {
        grid_.scale = static_cast<float>(a.Float("scale", 0.0));
        grid_.zero_point = static_cast<int32_t>(a.Int("zero_point", 0));
        grid_.qmin = static_cast<int32_t>(a.Int("qmin", -128));
        grid_.qmax = static_cast<int32_t>(a.Int("qmax", 127));
        if (!(grid_.scale > 0) || !std::isfinite(grid_.scale) || grid_.qmin > grid_.qmax ||
            grid_.zero_point < grid_.qmin || grid_.zero_point > grid_.qmax)
          return NodeNotSupported(ctx, "needs a positive scale and qmin <= zero_point <= qmax");
        break;
      }
      default:
        break;
    }
    size_ = NumElements(ctx.input_shapes[0]);
    return CheckOutputShape(ctx, 0, ctx.input_shapes[0]);
  }

  // Segments (kernel.h): element i of the output reads element i of the input only.
  int InPlaceInput() const override { return 0; }

  void Eval(const EvalContext& ctx) const override {
    const int64_t chunks = (size_ + kChunk - 1) / kChunk;
    ParallelFor(chunks, (ctx.threads > 1 && chunks > 1) ? ctx.threads : 1, [&](int64_t c) {
      const int64_t begin = c * kChunk, len = std::min(kChunk, size_ - begin);
      Apply(ctx.inputs[0] + begin, ctx.outputs[0] + begin, len);
    });
  }

 private:
  void Apply(const float* in, float* out, int64_t n) const {
    Eigen::Map<const Eigen::ArrayXf> x(in, n);
    Eigen::Map<Eigen::ArrayXf> y(out, n);
    const float a = alpha_, b = beta_;
    switch (op_) {
      case UnaryOp::kRelu: y = x.max(0.f); break;
      case UnaryOp::kLeakyRelu: y = (x < 0.f).select(a * x, x); break;
      case UnaryOp::kClip: y = x.max(a).min(b); break;
      case UnaryOp::kSigmoid:
        y = x;
        logistic_(out, n, false);
        break;
      case UnaryOp::kHardSigmoid: y = (a * x + b).max(0.f).min(1.f); break;
      case UnaryOp::kHardSwish: y = x * (x * (1.f / 6.f) + 0.5f).max(0.f).min(1.f); break;
      case UnaryOp::kTanh: y = x.tanh(); break;
      case UnaryOp::kElu: y = (x < 0.f).select(a * (x.exp() - 1.f), x); break;
      // log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
      case UnaryOp::kSoftplus: y = x.max(0.f) + (-x.abs()).exp().log1p(); break;
      case UnaryOp::kExp: y = x.exp(); break;
      case UnaryOp::kLog: y = x.log(); break;
      case UnaryOp::kSqrt: y = x.sqrt(); break;
      case UnaryOp::kNeg: y = -x; break;
      case UnaryOp::kAbs: y = x.abs(); break;
      case UnaryOp::kReciprocal: y = x.inverse(); break;
      case UnaryOp::kFloor: y = x.floor(); break;
      case UnaryOp::kCeil: y = x.ceil(); break;
      case UnaryOp::kErf:
        for (int64_t i = 0; i < n; ++i) out[i] = std::erf(in[i]);
        break;
      case UnaryOp::kGelu:
        for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * in[i] * (1.f + std::erf(in[i] * kInvSqrt2));
        break;
      // ONNX Gelu approximate=tanh: ½x(1 + tanh(√(2/π)·(x + 0.044715·x³))).
      case UnaryOp::kGeluTanh:
        y = 0.5f * x * (1.f + (kSqrt2OverPi * (x + 0.044715f * x.cube())).tanh());
        break;
      // quantization.h: the value the int8 code of x stands for.
      case UnaryOp::kQuantizeDequantize:  // quantization.h QuantizeDequantize, bit for bit, vectorised
        MicrokernelsFor(ActiveIsa())
            .quantize_dequantize(in, n, grid_.scale, static_cast<float>(grid_.qmin - grid_.zero_point),
                                 static_cast<float>(grid_.qmax - grid_.zero_point), out);
        break;
    }
  }

  UnaryOp op_ = UnaryOp::kRelu;
  float alpha_ = 0.f, beta_ = 0.f;
  QuantGrid grid_;
  void (*logistic_)(float*, int64_t, bool) = MicrokernelsFor(ActiveIsa()).logistic;
  int64_t size_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> MakeUnaryKernel() { return std::make_unique<UnaryKernel>(); }

}  // namespace tessera
