// Throughput of the heavy kernels (hidden: run with `kernels_perf_test "[perf]"`).
// Prints GFLOP/s so regressions against the onnxruntime budget (1.5x, single
// thread) are visible; asserts nothing about speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include <Eigen/Core>

#include "daemon/runtime/executor.h"
#include "partition/import/model_import.h"
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

struct Timed {
  double best_seconds = 1e30;
};

// Prepares once and times Eval `reps` times (best of).
Timed TimeNode(const std::string& op, const Attributes& attrs, const std::vector<testing::TestTensor>& inputs,
               const Shape& out_shape, int threads, int reps) {
  Graph graph;
  Node node;
  node.name = "perf";
  node.op = op;
  node.attrs = attrs;
  std::vector<const float*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    node.inputs.push_back(t.constant ? graph.AddConstant("in" + std::to_string(i), TensorData{t.shape, t.values})
                                     : graph.AddValue("in" + std::to_string(i), t.shape));
    ptrs.push_back(t.values.data());
  }
  node.outputs.push_back(graph.AddValue("out", out_shape));
  graph.AddNode(node);
  auto kernel = FindKernel(op)();
  KernelContext ctx{graph, graph.nodes.back(), {}, {out_shape}, {}, threads};
  for (size_t i = 0; i < inputs.size(); ++i) {
    ctx.input_shapes.push_back(inputs[i].shape);
    ctx.constant_inputs.push_back(graph.ConstantData(graph.nodes.back().inputs[i]));
  }
  REQUIRE(kernel->Prepare(ctx).ok());
  std::vector<float> scratch(kernel->ScratchBytes() / 4 + 16), out(NumElements(out_shape));
  EvalContext e;
  e.inputs = ptrs;
  e.outputs = {out.data()};
  e.scratch = scratch.data();
  e.threads = threads;
  Timed t;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    kernel->Eval(e);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    t.best_seconds = std::min(t.best_seconds, s);
  }
  return t;
}

void ReportConv(const char* label, int64_t c, int64_t o, int64_t hw, int64_t k, int64_t stride, int64_t group,
                int threads) {
  std::mt19937 rng(1);
  const int64_t pad = k / 2, out = (hw + 2 * pad - k) / stride + 1;
  Attributes a;
  a.Set("strides", std::vector<int64_t>{stride, stride});
  a.Set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  a.Set("group", group);
  a.Set("activation", std::string("relu"));
  auto t = TimeNode("Conv", a,
                    {testing::Activation({1, c, hw, hw}, testing::RandomValues(c * hw * hw, rng)),
                     testing::Weights({o, c / group, k, k}, testing::RandomValues(o * (c / group) * k * k, rng)),
                     testing::Weights({o}, testing::RandomValues(o, rng))},
                    {1, o, out, out}, threads, 20);
  const double flops = 2.0 * o * out * out * (c / group) * k * k;
  std::printf("%-34s %2d thread(s): %8.3f ms  %7.2f GFLOP/s\n", label, threads, t.best_seconds * 1e3,
              flops / t.best_seconds * 1e-9);
}

void ReportPool(const char* label, const char* op, int64_t c, int64_t hw, int64_t k, int64_t stride, int threads) {
  std::mt19937 rng(2);
  const int64_t pad = k / 2, out = (hw + 2 * pad - k) / stride + 1;
  Attributes a;
  a.Set("kernel_shape", std::vector<int64_t>{k, k});
  a.Set("strides", std::vector<int64_t>{stride, stride});
  a.Set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  auto t = TimeNode(op, a, {testing::Activation({1, c, hw, hw}, testing::RandomValues(c * hw * hw, rng))},
                    {1, c, out, out}, threads, 20);
  std::printf("%-34s %2d thread(s): %8.3f ms  %7.2f Gelem/s out\n", label, threads, t.best_seconds * 1e3,
              c * out * out / t.best_seconds * 1e-9);
}

void ReportAdd(const char* label, const Shape& a, const Shape& b, int threads) {
  std::mt19937 rng(3);
  auto t = TimeNode("Add", {},
                    {testing::Activation(a, testing::RandomValues(NumElements(a), rng)),
                     testing::Activation(b, testing::RandomValues(NumElements(b), rng))},
                    a, threads, 20);
  std::printf("%-34s %2d thread(s): %8.3f ms  %7.2f GB/s\n", label, threads, t.best_seconds * 1e3,
              3.0 * 4 * NumElements(a) / t.best_seconds * 1e-9);
}

TEST_CASE("pool and elementwise throughput", "[.][perf]") {
  for (int threads : {1, 2}) {
    ReportPool("maxpool 3x3/2 64x112x112", "MaxPool", 64, 112, 3, 2, threads);
    ReportPool("avgpool 3x3/1 256x28x28", "AveragePool", 256, 28, 3, 1, threads);
    ReportAdd("add 64x56x56 + same", {1, 64, 56, 56}, {1, 64, 56, 56}, threads);
    ReportAdd("add 64x56x56 + [64,1,1]", {1, 64, 56, 56}, {64, 1, 1}, threads);
  }
}

TEST_CASE("conv throughput on typical layers", "[.][perf]") {
  for (int threads : {1, 2}) {
    Eigen::setNbThreads(threads);  // what the executor does once
    ReportConv("3x3 64->64 56x56", 64, 64, 56, 3, 1, 1, threads);
    ReportConv("3x3 128->128 28x28", 128, 128, 28, 3, 1, 1, threads);
    ReportConv("1x1 64->256 56x56", 64, 256, 56, 1, 1, 1, threads);
    ReportConv("1x1 320->1280 7x7", 320, 1280, 7, 1, 1, 1, threads);
    ReportConv("7x7/2 3->64 224x224 (stem)", 3, 64, 224, 7, 2, 1, threads);
    ReportConv("dw 3x3 144 56x56", 144, 144, 56, 3, 1, 144, threads);
    ReportConv("dw 3x3/2 96 112x112", 96, 96, 112, 3, 2, 96, threads);
    ReportConv("mbv2 stem 3x3/2 3->32 224x224", 3, 32, 224, 3, 2, 1, threads);
    ReportConv("mbv2 1x1 16->96 112x112", 16, 96, 112, 1, 1, 1, threads);
    ReportConv("mbv2 1x1 144->24 56x56", 144, 24, 56, 1, 1, 1, threads);
    ReportConv("squeezenet 1x1 16->64 55x55", 16, 64, 55, 1, 1, 1, threads);
    ReportConv("squeezenet 3x3 16->64 55x55", 16, 64, 55, 3, 1, 1, threads);
    ReportConv("squeezenet 3x3 32->128 27x27", 32, 128, 27, 3, 1, 1, threads);
    ReportConv("squeezenet 3x3 64->256 13x13", 64, 256, 13, 3, 1, 1, threads);
  }
}

// Whole models, and every node of them timed alone, grouped by op (conv by
// kind). Models come from TESSERA_PERF_MODELS (colon-separated .onnx/.cfg
// paths, e.g. BUILD/oracle/resnet18.onnx from the torch oracle). Prints the
// best and median of 30 runs: the best is robust to a loaded machine.
std::string NodeKind(const Graph& g, const Node& node) {
  if (node.op != "Conv") return node.op;
  const Shape& w = g.values[node.inputs[1]].shape;
  const int64_t group = node.attrs.Int("group", 1);
  const int64_t c = g.values[node.inputs[0]].shape[1];
  if (group > 1 && group == c) return "Conv dw" + std::to_string(w[2]) + "x" + std::to_string(w[3]);
  return "Conv " + std::to_string(w[2]) + "x" + std::to_string(w[3]) + (group > 1 ? "/g" : "");
}

TEST_CASE("model latency and per-op breakdown", "[.][perf-model]") {
  const char* env = std::getenv("TESSERA_PERF_MODELS");
  if (env == nullptr) return;
  std::stringstream paths(env);
  std::string path;
  while (std::getline(paths, path, ':')) {
    auto graph = ImportModel(path, {});
    REQUIRE(graph.ok());
    const char* tenv = std::getenv("TESSERA_PERF_THREADS");
    const int threads = tenv ? std::max(1, std::atoi(tenv)) : 1;
    auto ex = Executor::Create(*graph, {threads});
    REQUIRE(ex.ok());
    std::mt19937 rng(5);
    std::vector<TensorData> inputs, outputs;
    for (int v : graph->inputs)
      inputs.push_back({graph->values[v].shape, testing::RandomValues(NumElements(graph->values[v].shape), rng)});
    std::vector<double> ms;
    for (int r = 0; r < 32; ++r) {
      auto start = std::chrono::steady_clock::now();
      REQUIRE((*ex)->Run(inputs, &outputs).ok());
      if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s (%d threads): best %.3f ms, median %.3f ms\n", path.c_str(), threads, ms.front(), ms[ms.size() / 2]);
    std::map<std::string, std::pair<int, double>> by_kind;
    for (const Node& node : graph->nodes) {
      std::vector<testing::TestTensor> ins;
      for (int v : node.inputs) {
        if (v < 0) {
          testing::TestTensor t;
          t.absent = true;
          ins.push_back(t);
        } else if (graph->values[v].constant) {
          ins.push_back(testing::Weights(graph->values[v].shape, graph->ConstantData(v)->values));
        } else {
          const Shape& sh = graph->values[v].shape;
          ins.push_back(testing::Activation(sh, testing::RandomValues(NumElements(sh), rng)));
        }
      }
      if (node.outputs.size() != 1 || std::any_of(ins.begin(), ins.end(), [](auto& t) { return t.absent; })) continue;
      Attributes attrs = node.attrs;
      Timed t = TimeNode(node.op, attrs, ins, graph->values[node.outputs[0]].shape, threads, 10);
      auto& entry = by_kind[NodeKind(*graph, node)];
      entry.first += 1;
      entry.second += t.best_seconds * 1e3;
    }
    for (const auto& [kind, entry] : by_kind)
      std::printf("  %-16s %3d nodes %8.3f ms\n", kind.c_str(), entry.first, entry.second);
  }
}

}  // namespace
}  // namespace tessera
