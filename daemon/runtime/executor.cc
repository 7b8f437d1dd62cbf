#include "daemon/runtime/executor.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "partition/graph/arena_layout.h"

namespace tessera {

struct Executor::Step {
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;
  size_t scratch_bytes = 0;
  size_t scratch_offset = 0;
  // Input/output/scratch pointers, fixed once the arena exists (end of
  // Create), so Run allocates nothing (kernel.h: no allocation in Eval).
  EvalContext eval;
};

Executor::~Executor() { std::free(arena_); }

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kNoOffset = SIZE_MAX;
size_t ValueBytes(const Value& v) { return static_cast<size_t>(NumElements(v.shape)) * sizeof(float); }
}  // namespace

Result<std::unique_ptr<Executor>> Executor::Create(const Graph& graph, const ExecutorOptions& options) {
  TS_RETURN_IF_ERROR(graph.Validate());
  std::unique_ptr<Executor> ex(new Executor());
  ex->graph_ = &graph;
  ex->options_ = options;
  if (ex->options_.threads < 1) ex->options_.threads = 1;

  // 1. Prepare every kernel: shapes and attributes are checked here, once.
  for (const Node& node : graph.nodes) {
    KernelFactory factory = FindKernel(node.op);
    if (factory == nullptr)
      return Status::NotSupported("node '" + node.name + "': op " + node.op + " has no kernel in tessera");
    Step step;
    step.node = &node;
    step.kernel = factory();
    KernelContext ctx{graph, node, {}, {}, {}, ex->options_.threads};
    for (int v : node.inputs) {
      ctx.input_shapes.push_back(v >= 0 ? graph.values[v].shape : Shape{});
      ctx.constant_inputs.push_back(v >= 0 ? graph.ConstantData(v) : nullptr);
    }
    for (int v : node.outputs) ctx.output_shapes.push_back(graph.values[v].shape);
    Status st = step.kernel->Prepare(ctx);
    if (!st.ok()) {
      if (st.message().find(node.name) == std::string::npos)
        st = st.WithContext("node '" + node.name + "' (" + node.op + ")");
      return st;
    }
    step.scratch_bytes = step.kernel->ScratchBytes();
    ex->steps_.push_back(std::move(step));
  }

  // 2. Lifetimes of activation buffers over the step order. Graph inputs are
  // alive from before step 0; graph outputs until after the last step.
  const int last_step = static_cast<int>(graph.nodes.size());  // "after the last node"
  const size_t nv = graph.values.size();
  std::vector<int> first(nv, INT_MAX), last(nv, -1);
  for (int v : graph.inputs) first[v] = 0, last[v] = std::max(last[v], 0);
  for (size_t s = 0; s < graph.nodes.size(); ++s) {
    const int step = static_cast<int>(s) + 1;  // step 0 = copying inputs in
    for (int v : graph.nodes[s].inputs)
      if (v >= 0 && !graph.values[v].constant) last[v] = std::max(last[v], step);
    for (int v : graph.nodes[s].outputs) first[v] = std::min(first[v], step), last[v] = std::max(last[v], step);
  }
  for (int v : graph.outputs) last[v] = last_step + 1;

  std::vector<BufferRequest> requests;
  std::vector<int> request_value;  // value id, or -(step+1) for a scratch buffer
  for (size_t v = 0; v < nv; ++v) {
    if (graph.values[v].constant || last[v] < 0 || first[v] == INT_MAX) continue;
    requests.push_back({ValueBytes(graph.values[v]), first[v], last[v]});
    request_value.push_back(static_cast<int>(v));
    ex->unplanned_bytes_ += ValueBytes(graph.values[v]);
  }
  for (size_t s = 0; s < ex->steps_.size(); ++s) {
    if (ex->steps_[s].scratch_bytes == 0) continue;
    const int step = static_cast<int>(s) + 1;
    requests.push_back({ex->steps_[s].scratch_bytes, step, step});
    request_value.push_back(-static_cast<int>(s) - 1);
    ex->unplanned_bytes_ += ex->steps_[s].scratch_bytes;
  }

  // 3. Offsets (METHODS §6 arena layout), checked before use.
  GreedyBySizeLayout layout(kAlign);
  ArenaPlan plan = layout.Plan(requests);
  TS_RETURN_IF_ERROR(CheckNoOverlap(requests, plan));
  ex->offsets_.assign(nv, kNoOffset);
  for (size_t r = 0; r < requests.size(); ++r) {
    if (request_value[r] >= 0) ex->offsets_[request_value[r]] = plan.offsets[r];
    else ex->steps_[-request_value[r] - 1].scratch_offset = plan.offsets[r];
  }
  ex->arena_bytes_ = plan.size;
  const size_t alloc = std::max<size_t>(kAlign, (plan.size + kAlign - 1) / kAlign * kAlign);
  ex->arena_ = static_cast<float*>(std::aligned_alloc(kAlign, alloc));
  if (ex->arena_ == nullptr)
    return Status::ResourceExhausted("cannot allocate an arena of " + std::to_string(alloc) + " bytes");

  // 4. Every step's EvalContext, pointing into the arena and the constants.
  char* base = reinterpret_cast<char*>(ex->arena_);
  for (Step& step : ex->steps_) {
    EvalContext& ctx = step.eval;
    ctx.threads = ex->options_.threads;
    for (int v : step.node->inputs) {
      if (v < 0) ctx.inputs.push_back(nullptr);
      else if (graph.values[v].constant) ctx.inputs.push_back(graph.ConstantData(v)->values.data());
      else ctx.inputs.push_back(reinterpret_cast<const float*>(base + ex->offsets_[v]));
    }
    for (int v : step.node->outputs) ctx.outputs.push_back(reinterpret_cast<float*>(base + ex->offsets_[v]));
    ctx.scratch = step.scratch_bytes ? reinterpret_cast<float*>(base + step.scratch_offset) : nullptr;
  }
  return ex;
}

Status Executor::Run(const std::vector<TensorData>& inputs, std::vector<TensorData>* outputs) {
  const Graph& g = *graph_;
  if (inputs.size() != g.inputs.size())
    return Status::InvalidArgument("model '" + g.name + "' takes " + std::to_string(g.inputs.size()) +
                                   " input(s), got " + std::to_string(inputs.size()));
  char* base = reinterpret_cast<char*>(arena_);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = g.values[g.inputs[i]];
    if (inputs[i].shape != v.shape)
      return Status::InvalidArgument("input '" + v.name + "' must have shape " + ShapeToString(v.shape) + ", got " +
                                     ShapeToString(inputs[i].shape));
    if (static_cast<int64_t>(inputs[i].values.size()) != NumElements(v.shape))
      return Status::InvalidArgument("input '" + v.name + "' has " + std::to_string(inputs[i].values.size()) +
                                     " values for shape " + ShapeToString(v.shape));
    if (offsets_[g.inputs[i]] != kNoOffset)
      std::memcpy(base + offsets_[g.inputs[i]], inputs[i].values.data(), inputs[i].values.size() * sizeof(float));
  }
  Eigen::setNbThreads(options_.threads);
  if (!options_.profile) {
    for (const Step& step : steps_) step.kernel->Eval(step.eval);
  } else {
    if (step_seconds_.size() != g.nodes.size()) step_seconds_.assign(g.nodes.size(), 0.0);
    for (const Step& step : steps_) {
      const auto t0 = std::chrono::steady_clock::now();
      step.kernel->Eval(step.eval);
      step_seconds_[step.node - g.nodes.data()] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  // Outputs: reuse the caller's tensors when they already have the right
  // shapes, so a steady-state Run allocates nothing at all.
  const bool reuse = outputs->size() == g.outputs.size() &&
                     std::equal(g.outputs.begin(), g.outputs.end(), outputs->begin(),
                                [&](int v, const TensorData& t) { return t.shape == g.values[v].shape; });
  if (!reuse) {
    outputs->clear();
    outputs->resize(g.outputs.size());
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int v = g.outputs[i];
    TensorData& t = (*outputs)[i];
    if (!reuse) t.shape = g.values[v].shape;
    if (g.values[v].constant) {
      t.values = g.ConstantData(v)->values;
    } else {
      const float* src = reinterpret_cast<const float*>(base + offsets_[v]);
      t.values.assign(src, src + NumElements(t.shape));
    }
  }
  return Status::OK();
}

}  // namespace tessera
