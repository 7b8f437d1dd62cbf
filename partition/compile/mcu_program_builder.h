// Host side of the MCU program (transport/wire/mcu_program.h): compiles a Graph
// chain of MCU-supported ops (Conv incl. depthwise, Gemm, MaxPool,
// AveragePool, GlobalAveragePool, Relu, Add; Reshape/Flatten/Identity become
// aliases) into the compact program a microcontroller worker runs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "partition/compile/device_program.h"
#include "partition/graph/graph.h"
#include "partition/graph/quantization.h"
#include "transport/wire/mcu_program.h"
#include "util/status.h"

namespace tessera {

struct McuProgramOptions {
  uint32_t plan_id = 0;
  // Message id of each graph input / output value on the UART link
  // (default: the value id).
  std::map<int, uint32_t> input_messages, output_messages;
  // Segments (METHODS §6): pointwise/depthwise convs, Relu and Add may write
  // their output over an input nothing reads later, where that shrinks the
  // activation region (partition/graph/arena_layout.h PlanWithSegments).
  bool segments = true;
  // Conv and Gemm weights that have an exact int8 form (a QDQ model's:
  // partition/graph/int8_weights.h) are stored as int8 codes with one scale
  // per output channel, ~¼ of the flash; the answers stay the float
  // program's bit for bit. false: every weight float32.
  bool int8_weights = true;
};

struct McuProgramImage {
  std::string bytes;              // the program, 4-byte words
  uint32_t activation_words = 0;  // activation region the firmware places after it, 4-byte words
  int64_t macs = 0;
  int in_place_layers = 0;          // layers that write their output over their input (segments)
  int int8_weight_layers = 0;       // conv / dense layers whose weights are stored as int8
  int int8_activation_tensors = 0;  // tensors held as int8 codes (a QDQ model's; mcu_program.h version 5)
  // What the firmware holds (issue 16 item 3): the program with its
  // weights in its flash region, the activations in its RAM arena.
  size_t flash_bytes() const { return bytes.size(); }
  size_t ram_bytes() const { return size_t{4} * activation_words; }
};

// NotSupported naming the node for ops / attributes the MCU cannot run;
// InvalidArgument for batch != 1.
Result<McuProgramImage> BuildMcuProgram(const Graph& graph, const McuProgramOptions& options);

// One node as an MCU layer, before its weights and buffers are placed: the
// checks BuildMcuProgram makes of each node, in one place.
struct McuLayerDescription {
  mcu::Layer layer{};  // op 0: an alias (Reshape, Flatten, Identity), no layer
  int64_t macs = 0;
  float grid[4] = {};  // kOpQuantize: scale, zero point, qmin, qmax
  // Int32 partial sums (CompileOptions::integer_partial_sums, mcu::kInt32Sums):
  // which operands hold sums, bits kSumsIn0 | kSumsIn1 | kSumsOut; and
  // whether the layer requantizes a merged sum (an Add of its conv's
  // multipliers and bias).
  uint32_t sums = 0;
  bool requant = false;
};
inline constexpr uint32_t kSumsIn0 = 1, kSumsIn1 = 2, kSumsOut = 4;
Result<McuLayerDescription> DescribeMcuLayer(const Graph& graph, const Node& node);
// Whether an MCU can run `node` (OK), else why, naming it: the planner asks
// this before it places a layer on an MCU, BuildMcuProgram the same.
Status McuCanRun(const Graph& graph, const Node& node);

// int8 activations (issue 16 item 1, mcu_program.h version 5): the grid of
// a QuantizeDequantize whose output an MCU keeps as codes (an 8-bit grid);
// nullopt for any other node.
std::optional<QuantGrid> McuActivationGrid(const Node& node);
// Bytes a value of `value` takes in an MCU's RAM at the least: 1 when a
// QuantizeDequantize of an 8-bit grid produces it, or is its only reader
// (BuildMcuProgram fuses the two when they share a device, and the float
// tensor between them is never held); else 4.
// A message of `values` values from one form to another, as an MCU's bridge
// relays it: float32 (nullopt) or codes on a grid — the gRPC side's form
// (WireGrid, device_program.h) and the UART side's (McuWireGrid) differ only
// for a Recv fused into a QuantizeDequantize. Codes of one grid to another
// decode and round again, as two QuantizeDequantize in a row do. Errors
// name a size that does not fit.
Result<std::string> RecodeMessage(const std::optional<QuantGrid>& from, const std::optional<QuantGrid>& to,
                                  std::string bytes, int64_t values);
int64_t McuValueBytes(const Graph& graph, int value);
// The least RAM `node`'s inputs and output take as an MCU layer, values by
// McuValueBytes — a QuantizeDequantize fused into its producer adds only
// its output — so no program that runs it holds less while it runs: the
// planner's per-layer RAM figure for MCUs (planner/placement.h).
int64_t McuLayerBufferBytes(const Graph& graph, const Node& node);
// The grid an MCU program keeps buffer `b` of a DeviceProgram on, as int8
// codes (its ProgramBuffer::grid when 8-bit); nullopt: float32. Its
// tensors cross the MCU's UART in that form: the Linux board's bridge
// (daemon/cluster/worker_mcu_bridge.h) encodes and decodes them with
// McuEncode / McuDecode.
std::optional<QuantGrid> McuBufferGrid(const ProgramBuffer& b);
// The QuantizeDequantize steps of an MCU's DeviceProgram that run inside
// the step writing their input (a layer of a whole-layer plan each): a
// QuantizeDequantize step that alone reads a float buffer, written only by
// this device's computing steps or only by Recvs its Linux board relays,
// goes away, and the writer puts the codes straight into the step's output
// buffer (a Recv: the bridge encodes the tensor on that grid). The float
// buffer is never held. BuildMcuProgram applies them; the bridge asks
// McuWireGrid.
struct McuFusions {
  std::vector<int> fused_into;   // per buffer: the code buffer written instead (-1: none)
  std::vector<bool> fused_step;  // per step: a QuantizeDequantize its writer runs
};
McuFusions FuseMcuQuantizeSteps(const DeviceProgram& program);
// The grid a Send or Recv step's tensor crosses the MCU's UART on (its
// buffer's, or the one it is fused into); nullopt: float32.
std::optional<QuantGrid> McuWireGrid(const DeviceProgram& program, const McuFusions& fusions, const ProgramStep& step);
// Its bytes there: 1 a value on a grid, else 4.
int64_t McuWireBytes(const DeviceProgram& program, const McuFusions& fusions, const ProgramStep& step);
// float32 bytes <-> codes (mcu_program.h EncodeCode / DecodeCode, q - qmin a
// byte). InvalidArgument when `bytes` is not a whole tensor of `values`.
Result<std::string> McuEncode(const QuantGrid& grid, const std::string& float_bytes, int64_t values);
Result<std::string> McuDecode(const QuantGrid& grid, const std::string& codes, int64_t values);

// The same from a compiled DeviceProgram (partition/compile/program_compiler.h), for
// an MCU in a pipeline plan: its Recv steps become program inputs (message
// ids kept), Compute/Merge subgraphs become layers over its buffers, Send
// steps become outputs; model inputs/outputs use options' messages.
// NotSupported (naming the step) for what the MCU's receive-all / compute /
// send-all loop cannot do: a Recv after a Send, partial boxes, local copies.
Result<McuProgramImage> BuildMcuProgram(const DeviceProgram& program, const McuProgramOptions& options);

// The keyword-spotting-style CNN the MCU path is tested with: input
// [1,1,49,10] (MFCC frames) -> conv3x3(16)+relu -> maxpool2 -> conv3x3(32)+relu
// -> maxpool2 -> conv3x3(32)+relu -> dense(12); ~0.85 M MACs, seeded weights.
Graph MakeKeywordSpottingGraph(uint32_t seed = 1);
// A small graph exercising the other MCU ops: depthwise conv, average pool,
// residual Add, Relu, global average pool, dense.
Graph MakeMcuOpsGraph(uint32_t seed = 2);
// The keyword-spotting CNN of issue 17 (depthwise-separable, DS-CNN style):
// input [1,1,32,8] -> conv3x3(32)+relu -> depthwise3x3+relu ->
// pointwise(32)+relu -> global average pool -> dense(12), seeded weights.
Graph MakeDsCnnGraph(uint32_t seed = 3);
// MLPerf Tiny's keyword-spotting DS-CNN as published (BatchNorm folded, no
// softmax): input [1,1,49,10] -> conv 10x4 stride 2 "same" (64)+relu ->
// 4 x (depthwise 3x3 + relu, pointwise 64 + relu) -> global average pool ->
// dense(12); ~2.66 M MACs, seeded weights. bench/mcu times it.
Graph MakeMlperfDsCnnGraph(uint32_t seed = 4);
// A visual-wake-words-style stem (MobileNetV1): input [1,3,24,24] (RGB) ->
// conv3x3 stride 2 (8)+relu -> depthwise3x3+relu -> pointwise(16)+relu ->
// depthwise3x3 stride 2+relu -> pointwise(32)+relu -> global average pool
// -> dense(2), seeded weights. Its maps have several channels, so an FFMT
// tile of them is several runs of a buffer.
Graph MakeVwwStemGraph(uint32_t seed = 5);

}  // namespace tessera
