#include "daemon/runtime/executor.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "daemon/runtime/kernels/node_checks.h"
#include "partition/compile/constant_file.h"
#include "partition/graph/arena_layout.h"

namespace tessera {

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kNoOffset = SIZE_MAX;
size_t ValueBytes(const Value& v) { return static_cast<size_t>(NumElements(v.shape)) * sizeof(float); }

// Constant `v`'s data: options.constant_data's when it lives elsewhere.
const TensorData* ConstantFor(const Graph& graph, const ExecutorOptions& options, int v) {
  if (options.constant_data != nullptr) {
    auto it = options.constant_data->find(v);
    if (it != options.constant_data->end()) return it->second;
  }
  return graph.ConstantData(v);
}
// Whether constant `v` is the graph's own (counted and released here).
bool OwnConstant(const ExecutorOptions& options, int v) {
  return options.constant_data == nullptr || options.constant_data->count(v) == 0;
}
}  // namespace

// Everything Create computes once; shared (read-only) by an executor and its
// forks. Kernels are const in Eval (kernel.h), so forks may run at once.
struct Executor::Prepared {
  struct Step {
    const Node* node = nullptr;
    std::unique_ptr<Kernel> kernel;
    size_t scratch_bytes = 0;
    size_t scratch_offset = 0;
  };
  const Graph* graph = nullptr;
  ExecutorOptions options;
  std::vector<Step> steps;
  std::vector<size_t> offsets;  // per value id, byte offset in the arena (kNoOffset: none)
  std::vector<int> input_index, output_index;  // per value id: graph input/output index, or -1
  size_t arena_bytes = 0;
  size_t unplanned_bytes = 0;
  std::string arena_strategy;
  int in_place_steps = 0;
  size_t arena_lower_bound = 0;
  bool arena_optimal = false;
  size_t weight_bytes = 0;
  size_t load_peak_bytes = 0;
  std::vector<bool> constant_read;  // per value id
};

Executor::Executor(std::shared_ptr<const Prepared> prepared) : prepared_(std::move(prepared)) {}

Executor::~Executor() {
  if (owns_arena_) std::free(arena_);
}

size_t Executor::arena_bytes() const { return prepared_->arena_bytes; }
size_t Executor::unplanned_bytes() const { return prepared_->unplanned_bytes; }
const std::string& Executor::arena_strategy() const { return prepared_->arena_strategy; }
int Executor::in_place_steps() const { return prepared_->in_place_steps; }
size_t Executor::arena_lower_bound() const { return prepared_->arena_lower_bound; }
bool Executor::arena_optimal() const { return prepared_->arena_optimal; }
size_t Executor::weight_bytes() const { return prepared_->weight_bytes; }
size_t Executor::load_peak_bytes() const { return prepared_->load_peak_bytes; }
bool Executor::ReadsConstant(int value) const {
  return value >= 0 && static_cast<size_t>(value) < prepared_->constant_read.size() && prepared_->constant_read[value];
}

namespace {

// Step 1 of Create: prepare every kernel; shapes and attributes are checked
// here, once. Also sums the constant bytes the kernels keep reading.
// With `release` (the same graph, mutable), a constant is freed as soon as
// every node reading it has prepared and none reads it in Eval any more: the
// raw and the repacked form of a weight coexist for one layer at a time.
// `load_peak`: the most weight bytes held at once while preparing with
// release (graph constants not yet released + repacked forms made so far +
// the preparing kernel's transient), whether or not `release` is given:
// what a worker's PrepareReleasingWeights peaks at (device_memory.h).
// Reads the graph's streamed constants from the program's file
// (ExecutorOptions::streamed_constants); Materialize writes into the
// graph's TensorData, which CreateReleasingWeights holds mutable.
class FileConstantStream : public ConstantStream {
 public:
  FileConstantStream(const ConstantFile* file, std::unordered_map<const TensorData*, int64_t> offsets)
      : file_(file), offsets_(std::move(offsets)) {}
  Status Read(const TensorData* data, int64_t first, int64_t count, float* dst) const override {
    auto it = offsets_.find(data);
    if (it == offsets_.end() || file_ == nullptr) return Status::Internal("a constant read as streamed is not");
    if (first < 0 || count < 0 || first + count > NumElements(data->shape))
      return Status::Internal("a streamed read outside its constant");
    return file_->Read(it->second + first * 4, count, dst);
  }
  Status Materialize(const TensorData* data) const override {
    const int64_t n = NumElements(data->shape);
    if (static_cast<int64_t>(data->values.size()) == n) return Status::OK();
    auto* mutable_data = const_cast<TensorData*>(data);  // the release graph's (see above)
    mutable_data->values.resize(static_cast<size_t>(n));
    return Read(data, 0, n, mutable_data->values.data());
  }

 private:
  const ConstantFile* file_;
  std::unordered_map<const TensorData*, int64_t> offsets_;
};

Status PrepareKernels(const Graph& graph, const ExecutorOptions& options, std::vector<bool>* constant_read,
                      std::vector<std::unique_ptr<Kernel>>* kernels, Graph* release, size_t* load_peak) {
  std::vector<int> readers_left(graph.values.size(), 0);
  // Streamed constants (ExecutorOptions::streamed_constants) are in the
  // file, not in memory, until a kernel reads one whole.
  // Another graph's constant (constant_data) may be in the file too: read
  // here as if it were this graph's, and freed again unless read in Eval.
  std::vector<bool> in_file(graph.values.size(), false), from_file(graph.values.size(), false);
  std::unordered_map<const TensorData*, int64_t> offsets;
  if (options.streamed_constants != nullptr)
    for (const auto& [v, offset] : *options.streamed_constants)
      if (v >= 0 && static_cast<size_t>(v) < graph.values.size() && graph.values[v].constant) {
        in_file[v] = from_file[v] = true;
        offsets[ConstantFor(graph, options, v)] = offset;
      }
  const FileConstantStream stream(options.constant_file, std::move(offsets));
  size_t held = 0;
  for (const Node& node : graph.nodes)
    for (int v : node.inputs)
      if (v >= 0 && graph.values[v].constant && readers_left[v]++ == 0 && OwnConstant(options, v) && !in_file[v])
        held += ValueBytes(graph.values[v]);
  *load_peak = held;
  WeightForms own_forms;
  WeightForms* forms = options.weight_forms != nullptr ? options.weight_forms : &own_forms;
  for (const Node& node : graph.nodes) {
    KernelFactory factory = FindKernel(node.op);
    if (factory == nullptr)
      return Status::NotSupported("node '" + node.name + "': op " + node.op + " has no kernel in tessera");
    std::unique_ptr<Kernel> kernel = factory();
    KernelContext ctx{graph, node, {}, {}, {}, options.threads, options.shapes_only, forms};
    ctx.constant_stream = options.shapes_only ? nullptr : &stream;
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int v = node.inputs[k];
      ctx.input_shapes.push_back(v >= 0 ? graph.values[v].shape : Shape{});
      ctx.constant_inputs.push_back(v >= 0 ? ConstantFor(graph, options, v) : nullptr);
      // A streamed constant the kernel does not stream is read whole now.
      if (v >= 0 && in_file[v] && !kernel->StreamsConstant(static_cast<int>(k))) {
        if (!options.shapes_only) TS_RETURN_IF_ERROR(stream.Materialize(ctx.constant_inputs.back()));
        in_file[v] = false;
        held += ValueBytes(graph.values[v]);
      }
      ctx.streamed_inputs.push_back(v >= 0 && in_file[v]);
    }
    for (int v : node.outputs) ctx.output_shapes.push_back(graph.values[v].shape);
    Status st = kernel->Prepare(ctx);
    if (!st.ok()) {
      if (st.message().find(node.name) == std::string::npos)
        st = st.WithContext("node '" + node.name + "' (" + node.op + ")");
      return st;
    }
    // A streamed constant the kernel keeps as it is was read whole.
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int v = node.inputs[k];
      if (v >= 0 && ctx.streamed_inputs[k] && in_file[v] && kernel->ReadsConstantInEval(static_cast<int>(k))) {
        in_file[v] = false;
        held += ValueBytes(graph.values[v]);
      }
    }
    *load_peak = std::max(*load_peak, held + kernel->OwnedWeightBytes() + kernel->PrepareTransientBytes());
    held += kernel->OwnedWeightBytes();
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int v = node.inputs[k];
      if (v < 0 || !graph.values[v].constant) continue;
      if (kernel->ReadsConstantInEval(static_cast<int>(k))) (*constant_read)[v] = true;
      if (--readers_left[v] == 0 && !(*constant_read)[v] && !OwnConstant(options, v) && from_file[v] && !in_file[v]) {
        // Another graph's constant read whole here and not read in Eval:
        // back to the file (its TensorData is the program's, writable
        // under release like this graph's).
        held -= ValueBytes(graph.values[v]);
        in_file[v] = true;
        if (release != nullptr)
          std::vector<float>().swap(const_cast<TensorData*>(ConstantFor(graph, options, v))->values);
        continue;
      }
      if (readers_left[v] == 0 && !(*constant_read)[v] && OwnConstant(options, v) && !in_file[v] &&
          (options.keep_constants == nullptr || options.keep_constants->count(v) == 0)) {
        held -= ValueBytes(graph.values[v]);
        if (release == nullptr) continue;
        auto it = release->constants.find(v);
        if (it != release->constants.end()) std::vector<float>().swap(it->second.values);
      }
    }
    kernels->push_back(std::move(kernel));
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<Executor>> Executor::Create(const Graph& graph, const ExecutorOptions& options) {
  return Create(graph, options, nullptr);
}

Result<std::unique_ptr<Executor>> Executor::CreateReleasingWeights(Graph* graph, const ExecutorOptions& options) {
  return Create(*graph, options, graph);
}

Result<std::unique_ptr<Executor>> Executor::Create(const Graph& graph, const ExecutorOptions& options,
                                                   Graph* release) {
  TS_RETURN_IF_ERROR(graph.Validate());
  auto p = std::make_shared<Prepared>();
  p->graph = &graph;
  p->options = options;
  if (p->options.threads < 1) p->options.threads = 1;
  if (p->options.shapes_only) p->options.allocate_arena = false;
  const bool external = p->options.external_io;
  const size_t nv = graph.values.size();

  // 1. Kernels.
  std::vector<bool> constant_read(nv, false);
  std::vector<std::unique_ptr<Kernel>> kernels;
  if (p->options.streamed_constants != nullptr && !p->options.streamed_constants->empty() && release == nullptr &&
      !p->options.shapes_only)
    return Status::Internal("streamed constants need CreateReleasingWeights");
  TS_RETURN_IF_ERROR(PrepareKernels(graph, p->options, &constant_read, &kernels, release, &p->load_peak_bytes));
  p->options.weight_forms = nullptr;  // borrowed for Create only
  p->options.keep_constants = nullptr;
  p->options.streamed_constants = nullptr;
  p->options.constant_file = nullptr;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    Prepared::Step step;
    step.node = &graph.nodes[n];
    step.kernel = std::move(kernels[n]);
    step.scratch_bytes = step.kernel->ScratchBytes();
    p->weight_bytes += step.kernel->OwnedWeightBytes();
    p->steps.push_back(std::move(step));
  }
  for (size_t v = 0; v < nv; ++v)
    if (constant_read[v] && OwnConstant(p->options, static_cast<int>(v)))
      p->weight_bytes += ValueBytes(graph.values[v]);
  p->constant_read = constant_read;

  // 2. Lifetimes of activation buffers over the step order. Graph inputs are
  // alive from before step 0; graph outputs until after the last step.
  // With external_io they live in the caller's memory and get no offset.
  p->input_index.assign(nv, -1);
  p->output_index.assign(nv, -1);
  for (size_t i = 0; i < graph.inputs.size(); ++i) p->input_index[graph.inputs[i]] = static_cast<int>(i);
  for (size_t i = 0; i < graph.outputs.size(); ++i) p->output_index[graph.outputs[i]] = static_cast<int>(i);
  const int last_step = static_cast<int>(graph.nodes.size());  // "after the last node"
  std::vector<int> first(nv, INT_MAX), last(nv, -1);
  for (int v : graph.inputs) first[v] = 0, last[v] = std::max(last[v], 0);
  for (size_t s = 0; s < graph.nodes.size(); ++s) {
    const int step = static_cast<int>(s) + 1;  // step 0 = copying inputs in
    for (int v : graph.nodes[s].inputs)
      if (v >= 0 && !graph.values[v].constant) last[v] = std::max(last[v], step);
    for (int v : graph.nodes[s].outputs) first[v] = std::min(first[v], step), last[v] = std::max(last[v], step);
  }
  for (int v : graph.outputs) last[v] = last_step + 1;

  // Concat in place: where the output is one contiguous band per input
  // (nothing before the axis but 1s: NCHW channels at batch 1), each input
  // can be written by its producer straight into its band of the output,
  // whose buffer then lives from the first input's producer to the last
  // reader of any of them; the kernel finds its input already in place and
  // copies nothing (concat.cc). An input shares only one concat, is no graph
  // input or output, not itself a concat output holding inputs, and its
  // band starts on the arena's alignment. This saves the copy and the
  // inputs' bytes beside the output, but reserves the whole output while
  // the branches compute (googlenet: +11 %), so the arena is laid out both
  // ways and the smaller kept (ties: in place).
  std::vector<int> alias_of(nv, -1);    // value -> the concat output it lives in
  std::vector<size_t> alias_at(nv, 0);  // its byte offset there
  std::vector<bool> holds_inputs(nv, false);
  std::vector<int> first_in_place = first, last_in_place = last;
  bool any_in_place = false;
  for (const Node& n : graph.nodes) {
    if (n.op != "Concat" || n.outputs.size() != 1) continue;
    const int out = n.outputs[0];
    if (p->input_index[out] >= 0 || p->output_index[out] >= 0 || first[out] == INT_MAX) continue;
    const Shape& shape = graph.values[out].shape;
    const int64_t axis = NormalizeAxis(n.attrs.Int("axis", 0), shape.size());
    if (axis < 0) continue;
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
    if (outer != 1) continue;
    size_t at = 0;
    for (int v : n.inputs) {
      if (v < 0) break;
      const bool ok = !graph.values[v].constant && alias_of[v] < 0 && !holds_inputs[v] && v != out &&
                      p->input_index[v] < 0 && p->output_index[v] < 0 && first[v] != INT_MAX && at % kAlign == 0;
      if (ok) {
        alias_of[v] = out;
        alias_at[v] = at;
        holds_inputs[out] = any_in_place = true;
        first_in_place[out] = std::min(first_in_place[out], first[v]);
        last_in_place[out] = std::max(last_in_place[out], last[v]);
      }
      at += ValueBytes(graph.values[v]);
    }
  }

  // Segments (METHODS §6 "Segments", ExecutorOptions::segments): a step
  // whose kernel may write its output over input k (Kernel::InPlaceInput)
  // is a candidate when nothing reads that input after the step, the step
  // reads it once, and neither is a graph input or output;
  // PlanWithSegments (arena_layout.h) keeps the merges that shrink the arena.
  struct Segment {
    int in = -1, out = -1;
  };
  std::vector<Segment> segment(p->steps.size());
  for (size_t s = 0; s < p->steps.size() && p->options.segments; ++s) {
    const Node& node = *p->steps[s].node;
    const int k = p->steps[s].kernel->InPlaceInput();
    if (k < 0 || k >= static_cast<int>(node.inputs.size()) || node.outputs.size() != 1) continue;
    const int in = node.inputs[k], out = node.outputs[0];
    if (in < 0 || graph.values[in].constant || std::count(node.inputs.begin(), node.inputs.end(), in) != 1) continue;
    if (p->input_index[in] >= 0 || p->output_index[in] >= 0 || p->input_index[out] >= 0 || p->output_index[out] >= 0)
      continue;
    if (last[in] != static_cast<int>(s) + 1 || first[out] != static_cast<int>(s) + 1) continue;
    segment[s] = {in, out};
  }

  // 3. Offsets (METHODS §6 arena layout), checked before use.
  const BestOfGreedyLayout default_layout(kAlign);
  const ArenaLayout& layout = p->options.arena_layout ? *p->options.arena_layout : default_layout;
  struct Laid {
    std::vector<BufferRequest> requests;
    std::vector<int> request_value;  // value id, or -(step+1) for a scratch buffer
    ArenaPlan plan;
    size_t unplanned_bytes = 0;
    int merges = 0;  // segments: steps whose output takes their input's buffer
  };
  auto lay_out = [&](bool in_place) {
    Laid l;
    const std::vector<int>& f = in_place ? first_in_place : first;
    const std::vector<int>& e = in_place ? last_in_place : last;
    std::vector<int> request_of(nv, -1);
    for (size_t v = 0; v < nv; ++v) {
      if (graph.values[v].constant || e[v] < 0 || f[v] == INT_MAX) continue;
      if (external && (p->input_index[v] >= 0 || p->output_index[v] >= 0)) continue;
      if (in_place && alias_of[v] >= 0) continue;  // inside its concat's output
      request_of[v] = static_cast<int>(l.requests.size());
      l.requests.push_back({ValueBytes(graph.values[v]), f[v], e[v]});
      l.request_value.push_back(static_cast<int>(v));
      l.unplanned_bytes += ValueBytes(graph.values[v]);
    }
    std::vector<SegmentCandidate> candidates;
    for (size_t s = 0; s < p->steps.size(); ++s) {
      const Segment& g = segment[s];
      const bool candidate = g.in >= 0 && request_of[g.in] >= 0 && request_of[g.out] >= 0 &&
                             !(in_place && (holds_inputs[g.in] || holds_inputs[g.out]));  // placed with its concat
      if (p->steps[s].scratch_bytes == 0 && !candidate) continue;
      const int step = static_cast<int>(s) + 1;
      if (candidate)
        candidates.push_back({static_cast<size_t>(request_of[g.in]), static_cast<size_t>(request_of[g.out]),
                              l.requests.size(), p->steps[s].kernel->InPlaceScratchBytes()});
      l.requests.push_back({p->steps[s].scratch_bytes, step, step});
      l.request_value.push_back(-static_cast<int>(s) - 1);
      l.unplanned_bytes += p->steps[s].scratch_bytes;
    }
    SegmentPlan sp = PlanWithSegments(layout, l.requests, candidates);
    l.requests = std::move(sp.requests);
    l.plan = std::move(sp.plan);
    l.merges = sp.merges;
    return l;
  };
  Laid laid = lay_out(false);
  bool in_place = false;
  if (any_in_place) {
    Laid aliased = lay_out(true);
    if (aliased.plan.size <= laid.plan.size) laid = std::move(aliased), in_place = true;
  }
  const std::vector<BufferRequest>& requests = laid.requests;
  const ArenaPlan& plan = laid.plan;
  p->unplanned_bytes = laid.unplanned_bytes;
  TS_RETURN_IF_ERROR(CheckNoOverlap(requests, plan));
  p->arena_strategy = plan.strategy.empty() ? layout.name() : plan.strategy;
  p->arena_lower_bound = plan.lower_bound ? plan.lower_bound : LiveBytesLowerBound(requests);
  p->arena_optimal = plan.optimal || plan.size <= p->arena_lower_bound;
  p->offsets.assign(nv, kNoOffset);
  p->in_place_steps = laid.merges;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (laid.request_value[r] >= 0) {
      p->offsets[laid.request_value[r]] = plan.offsets[r];  // a merged output: its input's (segments)
    } else {
      Prepared::Step& step = p->steps[-laid.request_value[r] - 1];
      step.scratch_bytes = requests[r].size;  // a merged step's in-place scratch
      step.scratch_offset = plan.offsets[r];
    }
  }
  for (size_t v = 0; in_place && v < nv; ++v)
    if (alias_of[v] >= 0 && p->offsets[alias_of[v]] != kNoOffset) p->offsets[v] = p->offsets[alias_of[v]] + alias_at[v];
  p->arena_bytes = plan.size;

  // 4. The first executor, with its own arena.
  const bool allocate = p->options.allocate_arena;
  std::unique_ptr<Executor> ex(new Executor(std::move(p)));
  if (!allocate) return ex;
  const size_t alloc = std::max<size_t>(kAlign, (ex->arena_bytes() + kAlign - 1) / kAlign * kAlign);
  auto* arena = static_cast<float*>(std::aligned_alloc(kAlign, alloc));
  if (arena == nullptr)
    return Status::ResourceExhausted("cannot allocate an arena of " + std::to_string(alloc) + " bytes");
  ex->owns_arena_ = true;
  ex->Bind(arena);
  return ex;
}

std::unique_ptr<Executor> Executor::Fork(void* arena) const {
  std::unique_ptr<Executor> ex(new Executor(prepared_));
  if (arena == nullptr) {
    const size_t alloc = std::max<size_t>(kAlign, (arena_bytes() + kAlign - 1) / kAlign * kAlign);
    arena = std::aligned_alloc(kAlign, alloc);
    if (arena == nullptr) return nullptr;
    ex->owns_arena_ = true;
  }
  ex->Bind(static_cast<float*>(arena));
  return ex;
}

void Executor::Bind(float* arena) {
  const Prepared& p = *prepared_;
  const Graph& graph = *p.graph;
  arena_ = arena;
  eval_.assign(p.steps.size(), EvalContext{});
  io_slots_.clear();
  char* base = reinterpret_cast<char*>(arena_);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Prepared::Step& step = p.steps[s];
    EvalContext& ctx = eval_[s];
    ctx.threads = p.options.threads;
    for (size_t k = 0; k < step.node->inputs.size(); ++k) {
      const int v = step.node->inputs[k];
      if (v < 0) {
        ctx.inputs.push_back(nullptr);
      } else if (graph.values[v].constant) {
        ctx.inputs.push_back(ConstantFor(graph, prepared_->options, v)->values.data());
      } else if (p.offsets[v] == kNoOffset) {  // external: patched by RunInPlace
        const bool is_input = p.input_index[v] >= 0;
        io_slots_.push_back({static_cast<int>(s), static_cast<int>(k),
                             is_input ? p.input_index[v] : p.output_index[v], !is_input});
        ctx.inputs.push_back(nullptr);
      } else {
        ctx.inputs.push_back(reinterpret_cast<const float*>(base + p.offsets[v]));
      }
    }
    for (size_t k = 0; k < step.node->outputs.size(); ++k) {
      const int v = step.node->outputs[k];
      if (p.offsets[v] == kNoOffset) {
        io_slots_.push_back({static_cast<int>(s), -1 - static_cast<int>(k), p.output_index[v], true});
        ctx.outputs.push_back(nullptr);
      } else {
        ctx.outputs.push_back(reinterpret_cast<float*>(base + p.offsets[v]));
      }
    }
    ctx.scratch = step.scratch_bytes ? reinterpret_cast<float*>(base + step.scratch_offset) : nullptr;
  }
}

void Executor::EvalSteps() {
  const Prepared& p = *prepared_;
  Eigen::setNbThreads(p.options.threads);
  if (!p.options.profile) {
    for (size_t s = 0; s < p.steps.size(); ++s) p.steps[s].kernel->Eval(eval_[s]);
    return;
  }
  const Graph& g = *p.graph;
  if (step_seconds_.size() != g.nodes.size()) step_seconds_.assign(g.nodes.size(), 0.0);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    p.steps[s].kernel->Eval(eval_[s]);
    step_seconds_[p.steps[s].node - g.nodes.data()] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

void Executor::RunInPlace(const float* const* inputs, float* const* outputs) {
  const Prepared& p = *prepared_;
  const Graph& g = *p.graph;
  for (const IoSlot& io : io_slots_) {
    EvalContext& ctx = eval_[io.step];
    if (io.slot >= 0)
      ctx.inputs[io.slot] = io.is_output ? outputs[io.io] : inputs[io.io];
    else
      ctx.outputs[-1 - io.slot] = outputs[io.io];
  }
  EvalSteps();
  // Outputs no node writes: a constant, or a graph input passed through.
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int v = g.outputs[i];
    const size_t bytes = ValueBytes(g.values[v]);
    if (g.values[v].constant)
      std::memcpy(outputs[i], ConstantFor(g, prepared_->options, v)->values.data(), bytes);
    else if (p.input_index[v] >= 0)
      std::memcpy(outputs[i], inputs[p.input_index[v]], bytes);
  }
}

Status Executor::Run(const std::vector<TensorData>& inputs, std::vector<TensorData>* outputs) {
  const Prepared& p = *prepared_;
  const Graph& g = *p.graph;
  if (p.options.external_io || arena_ == nullptr)
    return Status::FailedPrecondition("model '" + g.name + "': this executor runs with RunInPlace or only forks");
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
    if (p.offsets[g.inputs[i]] != kNoOffset)
      std::memcpy(base + p.offsets[g.inputs[i]], inputs[i].values.data(), inputs[i].values.size() * sizeof(float));
  }
  EvalSteps();
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
      t.values = ConstantFor(g, prepared_->options, v)->values;
    } else {
      const float* src = reinterpret_cast<const float*>(base + p.offsets[v]);
      t.values.assign(src, src + NumElements(t.shape));
    }
  }
  return Status::OK();
}

}  // namespace tessera
