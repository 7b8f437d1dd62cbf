// Executor: runs a whole Graph on one device in one pre-planned arena
// (ARCHITECTURE.md "Executor"; METHODS §6 "Arena layout").
//
// Create() prepares every kernel (validating shapes and attributes), computes
// every activation buffer's lifetime over the node order, and lays them out
// in one arena (partition/graph/arena_layout.h). Run() copies the inputs in, runs
// the kernels in order, copies the outputs out; it allocates nothing besides
// the output tensors it returns.
//
// Thread-safety: Run() is not reentrant (one arena); create one Executor per
// concurrent stream.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "daemon/runtime/kernels/kernel.h"
#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

struct ExecutorOptions {
  int threads = 1;  // intra-op threads (kernels use up to this many)
  bool profile = false;  // time every step of every Run (StepSeconds)
};

class Executor {
 public:
  // REQUIRES: `graph` is canonical (graph.h), validated, and outlives the
  // executor. Fails with the node name on the first kernel that rejects it.
  static Result<std::unique_ptr<Executor>> Create(const Graph& graph, const ExecutorOptions& options);

  // Bytes of the activation arena (planned buffers + largest scratch).
  size_t arena_bytes() const { return arena_bytes_; }
  // Sum of all activation buffer sizes, what an arena-less runtime would allocate.
  size_t unplanned_bytes() const { return unplanned_bytes_; }

  // `inputs`: one tensor per graph input, in Graph::inputs order, with the
  // graph's shape (InvalidArgument naming the input otherwise).
  // `outputs`: replaced by one tensor per graph output.
  Status Run(const std::vector<TensorData>& inputs, std::vector<TensorData>* outputs);

  // With options.profile: seconds each node took, summed over every Run so
  // far, indexed like Graph::nodes (nodes without a step stay 0).
  const std::vector<double>& StepSeconds() const { return step_seconds_; }

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor();

 private:
  Executor() = default;
  struct Step;
  const Graph* graph_ = nullptr;
  ExecutorOptions options_;
  std::vector<Step> steps_;
  std::vector<size_t> offsets_;   // per value id, byte offset in the arena (SIZE_MAX: none)
  size_t arena_bytes_ = 0;
  size_t unplanned_bytes_ = 0;
  size_t scratch_offset_ = 0;
  float* arena_ = nullptr;  // 64-byte aligned, arena_bytes_ long
  std::vector<double> step_seconds_;  // per node, with options_.profile
};

}  // namespace tessera
