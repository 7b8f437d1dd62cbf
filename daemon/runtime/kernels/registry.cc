// The explicit op table (STYLE.md, after ncnn's layer registry): canonical op
// name -> kernel factory. Names not in the table fall through to the darknet
// table (darknet_registry.h).
#include <algorithm>
#include <array>
#include <string_view>

#include "daemon/runtime/kernels/kernel.h"
#include "daemon/runtime/kernels/darknet_registry.h"
#include "daemon/runtime/kernels/kernel_factories.h"

namespace tessera {
namespace {

struct KernelEntry {
  std::string_view op;
  KernelFactory factory;
};

constexpr KernelEntry kKernelTable[] = {
    {"Abs", MakeUnaryKernel},
    {"Add", MakeBroadcastKernel},
    {"AveragePool", MakeAveragePoolKernel},
    {"BatchNormalization", MakeBatchNormalizationKernel},
    {"Ceil", MakeUnaryKernel},
    {"Clip", MakeUnaryKernel},
    {"Concat", MakeConcatKernel},
    {"Conv", MakeConvKernel},
    {"ConvTranspose", MakeConvTransposeKernel},
    {"Div", MakeBroadcastKernel},
    {"Elu", MakeUnaryKernel},
    {"Erf", MakeUnaryKernel},
    {"Exp", MakeUnaryKernel},
    {"Flatten", MakeCopyKernel},
    {"Floor", MakeUnaryKernel},
    {"Gelu", MakeUnaryKernel},
    {"Gemm", MakeGemmKernel},
    {"GlobalAveragePool", MakeGlobalAveragePoolKernel},
    {"GlobalMaxPool", MakeGlobalMaxPoolKernel},
    {"HardSigmoid", MakeUnaryKernel},
    {"HardSwish", MakeUnaryKernel},
    {"Identity", MakeCopyKernel},
    {"LayerNormalization", MakeLayerNormalizationKernel},
    {"LeakyRelu", MakeUnaryKernel},
    {"Log", MakeUnaryKernel},
    {"MatMul", MakeMatMulKernel},
    {"Max", MakeBroadcastKernel},
    {"MaxPool", MakeMaxPoolKernel},
    {"Mean", MakeBroadcastKernel},
    {"Min", MakeBroadcastKernel},
    {"Mul", MakeBroadcastKernel},
    {"Neg", MakeUnaryKernel},
    {"PRelu", MakeBroadcastKernel},
    {"Pad", MakePadKernel},
    {"Pow", MakeBroadcastKernel},
    {"Reciprocal", MakeUnaryKernel},
    {"ReduceMax", MakeReduceKernel},
    {"ReduceMean", MakeReduceKernel},
    {"ReduceMin", MakeReduceKernel},
    {"ReduceSum", MakeReduceKernel},
    {"Relu", MakeUnaryKernel},
    {"Reshape", MakeCopyKernel},
    {"Resize", MakeResizeKernel},
    {"Sigmoid", MakeUnaryKernel},
    {"Slice", MakeSliceKernel},
    {"Softmax", MakeSoftmaxKernel},
    {"Softplus", MakeUnaryKernel},
    {"QuantizeDequantize", MakeUnaryKernel},
    {"Sqrt", MakeUnaryKernel},
    {"Squeeze", MakeCopyKernel},
    {"Sub", MakeBroadcastKernel},
    {"Sum", MakeBroadcastKernel},
    {"Tanh", MakeUnaryKernel},
    {"Transpose", MakeTransposeKernel},
    {"Unsqueeze", MakeCopyKernel},
};

// darknet-only op names (graph.h), listed by SupportedOps when the darknet
// table provides them.
constexpr std::string_view kDarknetOps[] = {"DarknetCrop", "DarknetShortcut", "Detection", "Region", "Reorg"};

}  // namespace

KernelFactory FindKernel(const std::string& op) {
  for (const KernelEntry& e : kKernelTable)
    if (e.op == op) return e.factory;
  return FindDarknetKernel(op);
}

std::vector<std::string> SupportedOps() {
  std::vector<std::string> ops;
  for (const KernelEntry& e : kKernelTable) ops.emplace_back(e.op);
  for (std::string_view op : kDarknetOps)
    if (FindDarknetKernel(std::string(op)) != nullptr) ops.emplace_back(op);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace tessera

namespace tessera {

Result<const float*> ConstantRows(const KernelContext& ctx, size_t input, int64_t row, int64_t rows, int64_t row_length,
                                  std::vector<float>* block) {
  const TensorData* data = ctx.constant_inputs.at(input);
  const bool streamed = input < ctx.streamed_inputs.size() && ctx.streamed_inputs[input];
  if (!streamed) return data->values.data() + row * row_length;
  if (ctx.constant_stream == nullptr)
    return Status::Internal("node '" + ctx.node.name + "': a streamed constant without a stream");
  block->resize(static_cast<size_t>(rows * row_length));
  TS_RETURN_IF_ERROR(ctx.constant_stream->Read(data, row * row_length, rows * row_length, block->data()));
  return static_cast<const float*>(block->data());
}

Status MaterializeConstant(const KernelContext& ctx, size_t input) {
  if (ctx.shapes_only || input >= ctx.streamed_inputs.size() || !ctx.streamed_inputs[input]) return Status::OK();
  if (ctx.constant_stream == nullptr)
    return Status::Internal("node '" + ctx.node.name + "': a streamed constant without a stream");
  return ctx.constant_stream->Materialize(ctx.constant_inputs.at(input));
}

int64_t ConstantBlockRows(int64_t row_length) {
  return std::max<int64_t>(1, kConstantBlockBytes / (std::max<int64_t>(1, row_length) * 4));
}

}  // namespace tessera
