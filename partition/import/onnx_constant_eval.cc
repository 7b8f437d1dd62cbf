#include "partition/import/onnx_constant_eval.h"

#include "partition/graph/quantization.h"

#include "util/limits.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

namespace tessera::onnx_import {
namespace {

using onnx::TensorProto;

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

bool IsIntegerType(int32_t t) {
  switch (t) {
    case TensorProto::INT8:
    case TensorProto::INT16:
    case TensorProto::INT32:
    case TensorProto::INT64:
    case TensorProto::UINT8:
    case TensorProto::UINT16:
    case TensorProto::UINT32:
    case TensorProto::UINT64:
    case TensorProto::BOOL:
      return true;
    default:
      return false;
  }
}

// Rounds a computed value to what the element type can hold.
double Narrow(double v, int32_t type) {
  if (type == TensorProto::BOOL) return v != 0.0 ? 1.0 : 0.0;
  if (IsIntegerType(type)) return std::trunc(v);
  if (type == TensorProto::FLOAT || type == TensorProto::FLOAT16 || type == TensorProto::BFLOAT16)
    return static_cast<double>(static_cast<float>(v));
  return v;
}

Status Invalid(const onnx::NodeProto& node, const std::string& what) {
  return Status::InvalidArgument(node.op_type() + ": " + what);
}

Result<int64_t> NormalizeAxis(const onnx::NodeProto& node, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return Invalid(node, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Result<Shape> BroadcastShapes(const onnx::NodeProto& node, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1)
        o = d;
      else
        return Invalid(node, "shapes " + ShapeToString(s) + " and " + ShapeToString(out) + " do not broadcast");
    }
  }
  return out;
}

// Offset into `in` (of shape in_shape, right-aligned against out) of the
// output element with multi-index `idx`.
int64_t BroadcastOffset(const Shape& in_shape, const std::vector<int64_t>& in_strides,
                        const std::vector<int64_t>& idx) {
  const size_t lead = idx.size() - in_shape.size();
  int64_t off = 0;
  for (size_t i = 0; i < in_shape.size(); ++i)
    if (in_shape[i] != 1) off += idx[lead + i] * in_strides[i];
  return off;
}

// Calls f(out_index, multi_index) for every element of `shape`.
void ForEachIndex(const Shape& shape, const std::function<void(int64_t, const std::vector<int64_t>&)>& f) {
  const int64_t n = NumElements(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    f(k, idx);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Folding makes constants that live in the Graph; a file asking for more
// than this (ConstantOfShape of a huge shape, ...) keeps the node instead.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 26;

Status CheckFoldSize(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status::InvalidArgument("negative dimension");
    if (d != 0 && n > kMaxFoldedElements / d) return Status::NotSupported("result too large to fold at import");
    n *= d;
  }
  return Status::OK();
}

Result<ConstTensor> Elementwise(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in,
                                int32_t out_type, const std::function<double(const std::vector<double>&)>& f) {
  std::vector<Shape> shapes;
  for (const ConstTensor* t : in) {
    if (t == nullptr) return Invalid(node, "missing input");
    shapes.push_back(t->dims);
  }
  TS_ASSIGN_OR_RETURN(Shape out_shape, BroadcastShapes(node, shapes));
  TS_RETURN_IF_ERROR(CheckFoldSize(out_shape));
  ConstTensor out;
  out.elem_type = out_type;
  out.dims = out_shape;
  out.data.resize(static_cast<size_t>(NumElements(out_shape)));
  std::vector<std::vector<int64_t>> strides;
  for (const ConstTensor* t : in) strides.push_back(RowMajorStrides(t->dims));
  std::vector<double> args(in.size());
  ForEachIndex(out_shape, [&](int64_t k, const std::vector<int64_t>& idx) {
    for (size_t i = 0; i < in.size(); ++i) args[i] = in[i]->data[BroadcastOffset(in[i]->dims, strides[i], idx)];
    out.data[k] = Narrow(f(args), out_type);
  });
  return out;
}

const std::set<std::string>& EvaluableOps() {
  static const std::set<std::string> ops = {"Constant",
                                            "Identity",
                                            "Dropout",
                                            "Cast",
                                            "CastLike",
                                            "Neg",
                                            "Abs",
                                            "Sqrt",
                                            "Floor",
                                            "Ceil",
                                            "Reciprocal",
                                            "Exp",
                                            "Log",
                                            "Relu",
                                            "Sigmoid",
                                            "Tanh",
                                            "Not",
                                            "Sign",
                                            "Add",
                                            "Sub",
                                            "Mul",
                                            "Div",
                                            "Pow",
                                            "Mod",
                                            "Equal",
                                            "Less",
                                            "Greater",
                                            "LessOrEqual",
                                            "GreaterOrEqual",
                                            "And",
                                            "Or",
                                            "Xor",
                                            "Max",
                                            "Min",
                                            "Sum",
                                            "Mean",
                                            "Where",
                                            "Gather",
                                            "Unsqueeze",
                                            "Squeeze",
                                            "Reshape",
                                            "Flatten",
                                            "Concat",
                                            "Slice",
                                            "Transpose",
                                            "ConstantOfShape",
                                            "Range",
                                            "Expand",
                                            "Tile",
                                            "ReduceProd",
                                            "ReduceSum",
                                            "ReduceMin",
                                            "ReduceMax",
                                            "ReduceMean",
                                            "DequantizeLinear",
                                            "QuantizeLinear"};
  return ops;
}

Result<ConstTensor> EvalConstantAttr(const onnx::NodeProto& node) {
  for (const auto& a : node.attribute()) {
    ConstTensor c;
    if (a.name() == "value") return ReadConstTensor(a.t());
    if (a.name() == "value_float") {
      c.elem_type = TensorProto::FLOAT;
      c.data = {a.f()};
      return c;
    }
    if (a.name() == "value_floats") {
      c.elem_type = TensorProto::FLOAT;
      c.dims = {a.floats_size()};
      c.data.assign(a.floats().begin(), a.floats().end());
      return c;
    }
    if (a.name() == "value_int") {
      c.elem_type = TensorProto::INT64;
      c.data = {static_cast<double>(a.i())};
      return c;
    }
    if (a.name() == "value_ints") {
      c.elem_type = TensorProto::INT64;
      c.dims = {a.ints_size()};
      for (int64_t v : a.ints()) c.data.push_back(static_cast<double>(v));
      return c;
    }
  }
  return Status::NotSupported("Constant: only dense numeric values are supported (no sparse_value or strings)");
}

Result<ConstTensor> Transpose(const onnx::NodeProto& node, const ConstTensor& x) {
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::vector<int64_t> perm = AttrInts(node, "perm");
  if (perm.empty())
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != rank) return Invalid(node, "perm length does not match rank");
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return Invalid(node, "perm is not a permutation");
    seen[p] = true;
  }
  ConstTensor out;
  out.elem_type = x.elem_type;
  for (int64_t p : perm) out.dims.push_back(x.dims[p]);
  out.data.resize(x.data.size());
  auto in_strides = RowMajorStrides(x.dims);
  ForEachIndex(out.dims, [&](int64_t k, const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (int64_t i = 0; i < rank; ++i) off += idx[i] * in_strides[perm[i]];
    out.data[k] = x.data[off];
  });
  return out;
}

Result<ConstTensor> Gather(const onnx::NodeProto& node, const ConstTensor& data, const ConstTensor& indices) {
  const int64_t rank = static_cast<int64_t>(data.dims.size());
  if (rank == 0) return Invalid(node, "data must have rank >= 1");
  TS_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, AttrInt(node, "axis", 0), rank));
  ConstTensor out;
  out.elem_type = data.elem_type;
  out.dims.assign(data.dims.begin(), data.dims.begin() + axis);
  out.dims.insert(out.dims.end(), indices.dims.begin(), indices.dims.end());
  out.dims.insert(out.dims.end(), data.dims.begin() + axis + 1, data.dims.end());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= data.dims[i];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= data.dims[i];
  const int64_t n_axis = data.dims[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (double iv : indices.data) {
      int64_t j = static_cast<int64_t>(iv);
      if (j < 0) j += n_axis;
      if (j < 0 || j >= n_axis)
        return Invalid(node, "index " + std::to_string(static_cast<int64_t>(iv)) + " out of range");
      for (int64_t i = 0; i < inner; ++i) out.data.push_back(data.data[(o * n_axis + j) * inner + i]);
    }
  return out;
}

Result<ConstTensor> Concat(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  if (in.empty() || in[0] == nullptr) return Invalid(node, "no inputs");
  const int64_t rank = static_cast<int64_t>(in[0]->dims.size());
  TS_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, AttrInt(node, "axis", 0), rank));
  ConstTensor out;
  out.elem_type = in[0]->elem_type;
  out.dims = in[0]->dims;
  out.dims[axis] = 0;
  for (const ConstTensor* t : in) {
    if (t == nullptr || static_cast<int64_t>(t->dims.size()) != rank) return Invalid(node, "inputs differ in rank");
    for (int64_t i = 0; i < rank; ++i)
      if (i != axis && t->dims[i] != in[0]->dims[i]) return Invalid(node, "inputs differ outside the axis");
    out.dims[axis] += t->dims[axis];
  }
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= out.dims[i];
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor* t : in) {
      const int64_t chunk = NumElements(t->dims) / std::max<int64_t>(outer, 1);
      out.data.insert(out.data.end(), t->data.begin() + o * chunk, t->data.begin() + (o + 1) * chunk);
    }
  return out;
}

Result<ConstTensor> Slice(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in, int64_t opset) {
  const ConstTensor& x = *in[0];
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset < 10) {
    starts = AttrInts(node, "starts");
    ends = AttrInts(node, "ends");
    axes = AttrInts(node, "axes");
  } else {
    if (in.size() < 3 || !in[1] || !in[2]) return Invalid(node, "starts and ends are required");
    starts = in[1]->Ints();
    ends = in[2]->Ints();
    if (in.size() > 3 && in[3]) axes = in[3]->Ints();
    if (in.size() > 4 && in[4]) steps = in[4]->Ints();
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return Invalid(node, "starts/ends/axes/steps differ in length");
  std::vector<int64_t> begin(rank, 0), step(rank, 1), count(x.dims.begin(), x.dims.end());
  for (size_t i = 0; i < starts.size(); ++i) {
    TS_ASSIGN_OR_RETURN(int64_t a, NormalizeAxis(node, axes[i], rank));
    const int64_t dim = x.dims[a], s = steps[i];
    if (s == 0) return Invalid(node, "step 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0 && e > std::numeric_limits<int64_t>::min() / 2) e += dim;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      count[a] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      count[a] = b > e ? (b - e + (-s) - 1) / (-s) : 0;
    }
    begin[a] = b;
    step[a] = s;
  }
  ConstTensor out;
  out.elem_type = x.elem_type;
  out.dims = count;
  out.data.resize(static_cast<size_t>(NumElements(count)));
  auto strides = RowMajorStrides(x.dims);
  ForEachIndex(out.dims, [&](int64_t k, const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (int64_t i = 0; i < rank; ++i) off += (begin[i] + idx[i] * step[i]) * strides[i];
    out.data[k] = x.data[off];
  });
  return out;
}

Result<std::vector<int64_t>> AxesOf(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in,
                                    bool axes_as_input) {
  if (axes_as_input) {
    if (in.size() > 1 && in[1] != nullptr) return in[1]->Ints();
    return std::vector<int64_t>{};
  }
  return AttrInts(node, "axes");
}

Result<ConstTensor> Reduce(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in, int64_t opset) {
  const ConstTensor& x = *in[0];
  const std::string& op = node.op_type();
  const bool axes_input = (op == "ReduceSum" && opset >= 13) || opset >= 18;
  TS_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(node, in, axes_input));
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::vector<bool> reduce(rank, axes.empty() && AttrInt(node, "noop_with_empty_axes", 0) == 0);
  for (int64_t a : axes) {
    TS_ASSIGN_OR_RETURN(int64_t n, NormalizeAxis(node, a, rank));
    reduce[n] = true;
  }
  const bool keep = AttrInt(node, "keepdims", 1) != 0;
  Shape kept_shape;  // rank-preserving shape of the result
  for (int64_t i = 0; i < rank; ++i) kept_shape.push_back(reduce[i] ? 1 : x.dims[i]);
  ConstTensor out;
  out.elem_type = x.elem_type;
  const double init = op == "ReduceProd"  ? 1.0
                      : op == "ReduceMin" ? std::numeric_limits<double>::infinity()
                      : op == "ReduceMax" ? -std::numeric_limits<double>::infinity()
                                          : 0.0;
  out.data.assign(static_cast<size_t>(NumElements(kept_shape)), init);
  auto out_strides = RowMajorStrides(kept_shape);
  ForEachIndex(x.dims, [&](int64_t k, const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (int64_t i = 0; i < rank; ++i)
      if (!reduce[i]) off += idx[i] * out_strides[i];
    double& acc = out.data[off];
    const double v = x.data[k];
    if (op == "ReduceProd")
      acc *= v;
    else if (op == "ReduceMin")
      acc = std::min(acc, v);
    else if (op == "ReduceMax")
      acc = std::max(acc, v);
    else
      acc += v;
  });
  if (op == "ReduceMean") {
    const double n =
        static_cast<double>(NumElements(x.dims)) / std::max<double>(1.0, static_cast<double>(out.data.size()));
    for (double& v : out.data) v /= n;
  }
  for (double& v : out.data) v = Narrow(v, out.elem_type);
  for (int64_t i = 0; i < rank; ++i)
    if (keep || !reduce[i]) out.dims.push_back(kept_shape[i]);
  return out;
}

double Binary(const std::string& op, double a, double b, bool integer) {
  if (op == "Add" || op == "Sum") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return integer ? (b == 0 ? 0 : std::trunc(a / b)) : a / b;
  if (op == "Pow") return std::pow(a, b);
  if (op == "Mod") return integer ? (b == 0 ? 0 : a - b * std::floor(a / b)) : std::fmod(a, b);
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "Greater") return a > b;
  if (op == "LessOrEqual") return a <= b;
  if (op == "GreaterOrEqual") return a >= b;
  if (op == "And") return (a != 0) && (b != 0);
  if (op == "Or") return (a != 0) || (b != 0);
  if (op == "Xor") return (a != 0) != (b != 0);
  if (op == "Max") return std::max(a, b);
  if (op == "Min") return std::min(a, b);
  return 0;
}

double Unary(const std::string& op, double x) {
  if (op == "Neg") return -x;
  if (op == "Abs") return std::fabs(x);
  if (op == "Sqrt") return std::sqrt(x);
  if (op == "Floor") return std::floor(x);
  if (op == "Ceil") return std::ceil(x);
  if (op == "Reciprocal") return 1.0 / x;
  if (op == "Exp") return std::exp(x);
  if (op == "Log") return std::log(x);
  if (op == "Relu") return std::max(x, 0.0);
  if (op == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
  if (op == "Tanh") return std::tanh(x);
  if (op == "Not") return x == 0;
  if (op == "Sign") return (x > 0) - (x < 0);
  return x;
}

const std::set<std::string>& UnaryOps() {
  static const std::set<std::string> ops = {"Neg", "Abs",  "Sqrt",    "Floor", "Ceil", "Reciprocal", "Exp",
                                            "Log", "Relu", "Sigmoid", "Tanh",  "Not",  "Sign"};
  return ops;
}

// Comparisons and logic ops: their result is BOOL whatever the input type.
const std::set<std::string>& CompareOps() {
  static const std::set<std::string> ops = {"Equal",          "Less", "Greater", "LessOrEqual",
                                            "GreaterOrEqual", "And",  "Or",      "Xor"};
  return ops;
}

const std::set<std::string>& ArithmeticOps() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Mod"};
  return ops;
}

// The one result of a single-output op as the list EvaluateConstantNode returns.
// One tensor as a node's outputs, moved: a braced list would copy it (its
// elements are const), a whole folded weight once more.
std::vector<ConstTensor> OneOutput(ConstTensor t) {
  std::vector<ConstTensor> out;
  out.push_back(std::move(t));
  return out;
}

Result<std::vector<ConstTensor>> SingleOutput(Result<ConstTensor> r) {
  if (!r.ok()) return r.status();
  return OneOutput(std::move(r).value());
}

// The first `n` inputs are present.
Status RequireInputs(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in, size_t n) {
  if (in.size() < n) return Invalid(node, "expects " + std::to_string(n) + " inputs");
  for (size_t i = 0; i < n; ++i)
    if (in[i] == nullptr) return Invalid(node, "input " + std::to_string(i) + " is missing");
  return Status::OK();
}

// Identity, and Dropout at inference (its mask output cannot be folded).
Result<std::vector<ConstTensor>> FoldIdentity(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
  if (node.output_size() > 1 && !node.output(1).empty())
    return Status::NotSupported("Dropout: the mask output is not supported");
  return std::vector<ConstTensor>{*in[0]};
}

// Cast (type from attribute "to") and CastLike (type of input 1).
Result<std::vector<ConstTensor>> FoldCast(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  const std::string& op = node.op_type();
  TS_RETURN_IF_ERROR(RequireInputs(node, in, op == "Cast" ? 1 : 2));
  ConstTensor out = *in[0];
  out.elem_type = op == "Cast" ? static_cast<int32_t>(AttrInt(node, "to", TensorProto::FLOAT)) : in[1]->elem_type;
  if (out.elem_type == TensorProto::STRING || out.elem_type == TensorProto::UNDEFINED)
    return Status::NotSupported("Cast: to string/undefined is not supported");
  for (double& v : out.data) v = Narrow(v, out.elem_type);
  return OneOutput(std::move(out));
}

Result<std::vector<ConstTensor>> FoldUnary(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const std::string& op = node.op_type();
  const int32_t type = in[0]->elem_type;
  return SingleOutput(Elementwise(node, {in[0]}, type, [&](const std::vector<double>& a) { return Unary(op, a[0]); }));
}

// Arithmetic and comparison ops with numpy broadcasting.
Result<std::vector<ConstTensor>> FoldBinary(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const std::string& op = node.op_type();
  const int32_t type = CompareOps().count(op) ? static_cast<int32_t>(TensorProto::BOOL) : in[0]->elem_type;
  const bool integer = IsIntegerType(in[0]->elem_type);
  return SingleOutput(Elementwise(node, {in[0], in[1]}, type,
                                  [&](const std::vector<double>& a) { return Binary(op, a[0], a[1], integer); }));
}

// Max, Min, Sum, Mean over any number of inputs.
Result<std::vector<ConstTensor>> FoldVariadic(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const std::string& op = node.op_type();
  std::vector<const ConstTensor*> args(in.begin(), in.end());
  const bool integer = IsIntegerType(in[0]->elem_type);
  return SingleOutput(Elementwise(node, args, in[0]->elem_type, [&](const std::vector<double>& a) {
    double acc = a[0];
    for (size_t i = 1; i < a.size(); ++i) acc = Binary(op == "Mean" ? "Sum" : op, acc, a[i], integer);
    return op == "Mean" ? acc / static_cast<double>(a.size()) : acc;
  }));
}

Result<std::vector<ConstTensor>> FoldWhere(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 3));
  return SingleOutput(Elementwise(node, {in[0], in[1], in[2]}, in[1]->elem_type,
                                  [](const std::vector<double>& a) { return a[0] != 0 ? a[1] : a[2]; }));
}

// Unsqueeze: `axes` index the result; each becomes a new dim of 1.
Result<Shape> UnsqueezedDims(const onnx::NodeProto& node, const Shape& in_dims, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(in_dims.size() + axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    TS_ASSIGN_OR_RETURN(int64_t n, NormalizeAxis(node, a, rank));
    inserted[n] = true;
  }
  Shape dims;
  size_t j = 0;
  for (int64_t i = 0; i < rank; ++i) dims.push_back(inserted[i] ? 1 : in_dims.at(j++));
  return dims;
}

// Squeeze: drops the listed dims (each must be 1), or every 1 when none are listed.
Result<Shape> SqueezedDims(const onnx::NodeProto& node, const Shape& in_dims, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(in_dims.size());
  std::vector<bool> removed(rank, axes.empty());
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) removed[i] = in_dims[i] == 1;
  for (int64_t a : axes) {
    TS_ASSIGN_OR_RETURN(int64_t n, NormalizeAxis(node, a, rank));
    if (in_dims[n] != 1) return Invalid(node, "squeezed axis is not 1");
    removed[n] = true;
  }
  Shape dims;
  for (int64_t i = 0; i < rank; ++i)
    if (!removed[i]) dims.push_back(in_dims[i]);
  return dims;
}

Result<std::vector<ConstTensor>> FoldSqueezeOrUnsqueeze(const onnx::NodeProto& node,
                                                        const std::vector<const ConstTensor*>& in, int64_t opset) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
  TS_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(node, in, opset >= 13));
  ConstTensor out = *in[0];
  if (node.op_type() == "Unsqueeze") {
    TS_ASSIGN_OR_RETURN(out.dims, UnsqueezedDims(node, out.dims, axes));
  } else {
    TS_ASSIGN_OR_RETURN(out.dims, SqueezedDims(node, out.dims, axes));
  }
  return OneOutput(std::move(out));
}

// Reshape: target shape from attribute "shape" before opset 5, from input 1 since.
Result<std::vector<ConstTensor>> FoldReshape(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in,
                                             int64_t opset) {
  std::vector<int64_t> target;
  if (opset < 5) {
    TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
    target = AttrInts(node, "shape");
  } else {
    TS_RETURN_IF_ERROR(RequireInputs(node, in, 2));
    target = in[1]->Ints();
  }
  TS_ASSIGN_OR_RETURN(Shape dims, ResolveReshape(in[0]->dims, target, AttrInt(node, "allowzero", 0) != 0));
  ConstTensor out = *in[0];
  out.dims = dims;
  return OneOutput(std::move(out));
}

Result<std::vector<ConstTensor>> FoldFlatten(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
  const int64_t rank = static_cast<int64_t>(in[0]->dims.size());
  int64_t axis = AttrInt(node, "axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) return Invalid(node, "axis out of range");
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= in[0]->dims[i];
  ConstTensor out = *in[0];
  out.dims = {outer, outer == 0 ? 0 : NumElements(in[0]->dims) / outer};
  return OneOutput(std::move(out));
}

Result<std::vector<ConstTensor>> FoldConstantOfShape(const onnx::NodeProto& node,
                                                     const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
  ConstTensor out;
  out.elem_type = TensorProto::FLOAT;
  double fill = 0.0;
  if (const auto* a = FindAttribute(node, "value")) {
    TS_ASSIGN_OR_RETURN(ConstTensor v, ReadConstTensor(a->t()));
    if (v.data.size() != 1) return Invalid(node, "value must hold one element");
    out.elem_type = v.elem_type;
    fill = v.data[0];
  }
  out.dims = in[0]->Ints();
  TS_RETURN_IF_ERROR(CheckFoldSize(out.dims));
  out.data.assign(static_cast<size_t>(NumElements(out.dims)), fill);
  return OneOutput(std::move(out));
}

Result<std::vector<ConstTensor>> FoldRange(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 3));
  const double start = in[0]->data.at(0), limit = in[1]->data.at(0), delta = in[2]->data.at(0);
  if (delta == 0) return Invalid(node, "delta 0");
  const double count = std::ceil((limit - start) / delta);  // may be inf or NaN: checked before the cast
  if (!(count <= static_cast<double>(int64_t{1} << 24)))
    return Status::NotSupported("Range: too many elements to fold");
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
  ConstTensor out;
  out.elem_type = in[0]->elem_type;
  out.dims = {n};
  for (int64_t i = 0; i < n; ++i) out.data.push_back(Narrow(start + static_cast<double>(i) * delta, out.elem_type));
  return OneOutput(std::move(out));
}

Result<std::vector<ConstTensor>> FoldExpand(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 2));
  ConstTensor shape_as_tensor;
  shape_as_tensor.dims = in[1]->Ints();
  TS_RETURN_IF_ERROR(CheckFoldSize(shape_as_tensor.dims));
  // Broadcast against a tensor of the requested shape whose values are unused.
  shape_as_tensor.data.assign(static_cast<size_t>(NumElements(shape_as_tensor.dims)), 0.0);
  return SingleOutput(Elementwise(node, {in[0], &shape_as_tensor}, in[0]->elem_type,
                                  [](const std::vector<double>& a) { return a[0]; }));
}

Result<std::vector<ConstTensor>> FoldTile(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const ConstTensor& x = *in[0];
  std::vector<int64_t> reps = in[1]->Ints();
  if (reps.size() != x.dims.size()) return Invalid(node, "repeats length does not match rank");
  ConstTensor out;
  out.elem_type = x.elem_type;
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0) return Invalid(node, "negative repeat");
    if (reps[i] > kMaxFoldedElements) return Status::NotSupported("Tile: too large to fold");
    out.dims.push_back(x.dims[i] * reps[i]);
  }
  TS_RETURN_IF_ERROR(CheckFoldSize(out.dims));
  out.data.resize(static_cast<size_t>(NumElements(out.dims)));
  auto strides = RowMajorStrides(x.dims);
  ForEachIndex(out.dims, [&](int64_t k, const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += (idx[i] % x.dims[i]) * strides[i];
    out.data[k] = x.data[off];
  });
  return OneOutput(std::move(out));
}

}  // namespace

const onnx::AttributeProto* FindAttribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t AttrInt(const onnx::NodeProto& node, const std::string& name, int64_t def) {
  const auto* a = FindAttribute(node, name);
  return a ? a->i() : def;
}

float AttrFloat(const onnx::NodeProto& node, const std::string& name, float def) {
  const auto* a = FindAttribute(node, name);
  return a ? a->f() : def;
}

std::string AttrString(const onnx::NodeProto& node, const std::string& name, const std::string& def) {
  const auto* a = FindAttribute(node, name);
  return a ? a->s() : def;
}

std::vector<int64_t> AttrInts(const onnx::NodeProto& node, const std::string& name, std::vector<int64_t> def) {
  const auto* a = FindAttribute(node, name);
  if (!a) return def;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<float> AttrFloats(const onnx::NodeProto& node, const std::string& name, std::vector<float> def) {
  const auto* a = FindAttribute(node, name);
  if (!a) return def;
  return std::vector<float>(a->floats().begin(), a->floats().end());
}

bool IsConstantEvaluable(const std::string& op_type) { return EvaluableOps().count(op_type) != 0; }

Result<Shape> ResolveReshape(const Shape& input, const std::vector<int64_t>& target, bool allowzero) {
  Shape out(target.begin(), target.end());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && !allowzero) {
      if (i >= input.size())
        return Status::InvalidArgument("Reshape: target " + ShapeToString(target) + " copies dim " + std::to_string(i) +
                                       " that input " + ShapeToString(input) + " lacks");
      out[i] = input[i];
    }
    if (out[i] == -1) {
      if (infer >= 0) return Status::InvalidArgument("Reshape: target " + ShapeToString(target) + " has two -1");
      infer = static_cast<int>(i);
      continue;
    }
    if (out[i] < 0) return Status::InvalidArgument("Reshape: negative dim in target " + ShapeToString(target));
    // known * out[i] > limit, tested without computing the product.
    if (out[i] > 0 && out[i] > kMaxTensorElements / std::max<int64_t>(known, 1))
      return Status::InvalidArgument("Reshape: target " + ShapeToString(target) + " has more than " +
                                     std::to_string(kMaxTensorElements) +
                                     " elements (tessera's limit per tensor, util/limits.h)");
    known *= out[i];
  }
  const int64_t total = NumElements(input);
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      return Status::InvalidArgument("Reshape: cannot infer -1 in " + ShapeToString(target) + " from input " +
                                     ShapeToString(input));
    out[infer] = total / known;
  } else if (known != total) {
    return Status::InvalidArgument("Reshape: target " + ShapeToString(target) + " does not hold the " +
                                   std::to_string(total) + " values of input " + ShapeToString(input));
  }
  return out;
}

// DequantizeLinear / QuantizeLinear of constants (issue 16 item 1): a QDQ
// model's int8 weights and int32 biases become float32 weights at import.
// Scale and zero point are scalars or 1-D along `axis` (default 1, opset 13+);
// arithmetic in float32 and rounding as quantization.h. The `count` values
// of the input (dims, element type x_type) come from get(k); put(k, v)
// stores each result; *out_type is the output's element type.
template <typename Get, typename Put>
Status QuantizeLinearValues(const onnx::NodeProto& node, const Shape& dims, int32_t x_type, size_t count,
                            const ConstTensor& scale, const ConstTensor* zp, Get get, Put put, int32_t* out_type) {
  const bool dequantize = node.op_type() == "DequantizeLinear";
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t axis = -1;  // per tensor
  if (scale.data.size() != 1) {
    if (scale.dims.size() != 1) return Invalid(node, "scale must be a scalar or 1-D");
    TS_ASSIGN_OR_RETURN(axis, NormalizeAxis(node, AttrInt(node, "axis", 1), rank));
    if (dims[axis] != scale.dims[0])
      return Invalid(node, "scale has " + std::to_string(scale.dims[0]) + " values but axis " + std::to_string(axis) +
                               " has " + std::to_string(dims[axis]));
  }
  if (zp != nullptr && zp->data.size() != scale.data.size())
    return Invalid(node, "zero point and scale have different sizes");
  int32_t qtype = zp != nullptr ? zp->elem_type : static_cast<int32_t>(TensorProto::UINT8);
  if (dequantize) qtype = x_type;
  QuantGrid g;
  switch (qtype) {
    case TensorProto::INT8:
      g.qmin = -128, g.qmax = 127;
      break;
    case TensorProto::UINT8:
      g.qmin = 0, g.qmax = 255;
      break;
    case TensorProto::INT32:
      if (!dequantize) return Status::NotSupported("QuantizeLinear: to int32 is not evaluated at import");
      break;
    default:
      return Status::NotSupported(node.op_type() + ": element type " + ElemTypeName(qtype) +
                                  " (int8, uint8 and int32 biases are supported)");
  }
  int64_t inner = 1;
  for (int64_t i = axis + 1; axis >= 0 && i < rank; ++i) inner *= dims[i];
  const int64_t channels = axis >= 0 ? dims[axis] : 1;
  *out_type = dequantize ? static_cast<int32_t>(TensorProto::FLOAT) : qtype;
  for (size_t k = 0; k < count; ++k) {
    const size_t c = axis >= 0 ? static_cast<size_t>((static_cast<int64_t>(k) / inner) % channels) : 0;
    g.scale = static_cast<float>(scale.data[c]);
    const double z = zp != nullptr ? zp->data[c] : 0.0;
    if (!(z >= -2147483648.0 && z <= 2147483647.0)) return Invalid(node, "zero point out of range");
    g.zero_point = static_cast<int32_t>(z);
    if (!(g.scale > 0) || !std::isfinite(g.scale)) return Invalid(node, "scale must be positive and finite");
    const double x = get(k);
    put(k, dequantize ? DequantizeCode(static_cast<int32_t>(x), g) : QuantizeToCode(static_cast<float>(x), g));
  }
  return Status::OK();
}

Result<std::vector<ConstTensor>> FoldQuantizeLinear(const onnx::NodeProto& node,
                                                    const std::vector<const ConstTensor*>& in) {
  TS_RETURN_IF_ERROR(RequireInputs(node, in, 2));
  const ConstTensor& x = *in[0];
  ConstTensor out;
  out.dims = x.dims;
  out.data.resize(x.data.size());
  TS_RETURN_IF_ERROR(QuantizeLinearValues(
      node, x.dims, x.elem_type, x.data.size(), *in[1], in.size() > 2 ? in[2] : nullptr,
      [&](size_t k) { return x.data[k]; }, [&](size_t k, double v) { out.data[k] = v; }, &out.elem_type));
  return OneOutput(std::move(out));
}

Result<onnx::TensorProto> DequantizeWeight(const onnx::NodeProto& node, const onnx::TensorProto& x,
                                           const ConstTensor& scale, const ConstTensor* zp, const std::string& out) {
  if (x.data_type() != TensorProto::INT8 && x.data_type() != TensorProto::UINT8)
    return Status::NotSupported("DequantizeWeight: int8 and uint8 weights only");
  TS_ASSIGN_OR_RETURN(std::vector<float> v, ReadFloats(x));  // exact: 8-bit codes
  const Shape dims(x.dims().begin(), x.dims().end());
  int32_t type = 0;
  TS_RETURN_IF_ERROR(QuantizeLinearValues(
      node, dims, x.data_type(), v.size(), scale, zp, [&](size_t k) { return static_cast<double>(v[k]); },
      [&](size_t k, double r) { v[k] = static_cast<float>(r); }, &type));
  onnx::TensorProto t;
  t.set_name(out);
  for (int64_t d : dims) t.add_dims(d);
  t.set_data_type(TensorProto::FLOAT);
  t.mutable_float_data()->Reserve(static_cast<int>(v.size()));
  t.mutable_float_data()->Add(v.begin(), v.end());
  return t;
}

Result<std::vector<ConstTensor>> EvaluateConstantNode(const onnx::NodeProto& node,
                                                      const std::vector<const ConstTensor*>& in, int64_t opset) {
  const std::string& op = node.op_type();
  if (op == "Constant") return SingleOutput(EvalConstantAttr(node));
  if (op == "Identity" || op == "Dropout") return FoldIdentity(node, in);
  if (op == "Cast" || op == "CastLike") return FoldCast(node, in);
  if (UnaryOps().count(op)) return FoldUnary(node, in);
  if (CompareOps().count(op) || ArithmeticOps().count(op)) return FoldBinary(node, in);
  if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") return FoldVariadic(node, in);
  if (op == "Where") return FoldWhere(node, in);
  if (op == "Gather") {
    TS_RETURN_IF_ERROR(RequireInputs(node, in, 2));
    return SingleOutput(Gather(node, *in[0], *in[1]));
  }
  if (op == "Unsqueeze" || op == "Squeeze") return FoldSqueezeOrUnsqueeze(node, in, opset);
  if (op == "Reshape") return FoldReshape(node, in, opset);
  if (op == "Flatten") return FoldFlatten(node, in);
  if (op == "Concat") return SingleOutput(Concat(node, in));
  if (op == "Slice") {
    TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
    return SingleOutput(Slice(node, in, opset));
  }
  if (op == "Transpose") {
    TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
    return SingleOutput(Transpose(node, *in[0]));
  }
  if (op == "ConstantOfShape") return FoldConstantOfShape(node, in);
  if (op == "DequantizeLinear" || op == "QuantizeLinear") return FoldQuantizeLinear(node, in);
  if (op == "Range") return FoldRange(node, in);
  if (op == "Expand") return FoldExpand(node, in);
  if (op == "Tile") return FoldTile(node, in);
  if (op.rfind("Reduce", 0) == 0 && IsConstantEvaluable(op)) {
    TS_RETURN_IF_ERROR(RequireInputs(node, in, 1));
    return SingleOutput(Reduce(node, in, opset));
  }
  return Status::NotSupported(op + ": not evaluated at import");
}

}  // namespace tessera::onnx_import
