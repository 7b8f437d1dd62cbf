#include "partition/graph/metrics.h"

#include <algorithm>
#include <iterator>

namespace tessera {

namespace {

int64_t SumNumel(const Graph& g, const std::vector<int>& ids) {
  int64_t n = 0;
  for (int v : ids)
    if (v >= 0) n += NumElements(g.values[v].shape);
  return n;
}

// Multiplications of one layer (METHODS §1, column R). Weight layers count
// their exact MACs; the rest count a small per-output figure so that the
// latency model still charges them something.
int64_t Multiplications(const Graph& g, const Node& node, int64_t K) {
  const std::string& op = node.op;
  if (op == "Conv") {
    // R = X'·Y'·U·V·(C/g)·O = K · U·V·(C/g); W is (O, C/g, U, V).
    const Shape& w = g.values[node.inputs.at(1)].shape;
    int64_t per_output = 1;
    for (size_t i = 1; i < w.size(); ++i) per_output *= w[i];
    return K * per_output;
  }
  if (op == "Gemm") {
    // R = M·K per sample: every output sums over all `in` inputs.
    const Shape& w = g.values[node.inputs.at(1)].shape;
    return K * (w.size() == 2 ? w[1] : 1);
  }
  if (op == "MatMul") {
    const Shape& a = g.values[node.inputs.at(0)].shape;
    return K * (a.empty() ? 1 : a.back());
  }
  if (op == "ConvTranspose") {
    // Every input value meets every weight of its group once:
    // R = N·C·H·W · (M/g)·kH·kW, W is (C, M/g, kH, kW).
    const Shape& w = g.values[node.inputs.at(1)].shape;
    int64_t per_input = 1;
    for (size_t i = 1; i < w.size(); ++i) per_input *= w[i];
    return SumNumel(g, {node.inputs.at(0)}) * per_input;
  }
  if (op == "LayerNormalization") return 4 * K;  // centre, square, scale, affine per output
  if (op == "Gelu") return 4 * K;                // erf counted as a few operations
  if (op == "Resize" && node.attrs.String("mode", "nearest") == "linear") return 3 * K;  // three lerps
  if (op == "MaxPool" || op == "AveragePool") {
    int64_t window = 1;
    for (int64_t k : node.attrs.Ints("kernel_shape")) window *= k;
    return K * window;
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") return SumNumel(g, g.ActivationInputs(node));
  if (op == "Reshape" || op == "Flatten" || op == "Identity" || op == "Concat" || op == "Transpose" ||
      op == "Reorg" || op == "Pad" || op == "Resize" || op == "DarknetCrop" || op == "Slice")
    return 0;  // data movement only
  return K;    // element-wise and the like: one operation per output
}

}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kConv:
      return "conv";
    case OpKind::kConv1x1:
      return "conv1x1";
    case OpKind::kDepthwise:
      return "depthwise";
    case OpKind::kGroupedConv:
      return "grouped_conv";
    case OpKind::kDense:
      return "dense";
    case OpKind::kPool:
      return "pool";
    case OpKind::kElementwise:
      return "elementwise";
    case OpKind::kOther:
      break;
  }
  return "other";
}

bool ParseOpKind(const std::string& name, OpKind* kind) {
  for (int k = 1; k < kOpKinds; ++k)
    if (name == OpKindName(static_cast<OpKind>(k))) {
      *kind = static_cast<OpKind>(k);
      return true;
    }
  return false;
}

OpKind OpKindOf(const Graph& g, const Node& node) {
  const std::string& op = node.op;
  if (op == "Conv") {
    // W is (O, C/g, U, V).
    const Shape& w = g.values[node.inputs.at(1)].shape;
    const int64_t group = node.attrs.Int("group", 1);
    if (group > 1) return w.size() >= 2 && w[1] == 1 ? OpKind::kDepthwise : OpKind::kGroupedConv;
    int64_t window = 1;
    for (size_t i = 2; i < w.size(); ++i) window *= w[i];
    return window == 1 ? OpKind::kConv1x1 : OpKind::kConv;
  }
  if (op == "ConvTranspose") return OpKind::kConv;
  if (op == "Gemm" || op == "MatMul") return OpKind::kDense;
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "GlobalMaxPool")
    return OpKind::kPool;
  return OpKind::kElementwise;
}

namespace {
// A measured factor at `x` from (x, factor) pairs, x ascending: the factor
// measured there, linear between the nearest measured points, the nearest
// one beyond them; 1 with none or at `whole` (the whole layer) and beyond.
double InterpolateFactor(const std::vector<std::pair<int64_t, double>>& t, int64_t x, int64_t whole) {
  if (t.empty() || (whole > 0 && x >= whole)) return 1.0;
  if (x <= t.front().first) return t.front().second;
  if (x >= t.back().first) return t.back().second;
  auto hi = std::lower_bound(t.begin(), t.end(), std::make_pair(x, 0.0));
  if (hi->first == x) return hi->second;
  const auto lo = std::prev(hi);
  const double a = static_cast<double>(x - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + a * (hi->second - lo->second);
}
}  // namespace

double LayerFigures::TileTimeFactor(int64_t rows) const {
  return InterpolateFactor(tile_time_factor, rows, output_shape.size() == 4 ? output_shape[2] : 0);
}

double LayerFigures::SliceTimeFactor(bool fan_out, int64_t channels) const {
  if (fan_out)
    return InterpolateFactor(out_slice_time_factor, channels, output_shape.size() == 4 ? output_shape[1] : 0);
  return InterpolateFactor(in_slice_time_factor, channels,
                           !input_shapes.empty() && input_shapes[0].size() == 4 ? input_shapes[0][1] : 0);
}

std::vector<LayerFigures> ComputeLayerFigures(const Graph& graph) {
  std::vector<LayerFigures> out;
  out.reserve(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    LayerFigures f;
    f.index = static_cast<int>(i) + 1;
    f.node = static_cast<int>(i);
    f.name = node.name;
    f.op = node.op;
    for (int v : graph.ActivationInputs(node)) f.input_shapes.push_back(graph.values[v].shape);
    if (!node.outputs.empty()) f.output_shape = graph.values[node.outputs[0]].shape;
    f.M = SumNumel(graph, graph.ActivationInputs(node));
    f.K = SumNumel(graph, node.outputs);
    // Q: every constant a layer reads is stored with it (weights + biases;
    // BN is already folded into its conv, METHODS §1).
    for (int v : node.inputs)
      if (v >= 0 && graph.values[v].constant) f.Q += NumElements(graph.values[v].shape);
    f.R = Multiplications(graph, node, f.K);
    f.kind = f.R > 0 ? OpKindOf(graph, node) : OpKind::kOther;
    out.push_back(std::move(f));
  }
  return out;
}

ModelTotals ComputeTotals(const std::vector<LayerFigures>& layers) {
  ModelTotals t;
  t.layers = static_cast<int64_t>(layers.size());
  for (const auto& l : layers) {
    t.weights += l.Q;
    t.macs += l.R;
    t.max_io = std::max(t.max_io, l.M + l.K);
  }
  return t;
}

}  // namespace tessera
