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

// Step trace (tessera worker --step-trace FILE, issue 15): every step each
// Run executes appends one JSON line to FILE: the device, the run's number
// in this process, the step, its kind, layer and peer, and its start and end
// on CLOCK_MONOTONIC in microseconds (one clock for every process of a host,
// so the lines of several workers merge into one timeline) and the calling
// thread's CPU microseconds in it. A step's time includes its wait for what
// it needs (a Recv's message, a Send's earlier messages leaving). Off by
// default; the file is appended to.
Status OpenStepTrace(const std::string& path);

struct RunnerOptions {
  int threads = 1;                              // intra-op threads per device
  std::chrono::milliseconds timeout{60000};     // per Recv
  // PreparedProgram only sizes the program (ExecutorOptions::shapes_only):
  // its weights may have no values; NewRunner() refuses.
  bool shapes_only = false;
  // With shapes_only: size the load as a worker does it from its program
  // file (ParseProgramFile with stream_constants): every constant no other
  // subgraph reads stays in the file until its kernel reads it, a block at
  // a time when the kernel packs it (issue 11 item 2). A program that has
  // DeviceProgram::streamed_constants is loaded so whatever this says.
  bool streamed_load = false;
  // Working memories a device's runners share (issue 18 item 2): a request
  // takes one for each run of Compute/Merge/Copy steps between two Send or
  // Recv steps and gives it back before it talks to a peer. 1 = the device
  // computes one request at a time, as the dataflow view of a pipeline
  // stage has it; more let requests compute at once on a many-core board.
  int compute_slots = 1;
  // The thread CPU time of every Compute/Merge step, summed over Run calls
  // (ProgramRunner::step_cpu_seconds): `tessera run --plan --profile`.
  bool time_steps = false;
  // Before each run of Compute/Merge/Copy steps, wait until every message
  // this request has sent so far has left (Link::WaitSent), not only those
  // whose memory the run reuses. For a device whose compute takes every CPU
  // its transport could use (one core, or --threads = the cores): a Send
  // only queues its message, and the link's thread that moves it would then
  // get the CPU in turns with the compute, so the peer waiting on it would
  // wait about as long as the sender computes (issue 15: YOLOv2 608², 2
  // emulated devices in 14 % of a CPU each, memory plan: 10.80 s a request
  // against 7.55 predicted; 8.13 against 7.71 with this). The planner's
  // model (each layer's transfer step, then its compute) is what then runs.
  // worker.h WorkerOptions::flush_sends decides it for a worker.
  bool flush_sends = false;
};

// The device arena (issue 11: one arena per device program). Every buffer
// of the program — received tiles and slices, partial sums, stack outputs —
// and every Compute/Merge step's executor arena (the subgraph's
// intermediates and scratch) get one offset by liveness over the program's
// steps, laid out by the METHODS §6 arena code the executor uses
// (partition/graph/arena_layout.h). It has two parts (issue 18 item 2,
// the dataflow view of a pipeline: a device is one actor whose phases are
// its runs of steps between two points where data leaves or arrives):
//
//   working memory (one per device, shared by every request in flight):
//                  [ buffer alive within one run of Compute/Merge/Copy
//                    steps, no Send or Recv between its first and last
//                    step; each step's executor arena; a Copy's staging ]
//   pipeline buffers (one set per request in flight):
//                  [ buffer alive across a Send or Recv step (a FIFO
//                    token: received, kept for a later phase, or read by
//                    the link while sent); a Recv's landing place; a
//                    Send's staging; model inputs and outputs the first
//                    and last run do not hold ]
//
// A request holds a working memory only while it computes a run: requests
// that overlap in a pipeline (one waiting for its input while another
// computes) share it instead of each holding a whole arena. A device with
// one step run and no links (a one-device program) keeps everything in its
// working memory, laid out exactly as one arena. Where sharing would not
// save memory with compute_slots + 1 requests in flight (most of the
// memory is tiles kept across links, as in FFMT), every request keeps one
// whole arena instead (shares_working() false; working memory 0).
//
// Executors read their inputs from and write their outputs to the buffers
// in place (Executor::RunInPlace): nothing is copied between steps. A
// buffer is zeroed at its first step, as if it were freshly allocated.
class ProgramRunner;
struct WorkingSlot;  // one working memory and the executors bound to it (program_runner.cc)

// The immutable, shareable part of running a DeviceProgram: every subgraph's
// prepared kernels (weights packed once) and the device arena's layout.
// One per loaded program; every request in flight gets a runner of its own
// (its own arena) from NewRunner().
class PreparedProgram {
 public:
  // REQUIRES: `program` outlives this object and its runners.
  static Result<std::shared_ptr<const PreparedProgram>> Prepare(const DeviceProgram& program,
                                                                const RunnerOptions& options);
  // The same, freeing the program's weights that kernels repacked, layer by
  // layer (Executor::CreateReleasingWeights): each weight is held once.
  static Result<std::shared_ptr<const PreparedProgram>> PrepareReleasingWeights(DeviceProgram* program,
                                                                                const RunnerOptions& options);
  // A runner with its own pipeline buffers over the program's shared working
  // memories. ResourceExhausted if they cannot be allocated. Thread-safe.
  Result<std::unique_ptr<ProgramRunner>> NewRunner() const;

  size_t memory_bytes() const;   // one request's memory: working + pipeline buffers
  size_t working_bytes() const;  // one working memory (shared by the runners)
  size_t request_bytes() const;  // one request's pipeline buffers
  size_t whole_bytes() const;    // the whole arena laid out as one (for comparison)
  // Whether runners share working memories (else each has one whole arena:
  // sharing would not save memory with compute_slots + 1 requests in flight).
  bool shares_working() const;
  int compute_slots() const;  // RunnerOptions::compute_slots (at least 1)
  // Working memories allocated so far (they are made as requests overlap,
  // up to compute_slots()).
  int working_memories() const;
  size_t weight_bytes() const;  // weights the kernels read, held once
  // The most weight bytes held at once while the program loads: decoding
  // (every raw weight + one tensor) and preparing with release (raw weights
  // not yet repacked + repacked forms so far + a kernel's transient).
  size_t load_peak_bytes() const;
  // Per step, the arena bytes of the step alone: a Compute/Merge step's
  // executor arena (its intermediates and kernel scratch), a Copy's staging,
  // a Recv/Send's message when not in its buffer; 0 otherwise. With the
  // buffers' lifetimes this is the live memory per step (memory_flow.h).
  const std::vector<size_t>& step_bytes() const;
  // Per buffer, its bytes and the steps it is alive over in the arena.
  const std::vector<BufferRequest>& buffer_requests() const;
  // The live memory per step: step_bytes() plus every buffer alive there.
  std::vector<int64_t> live_bytes() const;
  // Whether some kernel still reads constant `value` of subgraph `subgraph`.
  bool ReadsConstant(int subgraph, int value) const;

  struct Layout;
  class WorkingPool;
  explicit PreparedProgram(std::unique_ptr<Layout> layout);
  static Result<std::shared_ptr<const PreparedProgram>> Prepare(const DeviceProgram& program,
                                                                const RunnerOptions& options, DeviceProgram* release);
  ~PreparedProgram();

 private:
  std::unique_ptr<Layout> layout_;
  std::unique_ptr<WorkingPool> pool_;  // the working memories runners take turns in
  std::weak_ptr<const PreparedProgram> self_;
  friend class ProgramRunner;
};

class ProgramRunner {
 public:
  // REQUIRES: `program` outlives the runner and its forks. Prepares every
  // subgraph's kernels once (weights packed once), lays out and allocates
  // the device arena. Fails naming the device and step when a subgraph does
  // not match the buffers it runs on.
  static Result<std::unique_ptr<ProgramRunner>> Create(const DeviceProgram& program, const RunnerOptions& options);

  // Another runner over the same prepared program with its own pipeline
  // buffers (sharing the working memory), for another request in flight.
  // Thread-safe.
  Result<std::unique_ptr<ProgramRunner>> Fork() const;
  const std::shared_ptr<const PreparedProgram>& prepared() const { return prepared_; }

  // `peers[d]`: the link to device d (nullptr where the program never talks
  // to d). `inputs`: one tensor per program.model_inputs entry, in order.
  // `outputs`: one per program.model_outputs entry. Not reentrant.
  // `scenario` >= 0: only that merged model's steps run
  // (DeviceProgram::scenarios; every device of the request must be given
  // the same); inputs of other models may be empty, their outputs come
  // back empty. -1: every step.
  Status Run(const std::vector<Link*>& peers, const std::vector<TensorData>& inputs, std::vector<TensorData>* outputs,
             int scenario = -1);

  // Bytes of the device arena for one request: working memory + pipeline
  // buffers (every buffer and step's intermediates and scratch, by liveness).
  size_t memory_bytes() const;
  // Bytes of the weights the kernels read (packed forms + constants still
  // read), held once however many runners are forked.
  size_t weight_bytes() const;
  // With RunnerOptions::time_steps: per step, the CPU seconds of this
  // runner's thread in it, summed over every Run so far (0 for steps that
  // do not compute).
  const std::vector<double>& step_cpu_seconds() const { return step_cpu_seconds_; }
  ProgramRunner(const ProgramRunner&) = delete;
  ProgramRunner& operator=(const ProgramRunner&) = delete;
  ~ProgramRunner();  // out of line: WorkingSlot is complete there

 private:
  friend class PreparedProgram;
  explicit ProgramRunner(std::shared_ptr<const PreparedProgram> prepared);
  Status BindArena();
  // Where buffer b is: in the pipeline buffers, or in `working` (the working
  // memory this request holds; null when it holds none).
  float* Buffer(int b, const WorkingSlot* working) const;

  std::shared_ptr<const PreparedProgram> prepared_;
  const PreparedProgram::Layout* layout_ = nullptr;
  float* buffers_ = nullptr;          // this request's pipeline buffers
  std::unique_ptr<WorkingSlot> own_;  // executors on buffers_ when the program shares no working memory
  // Scratch: a Compute/Merge step's input and output pointers.
  std::vector<const float*> step_inputs_;
  std::vector<float*> step_outputs_;
  std::vector<double> step_cpu_seconds_;  // RunnerOptions::time_steps
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
  double seconds = 0;          // the median run (kernels prepared before the first)
  double prepare_seconds = 0;  // preparing every device's kernels once
  // Per device: the CPU time of its thread over one run (median of the
  // runs): its steps' work, not its waits. Intra-op worker threads
  // (RunnerOptions threads > 1) are not counted.
  std::vector<double> device_cpu_seconds;
  // With RunnerOptions::time_steps, per device and step: its CPU seconds in
  // one run, the mean over the runs after the first (every run when there
  // is one); 0 for steps that do not compute.
  std::vector<std::vector<double>> step_cpu_seconds;
};

// `inputs`: one per graph input, in Graph::inputs order, delivered to the
// programs' model_inputs; outputs collected from model_outputs.
// `repeat` runs over the same prepared runners and links; `seconds` is their
// median, the outputs and link bytes those of one run. `scenario` >= 0:
// one merged model only (ProgramRunner::Run); the other models' inputs may
// be empty and their outputs come back empty.
Result<InProcessRun> RunProgramsInProcess(const Graph& graph, const std::vector<DeviceProgram>& programs,
                                          const std::vector<TensorData>& inputs, const RunnerOptions& options,
                                          int repeat = 1, int scenario = -1);

}  // namespace tessera
