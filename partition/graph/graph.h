// The Graph IR (ARCHITECTURE.md "Data flow"): values with static shapes,
// nodes ("layers") in a canonical op set, and constant data (weights).
//
// Canonical form, produced by every importer and assumed by everything after:
//  * Layout NCHW, float32 for every non-constant value. Batch is dim 0.
//  * Weights are constant inputs of their node, ONNX style:
//      Conv   inputs [X, W(O, C/g, kH, kW), B(O)?]
//             attrs  kernel_shape[2], strides[2], pads[4]=(top,left,bottom,right),
//                    dilations[2], group
//      Gemm   inputs [X(N, in), W(out, in), B(out)?]   (y = x·Wᵀ + b; ONNX
//             alpha/beta/transA/transB are folded away at import). With
//             attr flatten_input=1, X may be [N, C, H, W] and is read as
//             [N, C·H·W] (darknet's [connected] after a feature map).
//      ConvTranspose inputs [X, W(C, M/g, kH, kW), B(M)?]
//             attrs  kernel_shape[2], strides[2], pads[4]=(top,left,bottom,right),
//                    dilations[2], group, output_padding[2]; output
//                    s·(in−1) + output_padding + (k−1)·d + 1 − pad_begin − pad_end
//                    (ONNX output_shape / auto_pad resolved at import).
//      LayerNormalization inputs [X, Scale, B?] (constants broadcasting to
//             X.shape[axis:]); attrs axis (non-negative), epsilon; normalises
//             each row of dims [axis, rank). Optional outputs 1, 2 = ONNX's
//             Mean and InvStdDev. Also what PyTorch's exported LayerNorm
//             subgraph is fused into (onnx_pattern_fusion.h). Not ONNX: attr
//             span (default rank − axis) normalises dims [axis, axis + span)
//             only, at every index of the later dims (no Mean/InvStdDev);
//             axis 1, span 1 on NCHW = a LayerNorm over the channels at each
//             position, which PyTorch's permute -> LayerNorm -> permute is
//             fused into (FuseChannelLayerNorm) and which FFMT tiles.
//  * A producer may carry a fused activation applied to its output
//    (METHODS §1: "bias/BN/activation folded into the producer"):
//      attr "activation" = "relu" | "leaky_relu" (alpha) | "clip" (min, max)
//                        | "sigmoid" | "silu" (x·sigmoid(x)) | "hard_sigmoid" (alpha, beta) | "tanh"
//                        | "hard_swish" (x·hard_sigmoid(x); alpha, beta default 1/6, 1/2)
//                        | "elu" (alpha) | "selu" (alpha, beta = gamma)
//                        | "darknet_ramp" | "darknet_plse" | "darknet_loggy"
//                        | "darknet_stair" | "darknet_lhtan"
//      with parameters in attrs "act_alpha", "act_beta" (clip: min, max).
//      The darknet_* ones are darknet's own functions (formulas in
//      daemon/runtime/kernels/fused_activation.cc); only the darknet
//      importer emits them, and elu/selu.
//    Absent or "" means linear. Conv, ConvTranspose, Gemm and Add (darknet
//    [shortcut]) may carry one.
//  * Conv attr "compact_weights" = 1 (set by the compiler on a device whose
//    plan says so, PartitionPlan::compact_weights): the kernel keeps its
//    weights at their raw size (no Winograd transform). Same answers.
//  * ONNX imports lose Identity, Dropout (inference), Constant and shape
//    arithmetic: Reshape carries its resolved target shape in attr "shape".
//    darknet imports keep one node per cfg section, so [dropout], [cost] and
//    one-input [route] stay as Identity nodes and layer numbers are darknet's.
//  * Op names and attribute names follow ONNX where an ONNX op exists
//    (MaxPool, AveragePool, GlobalAveragePool, Relu, LeakyRelu, Clip(min,max
//    as attrs), Sigmoid, HardSigmoid, Add, Mul, Max, Concat, Reshape,
//    Transpose, Softmax, Pad(pads attr), Resize(attrs mode "nearest" or
//    "linear" (bilinear over the last two dims), "scales",
//    coordinate_transformation_mode, nearest_mode; an FFMT tile's Resize also
//    carries tile_output_origin, tile_input_origin, tile_full_input,
//    tile_full_output, resize_map.h), BatchNormalization (only
//    where it could not be folded), MatMul (two non-constant inputs), Erf,
//    Gelu (y = x·½·(1 + erf(x/√2)); attr approximate "none" | "tanh" as ONNX
//    opset 20; PyTorch's exported erf subgraph is fused into it at import,
//    onnx_pattern_fusion.h), Slice (also every output of Split)).
//    QuantizeDequantize (not ONNX: attrs scale, zero_point, qmin, qmax;
//    y = (saturate(round_half_even(x / scale) + zero_point) − zero_point)·scale,
//    what ONNX's QuantizeLinear followed by DequantizeLinear computes. A QDQ
//    model imports as its float graph with these steps where it quantizes
//    activations, weights dequantized at import; partition/graph/quantization.h).
//    darknet-only ops: "Reorg" (attrs stride,
//    reverse), "Region" (attrs num, classes, coords, softmax, background,
//    anchors, mask, darknet_layer, tree_groups (softmax tree, [region]
//    tree=); also [yolo]), "Detection" ([detection], YOLOv1: attrs classes,
//    coords, num, side, softmax), "DarknetCrop",
//    "DarknetShortcut" (adds the channels two maps of different sizes share,
//    subsampling the larger, as darknet's [shortcut] does).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "partition/graph/quantization.h"
#include "util/status.h"

namespace tessera {

using Shape = std::vector<int64_t>;

// Product of dims (1 for a scalar shape {}).
int64_t NumElements(const Shape& shape);
// "[1,3,224,224]"
std::string ShapeToString(const Shape& shape);

// Constant float32 data: weights, biases, folded constants.
struct TensorData {
  Shape shape;
  std::vector<float> values;  // row-major, NumElements(shape) values
};

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

// Named attributes of a node. Getters return the default when absent.
class Attributes {
 public:
  bool Has(const std::string& name) const { return map_.count(name) != 0; }
  int64_t Int(const std::string& name, int64_t def = 0) const;
  double Float(const std::string& name, double def = 0.0) const;
  std::string String(const std::string& name, const std::string& def = "") const;
  std::vector<int64_t> Ints(const std::string& name, std::vector<int64_t> def = {}) const;
  std::vector<double> Floats(const std::string& name, std::vector<double> def = {}) const;
  void Set(const std::string& name, AttrValue v) { map_[name] = std::move(v); }
  void Erase(const std::string& name) { map_.erase(name); }
  const std::map<std::string, AttrValue>& all() const { return map_; }

 private:
  std::map<std::string, AttrValue> map_;
};

// A tensor flowing through the graph. Identified by its index in Graph::values.
struct Value {
  std::string name;
  Shape shape;
  int producer = -1;      // node index, -1 for graph inputs and constants
  bool constant = false;  // data lives in Graph::constants
};

struct Node {
  std::string name;  // unique, human-readable ("conv1", "layer 3 convolutional")
  std::string op;    // canonical op name (see top of file)
  std::vector<int> inputs;   // value ids; constants (weights) included
  std::vector<int> outputs;  // value ids
  Attributes attrs;
};

// One of the models a merged graph serves (partition/graph/merge_models.h):
// its name and its graph inputs and outputs. A request may run one of them
// alone (a *scenario*, issue 18 item 5: DeviceProgram::scenarios).
struct GraphModel {
  std::string name;
  std::vector<int> inputs, outputs;  // value ids, the model's own order
};

class Graph {
 public:
  std::string name;  // model name (file stem)
  std::vector<Value> values;
  std::vector<Node> nodes;  // kept in a topological order (see Validate)
  std::vector<int> inputs;   // graph input value ids (non-constant)
  std::vector<int> outputs;  // graph output value ids
  std::unordered_map<int, TensorData> constants;  // value id -> data
  // Merged models (MergeModels): at least two, or empty for one model.
  std::vector<GraphModel> models;

  // Adds a non-constant value; returns its id.
  int AddValue(const std::string& name, const Shape& shape);
  // Adds a constant value with its data; returns its id.
  int AddConstant(const std::string& name, TensorData data);
  // Adds a node and records it as producer of its outputs; returns its index.
  int AddNode(Node node);

  const TensorData* ConstantData(int value_id) const;
  bool IsConstant(int value_id) const { return values.at(value_id).constant; }
  // Non-constant inputs of a node (the activations it reads).
  std::vector<int> ActivationInputs(const Node& node) const;
  // Nodes reading each value (computed on demand).
  std::vector<std::vector<int>> Consumers() const;

  // Checks ids are in range, every non-constant non-input value has exactly
  // one producer, nodes are in topological order, names are unique.
  Status Validate() const;
  // Reorders nodes topologically (stable). Fails on a cycle naming a node in it.
  Status SortTopologically();
  // Removes nodes whose outputs reach no graph output, and unused constants.
  void RemoveDeadNodes();
  // Total weight values (sum over constants used by nodes).
  int64_t WeightCount() const;
  // This graph with every constant's shape and no values (TensorData::values
  // empty), as ImportOptions::shapes_only gives: for compiling and sizing
  // plans many times over (the memory flow, PlanWithinMemory), where values
  // are never read and copying weight slices cost most of the time.
  Graph ShapesOnly() const;
};

// 64-bit digest of n floats' bytes: tells constants of the same name and
// shape apart (a content identity, not a cryptographic hash).
uint64_t DigestValues(const float* data, size_t n);
// The identity of constant `value_id` of `g`: "name|shape|digest" of its
// values, "name|shape" when it has none (a shapes-only graph) or
// `with_digest` is false (sizing, where values are never read). The constants
// of one device program with the same identity hold the same values (the
// compiler names every weight slice by its range), so the program keeps
// them once: on the wire (program_codec.h) and in the runtime, raw and
// packed (daemon/runtime/kernels/weight_forms.h).
std::string ConstantIdentity(const Graph& g, int value_id, bool with_digest = true);

// The grid of a QuantizeDequantize node (its attrs scale, zero_point, qmin,
// qmax; unchecked); nullopt for any other op.
std::optional<QuantGrid> QuantizeDequantizeGrid(const Node& node);

// Bytes one value of `value` takes in a message between devices: 1 when a
// QuantizeDequantize of an 8-bit grid (ByteGrid, quantization.h) produces
// it (it travels as int8 codes: partition/compile/device_program.h
// WireGrid), else 4 (float32). What the planner prices links with.
int64_t ValueWireBytes(const Graph& graph, int value);
// Whether node `n` is part of a QDQ model's input quantization: a
// QuantizeDequantize of an 8-bit grid reading a model input, directly or
// through data-movement nodes alone (Pad, Transpose, Reshape, Identity; each
// the only reader of its input), or one of those nodes. Split plans run
// them whole on the source, which holds the input anyway, so tiles and
// slices leave as int8 codes instead of float32.
bool QuantizesModelInput(const Graph& graph, int n);

}  // namespace tessera
