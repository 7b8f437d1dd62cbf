#include "partition/import/onnx_quantize.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "partition/graph/quantization.h"
#include "partition/import/onnx_constant_eval.h"
#include "partition/import/onnx_tensor.h"

namespace tessera {
namespace {

using onnx::TensorProto;

// Ops whose inputs are quantized (and which int8 runtimes have kernels for),
// with the inputs that are activations.
bool ReadsQuantized(const onnx::NodeProto& n, int input) {
  const std::string& op = n.op_type();
  if (op == "Conv" || op == "Gemm" || op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool")
    return input == 0;
  if (op == "MatMul") return input <= 1;
  return op == "Add" || op == "Concat";
}

Result<onnx::ModelProto> ReadModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  onnx::ModelProto m;
  if (!m.ParseFromIstream(&in)) return Status::DataLoss(path + ": not a valid ONNX model (protobuf parsing failed)");
  int64_t opset = 0;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  if (opset < 13)
    return Status::NotSupported(path + ": opset " + std::to_string(opset) +
                                "; quantization needs opset 13 or later (per-channel DequantizeLinear): re-export "
                                "the model with opset_version=13");
  for (const auto& t : m.graph().initializer())
    if (t.data_location() == TensorProto::EXTERNAL)
      return Status::NotSupported(path + ": initializer '" + t.name() +
                                  "' keeps its data in an external file; save the model with its weights inside");
  return m;
}

// Tensors that are constants or shape arithmetic (never quantized).
std::unordered_set<std::string> StaticTensors(const onnx::GraphProto& g) {
  std::unordered_set<std::string> s;
  for (const auto& t : g.initializer()) s.insert(t.name());
  for (const auto& n : g.node()) {
    bool all = n.op_type() == "Shape" || n.op_type() == "Size";
    if (!all) {
      all = true;
      for (const auto& in : n.input())
        if (!in.empty() && !s.count(in)) all = false;
    }
    if (all)
      for (const auto& out : n.output()) s.insert(out);
  }
  return s;
}

std::vector<std::string> Candidates(const onnx::GraphProto& g) {
  const auto fixed = StaticTensors(g);
  std::unordered_set<std::string> read_quantized, outputs;
  for (const auto& n : g.node())
    for (int i = 0; i < n.input_size(); ++i)
      if (!n.input(i).empty() && ReadsQuantized(n, i)) read_quantized.insert(n.input(i));
  for (const auto& o : g.output()) outputs.insert(o.name());
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  auto consider = [&](const std::string& t) {
    if (t.empty() || fixed.count(t) || seen.count(t)) return;
    if (read_quantized.count(t) || outputs.count(t)) {
      out.push_back(t);
      seen.insert(t);
    }
  };
  for (const auto& in : g.input()) consider(in.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) consider(o);
  return out;
}

QuantGrid ActivationGrid(ActivationRange r) {
  const float lo = std::min(r.min, 0.f), hi = std::max(r.max, 0.f);
  QuantGrid g;
  g.qmin = -128, g.qmax = 127;
  if (!(hi - lo > 1e-30f)) {  // an all-zero tensor: any grid holds it exactly
    g.scale = 1.f;
    g.zero_point = 0;
    return g;
  }
  g.scale = (hi - lo) / 255.f;
  const float zp = std::nearbyint(-128.f - lo / g.scale);
  g.zero_point = static_cast<int32_t>(std::clamp(zp, -128.f, 127.f));
  return g;
}

TensorProto ScalarTensor(const std::string& name, float v) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(TensorProto::FLOAT);
  t.add_float_data(v);
  return t;
}

TensorProto Int8Tensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int8_t>& v) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(TensorProto::INT8);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size()));
  return t;
}

TensorProto FloatTensor(const std::string& name, const std::vector<float>& v) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(TensorProto::FLOAT);
  t.add_dims(static_cast<int64_t>(v.size()));
  t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  return t;
}

// BatchNormalization folded into the Conv or Gemm before it (METHODS §1),
// in the ONNX model itself, so that the weights quantized are the weights
// that run (a BN applied after int8 weights would take them off their grid).
// Folds only a BN whose input has no other reader, with every parameter an
// initializer, after a Conv / Gemm (alpha = beta = 1, transA = 0) whose
// weights and bias are float initializers. Returns how many were folded.
Result<int> FoldBatchNorms(onnx::ModelProto* m, const std::string& origin) {
  auto* g = m->mutable_graph();
  std::unordered_map<std::string, int> init, producer, readers;
  for (int i = 0; i < g->initializer_size(); ++i) init[g->initializer(i).name()] = i;
  for (int i = 0; i < g->node_size(); ++i) {
    for (const auto& o : g->node(i).output()) producer[o] = i;
    for (const auto& in : g->node(i).input()) readers[in] += 1;
  }
  for (const auto& o : g->output()) readers[o.name()] += 1;
  auto floats = [&](const std::string& name) -> Result<std::vector<float>> {
    const TensorProto& t = g->initializer(init.at(name));
    if (t.data_type() != TensorProto::FLOAT) return Status::NotSupported("not float");
    return onnx_import::ReadFloats(t);
  };
  std::unordered_set<int> dead;
  std::vector<TensorProto> added;
  std::unordered_set<std::string> names;
  for (const auto& t : g->initializer()) names.insert(t.name());
  auto unique = [&](const std::string& base) {
    std::string s = base;
    for (int k = 2; names.count(s); ++k) s = base + "#" + std::to_string(k);
    names.insert(s);
    return s;
  };
  int folded = 0;
  for (int i = 0; i < g->node_size(); ++i) {
    const onnx::NodeProto& bn = g->node(i);
    if (bn.op_type() != "BatchNormalization" || bn.input_size() < 5) continue;
    bool params = true;
    for (int k = 1; k < 5; ++k) params = params && init.count(bn.input(k));
    auto p = producer.find(bn.input(0));
    if (!params || p == producer.end() || readers[bn.input(0)] != 1) continue;
    if (onnx_import::AttrInt(bn, "training_mode", 0) != 0) continue;
    onnx::NodeProto* prod = g->mutable_node(p->second);
    const std::string& op = prod->op_type();
    if ((op != "Conv" && op != "Gemm") || prod->input_size() < 2 || !init.count(prod->input(1))) continue;
    if (op == "Gemm" && (onnx_import::AttrFloat(*prod, "alpha", 1.f) != 1.f ||
                         onnx_import::AttrFloat(*prod, "beta", 1.f) != 1.f || onnx_import::AttrInt(*prod, "transA", 0)))
      continue;
    const bool has_bias = prod->input_size() > 2 && !prod->input(2).empty();
    if (has_bias && !init.count(prod->input(2))) continue;
    auto w = floats(prod->input(1));
    auto sc = floats(bn.input(1)), sh = floats(bn.input(2)), mean = floats(bn.input(3)), var = floats(bn.input(4));
    if (!w.ok() || !sc.ok() || !sh.ok() || !mean.ok() || !var.ok()) continue;
    const TensorProto& wt = g->initializer(init.at(prod->input(1)));
    const size_t out_channels = sc->size();
    // Output channel of weight element k.
    int64_t inner = 1, channels_axis = 0;
    if (op == "Gemm" && onnx_import::AttrInt(*prod, "transB", 0) == 0) channels_axis = 1;
    for (int d = static_cast<int>(channels_axis) + 1; d < wt.dims_size(); ++d) inner *= wt.dims(d);
    if (wt.dims_size() <= channels_axis ||
        wt.dims(static_cast<int>(channels_axis)) != static_cast<int64_t>(out_channels) || sh->size() != out_channels ||
        mean->size() != out_channels || var->size() != out_channels)
      continue;
    std::vector<float> b(out_channels, 0.f);
    if (has_bias) {
      auto bv = floats(prod->input(2));
      if (!bv.ok() || bv->size() != out_channels) continue;
      b = *bv;
    }
    const float eps = onnx_import::AttrFloat(bn, "epsilon", 1e-5f);
    std::vector<float> s(out_channels);
    for (size_t c = 0; c < out_channels; ++c) {
      s[c] = (*sc)[c] / std::sqrt((*var)[c] + eps);
      b[c] = ((b[c] - (*mean)[c]) * s[c]) + (*sh)[c];
    }
    std::vector<float> wf = *w;
    for (size_t k = 0; k < wf.size(); ++k) wf[k] *= s[(k / inner) % out_channels];
    TensorProto nw;
    nw.set_name(unique(prod->input(1) + "/bn_folded"));
    nw.set_data_type(TensorProto::FLOAT);
    for (int64_t d : wt.dims()) nw.add_dims(d);
    nw.set_raw_data(std::string(reinterpret_cast<const char*>(wf.data()), wf.size() * sizeof(float)));
    TensorProto nb = FloatTensor(unique(prod->name() + "/bias_bn_folded"), b);
    prod->set_input(1, nw.name());
    if (has_bias) {
      prod->set_input(2, nb.name());
    } else {
      prod->add_input(nb.name());
    }
    added.push_back(std::move(nw));
    added.push_back(std::move(nb));
    prod->set_output(0, bn.output(0));
    dead.insert(i);
    ++folded;
  }
  if (folded == 0) return 0;
  std::vector<onnx::NodeProto> keep;
  for (int i = 0; i < g->node_size(); ++i)
    if (!dead.count(i)) keep.push_back(g->node(i));
  g->clear_node();
  for (auto& n : keep) *g->add_node() = std::move(n);
  for (auto& t : added) *g->add_initializer() = std::move(t);
  // Initializers nothing reads any more (the unfolded weights, BN parameters).
  std::unordered_set<std::string> read;
  for (const auto& n : g->node()) read.insert(n.input().begin(), n.input().end());
  std::unordered_set<std::string> removed;
  auto* inits = g->mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i)
    if (!read.count(inits->Get(i).name())) {
      removed.insert(inits->Get(i).name());
      inits->DeleteSubrange(i, 1);
    }
  // Graph inputs that named removed initializers (IR < 4 style) go too.
  auto* inputs = g->mutable_input();
  for (int i = inputs->size() - 1; i >= 0; --i)
    if (removed.count(inputs->Get(i).name())) inputs->DeleteSubrange(i, 1);
  (void)origin;
  return folded;
}

class Quantizer {
 public:
  Quantizer(onnx::ModelProto* m, std::string origin, QuantizeReport* report, int weight_bits)
      : m_(m), origin_(std::move(origin)), report_(report), qmax_((1 << (weight_bits - 1)) - 1) {
    auto* g = m_->mutable_graph();
    for (int i = 0; i < g->initializer_size(); ++i) init_[g->initializer(i).name()] = i;
    for (const auto& n : g->node()) {
      names_.insert(n.name());
      names_.insert(n.output().begin(), n.output().end());
      names_.insert(n.input().begin(), n.input().end());
    }
    for (const auto& v : g->input()) names_.insert(v.name());
    for (const auto& t : g->initializer()) names_.insert(t.name());
  }

  std::string Unique(const std::string& base) {
    std::string s = base;
    for (int k = 2; names_.count(s); ++k) s = base + "#" + std::to_string(k);
    names_.insert(s);
    return s;
  }

  Status Run(const std::map<std::string, ActivationRange>& ranges);

 private:
  onnx::NodeProto MakeNode(const std::string& op, const std::vector<std::string>& in, const std::string& out,
                           int64_t axis = std::numeric_limits<int64_t>::min()) {
    onnx::NodeProto n;
    n.set_name(Unique(out + "/" + op));
    n.set_op_type(op);
    for (const auto& s : in) n.add_input(s);
    n.add_output(out);
    if (axis != std::numeric_limits<int64_t>::min()) {
      auto* a = n.add_attribute();
      a->set_name("axis");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(axis);
    }
    return n;
  }

  // Scale and zero point initializers of an activation grid; returns their names.
  std::pair<std::string, std::string> GridInitializers(const std::string& tensor, const QuantGrid& grid) {
    const std::string s = Unique(tensor + "/scale"), z = Unique(tensor + "/zero_point");
    new_inits_.push_back(ScalarTensor(s, grid.scale));
    TensorProto zt;
    zt.set_name(z);
    zt.set_data_type(TensorProto::INT8);
    zt.add_int32_data(grid.zero_point);
    new_inits_.push_back(zt);
    return {s, z};
  }

  // The int8 weight `name` per channel along `axis`; the name of its
  // DequantizeLinear output, or "" (why in unquantized_weights) when it
  // cannot be. `scales` gets the per-channel scales.
  Result<std::string> QuantizeWeight(const onnx::NodeProto& n, const std::string& name, int64_t axis,
                                     std::vector<float>* scales);
  // Replaces the weight (and bias) operands of a Conv, Gemm or MatMul `n`
  // by their int8 (int32) forms; other nodes are left alone.
  Status QuantizeOperands(onnx::NodeProto* n, const std::string& x,
                          const std::unordered_map<std::string, QuantGrid>& grids);
  // The int32 bias `name` with scales in_scale × w_scales; "" when it is not a 1-D float initializer.
  Result<std::string> QuantizeBias(const std::string& name, float in_scale, const std::vector<float>& w_scales);

  onnx::ModelProto* m_;
  std::string origin_;
  QuantizeReport* report_;
  const int32_t qmax_;  // weights in [-qmax_, qmax_]
  std::unordered_map<std::string, int> init_;
  std::unordered_set<std::string> names_;
  std::vector<TensorProto> new_inits_;
  std::vector<onnx::NodeProto> front_;  // DequantizeLinear of weights and of quantized inputs
  std::map<std::pair<std::string, int64_t>, std::pair<std::string, std::vector<float>>> weight_done_;
  std::unordered_set<std::string> replaced_inits_;
};

Result<std::string> Quantizer::QuantizeWeight(const onnx::NodeProto& n, const std::string& name, int64_t axis,
                                              std::vector<float>* scales) {
  if (auto it = weight_done_.find({name, axis}); it != weight_done_.end()) {
    *scales = it->second.second;
    return it->second.first;
  }
  auto idx = init_.find(name);
  const std::string who = "'" + name + "' of '" + n.name() + "' (" + n.op_type() + ")";
  if (idx == init_.end()) {
    report_->unquantized_weights.push_back(who + ": not an initializer (computed in the graph)");
    return std::string();
  }
  const TensorProto& t = m_->graph().initializer(idx->second);
  if (t.data_type() != TensorProto::FLOAT) {
    report_->unquantized_weights.push_back(who + ": element type " + onnx_import::ElemTypeName(t.data_type()));
    return std::string();
  }
  if (axis >= t.dims_size()) {
    report_->unquantized_weights.push_back(who + ": rank " + std::to_string(t.dims_size()));
    return std::string();
  }
  auto values = onnx_import::ReadFloats(t);
  if (!values.ok()) return values.status().WithContext(origin_ + ": ");
  const std::vector<float>& w = *values;
  const int64_t channels = t.dims(static_cast<int>(axis));
  int64_t inner = 1;
  for (int d = static_cast<int>(axis) + 1; d < t.dims_size(); ++d) inner *= t.dims(d);
  scales->assign(channels, 0.f);
  for (size_t k = 0; k < w.size(); ++k) {
    if (!std::isfinite(w[k]))
      return Status::InvalidArgument(origin_ + ": weight " + who + " holds a value that is not finite");
    float& s = (*scales)[(k / inner) % channels];
    s = std::max(s, std::fabs(w[k]));
  }
  for (float& s : *scales) s = s > 0 ? s / static_cast<float>(qmax_) : 1.f;
  std::vector<int8_t> q(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    QuantGrid g{(*scales)[(k / inner) % channels], 0, -qmax_, qmax_};
    q[k] = static_cast<int8_t>(QuantizeToCode(w[k], g));
  }
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  const std::string qn = Unique(name + "/int8"), sn = Unique(name + "/scale"), zn = Unique(name + "/zero_point"),
                    out = Unique(name + "/dequantized");
  new_inits_.push_back(Int8Tensor(qn, dims, q));
  new_inits_.push_back(FloatTensor(sn, *scales));
  new_inits_.push_back(Int8Tensor(zn, {channels}, std::vector<int8_t>(channels, 0)));
  front_.push_back(MakeNode("DequantizeLinear", {qn, sn, zn}, out, axis));
  report_->weights += 1;
  report_->float_weight_bytes += static_cast<int64_t>(w.size() * sizeof(float));
  report_->quantized_weight_bytes += static_cast<int64_t>(w.size() + channels * (sizeof(float) + 1));
  replaced_inits_.insert(name);
  weight_done_[{name, axis}] = {out, *scales};
  return out;
}

Result<std::string> Quantizer::QuantizeBias(const std::string& name, float in_scale,
                                            const std::vector<float>& w_scales) {
  auto idx = init_.find(name);
  if (idx == init_.end()) return std::string();
  const TensorProto& t = m_->graph().initializer(idx->second);
  if (t.data_type() != TensorProto::FLOAT || t.dims_size() != 1 || t.dims(0) != static_cast<int64_t>(w_scales.size()))
    return std::string();
  auto values = onnx_import::ReadFloats(t);
  if (!values.ok()) return values.status().WithContext(origin_ + ": ");
  std::vector<float> scale(w_scales.size());
  std::vector<int32_t> q(w_scales.size());
  for (size_t c = 0; c < q.size(); ++c) {
    scale[c] = in_scale * w_scales[c];  // float32, as int8 kernels compute it
    const double v = std::nearbyint(static_cast<double>((*values)[c]) / scale[c]);
    q[c] = static_cast<int32_t>(std::clamp(v, -2147483647.0, 2147483647.0));
  }
  const std::string qn = Unique(name + "/int32"), sn = Unique(name + "/scale"), out = Unique(name + "/dequantized");
  TensorProto qt;
  qt.set_name(qn);
  qt.set_data_type(TensorProto::INT32);
  qt.add_dims(static_cast<int64_t>(q.size()));
  qt.set_raw_data(std::string(reinterpret_cast<const char*>(q.data()), q.size() * sizeof(int32_t)));
  new_inits_.push_back(qt);
  new_inits_.push_back(FloatTensor(sn, scale));
  front_.push_back(MakeNode("DequantizeLinear", {qn, sn}, out, 0));
  report_->biases += 1;
  report_->float_weight_bytes += static_cast<int64_t>(q.size() * sizeof(float));
  report_->quantized_weight_bytes += static_cast<int64_t>(q.size() * 2 * sizeof(float));
  replaced_inits_.insert(name);
  return out;
}

Status Quantizer::QuantizeOperands(onnx::NodeProto* n, const std::string& x,
                                   const std::unordered_map<std::string, QuantGrid>& grids) {
  const std::string& op = n->op_type();
  if ((op != "Conv" && op != "Gemm" && op != "MatMul") || n->input_size() < 2 || !init_.count(n->input(1)))
    return Status::OK();
  int64_t axis = 0;
  if (op == "Gemm") {
    const float alpha = onnx_import::AttrFloat(*n, "alpha", 1.f), beta = onnx_import::AttrFloat(*n, "beta", 1.f);
    if (alpha != 1.f || beta != 1.f || onnx_import::AttrInt(*n, "transA", 0) != 0) {
      report_->unquantized_weights.push_back("'" + n->input(1) + "' of '" + n->name() +
                                             "' (Gemm): alpha/beta other than 1 or transA");
      return Status::OK();
    }
    axis = onnx_import::AttrInt(*n, "transB", 0) != 0 ? 0 : 1;
  } else if (op == "MatMul") {
    axis = 1;
    if (m_->graph().initializer(init_.at(n->input(1))).dims_size() != 2) {
      report_->unquantized_weights.push_back("'" + n->input(1) + "' of '" + n->name() + "' (MatMul): not a 2-D matrix");
      return Status::OK();
    }
  }
  std::vector<float> w_scales;
  TS_ASSIGN_OR_RETURN(std::string wq, QuantizeWeight(*n, n->input(1), axis, &w_scales));
  if (wq.empty()) return Status::OK();
  n->set_input(1, wq);
  if (op != "MatMul" && n->input_size() > 2 && !n->input(2).empty() && grids.count(x)) {
    TS_ASSIGN_OR_RETURN(std::string bq, QuantizeBias(n->input(2), grids.at(x).scale, w_scales));
    if (!bq.empty()) n->set_input(2, bq);
  }
  return Status::OK();
}

// Whether `name` is a one-value float constant 0 (an initializer or a
// Constant node's value): a Pad's constant_value that pads with zeros.
bool IsZeroScalar(const onnx::GraphProto& g, const std::string& name) {
  auto zero = [](const onnx::TensorProto& t) {
    auto v = onnx_import::ReadFloats(t);
    return v.ok() && v->size() == 1 && (*v)[0] == 0.0f;
  };
  for (const auto& t : g.initializer())
    if (t.name() == name) return zero(t);
  for (const auto& n : g.node())
    if (n.op_type() == "Constant" && n.output_size() == 1 && n.output(0) == name)
      for (const auto& a : n.attribute())
        if (a.name() == "value" && a.has_t()) return zero(a.t());
  return false;
}

Status Quantizer::Run(const std::map<std::string, ActivationRange>& ranges) {
  auto* g = m_->mutable_graph();
  const std::vector<std::string> candidates = Candidates(*g);
  std::unordered_map<std::string, QuantGrid> grids;
  for (const auto& name : candidates) {
    auto it = ranges.find(name);
    if (it == ranges.end()) continue;
    if (!std::isfinite(it->second.min) || !std::isfinite(it->second.max) || it->second.min > it->second.max)
      return Status::InvalidArgument(origin_ + ": tensor '" + name + "' has the calibrated range [" +
                                     std::to_string(it->second.min) + ", " + std::to_string(it->second.max) +
                                     "], which is not a finite interval (the float model produced inf/NaN there)");
    grids[name] = ActivationGrid(it->second);
  }
  // Ops that only move values (or pick among them) keep them on their
  // input's grid: their output shares it rather than getting a grid of its
  // own, which would round every value a second time (and onnxruntime runs
  // MaxPool in int8 only with equal grids). Candidates are in graph order,
  // so a chain of them shares one grid.
  std::unordered_map<std::string, const onnx::NodeProto*> producer;
  for (const auto& n : g->node())
    for (const auto& o : n.output()) producer[o] = &n;
  for (const auto& name : candidates) {
    auto p = producer.find(name);
    if (p == producer.end() || p->second->input_size() == 0) continue;
    const onnx::NodeProto& n = *p->second;
    const std::string& op = n.op_type();
    const bool zero_pad = op == "Pad" && onnx_import::AttrString(n, "mode", "constant") == "constant" &&
                          (n.input_size() < 3 || n.input(2).empty() || IsZeroScalar(*g, n.input(2)));
    if (!grids.count(name)) continue;
    const bool moves = op == "MaxPool" || op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" ||
                       op == "Transpose" || op == "Identity" || zero_pad;
    auto in = grids.find(n.input(0));
    if (!moves || in == grids.end() || (op == "MaxPool" && n.output_size() > 1)) continue;
    grids[name] = in->second;
    report_->grids_shared += 1;
  }
  std::unordered_set<std::string> graph_inputs;
  for (const auto& in : g->input()) graph_inputs.insert(in.name());

  // Activations: T -> QuantizeLinear -> DequantizeLinear -> readers. A graph
  // input keeps its name and its readers read "<T>/dequantized"; any other
  // tensor's producer writes "<T>/float" and the DequantizeLinear writes T.
  std::unordered_map<std::string, std::string> reader_name;  // graph input -> what readers read
  std::vector<onnx::NodeProto> input_qdq;
  auto qdq = [&](const std::string& from, const std::string& to, const std::string& tensor,
                 std::vector<onnx::NodeProto>* out) {
    auto [s, z] = GridInitializers(tensor, grids.at(tensor));
    const std::string q = Unique(tensor + "/int8");
    out->push_back(MakeNode("QuantizeLinear", {from, s, z}, q));
    out->push_back(MakeNode("DequantizeLinear", {q, s, z}, to));
    report_->activations += 1;
  };
  for (const auto& in : g->input())
    if (grids.count(in.name())) {
      const std::string to = Unique(in.name() + "/dequantized");
      qdq(in.name(), to, in.name(), &input_qdq);
      reader_name[in.name()] = to;
    }

  std::vector<onnx::NodeProto> body;
  for (int i = 0; i < g->node_size(); ++i) {
    onnx::NodeProto n = g->node(i);
    for (int k = 0; k < n.input_size(); ++k)
      if (auto it = reader_name.find(n.input(k)); it != reader_name.end()) n.set_input(k, it->second);
    // Weights of Conv / Gemm / MatMul, biases when the input is quantized.
    TS_RETURN_IF_ERROR(QuantizeOperands(&n, g->node(i).input_size() > 0 ? g->node(i).input(0) : "", grids));
    body.push_back(std::move(n));
    onnx::NodeProto& placed = body.back();
    for (int k = 0; k < placed.output_size(); ++k) {
      const std::string t = placed.output(k);
      if (!grids.count(t)) continue;
      const std::string f = Unique(t + "/float");
      placed.set_output(k, f);
      std::vector<onnx::NodeProto> pair;
      qdq(f, t, t, &pair);
      for (auto& p : pair) body.push_back(std::move(p));
    }
  }
  g->clear_node();
  for (auto& n : front_) *g->add_node() = std::move(n);
  for (auto& n : input_qdq) *g->add_node() = std::move(n);
  for (auto& n : body) *g->add_node() = std::move(n);
  // Float weights nothing reads any more go; the int8 ones come in.
  std::unordered_set<std::string> read;
  for (const auto& n : g->node()) read.insert(n.input().begin(), n.input().end());
  auto* inits = g->mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i)
    if (replaced_inits_.count(inits->Get(i).name()) && !read.count(inits->Get(i).name())) inits->DeleteSubrange(i, 1);
  for (auto& t : new_inits_) *g->add_initializer() = std::move(t);
  // value_info of renamed tensors would now describe "<T>" correctly still
  // (same float type and shape): nothing to fix.
  return Status::OK();
}

}  // namespace

Result<std::vector<std::string>> QuantizableActivations(const std::string& path) {
  TS_ASSIGN_OR_RETURN(onnx::ModelProto m, ReadModel(path));
  TS_RETURN_IF_ERROR(FoldBatchNorms(&m, path).status());
  return Candidates(m.graph());
}

Result<std::map<std::string, std::string>> ZeroPadSources(const std::string& path) {
  TS_ASSIGN_OR_RETURN(onnx::ModelProto m, ReadModel(path));
  const onnx::GraphProto& g = m.graph();
  std::map<std::string, std::string> source;
  for (const auto& n : g.node()) {  // graph order: a Pad's input is resolved before the Pad
    if (n.op_type() != "Pad" || n.input_size() == 0 || n.output_size() != 1 ||
        onnx_import::AttrString(n, "mode", "constant") != "constant")
      continue;
    if (n.input_size() >= 3 && !n.input(2).empty() && !IsZeroScalar(g, n.input(2))) continue;
    auto up = source.find(n.input(0));
    source[n.output(0)] = up != source.end() ? up->second : n.input(0);
  }
  return source;
}

Status QuantizeOnnxModel(const std::string& in_path, const std::map<std::string, ActivationRange>& ranges,
                         const std::string& out_path, QuantizeReport* report, int weight_bits) {
  if (weight_bits < 2 || weight_bits > 8)
    return Status::InvalidArgument("weight bits must be 2-8, not " + std::to_string(weight_bits));
  TS_ASSIGN_OR_RETURN(onnx::ModelProto m, ReadModel(in_path));
  QuantizeReport local;
  TS_ASSIGN_OR_RETURN(int bn_folded, FoldBatchNorms(&m, in_path));
  (report != nullptr ? report : &local)->batch_norms_folded = bn_folded;
  Quantizer q(&m, in_path, report != nullptr ? report : &local, weight_bits);
  TS_RETURN_IF_ERROR(q.Run(ranges));
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    return Status::Internal(in_path + ": the quantized model fails the ONNX checker: " + e.what());
  }
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !m.SerializeToOstream(&out))
      return Status::Unavailable(out_path + ": cannot write the quantized model");
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0)
    return Status::Unavailable(out_path + ": cannot move the quantized model into place");
  return Status::OK();
}

}  // namespace tessera
