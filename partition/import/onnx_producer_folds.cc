#include "partition/import/onnx_producer_folds.h"

#include <algorithm>
#include <cmath>

#include "partition/graph/op_traits.h"

namespace tessera {
namespace {

// A weight layer that carries a fused activation (op_traits.h): Conv, Gemm.
bool IsFoldTarget(const Node& node) {
  const OpTraits& t = TraitsOf(node.op);
  return t.channels == ChannelRule::kWeights && t.carries_activation && node.outputs.size() == 1 &&
         node.attrs.String("activation").empty() && node.inputs.size() >= 2 && node.inputs[1] >= 0;
}

// Output channels of a Conv/Gemm producer: rows of its weight.
int64_t OutputChannels(const Graph& g, const Node& p) { return g.values[p.inputs[1]].shape.at(0); }

// A constant imported with its values (not shapes only, ImportOptions).
bool HasValues(const TensorData& t) { return static_cast<int64_t>(t.values.size()) == NumElements(t.shape); }

// Current bias of P (zeros if absent), as a fresh vector; empty when the
// bias was imported for its shape only (then a folded bias has no values either).
std::vector<float> BiasOf(const Graph& g, const Node& p) {
  const int64_t o = OutputChannels(g, p);
  if (p.inputs.size() > 2 && p.inputs[2] >= 0) {
    const TensorData* b = g.ConstantData(p.inputs[2]);
    if (b != nullptr && NumElements(b->shape) == o) return b->values;
  }
  return std::vector<float>(static_cast<size_t>(o), 0.f);
}

// `bias` has o values, or none (shapes only).
void SetBias(Graph* g, Node* p, int64_t o, std::vector<float> bias, const std::string& suffix) {
  TensorData d;
  d.shape = {o};
  d.values = std::move(bias);
  const int id = g->AddConstant(p->name + "/" + suffix, std::move(d));
  if (p->inputs.size() < 3) p->inputs.resize(3, -1);
  p->inputs[2] = id;
}

// BN parameters as constants of length `channels`, or false.
bool ReadBatchNorm(const Graph& g, const Node& bn, int64_t channels, std::vector<const TensorData*>* params) {
  if (bn.inputs.size() != 5 || bn.outputs.size() != 1) return false;
  for (int i = 1; i < 5; ++i) {
    const TensorData* t = bn.inputs[i] >= 0 ? g.ConstantData(bn.inputs[i]) : nullptr;
    if (t == nullptr || NumElements(t->shape) != channels) return false;
    params->push_back(t);
  }
  return true;
}

bool FoldBatchNorm(Graph* g, Node* p, const Node& bn) {
  const int64_t o = OutputChannels(*g, *p);
  const Shape& out_shape = g->values[p->outputs[0]].shape;
  if (out_shape.size() < 2 || out_shape[1] != o) return false;
  std::vector<const TensorData*> prm;  // scale, beta, mean, var
  if (!ReadBatchNorm(*g, bn, o, &prm)) return false;
  const TensorData* w = g->ConstantData(p->inputs[1]);
  if (w == nullptr || NumElements(w->shape) == 0 || NumElements(w->shape) % o != 0) return false;
  const double eps = bn.attrs.Float("epsilon", 1e-5);
  std::vector<float> bias = BiasOf(*g, *p);
  // Shapes only (ImportOptions): what lacks a value folds into no values.
  bool params_known = true;
  for (const TensorData* t : prm) params_known &= HasValues(*t);
  const bool weights_known = params_known && HasValues(*w);
  if (!params_known) bias.clear();
  TensorData w2;
  w2.shape = w->shape;
  if (weights_known) w2.values = w->values;
  const size_t per_row = static_cast<size_t>(NumElements(w->shape) / o);
  for (int64_t c = 0; c < o && params_known; ++c) {
    const double s = prm[0]->values[c] / std::sqrt(static_cast<double>(prm[3]->values[c]) + eps);
    for (size_t k = 0; k < per_row && weights_known; ++k) {
      float& v = w2.values[c * per_row + k];
      v = static_cast<float>(v * s);
    }
    if (!bias.empty()) bias[c] = static_cast<float>((bias[c] - prm[2]->values[c]) * s + prm[1]->values[c]);
  }
  p->inputs[1] = g->AddConstant(p->name + "/W@bn", std::move(w2));
  SetBias(g, p, o, std::move(bias), "bias@bn");
  return true;
}

bool FoldBiasAdd(Graph* g, Node* p, const Node& add, int from_value) {
  if (add.inputs.size() != 2 || add.outputs.size() != 1) return false;
  const int c_id = add.inputs[0] == from_value ? add.inputs[1] : add.inputs[0];
  const TensorData* c = c_id >= 0 ? g->ConstantData(c_id) : nullptr;
  if (c == nullptr) return false;
  const int64_t o = OutputChannels(*g, *p);
  const Shape& out_shape = g->values[p->outputs[0]].shape;
  if (out_shape.size() < 2 || out_shape[1] != o || c->shape.size() > out_shape.size()) return false;
  // Right-align the constant against the output; only the channel axis may differ from 1.
  const size_t lead = out_shape.size() - c->shape.size();
  for (size_t i = 0; i < c->shape.size(); ++i) {
    const size_t axis = lead + i;
    if (c->shape[i] == 1) continue;
    if (axis != 1 || c->shape[i] != o) return false;
  }
  std::vector<float> bias = BiasOf(*g, *p);
  if (!HasValues(*c)) bias.clear();  // shapes only: the folded bias has no values
  const bool scalar = NumElements(c->shape) == 1;
  for (int64_t k = 0; k < o && !bias.empty(); ++k) bias[k] += c->values[scalar ? 0 : k];
  SetBias(g, p, o, std::move(bias), "bias@add");
  return true;
}

// Drops the nodes marked in `removed` and renumbers the values' producers.
void RemoveNodes(Graph* graph, const std::vector<bool>& removed) {
  Graph& g = *graph;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (!removed[n]) kept.push_back(std::move(g.nodes[n]));
  g.nodes = std::move(kept);
  for (auto& v : g.values) v.producer = -1;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int v : g.nodes[n].outputs) g.values[v].producer = static_cast<int>(n);
}

}  // namespace

Status FoldIntoProducers(Graph* graph, std::vector<std::pair<std::string, std::string>>* folded_into) {
  Graph& g = *graph;
  const auto consumers = g.Consumers();
  std::vector<bool> is_output(g.values.size(), false);
  for (int v : g.outputs) is_output[v] = true;
  std::vector<bool> removed(g.nodes.size(), false);
  // Folded: batch-norm and bias adds (into weights and bias), and the
  // activations the op-traits table names as fusable.
  auto foldable = [](const Node& c) {
    return c.op == "BatchNormalization" || c.op == "Add" || TraitsOf(c.op).fused_name != nullptr;
  };
  // SiLU as exported (x · Sigmoid(x), EfficientNet and friends): P -> v ->
  // {Sigmoid -> s, Mul(v, s)} becomes P with activation "silu", writing the
  // Mul's output; v and s are no longer materialised. Hard swish as
  // exported (x · HardSigmoid(x), MobileNetV3) likewise becomes "hard_swish"
  // with the HardSigmoid's alpha and beta.
  auto fold_swish = [&](size_t n) {
    const Node& c = g.nodes[n];
    if ((c.op != "Sigmoid" && c.op != "HardSigmoid") || c.inputs.size() != 1 || c.outputs.size() != 1) return false;
    const int v = c.inputs[0], s = c.outputs[0];
    if (v < 0 || is_output[v] || is_output[s] || consumers[v].size() != 2 || consumers[s].size() != 1) return false;
    const int mi = consumers[s][0];
    if (mi < 0 || removed[mi] || std::find(consumers[v].begin(), consumers[v].end(), mi) == consumers[v].end())
      return false;
    const Node& m = g.nodes[mi];
    const bool operands =
        m.inputs.size() == 2 && ((m.inputs[0] == v && m.inputs[1] == s) || (m.inputs[0] == s && m.inputs[1] == v));
    if (m.op != "Mul" || !operands || m.outputs.size() != 1) return false;
    const int pi = g.values[v].producer;
    if (pi < 0 || removed[pi] || g.values[m.outputs[0]].shape != g.values[v].shape) return false;
    Node& p = g.nodes[pi];
    if (!IsFoldTarget(p) || p.outputs[0] != v) return false;
    if (c.op == "Sigmoid") {
      p.attrs.Set("activation", std::string("silu"));
    } else {
      p.attrs.Set("activation", std::string("hard_swish"));
      p.attrs.Set("act_alpha", c.attrs.Float("alpha", 0.2));
      p.attrs.Set("act_beta", c.attrs.Float("beta", 0.5));
    }
    if (folded_into != nullptr) {
      folded_into->emplace_back(c.name, p.name);
      folded_into->emplace_back(m.name, p.name);
    }
    p.outputs[0] = m.outputs[0];
    g.values[m.outputs[0]].producer = pi;
    g.values[v].producer = -1;
    g.values[s].producer = -1;
    removed[n] = true;
    removed[mi] = true;
    return true;
  };
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (removed[n] || fold_swish(n)) continue;
    const Node& c = g.nodes[n];
    if (!foldable(c) || c.outputs.size() != 1) continue;
    const auto act_inputs = g.ActivationInputs(c);
    if (act_inputs.size() != 1 || c.inputs.empty() || c.inputs[0] < 0) continue;
    const int v = act_inputs[0];
    // Unary ops and BN read the producer's value as input 0; Add may read it on either side.
    if (c.op != "Add" && c.inputs[0] != v) continue;
    const int pi = g.values[v].producer;
    if (pi < 0 || removed[pi] || consumers[v].size() != 1 || is_output[v]) continue;
    Node& p = g.nodes[pi];
    if (g.values[c.outputs[0]].shape != g.values[v].shape) continue;
    // A residual Add's activation (ResNet: Add -> Relu) runs on its result
    // in place of a second pass over the tensor (the Add kernel applies it).
    const bool residual = p.op == "Add" && p.outputs.size() == 1 && p.outputs[0] == v &&
                          p.attrs.String("activation").empty() && g.ActivationInputs(p).size() == 2 && c.op != "Add" &&
                          c.op != "BatchNormalization";
    if (!residual && (!IsFoldTarget(p) || p.outputs[0] != v)) continue;
    bool folded = false;
    if (residual)
      folded = FuseActivation(c, &p.attrs);
    else if (c.op == "BatchNormalization")
      folded = FoldBatchNorm(&g, &p, c);
    else if (c.op == "Add")
      folded = FoldBiasAdd(&g, &p, c, v);
    else
      folded = FuseActivation(c, &p.attrs);
    if (!folded) continue;
    if (folded_into != nullptr) folded_into->emplace_back(c.name, p.name);
    p.outputs[0] = c.outputs[0];
    g.values[c.outputs[0]].producer = pi;
    g.values[v].producer = -1;
    removed[n] = true;
  }
  RemoveNodes(&g, removed);
  return Status::OK();
}

namespace {

// One pass of FoldPadsIntoWindows (below).
int FoldPadsOnce(Graph* graph, std::vector<std::pair<std::string, std::string>>* folded_into) {
  Graph& g = *graph;
  const auto consumers = g.Consumers();
  std::vector<bool> is_output(g.values.size(), false);
  for (int v : g.outputs) is_output[v] = true;
  // The one reader of v, or -1.
  auto only_reader = [&](int v) { return is_output[v] || consumers[v].size() != 1 ? -1 : consumers[v][0]; };
  std::vector<bool> removed(g.nodes.size(), false);
  int count = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& pad = g.nodes[n];
    if (pad.op != "Pad" || pad.inputs.size() != 1 || pad.outputs.size() != 1 || pad.inputs[0] < 0) continue;
    const auto p = pad.attrs.Ints("pads");
    if (pad.attrs.String("mode", "constant") != "constant" || pad.attrs.Float("value", 0.0) != 0.0 || p.size() != 8 ||
        p[0] != 0 || p[1] != 0 || p[4] != 0 || p[5] != 0 ||
        std::any_of(p.begin(), p.end(), [](int64_t v) { return v < 0; }))
      continue;
    const int x = pad.inputs[0], y = pad.outputs[0];
    int reader = only_reader(y), qdq = -1;
    if (reader >= 0 && g.nodes[reader].op == "QuantizeDequantize") {
      const Node& q = g.nodes[reader];
      const int64_t z = q.attrs.Int("zero_point", 0);
      if (q.inputs.size() != 1 || q.outputs.size() != 1 || z < q.attrs.Int("qmin", -128) ||
          z > q.attrs.Int("qmax", 127))
        continue;
      qdq = reader;
      reader = only_reader(q.outputs[0]);
    }
    if (reader < 0 || removed[reader]) continue;
    Node& w = g.nodes[reader];
    const int read = qdq >= 0 ? g.nodes[qdq].outputs[0] : y;
    if (w.inputs.empty() || w.inputs[0] != read) continue;
    const auto wp = w.attrs.Ints("pads", {0, 0, 0, 0});
    if (wp.size() != 4 || g.values[x].shape.size() != 4) continue;
    const std::string auto_pad = w.attrs.String("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") continue;
    if (w.op == "AveragePool") {
      const bool own_pads = std::any_of(wp.begin(), wp.end(), [](int64_t v) { return v != 0; });
      if (w.attrs.Int("ceil_mode", 0) != 0 || (own_pads && w.attrs.Int("count_include_pad", 0) == 0)) continue;
      w.attrs.Set("count_include_pad", int64_t{1});
    } else if (w.op != "Conv") {
      continue;
    }
    w.attrs.Set("pads", std::vector<int64_t>{wp[0] + p[2], wp[1] + p[3], wp[2] + p[6], wp[3] + p[7]});
    if (qdq >= 0) {
      Node& q = g.nodes[qdq];
      q.inputs[0] = x;
      g.values[q.outputs[0]].shape = g.values[x].shape;
    } else {
      w.inputs[0] = x;
    }
    g.values[y].producer = -1;
    removed[n] = true;
    ++count;
    if (folded_into != nullptr) folded_into->emplace_back(pad.name, w.name);
  }
  if (count == 0) return 0;
  RemoveNodes(&g, removed);
  return count;
}

}  // namespace

int FoldPadsIntoWindows(Graph* graph, std::vector<std::pair<std::string, std::string>>* folded_into) {
  // Until none is left: in a chain of zero Pads, the first reads into a Pad,
  // not a window, until the one after it is folded.
  int total = 0;
  for (int n = FoldPadsOnce(graph, folded_into); n > 0; n = FoldPadsOnce(graph, folded_into)) total += n;
  return total;
}

}  // namespace tessera
