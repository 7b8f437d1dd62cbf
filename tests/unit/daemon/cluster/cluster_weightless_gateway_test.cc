// Issue 11 item 3: the gateway keeps a shapes-only graph and builds each
// device's program with weights read in windows (gateway_plan.h
// CompileDeviceProgramWithWeights). Those programs must be the programs a
// compile of the weighted graph gives, byte for byte once serialized, so
// that answers do not change.
#include <catch2/catch.hpp>

#include "daemon/cluster/gateway_plan.h"
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

}  // namespace

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
