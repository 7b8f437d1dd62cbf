// DeviceProgram (ARCHITECTURE.md): what one device executes — its slice of
// the weights (inside its subgraphs) and a short list of steps over numbered
// local buffers. Transport-agnostic: the same programs run over in-process,
// gRPC and UART links.
//
// Coordinates: a Box is a region of a *graph value* in full-tensor
// coordinates (one half-open range per dimension). A buffer holds one box of
// one value; Send/Recv/Copy move the intersection of boxes between buffers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "partition/compile/constant_file.h"
#include "partition/graph/graph.h"
#include "partition/graph/halo.h"
#include "partition/graph/quantization.h"
#include "util/status.h"

namespace tessera {

struct Box {
  std::vector<Range1D> dims;

  static Box Full(const Shape& shape);
  Shape shape() const;
  int64_t volume() const;
  bool empty() const;
  bool Contains(const Box& other) const;
  // Empty box (all ranges with end <= begin) when they do not meet.
  Box Intersect(const Box& other) const;
  // `inner` expressed relative to this box's origin.
  Box RelativeTo(const Box& outer) const;
  std::string ToString() const;
  bool operator==(const Box&) const = default;
};

// Where `box` (relative to a buffer of `shape`) starts in the buffer's
// row-major values, when they are one contiguous run there: every
// dimension after some dimension k is whole and every one before k has
// extent 1 (a single value always is one). -1 otherwise.
int64_t ContiguousStart(const Shape& shape, const Box& box);

// `region` (full-tensor coordinates, inside boxes `a` and `b`) cut into
// pieces that are each one contiguous run in a buffer holding `a` and in
// one holding `b`: `region` itself when it already is, else slabs along its
// outermost dimension wider than one value, cut further as needed (a row
// band of an NCHW map: one piece per channel). For a device that moves only
// contiguous runs (an MCU: mcu_program.h IoEntry).
std::vector<Box> ContiguousPieces(const Box& region, const Box& a, const Box& b);

struct ProgramBuffer {
  std::string name;  // "<value name>@<box>" for reading logs
  int value = -1;    // graph value it holds a box of (-1: a partial sum)
  Box box;           // region of that value (full-tensor coordinates)
  // The value's grid when a QuantizeDequantize produces it (a QDQ model,
  // partition/graph/quantization.h): every value in it is a code's float,
  // so a device may hold and move it as int8 codes (an MCU does:
  // mcu_program.h version 5). Set by the compiler (MarkQuantizedBuffers).
  std::optional<QuantGrid> grid;
  Shape shape() const { return box.shape(); }
};

enum class StepKind {
  kSend,     // send src_buffer[src_box] to `peer` as message `message`
  kRecv,     // receive message `message` from `peer` into dst_buffer[dst_box]
  kCopy,     // local: src_buffer[src_box] -> dst_buffer[dst_box]
  kCompute,  // run subgraphs[subgraph] reading `inputs`, writing `outputs`
  kMerge,    // like kCompute over a merge subgraph: Σ partials in listed order, + bias, activation
};

const char* StepKindName(StepKind kind);

struct ProgramStep {
  StepKind kind = StepKind::kCompute;
  int peer = -1;
  int64_t message = -1;
  int src_buffer = -1, dst_buffer = -1;
  Box src_box, dst_box;  // relative to the buffer (local coordinates)
  int subgraph = -1;
  std::vector<int> inputs, outputs;  // buffers, in the subgraph's input/output order
  int layer = 0;                      // 1-based graph layer this step serves (0: transfer)
  // Recv only: the first of this device's steps during which the message can
  // arrive (0: any time, even before the request starts here). Every step
  // before it happens-before the peer's Send (SetMessageWindows), so the
  // device arena gives the message its place from this step to the Recv
  // step (METHODS §6 liveness) and the inbox writes its frames straight there.
  int receive_from = 0;
  // Send only: the first of this device's steps that happens-after the
  // peer's Recv of the message (steps.size(): none does). Once it ran, the
  // peer holds the message, so the memory the link sent it from may be
  // reused: the arena keeps it from the Send to this step and the link reads
  // the message from there, not from a copy. 0 (older programs) or anything
  // not after the Send means steps.size().
  int release_after = 0;
  // Send/Recv between two MCUs joined UART-to-UART (issue 16 item 4): the
  // MCU's UART that carries it (1..; mcu_program.h kMaxPorts), set from the
  // cluster's direct links (daemon/cluster/mcu_direct_links.h). 0: the
  // ordinary path (gRPC; an MCU's bridge relays it over the MCU's UART0).
  int uart_port = 0;
  // Values a Send/Recv moves (its box). Its bytes on the wire: WireBytes.
  int64_t values() const { return src_box.empty() ? dst_box.volume() : src_box.volume(); }
};

// The steps of a program one merged model needs (issue 18 item 5,
// scenarios): a request naming the model runs these and skips the rest on
// every device, with no drain and no re-deploy between requests of
// different models. Set by SetScenarios from the whole plan.
//
// Wait counts (the "precomputed wait count per step"): waits[k] is
// how many steps of this program before steps[k] write a buffer steps[k]
// reads (Compute/Merge inputs, a Copy's or Send's source); a Recv waits for
// its message besides. When a request switches model, a step starts once
// that many of its writers have run in this request: the runner counts
// them and refuses a step whose writers did not all run (a scenario that
// skips a needed step, e.g. from a damaged program file), naming it,
// instead of computing from whatever a buffer held before.
struct ProgramScenario {
  std::string name;                  // GraphModel::name
  std::vector<int> steps;            // ascending step indices this device runs
  std::vector<int> inputs, outputs;  // the model's graph values (inputs, outputs)
  std::vector<int> waits;            // per entry of `steps`: its writers before it
};

struct DeviceProgram {
  int device = 0;
  std::vector<ProgramBuffer> buffers;
  std::vector<Graph> subgraphs;
  std::vector<ProgramStep> steps;
  // Buffers holding the model's inputs (filled by the caller before running)
  // and outputs (read after), as (graph value, buffer) pairs.
  std::vector<std::pair<int, int>> model_inputs, model_outputs;
  // One per GraphModel of a merged graph (empty: one model).
  std::vector<ProgramScenario> scenarios;
  // Constants kept once: (subgraph, value) -> (earlier subgraph, value) of a
  // constant with the same identity (ConstantIdentity, graph.h), whose
  // values it reads; its own TensorData has the shape and no values. Set by
  // ParseProgram with share_constants (a worker's load); compiled programs
  // hold every constant in full and the runner finds their duplicates itself.
  std::map<std::pair<int, int>, std::pair<int, int>> shared_constants;
  // Constants whose values stay in the program's file until they prepare
  // (ParseProgramFile with stream_constants, a worker's load; constant_file.h):
  // (subgraph, value) -> byte offset of the values in `constant_file`. Their
  // TensorData has the shape and no values; the runner reads them a block
  // at a time as kernels pack them (issue 11 item 2).
  std::map<std::pair<int, int>, int64_t> streamed_constants;
  std::shared_ptr<const ConstantFile> constant_file;

  int AddBuffer(int value, const Box& box, const std::string& name);
  int64_t WeightValues() const;   // Σ constants over its subgraphs
  int64_t BufferValues() const;   // Σ buffer sizes (upper bound of live data)
};

// Checks each program (buffer ids, boxes inside buffers, subgraph arity and
// shapes) and that every Send has exactly one matching Recv (same message id,
// mirrored peers, same box size) and vice versa. Errors name both ends:
// "device 1 sends message 7 to device 2, which never receives it".
Status ValidatePrograms(const std::vector<DeviceProgram>& programs);
// The checks of one program alone (no pairing); num_devices < 0: unknown.
Status ValidateProgram(const DeviceProgram& program, int num_devices = -1);

// Sets every Recv step's receive_from and every Send step's release_after
// from the programs' happens-before order: the message of a Recv can arrive
// once its sender ran the Send step, and every step of the receiver that
// happens-before that Send (through earlier messages) has completed by then;
// a sender's step that happens-after the peer's Recv runs only once the
// message was received. REQUIRES: ValidatePrograms passed
// and the programs cannot deadlock (a consistent global step order); fails
// with Internal otherwise.
Status SetMessageWindows(std::vector<DeviceProgram>* programs);

// Sets ProgramBuffer::grid of every buffer whose graph value a
// QuantizeDequantize of `graph` produces (its scale, zero point, qmin, qmax).
void MarkQuantizedBuffers(const Graph& graph, std::vector<DeviceProgram>* programs);

// int8 tiles between devices (issue 16 item 1): a Send/Recv of a buffer
// whose grid holds its codes in a byte (ByteGrid, quantization.h) moves one
// byte a value, ByteCode (q - qmin), a quarter of the float bytes; the
// receiver gets back exactly the floats the sender held (they are on the
// grid). Both ends hold a box of the same graph value, so they agree
// (ValidatePrograms checks it). nullopt: float32, 4 bytes a value.
std::optional<QuantGrid> WireGrid(const DeviceProgram& program, const ProgramStep& step);
// The bytes of a Send/Recv step's message: its values at 1 or 4 bytes each.
int64_t WireBytes(const DeviceProgram& program, const ProgramStep& step);

// Per step of `program`: the earlier steps that write a buffer it reads
// (ProgramScenario::waits counts them).
std::vector<std::vector<int>> StepWriters(const DeviceProgram& program);

// Fills every program's `scenarios` from `models` (Graph::models; nothing
// when fewer than two): the steps a model's outputs depend on, followed
// back through every device: a needed buffer needs every step that writes
// it (Compute/Merge outputs, Copy destination, Recv destination), a needed
// step the buffers it reads, and a needed Recv the peer's Send of its
// message. The steps a model needs on all devices are closed under these
// rules, so every Send it runs has its Recv and the reverse.
// REQUIRES: ValidatePrograms passed.
void SetScenarios(const std::vector<GraphModel>& models, std::vector<DeviceProgram>* programs);

}  // namespace tessera

namespace tessera {

// Copies the `box` region of a row-major tensor of shape `shape` to/from a
// contiguous array of box.volume() values. REQUIRES: box inside shape.
void ExtractBox(const float* tensor, const Shape& shape, const Box& box, float* out);
void InsertBox(const float* in, float* tensor, const Shape& shape, const Box& box);
// The same with the contiguous side as ByteCode bytes on `grid` (a
// ByteGrid): what a Send of a coded message writes, and its Recv reads.
void ExtractBoxCodes(const float* tensor, const Shape& shape, const Box& box, const QuantGrid& grid, uint8_t* out);
void InsertBoxCodes(const uint8_t* in, const QuantGrid& grid, float* tensor, const Shape& shape, const Box& box);

}  // namespace tessera
