// Executor: runs a whole Graph on one device in one pre-planned arena
// (ARCHITECTURE.md "Executor"; METHODS §6 "Arena layout").
//
// Create() prepares every kernel (validating shapes and attributes, packing
// constant weights), computes every activation buffer's lifetime over the
// node order, and lays them out in one arena (partition/graph/arena_layout.h).
// The prepared kernels are immutable and shared: Fork() makes another
// executor over the same kernels (weights kept once) with its own arena, for
// another request in flight.
//
// Two ways to run:
//  * Run(): inputs are copied into the arena and outputs out of it; the
//    arena holds graph inputs and outputs too (tessera run, tests).
//  * RunInPlace() (options.external_io): graph inputs are read from and
//    graph outputs written to caller memory, so the arena holds only the
//    intermediates and scratch — a device program places those tensors in
//    its own arena (program_runner.h) and nothing is copied.
//
//   arena (arena_bytes()):  [ intermediates and per-step scratch, offsets by
//                             liveness; + inputs/outputs unless external_io ]
//
// Thread-safety: Run()/RunInPlace() are not reentrant (one arena); Fork()
// one executor per concurrent stream. Fork() itself is thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/runtime/kernels/kernel.h"
#include "daemon/runtime/kernels/weight_forms.h"
#include "partition/graph/arena_layout.h"
#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

class ConstantFile;  // partition/compile/constant_file.h

struct ExecutorOptions {
  int threads = 1;  // intra-op threads (kernels use up to this many)
  bool profile = false;  // time every step of every Run (StepSeconds)
  // Graph inputs and outputs live outside the arena (RunInPlace).
  bool external_io = false;
  // false: Create prepares the kernels but allocates no arena; such an
  // executor only serves to Fork() executors bound to the caller's memory.
  bool allocate_arena = true;
  // Sizes only (KernelContext::shapes_only): weights may have no values;
  // arena_bytes() and weight_bytes() are what a real Create would give.
  // Implies !allocate_arena; such an executor must never run or Fork.
  bool shapes_only = false;
  // The arena layout (borrowed, must outlive Create); nullptr: the default
  // BestOfGreedyLayout, the one the planner's promise uses.
  const ArenaLayout* arena_layout = nullptr;
  // Segments (METHODS §6): a step whose kernel can write its output over an
  // input nothing reads later (Kernel::InPlaceInput: elementwise ops,
  // pointwise and depthwise convs) may get one buffer for both, where that
  // shrinks the arena (PlanWithSegments, partition/graph/arena_layout.h
  // chooses which). false: never.
  bool segments = true;
  // Weight forms shared with other executors of the same device program
  // (kernels/weight_forms.h; borrowed, used only during Create); nullptr:
  // the executor shares forms between its own kernels only.
  WeightForms* weight_forms = nullptr;
  // Constants whose values live in another graph (value id -> that data;
  // borrowed, must outlive the executor and its forks): a device program
  // keeps each constant once (program_runner.cc). Kernels read these instead
  // of the graph's own TensorData, which may have no values; the executor
  // neither counts their bytes nor releases them.
  const std::unordered_map<int, const TensorData*>* constant_data = nullptr;
  // Constants CreateReleasingWeights must not free even when no kernel
  // reads them in Eval, because other graphs read them (through their
  // constant_data); the caller frees them once all have prepared.
  const std::unordered_set<int>* keep_constants = nullptr;
  // The graph's own constants whose values are still in the device
  // program's file (value id -> byte offset in constant_file; borrowed, used
  // only during Create; DeviceProgram::streamed_constants): read as the
  // kernels prepare, a block at a time by kernels that pack them
  // (Kernel::StreamsConstant), whole before Prepare for the others (issue 11
  // item 2). Only with CreateReleasingWeights, or shapes_only (then only the
  // keys matter: the sizing of a worker's streamed load).
  const std::unordered_map<int, int64_t>* streamed_constants = nullptr;
  const ConstantFile* constant_file = nullptr;
};

class Executor {
 public:
  // REQUIRES: `graph` is canonical (graph.h), validated, and outlives the
  // executor and its forks. Fails with the node name on the first kernel
  // that rejects it. The executor owns an arena of arena_bytes().
  static Result<std::unique_ptr<Executor>> Create(const Graph& graph, const ExecutorOptions& options);
  // The same, and each weight is kept once (issue 11): the graph's constants
  // that kernels repacked into their own form are freed as the kernels
  // prepare (a layer at a time, so the peak is about one copy of the
  // weights). The graph keeps their shapes. REQUIRES: nothing prepares
  // `graph` again afterwards (more executors come from Fork()).
  static Result<std::unique_ptr<Executor>> CreateReleasingWeights(Graph* graph, const ExecutorOptions& options);

  // Another executor on the same prepared kernels. `arena`: caller-owned
  // memory of arena_bytes(), 64-byte aligned, that must outlive the fork;
  // nullptr: the fork allocates its own (nullptr result if that fails).
  std::unique_ptr<Executor> Fork(void* arena = nullptr) const;

  // Bytes of the activation arena (planned buffers + largest scratch).
  size_t arena_bytes() const;
  // Sum of all activation buffer sizes, what an arena-less runtime would allocate.
  size_t unplanned_bytes() const;
  // The layout that placed the arena, its lower bound (largest live sum) and
  // whether the arena is proven smallest (METHODS §6).
  const std::string& arena_strategy() const;
  // Steps whose output overwrites their input in the chosen layout (segments).
  int in_place_steps() const;
  size_t arena_lower_bound() const;
  bool arena_optimal() const;
  // Bytes of constant weights the kernels read while running: those they
  // repacked into their own form plus the graph constants they still read.
  size_t weight_bytes() const;
  // The most weight bytes held at once while the kernels prepare with
  // release (CreateReleasingWeights): constants not yet released, repacked
  // forms made so far, and the preparing kernel's transient buffers.
  size_t load_peak_bytes() const;
  // Whether a kernel still reads graph constant `value` while running (false
  // for weights a kernel repacked into its own form in Prepare).
  bool ReadsConstant(int value) const;

  // `inputs`: one tensor per graph input, in Graph::inputs order, with the
  // graph's shape (InvalidArgument naming the input otherwise).
  // `outputs`: replaced by one tensor per graph output.
  // REQUIRES: !options.external_io.
  Status Run(const std::vector<TensorData>& inputs, std::vector<TensorData>* outputs);

  // REQUIRES: options.external_io. inputs[i] points to NumElements of graph
  // input i, outputs[i] to room for graph output i; none may overlap the
  // arena or each other (except an output that aliases nothing it reads).
  // Allocates nothing, cannot fail.
  void RunInPlace(const float* const* inputs, float* const* outputs);

  // With options.profile: seconds each node took, summed over every Run so
  // far, indexed like Graph::nodes (nodes without a step stay 0).
  const std::vector<double>& StepSeconds() const { return step_seconds_; }

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor();

 private:
  struct Prepared;
  explicit Executor(std::shared_ptr<const Prepared> prepared);
  static Result<std::unique_ptr<Executor>> Create(const Graph& graph, const ExecutorOptions& options, Graph* release);
  // Points every step's EvalContext into `arena`.
  void Bind(float* arena);
  void EvalSteps();

  std::shared_ptr<const Prepared> prepared_;
  std::vector<EvalContext> eval_;  // per step, pointers fixed by Bind
  // external_io: (step, slot) of every kernel input/output that is a graph
  // input/output, patched by RunInPlace.
  struct IoSlot {
    int step, slot, io;
    bool is_output;
  };
  std::vector<IoSlot> io_slots_;
  float* arena_ = nullptr;
  bool owns_arena_ = false;
  std::vector<double> step_seconds_;  // per node, with options.profile
};

}  // namespace tessera
