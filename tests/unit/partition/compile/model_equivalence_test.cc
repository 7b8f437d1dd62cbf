// Issue 4 proof on real models: darknet cfgs shipped by Debian's `darknet`
// package (seeded weights), every scheme forced, N = 2, 3, 4, 6 devices;
// the in-process distributed run must equal the unsplit run within
// max |a − b| / max |b| ≤ 1e-5. Inputs are smaller than the cfgs' defaults
// to keep the test fast; the partitioning logic does not depend on size.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/program_runner.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/compile/forced_plan.h"
#include "partition/import/model_import.h"
#include "partition/compile/program_compiler.h"

using namespace tessera;

namespace {

double MaxRelDiff(const std::vector<TensorData>& got, const std::vector<TensorData>& want) {
  double max_abs = 0, max_ref = 1e-30;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].values.size(); ++k) {
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(got[i].values[k] - want[i].values[k])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[i].values[k])));
    }
  return max_abs / max_ref;
}

struct Case {
  const char* cfg;
  int64_t size;  // input height = width
};

void CheckModel(const Case& c) {
  const std::string path = std::string("/usr/share/darknet/cfg/") + c.cfg;
  if (!std::filesystem::exists(path)) {
    FAIL(path << " is missing; deploy/install-deps.sh installs Debian's darknet");
  }
  ImportOptions io;
  io.input_shapes[""] = {1, 3, c.size, c.size};
  auto g = ImportModel(path, io);
  INFO(c.cfg << ": " << g.status().ToString());
  REQUIRE(g.ok());
  std::vector<TensorData> inputs;
  for (int v : g->inputs) inputs.push_back(SeededInput(g->values[v].shape, 4));
  auto ex = Executor::Create(*g, {});
  REQUIRE(ex.ok());
  std::vector<TensorData> ref;
  REQUIRE((*ex)->Run(inputs, &ref).ok());

  struct Forced {
    const char* name;
    ForcedScheme scheme;
    int64_t rows, cols;
    std::vector<double> row_weights;
  };
  const std::vector<Forced> schemes = {
      {"ffmt 2x2", ForcedScheme::kFfmt, 2, 2, {}},      {"ffmt 3x3", ForcedScheme::kFfmt, 3, 3, {}},
      {"ffmt uneven", ForcedScheme::kFfmt, 3, 1, {3, 2, 1}}, {"fdto", ForcedScheme::kFdto, 1, 1, {}},
      {"fdti", ForcedScheme::kFdti, 1, 1, {}},          {"pairs", ForcedScheme::kPairs, 1, 1, {}},
      {"pipeline", ForcedScheme::kPipeline, 1, 1, {}}};
  for (int n : {2, 3, 4, 6}) {
    for (const auto& s : schemes) {
      ForcedPlanOptions o;
      o.devices = n;
      o.grid_rows = s.rows;
      o.grid_cols = s.cols;
      o.row_weights = s.row_weights;
      auto plan = MakeForcedPlan(*g, s.scheme, o);
      REQUIRE(plan.ok());
      auto compiled = CompilePlan(*g, *plan);
      INFO(c.cfg << " " << s.name << " N=" << n << ": " << compiled.status().ToString());
      REQUIRE(compiled.ok());
      auto run = RunProgramsInProcess(*g, compiled->programs, inputs, {});
      INFO(run.status().ToString());
      REQUIRE(run.ok());
      const double diff = MaxRelDiff(run->outputs, ref);
      INFO("max rel diff " << diff);
      CHECK(diff <= 1e-5);
    }
  }
}

}  // namespace

TEST_CASE("yolov2-tiny: every forced scheme on 2, 3, 4, 6 devices equals the unsplit run") {
  CheckModel({"yolov2-tiny.cfg", 128});
}

TEST_CASE("alexnet: every forced scheme on 2, 3, 4, 6 devices equals the unsplit run") {
  CheckModel({"alexnet.cfg", 227});
}

TEST_CASE("extraction: every forced scheme on 2, 3, 4, 6 devices equals the unsplit run") {
  CheckModel({"extraction.cfg", 96});
}

TEST_CASE("yolov2 (route + reorg branches): every forced scheme equals the unsplit run") {
  CheckModel({"yolov2.cfg", 128});
}
