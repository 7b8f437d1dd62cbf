// Test harness for single kernels: builds a one-node Graph, runs the
// kernel's Prepare/Eval directly (no executor), and compares against naive
// reference loops written in the tests.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/runtime/kernels/kernel.h"
#include "partition/graph/graph.h"

namespace tessera::testing {

struct TestTensor {
  Shape shape;
  std::vector<float> values;
  bool constant = false;
  bool absent = false;  // an omitted optional input (id -1)
};

inline TestTensor Activation(Shape shape, std::vector<float> values) { return {std::move(shape), std::move(values)}; }
inline TestTensor Weights(Shape shape, std::vector<float> values) {
  return {std::move(shape), std::move(values), true};
}
inline TestTensor Omitted() { return {{}, {}, false, true}; }

struct NodeRun {
  Status status;
  std::vector<std::vector<float>> outputs;
  size_t scratch_bytes = 0;
};

// Runs `op` once. Outputs are pre-filled with NaN so unwritten elements show.
inline NodeRun RunNode(const std::string& op, const Attributes& attrs, const std::vector<TestTensor>& inputs,
                       const std::vector<Shape>& output_shapes, int threads = 1, const std::string& name = "node0") {
  NodeRun run;
  Graph graph;
  Node node;
  node.name = name;
  node.op = op;
  node.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TestTensor& t = inputs[i];
    if (t.absent) {
      node.inputs.push_back(-1);
    } else if (t.constant) {
      node.inputs.push_back(graph.AddConstant("in" + std::to_string(i), TensorData{t.shape, t.values}));
    } else {
      int id = graph.AddValue("in" + std::to_string(i), t.shape);
      graph.inputs.push_back(id);
      node.inputs.push_back(id);
    }
  }
  for (size_t i = 0; i < output_shapes.size(); ++i) {
    int id = graph.AddValue("out" + std::to_string(i), output_shapes[i]);
    node.outputs.push_back(id);
    graph.outputs.push_back(id);
  }
  graph.AddNode(node);
  const Node& added = graph.nodes.back();
  KernelFactory factory = FindKernel(op);
  if (factory == nullptr) {
    run.status = Status::NotSupported("no kernel for " + op);
    return run;
  }
  std::unique_ptr<Kernel> kernel = factory();
  KernelContext ctx{graph, added, {}, output_shapes, {}, threads};
  for (size_t i = 0; i < inputs.size(); ++i) {
    ctx.input_shapes.push_back(inputs[i].absent ? Shape{} : inputs[i].shape);
    ctx.constant_inputs.push_back(added.inputs[i] >= 0 ? graph.ConstantData(added.inputs[i]) : nullptr);
  }
  run.status = kernel->Prepare(ctx);
  if (!run.status.ok()) return run;
  run.scratch_bytes = kernel->ScratchBytes();
  std::vector<float> scratch(run.scratch_bytes / sizeof(float) + 16);
  EvalContext ectx;
  for (size_t i = 0; i < inputs.size(); ++i)
    ectx.inputs.push_back(inputs[i].absent ? nullptr : inputs[i].values.data());
  for (const Shape& s : output_shapes) run.outputs.emplace_back(NumElements(s), std::nanf(""));
  for (auto& o : run.outputs) ectx.outputs.push_back(o.data());
  // 64-byte aligned scratch, as the executor promises.
  auto base = reinterpret_cast<uintptr_t>(scratch.data());
  ectx.scratch = reinterpret_cast<float*>((base + 63) & ~uintptr_t{63});
  ectx.threads = threads;
  kernel->Eval(ectx);
  return run;
}

inline std::vector<float> RandomValues(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Element-wise comparison with |a - e| <= abs_tol + rel_tol·|e|; reports the first mismatch.
inline void ExpectClose(const std::vector<float>& actual, const std::vector<double>& expected,
                        double rel_tol = 1e-5, double abs_tol = 1e-5) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    const bool both_inf = std::isinf(a) && std::isinf(e) && (a > 0) == (e > 0);
    if (both_inf) continue;
    if (!(std::fabs(a - e) <= abs_tol + rel_tol * std::fabs(e))) {
      std::ostringstream os;
      os << "element " << i << ": got " << a << ", expected " << e;
      FAIL(os.str());
    }
  }
}

inline std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

}  // namespace tessera::testing
