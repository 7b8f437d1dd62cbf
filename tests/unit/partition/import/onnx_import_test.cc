// ONNX importer: canonical form (graph.h) and the folds of METHODS §1, built
// from small models written here with the ONNX protobuf classes.
//
// The ONNX CMake targets define these for their users; the unit-test target
// reaches the ONNX library only through tessera_partition, so set them here.
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#ifndef ONNX_ML
#define ONNX_ML 1
#endif

#include <catch2/catch.hpp>
#include "util/limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/runtime/executor.h"
#include "onnx/onnx_pb.h"
#include "partition/import/model_import.h"
#include "partition/import/onnx_quantize.h"

namespace tessera {
namespace {

class OnnxModelBuilder {
 public:
  explicit OnnxModelBuilder(int64_t opset, int64_t ir_version = 8) {
    model_.set_ir_version(ir_version);
    model_.set_producer_name("tessera-test");
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  // dims < 0 become symbolic ("N", "d2", ...).
  void Input(const std::string& name, const std::vector<int64_t>& dims, int32_t elem = onnx::TensorProto::FLOAT) {
    auto* in = model_.mutable_graph()->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (size_t i = 0; i < dims.size(); ++i) {
      auto* d = shape->add_dim();
      if (dims[i] >= 0)
        d->set_dim_value(dims[i]);
      else
        d->set_dim_param(i == 0 ? "N" : "d" + std::to_string(i));
    }
  }

  void Output(const std::string& name, int32_t elem = onnx::TensorProto::FLOAT) {
    auto* out = model_.mutable_graph()->add_output();
    out->set_name(name);
    auto* tt = out->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    tt->mutable_shape();  // unknown rank is fine; the checker wants the field
  }

  void Floats(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
  }

  void Doubles(const std::string& name, const std::vector<int64_t>& dims, const std::vector<double>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::DOUBLE);
    for (int64_t d : dims) t->add_dims(d);
    for (double v : values) t->add_double_data(v);
  }

  // Stored as raw_data (how PyTorch's exporter writes weights).
  void RawFloats(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  }

  void Int64s(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
  }

  onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }

  std::string Bytes() const { return model_.SerializeAsString(); }
  onnx::ModelProto& model() { return model_; }

 private:
  onnx::ModelProto model_;
};

void SetInt(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void SetFloat(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void SetInts(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void SetString(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

Result<Graph> Import(const OnnxModelBuilder& b, const ImportOptions& options = {}) {
  return ImportOnnxBytes(b.Bytes(), "test.onnx", options);
}

std::vector<std::string> Ops(const Graph& g) {
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op);
  return ops;
}

const TensorData& ConstInput(const Graph& g, const Node& n, size_t i) {
  const TensorData* d = g.ConstantData(n.inputs.at(i));
  REQUIRE(d != nullptr);
  return *d;
}

std::vector<float> Run(const Graph& g, const std::vector<TensorData>& inputs) {
  auto ex = Executor::Create(g, ExecutorOptions{});
  REQUIRE(ex.ok());
  std::vector<TensorData> outputs;
  Status st = (*ex)->Run(inputs, &outputs);
  REQUIRE(st.ok());
  REQUIRE(outputs.size() == 1);
  return outputs[0].values;
}

}  // namespace

TEST_CASE("onnx: Conv + BatchNormalization + Relu fold into one Conv", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 3, 3});
  b.Floats("w", {2, 1, 2, 2}, {1, 0, 0, 1, /**/ 0, 1, 1, 0});
  b.Floats("b", {2}, {0.5f, -0.5f});
  b.Floats("scale", {2}, {2, 3});
  b.Floats("beta", {2}, {1, -1});
  b.Floats("mean", {2}, {0.5f, 0.25f});
  b.Floats("var", {2}, {4, 1});
  b.Node("Conv", {"x", "w", "b"}, {"c"}, "conv1");
  auto* bn = b.Node("BatchNormalization", {"c", "scale", "beta", "mean", "var"}, {"n"}, "bn1");
  SetFloat(bn, "epsilon", 0.f);
  b.Node("Relu", {"n"}, {"y"}, "relu1");
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Conv"});
  const Node& conv = g->nodes[0];
  CHECK(conv.name == "conv1");
  CHECK(conv.attrs.String("activation") == "relu");
  CHECK(conv.attrs.Ints("pads") == std::vector<int64_t>{0, 0, 0, 0});
  CHECK(conv.attrs.Ints("kernel_shape") == std::vector<int64_t>{2, 2});
  // s = scale / sqrt(var): {1, 3}; W' = W·s; b' = (b - mean)·s + beta.
  CHECK(ConstInput(*g, conv, 1).values == std::vector<float>{1, 0, 0, 1, 0, 3, 3, 0});
  const auto& bias = ConstInput(*g, conv, 2).values;
  CHECK(bias[0] == Approx(1.0));
  CHECK(bias[1] == Approx(-3.25));
  CHECK(g->values[g->outputs[0]].name == "y");
  CHECK(g->values[g->outputs[0]].shape == Shape{1, 2, 2, 2});
  CHECK(g->Validate().ok());
}

// A residual block's Add -> Relu (ResNet) becomes one Add with activation
// "relu"; an Add whose sum has a second reader, or that is a model output,
// keeps its Relu. The answer is max(a + b, 0) either way.
TEST_CASE("onnx: a Relu after a residual Add folds into the Add", "[onnx]") {
  for (bool shared : {false, true}) {
    OnnxModelBuilder b(13);
    b.Input("a", {1, 2, 1, 2});
    b.Input("b", {1, 2, 1, 2});
    b.Node("Add", {"a", "b"}, {"s"}, "add");
    b.Node("Relu", {"s"}, {"y"}, "relu");
    b.Output("y");
    if (shared) b.Output("s");
    auto g = Import(b);
    REQUIRE(g.ok());
    if (shared) {
      CHECK(Ops(*g) == std::vector<std::string>{"Add", "Relu"});
      CHECK(g->nodes[0].attrs.String("activation").empty());
      continue;
    }
    REQUIRE(Ops(*g) == std::vector<std::string>{"Add"});
    CHECK(g->nodes[0].attrs.String("activation") == "relu");
    CHECK(g->values[g->outputs[0]].name == "y");
    CHECK(g->Validate().ok());
    auto ex = Executor::Create(*g, ExecutorOptions{});
    REQUIRE(ex.ok());
    std::vector<TensorData> out;
    REQUIRE((*ex)
                ->Run({TensorData{{1, 2, 1, 2}, {1.f, -2.f, 0.5f, -0.f}},
                       TensorData{{1, 2, 1, 2}, {-3.f, 1.f, 0.25f, 0.f}}},
                      &out)
                .ok());
    CHECK(out[0].values == std::vector<float>{0.f, 0.f, 0.75f, 0.f});
  }
}

// SiLU as PyTorch exports it: Conv -> c -> {Sigmoid -> s, Mul(c, s)} becomes
// one Conv with activation "silu"; the answer is c·sigmoid(c) computed here.
TEST_CASE("onnx: Sigmoid + Mul of the same value fold into Conv as silu", "[onnx]") {
  for (bool swapped : {false, true}) {
    OnnxModelBuilder b(13);
    b.Input("x", {1, 1, 2, 2});
    b.Floats("w", {2, 1, 1, 1}, {3.f, -2.f});
    b.Floats("b", {2}, {0.5f, -0.25f});
    b.Node("Conv", {"x", "w", "b"}, {"c"}, "conv");
    b.Node("Sigmoid", {"c"}, {"s"}, "sig");
    if (swapped)
      b.Node("Mul", {"s", "c"}, {"y"}, "mul");
    else
      b.Node("Mul", {"c", "s"}, {"y"}, "mul");
    b.Output("y");
    auto g = Import(b);
    REQUIRE(g.ok());
    REQUIRE(Ops(*g) == std::vector<std::string>{"Conv"});
    CHECK(g->nodes[0].attrs.String("activation") == "silu");
    CHECK(g->values[g->outputs[0]].name == "y");
    CHECK(g->Validate().ok());
    const std::vector<float> x = {-30.f, -1.f, 0.25f, 40.f};
    const std::vector<float> got = Run(*g, {TensorData{{1, 1, 2, 2}, x}});
    REQUIRE(got.size() == 8);
    for (int o = 0; o < 2; ++o)
      for (int i = 0; i < 4; ++i) {
        const double c = (o == 0 ? 3.0 : -2.0) * x[i] + (o == 0 ? 0.5 : -0.25);
        const double want = c / (1.0 + std::exp(-c));
        INFO("channel " << o << " x " << x[i]);
        CHECK(got[o * 4 + i] == Approx(want).epsilon(1e-6).margin(1e-30));
      }
  }
}

// Hard swish as PyTorch exports it (MobileNetV3): Conv -> c ->
// {HardSigmoid(alpha 1/6) -> s, Mul(c, s)} becomes one Conv with activation
// "hard_swish" carrying the HardSigmoid's alpha and beta.
TEST_CASE("onnx: HardSigmoid + Mul of the same value fold into Conv as hard swish", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 2, 2});
  b.Floats("w", {2, 1, 1, 1}, {3.f, -2.f});
  b.Floats("b", {2}, {0.5f, -0.25f});
  b.Node("Conv", {"x", "w", "b"}, {"c"}, "conv");
  auto* hs = b.Node("HardSigmoid", {"c"}, {"s"}, "hsig");
  SetFloat(hs, "alpha", 1.f / 6.f);
  b.Node("Mul", {"s", "c"}, {"y"}, "mul");
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Conv"});
  CHECK(g->nodes[0].attrs.String("activation") == "hard_swish");
  CHECK(g->nodes[0].attrs.Float("act_alpha") == Approx(1.0 / 6.0));
  CHECK(g->nodes[0].attrs.Float("act_beta") == Approx(0.5));
  CHECK(g->Validate().ok());
  const std::vector<float> x = {-3.f, -1.f, 0.25f, 4.f};
  const std::vector<float> got = Run(*g, {TensorData{{1, 1, 2, 2}, x}});
  REQUIRE(got.size() == 8);
  for (int o = 0; o < 2; ++o)
    for (int i = 0; i < 4; ++i) {
      const double c = (o == 0 ? 3.0 : -2.0) * x[i] + (o == 0 ? 0.5 : -0.25);
      const double want = c * std::clamp(c / 6.0 + 0.5, 0.0, 1.0);
      INFO("channel " << o << " x " << x[i]);
      CHECK(got[o * 4 + i] == Approx(want).epsilon(1e-6).margin(1e-6));
    }
}

TEST_CASE("onnx: a Sigmoid whose input has a third reader is not folded as silu", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 2, 2});
  b.Floats("w", {1, 1, 1, 1}, {2.f});
  b.Node("Conv", {"x", "w"}, {"c"}, "conv");
  b.Node("Sigmoid", {"c"}, {"s"}, "sig");
  b.Node("Mul", {"c", "s"}, {"m"}, "mul");
  b.Node("Add", {"m", "c"}, {"y"}, "add");
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  CHECK(Ops(*g) == std::vector<std::string>{"Conv", "Sigmoid", "Mul", "Add"});
}

TEST_CASE("onnx: standalone BatchNormalization stays, Conv with two consumers keeps no activation", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2, 2, 2});
  b.Floats("w", {2, 2, 1, 1}, {1, 0, 0, 1});
  b.Floats("scale", {2}, {1, 1});
  b.Floats("beta", {2}, {0, 0});
  b.Floats("mean", {2}, {0, 0});
  b.Floats("var", {2}, {1, 1});
  b.Node("BatchNormalization", {"x", "scale", "beta", "mean", "var"}, {"n"}, "bn");
  b.Node("Conv", {"n", "w"}, {"c"}, "conv");
  b.Node("Relu", {"c"}, {"r"}, "relu");
  b.Node("Add", {"c", "r"}, {"y"}, "add");
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  CHECK(Ops(*g) == std::vector<std::string>{"BatchNormalization", "Conv", "Relu", "Add"});
  CHECK(g->nodes[1].attrs.String("activation").empty());
}

TEST_CASE("onnx: Shape/Gather/Unsqueeze/Concat chain folds into Reshape's shape attr", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {-1, 2, 3, 4});
  b.Int64s("zero", {}, {0});
  b.Int64s("axes0", {1}, {0});
  b.Int64s("minus1", {1}, {-1});
  b.Node("Shape", {"x"}, {"s"});
  auto* gather = b.Node("Gather", {"s", "zero"}, {"batch"});
  SetInt(gather, "axis", 0);
  b.Node("Unsqueeze", {"batch", "axes0"}, {"batch1"});
  auto* concat = b.Node("Concat", {"batch1", "minus1"}, {"target"});
  SetInt(concat, "axis", 0);
  b.Node("Reshape", {"x", "target"}, {"flat"}, "reshape");
  b.Node("Identity", {"flat"}, {"id"});
  b.Node("Dropout", {"id"}, {"y"});
  b.Output("y");
  ImportOptions options;
  options.batch = 2;
  auto g = Import(b, options);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Reshape"});
  CHECK(g->nodes[0].attrs.Ints("shape") == std::vector<int64_t>{2, 24});
  CHECK(g->nodes[0].inputs.size() == 1);
  CHECK(g->values[g->inputs[0]].shape == Shape{2, 2, 3, 4});
  CHECK(g->values[g->outputs[0]].shape == Shape{2, 24});
}

TEST_CASE("onnx: Reshape with 0 and -1, Flatten, Squeeze and Unsqueeze become Reshape", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2, 3, 4});
  b.Int64s("target", {3}, {0, -1, 4});
  b.Int64s("axes", {1}, {0});
  b.Node("Reshape", {"x", "target"}, {"r"});
  auto* flat = b.Node("Flatten", {"r"}, {"f"});
  SetInt(flat, "axis", 1);
  b.Node("Unsqueeze", {"f", "axes"}, {"u"});
  b.Node("Squeeze", {"u", "axes"}, {"y"});
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Reshape", "Reshape", "Reshape", "Reshape"});
  CHECK(g->nodes[0].attrs.Ints("shape") == std::vector<int64_t>{1, 6, 4});
  CHECK(g->nodes[1].attrs.Ints("shape") == std::vector<int64_t>{1, 24});
  CHECK(g->nodes[2].attrs.Ints("shape") == std::vector<int64_t>{1, 1, 24});
  CHECK(g->nodes[3].attrs.Ints("shape") == std::vector<int64_t>{1, 24});
}

TEST_CASE("onnx: Gemm alpha/beta/transB normalize to W[out,in] and B[out]", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2});
  b.Floats("B", {2, 3}, {1, 2, 3, 4, 5, 6});  // [in=2, out=3], transB = 0
  b.Floats("C", {3}, {1, 1, 1});
  auto* gemm = b.Node("Gemm", {"x", "B", "C"}, {"g"}, "fc");
  SetFloat(gemm, "alpha", 2.f);
  SetFloat(gemm, "beta", 0.5f);
  b.Node("Sigmoid", {"g"}, {"y"});
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Gemm"});
  const Node& fc = g->nodes[0];
  CHECK(fc.attrs.String("activation") == "sigmoid");
  CHECK(ConstInput(*g, fc, 1).shape == Shape{3, 2});
  CHECK(ConstInput(*g, fc, 1).values == std::vector<float>{2, 8, 4, 10, 6, 12});
  CHECK(ConstInput(*g, fc, 2).values == std::vector<float>{0.5f, 0.5f, 0.5f});
  CHECK_FALSE(fc.attrs.Has("alpha"));
  CHECK_FALSE(fc.attrs.Has("transB"));
}

TEST_CASE("onnx: MatMul with constant weights plus Add bias becomes Gemm", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2});
  b.Floats("w", {2, 2}, {1, 2, 3, 4});
  b.Floats("bias", {2}, {10, 20});
  b.Node("MatMul", {"x", "w"}, {"m"}, "mm");
  b.Node("Add", {"m", "bias"}, {"y"}, "add");
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Gemm"});
  CHECK(ConstInput(*g, g->nodes[0], 1).values == std::vector<float>{1, 3, 2, 4});
  CHECK(ConstInput(*g, g->nodes[0], 2).values == std::vector<float>{10, 20});
  // y = x·w + bias with x = [1, 1]: [14, 26].
  TensorData x{{1, 2}, {1, 1}};
  CHECK(Run(*g, {x}) == std::vector<float>{14, 26});
}

TEST_CASE("onnx: Clip with min/max inputs (opset 11) folds into Conv as clip", "[onnx]") {
  OnnxModelBuilder b(11);
  b.Input("x", {1, 1, 2, 2});
  b.Floats("w", {1, 1, 1, 1}, {1});
  b.Floats("lo", {}, {0});
  b.Floats("hi", {}, {6});
  b.Node("Conv", {"x", "w"}, {"c"});
  b.Node("Clip", {"c", "lo", "hi"}, {"y"});
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Conv"});
  CHECK(g->nodes[0].attrs.String("activation") == "clip");
  CHECK(g->nodes[0].attrs.Float("act_alpha") == 0.0);
  CHECK(g->nodes[0].attrs.Float("act_beta") == 6.0);
  TensorData x{{1, 1, 2, 2}, {-1, 3, 7, 6}};
  CHECK(Run(*g, {x}) == std::vector<float>{0, 3, 6, 6});
}

TEST_CASE("onnx: standalone Clip, Pad and Resize take their inputs as attributes", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 2, 2});
  b.Floats("hi", {}, {1});
  b.Int64s("pads", {8}, {0, 0, 1, 0, 0, 0, 0, 1});
  b.Floats("scales", {4}, {1, 1, 2, 2});
  b.Node("Clip", {"x", "", "hi"}, {"c"});
  b.Node("Pad", {"c", "pads"}, {"p"});
  auto* resize = b.Node("Resize", {"p", "", "scales"}, {"y"});
  SetString(resize, "mode", "nearest");
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Clip", "Pad", "Resize"});
  CHECK(g->nodes[0].attrs.Float("max") == 1.0);
  CHECK(g->nodes[0].attrs.Float("min") < -1e30);
  CHECK(g->nodes[1].attrs.Ints("pads") == std::vector<int64_t>{0, 0, 1, 0, 0, 0, 0, 1});
  CHECK(g->nodes[2].attrs.Floats("scales") == std::vector<double>{1, 1, 2, 2});
  CHECK(g->values[g->outputs[0]].shape == Shape{1, 1, 6, 6});
  for (const Node& n : g->nodes) CHECK(n.inputs.size() == 1);
}

TEST_CASE("onnx: Softmax before opset 13 coerces to 2-D, from 13 it is one axis", "[onnx]") {
  for (int64_t opset : {11, 13}) {
    OnnxModelBuilder b(opset);
    b.Input("x", {2, 3, 4});
    auto* sm = b.Node("Softmax", {"x"}, {"y"});
    SetInt(sm, "axis", 1);
    b.Output("y");
    auto g = Import(b);
    REQUIRE(g.ok());
    if (opset == 11) {
      REQUIRE(Ops(*g) == std::vector<std::string>{"Reshape", "Softmax", "Reshape"});
      CHECK(g->nodes[0].attrs.Ints("shape") == std::vector<int64_t>{2, 12});
      CHECK(g->nodes[1].attrs.Int("axis") == 1);
      CHECK(g->nodes[2].attrs.Ints("shape") == std::vector<int64_t>{2, 3, 4});
    } else {
      REQUIRE(Ops(*g) == std::vector<std::string>{"Softmax"});
      CHECK(g->nodes[0].attrs.Int("axis") == 1);
    }
  }
}

TEST_CASE("onnx: dynamic dims: batch from options, others from --input-shape or an error", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {-1, 3, -1, -1});
  b.Node("Relu", {"x"}, {"y"});
  b.Output("y");
  auto missing = Import(b);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().IsInvalidArgument());
  CHECK_THAT(missing.status().message(),
             Catch::Contains("test.onnx") && Catch::Contains("--input-shape") && Catch::Contains("'x'"));
  ImportOptions options;
  options.input_shapes[""] = {4, 3, 8, 8};
  auto g = Import(b, options);
  REQUIRE(g.ok());
  CHECK(g->values[g->inputs[0]].shape == Shape{4, 3, 8, 8});
  CHECK(g->values[g->outputs[0]].shape == Shape{4, 3, 8, 8});

  ImportOptions wrong;
  wrong.input_shapes["nope"] = {1, 3, 8, 8};
  auto bad = Import(b, wrong);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("nope"));
}

TEST_CASE("onnx: 1-D Conv runs as a height-1 2-D Conv between Reshapes", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 5});
  b.Floats("w", {1, 1, 3}, {1, 2, 3});
  auto* conv = b.Node("Conv", {"x", "w"}, {"y"}, "conv1d");
  SetInts(conv, "pads", {1, 1});
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Reshape", "Conv", "Reshape"});
  const Node& c = g->nodes[1];
  CHECK(c.attrs.Ints("kernel_shape") == std::vector<int64_t>{1, 3});
  CHECK(c.attrs.Ints("pads") == std::vector<int64_t>{0, 1, 0, 1});
  CHECK(ConstInput(*g, c, 1).shape == Shape{1, 1, 1, 3});
  TensorData x{{1, 1, 5}, {1, 0, 0, 0, 1}};
  // Cross-correlation with [1,2,3], zero padded: [2, 1, 0, 3, 2].
  CHECK(Run(*g, {x}) == std::vector<float>{2, 1, 0, 3, 2});
}

TEST_CASE("onnx: Split becomes one Slice per output", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 6});
  b.Int64s("parts", {2}, {2, 4});
  auto* split = b.Node("Split", {"x", "parts"}, {"a", "b"}, "split");
  SetInt(split, "axis", 1);
  b.Node("ReduceSum", {"b"}, {"s"});
  b.Node("Mul", {"a", "s"}, {"y"});
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Slice", "Slice", "ReduceSum", "Mul"});
  CHECK(g->nodes[0].attrs.Ints("starts") == std::vector<int64_t>{0});
  CHECK(g->nodes[0].attrs.Ints("ends") == std::vector<int64_t>{2});
  CHECK(g->nodes[1].attrs.Ints("starts") == std::vector<int64_t>{2});
  CHECK(g->nodes[1].attrs.Ints("ends") == std::vector<int64_t>{6});
  CHECK(g->values[g->outputs[0]].shape == Shape{1, 2});
}

TEST_CASE("onnx: opset-6 axis broadcasting becomes numpy broadcasting", "[onnx]") {
  OnnxModelBuilder b(6, 3);
  b.Input("x", {1, 2, 1, 2});
  b.Floats("b", {2}, {10, 20});
  b.Input("b", {2});  // IR 3: initializers are listed as inputs too
  auto* add = b.Node("Add", {"x", "b"}, {"y"});
  SetInt(add, "broadcast", 1);
  SetInt(add, "axis", 1);
  b.Output("y");
  auto g = Import(b);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Add"});
  CHECK(ConstInput(*g, g->nodes[0], 1).shape == Shape{2, 1, 1});
  CHECK_FALSE(g->nodes[0].attrs.Has("broadcast"));
  TensorData x{{1, 2, 1, 2}, {1, 2, 3, 4}};
  CHECK(Run(*g, {x}) == std::vector<float>{11, 12, 23, 24});
}

TEST_CASE("onnx: float64 weights become float32", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 1, 1});
  b.Doubles("w", {1, 1, 1, 1}, {0.25});
  b.Node("Conv", {"x", "w"}, {"y"});
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  CHECK(ConstInput(*g, g->nodes[0], 1).values == std::vector<float>{0.25f});
}

TEST_CASE("onnx: NHWC input keeps its Transpose", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 4, 4, 3});
  auto* t = b.Node("Transpose", {"x"}, {"nchw"});
  SetInts(t, "perm", {0, 3, 1, 2});
  b.Node("GlobalAveragePool", {"nchw"}, {"y"});
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Transpose", "GlobalAveragePool"});
  CHECK(g->nodes[0].attrs.Ints("perm") == std::vector<int64_t>{0, 3, 1, 2});
  CHECK(g->values[g->outputs[0]].shape == Shape{1, 3, 1, 1});
}

TEST_CASE("onnx: unsupported op is one NotSupported naming file, node and op", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 4});
  b.Node("Relu", {"x"}, {"r"});
  b.Node("Hardmax", {"r"}, {"y"}, "the_hardmax");
  b.Output("y");
  auto g = Import(b);
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().IsNotSupported());
  CHECK_THAT(g.status().message(),
             Catch::Contains("test.onnx") && Catch::Contains("the_hardmax") && Catch::Contains("Hardmax"));
}

TEST_CASE("onnx: non-float32 inputs and outputs are NotSupported", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 4}, onnx::TensorProto::INT32);
  b.Node("Relu", {"x"}, {"y"});
  b.Output("y", onnx::TensorProto::INT32);
  auto g = Import(b);
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().IsNotSupported());
  CHECK_THAT(g.status().message(), Catch::Contains("float32"));
}

TEST_CASE("onnx: garbage, truncated and empty files are clear errors", "[onnx]") {
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 2654435761u) >> 13);
  auto g1 = ImportOnnxBytes(garbage, "garbage.onnx", {});
  REQUIRE_FALSE(g1.ok());
  CHECK_THAT(g1.status().message(), Catch::Contains("garbage.onnx"));

  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 4, 4});
  std::vector<float> w(64, 0.5f);
  b.Floats("w", {4, 1, 4, 4}, w);
  b.Node("Conv", {"x", "w"}, {"y"});
  b.Output("y");
  const std::string full = b.Bytes();
  REQUIRE(ImportOnnxBytes(full, "full.onnx", {}).ok());
  // Every truncation point: an error (any code), never a crash.
  for (size_t len = 0; len < full.size(); len += 7) {
    auto g = ImportOnnxBytes(full.substr(0, len), "truncated.onnx", {});
    CHECK_FALSE(g.ok());
    if (!g.ok()) CHECK_THAT(g.status().message(), Catch::Contains("truncated.onnx"));
  }
  auto empty = ImportOnnxBytes("", "empty.onnx", {});
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.status().message(), Catch::Contains("empty.onnx"));
}

// Issue 14 item 7: the model size limit (protobuf's 2 GiB - 1) holds for
// files and for buffers (ImportOnnxBytes checks it before protobuf's int
// sizes could wrap). A sparse file one byte over is refused before it is read.
TEST_CASE("onnx: a model over 2 GiB - 1 bytes is refused, from a file or a buffer", "[onnx]") {
  CHECK(CheckModelSize(static_cast<uint64_t>(kMaxModelBytes), "edge.onnx").ok());
  const Status over = CheckModelSize(static_cast<uint64_t>(kMaxModelBytes) + 1, "big.onnx");
  REQUIRE(over.IsInvalidArgument());
  CHECK_THAT(over.message(), Catch::Contains("big.onnx: the model is 2147483648 bytes; at most 2147483647"));
  const std::string path = (std::filesystem::temp_directory_path() / "tessera_sparse_model_test.onnx").string();
  {
    std::ofstream f(path, std::ios::binary);
    f.seekp(kMaxModelBytes);
    f.put('\0');  // size kMaxModelBytes + 1, sparse: no disk space
  }
  auto g = ImportModel(path, {});
  std::filesystem::remove(path);
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.status().message(), Catch::Contains("the model is 2147483648 bytes"));
}

TEST_CASE("onnx: corrupted bytes never crash the importer", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2, 4, 4});
  b.Floats("w", {2, 2, 1, 1}, {1, 2, 3, 4});
  b.Int64s("target", {2}, {1, -1});
  b.Node("Conv", {"x", "w"}, {"c"});
  b.Node("Relu", {"c"}, {"r"});
  b.Node("Reshape", {"r", "target"}, {"y"});
  b.Output("y");
  const std::string full = b.Bytes();
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  int imported = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bytes = full;
    const int flips = 1 + static_cast<int>(next() >> 62);
    for (int f = 0; f < flips; ++f) bytes[(next() >> 33) % bytes.size()] = static_cast<char>(next() >> 56);
    auto g = ImportOnnxBytes(bytes, "flipped.onnx", {});
    if (g.ok())
      ++imported;
    else
      CHECK_THAT(g.status().message(), Catch::Contains("flipped.onnx"));
  }
  CHECK(imported < 400);
}

TEST_CASE("onnx: weights whose size does not match their dims are DataLoss", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 2, 2});
  b.Floats("w", {1, 1, 1, 1}, {1});
  b.Node("Conv", {"x", "w"}, {"y"});
  b.Output("y");
  auto* w = b.model().mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_raw_data(std::string(2, '\0'));  // 2 bytes for one float
  auto g = Import(b);
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.status().message(), Catch::Contains("test.onnx"));
}

TEST_CASE("ImportModel dispatches by extension", "[onnx]") {
  auto unknown = ImportModel("model.tflite", {});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().IsInvalidArgument());
  CHECK_THAT(unknown.status().message(), Catch::Contains(".onnx") && Catch::Contains(".cfg"));

  auto missing = ImportModel("/nonexistent/dir/model.onnx", {});
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("/nonexistent/dir/model.onnx"));

  OnnxModelBuilder b(13);
  b.Input("x", {1, 2});
  b.Node("Relu", {"x"}, {"y"});
  b.Output("y");
  const auto path = std::filesystem::temp_directory_path() / "tessera_onnx_import_test.onnx";
  {
    std::ofstream out(path, std::ios::binary);
    out << b.Bytes();
  }
  auto g = ImportModel(path.string(), {});
  std::filesystem::remove(path);
  REQUIRE(g.ok());
  CHECK(g->name == "tessera_onnx_import_test");
  CHECK(Ops(*g) == std::vector<std::string>{"Relu"});
}

}  // namespace tessera

namespace tessera {
namespace {

std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7919) % 101 - 50);
  return v;
}

// Conv (72 KiB of raw float32 weights) + BN + Relu, GlobalAveragePool,
// Reshape to an int64 target, Gemm (75 KiB of float_data weights) + bias:
// what a torchvision export looks like, at a size a unit test affords.
OnnxModelBuilder SmallCnn() {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 32, 8, 8});
  b.RawFloats("conv.w", {64, 32, 3, 3}, Ramp(64 * 32 * 9, 0.01f));
  b.Floats("bn.scale", {64}, Ramp(64, 0.02f));
  b.Floats("bn.beta", {64}, Ramp(64, 0.03f));
  b.Floats("bn.mean", {64}, Ramp(64, 0.01f));
  std::vector<float> var(64, 1.5f);
  b.Floats("bn.var", {64}, var);
  b.Int64s("flat", {2}, {1, -1});
  b.Floats("fc.w", {64, 300}, Ramp(64 * 300, 0.001f));
  b.Floats("fc.b", {300}, Ramp(300, 0.1f));
  auto* conv = b.Node("Conv", {"x", "conv.w"}, {"c"}, "conv");
  SetInts(conv, "pads", {1, 1, 1, 1});
  b.Node("BatchNormalization", {"c", "bn.scale", "bn.beta", "bn.mean", "bn.var"}, {"n"}, "bn");
  b.Node("Relu", {"n"}, {"r"}, "relu");
  b.Node("GlobalAveragePool", {"r"}, {"p"}, "gap");
  b.Node("Reshape", {"p", "flat"}, {"f"}, "flatten");
  b.Node("Gemm", {"f", "fc.w", "fc.b"}, {"y"}, "fc");
  b.Output("y");
  return b;
}

}  // namespace

TEST_CASE("onnx shapes only: large float weights keep their shapes and lose their values and the graph is the same",
          "[onnx]") {
  const OnnxModelBuilder b = SmallCnn();
  auto full = Import(b);
  REQUIRE(full.ok());
  ImportOptions so;
  so.shapes_only = true;
  auto shapes = Import(b, so);
  INFO(shapes.status().ToString());
  REQUIRE(shapes.ok());
  REQUIRE(Ops(*shapes) == Ops(*full));
  REQUIRE(Ops(*shapes) == std::vector<std::string>{"Conv", "GlobalAveragePool", "Reshape", "Gemm"});
  REQUIRE(shapes->values.size() == full->values.size());
  for (size_t v = 0; v < full->values.size(); ++v) CHECK(shapes->values[v].shape == full->values[v].shape);
  CHECK(shapes->WeightCount() == full->WeightCount());
  // The conv's weight (BN folded in) and the dense weight have no values;
  // the biases (small, BN folded) have exactly the weighted import's.
  const Node& conv = shapes->nodes[0];
  const Node& fc = shapes->nodes[3];
  CHECK(ConstInput(*shapes, conv, 1).shape == Shape{64, 32, 3, 3});
  CHECK(ConstInput(*shapes, conv, 1).values.empty());
  CHECK(ConstInput(*shapes, fc, 1).shape == Shape{300, 64});
  CHECK(ConstInput(*shapes, fc, 1).values.empty());
  CHECK(ConstInput(*shapes, conv, 2).values == ConstInput(*full, full->nodes[0], 2).values);
  CHECK(ConstInput(*shapes, fc, 2).values == ConstInput(*full, full->nodes[3], 2).values);
  CHECK(conv.attrs.String("activation") == "relu");
  CHECK(shapes->Validate().ok());

  // From a file too (the weights are seeked past there), and values only for
  // some nodes (the gateway's per-device builds): the others keep shapes.
  const std::string path = (std::filesystem::temp_directory_path() / "tessera_shapes_only_test.onnx").string();
  { std::ofstream(path, std::ios::binary) << b.Bytes(); }
  auto from_file = ImportOnnx(path, so);
  REQUIRE(from_file.ok());
  CHECK(ConstInput(*from_file, from_file->nodes[0], 1).values.empty());
  ImportOptions only_fc;
  only_fc.values_for_nodes = std::set<std::string>{"fc"};
  auto partial = ImportOnnx(path, only_fc);
  REQUIRE(partial.ok());
  CHECK(ConstInput(*partial, partial->nodes[0], 1).values.empty());
  CHECK(ConstInput(*partial, partial->nodes[3], 1).values == ConstInput(*full, full->nodes[3], 1).values);
  // The conv's weight is computed (BN folded in) from the conv and BN
  // initializers: asking for the conv reads all of them, and only them.
  ImportOptions only_conv;
  only_conv.values_for_nodes = std::set<std::string>{"conv"};
  auto conv_only = ImportOnnx(path, only_conv);
  REQUIRE(conv_only.ok());
  CHECK(ConstInput(*conv_only, conv_only->nodes[0], 1).values == ConstInput(*full, full->nodes[0], 1).values);
  CHECK(ConstInput(*conv_only, conv_only->nodes[0], 2).values == ConstInput(*full, full->nodes[0], 2).values);
  CHECK(ConstInput(*conv_only, conv_only->nodes[3], 1).values.empty());
  std::filesystem::remove(path);
}

TEST_CASE("onnx shapes only: a weight computed from a shape-only weight is a shape-only weight", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 64});
  b.RawFloats("w_t", {300, 64}, Ramp(300 * 64, 0.001f));
  auto* t = b.Node("Transpose", {"w_t"}, {"w"}, "transpose_w");
  SetInts(t, "perm", {1, 0});
  b.Node("MatMul", {"x", "w"}, {"y"}, "mm");
  b.Output("y");
  auto full = Import(b);
  REQUIRE(full.ok());
  ImportOptions so;
  so.shapes_only = true;
  auto shapes = Import(b, so);
  INFO(shapes.status().ToString());
  REQUIRE(shapes.ok());
  REQUIRE(Ops(*shapes) == Ops(*full));
  REQUIRE(Ops(*shapes) == std::vector<std::string>{"Gemm"});
  CHECK(ConstInput(*shapes, shapes->nodes[0], 1).shape == ConstInput(*full, full->nodes[0], 1).shape);
  CHECK(ConstInput(*shapes, shapes->nodes[0], 1).values.empty());
  CHECK_FALSE(ConstInput(*full, full->nodes[0], 1).values.empty());
}

TEST_CASE("onnx shapes only: truncated files and payloads are clear errors, never a crash", "[onnx]") {
  const std::string full = SmallCnn().Bytes();
  ImportOptions so;
  so.shapes_only = true;
  for (size_t len = 0; len < full.size(); len += 997) {
    auto g = ImportOnnxBytes(full.substr(0, len), "truncated.onnx", so);
    CHECK_FALSE(g.ok());
    if (!g.ok()) CHECK_THAT(g.status().message(), Catch::Contains("truncated.onnx"));
  }
  // A payload too large to read (so it is skipped) but shorter than its dims need.
  OnnxModelBuilder b = SmallCnn();
  auto* w = b.model().mutable_graph()->mutable_initializer(0);
  REQUIRE(w->name() == "conv.w");
  w->set_raw_data(std::string(70000, '\0'));
  auto g = Import(b, so);
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(g.status().message(), Catch::Contains("test.onnx") && Catch::Contains("conv.w") &&
                                       Catch::Contains("70000 bytes") && Catch::Contains("73728"));
}

}  // namespace tessera

namespace tessera {
namespace {

// Seeded values in [-3, 3] (covers GELU's curved region and both tails).
std::vector<float> SeededValues(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 6.f - 3.f;
  }
  return v;
}

double GeluReference(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// The three association orders PyTorch's exporters have produced for
// nn.GELU(): (x·a)·½, x·(a·½) and (x·½)·a, with a = 1 + erf(x/√2).
enum class GeluOrder { kXThenHalf, kHalfThenX, kHalfXThenA };

OnnxModelBuilder GeluModel(GeluOrder order, float half = 0.5f) {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2, 3, 4});
  b.Floats("sqrt2", {}, {1.41421356f});
  b.Floats("one", {}, {1.f});
  b.Floats("half", {}, {half});
  b.Node("Div", {"x", "sqrt2"}, {"u"});
  b.Node("Erf", {"u"}, {"e"});
  b.Node("Add", {"e", "one"}, {"a"});
  switch (order) {
    case GeluOrder::kXThenHalf:
      b.Node("Mul", {"x", "a"}, {"m"});
      b.Node("Mul", {"m", "half"}, {"y"});
      break;
    case GeluOrder::kHalfThenX:
      b.Node("Mul", {"a", "half"}, {"m"});
      b.Node("Mul", {"x", "m"}, {"y"});
      break;
    case GeluOrder::kHalfXThenA:
      b.Node("Mul", {"half", "x"}, {"m"});
      b.Node("Mul", {"m", "a"}, {"y"});
      break;
  }
  b.Output("y");
  return b;
}

}  // namespace

TEST_CASE("onnx: GELU subgraphs fuse into one Gelu node in every operand order, matching erf GELU to 1e-6", "[onnx]") {
  for (GeluOrder order : {GeluOrder::kXThenHalf, GeluOrder::kHalfThenX, GeluOrder::kHalfXThenA}) {
    INFO("order " << static_cast<int>(order));
    auto g = Import(GeluModel(order));
    INFO(g.status().ToString());
    REQUIRE(g.ok());
    CHECK(Ops(*g) == std::vector<std::string>{"Gelu"});
    TensorData x{{1, 2, 3, 4}, SeededValues(24, 11)};
    const std::vector<float> y = Run(*g, {x});
    for (size_t i = 0; i < y.size(); ++i) CHECK(std::fabs(y[i] - GeluReference(x.values[i])) <= 1e-6);
  }
}

TEST_CASE("onnx: an erf subgraph that is not GELU stays as its ops and still runs", "[onnx]") {
  auto g = Import(GeluModel(GeluOrder::kXThenHalf, 0.25f));
  REQUIRE(g.ok());
  CHECK(Ops(*g) == std::vector<std::string>{"Div", "Erf", "Add", "Mul", "Mul"});
  TensorData x{{1, 2, 3, 4}, SeededValues(24, 12)};
  const std::vector<float> y = Run(*g, {x});
  for (size_t i = 0; i < y.size(); ++i) CHECK(std::fabs(y[i] - GeluReference(x.values[i]) / 2) <= 1e-6);
}

TEST_CASE("onnx: PyTorch's LayerNorm subgraph fuses into LayerNormalization and matches to 1e-5", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2, 3, 4});
  b.Floats("two", {}, {2.f});
  b.Floats("eps", {}, {1e-6f});
  b.Floats("gamma", {4}, {0.5f, 1.f, 1.5f, 2.f});
  b.Floats("beta", {4}, {0.1f, -0.2f, 0.3f, 0.f});
  SetInts(b.Node("ReduceMean", {"x"}, {"m"}), "axes", {-1});
  b.Node("Sub", {"x", "m"}, {"d"});
  b.Node("Pow", {"d", "two"}, {"p"});
  SetInts(b.Node("ReduceMean", {"p"}, {"v"}), "axes", {-1});
  b.Node("Add", {"v", "eps"}, {"ve"});
  b.Node("Sqrt", {"ve"}, {"s"});
  b.Node("Div", {"d", "s"}, {"n"});
  b.Node("Mul", {"n", "gamma"}, {"g"});
  b.Node("Add", {"g", "beta"}, {"y"});
  b.Output("y");
  auto g = Import(b);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"LayerNormalization"});
  CHECK(g->nodes[0].attrs.Int("axis") == 3);
  CHECK(std::fabs(g->nodes[0].attrs.Float("epsilon") - 1e-6) <= 1e-12);
  TensorData x{{1, 2, 3, 4}, SeededValues(24, 13)};
  const std::vector<float> y = Run(*g, {x});
  const float gamma[4] = {0.5f, 1.f, 1.5f, 2.f}, beta[4] = {0.1f, -0.2f, 0.3f, 0.f};
  for (size_t row = 0; row < 6; ++row) {
    double mean = 0, var = 0;
    for (size_t i = 0; i < 4; ++i) mean += x.values[row * 4 + i] / 4.0;
    for (size_t i = 0; i < 4; ++i) var += std::pow(x.values[row * 4 + i] - mean, 2) / 4.0;
    for (size_t i = 0; i < 4; ++i) {
      const double want = (x.values[row * 4 + i] - mean) / std::sqrt(var + 1e-6) * gamma[i] + beta[i];
      CHECK(std::fabs(y[row * 4 + i] - want) <= 1e-5);
    }
  }
}

TEST_CASE("onnx: permute -> LayerNorm -> permute fuses into a channel LayerNormalization with the same values",
          "[onnx]") {
  const float gamma[3] = {0.5f, 1.f, 1.5f}, beta[3] = {0.1f, -0.2f, 0.3f};
  auto model = [&](std::vector<int64_t> back_perm) {
    OnnxModelBuilder b(17);
    b.Input("x", {1, 3, 4, 5});
    b.Floats("gamma", {3}, {gamma[0], gamma[1], gamma[2]});
    b.Floats("beta", {3}, {beta[0], beta[1], beta[2]});
    SetInts(b.Node("Transpose", {"x"}, {"t"}), "perm", {0, 2, 3, 1});
    SetInt(b.Node("LayerNormalization", {"t", "gamma", "beta"}, {"l"}), "axis", -1);
    SetInts(b.Node("Transpose", {"l"}, {"y"}), "perm", back_perm);
    b.Output("y");
    return b;
  };
  auto g = Import(model({0, 3, 1, 2}));
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"LayerNormalization"});
  CHECK(g->nodes[0].attrs.Int("axis") == 1);
  CHECK(g->nodes[0].attrs.Int("span") == 1);
  TensorData x{{1, 3, 4, 5}, SeededValues(60, 17)};
  const std::vector<float> y = Run(*g, {x});
  for (size_t p = 0; p < 20; ++p) {  // each position normalises its 3 channels
    double mean = 0, var = 0;
    for (size_t c = 0; c < 3; ++c) mean += x.values[c * 20 + p] / 3.0;
    for (size_t c = 0; c < 3; ++c) var += std::pow(x.values[c * 20 + p] - mean, 2) / 3.0;
    for (size_t c = 0; c < 3; ++c) {
      const double want = (x.values[c * 20 + p] - mean) / std::sqrt(var + 1e-5) * gamma[c] + beta[c];
      CHECK(std::fabs(y[c * 20 + p] - want) <= 1e-5);
    }
  }
  // Another permutation back is not the pattern: the three ops stay.
  auto other = Import(model({0, 3, 2, 1}));
  REQUIRE(other.ok());
  CHECK(Ops(*other) == std::vector<std::string>{"Transpose", "LayerNormalization", "Transpose"});
}

TEST_CASE("onnx: Split with the opset-11 split attribute becomes one Slice per output", "[onnx]") {
  OnnxModelBuilder b(11);
  b.Input("x", {1, 5, 2});
  auto* split = b.Node("Split", {"x"}, {"a", "b"}, "split");
  SetInt(split, "axis", 1);
  SetInts(split, "split", {3, 2});
  SetInt(b.Node("Concat", {"b", "a"}, {"y"}), "axis", 1);
  b.Output("y");
  auto g = Import(b);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"Slice", "Slice", "Concat"});
  TensorData x{{1, 5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  CHECK(Run(*g, {x}) == std::vector<float>{6, 7, 8, 9, 0, 1, 2, 3, 4, 5});
}

TEST_CASE("onnx: ConvTranspose with stride, pads, output_padding, dilation and groups matches a direct scatter",
          "[onnx]") {
  // X [1, 4, 3, 5], W [4, 3, 3, 2] (group 2: M = 6), strides (2, 3), pads
  // (1, 0, 0, 1), output_padding (1, 2), dilations (2, 1), bias.
  const int64_t C = 4, H = 3, W = 5, Mg = 3, G = 2, KH = 3, KW = 2, SH = 2, SW = 3, DH = 2, DW = 1;
  const int64_t PT = 1, PL = 0, PB = 0, PR = 1, OPH = 1, OPW = 2;
  const int64_t OH = SH * (H - 1) + OPH + (KH - 1) * DH + 1 - PT - PB;
  const int64_t OW = SW * (W - 1) + OPW + (KW - 1) * DW + 1 - PL - PR;
  OnnxModelBuilder b(13);
  b.Input("x", {1, C, H, W});
  const std::vector<float> w = SeededValues(C * Mg * KH * KW, 21), bias = SeededValues(Mg * G, 22);
  b.Floats("w", {C, Mg, KH, KW}, w);
  b.Floats("b", {Mg * G}, bias);
  auto* n = b.Node("ConvTranspose", {"x", "w", "b"}, {"y"}, "deconv");
  SetInts(n, "strides", {SH, SW});
  SetInts(n, "pads", {PT, PL, PB, PR});
  SetInts(n, "output_padding", {OPH, OPW});
  SetInts(n, "dilations", {DH, DW});
  SetInt(n, "group", G);
  b.Output("y");
  auto g = Import(b);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"ConvTranspose"});
  REQUIRE(g->values[g->outputs[0]].shape == Shape{1, Mg * G, OH, OW});
  TensorData x{{1, C, H, W}, SeededValues(C * H * W, 23)};
  std::vector<double> want(static_cast<size_t>(Mg * G * OH * OW));
  for (int64_t m = 0; m < Mg * G; ++m)
    for (int64_t i = 0; i < OH * OW; ++i) want[m * OH * OW + i] = bias[m];
  for (int64_t c = 0; c < C; ++c)
    for (int64_t m = 0; m < Mg; ++m)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw)
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t oh = ih * SH - PT + kh * DH, ow = iw * SW - PL + kw * DW;
              if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
              const int64_t om = (c / (C / G)) * Mg + m;
              want[(om * OH + oh) * OW + ow] +=
                  double(x.values[(c * H + ih) * W + iw]) * w[((c * Mg + m) * KH + kh) * KW + kw];
            }
  const std::vector<float> y = Run(*g, {x});
  REQUIRE(y.size() == want.size());
  for (size_t i = 0; i < y.size(); ++i) CHECK(std::fabs(y[i] - want[i]) <= 1e-5);
}

}  // namespace tessera

// Found by tests/fuzz/fuzz_onnx (tests/fuzz/regressions/onnx/
// reshape_target_overflow.onnx): Reshape multiplied its target dims without
// a bound. 6 x 274177 x 67280421310721 = 6 (2^64 + 1) wrapped to 6 and was
// accepted as a reshape of 6 values into 1.1e20.
#include "partition/import/onnx_constant_eval.h"

namespace tessera {

TEST_CASE("onnx: a Reshape target beyond the element limit is refused, not wrapped (fuzz_onnx)", "[onnx]") {
  auto r = onnx_import::ResolveReshape({6}, {6, 274177, 67280421310721}, false);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsInvalidArgument());
  CHECK(r.status().message().find("Reshape: target") != std::string::npos);
  CHECK(r.status().message().find("limit") != std::string::npos);
  CHECK_FALSE(onnx_import::ResolveReshape({6}, {-1, int64_t{1} << 40, int64_t{1} << 40}, false).ok());
  REQUIRE(onnx_import::ResolveReshape({6}, {2, -1}, false).ok());

  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/tests/fuzz/regressions/onnx/reshape_target_overflow.onnx",
                   std::ios::binary);
  REQUIRE(in);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto g = ImportOnnxBytes(bytes, "fuzz.onnx", ImportOptions{});
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().message().find("fuzz.onnx") != std::string::npos);
}

}  // namespace tessera

namespace tessera {

// Found by tests/fuzz/fuzz_onnx (tests/fuzz/regressions/onnx/gemm_rank1_operand.onnx,
// 214 bytes): an opset-6 Gemm whose B input is declared rank 1 crashed inside
// ONNX 1.12's shape inference (it reads dim 1 unchecked). Now refused first.
// Every input fuzz_onnx ever crashed on (tests/fuzz/regressions/onnx/) is
// refused with an error naming the file — including convtranspose_inference_
// crash.onnx, which crashes inside the ONNX library's own shape inference and
// is caught because that inference runs in a child process.
TEST_CASE("onnx: every fuzz_onnx regression input is refused, none crashes", "[onnx]") {
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/tests/fuzz/regressions/onnx";
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    INFO(e.path().filename().string());
    std::ifstream in(e.path(), std::ios::binary);
    REQUIRE(in);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto g = ImportOnnxBytes(bytes, "fuzz.onnx", ImportOptions{});
    REQUIRE_FALSE(g.ok());
    CHECK(g.status().message().find("fuzz.onnx") != std::string::npos);
    ++files;
  }
  CHECK(files >= 5);
}

TEST_CASE("onnx: a Gemm operand of rank 1 is refused before ONNX's shape inference (fuzz_onnx)", "[onnx]") {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/tests/fuzz/regressions/onnx/gemm_rank1_operand.onnx",
                   std::ios::binary);
  REQUIRE(in);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto g = ImportOnnxBytes(bytes, "fuzz.onnx", ImportOptions{});
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().IsInvalidArgument());
  CHECK(g.status().message().find("has rank 1; Gemm multiplies 2-D matrices") != std::string::npos);
}

}  // namespace tessera

// ---- Quantized models (issue 16 item 1, partition/graph/quantization.h) ----

namespace tessera {
namespace {

void Int8s(OnnxModelBuilder& b, const std::string& name, const std::vector<int64_t>& dims,
           const std::vector<int8_t>& values, int32_t type = onnx::TensorProto::INT8) {
  auto* t = b.model().mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size()));
}

void Int32s(OnnxModelBuilder& b, const std::string& name, const std::vector<int64_t>& dims,
            const std::vector<int32_t>& values) {
  auto* t = b.model().mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT32);
  for (int64_t d : dims) t->add_dims(d);
  for (int32_t v : values) t->add_int32_data(v);
}

TensorData Tensor(const Shape& shape, std::vector<float> values) {
  TensorData t;
  t.shape = shape;
  t.values = std::move(values);
  return t;
}

// x (1, 2, 2, 2) -> Q/DQ (0.5, zp 3) -> Conv 1x1 (int8 weights per channel,
// int32 bias) -> Q/DQ (0.25, zp -5) -> y; `qlinear` spells the conv as one
// QLinearConv instead.
OnnxModelBuilder QuantizedConv(bool qlinear) {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2, 2, 2});
  b.Floats("xs", {}, {0.5f});
  Int8s(b, "xz", {}, {3});
  b.Floats("ys", {}, {0.25f});
  Int8s(b, "yz", {}, {-5});
  Int8s(b, "wq", {2, 2, 1, 1}, {2, -1, /**/ 4, 3});
  b.Floats("ws", {2}, {0.5f, 0.125f});
  Int8s(b, "wz", {2}, {0, 0});
  Int32s(b, "bq", {2}, {3, -8});  // scale xs·ws = {0.25, 0.0625}: bias {0.75, -0.5}
  b.Node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"}, "quant_x");
  if (qlinear) {
    b.Node("QLinearConv", {"xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "bq"}, {"yq"}, "conv");
  } else {
    b.Floats("bs", {2}, {0.25f, 0.0625f});
    b.Node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"}, "dq_x");
    SetInt(b.Node("DequantizeLinear", {"wq", "ws", "wz"}, {"wd"}, "dq_w"), "axis", 0);
    SetInt(b.Node("DequantizeLinear", {"bq", "bs"}, {"bd"}, "dq_b"), "axis", 0);
    b.Node("Conv", {"xd", "wd", "bd"}, {"c"}, "conv");
    b.Node("QuantizeLinear", {"c", "ys", "yz"}, {"yq"}, "quant_y");
  }
  b.Node("DequantizeLinear", {"yq", "ys", "yz"}, {"y"}, "dq_y");
  b.Output("y");
  return b;
}

}  // namespace

TEST_CASE("onnx QDQ: a QuantizeLinear/DequantizeLinear pair rounds half to even and saturates as ONNX says",
          "[onnx][quantized]") {
  for (const bool uint8 : {false, true}) {
    OnnxModelBuilder b(13);
    b.Input("x", {1, 8});
    b.Floats("s", {}, {0.5f});
    if (!uint8) Int8s(b, "z", {}, {3});
    std::vector<std::string> q_in = {"x", "s"};
    if (!uint8) q_in.push_back("z");
    b.Node("QuantizeLinear", q_in, {"q"}, "q");
    b.Node("DequantizeLinear", {"q", "s", uint8 ? "" : "z"}, {"y"}, "dq");
    b.Output("y");
    auto g = Import(b);
    REQUIRE(g.ok());
    REQUIRE(Ops(*g) == std::vector<std::string>{"QuantizeDequantize"});
    CHECK(g->nodes[0].attrs.Float("scale") == 0.5);
    CHECK(g->nodes[0].attrs.Int("qmin") == (uint8 ? 0 : -128));
    CHECK(g->nodes[0].attrs.Int("qmax") == (uint8 ? 255 : 127));
    // x / 0.5: 2.5 -> 2 and 3.5 -> 4 (half to even), -2.5 -> -2, 0.5 -> 0;
    // 400 and -200 saturate. int8 zero point 3: code = r + 3, y = (code - 3)·0.5.
    const std::vector<float> x = {1.25f, 1.75f, -1.25f, 0.25f, 200.f, -100.f, 0.74f, -0.76f};
    const std::vector<float> want_int8 = {1.0f, 2.0f, -1.0f, 0.0f, 62.0f, -65.5f, 0.5f, -1.0f};
    const std::vector<float> want_uint8 = {1.0f, 2.0f, 0.0f, 0.0f, 127.5f, 0.0f, 0.5f, 0.0f};
    CHECK(Run(*g, {Tensor({1, 8}, x)}) == (uint8 ? want_uint8 : want_int8));
  }
}

TEST_CASE("onnx QDQ: int8 weights and int32 biases fold to float, and the conv runs on dequantized values",
          "[onnx][quantized]") {
  auto g = Import(QuantizedConv(false));
  REQUIRE(g.ok());
  REQUIRE(Ops(*g) == std::vector<std::string>{"QuantizeDequantize", "Conv", "QuantizeDequantize"});
  const Node& conv = g->nodes[1];
  CHECK(ConstInput(*g, conv, 1).values == std::vector<float>{1.0f, -0.5f, 0.5f, 0.375f});
  CHECK(ConstInput(*g, conv, 2).values == std::vector<float>{0.75f, -0.5f});
  CHECK(g->nodes[2].attrs.Float("scale") == 0.25);
  CHECK(g->nodes[2].attrs.Int("zero_point") == -5);
  // By hand: x = {1, 2, 3, 100 | -1, 0.3, 0.2, 2} on the 0.5 grid (zp 3;
  // 100 saturates at (127 - 3)·0.5 = 62; 0.3 -> 0.6 -> 1 -> 0.5; 0.2 -> 0).
  const std::vector<float> x = {1, 2, 3, 100, -1, 0.3f, 0.2f, 2};
  const float a[4] = {1, 2, 3, 62}, c[4] = {-1, 0.5f, 0, 2};
  std::vector<float> want(8);
  for (int p = 0; p < 4; ++p) {
    const float y0 = 1.0f * a[p] - 0.5f * c[p] + 0.75f, y1 = 0.5f * a[p] + 0.375f * c[p] - 0.5f;
    // Output grid 0.25, zp -5: codes saturate at 127 -> (127 + 5)·0.25 = 33.
    want[p] = std::min(std::nearbyint(y0 / 0.25f), 132.f) * 0.25f;
    want[4 + p] = std::min(std::nearbyint(y1 / 0.25f), 132.f) * 0.25f;
  }
  CHECK(want[3] == 33.0f);  // the saturated case is exercised
  CHECK(Run(*g, {Tensor({1, 2, 2, 2}, x)}) == want);
}

TEST_CASE("onnx QDQ: QLinearConv imports as the same graph as its QDQ spelling", "[onnx][quantized]") {
  auto qdq = Import(QuantizedConv(false));
  auto qlinear = Import(QuantizedConv(true));
  REQUIRE(qdq.ok());
  REQUIRE(qlinear.ok());
  REQUIRE(Ops(*qlinear) == Ops(*qdq));
  CHECK(qlinear->nodes[1].name == "conv");
  CHECK(ConstInput(*qlinear, qlinear->nodes[1], 1).values == ConstInput(*qdq, qdq->nodes[1], 1).values);
  CHECK(ConstInput(*qlinear, qlinear->nodes[1], 2).values == ConstInput(*qdq, qdq->nodes[1], 2).values);
  const TensorData x = Tensor({1, 2, 2, 2}, {0.1f, -2, 7, 3.3f, 1, -0.6f, 2.2f, -9});
  CHECK(Run(*qlinear, {x}) == Run(*qdq, {x}));
}

TEST_CASE("onnx QDQ: what tessera cannot run is refused by name", "[onnx][quantized]") {
  SECTION("an int8 graph input") {
    OnnxModelBuilder b(13);
    b.Input("xq", {1, 4}, onnx::TensorProto::INT8);
    b.Floats("s", {}, {0.5f});
    b.Node("DequantizeLinear", {"xq", "s"}, {"y"}, "dq");
    b.Output("y");
    auto g = Import(b);
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.status().message(), Catch::Contains("int8"));
  }
  SECTION("per-axis activation grids") {
    OnnxModelBuilder b(13);
    b.Input("x", {1, 2, 2, 2});
    b.Floats("s", {2}, {0.5f, 0.25f});
    Int8s(b, "z", {2}, {0, 0});
    SetInt(b.Node("QuantizeLinear", {"x", "s", "z"}, {"q"}, "q"), "axis", 1);
    SetInt(b.Node("DequantizeLinear", {"q", "s", "z"}, {"y"}, "dq"), "axis", 1);
    b.Output("y");
    auto g = Import(b);
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.status().message(), Catch::Contains("'q' (QuantizeLinear)") && Catch::Contains("per tensor"));
  }
  SECTION("dequantizing with another grid") {
    OnnxModelBuilder b(13);
    b.Input("x", {1, 4});
    b.Floats("s", {}, {0.5f});
    b.Floats("s2", {}, {0.25f});
    b.Node("QuantizeLinear", {"x", "s"}, {"q"}, "q");
    b.Node("DequantizeLinear", {"q", "s2"}, {"y"}, "dq");
    b.Output("y");
    auto g = Import(b);
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.status().message(),
               Catch::Contains("'dq' (DequantizeLinear)") && Catch::Contains("but it was quantized with scale 0.5"));
  }
  SECTION("an int8 graph output") {
    OnnxModelBuilder b(13);
    b.Input("x", {1, 4});
    b.Floats("s", {}, {0.5f});
    Int8s(b, "z", {}, {0});
    b.Node("QuantizeLinear", {"x", "s", "z"}, {"q"}, "q");
    b.Output("q", onnx::TensorProto::INT8);
    auto g = Import(b);
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.status().message(), Catch::Contains("output 'q'") && Catch::Contains("end a quantized model"));
  }
  SECTION("a QLinearConv with inputs missing (the checker's message, naming the node)") {
    OnnxModelBuilder b(13);
    b.Input("x", {1, 2, 2, 2});
    b.Floats("s", {}, {0.5f});
    b.Node("QuantizeLinear", {"x", "s"}, {"q"}, "q");
    b.Node("QLinearConv", {"q", "s"}, {"y"}, "qconv");
    b.Output("y");
    auto g = Import(b);
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.status().message(), Catch::Contains("qconv") && Catch::Contains("QLinearConv"));
  }
}

}  // namespace tessera

namespace tessera {

TEST_CASE("onnx: a Pad by nothing after a layer is another name for its input", "[onnx]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 2, 3, 3});
  b.Int64s("zeros", {8}, {0, 0, 0, 0, 0, 0, 0, 0});
  b.Int64s("ones", {8}, {0, 0, 1, 1, 0, 0, 1, 1});
  b.Node("Relu", {"x"}, {"r"}, "relu");
  b.Node("Pad", {"r", "zeros"}, {"p"}, "pad_nothing");
  b.Node("Pad", {"p", "ones"}, {"y"}, "pad_one");
  b.Output("y");
  auto g = Import(b);
  REQUIRE(g.ok());
  CHECK(Ops(*g) == std::vector<std::string>{"Relu", "Pad"});
  CHECK(g->values[g->outputs[0]].shape == Shape{1, 2, 5, 5});
}

// A zero Pad that only a window reads becomes the window's own padding
// (FoldPadsIntoWindows): Pad -> Conv, Pad -> QuantizeDequantize -> Conv (TF
// "same" exports such as MLPerf's VWW) and Pad -> AveragePool, which then
// counts the padding. Each answer must equal the same model whose Pad (or
// QuantizeDequantize) is also a model output, which keeps the Pad as a node.
TEST_CASE("onnx: a zero Pad read only by a Conv or an AveragePool becomes its padding, same answer", "[onnx]") {
  enum Window { kConv, kQdqConv, kAvgPool };
  for (Window kind : {kConv, kQdqConv, kAvgPool}) {
    std::vector<float> folded_answer;
    for (bool kept : {false, true}) {
      CAPTURE(kind, kept);
      OnnxModelBuilder b(13);
      b.Input("x", {1, 2, 5, 4});
      b.Int64s("pads", {8}, {0, 0, 1, 0, 0, 0, 2, 1});  // top 1, bottom 2, right 1
      b.Node("Pad", {"x", "pads"}, {"p"}, "pad");
      std::string read = "p";
      if (kind == kQdqConv) {
        b.Floats("s", {}, {0.125f});
        Int8s(b, "z", {}, {-3});
        b.Node("QuantizeLinear", {"p", "s", "z"}, {"pq"}, "quant");
        b.Node("DequantizeLinear", {"pq", "s", "z"}, {"pd"}, "dequant");
        read = "pd";
      }
      if (kind == kAvgPool) {
        auto* pool = b.Node("AveragePool", {read}, {"y"}, "window");
        SetInts(pool, "kernel_shape", {3, 2});
        SetInts(pool, "strides", {2, 1});
      } else {
        std::vector<float> w(3 * 2 * 3 * 3);
        for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(int(i * 7 % 11) - 5);
        b.Floats("w", {3, 2, 3, 3}, w);
        auto* conv = b.Node("Conv", {read, "w"}, {"y"}, "window");
        SetInts(conv, "pads", {1, 0, 0, 1});  // its own padding adds to the Pad's
        SetInts(conv, "strides", {2, 1});
      }
      b.Output("y");
      if (kept) b.Output(read);
      auto g = Import(b);
      REQUIRE(g.ok());
      const std::string window = kind == kAvgPool ? "AveragePool" : "Conv";
      std::vector<std::string> want_ops;
      if (kept) want_ops.push_back("Pad");
      if (kind == kQdqConv) want_ops.push_back("QuantizeDequantize");
      want_ops.push_back(window);
      REQUIRE(Ops(*g) == want_ops);
      const Node& w = g->nodes.back();
      if (!kept) {
        CHECK(w.attrs.Ints("pads") ==
              (kind == kAvgPool ? std::vector<int64_t>{1, 0, 2, 1} : std::vector<int64_t>{2, 0, 2, 2}));
        if (kind == kAvgPool) CHECK(w.attrs.Int("count_include_pad", 0) == 1);
        if (kind == kQdqConv) CHECK(g->values[g->nodes[0].outputs[0]].shape == Shape{1, 2, 5, 4});
      }
      CHECK(g->Validate().ok());
      std::vector<float> x(2 * 5 * 4);
      for (size_t i = 0; i < x.size(); ++i) x[i] = 0.3f * static_cast<float>(int(i * 5 % 13) - 6);
      auto ex = Executor::Create(*g, ExecutorOptions{});
      REQUIRE(ex.ok());
      std::vector<TensorData> out;
      REQUIRE((*ex)->Run({Tensor({1, 2, 5, 4}, x)}, &out).ok());
      // Folded and kept give the same values (compared across the two
      // iterations); the shapes say the padding is all there.
      CHECK(out[0].shape == (kind == kAvgPool ? Shape{1, 2, 3, 4} : Shape{1, 3, 4, 4}));
      if (!kept) {
        folded_answer = out[0].values;
        CHECK(std::any_of(folded_answer.begin(), folded_answer.end(), [](float v) { return v != 0.f; }));
      } else {
        CHECK(out[0].values == folded_answer);
      }
    }
  }
}

TEST_CASE("onnx: a Pad that is not zeros only a window reads stays a Pad", "[onnx]") {
  // reflect mode; a non-zero value; a MaxPool (it pads with -inf, not 0); an
  // AveragePool that pads itself without counting the padding; a Pad with two readers.
  for (int variant = 0; variant < 5; ++variant) {
    CAPTURE(variant);
    OnnxModelBuilder b(13);
    b.Input("x", {1, 1, 4, 4});
    b.Int64s("pads", {8}, {0, 0, 1, 1, 0, 0, 1, 1});
    b.Floats("v", {}, {variant == 1 ? 1.0f : 0.0f});
    auto* pad = b.Node("Pad", {"x", "pads", "v"}, {"p"}, "pad");
    if (variant == 0) SetString(pad, "mode", "reflect");
    if (variant <= 1 || variant == 4) {
      b.Floats("w", {1, 1, 2, 2}, {1, 2, 3, 4});
      b.Node("Conv", {"p", "w"}, {"y"}, "conv");
      if (variant == 4) b.Node("Relu", {"p"}, {"r"}, "second_reader");
    } else {
      auto* pool = b.Node(variant == 2 ? "MaxPool" : "AveragePool", {"p"}, {"y"}, "pool");
      SetInts(pool, "kernel_shape", {2, 2});
      if (variant == 3) SetInts(pool, "pads", {1, 1, 1, 1});
    }
    b.Output("y");
    if (variant == 4) b.Output("r");
    auto g = Import(b);
    REQUIRE(g.ok());
    CHECK(Ops(*g).front() == "Pad");
  }
}

// tessera quantize calibrates on the imported graph, where a folded zero
// Pad's output is no tensor: ZeroPadSources names the tensor measured for
// it, the Pad's input (through a chain of zero Pads). A Pad by another value
// or mode keeps its own range.
TEST_CASE("quantize: a zero Pad's output is calibrated as its input", "[onnx][quantized]") {
  OnnxModelBuilder b(13);
  b.Input("x", {1, 1, 4, 4});
  b.Int64s("pads", {8}, {0, 0, 1, 1, 0, 0, 1, 1});
  b.Floats("zero", {}, {0.f});
  b.Floats("one", {}, {1.f});
  b.Floats("w", {1, 1, 3, 3}, std::vector<float>(9, 0.5f));
  b.Node("Pad", {"x", "pads", "zero"}, {"p1"}, "pad_zero");
  b.Node("Pad", {"p1", "pads"}, {"p2"}, "pad_default");  // no value: zeros
  b.Node("Conv", {"p2", "w"}, {"c"}, "conv");
  b.Node("Pad", {"c", "pads", "one"}, {"p3"}, "pad_one");
  auto* reflect = b.Node("Pad", {"p3", "pads"}, {"p4"}, "pad_reflect");
  SetString(reflect, "mode", "reflect");
  b.Node("Conv", {"p4", "w"}, {"y"}, "conv2");
  b.Output("y");
  const std::string path = (std::filesystem::temp_directory_path() / "tessera_zero_pad_sources.onnx").string();
  {
    std::ofstream f(path, std::ios::binary);
    f << b.Bytes();
  }
  auto sources = ZeroPadSources(path);
  std::remove(path.c_str());
  REQUIRE(sources.ok());
  CHECK(*sources == std::map<std::string, std::string>{{"p1", "x"}, {"p2", "x"}});
  // And the import folds exactly those two into the first conv.
  auto g = Import(b);
  REQUIRE(g.ok());
  CHECK(Ops(*g) == std::vector<std::string>{"Conv", "Pad", "Pad", "Conv"});
  CHECK(g->nodes[0].attrs.Ints("pads") == std::vector<int64_t>{2, 2, 2, 2});
}

}  // namespace tessera
