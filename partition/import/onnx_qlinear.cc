#include "partition/import/onnx_qlinear.h"

#include <unordered_set>
#include <vector>

namespace tessera::onnx_import {
namespace {

class Rewriter {
 public:
  explicit Rewriter(const onnx::GraphProto* g) {
    for (const auto& n : g->node()) {
      names_.insert(n.name());
      for (const auto& s : n.output()) names_.insert(s);
      for (const auto& s : n.input()) names_.insert(s);
    }
    for (const auto& t : g->initializer()) names_.insert(t.name());
    for (const auto& v : g->input()) names_.insert(v.name());
  }

  std::string Unique(const std::string& base) {
    std::string s = base;
    for (int k = 2; names_.count(s); ++k) s = base + "#" + std::to_string(k);
    names_.insert(s);
    return s;
  }

  void Release(const std::string& name) { names_.erase(name); }

  // A node appended to `out`, named uniquely after `base`.
  onnx::NodeProto* Add(std::vector<onnx::NodeProto>* out, const std::string& base, const std::string& op,
                       std::vector<std::string> inputs, const std::string& output) {
    out->emplace_back();
    onnx::NodeProto* n = &out->back();
    n->set_name(Unique(base));
    n->set_op_type(op);
    for (auto& i : inputs) n->add_input(i);
    n->add_output(output);
    return n;
  }

  static void SetAxis(onnx::NodeProto* n, int64_t axis) {
    auto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(axis);
  }

 private:
  std::unordered_set<std::string> names_;
};

std::string In(const onnx::NodeProto& n, int i) { return i < n.input_size() ? n.input(i) : std::string(); }

}  // namespace

Status ExpandQLinearOps(onnx::ModelProto* model, const std::string& origin, int* count) {
  onnx::GraphProto* g = model->mutable_graph();
  int rewritten = 0;
  for (const auto& n : g->node())
    if (n.op_type() == "QLinearConv" || n.op_type() == "QLinearMatMul") ++rewritten;
  if (count != nullptr) *count = rewritten;
  if (rewritten == 0) return Status::OK();

  Rewriter r(g);
  std::vector<onnx::NodeProto> nodes;
  nodes.reserve(g->node_size() + 5 * rewritten);
  for (const auto& n : g->node()) {
    const bool conv = n.op_type() == "QLinearConv";
    if (!conv && n.op_type() != "QLinearMatMul") {
      nodes.push_back(n);
      continue;
    }
    const std::string where = origin + ": node '" + n.name() + "' (" + n.op_type() + "): ";
    if (n.input_size() < 8 || n.output_size() != 1)
      return Status::InvalidArgument(where + "needs 8 inputs (" +
                                     std::string(conv ? "x, x_scale, x_zero_point, w" : "a, a_scale, a_zero_point, b") +
                                     ", its scale and zero point, y_scale, y_zero_point) and one output, has " +
                                     std::to_string(n.input_size()) + " and " + std::to_string(n.output_size()));
    for (int i : {0, 1, 3, 4, 6})
      if (n.input(i).empty()) return Status::InvalidArgument(where + "input " + std::to_string(i) + " is empty");
    const std::string base = n.name();
    const std::string y = n.output(0);
    r.Release(base);  // the Conv/MatMul keeps the node's name
    // Operand 0 and 1 dequantized.
    const std::string a = r.Unique(y + "/a_dq"), b = r.Unique(y + "/b_dq");
    std::vector<std::string> a_in = {n.input(0), n.input(1)}, b_in = {n.input(3), n.input(4)};
    if (!n.input(2).empty()) a_in.push_back(n.input(2));
    if (!n.input(5).empty()) b_in.push_back(n.input(5));
    r.Add(&nodes, base + "/a_dq", "DequantizeLinear", a_in, a);
    onnx::NodeProto* bdq = r.Add(&nodes, base + "/b_dq", "DequantizeLinear", b_in, b);
    // Per-channel weights: conv's output channels (axis 0); a MatMul's
    // columns (the last axis of B, which must then be 2-D or more).
    if (conv) {
      Rewriter::SetAxis(bdq, 0);
    } else {
      Rewriter::SetAxis(bdq, -1);
    }
    const std::string acc = r.Unique(y + "/float");
    std::vector<std::string> op_in = {a, b};
    if (conv && !In(n, 8).empty()) {  // int32 bias, scale x_scale · w_scale
      const std::string bs = r.Unique(y + "/bias_scale"), bias = r.Unique(y + "/bias_dq");
      r.Add(&nodes, base + "/bias_scale", "Mul", {n.input(1), n.input(4)}, bs);
      onnx::NodeProto* d = r.Add(&nodes, base + "/bias_dq", "DequantizeLinear", {n.input(8), bs}, bias);
      Rewriter::SetAxis(d, 0);
      op_in.push_back(bias);
    }
    onnx::NodeProto* op = r.Add(&nodes, base, conv ? "Conv" : "MatMul", op_in, acc);
    if (conv)
      for (const auto& attr : n.attribute()) *op->add_attribute() = attr;
    std::vector<std::string> q_in = {acc, n.input(6)};
    if (!n.input(7).empty()) q_in.push_back(n.input(7));
    r.Add(&nodes, base + "/y_q", "QuantizeLinear", q_in, y);
  }
  g->clear_node();
  for (auto& n : nodes) *g->add_node() = std::move(n);
  return Status::OK();
}

}  // namespace tessera::onnx_import
