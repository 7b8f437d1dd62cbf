#include "partition/import/onnx_pattern_fusion.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace tessera {
namespace {

constexpr double kConstantTolerance = 1e-4;

// Who reads what, computed once per pass; nodes are rewritten in place, so
// a fused node's old readers stay listed (they are dead afterwards and never
// match again: every match requires single readers).
class GraphView {
 public:
  explicit GraphView(Graph* g) : g_(*g), consumers_(g->Consumers()) {
    for (int v : g->outputs) outputs_.insert(v);
  }

  Graph& graph() { return g_; }
  // The node producing `v`, or nullptr for inputs and constants.
  Node* Producer(int v) {
    const int p = v >= 0 ? g_.values[v].producer : -1;
    return p >= 0 ? &g_.nodes[p] : nullptr;
  }
  Node* ProducerIs(int v, const char* op) {
    Node* n = Producer(v);
    return n != nullptr && n->op == op ? n : nullptr;
  }
  // The only reader of `v` when it has one and is not a graph output.
  Node* SoleReader(int v) {
    if (v < 0 || outputs_.count(v) || consumers_[v].size() != 1) return nullptr;
    return &g_.nodes[consumers_[v][0]];
  }
  bool HasSoleReader(int v) { return SoleReader(v) != nullptr; }
  const std::vector<int>& Readers(int v) const { return consumers_[v]; }
  bool IsOutput(int v) const { return outputs_.count(v) != 0; }
  // A constant scalar (any rank, one element) within tolerance of `want`.
  bool IsScalar(int v, double want) const {
    if (v < 0 || !g_.IsConstant(v)) return false;
    const TensorData* d = g_.ConstantData(v);
    if (d == nullptr || d->values.size() != 1) return false;
    return std::fabs(d->values[0] - want) <= kConstantTolerance * std::max(1.0, std::fabs(want));
  }
  bool ScalarValue(int v, float* out) const {
    if (v < 0 || !g_.IsConstant(v)) return false;
    const TensorData* d = g_.ConstantData(v);
    if (d == nullptr || d->values.size() != 1) return false;
    *out = d->values[0];
    return true;
  }

 private:
  Graph& g_;
  std::vector<std::vector<int>> consumers_;
  std::set<int> outputs_;
};

bool IsBinary(const Node* n, const char* op) { return n != nullptr && n->op == op && n->inputs.size() == 2; }

// For a binary node, the operand other than `v` (-1 when `v` is not one).
int OtherOperand(const Node& n, int v) {
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return -1;
}

// Leaves of the product rooted at Mul node `root`: operands that are
// themselves single-reader Mul outputs (other than `keep`) are expanded.
void ProductLeaves(GraphView& view, const Node& root, const std::set<int>& keep, int depth, std::vector<int>* leaves) {
  for (int v : root.inputs) {
    Node* p = view.ProducerIs(v, "Mul");
    if (depth > 0 && p != nullptr && IsBinary(p, "Mul") && !keep.count(v) && view.HasSoleReader(v)) {
      ProductLeaves(view, *p, keep, depth - 1, leaves);
    } else {
      leaves->push_back(v);
    }
  }
}

// True when `leaves` is exactly {x, a, 0.5}.
bool IsHalfProduct(GraphView& view, std::vector<int> leaves, int x, int a) {
  if (leaves.size() != 3) return false;
  for (int want : {x, a}) {
    auto it = std::find(leaves.begin(), leaves.end(), want);
    if (it == leaves.end()) return false;
    leaves.erase(it);
  }
  return view.IsScalar(leaves[0], 0.5);
}

// x of the Erf's argument: Div(x, √2) or Mul(x, 1/√2), read only by the Erf.
int GeluInput(GraphView& view, const Node& erf) {
  const int u = erf.inputs[0];
  if (!view.HasSoleReader(u)) return -1;
  Node* p = view.Producer(u);
  if (IsBinary(p, "Div") && view.IsScalar(p->inputs[1], std::sqrt(2.0))) return p->inputs[0];
  if (IsBinary(p, "Mul")) {
    for (int k = 0; k < 2; ++k)
      if (view.IsScalar(p->inputs[k], 1.0 / std::sqrt(2.0))) return p->inputs[1 - k];
  }
  return -1;
}

using Absorbed = std::vector<std::pair<std::string, std::string>>;

// Records that `nodes` were absorbed into `into`.
void RecordAbsorbed(GraphView& view, const std::vector<const Node*>& nodes, const Node& into, Absorbed* absorbed) {
  if (absorbed == nullptr) return;
  for (const Node* n : nodes)
    if (n != nullptr && n != &into) absorbed->emplace_back(n->name, into.name);
  (void)view;
}

bool TryFuseGelu(GraphView& view, const Node& erf, Absorbed* absorbed) {
  if (erf.inputs.size() != 1 || erf.outputs.size() != 1) return false;
  const int x = GeluInput(view, erf);
  if (x < 0) return false;
  Node* add = view.SoleReader(erf.outputs[0]);
  if (!IsBinary(add, "Add") || !view.IsScalar(OtherOperand(*add, erf.outputs[0]), 1.0)) return false;
  const int a = add->outputs[0];
  Node* first = view.SoleReader(a);
  if (!IsBinary(first, "Mul")) return false;
  // The product ends at the first Mul or the one after it.
  Node* candidates[2] = {
      first, IsBinary(view.SoleReader(first->outputs[0]), "Mul") ? view.SoleReader(first->outputs[0]) : nullptr};
  for (Node* root : candidates) {
    if (root == nullptr) continue;
    std::vector<int> leaves;
    ProductLeaves(view, *root, {x, a}, 1, &leaves);
    if (!IsHalfProduct(view, leaves, x, a)) continue;
    const Node* arg = view.Producer(erf.inputs[0]);
    const Node* inner = root == first ? nullptr : first;
    if (inner == nullptr) {  // Mul(Mul(x, 0.5), a): the expanded operand's Mul
      for (int v : root->inputs)
        if (v != a && v != x) inner = view.Producer(v);
    }
    RecordAbsorbed(view, {arg, &erf, add, inner}, *root, absorbed);
    root->op = "Gelu";
    root->inputs = {x};
    root->attrs = Attributes();
    return true;
  }
  return false;
}

// Trailing axes [a, rank) as ReduceMean (keepdims) writes them; -1 otherwise.
int64_t TrailingReduceAxis(const Node& reduce, size_t rank) {
  if (reduce.attrs.Int("keepdims", 1) == 0) return -1;
  const std::vector<int64_t> axes = reduce.attrs.Ints("axes");
  if (axes.empty()) return -1;
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != static_cast<int64_t>(rank - axes.size() + i)) return -1;
  return axes.front();
}

// A constant whose shape does not vary over the dims before `axis` of a
// rank-`rank` tensor (numpy broadcasting from the right).
bool PerRowConstant(const Graph& g, int v, size_t rank, int64_t axis) {
  if (v < 0 || !g.IsConstant(v)) return false;
  const Shape& s = g.values[v].shape;
  if (s.size() > rank) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const int64_t dim = static_cast<int64_t>(rank - s.size() + i);
    if (dim < axis && s[i] != 1) return false;
  }
  return true;
}

bool TryFuseLayerNorm(GraphView& view, Node& sub, Absorbed* absorbed) {
  if (!IsBinary(&sub, "Sub")) return false;
  Graph& g = view.graph();
  const int x = sub.inputs[0], m = sub.inputs[1], d = sub.outputs[0];
  Node* mean = view.ProducerIs(m, "ReduceMean");
  if (mean == nullptr || mean->inputs[0] != x || !view.HasSoleReader(m)) return false;
  const size_t rank = g.values[x].shape.size();
  const int64_t axis = TrailingReduceAxis(*mean, rank);
  if (axis < 0) return false;
  // d feeds exactly Pow(d, 2) and Div(d, ·).
  const std::vector<int>& readers = view.Readers(d);
  if (readers.size() != 2 || view.IsOutput(d)) return false;
  Node* pow = nullptr;
  Node* div = nullptr;
  for (int r : readers) {
    Node& n = g.nodes[r];
    if (IsBinary(&n, "Pow") && n.inputs[0] == d && view.IsScalar(n.inputs[1], 2.0)) pow = &n;
    if (IsBinary(&n, "Div") && n.inputs[0] == d) div = &n;
  }
  if (pow == nullptr || div == nullptr) return false;
  Node* var = view.SoleReader(pow->outputs[0]);
  if (var == nullptr || var->op != "ReduceMean" || TrailingReduceAxis(*var, rank) != axis) return false;
  Node* add_eps = view.SoleReader(var->outputs[0]);
  float epsilon = 0.f;
  if (!IsBinary(add_eps, "Add") || !view.ScalarValue(OtherOperand(*add_eps, var->outputs[0]), &epsilon)) return false;
  Node* sqrt = view.SoleReader(add_eps->outputs[0]);
  if (sqrt == nullptr || sqrt->op != "Sqrt" || view.SoleReader(sqrt->outputs[0]) != div ||
      div->inputs[1] != sqrt->outputs[0])
    return false;
  // Optional affine tail.
  Node* last = div;
  int scale = -1, bias = -1;
  Node* mul = view.SoleReader(div->outputs[0]);
  if (IsBinary(mul, "Mul") && PerRowConstant(g, OtherOperand(*mul, div->outputs[0]), rank, axis)) {
    scale = OtherOperand(*mul, div->outputs[0]);
    last = mul;
    Node* add = view.SoleReader(mul->outputs[0]);
    if (IsBinary(add, "Add") && PerRowConstant(g, OtherOperand(*add, mul->outputs[0]), rank, axis)) {
      bias = OtherOperand(*add, mul->outputs[0]);
      last = add;
    }
  }
  if (scale < 0) {
    const Shape& xs = g.values[x].shape;
    TensorData ones{Shape(xs.begin() + axis, xs.end()), {}};
    ones.values.assign(static_cast<size_t>(NumElements(ones.shape)), 1.f);
    scale = g.AddConstant(last->name + "/ones", std::move(ones));
  }
  RecordAbsorbed(view, {&sub, mean, pow, var, add_eps, sqrt, div, mul}, *last, absorbed);
  last->op = "LayerNormalization";
  last->inputs = {x, scale};
  if (bias >= 0) last->inputs.push_back(bias);
  last->attrs = Attributes();
  last->attrs.Set("axis", axis);
  last->attrs.Set("epsilon", static_cast<double>(epsilon));
  return true;
}

bool TryFuseChannelLayerNorm(GraphView& view, Node& back, Absorbed* absorbed) {
  const Graph& g = view.graph();
  if (back.inputs.size() != 1 || back.attrs.Ints("perm") != std::vector<int64_t>{0, 3, 1, 2}) return false;
  Node* ln = view.ProducerIs(back.inputs[0], "LayerNormalization");
  if (ln == nullptr || ln->outputs.size() != 1 || view.SoleReader(ln->outputs[0]) != &back) return false;
  const int64_t axis = ln->attrs.Int("axis", -1);
  if ((axis != 3 && axis != -1) || ln->attrs.Has("span") || ln->inputs.empty()) return false;
  Node* front = view.ProducerIs(ln->inputs[0], "Transpose");
  if (front == nullptr || front->inputs.size() != 1 || view.SoleReader(front->outputs[0]) != ln ||
      front->attrs.Ints("perm") != std::vector<int64_t>{0, 2, 3, 1})
    return false;
  if (g.values[front->inputs[0]].shape.size() != 4) return false;
  for (size_t k = 1; k < ln->inputs.size(); ++k)
    if (ln->inputs[k] >= 0 && !g.IsConstant(ln->inputs[k])) return false;
  RecordAbsorbed(view, {front, ln}, back, absorbed);
  std::vector<int> inputs = ln->inputs;
  inputs[0] = front->inputs[0];
  const double epsilon = ln->attrs.Float("epsilon", 1e-5);
  back.op = "LayerNormalization";
  back.inputs = std::move(inputs);
  back.attrs = Attributes();
  back.attrs.Set("axis", int64_t{1});
  back.attrs.Set("span", int64_t{1});
  back.attrs.Set("epsilon", epsilon);
  return true;
}

}  // namespace

int FuseChannelLayerNorm(Graph* graph, Absorbed* absorbed) {
  GraphView view(graph);
  int fused = 0;
  for (size_t i = 0; i < graph->nodes.size(); ++i)
    if (graph->nodes[i].op == "Transpose" && TryFuseChannelLayerNorm(view, graph->nodes[i], absorbed)) ++fused;
  return fused;
}

int FuseGelu(Graph* graph, Absorbed* absorbed) {
  GraphView view(graph);
  int fused = 0;
  for (size_t i = 0; i < graph->nodes.size(); ++i)
    if (graph->nodes[i].op == "Erf" && TryFuseGelu(view, graph->nodes[i], absorbed)) ++fused;
  return fused;
}

int FuseLayerNorm(Graph* graph, Absorbed* absorbed) {
  int fused = 0;
  // AddConstant may grow `values`; the view's reader lists stay valid for the
  // old ids, and new constants are never matched against.
  GraphView view(graph);
  for (size_t i = 0; i < graph->nodes.size(); ++i)
    if (graph->nodes[i].op == "Sub" && TryFuseLayerNorm(view, graph->nodes[i], absorbed)) ++fused;
  return fused;
}

}  // namespace tessera
