// The op table: every listed op has a kernel, unknown ops have none, and the
// darknet-only ops resolve through the darknet fallback.
#include <algorithm>

#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

TEST_CASE("every supported op resolves to a kernel factory", "[kernels][registry]") {
  const auto ops = SupportedOps();
  REQUIRE(std::is_sorted(ops.begin(), ops.end()));
  for (const char* required :
       {"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Relu", "LeakyRelu",
        "Clip", "Sigmoid", "HardSigmoid", "Tanh", "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Concat", "Reshape",
        "Flatten", "Transpose", "Softmax", "Pad", "Resize", "BatchNormalization", "Identity", "Exp", "Sqrt", "Neg",
        "Abs", "ReduceMean", "Slice"}) {
    INFO(required);
    CHECK(std::find(ops.begin(), ops.end(), required) != ops.end());
  }
  for (const auto& op : ops) {
    INFO(op);
    KernelFactory f = FindKernel(op);
    REQUIRE(f != nullptr);
    CHECK(f() != nullptr);
  }
}

TEST_CASE("an unknown op has no kernel", "[kernels][registry]") {
  CHECK(FindKernel("NonMaxSuppression") == nullptr);
  CHECK(FindKernel("") == nullptr);
  CHECK(FindKernel("conv") == nullptr);  // names are case-sensitive, as in ONNX
}

TEST_CASE("darknet-only ops resolve through the darknet table", "[kernels][registry]") {
  for (const char* op : {"Reorg", "Region"}) {
    INFO(op);
    CHECK(FindKernel(op) != nullptr);
  }
}

}  // namespace
}  // namespace tessera
