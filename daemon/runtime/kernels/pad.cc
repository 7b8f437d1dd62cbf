// Pad (ONNX): pads = [x1_begin, x2_begin, ..., x1_end, x2_end, ...] from the
// attr or (opset 11+) a constant input 1; mode constant (attr `value`, or
// constant input 2), reflect (mirror without repeating the edge) or edge.
// Negative pads crop.
#include "daemon/runtime/kernels/index_gather.h"
#include "daemon/runtime/kernels/kernel_factories.h"
#include "daemon/runtime/kernels/node_checks.h"

namespace tessera {
namespace {

class PadKernel final : public Kernel {
 public:
  Status Prepare(const KernelContext& ctx) override {
    TS_RETURN_IF_ERROR(CheckArity(ctx, 1, 4));
    const Shape& in = ctx.input_shapes[0];
    const size_t rank = in.size();
    std::vector<int64_t> pads = ctx.node.attrs.Ints("pads");
    float value = static_cast<float>(ctx.node.attrs.Float("value", 0.0));
    if (HasInput(ctx, 1)) {
      const TensorData* p = ConstantOrNull(ctx, 1);
      if (p == nullptr) return NodeNotSupported(ctx, "pads input must be a constant");
      pads.assign(p->values.begin(), p->values.end());
    }
    if (HasInput(ctx, 2)) {
      const TensorData* v = ConstantOrNull(ctx, 2);
      if (v == nullptr || v->values.size() > 1) return NodeNotSupported(ctx, "constant_value must be a constant scalar");
      if (!v->values.empty()) value = v->values[0];
    }
    if (HasInput(ctx, 3)) return NodeNotSupported(ctx, "the axes input (opset 18)");
    if (pads.size() != 2 * rank)
      return NodeInvalid(ctx, "pads has " + std::to_string(pads.size()) + " values, needs " +
                                  std::to_string(2 * rank) + " for input " + ShapeToString(in));
    const std::string mode = ctx.node.attrs.String("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge")
      return NodeNotSupported(ctx, "mode '" + mode + "' (constant, reflect, edge)");
    Shape out(rank);
    std::vector<std::vector<int64_t>> maps(rank);
    for (size_t d = 0; d < rank; ++d) {
      const int64_t begin = pads[d], end = pads[d + rank];
      out[d] = in[d] + begin + end;
      if (out[d] < 0) return NodeInvalid(ctx, "pads crop dimension " + std::to_string(d) + " below zero");
      if (mode != "constant" && in[d] == 0 && out[d] > 0)
        return NodeInvalid(ctx, "cannot " + mode + "-pad an empty dimension");
      // Reflect mirrors once, without repeating the edge: pads must be < the dimension.
      if (mode == "reflect" && in[d] > 1 && (begin >= in[d] || end >= in[d]))
        return NodeInvalid(ctx, "reflect pads must be smaller than dimension " + std::to_string(d) + " (" +
                                    std::to_string(in[d]) + ")");
      maps[d].resize(out[d]);
      for (int64_t o = 0; o < out[d]; ++o) {
        int64_t i = o - begin;
        if (i < 0 || i >= in[d]) {
          if (mode == "constant") {
            i = -1;
          } else if (mode == "edge") {
            i = i < 0 ? 0 : in[d] - 1;
          } else if (in[d] == 1) {
            i = 0;
          } else {
            i = i < 0 ? -i : 2 * (in[d] - 1) - i;
          }
        }
        maps[d][o] = i;
      }
    }
    TS_RETURN_IF_ERROR(CheckOutputShape(ctx, 0, out));
    gather_.Init(in, std::move(maps), value);
    return Status::OK();
  }

  void Eval(const EvalContext& ctx) const override { gather_.Run(ctx.inputs[0], ctx.outputs[0], ctx.threads); }

 private:
  IndexGather gather_;
};

}  // namespace

std::unique_ptr<Kernel> MakePadKernel() { return std::make_unique<PadKernel>(); }

}  // namespace tessera
