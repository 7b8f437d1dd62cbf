#include "partition/graph/op_traits.h"

#include <limits>
#include <map>

namespace tessera {

namespace {

// The table. Ops the kernels implement under their ONNX names take ONNX
// semantics (graph.h). Absent, so run whole: darknet-only ops that mix rows
// or channels (Reorg, Region incl. tree softmax, Detection, DarknetCrop,
// DarknetShortcut), LayerNormalization (normalises dims [axis, rank); with
// graph.h's span 1 at axis 1 of NCHW it is per position: IsChannelLayerNorm),
// Softmax, Reshape/Transpose/Slice (Reshape of a 1x1 map is per-channel: a
// node rule below).
const std::map<std::string, OpTraits>& Table() {
  constexpr SpatialRule kNone = SpatialRule::kNone, kWindow = SpatialRule::kWindow,
                        kPointwise = SpatialRule::kPointwise;
  constexpr ChannelRule kMixed = ChannelRule::kMixed, kPerChannel = ChannelRule::kPerChannel,
                        kWeights = ChannelRule::kWeights;
  static const std::map<std::string, OpTraits> table = {
      // Weight layers (METHODS §4). A depthwise Conv is per-channel and a
      // grouped one splits at group boundaries: node-level rules below.
      {"Conv", {kWindow, kWeights, true}},
      {"Gemm", {kNone, kWeights, true}},
      // Pools: a window per channel; global pools read every row.
      {"MaxPool", {kWindow, kPerChannel}},
      {"AveragePool", {kWindow, kPerChannel}},
      {"GlobalAveragePool", {kNone, kPerChannel}},
      {"GlobalMaxPool", {kNone, kPerChannel}},
      // Constant-mode Pad is a window of size 1 whose padding border tiles
      // see (TileRuleOf). Resize maps output rows to input rows by its
      // coordinate transform: not a sliding window, but the same kind of
      // output-range -> input-range map (halo.h, SpatialMap::kResize).
      {"Pad", {kWindow, kPerChannel}},
      {"Resize", {kWindow, kPerChannel}},
      // ConvTranspose scatters each input row into a window of output rows:
      // tiled by the inverse map (halo.h, SpatialMap::kTransposed). Its
      // weights are not split (no FDT scheme compiles it): channels mixed.
      {"ConvTranspose", {kWindow, kMixed}},
      // Activations the importer folds into a Conv/Gemm producer.
      {"Relu", {kPointwise, kPerChannel, false, "relu"}},
      {"LeakyRelu", {kPointwise, kPerChannel, false, "leaky_relu"}},
      {"Clip", {kPointwise, kPerChannel, false, "clip"}},
      {"Sigmoid", {kPointwise, kPerChannel, false, "sigmoid"}},
      {"HardSigmoid", {kPointwise, kPerChannel, false, "hard_sigmoid"}},
      {"HardSwish", {kPointwise, kPerChannel, false, "hard_swish"}},
      {"Tanh", {kPointwise, kPerChannel, false, "tanh"}},
      {"Elu", {kPointwise, kPerChannel, false, "elu"}},
      // Other element-wise unary ops.
      {"Erf", {kPointwise, kPerChannel}},
      {"Gelu", {kPointwise, kPerChannel}},
      {"Softplus", {kPointwise, kPerChannel}},
      // A QDQ model's quantization step (quantization.h): element-wise.
      {"QuantizeDequantize", {kPointwise, kPerChannel}},
      {"Abs", {kPointwise, kPerChannel}},
      {"Neg", {kPointwise, kPerChannel}},
      {"Exp", {kPointwise, kPerChannel}},
      {"Log", {kPointwise, kPerChannel}},
      {"Sqrt", {kPointwise, kPerChannel}},
      {"Reciprocal", {kPointwise, kPerChannel}},
      {"Ceil", {kPointwise, kPerChannel}},
      {"Floor", {kPointwise, kPerChannel}},
      {"Identity", {kPointwise, kPerChannel}},
      {"BatchNormalization", {kPointwise, kPerChannel}},
      // Broadcasting binary / variadic ops: a per-channel constant operand is
      // sliced with the channels; an operand broadcast over space (an SE
      // gate) is read whole by every tile. Add may carry darknet's
      // [shortcut] activation.
      {"Add", {kPointwise, kPerChannel, true}},
      {"Sub", {kPointwise, kPerChannel}},
      {"Mul", {kPointwise, kPerChannel}},
      {"Div", {kPointwise, kPerChannel}},
      {"Pow", {kPointwise, kPerChannel}},
      {"PRelu", {kPointwise, kPerChannel}},
      {"Max", {kPointwise, kPerChannel}},
      {"Min", {kPointwise, kPerChannel}},
      {"Sum", {kPointwise, kPerChannel}},
      {"Mean", {kPointwise, kPerChannel}},
      // Concat along channels keeps positions; other axes are refused in TileRuleOf.
      {"Concat", {kPointwise, kMixed}},
  };
  return table;
}

std::string Label(const Graph& g, int n) {
  return "layer " + std::to_string(n + 1) + " ('" + g.nodes[n].name + "', " + g.nodes[n].op + ")";
}

std::string Label(const Graph& g, const Node& node) {
  const int n = static_cast<int>(&node - g.nodes.data());
  if (n >= 0 && n < static_cast<int>(g.nodes.size())) return Label(g, n);
  return "'" + node.name + "' (" + node.op + ")";
}

// Constant-mode Pad of H and W only, as a window of size 1 (halo.h).
Result<SpatialWindow> PadWindow(const Graph& g, int n, const Shape& in, const Shape& out) {
  const Node& node = g.nodes[n];
  const auto pads = node.attrs.Ints("pads");
  if (node.attrs.String("mode", "constant") != "constant" || pads.size() != 8 || g.ActivationInputs(node).size() != 1 ||
      node.inputs.size() != 1)
    return Status::InvalidArgument(Label(g, n) +
                                   " cannot be inside an FFMT stack: only a constant-mode Pad with its pads as an "
                                   "attribute can (reflect and edge modes read across tile borders)");
  for (int d : {0, 1, 4, 5})
    if (pads[d] != 0)
      return Status::InvalidArgument(Label(g, n) + " pads the batch or channel axis and cannot be tiled");
  SpatialWindow w;
  for (int a = 0; a < 2; ++a) {
    if (pads[2 + a] < 0 || pads[6 + a] < 0)
      return Status::InvalidArgument(Label(g, n) + " crops (negative pads) and cannot be tiled");
    w.pad_begin[a] = pads[2 + a];
    w.in_size[a] = in[2 + a];
    w.out_size[a] = out[2 + a];
  }
  w.macs_per_output = 0;  // a copy
  return w;
}

struct Activation {
  const char* op;
  const char* alpha_attr;  // ONNX attr for act_alpha, or nullptr
  double alpha_default;
  const char* beta_attr;
  double beta_default;
};

// Parameters of the fusable activations (graph.h: act_alpha, act_beta).
const std::vector<Activation>& Activations() {
  static const std::vector<Activation> acts = {
      {"Relu", nullptr, 0, nullptr, 0},
      {"LeakyRelu", "alpha", 0.01, nullptr, 0},
      {"Clip", "min", std::numeric_limits<float>::lowest(), "max", std::numeric_limits<float>::max()},
      {"Sigmoid", nullptr, 0, nullptr, 0},
      {"HardSigmoid", "alpha", 0.2, "beta", 0.5},
      {"HardSwish", nullptr, 0, nullptr, 0},  // alpha 1/6, beta 1/2: FusedActivation's defaults
      {"Tanh", nullptr, 0, nullptr, 0},
      {"Elu", "alpha", 1.0, nullptr, 0},
  };
  return acts;
}

}  // namespace

const OpTraits& TraitsOf(const std::string& op) {
  static const OpTraits kUnknown{};
  const auto& table = Table();
  auto it = table.find(op);
  return it == table.end() ? kUnknown : it->second;
}

// A LayerNormalization over the channels at each position (graph.h: axis 1,
// span 1, 4-D): spatially point-wise, channels mixed.
bool IsChannelLayerNorm(const Graph& g, const Node& node) {
  if (node.op != "LayerNormalization" || node.outputs.size() != 1 || node.inputs.empty()) return false;
  const Shape& x = g.values[node.inputs[0]].shape;
  return x.size() == 4 && node.attrs.Int("axis", -1) == 1 && node.attrs.Int("span", 3) == 1;
}

constexpr OpTraits kChannelLayerNorm{SpatialRule::kPointwise, ChannelRule::kMixed};

Result<TileRule> TileRuleOf(const Graph& g, int n) {
  const Node& node = g.nodes.at(n);
  const auto acts = g.ActivationInputs(node);
  for (int v : acts)
    if (g.values[v].shape.size() != 4)
      return Status::InvalidArgument(Label(g, n) + " is not on a 4-D feature map and cannot be tiled (ffmt)");
  if (node.outputs.size() != 1 || g.values[node.outputs[0]].shape.size() != 4 || acts.empty())
    return Status::InvalidArgument(Label(g, n) + " does not produce one 4-D feature map and cannot be tiled");
  const Shape& ys = g.values[node.outputs[0]].shape;
  const OpTraits& t = IsChannelLayerNorm(g, node) ? kChannelLayerNorm : TraitsOf(node.op);
  TileRule rule;
  if (t.spatial == SpatialRule::kWindow) {
    if (acts.size() != 1)
      return Status::InvalidArgument(Label(g, n) + " has several feature-map inputs and cannot be tiled");
    if (node.op == "Pad") {
      TS_ASSIGN_OR_RETURN(rule.w, PadWindow(g, n, g.values[acts[0]].shape, ys));
    } else {
      TS_ASSIGN_OR_RETURN(rule.w, SpatialWindowOf(g, node));
    }
    rule.window = true;
    rule.whole_input = {false};
    return rule;
  }
  if (t.spatial == SpatialRule::kPointwise) {
    if (node.op == "Concat" && node.attrs.Int("axis") != 1)
      return Status::InvalidArgument(Label(g, n) + " concatenates along axis " +
                                     std::to_string(node.attrs.Int("axis")) +
                                     " and cannot be tiled (only a channel concat can)");
    bool any_full = false;
    for (int v : acts) {
      const Shape& s = g.values[v].shape;
      const bool full = s[2] == ys[2] && s[3] == ys[3];
      // Broadcast over space: a [N, C, 1, 1] operand of an element-wise op
      // (METHODS §2 tiles need all of it; the compiler fetches it whole).
      const bool whole = !full && s[2] == 1 && s[3] == 1 && node.op != "Concat";
      if (!full && !whole)
        return Status::InvalidArgument(Label(g, n) + " reads a " + ShapeToString(s) + " input for a " +
                                       ShapeToString(ys) + " output and cannot be tiled");
      any_full |= full;
      rule.whole_input.push_back(whole);
    }
    if (!any_full)
      return Status::InvalidArgument(Label(g, n) + " only broadcasts its inputs and cannot be tiled");
    return rule;
  }
  return Status::InvalidArgument(
      Label(g, n) +
      " has no spatial locality and cannot be inside an FFMT stack (only conv, transposed conv, "
      "pool, constant pad, resize, element-wise and channel concat can)");
}

Status CheckTileable(const Graph& graph, int n) { return TileRuleOf(graph, n).status(); }

bool IsDepthwise(const Graph& g, const Node& node) {
  if (node.op != "Conv" || node.inputs.size() < 2 || node.inputs[1] < 0) return false;
  const int64_t group = node.attrs.Int("group", 1);
  const auto acts = g.ActivationInputs(node);
  if (group <= 1 || acts.empty()) return false;
  const Shape& x = g.values[acts[0]].shape;
  const Shape& w = g.values[node.inputs[1]].shape;
  return x.size() >= 2 && x[1] == group && !w.empty() && w[0] == group;
}

bool IsWeightSplitLayer(const Graph& g, const Node& node) {
  if (TraitsOf(node.op).channels != ChannelRule::kWeights) return false;
  if (node.inputs.size() < 2 || node.inputs[1] < 0 || !g.IsConstant(node.inputs[1])) return false;
  if (node.outputs.size() != 1 || g.ActivationInputs(node).size() != 1) return false;
  return !IsDepthwise(g, node);
}

Status CheckPerChannel(const Graph& g, const Node& node) {
  const auto acts = g.ActivationInputs(node);
  const std::string label = Label(g, node);
  const std::string refuse = label +
                             " cannot run per channel slice (part): only channel-wise layers can (activations, "
                             "element-wise ops, pools, depthwise conv, batch-norm, pad, resize, flatten of a 1x1 map)";
  if (acts.empty() || node.outputs.size() != 1) return Status::InvalidArgument(refuse);
  const Shape& ys = g.values[node.outputs[0]].shape;
  if (ys.size() < 2) return Status::InvalidArgument(refuse);
  for (int v : acts) {
    const Shape& xs = g.values[v].shape;
    if (xs.size() < 2 || xs[1] != ys[1])
      return Status::InvalidArgument(label + " reads " + std::to_string(xs.size() < 2 ? 0 : xs[1]) +
                                     " channels for " + std::to_string(ys[1]) +
                                     " output channels and cannot run per channel slice (part)");
  }
  if (TraitsOf(node.op).channels == ChannelRule::kPerChannel) {
    if (node.op == "Pad") {
      const auto pads = node.attrs.Ints("pads");
      const size_t rank = pads.size() / 2;
      if (rank < 2 || pads[0] != 0 || pads[1] != 0 || pads[rank] != 0 || pads[rank + 1] != 0 ||
          node.inputs.size() != 1)
        return Status::InvalidArgument(label + " pads the batch or channel axis (or takes pads as an input) and "
                                               "cannot run per channel slice (part)");
    }
    return Status::OK();
  }
  if (IsDepthwise(g, node)) return Status::OK();
  if (node.op == "Reshape" || node.op == "Flatten") {
    // Flatten of a 1×1 map keeps channel order: a slice stays a slice.
    const Shape& xs = g.values[acts[0]].shape;
    if (acts.size() == 1 && xs.size() == 4 && xs[2] == 1 && xs[3] == 1 && ys.size() == 2) return Status::OK();
  }
  return Status::InvalidArgument(refuse);
}

int64_t OutputSplitGranule(const Graph& g, const Node& node) {
  if (node.op != "Conv" || IsDepthwise(g, node)) return 1;
  const int64_t group = node.attrs.Int("group", 1);
  if (group <= 1 || node.outputs.empty()) return 1;
  const Shape& ys = g.values[node.outputs[0]].shape;
  return ys.size() >= 2 && ys[1] % group == 0 ? ys[1] / group : 1;
}

int64_t InputSplitGranule(const Graph& g, const Node& node) {
  if (node.op != "Conv" || IsDepthwise(g, node)) return 1;
  const int64_t group = node.attrs.Int("group", 1);
  if (group <= 1 || node.inputs.size() < 2 || node.inputs[1] < 0) return 1;
  const Shape& w = g.values[node.inputs[1]].shape;  // (O, C/g, kH, kW)
  return w.size() >= 2 ? w[1] : 1;
}

std::vector<int64_t> SplitChannels(int64_t total, int64_t granule, const std::vector<double>& weights) {
  if (granule <= 1 || total % granule != 0) return SplitProportional(total, weights);
  std::vector<int64_t> units = SplitProportional(total / granule, weights);
  for (int64_t& u : units) u *= granule;
  return units;
}

Status CheckChannelSplit(const Graph& g, int n, const std::vector<int64_t>& sizes, bool by_input) {
  const Node& node = g.nodes.at(n);
  const int64_t granule = by_input ? InputSplitGranule(g, node) : OutputSplitGranule(g, node);
  if (granule <= 1) return Status::OK();
  int64_t edge = 0;
  for (int64_t s : sizes) {
    edge += s;
    if (edge % granule != 0)
      return Status::InvalidArgument(Label(g, n) + ": a grouped conv is split by whole groups only (" +
                                     std::to_string(granule) + (by_input ? " input" : " output") +
                                     " channels per group), but a slice ends at channel " + std::to_string(edge));
  }
  return Status::OK();
}

bool FuseActivation(const Node& act, Attributes* producer) {
  const OpTraits& t = TraitsOf(act.op);
  if (t.fused_name == nullptr) return false;
  for (const Activation& a : Activations()) {
    if (act.op != a.op) continue;
    producer->Set("activation", std::string(t.fused_name));
    if (a.alpha_attr != nullptr) producer->Set("act_alpha", act.attrs.Float(a.alpha_attr, a.alpha_default));
    if (a.beta_attr != nullptr) producer->Set("act_beta", act.attrs.Float(a.beta_attr, a.beta_default));
    return true;
  }
  return false;
}

}  // namespace tessera
