// ProgramRunner: executes one DeviceProgram (partition/compile/device_program.h) —
// its Compute/Merge steps through Executors, its Send/Recv steps over Links.
// RunProgramsInProcess runs a whole compiled plan in one process, one thread
// per device, over in-process links (issue 4: proof before any network).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "daemon/runtime/executor.h"
#include "partition/compile/device_program.h"
#include "transport/link.h"

namespace tessera {

struct RunnerOptions {
  int threads = 1;                              // intra-op threads per device
  std::chrono::milliseconds timeout{60000};     // per Recv
};

class ProgramRunner {
 public:
  // REQUIRES: `program` outlives the runner. Prepares every subgraph's
  // executor and allocates the program's buffers.
  static Result<std::unique_ptr<ProgramRunner>> Create(const DeviceProgram& program, const RunnerOptions& options);

  // `peers[d]`: the link to device d (nullptr where the program never talks
  // to d). `inputs`: one tensor per program.model_inputs entry, in order.
  // `outputs`: one per program.model_outputs entry. Not reentrant.
  Status Run(const std::vector<Link*>& peers, const std::vector<TensorData>& inputs,
             std::vector<TensorData>* outputs);

  // Bytes of all buffers plus every executor's arena: the device's working memory.
  size_t memory_bytes() const;

 private:
  ProgramRunner() = default;
  const DeviceProgram* program_ = nullptr;
  RunnerOptions options_;
  std::vector<std::unique_ptr<Executor>> executors_;  // per subgraph
  std::vector<std::vector<float>> buffers_;
};

struct LinkTraffic {
  int from = 0, to = 0;
  int64_t bytes = 0;
};

struct InProcessRun {
  std::vector<TensorData> outputs;  // model outputs, in graph output order
  std::vector<LinkTraffic> links;   // only pairs that carried data
  int64_t total_bytes = 0;
  std::vector<size_t> device_memory_bytes;
  double seconds = 0;
};

// `inputs`: one per graph input, in Graph::inputs order, delivered to the
// programs' model_inputs; outputs collected from model_outputs.
Result<InProcessRun> RunProgramsInProcess(const Graph& graph, const std::vector<DeviceProgram>& programs,
                                          const std::vector<TensorData>& inputs, const RunnerOptions& options);

}  // namespace tessera
