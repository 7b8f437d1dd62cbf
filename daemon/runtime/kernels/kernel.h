// Kernel: one op's float32 implementation, with the lifecycle of TFLite
// Micro's kernels (STYLE.md):
//   Prepare — runs once, before any inference: validates shapes and
//             attributes (returning a Status that names the node), reads
//             weights (may repack them into the kernel's own storage), and
//             reports how many scratch bytes Eval needs.
//   Eval    — computes. Never allocates, never fails (everything that can
//             fail was checked in Prepare), const so one prepared kernel can
//             serve concurrent runs with different buffers.
// One op = one file in daemon/runtime/kernels/, registered in kernels/registry.cc.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

class WeightForms;  // weight_forms.h

// Reads constants whose values are still in the device program's file (a
// worker's load, issue 11 item 2; partition/compile/constant_file.h). Their
// TensorData has the shape and no values until Materialize.
class ConstantStream {
 public:
  virtual ~ConstantStream() = default;
  // Values [first, first + count) of `data` into dst.
  virtual Status Read(const TensorData* data, int64_t first, int64_t count, float* dst) const = 0;
  // Reads all of `data`'s values into it, for a kernel that keeps the
  // constant as it is (the TensorData is the program's, writable here).
  virtual Status Materialize(const TensorData* data) const = 0;
};

// A constant is streamed in blocks of at most about this many bytes, with
// what the kernel makes of the block before packing it: what a kernel holds
// of it at once while preparing (the deploy's chunk size, kChunkBytes).
inline constexpr int64_t kConstantBlockBytes = int64_t{1} << 20;

// Everything Prepare may look at. Borrowed; valid only during Prepare.
struct KernelContext {
  const Graph& graph;
  const Node& node;
  std::vector<Shape> input_shapes;   // one per node input, constants included
  std::vector<Shape> output_shapes;  // one per node output (from the graph)
  // Data of constant inputs (weights, biases); nullptr for activations.
  std::vector<const TensorData*> constant_inputs;
  int threads = 1;  // intra-op threads the executor will allow in Eval
  // Only sizes are wanted (the planner's memory promise, issue 11): weights
  // may have no values (TensorData::values empty, ImportOptions::shapes_only).
  // Prepare checks and sizes everything as usual but reads no weight values
  // and repacks nothing; OwnedWeightBytes() and ScratchBytes() report what a
  // real Prepare would own and need. Eval is never called.
  bool shapes_only = false;
  // Weight forms shared by the kernels of one device program (weight_forms.h);
  // nullptr: the kernel keeps its own.
  WeightForms* weight_forms = nullptr;
  // Per node input: the constant's values are still in the program's file.
  // Only inputs the kernel declares with StreamsConstant are left so (the
  // executor reads every other constant input whole before Prepare); the
  // kernel reads them with ConstantRows, or whole with MaterializeConstant
  // when it keeps them (then ReadsConstantInEval must say so). Also set in
  // shapes_only sizing of a streamed load, with no stream.
  std::vector<bool> streamed_inputs;
  const ConstantStream* constant_stream = nullptr;
};

// Everything Eval gets. Pointers are borrowed from the executor's arena
// (activations) or the graph (constants); they stay valid during Eval.
struct EvalContext {
  std::vector<const float*> inputs;  // one per node input, constants included
  std::vector<float*> outputs;       // one per node output, sizes as prepared
  float* scratch = nullptr;          // ScratchBytes() bytes, 64-byte aligned
  int threads = 1;                   // may use up to this many threads
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  virtual Status Prepare(const KernelContext& ctx) = 0;
  // Valid after a successful Prepare.
  virtual size_t ScratchBytes() const { return 0; }
  // Valid after a successful Prepare: whether Eval still reads constant
  // input `input` (false when Prepare repacked it into the kernel's own
  // form), and the bytes of such repacked weights the kernel owns. A worker
  // keeps each weight once: graph constants nobody reads are released.
  virtual bool ReadsConstantInEval(int input) const { return true; }
  virtual size_t OwnedWeightBytes() const { return 0; }
  // Valid after a successful Prepare: bytes Prepare allocated and freed
  // again besides what it keeps (e.g. an unpacked transformed copy), for the
  // memory a worker peaks at while loading (device_memory.h).
  virtual size_t PrepareTransientBytes() const { return 0; }
  // Whether Prepare can read constant input `input` from the program's file
  // a block at a time (KernelContext::streamed_inputs). Must not depend on
  // Prepare: it is asked before.
  virtual bool StreamsConstant(int input) const { return false; }
  // Segments (METHODS §6 "Segments"), valid after a successful Prepare: the
  // activation input whose buffer Eval may overwrite with its output, or -1.
  // The executor may then give output 0 the same arena offset as that input
  // (when nothing reads the input later) and the step InPlaceScratchBytes()
  // of scratch instead of ScratchBytes(); Eval sees the two pointers equal
  // and writes each output segment only over input it has consumed.
  virtual int InPlaceInput() const { return -1; }
  virtual size_t InPlaceScratchBytes() const { return ScratchBytes(); }
  virtual void Eval(const EvalContext& ctx) const = 0;
};

// Rows [row, row + rows) of constant input `input` seen as a row-major
// matrix with `row_length` columns: a pointer into its values when they
// are in memory, else read from the program's file into *block (resized;
// the pointer is valid until the next call with the same block).
Result<const float*> ConstantRows(const KernelContext& ctx, size_t input, int64_t row, int64_t rows, int64_t row_length,
                                  std::vector<float>* block);
// Streamed constant input `input` read whole into its TensorData (no-op
// when it is in memory, or in shapes_only sizing).
Status MaterializeConstant(const KernelContext& ctx, size_t input);
// Rows of `row_length` floats per block of kConstantBlockBytes (≥ 1).
int64_t ConstantBlockRows(int64_t row_length);

using KernelFactory = std::unique_ptr<Kernel> (*)();

// Returns the factory for a canonical op name, or nullptr if unsupported.
KernelFactory FindKernel(const std::string& op);
// All supported op names (sorted), for error messages and docs.
std::vector<std::string> SupportedOps();

// Applies a fused activation (graph.h: attr "activation") in place to n
// values. Shared by every producer that can carry one.
struct FusedActivation {
  enum Kind {
    kNone,
    kRelu,
    kLeakyRelu,
    kClip,
    kSigmoid,
    kSilu,  // x · sigmoid(x) (ONNX Sigmoid + Mul on the same value, folded at import)
    kHardSigmoid,
    kHardSwish,  // x · hard_sigmoid(x) (ONNX HardSwish, or HardSigmoid + Mul on the same value, folded at import)
    kTanh,
    kElu,
    kSelu,
    // darknet's own activations (darknet_import.cc), formulas in fused_activation.cc
    kDarknetRamp,
    kDarknetPlse,
    kDarknetLoggy,
    kDarknetStair,
    kDarknetLhtan,
  } kind = kNone;
  float alpha = 0.f, beta = 0.f;
  // Sigmoid and SiLU: the active ISA's logistic microkernel (microkernels.h),
  // chosen when the activation is read, as a kernel's Prepare does.
  void (*logistic)(float* x, int64_t n, bool times_input) = nullptr;
  // Reads "activation"/"act_alpha"/"act_beta"; NotSupported for an unknown name.
  static Result<FusedActivation> FromAttributes(const Attributes& attrs);
  void Apply(float* data, size_t n) const;
};

}  // namespace tessera
