// Host side of the MCU program (transport/wire/mcu_program.h): compiles a Graph
// chain of MCU-supported ops (Conv incl. depthwise, Gemm, MaxPool,
// AveragePool, GlobalAveragePool, Relu, Add; Reshape/Flatten/Identity become
// aliases) into the compact program a microcontroller worker runs.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "partition/compile/device_program.h"
#include "partition/graph/graph.h"
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
  std::string bytes;               // the program, 4-byte words
  uint32_t activation_floats = 0;  // activation region the firmware places after it
  int64_t macs = 0;
  int in_place_layers = 0;     // layers that write their output over their input (segments)
  int int8_weight_layers = 0;  // conv / dense layers whose weights are stored as int8
  // What the firmware holds (issue 16 item 3): the program with its
  // weights in its flash region, the activations in its RAM arena.
  size_t flash_bytes() const { return bytes.size(); }
  size_t ram_bytes() const { return size_t{4} * activation_floats; }
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
};
Result<McuLayerDescription> DescribeMcuLayer(const Graph& graph, const Node& node);
// Whether an MCU can run `node` (OK), else why, naming it: the planner asks
// this before it places a layer on an MCU, BuildMcuProgram the same.
Status McuCanRun(const Graph& graph, const Node& node);

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

}  // namespace tessera
