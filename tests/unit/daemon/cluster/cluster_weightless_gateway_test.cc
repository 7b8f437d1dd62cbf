// Issue 11 item 3: the gateway keeps a shapes-only graph and builds each
// device's program with weights read in windows (gateway_plan.h
// CompileDeviceProgramWithWeights). Those programs must be the programs a
// compile of the weighted graph gives, byte for byte once serialized, so
// that answers do not change.
// The ONNX library is reached through tessera_partition (see onnx_import_test.cc).
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#ifndef ONNX_ML
#define ONNX_ML 1
#endif

#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <random>

#include "daemon/cluster/gateway_plan.h"
#include "onnx/onnx_pb.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/program_codec.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/metrics.h"
#include "planner/cluster.h"
#include "planner/plan.h"

using namespace tessera;

namespace {

ModelSource Darknet(const std::string& cfg, int64_t side) {
  ModelSource m;
  m.path = "/usr/share/darknet/cfg/" + cfg;
  m.options.input_shapes[""] = {1, 3, side, side};
  m.options.seed = 7;
  return m;
}

ModelSource YoloTiny() { return Darknet("yolov2-tiny.cfg", 128); }

Graph Import(const ModelSource& m, bool shapes_only) {
  ImportOptions o = m.options;
  o.shapes_only = shapes_only;
  auto g = ImportModel(m.path, o);
  REQUIRE(g.ok());
  return std::move(g).value();
}

// Every device's program built from the shapes-only graph + windows equals
// the weighted compile's, serialized byte for byte.
void CheckSamePrograms(const Graph& full, const Graph& shapes, const PartitionPlan& plan, const ModelSource& model,
                       int64_t window_bytes) {
  auto expected = CompilePlan(full, plan);
  REQUIRE(expected.ok());
  for (int d = 0; d < plan.num_devices; ++d) {
    INFO("device " << d << ", window " << window_bytes << " bytes");
    auto built = CompileDeviceProgramWithWeights(shapes, plan, d, model, window_bytes);
    INFO(built.status().ToString());
    REQUIRE(built.ok());
    CHECK(built->WeightValues() == expected->programs[d].WeightValues());
    CHECK(SerializeProgram(*built, "p") == SerializeProgram(expected->programs[d], "p"));
  }
}

// A QDQ model of two convs (3x3 then 1x1) on int8 codes with per-channel
// int8 weights and int32 biases, written to `path`: convs that run in
// integers, whose FDTI merges int32 partial sums with figures the compiler
// takes from the weight values (program_compiler.cc IntegerMergeOf).
void WriteQdqModel(const std::string& path) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("qdq_convs");
  auto tensor_info = [](onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  };
  tensor_info(g->add_input(), "x", {1, 16, 8, 8});
  tensor_info(g->add_output(), "y", {1, 8, 8, 8});
  auto init = [&](const std::string& name, int type, const std::vector<int64_t>& dims, const std::vector<double>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    for (double x : v) {
      if (type == onnx::TensorProto::FLOAT) {
        t->add_float_data(static_cast<float>(x));
      } else {
        t->add_int32_data(static_cast<int32_t>(x));  // int8 and int32 both live in int32_data
      }
    }
  };
  auto node = [&](const std::string& op, const std::vector<std::string>& in, const std::string& out,
                  int64_t axis = -1) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out + "/" + op);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    if (axis >= 0) {
      auto* a = n->add_attribute();
      a->set_name("axis");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(axis);
    }
    return n;
  };
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> code(-127, 127), bias(-300, 300);
  auto qdq = [&](const std::string& in, const std::string& out, double scale, int zero) {
    init(out + "_s", onnx::TensorProto::FLOAT, {}, {scale});
    init(out + "_z", onnx::TensorProto::INT8, {}, {double(zero)});
    node("QuantizeLinear", {in, out + "_s", out + "_z"}, out + "_q");
    node("DequantizeLinear", {out + "_q", out + "_s", out + "_z"}, out);
  };
  auto conv = [&](const std::string& in, const std::string& out, int64_t c, int64_t o, int64_t k, double in_scale) {
    std::vector<double> w, ws, wz, b, bs;
    for (int64_t i = 0; i < o * c * k * k; ++i) w.push_back(code(rng));
    for (int64_t i = 0; i < o; ++i) {
      ws.push_back(0.002 * double(1 + i % 5));
      wz.push_back(0);
      b.push_back(bias(rng));
      bs.push_back(static_cast<double>(static_cast<float>(in_scale) * static_cast<float>(ws.back())));
    }
    init(out + "_wq", onnx::TensorProto::INT8, {o, c, k, k}, w);
    init(out + "_ws", onnx::TensorProto::FLOAT, {o}, ws);
    init(out + "_wz", onnx::TensorProto::INT8, {o}, wz);
    init(out + "_bq", onnx::TensorProto::INT32, {o}, b);
    init(out + "_bs", onnx::TensorProto::FLOAT, {o}, bs);
    node("DequantizeLinear", {out + "_wq", out + "_ws", out + "_wz"}, out + "_w", 0);
    node("DequantizeLinear", {out + "_bq", out + "_bs"}, out + "_b", 0);
    auto* n = node("Conv", {in, out + "_w", out + "_b"}, out);
    auto* pads = n->add_attribute();
    pads->set_name("pads");
    pads->set_type(onnx::AttributeProto::INTS);
    for (int i = 0; i < 4; ++i) pads->add_ints(k / 2);
  };
  qdq("x", "xd", 0.05, 0);
  conv("xd", "c1", 16, 24, 3, 0.05);
  node("Relu", {"c1"}, "r1");
  qdq("r1", "r1d", 0.1, -128);
  conv("r1d", "c2", 24, 8, 1, 0.1);
  qdq("c2", "y", 0.2, 3);
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
}

}  // namespace

TEST_CASE("a QDQ model's integer FDTI programs built from windows equal the weighted compile's") {
  // The int32 merge's figures (int8_row_scales, int8_requant_mult) come from
  // weight values: a shapes-only import keeps integer initializers (int8
  // weights) with theirs, and a window's compile carries them too
  // (gateway_plan.cc MoveWeightValues).
  const std::string path = "/tmp/tessera_qdq_convs_" + std::to_string(getpid()) + ".onnx";
  WriteQdqModel(path);
  ModelSource model;
  model.path = path;
  const Graph full = Import(model, false);
  const Graph shapes = Import(model, true);
  for (ForcedScheme scheme : {ForcedScheme::kFdti, ForcedScheme::kPairs}) {
    ForcedPlanOptions fo;
    fo.devices = 3;
    auto forced = MakeForcedPlan(full, scheme, fo);
    REQUIRE(forced.ok());
    auto expected = CompilePlan(full, *forced);
    REQUIRE(expected.ok());
    int figures = 0;
    for (const DeviceProgram& p : expected->programs)
      for (const Graph& sub : p.subgraphs)
        for (const Node& n : sub.nodes) figures += n.attrs.Has("int8_row_scales") + n.attrs.Has("int8_requant_mult");
    CHECK(figures > 0);
    for (int64_t window : {int64_t{1}, int64_t{1} << 40}) CheckSamePrograms(full, shapes, *forced, model, window);
  }
  std::remove(path.c_str());
}

TEST_CASE("a device's program built from windows of weights equals the weighted compile's, byte for byte") {
  // yolov2-tiny; resnet18 has shortcuts (whose seeded weights are damped
  // after their producer is built) and a dense layer.
  const ModelSource model = GENERATE(YoloTiny(), Darknet("resnet18.cfg", 64));
  INFO(model.path);
  const Graph full = Import(model, false);
  const Graph shapes = Import(model, true);
  PlanOptions po;
  po.objective = Objective::kMemory;
  auto planned = BuildPlan(shapes, ComputeLayerFigures(shapes), UniformCluster(4), po);
  REQUIRE(planned.ok());
  const PartitionPlan plan = ToPartitionPlan(*planned);
  // One window per layer (1 byte), a few layers per window (1 MiB), one window.
  for (int64_t window : {int64_t{1}, int64_t{1} << 20, int64_t{1} << 40})
    CheckSamePrograms(full, shapes, plan, model, window);
  for (ForcedScheme scheme : {ForcedScheme::kFdti, ForcedScheme::kPairs, ForcedScheme::kFfmt}) {
    ForcedPlanOptions fo;
    fo.devices = 3;
    auto forced = MakeForcedPlan(full, scheme, fo);
    REQUIRE(forced.ok());
    CheckSamePrograms(full, shapes, *forced, model, 1 << 20);
  }
}

TEST_CASE("a model file that no longer matches the served graph is refused, not half-filled") {
  const ModelSource model = YoloTiny();
  const Graph shapes = Import(model, true);
  auto plan = MakeForcedPlan(shapes, ForcedScheme::kFdto, ForcedPlanOptions{});
  REQUIRE(plan.ok());
  ModelSource other = model;
  other.path = "/usr/share/darknet/cfg/yolov2.cfg";
  auto built = CompileDeviceProgramWithWeights(shapes, *plan, 0, other);
  REQUIRE_FALSE(built.ok());
  CHECK_THAT(built.status().message(), Catch::Contains("yolov2.cfg"));
  ModelSource missing = model;
  missing.path = "/nonexistent/model.cfg";
  auto none = CompileDeviceProgramWithWeights(shapes, *plan, 0, missing);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::Contains("/nonexistent/model.cfg"));
}
