// Issue 11 item 3: graphs imported with shapes only (weights with a shape and
// no values) compile, so that memory can be computed from their programs
// without holding a weight; the programs equal those of the weighted graph
// but for the missing values.
#include <catch2/catch.hpp>

#include "partition/compile/forced_plan.h"
#include "partition/compile/program_compiler.h"
#include "partition/import/model_import.h"

using namespace tessera;

namespace {

TensorData Iota(const Shape& shape) {
  TensorData t;
  t.shape = shape;
  for (int64_t i = 0; i < NumElements(shape); ++i) t.values.push_back(static_cast<float>(i));
  return t;
}

Graph ImportYoloTiny(bool shapes_only) {
  ImportOptions o;
  o.input_shapes[""] = {1, 3, 96, 96};
  o.shapes_only = shapes_only;
  auto g = ImportDarknet("/usr/share/darknet/cfg/yolov2-tiny.cfg", o);
  REQUIRE(g.ok());
  return std::move(g).value();
}

}  // namespace

TEST_CASE("SliceAxis cuts the rows or columns of a weight with values") {
  const TensorData w = Iota({3, 4});
  const TensorData rows = SliceAxis(w, 0, 1, 3);
  CHECK(rows.shape == Shape{2, 4});
  CHECK(rows.values == std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11});
  const TensorData cols = SliceAxis(w, 1, 1, 3);
  CHECK(cols.shape == Shape{3, 2});
  CHECK(cols.values == std::vector<float>{1, 2, 5, 6, 9, 10});
  const TensorData conv = SliceAxis(Iota({2, 2, 1, 2}), 1, 1, 2);
  CHECK(conv.shape == Shape{2, 1, 1, 2});
  CHECK(conv.values == std::vector<float>{2, 3, 6, 7});
}

TEST_CASE("SliceAxis of a weight without values gives the slice's shape and no values") {
  TensorData w;
  w.shape = {1024, 512, 3, 3};
  for (size_t axis : {0u, 1u}) {
    const TensorData s = SliceAxis(w, axis, 100, 356);
    Shape want = w.shape;
    want[axis] = 256;
    CHECK(s.shape == want);
    CHECK(s.values.empty());
  }
  const TensorData none = SliceAxis(w, 0, 7, 7);
  CHECK(none.shape == Shape{0, 512, 3, 3});
  CHECK(none.values.empty());
}

TEST_CASE("a shapes-only graph compiles to the weighted graph's programs without values") {
  const Graph full = ImportYoloTiny(false);
  const Graph shapes = ImportYoloTiny(true);
  REQUIRE(full.WeightCount() == shapes.WeightCount());
  for (ForcedScheme scheme :
       {ForcedScheme::kFdto, ForcedScheme::kFdti, ForcedScheme::kPairs, ForcedScheme::kFfmt, ForcedScheme::kPipeline}) {
    ForcedPlanOptions fo;
    fo.devices = 3;
    auto plan = MakeForcedPlan(full, scheme, fo);
    REQUIRE(plan.ok());
    auto a = CompilePlan(full, *plan);
    auto b = CompilePlan(shapes, *plan);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(ValidatePrograms(b->programs).ok());
    REQUIRE(a->programs.size() == b->programs.size());
    int64_t constants = 0;
    for (size_t d = 0; d < a->programs.size(); ++d) {
      const DeviceProgram& pa = a->programs[d];
      const DeviceProgram& pb = b->programs[d];
      CHECK(pa.steps.size() == pb.steps.size());
      CHECK(pa.buffers.size() == pb.buffers.size());
      CHECK(pa.WeightValues() == pb.WeightValues());
      REQUIRE(pa.subgraphs.size() == pb.subgraphs.size());
      for (size_t s = 0; s < pa.subgraphs.size(); ++s) {
        REQUIRE(pa.subgraphs[s].constants.size() == pb.subgraphs[s].constants.size());
        for (const auto& [id, data] : pb.subgraphs[s].constants) {
          const TensorData& weighted = pa.subgraphs[s].constants.at(id);
          CHECK(data.shape == weighted.shape);
          CHECK(data.values.empty());
          CHECK(static_cast<int64_t>(weighted.values.size()) == NumElements(weighted.shape));
          ++constants;
        }
      }
    }
    CHECK(constants > 0);
  }
}
