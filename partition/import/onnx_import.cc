// ONNX importer (model_import.h): ONNX model -> canonical Graph (graph.h).
//
// Pipeline:
//  1. parse the protobuf, run the ONNX checker;
//  2. fix the graph inputs' dynamic dims (ImportOptions::input_shapes, batch);
//  3. repeat { ONNX shape inference; fold every node whose inputs are all
//     constant (onnx_constant_eval.h) and every Shape of a static value }
//     until nothing folds — so Shape->Gather->Concat->Reshape chains end up
//     as a constant target and every value has a static shape;
//  4. translate the remaining nodes one by one into canonical nodes
//     (parameters given as inputs become attributes, Flatten/Squeeze/
//     Unsqueeze become Reshape, Gemm/MatMul get W[out,in], ...);
//  5. fold BN/bias/activation into their Conv/Gemm producer (METHODS §1,
//     onnx_producer_folds.h), drop dead nodes, renumber values.
// Every error names the origin (file) and, where one is involved, the node
// and its op type: "<file>: node '<name>' (<Op>): <what>".
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "partition/graph/quantization.h"
#include "partition/import/model_import.h"
#include "partition/import/onnx_constant_eval.h"
#include "partition/import/onnx_pattern_fusion.h"
#include "partition/import/onnx_producer_folds.h"
#include "partition/import/onnx_qlinear.h"
#include "partition/import/onnx_tensor.h"
#include "partition/import/onnx_weightless_reader.h"

namespace tessera {
namespace {

using onnx::TensorProto;
using onnx_import::AttrFloat;
using onnx_import::AttrFloats;
using onnx_import::AttrInt;
using onnx_import::AttrInts;
using onnx_import::AttrString;
using onnx_import::ConstTensor;
using onnx_import::ElemTypeName;
using onnx_import::FindAttribute;

// Ops the importer can express in canonical form after its rewrites. The
// canonical set of graph.h, plus simple ONNX element-wise and reduction ops
// the kernels implement under their ONNX names. Ops handled by rewrites
// (Identity, Dropout, Flatten, Squeeze, Unsqueeze, Upsample, Cast) are
// dispatched separately in TranslateNode.
const std::set<std::string>& PassThroughOps() {
  static const std::set<std::string> ops = {// unary element-wise
                                            "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "Tanh", "Abs", "Ceil",
                                            "Floor", "Exp", "Log", "Neg", "Reciprocal", "Sqrt", "Softplus", "Elu",
                                            "HardSwish", "Erf", "Gelu",
                                            // broadcasting binary / variadic
                                            "Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Max", "Min", "Sum", "Mean",
                                            // whole-plane pooling
                                            "GlobalAveragePool", "GlobalMaxPool"};
  return ops;
}

// Ops with their own translation in TranslateNode.
const std::set<std::string>& KnownOps() {
  static const std::set<std::string> ops = {"Identity",
                                            "Dropout",
                                            "Cast",
                                            "Conv",
                                            "MaxPool",
                                            "AveragePool",
                                            "Gemm",
                                            "MatMul",
                                            "BatchNormalization",
                                            "Reshape",
                                            "Flatten",
                                            "Squeeze",
                                            "Unsqueeze",
                                            "Softmax",
                                            "Clip",
                                            "Pad",
                                            "Resize",
                                            "Upsample",
                                            "Slice",
                                            "ReduceMean",
                                            "ReduceSum",
                                            "ReduceMax",
                                            "ReduceMin",
                                            "Concat",
                                            "Transpose",
                                            "Split",
                                            "ConvTranspose",
                                            "LayerNormalization",
                                            "QuantizeLinear",
                                            "DequantizeLinear"};
  return ops;
}

constexpr int64_t kMaxFoldPasses = 16;

// What shape inference (or the declaration) says about a value.
struct ValueInfo {
  int32_t elem_type = 0;
  std::vector<int64_t> dims;  // -1 where unknown
  bool has_shape = false;

  bool Static() const {
    if (!has_shape) return false;
    for (int64_t d : dims)
      if (d < 0) return false;
    return true;
  }
};

ValueInfo InfoFromType(const onnx::TypeProto& type) {
  ValueInfo info;
  if (!type.has_tensor_type()) return info;
  const auto& tt = type.tensor_type();
  info.elem_type = tt.elem_type();
  if (tt.has_shape()) {
    info.has_shape = true;
    for (const auto& d : tt.shape().dim()) info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  }
  return info;
}

bool IsFloatElem(int32_t t) {
  return t == TensorProto::FLOAT || t == TensorProto::DOUBLE || t == TensorProto::FLOAT16 || t == TensorProto::BFLOAT16;
}

Attributes CopyAttributes(const onnx::NodeProto& node, std::string* unsupported) {
  Attributes attrs;
  for (const auto& a : node.attribute()) {
    switch (a.type()) {
      case onnx::AttributeProto::INT:
        attrs.Set(a.name(), static_cast<int64_t>(a.i()));
        break;
      case onnx::AttributeProto::FLOAT:
        attrs.Set(a.name(), static_cast<double>(a.f()));
        break;
      case onnx::AttributeProto::STRING:
        attrs.Set(a.name(), a.s());
        break;
      case onnx::AttributeProto::INTS:
        attrs.Set(a.name(), std::vector<int64_t>(a.ints().begin(), a.ints().end()));
        break;
      case onnx::AttributeProto::FLOATS:
        attrs.Set(a.name(), std::vector<double>(a.floats().begin(), a.floats().end()));
        break;
      default:
        if (unsupported->empty()) *unsupported = a.name();
    }
  }
  return attrs;
}

class OnnxModelImporter {
 public:
  OnnxModelImporter(std::string origin, const ImportOptions& options) : origin_(std::move(origin)), options_(options) {}

  // Reads the model from `in` (a file stream is seeked past the weights it drops).
  Result<Graph> Import(google::protobuf::io::ZeroCopyInputStream* in);

  // Weight provenance, recorded by every import: for each Graph node, the
  // initializers its weights are computed from (folds included). What the
  // second pass of an ImportOptions::values_for_nodes import reads.
  using Sources = std::set<std::string>;
  const std::map<std::string, Sources>& node_sources() const { return node_sources_; }
  // Reads the payloads of these initializers only (and every small one);
  // the others become shape-only constants, as with shapes_only.
  void KeepPayloadsOf(const std::set<std::string>* initializers) { keep_payloads_ = initializers; }

 private:
  // --- ONNX-level stages ---
  Status Parse(google::protobuf::io::ZeroCopyInputStream* in);
  // shapes_only: every dropped payload matches its tensor's dims.
  Status CheckDroppedPayloads() const;
  Status Check();
  Status ReadOpset();
  Status CheckPositiveAttributes() const;
  Status CheckGemmOperandRanks() const;
  Status PinConvKernelShapes();
  Status FixInputShapes();
  Status RunShapeInference();
  Status FoldConstantNodes(bool* changed);
  // A DequantizeLinear of a large int8/uint8 weight initializer folded
  // straight into a float32 initializer (onnx_import::DequantizeWeight);
  // false when it is not one (then the general constant folding runs).
  // With `sole_reader` (the node is the weight's only reader) the codes'
  // bytes are freed after.
  bool DequantizeLargeWeight(const onnx::NodeProto& node, bool sole_reader);
  // --- translation ---
  Status BuildGraph();
  Status TranslateNode(const onnx::NodeProto& node, int index);
  Status CheckTranslatable(const onnx::NodeProto& node) const;
  Status TranslateIdentity(const onnx::NodeProto& node);
  Status TranslateCast(const onnx::NodeProto& node);
  Status TranslateConv(const onnx::NodeProto& node, const std::string& name);
  Status TranslateConvTranspose(const onnx::NodeProto& node, const std::string& name);
  Status TranslateLayerNorm(const onnx::NodeProto& node, const std::string& name);
  Status TranslatePool(const onnx::NodeProto& node, const std::string& name);
  Status TranslateGemm(const onnx::NodeProto& node, const std::string& name);
  Status TranslateMatMul(const onnx::NodeProto& node, const std::string& name);
  Status TranslateBatchNorm(const onnx::NodeProto& node, const std::string& name);
  Status TranslateReshapeLike(const onnx::NodeProto& node, const std::string& name);
  Status TranslateSoftmax(const onnx::NodeProto& node, const std::string& name);
  Status TranslateClip(const onnx::NodeProto& node, const std::string& name);
  Status TranslatePad(const onnx::NodeProto& node, const std::string& name);
  Status TranslateResize(const onnx::NodeProto& node, const std::string& name);
  Status TranslateSlice(const onnx::NodeProto& node, const std::string& name);
  Status TranslateReduce(const onnx::NodeProto& node, const std::string& name);
  Status TranslateSplit(const onnx::NodeProto& node, const std::string& name);
  Status TranslateConcatOrTranspose(const onnx::NodeProto& node, const std::string& name);
  Status TranslatePassThrough(const onnx::NodeProto& node, const std::string& name);
  // QDQ (quantization.h): QuantizeLinear of an activation becomes
  // QuantizeDequantize, whose output stands for the int8 codes; a
  // DequantizeLinear of it with the same grid is another name for it.
  Status TranslateQuantize(const onnx::NodeProto& node, const std::string& name);
  Status TranslateDequantize(const onnx::NodeProto& node);
  // Scale, zero point and range of a Q/DQ node (inputs 1 and 2).
  Result<QuantGrid> GridOf(const onnx::NodeProto& node, bool dequantize);
  // Opset < 7 forms rewritten to today's numpy broadcasting (in place).
  Status ApplyLegacyBroadcast(const onnx::NodeProto& node, const std::string& name, Attributes* a,
                              std::vector<int>* inputs);
  void MakeLegacyPreluSlopePerChannel(const std::string& name, std::vector<int>* inputs);
  Status Compact();

  // --- helpers ---
  Status NodeError(StatusCode code, const onnx::NodeProto& node, const std::string& what) const;
  std::string Resolve(const std::string& name) const;
  bool IsConst(const std::string& name) const;
  // A constant whose values the shapes-only reader left out (dims only).
  bool IsShapeOnly(const std::string& name) const { return dropped_.count(name) != 0; }
  // Large float initializers whose values InputValue moved into the graph
  // (name -> graph value): their protobuf storage is freed.
  std::unordered_map<std::string, int> released_;
  // A weight matrix as float32, read straight from its initializer (not
  // through Const()'s doubles: a classifier's weights would be held three
  // times while importing, issue 11). REQUIRES: IsConst(name), values present.
  Result<std::vector<float>> WeightFloats(const std::string& name);
  // Dims of a constant (with or without values). REQUIRES: IsConst(name).
  Shape ConstDims(const std::string& name) const;
  // Folds a node with a shape-only constant input into shape-only outputs
  // (dims from shape inference); false when an output's shape is unknown.
  bool FoldToShapeOnly(const onnx::NodeProto& node);
  // The initializers constant `name` is computed from (itself if it is one).
  Sources SourcesOf(const std::string& name) const;
  // A folded node's outputs come from its constant inputs' sources.
  void RecordFoldSources(const onnx::NodeProto& node);
  // The constant tensor `name` (initializer or folded); nullptr if not constant.
  Result<const ConstTensor*> Const(const std::string& name);
  // Value id of an existing value or constant (created on first use).
  Result<int> InputValue(const onnx::NodeProto& node, const std::string& name);
  // Static shape of a value from shape inference.
  Result<Shape> StaticShape(const onnx::NodeProto& node, const std::string& name) const;
  // Creates the value of a node output (float32, static shape required).
  Result<int> OutputValue(const onnx::NodeProto& node, const std::string& name);
  // A value the ONNX graph does not have (around rewrites); named uniquely.
  int AddIntermediate(const std::string& name, const Shape& shape) {
    std::string unique = name;
    for (int k = 2; value_names_.count(unique); ++k) unique = name + "#" + std::to_string(k);
    value_names_.insert(unique);
    return graph_.AddValue(unique, shape);
  }
  void AddNode(const std::string& name, const std::string& op, std::vector<int> inputs, std::vector<int> outputs,
               Attributes attrs);
  std::string UniqueNodeName(const std::string& base);
  // Extra outputs (Indices, mask, running stats) must be unused.
  Status RequireOnlyFirstOutputUsed(const onnx::NodeProto& node, const std::string& what) const;
  // Window (Conv/pool) geometry in 2-D terms: explicit pads (top, left,
  // bottom, right) with auto_pad resolved; 1-D windows are lifted to a
  // height-1 2-D window (`lifted`, in/out the 4-D shapes).
  struct WindowGeometry {
    bool lifted = false;
    Shape in, out;
    std::vector<int64_t> kernel, strides, dilations, pads;
  };
  Result<WindowGeometry> Geometry(const onnx::NodeProto& node, const Shape& x_shape, const Shape& y_shape,
                                  const std::vector<int64_t>& default_kernel);
  // Adds op(x, params...) -> y, wrapped in Reshapes when the window was lifted.
  Status AddWindowNode(const std::string& name, const std::string& op, int x, std::vector<int> params, int y,
                       const WindowGeometry& geo, Attributes attrs);

  const std::string origin_;
  const ImportOptions options_;
  onnx::ModelProto model_;
  int64_t opset_ = 0;
  std::unordered_map<std::string, ValueInfo> infos_;
  std::string inference_error_;                             // what strict shape inference said, if it failed
  std::unordered_map<std::string, int> initializer_index_;  // name -> index in graph.initializer
  std::unordered_map<std::string, ConstTensor> const_cache_;
  // shapes_only: initializers read without their values (name -> payload).
  std::unordered_map<std::string, onnx_import::DroppedPayload> dropped_;
  const std::set<std::string>* keep_payloads_ = nullptr;
  std::unordered_map<std::string, Sources> const_sources_;  // folded constant -> initializers
  Sources translating_sources_;                              // of the ONNX node being translated
  std::map<std::string, Sources> node_sources_;              // Graph node -> initializers
  std::unordered_set<std::string> runtime_inputs_;
  std::unordered_set<std::string> used_names_;          // read by some node or a graph output
  std::unordered_map<std::string, std::string> alias_;  // Identity/Dropout output -> its input
  std::unordered_map<std::string, QuantGrid> quant_grid_;  // QuantizeLinear output -> its grid
  std::unordered_map<std::string, int> value_ids_;
  std::unordered_set<std::string> node_names_;
  std::unordered_set<std::string> value_names_;  // every ONNX value name, and the intermediates added
  Graph graph_;
};

Status OnnxModelImporter::NodeError(StatusCode code, const onnx::NodeProto& node, const std::string& what) const {
  return Status(code, origin_ + ": node '" + node.name() + "' (" + node.op_type() + "): " + what);
}

Status OnnxModelImporter::Parse(google::protobuf::io::ZeroCopyInputStream* in) {
  const void* first = nullptr;
  int first_size = 0;
  bool empty = true;
  while (in->Next(&first, &first_size)) {
    if (first_size > 0) {
      empty = false;
      in->BackUp(first_size);
      break;
    }
  }
  if (empty) return Status::InvalidArgument(origin_ + ": empty file, not an ONNX model");
  if (options_.shapes_only || keep_payloads_ != nullptr) {
    TS_RETURN_IF_ERROR(
        onnx_import::ParseModelWithoutLargeWeights(in, origin_, &model_, &dropped_, keep_payloads_));
  } else if (!model_.ParseFromZeroCopyStream(in)) {
    return Status::DataLoss(origin_ +
                            ": not a valid ONNX model (protobuf parsing failed: truncated, corrupted "
                            "or not an .onnx file)");
  }
  if (!model_.has_graph() || model_.graph().output_size() == 0)
    return Status::InvalidArgument(origin_ + ": not a valid ONNX model (no graph or no graph outputs)");
  if (!dropped_.empty())
    spdlog::debug("{}: shapes only: left out the values of {} initializers", origin_, dropped_.size());
  return Status::OK();
}

Status OnnxModelImporter::CheckDroppedPayloads() const {
  for (const auto& t : model_.graph().initializer()) {
    auto it = dropped_.find(t.name());
    if (it == dropped_.end()) continue;
    TS_ASSIGN_OR_RETURN(int64_t n, onnx_import::TensorElementCount(t));
    if (n * it->second.element_size != it->second.bytes)
      return Status::DataLoss(origin_ + ": tensor '" + t.name() + "' (" + ElemTypeName(t.data_type()) + ") holds " +
                              std::to_string(it->second.bytes) + " bytes, its dims need " +
                              std::to_string(n * it->second.element_size) + " (truncated or corrupted file)");
  }
  return Status::OK();
}

Status OnnxModelImporter::Check() {
  try {
    onnx::checker::check_model(model_);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    return Status::InvalidArgument(origin_ + ": the ONNX checker rejects the model: " + msg);
  }
  return Status::OK();
}

// ONNX 1.12's shape inference divides by some attributes without checking
// them (a zero stride is SIGFPE inside the library), and the checker does not
// look at their values: reject such values here, naming the node.
Status OnnxModelImporter::CheckPositiveAttributes() const {
  static const std::set<std::string> kPositive = {"strides",   "dilations", "kernel_shape",
                                                  "blocksize", "group",     "num_outputs"};
  for (const auto& n : model_.graph().node())
    for (const auto& a : n.attribute()) {
      if (!kPositive.count(a.name())) continue;
      bool ok = true;
      if (a.type() == onnx::AttributeProto::INT) ok = a.i() >= 1;
      for (int64_t v : a.ints()) ok &= v >= 1;
      if (!ok) return NodeError(StatusCode::kInvalidArgument, n, "attribute '" + a.name() + "' must be >= 1");
    }
  return Status::OK();
}

// ONNX 1.12's Gemm shape inference for opsets before 11 reads dims 0 and 1
// of A and B without checking their rank: a rank-1 operand reads past the
// shape (a crash inside the library, found by tests/fuzz/fuzz_onnx:
// tests/fuzz/regressions/onnx/gemm_rank1_operand.onnx). Every Gemm operand
// whose rank is declared (a graph input or an initializer) must be 2 — as the
// operator requires — before the library sees the model.
Status OnnxModelImporter::CheckGemmOperandRanks() const {
  const auto& g = model_.graph();
  std::unordered_map<std::string, int> rank;
  for (const auto& in : g.input())
    if (in.type().has_tensor_type() && in.type().tensor_type().has_shape())
      rank[in.name()] = in.type().tensor_type().shape().dim_size();
  for (const auto& t : g.initializer()) rank[t.name()] = t.dims_size();
  for (const auto& n : g.node()) {
    // The same library reads shapes at an `axis` it does not range-check
    // (LayerNormalization with axis -1212417: regressions/onnx/
    // layernorm_axis_out_of_range.onnx). No valid model has |axis| > 64, and
    // one whose first input's rank r is declared needs -r <= axis <= r.
    if (const onnx::AttributeProto* axis = FindAttribute(n, "axis");
        axis != nullptr && axis->type() == onnx::AttributeProto::INT) {
      const auto it = n.input_size() > 0 ? rank.find(n.input(0)) : rank.end();
      const int64_t r = it != rank.end() ? it->second : 64;
      if (axis->i() < -r || axis->i() > r)
        return NodeError(StatusCode::kInvalidArgument, n,
                         "attribute 'axis' = " + std::to_string(axis->i()) + " is outside [-" + std::to_string(r) +
                             ", " + std::to_string(r) + "]" +
                             (it != rank.end() ? " for its rank-" + std::to_string(r) + " input" : ""));
    }
    if (n.op_type() != "Gemm") continue;
    for (int k = 0; k < 2 && k < n.input_size(); ++k) {
      const auto it = rank.find(n.input(k));
      if (it != rank.end() && it->second != 2)
        return NodeError(StatusCode::kInvalidArgument, n,
                         std::string(k == 0 ? "A" : "B") + " ('" + n.input(k) + "') has rank " +
                             std::to_string(it->second) + "; Gemm multiplies 2-D matrices");
    }
  }
  return Status::OK();
}

// ONNX 1.12's conv shape inference takes the window rank from the weights
// when kernel_shape is absent and then indexes strides/dilations with it: a
// weight rank that does not match the input reads out of bounds. Give every
// conv its kernel_shape from the (constant) weights so that the library
// compares ranks and throws instead.
Status OnnxModelImporter::PinConvKernelShapes() {
  auto* g = model_.mutable_graph();
  for (int i = 0; i < g->node_size(); ++i) {
    onnx::NodeProto* n = g->mutable_node(i);
    const std::string& op = n->op_type();
    const int w_index = op == "QLinearConv" ? 3 : 1;
    if ((op != "Conv" && op != "ConvTranspose" && op != "ConvInteger" && op != "QLinearConv") ||
        FindAttribute(*n, "kernel_shape") != nullptr)
      continue;
    if (n->input_size() <= w_index || !initializer_index_.count(n->input(w_index)))
      return NodeError(StatusCode::kNotSupported, *n, "weights W must be constant (an initializer)");
    const onnx::TensorProto& w = g->initializer(initializer_index_.at(n->input(w_index)));
    if (w.dims_size() < 3) return NodeError(StatusCode::kInvalidArgument, *n, "weights must have rank >= 3");
    auto* a = n->add_attribute();
    a->set_name("kernel_shape");
    a->set_type(onnx::AttributeProto::INTS);
    for (int d = 2; d < w.dims_size(); ++d) a->add_ints(w.dims(d));
  }
  return CheckPositiveAttributes();
}

Status OnnxModelImporter::ReadOpset() {
  for (const auto& o : model_.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
  if (opset_ <= 0) {
    for (const auto& n : model_.graph().node())
      if (!n.domain().empty() && n.domain() != "ai.onnx")
        return Status::NotSupported(origin_ + ": node '" + n.name() + "' (" + n.op_type() + "): operator domain '" +
                                    n.domain() + "' is not supported");
    return Status::InvalidArgument(origin_ + ": the model imports no version of the default ONNX opset");
  }
  // Nodes keep their names in errors; give the unnamed ones the name they get in the Graph.
  auto* g = model_.mutable_graph();
  for (int i = 0; i < g->node_size(); ++i) {
    auto* n = g->mutable_node(i);
    if (n->name().empty()) n->set_name(n->op_type() + "_" + std::to_string(i));
  }
  return Status::OK();
}

Status OnnxModelImporter::FixInputShapes() {
  auto* g = model_.mutable_graph();
  for (int i = 0; i < g->initializer_size(); ++i) initializer_index_[g->initializer(i).name()] = i;
  // Names in --input-shape must be inputs; check before anything else complains.
  std::string input_names;
  std::set<std::string> runtime_names;
  for (const auto& in : g->input())
    if (!initializer_index_.count(in.name())) {
      input_names += (input_names.empty() ? "" : ", ") + in.name();
      runtime_names.insert(in.name());
    }
  for (const auto& [key, shape] : options_.input_shapes)
    if (!key.empty() && !runtime_names.count(key))
      return Status::InvalidArgument(origin_ + ": --input-shape names '" + key +
                                     "', which is not an input of the model (inputs: " + input_names + ")");
  bool first = true;
  for (int i = 0; i < g->input_size(); ++i) {
    auto* in = g->mutable_input(i);
    // An input with an initializer is a constant with an overridable default.
    if (initializer_index_.count(in->name())) continue;
    const std::string& name = in->name();
    runtime_inputs_.insert(name);
    if (!in->type().has_tensor_type())
      return Status::NotSupported(origin_ + ": input '" + name +
                                  "' is not a tensor (sequences, maps and optionals "
                                  "are not supported)");
    auto* tt = in->mutable_type()->mutable_tensor_type();
    if (tt->elem_type() != TensorProto::FLOAT)
      return Status::NotSupported(origin_ + ": input '" + name + "' has element type " + ElemTypeName(tt->elem_type()) +
                                  "; tessera runs float32 models only");
    const Shape* given = nullptr;
    if (auto it = options_.input_shapes.find(name); it != options_.input_shapes.end()) {
      given = &it->second;
    } else if (first && options_.input_shapes.count("")) {
      given = &options_.input_shapes.at("");
    }
    first = false;
    if (given != nullptr) {
      if (tt->has_shape() && tt->shape().dim_size() != static_cast<int>(given->size()))
        return Status::InvalidArgument(origin_ + ": --input-shape for '" + name + "' has rank " +
                                       std::to_string(given->size()) + ", the model declares rank " +
                                       std::to_string(tt->shape().dim_size()));
      for (int64_t d : *given)
        if (d <= 0) return Status::InvalidArgument(origin_ + ": --input-shape for '" + name + "' has a dim <= 0");
      tt->mutable_shape()->clear_dim();
      for (int64_t d : *given) tt->mutable_shape()->add_dim()->set_dim_value(d);
      continue;
    }
    if (!tt->has_shape())
      return Status::InvalidArgument(origin_ + ": input '" + name +
                                     "' declares no shape; give it with "
                                     "--input-shape " +
                                     name + "=1,3,224,224 (for example)");
    for (int d = 0; d < tt->shape().dim_size(); ++d) {
      auto* dim = tt->mutable_shape()->mutable_dim(d);
      if (dim->has_dim_value() && dim->dim_value() >= 0) continue;
      if (d == 0) {
        dim->set_dim_value(options_.batch);  // a dynamic batch dim: the caller's batch
        continue;
      }
      const std::string sym = dim->has_dim_param() ? " ('" + dim->dim_param() + "')" : "";
      return Status::InvalidArgument(origin_ + ": input '" + name + "' dim " + std::to_string(d) + sym +
                                     " is dynamic; give the input's shape with --input-shape " + name + "=...");
    }
  }
  if (runtime_inputs_.empty())
    return Status::NotSupported(origin_ + ": the model has no (non-constant) input, its outputs are constants");
  // Declared output shapes may hold the batch the exporter used; inference recomputes them.
  for (int i = 0; i < g->output_size(); ++i) {
    auto* type = g->mutable_output(i)->mutable_type();
    if (type->has_tensor_type()) type->mutable_tensor_type()->clear_shape();
  }
  return Status::OK();
}

// ONNX 1.12's shape inference indexes shapes and attributes it does not
// check: tests/fuzz/fuzz_onnx found crashes inside the library in Gemm,
// LayerNormalization and ConvTranspose inference, and there is no end to that
// class. So it runs in a child process: a crash there is a clear error for
// this model, never the end of the CLI or daemon that imports it. The child
// sends back the graph's value_info and output types ('O' + a serialized
// GraphProto), or 'E' + the message of the exception the library threw.
struct IsolatedInference {
  bool crashed = false;
  std::string error;  // the library's exception message (empty: succeeded)
};

IsolatedInference InferShapesIsolated(onnx::ModelProto* model, const onnx::ShapeInferenceOptions& options) {
  IsolatedInference r;
  int fds[2];
  if (pipe(fds) != 0) {
    r.error = std::string("cannot create a pipe: ") + std::strerror(errno);
    return r;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    r.error = std::string("cannot fork for shape inference: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {  // the child: infer, write, leave without running exit handlers
    close(fds[0]);
    std::string out;
    try {
      onnx::shape_inference::InferShapes(*model, onnx::OpSchemaRegistry::Instance(), options);
      onnx::GraphProto inferred;
      *inferred.mutable_value_info() = model->graph().value_info();
      *inferred.mutable_output() = model->graph().output();
      out = "O" + inferred.SerializeAsString();
    } catch (const std::exception& e) {
      out = std::string("E") + e.what();
    }
    for (size_t at = 0; at < out.size();) {
      const ssize_t n = write(fds[1], out.data() + at, out.size() - at);
      if (n <= 0) _exit(3);
      at += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  // A child that never answers (a lock another thread held at fork time)
  // is killed after kInferenceTimeout; the import then fails, it never hangs.
  constexpr auto kInferenceTimeout = std::chrono::seconds(120);
  const auto deadline = std::chrono::steady_clock::now() + kInferenceTimeout;
  std::string in;
  char buf[1 << 16];
  bool timed_out = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&pfd, 1, static_cast<int>(left.count())) : 0;
    if (ready == 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0)
      in.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    r.crashed = true;
    r.error = "the ONNX library's shape inference did not finish within 120 s";
    return r;
  }
  onnx::GraphProto inferred;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || in.empty() ||
      (in[0] == 'O' && !inferred.ParseFromArray(in.data() + 1, static_cast<int>(in.size() - 1)))) {
    r.crashed = true;
    r.error = WIFSIGNALED(status) ? "the ONNX library crashed on it (signal " + std::to_string(WTERMSIG(status)) + ")"
                                  : "the ONNX library's shape inference ended without an answer";
    return r;
  }
  if (in[0] == 'E') {
    r.error = in.substr(1);
    if (r.error.empty()) r.error = "shape inference failed";
    return r;
  }
  auto* g = model->mutable_graph();
  g->mutable_value_info()->Swap(inferred.mutable_value_info());
  if (inferred.output_size() == g->output_size())
    for (int i = 0; i < g->output_size(); ++i) *g->mutable_output(i)->mutable_type() = inferred.output(i).type();
  return r;
}

Status OnnxModelImporter::RunShapeInference() {
  auto* g = model_.mutable_graph();
  g->clear_value_info();
  // Strict first, so that a node the ONNX library cannot type is reported
  // with its own message; then lenient, so that one such node (often one we
  // would reject anyway, or fold away) does not hide every other shape.
  inference_error_.clear();
  const onnx::ShapeInferenceOptions strict(/*check_type=*/false, /*error_mode=*/1, /*data_prop=*/true);
  IsolatedInference first = InferShapesIsolated(&model_, strict);
  if (first.crashed)
    return Status::InvalidArgument(origin_ + ": malformed model: " + first.error +
                                   " while inferring shapes; check it with onnx.checker / shape_inference");
  if (!first.error.empty()) {
    inference_error_ = first.error;
    while (!inference_error_.empty() && (inference_error_.back() == '\n' || inference_error_.back() == ' '))
      inference_error_.pop_back();
    spdlog::debug("{}: ONNX shape inference: {}", origin_, inference_error_);
    g->clear_value_info();
    const onnx::ShapeInferenceOptions lenient(/*check_type=*/false, /*error_mode=*/0, /*data_prop=*/false);
    IsolatedInference second = InferShapesIsolated(&model_, lenient);
    if (second.crashed || !second.error.empty())
      return Status::InvalidArgument(origin_ + ": ONNX shape inference failed: " + inference_error_ + "; " +
                                     second.error);
  }
  infos_.clear();
  for (const auto& v : g->input()) infos_[v.name()] = InfoFromType(v.type());
  for (const auto& v : g->value_info()) infos_[v.name()] = InfoFromType(v.type());
  for (const auto& v : g->output())
    if (!infos_.count(v.name()) || !infos_[v.name()].has_shape) infos_[v.name()] = InfoFromType(v.type());
  for (const auto& t : g->initializer()) {
    ValueInfo info;
    info.elem_type = t.data_type();
    info.dims.assign(t.dims().begin(), t.dims().end());
    info.has_shape = true;
    infos_[t.name()] = info;
  }
  return Status::OK();
}

bool OnnxModelImporter::IsConst(const std::string& name) const {
  return const_cache_.count(name) != 0 || initializer_index_.count(name) != 0;
}

Result<const ConstTensor*> OnnxModelImporter::Const(const std::string& name) {
  if (auto it = const_cache_.find(name); it != const_cache_.end()) return &it->second;
  if (auto r = released_.find(name); r != released_.end()) {  // InputValue gave its values to the graph
    ConstTensor c;
    c.dims = graph_.values[r->second].shape;
    const TensorData* d = graph_.ConstantData(r->second);
    if (d != nullptr) c.data.assign(d->values.begin(), d->values.end());
    auto [pos, inserted] = const_cache_.emplace(name, std::move(c));
    return &pos->second;
  }
  auto it = initializer_index_.find(name);
  if (it == initializer_index_.end()) return static_cast<const ConstTensor*>(nullptr);
  if (IsShapeOnly(name))
    return Status::NotSupported(origin_ + ": the values of constant '" + name + "' (" +
                                ShapeToString(ConstDims(name)) +
                                ") were left out (shapes only: inspect/plan) but are needed to import the model; "
                                "run a verb that loads the weights");
  auto read = onnx_import::ReadConstTensor(model_.graph().initializer(it->second));
  if (!read.ok()) return read.status().WithContext(origin_ + ": ");
  auto [pos, inserted] = const_cache_.emplace(name, std::move(read).value());
  return &pos->second;
}

Result<std::vector<float>> OnnxModelImporter::WeightFloats(const std::string& name) {
  if (auto r = released_.find(name); r != released_.end()) {
    const TensorData* d = graph_.ConstantData(r->second);
    if (d == nullptr) return Status::Internal(origin_ + ": '" + name + "' lost its values");
    return d->values;
  }
  if (auto it = const_cache_.find(name); it != const_cache_.end()) {  // a folded constant
    const ConstTensor& c = it->second;
    return std::vector<float>(c.data.begin(), c.data.end());
  }
  auto it = initializer_index_.find(name);
  if (it == initializer_index_.end()) return Status::Internal(origin_ + ": '" + name + "' is not a constant");
  auto values = onnx_import::ReadFloats(model_.graph().initializer(it->second));
  if (!values.ok()) return values.status().WithContext(origin_ + ": ");
  return values;
}

Shape OnnxModelImporter::ConstDims(const std::string& name) const {
  if (auto it = const_cache_.find(name); it != const_cache_.end()) return it->second.dims;
  const onnx::TensorProto& t = model_.graph().initializer(initializer_index_.at(name));
  return Shape(t.dims().begin(), t.dims().end());
}

bool OnnxModelImporter::FoldToShapeOnly(const onnx::NodeProto& node) {
  std::vector<onnx::TensorProto> outputs;
  for (const std::string& out : node.output()) {
    if (out.empty()) continue;
    auto it = infos_.find(out);
    if (it == infos_.end() || !it->second.Static() || it->second.elem_type == 0) return false;
    onnx::TensorProto t;
    t.set_name(out);
    t.set_data_type(it->second.elem_type);
    for (int64_t d : it->second.dims) t.add_dims(d);
    t.set_raw_data(std::string(1, '\0'));  // a placeholder, as onnx_weightless_reader.h writes
    outputs.push_back(std::move(t));
  }
  auto* g = model_.mutable_graph();
  for (auto& t : outputs) {
    const int64_t elem = onnx_import::RawElementSize(t.data_type());
    dropped_[t.name()] = {NumElements(Shape(t.dims().begin(), t.dims().end())) * elem, elem};
    initializer_index_[t.name()] = g->initializer_size();
    *g->add_initializer() = std::move(t);
  }
  return true;
}

OnnxModelImporter::Sources OnnxModelImporter::SourcesOf(const std::string& name) const {
  if (auto it = const_sources_.find(name); it != const_sources_.end()) return it->second;
  if (initializer_index_.count(name)) return {name};
  return {};
}

void OnnxModelImporter::RecordFoldSources(const onnx::NodeProto& node) {
  if (node.op_type() == "Shape" || node.op_type() == "Size") return;  // from dims, not values
  Sources sources;
  for (const std::string& in : node.input())
    if (!in.empty()) {
      const Sources s = SourcesOf(in);
      sources.insert(s.begin(), s.end());
    }
  for (const std::string& out : node.output())
    if (!out.empty()) const_sources_[out] = sources;
}

bool OnnxModelImporter::DequantizeLargeWeight(const onnx::NodeProto& node, bool sole_reader) {
  constexpr int64_t kLarge = int64_t{1} << 14;  // smaller ones take the general path
  const std::string& x = node.input(0);
  auto it = initializer_index_.find(x);
  if (it == initializer_index_.end() || IsShapeOnly(x) || const_cache_.count(x)) return false;
  const onnx::TensorProto& t = model_.graph().initializer(it->second);
  auto count = onnx_import::TensorElementCount(t);
  if (!count.ok() || *count <= kLarge) return false;
  if (t.data_type() != onnx::TensorProto::INT8 && t.data_type() != onnx::TensorProto::UINT8) return false;
  auto scale = Const(node.input(1));
  if (!scale.ok() || *scale == nullptr) return false;
  const ConstTensor* zp = nullptr;
  if (node.input_size() > 2 && !node.input(2).empty()) {
    auto z = Const(node.input(2));
    if (!z.ok() || *z == nullptr) return false;
    zp = *z;
  }
  auto folded = onnx_import::DequantizeWeight(node, t, **scale, zp, node.output(0));
  if (!folded.ok()) return false;  // the general path reports what is wrong
  auto* g = model_.mutable_graph();
  *g->add_initializer() = std::move(folded).value();
  initializer_index_[node.output(0)] = g->initializer_size() - 1;
  if (sole_reader) {  // nothing else reads the codes: free them (they stay an initializer, shapes only)
    onnx::TensorProto& codes = *g->mutable_initializer(it->second);
    const int64_t elem = onnx_import::RawElementSize(codes.data_type());
    std::string().swap(*codes.mutable_raw_data());
    google::protobuf::RepeatedField<int32_t>().Swap(codes.mutable_int32_data());
    codes.set_raw_data(std::string(1, '\0'));  // a placeholder, as FoldToShapeOnly writes
    dropped_[x] = {*count * elem, elem};
  }
  return true;
}

Status OnnxModelImporter::FoldConstantNodes(bool* changed) {
  auto* g = model_.mutable_graph();
  std::vector<bool> folded(g->node_size(), false);
  std::unordered_map<std::string, int> readers;  // how many nodes (and graph outputs) read each tensor
  for (const auto& n : g->node())
    for (const std::string& in : n.input()) ++readers[in];
  for (const auto& o : g->output()) ++readers[o.name()];
  for (int i = 0; i < g->node_size(); ++i) {
    const onnx::NodeProto& node = g->node(i);
    if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
    const std::string& op = node.op_type();
    std::vector<ConstTensor> results;
    if (op == "Shape" || op == "Size") {
      if (node.input_size() < 1) continue;
      auto it = infos_.find(node.input(0));
      if (it == infos_.end() || !it->second.Static()) continue;
      const auto& dims = it->second.dims;
      ConstTensor t;
      t.elem_type = TensorProto::INT64;
      if (op == "Size") {
        t.data = {static_cast<double>(NumElements(dims))};
      } else {
        const int64_t rank = static_cast<int64_t>(dims.size());
        int64_t start = AttrInt(node, "start", 0), end = AttrInt(node, "end", rank);
        if (start < 0) start += rank;
        if (end < 0) end += rank;
        start = std::clamp<int64_t>(start, 0, rank);
        end = std::clamp<int64_t>(end, start, rank);
        for (int64_t d = start; d < end; ++d) t.data.push_back(static_cast<double>(dims[d]));
        t.dims = {end - start};
      }
      results.push_back(std::move(t));
    } else if (op == "DequantizeLinear" && node.input_size() >= 2 && node.output_size() == 1 &&
               DequantizeLargeWeight(node, readers[node.input(0)] == 1)) {
      RecordFoldSources(node);
      folded[i] = true;
      *changed = true;
      continue;
    } else if (onnx_import::IsConstantEvaluable(op)) {
      std::vector<const ConstTensor*> inputs;
      bool all_const = true, shape_only = false;
      for (const std::string& in : node.input()) {
        if (in.empty()) {
          inputs.push_back(nullptr);
          continue;
        }
        if (IsShapeOnly(in)) {  // shapes only: its values were never read
          shape_only = true;
          continue;
        }
        TS_ASSIGN_OR_RETURN(const ConstTensor* c, Const(in));
        if (c == nullptr) {
          all_const = false;
          break;
        }
        inputs.push_back(c);
      }
      if (!all_const) continue;
      if (shape_only) {
        // Computed from a weight read for its shape only (e.g. a transposed
        // weight): the result is a weight of the inferred shape, no values.
        if (!FoldToShapeOnly(node)) continue;
        RecordFoldSources(node);
        folded[i] = true;
        *changed = true;
        continue;
      }
      auto r = onnx_import::EvaluateConstantNode(node, inputs, opset_);
      if (!r.ok()) {
        if (r.status().IsNotSupported()) continue;  // stays a node; translation decides
        return NodeError(r.status().code(), node, r.status().message());
      }
      results = std::move(r).value();
    } else {
      continue;
    }
    // A folded weight is kept once, as its initializer: the cache holds 8 B
    // a value (doubles), so a large result, or a large input this node was
    // its reader of, is read again from its initializer if asked for
    // (a QDQ model's DequantizeLinear weights: mobilenet_v2's import peaked
    // at 117 MB for 14 MB of float weights with every step cached).
    constexpr size_t kCachedValues = size_t{1} << 14;
    for (size_t k = 0; k < results.size() && k < static_cast<size_t>(node.output_size()); ++k) {
      const std::string& out = node.output(static_cast<int>(k));
      if (out.empty()) continue;
      *g->add_initializer() = onnx_import::WriteTensorProto(out, results[k]);
      initializer_index_[out] = g->initializer_size() - 1;
      if (results[k].data.size() <= kCachedValues) {
        const_cache_[out] = std::move(results[k]);
      } else {
        const_cache_.erase(out);
      }
    }
    for (const std::string& in : node.input())
      if (auto it = const_cache_.find(in); it != const_cache_.end() && it->second.data.size() > kCachedValues)
        const_cache_.erase(it);
    RecordFoldSources(node);
    folded[i] = true;
    *changed = true;
  }
  if (*changed) {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    for (int i = 0; i < g->node_size(); ++i)
      if (!folded[i]) *kept.Add() = std::move(*g->mutable_node(i));
    g->mutable_node()->Swap(&kept);
  }
  return Status::OK();
}

std::string OnnxModelImporter::Resolve(const std::string& name) const {
  std::string n = name;
  for (auto it = alias_.find(n); it != alias_.end(); it = alias_.find(n)) n = it->second;
  return n;
}

Result<int> OnnxModelImporter::InputValue(const onnx::NodeProto& node, const std::string& raw_name) {
  const std::string name = Resolve(raw_name);
  if (auto it = value_ids_.find(name); it != value_ids_.end()) return it->second;
  auto idx = initializer_index_.find(name);
  if (idx == initializer_index_.end())
    return NodeError(StatusCode::kInvalidArgument, node, "reads '" + name + "', which no earlier node produces");
  const onnx::TensorProto& t = model_.graph().initializer(idx->second);
  if (!IsFloatElem(t.data_type()))
    return NodeError(StatusCode::kNotSupported, node,
                     "reads the " + ElemTypeName(t.data_type()) + " constant '" + name + "' as data; tessera " +
                         "computes in float32 only");
  TensorData data;
  data.shape.assign(t.dims().begin(), t.dims().end());
  if (IsShapeOnly(name)) {  // shapes only: the weight keeps its shape, no values
    const int id = graph_.AddConstant(name, std::move(data));
    value_ids_[name] = id;
    return id;
  }
  auto values = onnx_import::ReadFloats(t);
  if (!values.ok()) return values.status().WithContext(origin_ + ": ");
  data.values = std::move(values).value();
  const bool large = data.values.size() > (size_t{1} << 14);
  const int id = graph_.AddConstant(name, std::move(data));
  value_ids_[name] = id;
  if (large) {
    // The graph holds the weight now: free the initializer's copy at once
    // rather than after the whole graph is built (every weight was held
    // twice while importing). A later Const() or WeightFloats() of it reads
    // the graph's values (released_).
    onnx::TensorProto& held = *model_.mutable_graph()->mutable_initializer(idx->second);
    std::string().swap(*held.mutable_raw_data());
    google::protobuf::RepeatedField<float>().Swap(held.mutable_float_data());
    released_[name] = id;
  }
  return id;
}

Result<Shape> OnnxModelImporter::StaticShape(const onnx::NodeProto& node, const std::string& raw_name) const {
  const std::string name = Resolve(raw_name);
  auto it = infos_.find(name);
  if (it == infos_.end() || !it->second.Static())
    return NodeError(StatusCode::kInvalidArgument, node,
                     "the shape of '" + name + "' could not be inferred" +
                         (inference_error_.empty() ? std::string("; give the input shapes with --input-shape")
                                                   : " (ONNX shape inference: " + inference_error_ + ")"));
  return Shape(it->second.dims.begin(), it->second.dims.end());
}

Result<int> OnnxModelImporter::OutputValue(const onnx::NodeProto& node, const std::string& name) {
  if (value_ids_.count(name))
    return NodeError(StatusCode::kInvalidArgument, node, "value '" + name + "' is produced twice");
  auto it = infos_.find(name);
  if (it != infos_.end() && it->second.elem_type != 0 && it->second.elem_type != TensorProto::FLOAT)
    return NodeError(StatusCode::kNotSupported, node,
                     "produces " + ElemTypeName(it->second.elem_type) + " values ('" + name +
                         "'); tessera computes in float32 only");
  TS_ASSIGN_OR_RETURN(Shape shape, StaticShape(node, name));
  const int id = graph_.AddValue(name, shape);
  value_ids_[name] = id;
  return id;
}

std::string OnnxModelImporter::UniqueNodeName(const std::string& base) {
  std::string name = base;
  for (int k = 2; node_names_.count(name); ++k) name = base + "#" + std::to_string(k);
  node_names_.insert(name);
  return name;
}

void OnnxModelImporter::AddNode(const std::string& name, const std::string& op, std::vector<int> inputs,
                                std::vector<int> outputs, Attributes attrs) {
  Node n;
  n.name = UniqueNodeName(name);
  node_sources_[n.name] = translating_sources_;
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  graph_.AddNode(std::move(n));
}

Status OnnxModelImporter::RequireOnlyFirstOutputUsed(const onnx::NodeProto& node, const std::string& what) const {
  for (int k = 1; k < node.output_size(); ++k)
    if (!node.output(k).empty() && used_names_.count(node.output(k)))
      return NodeError(StatusCode::kNotSupported, node, what + " (output " + std::to_string(k) + ") is not supported");
  return Status::OK();
}

Result<OnnxModelImporter::WindowGeometry> OnnxModelImporter::Geometry(const onnx::NodeProto& node, const Shape& x_shape,
                                                                      const Shape& y_shape,
                                                                      const std::vector<int64_t>& default_kernel) {
  WindowGeometry geo;
  if (x_shape.size() == 3 && y_shape.size() == 3) {
    // 1-D (N, C, L) runs as 2-D (N, C, 1, L): a height-1 window over one row.
    geo.lifted = true;
    geo.in = {x_shape[0], x_shape[1], 1, x_shape[2]};
    geo.out = {y_shape[0], y_shape[1], 1, y_shape[2]};
    auto lift = [&](const char* attr, const std::vector<int64_t>& def, int64_t fill) -> Result<std::vector<int64_t>> {
      const std::vector<int64_t> v = AttrInts(node, attr, def);
      if (v.size() != 1)
        return NodeError(StatusCode::kInvalidArgument, node, std::string(attr) + " needs 1 value for 1-D input");
      return std::vector<int64_t>{fill, v[0]};
    };
    TS_ASSIGN_OR_RETURN(geo.kernel, lift("kernel_shape", default_kernel, 1));
    TS_ASSIGN_OR_RETURN(geo.strides, lift("strides", {1}, 1));
    TS_ASSIGN_OR_RETURN(geo.dilations, lift("dilations", {1}, 1));
  } else if (x_shape.size() == 4 && y_shape.size() == 4) {
    geo.in = x_shape;
    geo.out = y_shape;
    geo.kernel = AttrInts(node, "kernel_shape", default_kernel);
    geo.strides = AttrInts(node, "strides", {1, 1});
    geo.dilations = AttrInts(node, "dilations", {1, 1});
    if (geo.kernel.size() != 2 || geo.strides.size() != 2 || geo.dilations.size() != 2)
      return NodeError(StatusCode::kInvalidArgument, node, "kernel_shape, strides and dilations need 2 values");
  } else {
    return NodeError(
        StatusCode::kNotSupported, node,
        "only 1-D and 2-D windows (NCL / NCHW input) are supported; input has shape " + ShapeToString(x_shape));
  }
  for (size_t i = 0; i < 2; ++i)
    if (geo.kernel[i] < 1 || geo.strides[i] < 1 || geo.dilations[i] < 1)
      return NodeError(StatusCode::kInvalidArgument, node, "kernel_shape, strides and dilations must be >= 1");
  const std::string auto_pad = AttrString(node, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> pads = AttrInts(node, "pads", std::vector<int64_t>(geo.lifted ? 2 : 4, 0));
    if (pads.size() != (geo.lifted ? 2u : 4u))
      return NodeError(StatusCode::kInvalidArgument, node, "pads must have 2 values per spatial dim");
    for (int64_t p : pads)
      if (p < 0) return NodeError(StatusCode::kNotSupported, node, "negative pads are not supported");
    geo.pads = geo.lifted ? std::vector<int64_t>{0, pads[0], 0, pads[1]} : pads;
    return geo;
  }
  if (auto_pad == "VALID") {
    geo.pads = {0, 0, 0, 0};
    return geo;
  }
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    return NodeError(StatusCode::kInvalidArgument, node, "unknown auto_pad '" + auto_pad + "'");
  geo.pads.assign(4, 0);
  for (int i = 0; i < 2; ++i) {
    const int64_t needed = (geo.out[2 + i] - 1) * geo.strides[i] + (geo.kernel[i] - 1) * geo.dilations[i] + 1;
    const int64_t total = std::max<int64_t>(0, needed - geo.in[2 + i]);
    const int64_t small = total / 2, large = total - small;
    geo.pads[i] = auto_pad == "SAME_UPPER" ? small : large;      // begin
    geo.pads[i + 2] = auto_pad == "SAME_UPPER" ? large : small;  // end
  }
  return geo;
}

Status OnnxModelImporter::AddWindowNode(const std::string& name, const std::string& op, int x, std::vector<int> params,
                                        int y, const WindowGeometry& geo, Attributes attrs) {
  if (!geo.lifted) {
    params.insert(params.begin(), x);
    AddNode(name, op, params, {y}, std::move(attrs));
    return Status::OK();
  }
  const int x2 = AddIntermediate(graph_.values[x].name + "/2d", geo.in);
  const int y2 = AddIntermediate(graph_.values[y].name + "/2d", geo.out);
  Attributes to2d, back;
  to2d.Set("shape", geo.in);
  back.Set("shape", graph_.values[y].shape);
  AddNode(name + "/to_2d", "Reshape", {x}, {x2}, std::move(to2d));
  params.insert(params.begin(), x2);
  AddNode(name, op, params, {y2}, std::move(attrs));
  AddNode(name + "/from_2d", "Reshape", {y2}, {y}, std::move(back));
  return Status::OK();
}

Status OnnxModelImporter::TranslateConv(const onnx::NodeProto& node, const std::string& name) {
  if (node.input_size() < 2) return NodeError(StatusCode::kInvalidArgument, node, "needs inputs X and W");
  TS_ASSIGN_OR_RETURN(Shape x_shape, StaticShape(node, node.input(0)));
  if (!IsConst(node.input(1)))
    return NodeError(StatusCode::kNotSupported, node, "weights W must be constant (an initializer)");
  const bool has_bias = node.input_size() > 2 && !node.input(2).empty();
  if (has_bias && !IsConst(node.input(2)))
    return NodeError(StatusCode::kNotSupported, node, "bias B must be constant (an initializer)");
  TS_ASSIGN_OR_RETURN(Shape y_shape, StaticShape(node, node.output(0)));
  TS_ASSIGN_OR_RETURN(int w, InputValue(node, node.input(1)));
  const Shape w_shape = graph_.values[w].shape;
  if (w_shape.size() != x_shape.size() || w_shape.size() < 3)
    return NodeError(StatusCode::kInvalidArgument, node,
                     "weights " + ShapeToString(w_shape) + " do not match input " + ShapeToString(x_shape));
  const std::vector<int64_t> default_kernel(w_shape.begin() + 2, w_shape.end());
  TS_ASSIGN_OR_RETURN(WindowGeometry geo, Geometry(node, x_shape, y_shape, default_kernel));
  if (geo.lifted) {  // W (O, C/g, k) -> (O, C/g, 1, k)
    TensorData w4 = *graph_.ConstantData(w);
    w4.shape = {w_shape[0], w_shape[1], 1, w_shape[2]};
    w = graph_.AddConstant(name + "/W_2d", std::move(w4));
  }
  if (geo.kernel[0] != graph_.values[w].shape[2] || geo.kernel[1] != graph_.values[w].shape[3])
    return NodeError(StatusCode::kInvalidArgument, node,
                     "kernel_shape does not match weights " + ShapeToString(w_shape));
  std::vector<int> params = {w};
  if (has_bias) {
    TS_ASSIGN_OR_RETURN(int b, InputValue(node, node.input(2)));
    params.push_back(b);
  }
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  a.Set("kernel_shape", geo.kernel);
  a.Set("strides", geo.strides);
  a.Set("pads", geo.pads);
  a.Set("dilations", geo.dilations);
  a.Set("group", AttrInt(node, "group", 1));
  return AddWindowNode(name, "Conv", x, params, y, geo, std::move(a));
}

// ConvTranspose (1-D lifted to 2-D, or 2-D): canonical attrs kernel_shape,
// strides, dilations, group, explicit pads (top, left, bottom, right) and
// output_padding, such that the graph's output size is
//   s·(in − 1) + output_padding + (k − 1)·d + 1 − pad_begin − pad_end.
// output_shape and auto_pad SAME_* become pads as the ONNX spec says:
// total = s·(in − 1) + output_padding + (k − 1)·d + 1 − out, SAME_UPPER puts
// total/2 at the beginning, otherwise the larger half goes first; a negative
// total (output_shape beyond the full result) adds positions at the end.
Status OnnxModelImporter::TranslateConvTranspose(const onnx::NodeProto& node, const std::string& name) {
  if (node.input_size() < 2) return NodeError(StatusCode::kInvalidArgument, node, "needs inputs X and W");
  TS_ASSIGN_OR_RETURN(Shape x_shape, StaticShape(node, node.input(0)));
  if (!IsConst(node.input(1)))
    return NodeError(StatusCode::kNotSupported, node, "weights W must be constant (an initializer)");
  const bool has_bias = node.input_size() > 2 && !node.input(2).empty();
  if (has_bias && !IsConst(node.input(2)))
    return NodeError(StatusCode::kNotSupported, node, "bias B must be constant (an initializer)");
  TS_ASSIGN_OR_RETURN(Shape y_shape, StaticShape(node, node.output(0)));
  TS_ASSIGN_OR_RETURN(int w, InputValue(node, node.input(1)));
  const Shape w_shape = graph_.values[w].shape;
  if (w_shape.size() != x_shape.size() || w_shape.size() < 3)
    return NodeError(StatusCode::kNotSupported, node,
                     "only 1-D and 2-D ConvTranspose are supported (weights " + ShapeToString(w_shape) + ", input " +
                         ShapeToString(x_shape) + ")");
  const std::vector<int64_t> default_kernel(w_shape.begin() + 2, w_shape.end());
  const std::string auto_pad = AttrString(node, "auto_pad", "NOTSET");
  TS_ASSIGN_OR_RETURN(WindowGeometry geo, Geometry(node, x_shape, y_shape, default_kernel));
  if (geo.lifted) {  // W (C, M/g, k) -> (C, M/g, 1, k)
    TensorData w4 = *graph_.ConstantData(w);
    w4.shape = {w_shape[0], w_shape[1], 1, w_shape[2]};
    w = graph_.AddConstant(name + "/W_2d", std::move(w4));
  }
  if (geo.kernel[0] != graph_.values[w].shape[2] || geo.kernel[1] != graph_.values[w].shape[3])
    return NodeError(StatusCode::kInvalidArgument, node,
                     "kernel_shape does not match weights " + ShapeToString(w_shape));
  std::vector<int64_t> output_padding = AttrInts(node, "output_padding", {});
  if (output_padding.empty()) output_padding.assign(geo.lifted ? 1 : 2, 0);
  if (output_padding.size() != (geo.lifted ? 1u : 2u))
    return NodeError(StatusCode::kInvalidArgument, node, "output_padding needs one value per spatial dim");
  if (geo.lifted) output_padding.insert(output_padding.begin(), 0);
  const bool derived_pads =
      FindAttribute(node, "output_shape") != nullptr || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  std::vector<int64_t> pads = auto_pad == "VALID" ? std::vector<int64_t>{0, 0, 0, 0} : geo.pads;
  std::vector<int64_t> effective_padding(2);
  for (int i = 0; i < 2; ++i) {
    const int64_t full = geo.strides[i] * (geo.in[2 + i] - 1) + (geo.kernel[i] - 1) * geo.dilations[i] + 1;
    if (derived_pads) {
      const int64_t total = full + output_padding[i] - geo.out[2 + i];
      // An output_shape beyond the full result extends it at the end (the
      // extra positions get only the bias), as output_padding would.
      const int64_t small = std::max<int64_t>(total, 0) / 2, large = std::max<int64_t>(total, 0) - small;
      pads[i] = auto_pad == "SAME_UPPER" ? small : large;
      pads[i + 2] = auto_pad == "SAME_UPPER" ? large : small;
    }
    effective_padding[i] = geo.out[2 + i] - (full - pads[i] - pads[i + 2]);
    if (effective_padding[i] < 0 || pads[i] < 0 || pads[i + 2] < 0)
      return NodeError(StatusCode::kInvalidArgument, node,
                       "output shape " + ShapeToString(y_shape) + " does not follow from the pads and strides");
  }
  std::vector<int> params = {w};
  if (has_bias) {
    TS_ASSIGN_OR_RETURN(int b, InputValue(node, node.input(2)));
    params.push_back(b);
  }
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  a.Set("kernel_shape", geo.kernel);
  a.Set("strides", geo.strides);
  a.Set("pads", pads);
  a.Set("dilations", geo.dilations);
  a.Set("group", AttrInt(node, "group", 1));
  a.Set("output_padding", effective_padding);
  return AddWindowNode(name, "ConvTranspose", x, params, y, geo, std::move(a));
}

// LayerNormalization (opset 17): canonical op of the same name, attr axis made
// non-negative, epsilon kept; Scale and B must be constants. Mean and
// InvStdDev become outputs 1 and 2 when read.
Status OnnxModelImporter::TranslateLayerNorm(const onnx::NodeProto& node, const std::string& name) {
  if (node.input_size() < 2) return NodeError(StatusCode::kInvalidArgument, node, "needs inputs X and Scale");
  TS_ASSIGN_OR_RETURN(Shape x_shape, StaticShape(node, node.input(0)));
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  int64_t axis = AttrInt(node, "axis", -1);
  if (axis < -rank || axis >= rank) return NodeError(StatusCode::kInvalidArgument, node, "axis out of range");
  if (axis < 0) axis += rank;
  std::vector<int> inputs;
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  inputs.push_back(x);
  for (int i = 1; i < node.input_size() && i < 3; ++i) {
    if (node.input(i).empty()) continue;
    if (!IsConst(node.input(i)))
      return NodeError(StatusCode::kNotSupported, node, "Scale and B must be constants (initializers)");
    TS_ASSIGN_OR_RETURN(int v, InputValue(node, node.input(i)));
    inputs.push_back(v);
  }
  // Outputs Y, and Mean and InvStdDev when some node or the graph reads them.
  std::vector<int> outputs;
  int last_used = 0;
  for (int k = 1; k < node.output_size() && k < 3; ++k)
    if (!node.output(k).empty() && used_names_.count(node.output(k))) last_used = k;
  for (int k = 0; k <= last_used; ++k) {
    if (node.output(k).empty()) {
      Shape stats(x_shape.begin(), x_shape.begin() + axis);
      stats.resize(x_shape.size(), 1);
      outputs.push_back(AddIntermediate(name + "/unused_" + std::to_string(k), stats));
      continue;
    }
    TS_ASSIGN_OR_RETURN(int v, OutputValue(node, node.output(k)));
    outputs.push_back(v);
  }
  Attributes a;
  a.Set("axis", axis);
  a.Set("epsilon", static_cast<double>(AttrFloat(node, "epsilon", 1e-5f)));
  AddNode(name, "LayerNormalization", inputs, outputs, std::move(a));
  return Status::OK();
}

Status OnnxModelImporter::TranslatePool(const onnx::NodeProto& node, const std::string& name) {
  TS_RETURN_IF_ERROR(RequireOnlyFirstOutputUsed(node, "the Indices output"));
  TS_ASSIGN_OR_RETURN(Shape x_shape, StaticShape(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(Shape y_shape, StaticShape(node, node.output(0)));
  if (!FindAttribute(node, "kernel_shape"))
    return NodeError(StatusCode::kInvalidArgument, node, "kernel_shape is required");
  TS_ASSIGN_OR_RETURN(WindowGeometry geo, Geometry(node, x_shape, y_shape, {}));
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  a.Set("kernel_shape", geo.kernel);
  a.Set("strides", geo.strides);
  a.Set("pads", geo.pads);
  a.Set("ceil_mode", AttrInt(node, "ceil_mode", 0));
  if (node.op_type() == "MaxPool") {
    if (AttrInt(node, "storage_order", 0) != 0 && node.output_size() > 1)
      return NodeError(StatusCode::kNotSupported, node, "storage_order is not supported");
    a.Set("dilations", geo.dilations);
  } else {
    if (geo.dilations != std::vector<int64_t>{1, 1})
      return NodeError(StatusCode::kNotSupported, node, "AveragePool with dilations is not supported");
    a.Set("count_include_pad", AttrInt(node, "count_include_pad", 0));
  }
  return AddWindowNode(name, node.op_type(), x, {}, y, geo, std::move(a));
}

// Gemm: Y = alpha·A'·B' + beta·C  ->  canonical Gemm X(N,in), W(out,in), B(out)
// with alpha folded into W and beta into the bias (graph.h).
Status OnnxModelImporter::TranslateGemm(const onnx::NodeProto& node, const std::string& name) {
  if (node.input_size() < 2) return NodeError(StatusCode::kInvalidArgument, node, "needs inputs A and B");
  if (IsConst(node.input(0)) || !IsConst(node.input(1)))
    return NodeError(StatusCode::kNotSupported, node,
                     "only Gemm of a computed A with a constant B (weights) is supported");
  const double alpha = AttrFloat(node, "alpha", 1.f), beta = AttrFloat(node, "beta", 1.f);
  const bool trans_a = AttrInt(node, "transA", 0) != 0, trans_b = AttrInt(node, "transB", 0) != 0;
  TS_ASSIGN_OR_RETURN(Shape a_shape, StaticShape(node, node.input(0)));
  if (a_shape.size() != 2) return NodeError(StatusCode::kInvalidArgument, node, "A must have rank 2");
  const Shape b_dims = ConstDims(node.input(1));
  if (b_dims.size() != 2) return NodeError(StatusCode::kInvalidArgument, node, "B must have rank 2");
  const int64_t k = trans_b ? b_dims[1] : b_dims[0], n_out = trans_b ? b_dims[0] : b_dims[1];
  const int64_t m = trans_a ? a_shape[1] : a_shape[0];
  if ((trans_a ? a_shape[0] : a_shape[1]) != k)
    return NodeError(StatusCode::kInvalidArgument, node,
                     "A " + ShapeToString(a_shape) + " and B " + ShapeToString(b_dims) + " do not multiply");
  TensorData w;
  w.shape = {n_out, k};
  if (!IsShapeOnly(node.input(1))) {
    TS_ASSIGN_OR_RETURN(std::vector<float> b, WeightFloats(node.input(1)));
    w.values.resize(static_cast<size_t>(n_out * k));
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t i = 0; i < k; ++i)
        w.values[o * k + i] = static_cast<float>(alpha * (trans_b ? b[o * k + i] : b[i * n_out + o]));
  }
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  if (trans_a) {
    const int xt = AddIntermediate(node.input(0) + "/transposed", {m, k});
    Attributes t;
    t.Set("perm", std::vector<int64_t>{1, 0});
    AddNode(name + "/transpose_a", "Transpose", {x}, {xt}, std::move(t));
    x = xt;
  }
  const int w_id = graph_.AddConstant(name + "/W", std::move(w));
  std::vector<int> inputs = {x, w_id};
  // C: a per-output bias becomes B(out); anything else (a matrix) a separate Add.
  int matrix_bias = -1;
  const bool has_c = node.input_size() > 2 && !node.input(2).empty();
  if (has_c && beta != 0.0 && !IsConst(node.input(2))) {
    // A computed C: Gemm, then Add(beta·C) (a Mul scales C when beta != 1).
    TS_ASSIGN_OR_RETURN(int c, InputValue(node, node.input(2)));
    TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
    const int product = AddIntermediate(node.output(0) + "/product", {m, n_out});
    AddNode(name, "Gemm", inputs, {product}, Attributes());
    if (beta != 1.0) {
      const int scaled = AddIntermediate(node.input(2) + "/scaled", graph_.values[c].shape);
      const int beta_id = graph_.AddConstant(name + "/beta", TensorData{{}, {static_cast<float>(beta)}});
      AddNode(name + "/scale_c", "Mul", {c, beta_id}, {scaled}, Attributes());
      c = scaled;
    }
    AddNode(name + "/add_c", "Add", {product, c}, {y}, Attributes());
    return Status::OK();
  }
  if (has_c && beta != 0.0) {
    const Shape c_dims = ConstDims(node.input(2));
    const int64_t nc = NumElements(c_dims);
    const bool per_output = (nc == n_out && !c_dims.empty() && c_dims.back() == n_out) || nc == 1;
    const ConstTensor* c = nullptr;  // null: shapes only, the bias keeps its shape and no values
    if (!IsShapeOnly(node.input(2))) {
      TS_ASSIGN_OR_RETURN(c, Const(node.input(2)));
    }
    TensorData bias;
    if (per_output) {
      bias.shape = {n_out};
      if (c != nullptr)
        for (int64_t o = 0; o < n_out; ++o) bias.values.push_back(static_cast<float>(beta * c->data[nc == 1 ? 0 : o]));
      inputs.push_back(graph_.AddConstant(name + "/B", std::move(bias)));
    } else {
      bias.shape = c_dims;
      if (c != nullptr)
        for (double v : c->data) bias.values.push_back(static_cast<float>(beta * v));
      matrix_bias = graph_.AddConstant(name + "/C", std::move(bias));
    }
  }
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  if (matrix_bias < 0) {
    AddNode(name, "Gemm", inputs, {y}, Attributes());
  } else {
    const int product = AddIntermediate(node.output(0) + "/product", {m, n_out});
    AddNode(name, "Gemm", inputs, {product}, Attributes());
    AddNode(name + "/add_c", "Add", {product, matrix_bias}, {y}, Attributes());
  }
  return Status::OK();
}

// MatMul(X, constant W[K,N]) -> Gemm with W' = Wᵀ (METHODS §1 "dense");
// X of rank > 2 is flattened to 2-D around it. Two computed inputs stay MatMul.
Status OnnxModelImporter::TranslateMatMul(const onnx::NodeProto& node, const std::string& name) {
  if (node.input_size() != 2) return NodeError(StatusCode::kInvalidArgument, node, "needs 2 inputs");
  TS_ASSIGN_OR_RETURN(Shape a_shape, StaticShape(node, node.input(0)));
  if (!IsConst(node.input(1)) || IsConst(node.input(0)) || a_shape.size() < 2) {
    TS_ASSIGN_OR_RETURN(int a, InputValue(node, node.input(0)));
    TS_ASSIGN_OR_RETURN(int b, InputValue(node, node.input(1)));
    TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
    AddNode(name, "MatMul", {a, b}, {y}, Attributes());
    return Status::OK();
  }
  const Shape b_dims = ConstDims(node.input(1));
  if (b_dims.size() != 2) {
    TS_ASSIGN_OR_RETURN(int a, InputValue(node, node.input(0)));
    TS_ASSIGN_OR_RETURN(int bv, InputValue(node, node.input(1)));
    TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
    AddNode(name, "MatMul", {a, bv}, {y}, Attributes());
    return Status::OK();
  }
  const int64_t k = b_dims[0], n_out = b_dims[1];
  if (a_shape.back() != k)
    return NodeError(StatusCode::kInvalidArgument, node,
                     "A " + ShapeToString(a_shape) + " and B " + ShapeToString(b_dims) + " do not multiply");
  TensorData w;
  w.shape = {n_out, k};
  if (!IsShapeOnly(node.input(1))) {
    TS_ASSIGN_OR_RETURN(std::vector<float> b, WeightFloats(node.input(1)));
    w.values.resize(static_cast<size_t>(n_out * k));
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t i = 0; i < k; ++i) w.values[o * k + i] = b[i * n_out + o];
  }
  const int w_id = graph_.AddConstant(name + "/W", std::move(w));
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  if (a_shape.size() == 2) {
    AddNode(name, "Gemm", {x, w_id}, {y}, Attributes());
    return Status::OK();
  }
  const int64_t rows = NumElements(a_shape) / k;
  const int x2 = AddIntermediate(node.input(0) + "/rows", {rows, k});
  const int y2 = AddIntermediate(node.output(0) + "/rows", {rows, n_out});
  Attributes flat;
  flat.Set("shape", std::vector<int64_t>{rows, k});
  AddNode(name + "/flatten", "Reshape", {x}, {x2}, std::move(flat));
  AddNode(name, "Gemm", {x2, w_id}, {y2}, Attributes());
  Attributes back;
  back.Set("shape", graph_.values[y].shape);
  AddNode(name + "/unflatten", "Reshape", {y2}, {y}, std::move(back));
  return Status::OK();
}

Status OnnxModelImporter::TranslateBatchNorm(const onnx::NodeProto& node, const std::string& name) {
  if (node.input_size() != 5) return NodeError(StatusCode::kInvalidArgument, node, "needs 5 inputs");
  if (AttrInt(node, "training_mode", 0) != 0)
    return NodeError(StatusCode::kNotSupported, node, "training_mode=1 is not supported (inference only)");
  if (opset_ < 9 && AttrInt(node, "spatial", 1) == 0)
    return NodeError(StatusCode::kNotSupported, node, "spatial=0 is not supported");
  TS_RETURN_IF_ERROR(RequireOnlyFirstOutputUsed(node, "the training statistics output"));
  for (int i = 1; i < 5; ++i)
    if (!IsConst(node.input(i)))
      return NodeError(StatusCode::kNotSupported, node, "scale, bias, mean and var must be constants");
  std::vector<int> inputs;
  for (int i = 0; i < 5; ++i) {
    TS_ASSIGN_OR_RETURN(int v, InputValue(node, node.input(i)));
    inputs.push_back(v);
  }
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  a.Set("epsilon", static_cast<double>(AttrFloat(node, "epsilon", 1e-5f)));
  AddNode(name, "BatchNormalization", inputs, {y}, std::move(a));
  return Status::OK();
}

// Reshape / Flatten / Squeeze / Unsqueeze: a Reshape whose attr "shape" is the
// resolved output shape (graph.h).
Status OnnxModelImporter::TranslateReshapeLike(const onnx::NodeProto& node, const std::string& name) {
  TS_ASSIGN_OR_RETURN(Shape in_shape, StaticShape(node, node.input(0)));
  Shape target;
  if (node.op_type() == "Reshape") {
    std::vector<int64_t> requested;
    if (opset_ < 5) {
      requested = AttrInts(node, "shape");
    } else {
      if (node.input_size() < 2 || !IsConst(node.input(1)))
        return NodeError(StatusCode::kNotSupported, node,
                         "the target shape is computed at run time and could not be folded to a constant");
      TS_ASSIGN_OR_RETURN(const ConstTensor* s, Const(node.input(1)));
      requested = s->Ints();
    }
    auto resolved = onnx_import::ResolveReshape(in_shape, requested, AttrInt(node, "allowzero", 0) != 0);
    if (!resolved.ok()) return NodeError(StatusCode::kInvalidArgument, node, resolved.status().message());
    target = resolved.value();
  } else {
    TS_ASSIGN_OR_RETURN(target, StaticShape(node, node.output(0)));
  }
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  if (graph_.values[y].shape != target)
    return NodeError(StatusCode::kInternal, node,
                     "resolved shape " + ShapeToString(target) + " differs from the inferred " +
                         ShapeToString(graph_.values[y].shape));
  Attributes a;
  a.Set("shape", target);
  AddNode(name, "Reshape", {x}, {y}, std::move(a));
  return Status::OK();
}

// Softmax: canonical is the opset-13 form (one axis). Before opset 13 the
// input is coerced to 2-D at `axis` (default 1): same as one axis when axis is
// the last; otherwise Reshape -> Softmax(axis 1) -> Reshape.
Status OnnxModelImporter::TranslateSoftmax(const onnx::NodeProto& node, const std::string& name) {
  TS_ASSIGN_OR_RETURN(Shape shape, StaticShape(node, node.input(0)));
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = AttrInt(node, "axis", opset_ >= 13 ? -1 : 1);
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return NodeError(StatusCode::kInvalidArgument, node, "axis out of range");
  if (axis < 0) axis += rank;
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  if (opset_ >= 13 || axis == rank - 1) {
    a.Set("axis", axis);
    AddNode(name, "Softmax", {x}, {y}, std::move(a));
    return Status::OK();
  }
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  const Shape flat = {outer, NumElements(shape) / std::max<int64_t>(outer, 1)};
  const int x2 = AddIntermediate(node.input(0) + "/2d", flat);
  const int y2 = AddIntermediate(node.output(0) + "/2d", flat);
  Attributes to2d, back;
  to2d.Set("shape", flat);
  back.Set("shape", shape);
  AddNode(name + "/to_2d", "Reshape", {x}, {x2}, std::move(to2d));
  a.Set("axis", int64_t{1});
  AddNode(name, "Softmax", {x2}, {y2}, std::move(a));
  AddNode(name + "/from_2d", "Reshape", {y2}, {y}, std::move(back));
  return Status::OK();
}

Status OnnxModelImporter::TranslateClip(const onnx::NodeProto& node, const std::string& name) {
  double lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
  if (opset_ < 11) {
    lo = AttrFloat(node, "min", static_cast<float>(lo));
    hi = AttrFloat(node, "max", static_cast<float>(hi));
  } else {
    for (int i = 1; i <= 2 && i < node.input_size(); ++i) {
      if (node.input(i).empty()) continue;
      if (!IsConst(node.input(i))) return NodeError(StatusCode::kNotSupported, node, "min/max must be constants");
      TS_ASSIGN_OR_RETURN(const ConstTensor* c, Const(node.input(i)));
      if (c->data.size() != 1) return NodeError(StatusCode::kInvalidArgument, node, "min/max must be scalars");
      (i == 1 ? lo : hi) = c->data[0];
    }
  }
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  a.Set("min", lo);
  a.Set("max", hi);
  AddNode(name, "Clip", {x}, {y}, std::move(a));
  return Status::OK();
}

Status OnnxModelImporter::TranslatePad(const onnx::NodeProto& node, const std::string& name) {
  TS_ASSIGN_OR_RETURN(Shape shape, StaticShape(node, node.input(0)));
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> pads;
  double value = 0.0;
  if (opset_ < 11) {
    pads = AttrInts(node, opset_ < 2 ? "paddings" : "pads");
    value = AttrFloat(node, "value", 0.f);
  } else {
    if (node.input_size() < 2 || !IsConst(node.input(1)))
      return NodeError(StatusCode::kNotSupported, node, "pads must be a constant");
    TS_ASSIGN_OR_RETURN(const ConstTensor* p, Const(node.input(1)));
    pads = p->Ints();
    if (node.input_size() > 2 && !node.input(2).empty()) {
      if (!IsConst(node.input(2)))
        return NodeError(StatusCode::kNotSupported, node, "constant_value must be a constant");
      TS_ASSIGN_OR_RETURN(const ConstTensor* v, Const(node.input(2)));
      if (v->data.size() != 1) return NodeError(StatusCode::kInvalidArgument, node, "constant_value must be a scalar");
      value = v->data[0];
    }
    if (node.input_size() > 3 && !node.input(3).empty()) {  // opset 18: pads apply to `axes` only
      if (!IsConst(node.input(3))) return NodeError(StatusCode::kNotSupported, node, "axes must be a constant");
      TS_ASSIGN_OR_RETURN(const ConstTensor* ax, Const(node.input(3)));
      const auto axes = ax->Ints();
      if (pads.size() != 2 * axes.size())
        return NodeError(StatusCode::kInvalidArgument, node, "pads must have 2 values per axis");
      std::vector<int64_t> full(2 * rank, 0);
      for (size_t i = 0; i < axes.size(); ++i) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank) return NodeError(StatusCode::kInvalidArgument, node, "axis out of range");
        full[a] = pads[i];
        full[a + rank] = pads[i + axes.size()];
      }
      pads = full;
    }
  }
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return NodeError(StatusCode::kInvalidArgument, node,
                     "pads must have 2 values per input dim (" + std::to_string(2 * rank) + ")");
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  // Padding by nothing (PyTorch exports AvgPool2d(padding=0) with such a
  // Pad) is another name for its input, unless that is a graph input.
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }) && graph_.values[x].producer >= 0) {
    alias_[node.output(0)] = Resolve(node.input(0));
    return Status::OK();
  }
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  a.Set("pads", pads);  // ONNX order: begins of every dim, then ends
  a.Set("mode", AttrString(node, "mode", "constant"));
  a.Set("value", value);
  AddNode(name, "Pad", {x}, {y}, std::move(a));
  return Status::OK();
}

// Resize / Upsample (nearest, or linear over the last two dims; graph.h):
// attr "scales" per dim, plus the coordinate transformation and rounding rule
// of the opset that wrote it. Upsample's "bilinear" (opset 7) is linear.
Status OnnxModelImporter::TranslateResize(const onnx::NodeProto& node, const std::string& name) {
  const bool upsample = node.op_type() == "Upsample";
  std::string mode = AttrString(node, "mode", "nearest");
  if (upsample && mode == "bilinear") mode = "linear";
  if (mode != "nearest" && mode != "linear")
    return NodeError(StatusCode::kNotSupported, node, "mode '" + mode + "' is not supported (nearest and linear)");
  if (mode == "linear" && AttrInt(node, "antialias", 0) != 0)
    return NodeError(StatusCode::kNotSupported, node, "antialias=1 is not supported");
  std::string coord = "asymmetric", nearest = "floor";  // Upsample and Resize-10 semantics
  if (!upsample && opset_ >= 11) {
    coord = AttrString(node, "coordinate_transformation_mode", "half_pixel");
    nearest = AttrString(node, "nearest_mode", "round_prefer_floor");
    if (coord == "tf_crop_and_resize")
      return NodeError(StatusCode::kNotSupported, node, "coordinate_transformation_mode tf_crop_and_resize");
  }
  TS_ASSIGN_OR_RETURN(Shape in_shape, StaticShape(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  const Shape& out_shape = graph_.values[y].shape;
  std::vector<double> scales;
  if (upsample && opset_ < 9) {
    for (float s : AttrFloats(node, "scales")) scales.push_back(s);
  } else {
    const int scales_input = (upsample || opset_ < 11) ? 1 : 2;
    if (node.input_size() > scales_input && !node.input(scales_input).empty()) {
      if (!IsConst(node.input(scales_input)))
        return NodeError(StatusCode::kNotSupported, node, "scales must be a constant");
      TS_ASSIGN_OR_RETURN(const ConstTensor* s, Const(node.input(scales_input)));
      scales = s->data;
    }
    if (scales.empty()) {  // sizes given instead (opset >= 11)
      if (node.input_size() < 4 || node.input(3).empty() || !IsConst(node.input(3)))
        return NodeError(StatusCode::kNotSupported, node, "needs constant scales or sizes");
      for (size_t i = 0; i < in_shape.size(); ++i)
        scales.push_back(in_shape[i] == 0 ? 1.0 : static_cast<double>(out_shape[i]) / static_cast<double>(in_shape[i]));
    }
  }
  if (scales.size() != in_shape.size())
    return NodeError(StatusCode::kInvalidArgument, node, "scales must have one value per input dim");
  Attributes a;
  a.Set("mode", mode);
  a.Set("scales", scales);
  a.Set("coordinate_transformation_mode", coord);
  if (mode == "nearest") a.Set("nearest_mode", nearest);
  AddNode(name, "Resize", {x}, {y}, std::move(a));
  return Status::OK();
}

Status OnnxModelImporter::TranslateSlice(const onnx::NodeProto& node, const std::string& name) {
  TS_ASSIGN_OR_RETURN(Shape shape, StaticShape(node, node.input(0)));
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset_ < 10) {
    starts = AttrInts(node, "starts");
    ends = AttrInts(node, "ends");
    axes = AttrInts(node, "axes");
  } else {
    std::vector<int64_t>* dest[] = {&starts, &ends, &axes, &steps};
    for (int i = 1; i < node.input_size() && i <= 4; ++i) {
      if (node.input(i).empty()) continue;
      if (!IsConst(node.input(i)))
        return NodeError(StatusCode::kNotSupported, node, "starts/ends/axes/steps must be constants");
      TS_ASSIGN_OR_RETURN(const ConstTensor* c, Const(node.input(i)));
      *dest[i - 1] = c->Ints();
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return NodeError(StatusCode::kInvalidArgument, node, "axis out of range");
    if (a < 0) a += rank;
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return NodeError(StatusCode::kInvalidArgument, node, "starts/ends/axes/steps differ in length");
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  a.Set("starts", starts);
  a.Set("ends", ends);
  a.Set("axes", axes);
  a.Set("steps", steps);
  AddNode(name, "Slice", {x}, {y}, std::move(a));
  return Status::OK();
}

// ReduceMean/Sum/Max/Min: axes (attribute, or input from ReduceSum-13 and
// opset 18) become attr "axes" (non-negative, sorted; all dims when empty).
// ReduceMean over H,W keeping dims is GlobalAveragePool.
Status OnnxModelImporter::TranslateReduce(const onnx::NodeProto& node, const std::string& name) {
  TS_ASSIGN_OR_RETURN(Shape shape, StaticShape(node, node.input(0)));
  const int64_t rank = static_cast<int64_t>(shape.size());
  const bool axes_as_input = (node.op_type() == "ReduceSum" && opset_ >= 13) || opset_ >= 18;
  std::vector<int64_t> axes;
  if (axes_as_input) {
    if (node.input_size() > 1 && !node.input(1).empty()) {
      if (!IsConst(node.input(1))) return NodeError(StatusCode::kNotSupported, node, "axes must be a constant");
      TS_ASSIGN_OR_RETURN(const ConstTensor* c, Const(node.input(1)));
      axes = c->Ints();
    }
  } else {
    axes = AttrInts(node, "axes");
  }
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  if (axes.empty() && AttrInt(node, "noop_with_empty_axes", 0) != 0) {
    alias_[node.output(0)] = Resolve(node.input(0));
    return Status::OK();
  }
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return NodeError(StatusCode::kInvalidArgument, node, "axis out of range");
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  const int64_t keepdims = AttrInt(node, "keepdims", 1);
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  if (node.op_type() == "ReduceMean" && rank == 4 && keepdims && axes == std::vector<int64_t>{2, 3}) {
    AddNode(name, "GlobalAveragePool", {x}, {y}, Attributes());
    return Status::OK();
  }
  Attributes a;
  a.Set("axes", axes);
  a.Set("keepdims", keepdims);
  AddNode(name, node.op_type(), {x}, {y}, std::move(a));
  return Status::OK();
}

// Split: one Slice per output (the canonical set has no multi-output op).
Status OnnxModelImporter::TranslateSplit(const onnx::NodeProto& node, const std::string& name) {
  TS_ASSIGN_OR_RETURN(Shape shape, StaticShape(node, node.input(0)));
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = AttrInt(node, "axis", 0);
  if (axis < -rank || axis >= rank) return NodeError(StatusCode::kInvalidArgument, node, "axis out of range");
  if (axis < 0) axis += rank;
  std::vector<int64_t> sizes;
  if (opset_ < 13) {
    sizes = AttrInts(node, "split");
  } else if (node.input_size() > 1 && !node.input(1).empty()) {
    if (!IsConst(node.input(1))) return NodeError(StatusCode::kNotSupported, node, "split must be a constant");
    TS_ASSIGN_OR_RETURN(const ConstTensor* c, Const(node.input(1)));
    sizes = c->Ints();
  }
  const int64_t parts = node.output_size();
  if (sizes.empty()) {  // equal parts; the last one may be smaller (opset 18)
    const int64_t each = (shape[axis] + parts - 1) / parts;
    for (int64_t k = 0; k < parts; ++k) sizes.push_back(std::max<int64_t>(0, std::min(each, shape[axis] - k * each)));
  }
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0) return NodeError(StatusCode::kInvalidArgument, node, "negative split size");
    total += v;
  }
  if (static_cast<int64_t>(sizes.size()) != parts || total != shape[axis])
    return NodeError(
        StatusCode::kInvalidArgument, node,
        "split sizes do not match the " + std::to_string(parts) + " outputs and dim " + std::to_string(shape[axis]));
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  int64_t offset = 0;
  for (int64_t k = 0; k < parts; ++k) {
    const std::string& out = node.output(static_cast<int>(k));
    if (!out.empty()) {
      TS_ASSIGN_OR_RETURN(int y, OutputValue(node, out));
      Attributes a;
      a.Set("starts", std::vector<int64_t>{offset});
      a.Set("ends", std::vector<int64_t>{offset + sizes[k]});
      a.Set("axes", std::vector<int64_t>{axis});
      a.Set("steps", std::vector<int64_t>{1});
      AddNode(parts == 1 ? name : name + "/" + std::to_string(k), "Slice", {x}, {y}, std::move(a));
    }
    offset += sizes[k];
  }
  return Status::OK();
}

// Rejects what no translation handles: foreign domains, unknown ops, nodes
// without an output or a first input.
Status OnnxModelImporter::CheckTranslatable(const onnx::NodeProto& node) const {
  const std::string& op = node.op_type();
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return NodeError(StatusCode::kNotSupported, node, "operator domain '" + node.domain() + "' is not supported");
  if (!KnownOps().count(op) && !PassThroughOps().count(op))
    return NodeError(StatusCode::kNotSupported, node, "operator '" + op + "' is not supported by tessera");
  if (node.output_size() == 0 || node.output(0).empty())
    return NodeError(StatusCode::kInvalidArgument, node, "has no output");
  if (node.input_size() == 0 || node.input(0).empty())
    return NodeError(StatusCode::kNotSupported, node, "nodes without a first input are not supported");
  return Status::OK();
}

// Identity and inference-mode Dropout: the output is another name for the input.
Status OnnxModelImporter::TranslateIdentity(const onnx::NodeProto& node) {
  TS_RETURN_IF_ERROR(RequireOnlyFirstOutputUsed(node, "the mask output"));
  if (node.op_type() == "Dropout" && node.input_size() > 2 && !node.input(2).empty()) {
    if (!IsConst(node.input(2))) return NodeError(StatusCode::kNotSupported, node, "training_mode must be a constant");
    TS_ASSIGN_OR_RETURN(const ConstTensor* t, Const(node.input(2)));
    if (!t->data.empty() && t->data[0] != 0)
      return NodeError(StatusCode::kNotSupported, node, "training_mode=true is not supported (inference only)");
  }
  alias_[node.output(0)] = Resolve(node.input(0));
  return Status::OK();
}

Status OnnxModelImporter::TranslateCast(const onnx::NodeProto& node) {
  auto it = infos_.find(Resolve(node.input(0)));
  if (AttrInt(node, "to", 0) == TensorProto::FLOAT && it != infos_.end() &&
      it->second.elem_type == TensorProto::FLOAT) {
    alias_[node.output(0)] = Resolve(node.input(0));  // float -> float: nothing to do
    return Status::OK();
  }
  return NodeError(StatusCode::kNotSupported, node, "casts between element types are not supported (float32 only)");
}

// Concat (attr "axis", made non-negative) and Transpose (attr "perm",
// reversed dims when absent).
Status OnnxModelImporter::TranslateConcatOrTranspose(const onnx::NodeProto& node, const std::string& name) {
  const std::string& op = node.op_type();
  TS_ASSIGN_OR_RETURN(Shape first, StaticShape(node, node.input(0)));
  const int64_t rank = static_cast<int64_t>(first.size());
  std::vector<int> inputs;
  for (const std::string& in : node.input()) {
    TS_ASSIGN_OR_RETURN(int v, InputValue(node, in));
    inputs.push_back(v);
  }
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  Attributes a;
  if (op == "Concat") {
    int64_t axis = AttrInt(node, "axis", 1);  // opset < 4 defaulted to 1
    if (axis < -rank || axis >= rank) return NodeError(StatusCode::kInvalidArgument, node, "axis out of range");
    a.Set("axis", axis < 0 ? axis + rank : axis);
  } else {
    std::vector<int64_t> perm = AttrInts(node, "perm");
    if (perm.empty())
      for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
    a.Set("perm", perm);
  }
  AddNode(name, op, inputs, {y}, std::move(a));
  return Status::OK();
}

Status OnnxModelImporter::ApplyLegacyBroadcast(const onnx::NodeProto& node, const std::string& name, Attributes* a,
                                               std::vector<int>* inputs) {
  // Before opset 7, B broadcast against A from dim `axis` on (not from the
  // right): give a constant B trailing unit dims so that it broadcasts
  // numpy-style like the canonical ops do.
  const Shape a_shape = graph_.values[(*inputs)[0]].shape, b_shape = graph_.values[(*inputs)[1]].shape;
  int64_t axis = a->Int("axis", static_cast<int64_t>(a_shape.size() - b_shape.size()));
  if (axis < 0) axis += static_cast<int64_t>(a_shape.size());
  const int64_t trailing = static_cast<int64_t>(a_shape.size()) - axis - static_cast<int64_t>(b_shape.size());
  if (trailing < 0) return NodeError(StatusCode::kInvalidArgument, node, "broadcast axis out of range");
  if (trailing > 0) {
    if (!graph_.IsConstant((*inputs)[1]))
      return NodeError(StatusCode::kNotSupported, node, "legacy axis broadcasting of a computed B");
    TensorData b = *graph_.ConstantData((*inputs)[1]);
    b.shape.insert(b.shape.end(), trailing, 1);
    (*inputs)[1] = graph_.AddConstant(name + "/B_broadcast", std::move(b));
  }
  a->Erase("broadcast");
  a->Erase("axis");
  return Status::OK();
}

void OnnxModelImporter::MakeLegacyPreluSlopePerChannel(const std::string& name, std::vector<int>* inputs) {
  // Before opset 7 a 1-D slope of length C was per channel (axis 1);
  // since then it broadcasts from the right. Make it [C,1,...,1].
  const Shape x_shape = graph_.values[(*inputs)[0]].shape;
  const TensorData* slope = graph_.ConstantData((*inputs)[1]);
  if (x_shape.size() > 2 && slope->shape.size() == 1 && slope->shape[0] == x_shape[1] && x_shape[1] != 1) {
    TensorData per_channel = *slope;
    per_channel.shape.assign(x_shape.size() - 1, 1);
    per_channel.shape[0] = x_shape[1];
    (*inputs)[1] = graph_.AddConstant(name + "/slope_per_channel", std::move(per_channel));
  }
}

// Ops the kernels run under their ONNX name (PassThroughOps): attributes
// copied, every input a value.
Status OnnxModelImporter::TranslatePassThrough(const onnx::NodeProto& node, const std::string& name) {
  const std::string& op = node.op_type();
  std::string bad_attr;
  Attributes a = CopyAttributes(node, &bad_attr);
  if (!bad_attr.empty())
    return NodeError(StatusCode::kNotSupported, node, "attribute '" + bad_attr + "' has an unsupported type");
  std::vector<int> inputs;
  for (const std::string& in : node.input()) {
    if (in.empty()) return NodeError(StatusCode::kNotSupported, node, "omitted optional inputs are not supported");
    TS_ASSIGN_OR_RETURN(int v, InputValue(node, in));
    inputs.push_back(v);
  }
  if (opset_ < 7 && a.Int("broadcast", 0) != 0 && inputs.size() == 2)
    TS_RETURN_IF_ERROR(ApplyLegacyBroadcast(node, name, &a, &inputs));
  if (op == "PRelu" && opset_ < 7 && inputs.size() == 2 && graph_.IsConstant(inputs[1]))
    MakeLegacyPreluSlopePerChannel(name, &inputs);
  if (graph_.ActivationInputs(Node{"", op, inputs, {}, {}}).empty())
    return NodeError(StatusCode::kNotSupported, node, "all inputs are constant but the op could not be folded");
  TS_ASSIGN_OR_RETURN(int y, OutputValue(node, node.output(0)));
  AddNode(name, op, inputs, {y}, std::move(a));
  return Status::OK();
}

Result<QuantGrid> OnnxModelImporter::GridOf(const onnx::NodeProto& node, bool dequantize) {
  if (node.input_size() < 2 || node.input(1).empty())
    return NodeError(StatusCode::kInvalidArgument, node, "needs a scale (input 1)");
  for (int i = 1; i < 3 && i < node.input_size(); ++i)
    if (!node.input(i).empty() && !IsConst(node.input(i)))
      return NodeError(StatusCode::kNotSupported, node,
                       std::string(i == 1 ? "the scale" : "the zero point") + " must be a constant");
  TS_ASSIGN_OR_RETURN(const ConstTensor* scale, Const(node.input(1)));
  if (scale->data.size() != 1)
    return NodeError(StatusCode::kNotSupported, node,
                     "the scale has " + std::to_string(scale->data.size()) +
                         " values; activations are quantized per tensor (per-axis grids are for constant weights)");
  QuantGrid g;
  g.scale = static_cast<float>(scale->data[0]);
  if (!(g.scale > 0) || !std::isfinite(g.scale))
    return NodeError(StatusCode::kInvalidArgument, node,
                     "the scale must be positive and finite, is " + std::to_string(scale->data[0]));
  int32_t type = TensorProto::UINT8;  // ONNX: no zero point means uint8, zero point 0
  if (node.input_size() > 2 && !node.input(2).empty()) {
    TS_ASSIGN_OR_RETURN(const ConstTensor* zp, Const(node.input(2)));
    if (zp->data.size() != 1)
      return NodeError(StatusCode::kInvalidArgument, node, "the zero point must be a scalar like the scale");
    if (!(zp->data[0] >= -2147483648.0 && zp->data[0] <= 2147483647.0))
      return NodeError(StatusCode::kInvalidArgument, node, "the zero point is out of range");
    g.zero_point = static_cast<int32_t>(zp->data[0]);
    type = zp->elem_type;
  }
  if (dequantize) {
    auto it = infos_.find(Resolve(node.input(0)));
    if (it != infos_.end() && it->second.elem_type != 0) type = it->second.elem_type;
  }
  if (type == TensorProto::INT8) {
    g.qmin = -128, g.qmax = 127;
  } else if (type == TensorProto::UINT8) {
    g.qmin = 0, g.qmax = 255;
  } else {
    return NodeError(StatusCode::kNotSupported, node,
                     "quantizes to " + ElemTypeName(type) + "; activations may be int8 or uint8");
  }
  if (g.zero_point < g.qmin || g.zero_point > g.qmax)
    return NodeError(StatusCode::kInvalidArgument, node,
                     "zero point " + std::to_string(g.zero_point) + " is outside its type's range");
  return g;
}

Status OnnxModelImporter::TranslateQuantize(const onnx::NodeProto& node, const std::string& name) {
  TS_ASSIGN_OR_RETURN(QuantGrid g, GridOf(node, false));
  TS_ASSIGN_OR_RETURN(int x, InputValue(node, node.input(0)));
  const std::string& out = node.output(0);
  if (value_ids_.count(out))
    return NodeError(StatusCode::kInvalidArgument, node, "value '" + out + "' is produced twice");
  TS_ASSIGN_OR_RETURN(Shape shape, StaticShape(node, out));
  // The int8 codes are held as the float32 values they stand for.
  const int y = graph_.AddValue(out, shape);
  value_ids_[out] = y;
  quant_grid_[out] = g;
  Attributes a;
  a.Set("scale", static_cast<double>(g.scale));
  a.Set("zero_point", static_cast<int64_t>(g.zero_point));
  a.Set("qmin", static_cast<int64_t>(g.qmin));
  a.Set("qmax", static_cast<int64_t>(g.qmax));
  AddNode(name, "QuantizeDequantize", {x}, {y}, std::move(a));
  return Status::OK();
}

Status OnnxModelImporter::TranslateDequantize(const onnx::NodeProto& node) {
  const std::string q = Resolve(node.input(0));
  auto it = quant_grid_.find(q);
  if (it == quant_grid_.end())
    return NodeError(StatusCode::kNotSupported, node,
                     "dequantizes '" + q +
                         "', which no QuantizeLinear, QLinearConv or QLinearMatMul of this model produces "
                         "(tessera's graph inputs are float32; quantize them inside the model)");
  TS_ASSIGN_OR_RETURN(QuantGrid g, GridOf(node, true));
  const QuantGrid& has = it->second;
  if (std::fabs(g.scale - has.scale) > 1e-6f * has.scale || g.zero_point != has.zero_point)
    return NodeError(StatusCode::kNotSupported, node,
                     "dequantizes '" + q + "' with scale " + std::to_string(g.scale) + ", zero point " +
                         std::to_string(g.zero_point) + " but it was quantized with scale " +
                         std::to_string(has.scale) + ", zero point " + std::to_string(has.zero_point));
  alias_[node.output(0)] = q;
  return Status::OK();
}

Status OnnxModelImporter::TranslateNode(const onnx::NodeProto& node, int index) {
  TS_RETURN_IF_ERROR(CheckTranslatable(node));
  translating_sources_.clear();
  for (const std::string& in : node.input())
    if (!in.empty()) {
      const Sources s = SourcesOf(Resolve(in));
      translating_sources_.insert(s.begin(), s.end());
    }
  const std::string& op = node.op_type();
  const std::string name = node.name();

  if (op == "Identity" || op == "Dropout") return TranslateIdentity(node);
  if (op == "Cast") return TranslateCast(node);
  if ((op == "Max" || op == "Min" || op == "Sum" || op == "Mean") && node.input_size() == 1) {
    alias_[node.output(0)] = Resolve(node.input(0));
    return Status::OK();
  }
  if (op == "Conv") return TranslateConv(node, name);
  if (op == "ConvTranspose") return TranslateConvTranspose(node, name);
  if (op == "LayerNormalization") return TranslateLayerNorm(node, name);
  if (op == "MaxPool" || op == "AveragePool") return TranslatePool(node, name);
  if (op == "Gemm") return TranslateGemm(node, name);
  if (op == "MatMul") return TranslateMatMul(node, name);
  if (op == "BatchNormalization") return TranslateBatchNorm(node, name);
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze")
    return TranslateReshapeLike(node, name);
  if (op == "Softmax") return TranslateSoftmax(node, name);
  if (op == "Clip") return TranslateClip(node, name);
  if (op == "Pad") return TranslatePad(node, name);
  if (op == "Resize" || op == "Upsample") return TranslateResize(node, name);
  if (op == "Slice") return TranslateSlice(node, name);
  if (op == "Split") return TranslateSplit(node, name);
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin")
    return TranslateReduce(node, name);
  if (op == "Concat" || op == "Transpose") return TranslateConcatOrTranspose(node, name);
  if (op == "QuantizeLinear") return TranslateQuantize(node, name);
  if (op == "DequantizeLinear") return TranslateDequantize(node);
  if (PassThroughOps().count(op)) return TranslatePassThrough(node, name);
  (void)index;
  return NodeError(StatusCode::kNotSupported, node, "operator '" + op + "' is not supported by tessera");
}

Status OnnxModelImporter::BuildGraph() {
  const auto& g = model_.graph();
  graph_.name = std::filesystem::path(origin_).stem().string();
  for (const auto& n : g.node())
    for (const std::string& in : n.input())
      if (!in.empty()) used_names_.insert(in);
  for (const auto& o : g.output()) used_names_.insert(o.name());
  for (const auto& n : g.node()) {
    value_names_.insert(n.input().begin(), n.input().end());
    value_names_.insert(n.output().begin(), n.output().end());
  }
  for (const auto& in : g.input()) value_names_.insert(in.name());
  for (const auto& t : g.initializer()) value_names_.insert(t.name());
  for (const auto& in : g.input()) {
    if (!runtime_inputs_.count(in.name())) continue;
    Shape shape;
    for (const auto& d : in.type().tensor_type().shape().dim()) shape.push_back(d.dim_value());
    const int id = graph_.AddValue(in.name(), shape);
    value_ids_[in.name()] = id;
    graph_.inputs.push_back(id);
  }
  for (int i = 0; i < g.node_size(); ++i) TS_RETURN_IF_ERROR(TranslateNode(g.node(i), i));
  for (const auto& o : g.output()) {
    const std::string name = Resolve(o.name());
    // The output's own type: a DequantizeLinear output is float32 even though
    // it names the int8 value it dequantizes.
    auto info = infos_.find(o.name());
    if (info != infos_.end() && info->second.elem_type != 0 && info->second.elem_type != TensorProto::FLOAT)
      return Status::NotSupported(origin_ + ": output '" + o.name() + "' has element type " +
                                  ElemTypeName(info->second.elem_type) +
                                  "; tessera's outputs are float32 (end a quantized model with DequantizeLinear)");
    auto it = value_ids_.find(name);
    if (it == value_ids_.end() && IsConst(name))
      return Status::NotSupported(origin_ + ": output '" + o.name() +
                                  "' is a constant (computed at import from "
                                  "initializers alone); tessera needs outputs that depend on an input");
    if (it == value_ids_.end() || graph_.IsConstant(it->second))
      return Status::InvalidArgument(origin_ + ": output '" + o.name() + "' is never produced");
    graph_.outputs.push_back(it->second);
  }
  return Status::OK();
}

// Renumbers values so that the Graph holds only the ones nodes or the graph
// boundary refer to (folds and rewrites leave orphans behind).
Status OnnxModelImporter::Compact() {
  graph_.RemoveDeadNodes();
  Graph out;
  out.name = graph_.name;
  std::vector<int> remap(graph_.values.size(), -1);
  auto map = [&](int v) -> int {
    if (v < 0) return v;
    if (remap[v] >= 0) return remap[v];
    const Value& old = graph_.values[v];
    if (old.constant) {
      auto it = graph_.constants.find(v);
      remap[v] = out.AddConstant(old.name, std::move(it->second));
    } else {
      remap[v] = out.AddValue(old.name, old.shape);
    }
    return remap[v];
  };
  for (int v : graph_.inputs) out.inputs.push_back(map(v));
  for (Node& n : graph_.nodes) {
    for (int& v : n.inputs) v = map(v);
    for (int& v : n.outputs) v = map(v);
    out.AddNode(std::move(n));
  }
  for (int v : graph_.outputs) out.outputs.push_back(map(v));
  graph_ = std::move(out);
  return graph_.Validate();
}

Result<Graph> OnnxModelImporter::Import(google::protobuf::io::ZeroCopyInputStream* in) {
  TS_RETURN_IF_ERROR(Parse(in));
  TS_RETURN_IF_ERROR(CheckDroppedPayloads());
  TS_RETURN_IF_ERROR(Check());
  // Before IR 4, shape inference only sees initializers that are also graph
  // inputs; folded constants are not, so lift old models to IR 4 semantics.
  if (model_.ir_version() < 4) model_.set_ir_version(4);
  TS_RETURN_IF_ERROR(ReadOpset());
  TS_RETURN_IF_ERROR(onnx_import::ExpandQLinearOps(&model_, origin_));
  TS_RETURN_IF_ERROR(CheckPositiveAttributes());
  TS_RETURN_IF_ERROR(FixInputShapes());
  {
    // Constant nodes and what depends on them alone need no shapes: fold them
    // first, so weights given as Constant count as initializers below.
    bool changed = false;
    TS_RETURN_IF_ERROR(FoldConstantNodes(&changed));
  }
  TS_RETURN_IF_ERROR(PinConvKernelShapes());
  TS_RETURN_IF_ERROR(CheckGemmOperandRanks());  // after the folds: Constant weights are initializers now
  for (int pass = 0;; ++pass) {
    TS_RETURN_IF_ERROR(RunShapeInference());
    bool changed = false;
    TS_RETURN_IF_ERROR(FoldConstantNodes(&changed));
    if (!changed) break;
    if (pass + 1 >= kMaxFoldPasses) {
      TS_RETURN_IF_ERROR(RunShapeInference());
      break;
    }
  }
  TS_RETURN_IF_ERROR(BuildGraph());
  // The Graph holds its own copy of every weight now; free the protobuf's
  // (Clear() would keep every cleared string's capacity: `tessera run`
  // held the model file's weights twice more through the folds below).
  {
    onnx::ModelProto released;
    model_.Swap(&released);
  }
  const_cache_.clear();
  std::vector<std::pair<std::string, std::string>> folded;
  // Exporters' spelled-out GELU and LayerNorm become one node each (before
  // the producer folds, which must not take a pattern's first op apart).
  const int gelus = FuseGelu(&graph_, &folded), layer_norms = FuseLayerNorm(&graph_, &folded);
  if (gelus + layer_norms > 0) graph_.RemoveDeadNodes();  // the channel fusion counts readers
  const int channel_norms = FuseChannelLayerNorm(&graph_, &folded);
  if (gelus + layer_norms + channel_norms > 0) {
    graph_.RemoveDeadNodes();
    spdlog::debug("{}: fused {} GELU, {} LayerNorm and {} channel LayerNorm subgraphs", origin_, gelus, layer_norms,
                  channel_norms);
  }
  if (const int pads = FoldPadsIntoWindows(&graph_, &folded); pads > 0)
    spdlog::debug("{}: folded {} Pad nodes into the windows that read them", origin_, pads);
  TS_RETURN_IF_ERROR(FoldIntoProducers(&graph_, &folded));
  for (const auto& [consumer, producer] : folded) {
    const Sources s = node_sources_[consumer];
    node_sources_[producer].insert(s.begin(), s.end());
  }
  Status st = Compact();
  if (!st.ok()) return st.WithContext(origin_ + ": ");
  if (options_.values_for_nodes) KeepValuesOnlyFor(*options_.values_for_nodes, &graph_);
  spdlog::debug("{}: imported {} nodes, {} values, {} weights (opset {})", origin_, graph_.nodes.size(),
                graph_.values.size(), graph_.WeightCount(), opset_);
  return std::move(graph_);
}

}  // namespace

namespace {

// Opens the model's bytes as a fresh stream (a values_for_nodes import reads them twice).
using StreamOpener = std::function<Result<std::unique_ptr<google::protobuf::io::ZeroCopyInputStream>>()>;

Result<Graph> ImportWith(const StreamOpener& open, const std::string& origin, const ImportOptions& options) {
  if (!options.values_for_nodes || options.shapes_only) {
    OnnxModelImporter importer(origin, options);
    TS_ASSIGN_OR_RETURN(auto in, open());
    return importer.Import(in.get());
  }
  // Values for some nodes only: a shapes-only pass learns which initializers
  // their weights come from; the second pass reads just those payloads.
  ImportOptions shapes = options;
  shapes.shapes_only = true;
  shapes.values_for_nodes.reset();
  OnnxModelImporter first(origin, shapes);
  TS_ASSIGN_OR_RETURN(auto in1, open());
  TS_RETURN_IF_ERROR(first.Import(in1.get()).status());
  std::set<std::string> keep;
  for (const std::string& node : *options.values_for_nodes)
    if (auto it = first.node_sources().find(node); it != first.node_sources().end())
      keep.insert(it->second.begin(), it->second.end());
  OnnxModelImporter second(origin, options);
  second.KeepPayloadsOf(&keep);
  TS_ASSIGN_OR_RETURN(auto in2, open());
  return second.Import(in2.get());
}

Result<Graph> RunImporter(const StreamOpener& open, const std::string& origin, const ImportOptions& options) {
  try {
    return ImportWith(open, origin, options);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(origin + ": out of memory while importing (a tensor's dims are too large?)");
  } catch (const std::exception& e) {
    // The ONNX library reports some malformed models by throwing from places
    // the importer does not wrap one by one.
    return Status::InvalidArgument(origin + ": not a valid ONNX model: " + e.what());
  }
}

}  // namespace

Result<Graph> ImportOnnxBytes(const std::string& bytes, const std::string& origin, const ImportOptions& options) {
  // Checked before the int cast below (protobuf's streams take int sizes).
  TS_RETURN_IF_ERROR(CheckModelSize(bytes.size(), origin));
  StreamOpener open = [&]() -> Result<std::unique_ptr<google::protobuf::io::ZeroCopyInputStream>> {
    return std::unique_ptr<google::protobuf::io::ZeroCopyInputStream>(
        std::make_unique<google::protobuf::io::ArrayInputStream>(bytes.data(), static_cast<int>(bytes.size())));
  };
  return RunImporter(open, origin, options);
}

Result<Graph> ImportOnnx(const std::string& path, const ImportOptions& options) {
  // Parsed straight from the file: a large model is not held twice, and
  // the weights a shapes-only import drops are seeked past, never read.
  StreamOpener open = [&]() -> Result<std::unique_ptr<google::protobuf::io::ZeroCopyInputStream>> {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, path);
    auto in = std::make_unique<google::protobuf::io::FileInputStream>(fd);
    in->SetCloseOnDelete(true);
    return std::unique_ptr<google::protobuf::io::ZeroCopyInputStream>(std::move(in));
  };
  return RunImporter(open, path, options);
}

}  // namespace tessera
