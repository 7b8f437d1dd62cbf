// The device arena (issue 11, daemon/runtime/program_runner.h): one arena per
// device program laid out by liveness, executors running in place, kernels
// prepared once and shared by every runner, repacked weights held once.
// Answers must not change at all: bit-for-bit equality where the arithmetic
// is the same (same kernels, same order), and the distributed runs stay
// within the equivalence tests' 1e-5 of the unsplit run.
#include <catch2/catch.hpp>
#include <filesystem>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/program_runner.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/program_compiler.h"
#include "partition/import/model_import.h"

namespace tessera {
namespace {

Graph TinyYolo() {
  ImportOptions io;
  io.input_shapes[""] = {1, 3, 96, 96};
  auto g = ImportModel("/usr/share/darknet/cfg/yolov2-tiny.cfg", io);
  REQUIRE(g.ok());  // deploy/install-deps.sh installs Debian's darknet (cfg files)
  return std::move(*g);
}

std::vector<TensorData> Inputs(const Graph& g) {
  std::vector<TensorData> in;
  for (int v : g.inputs) in.push_back(SeededInput(g.values[v].shape, 7));
  return in;
}

CompiledPlan Compile(const Graph& g, ForcedScheme scheme, int devices) {
  ForcedPlanOptions o;
  o.devices = devices;
  o.grid_rows = o.grid_cols = scheme == ForcedScheme::kFfmt ? 2 : 1;
  auto plan = MakeForcedPlan(g, scheme, o);
  REQUIRE(plan.ok());
  auto compiled = CompilePlan(g, *plan);
  REQUIRE(compiled.ok());
  return std::move(*compiled);
}

TEST_CASE("releasing repacked weights keeps a single-device run bit for bit", "[runtime][memory]") {
  Graph kept = TinyYolo();
  Graph released = kept;
  const auto inputs = Inputs(kept);
  auto a = Executor::Create(kept, {});
  auto b = Executor::CreateReleasingWeights(&released, {});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  std::vector<TensorData> want, got;
  REQUIRE((*a)->Run(inputs, &want).ok());
  REQUIRE((*b)->Run(inputs, &got).ok());
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i].values == want[i].values);
  // The packed convs' weights are gone from the graph, their shapes kept.
  size_t freed = 0, kept_bytes = 0;
  for (const auto& [v, data] : released.constants) {
    kept_bytes += data.values.size() * sizeof(float);
    if (data.values.empty()) {
      ++freed;
      CHECK(NumElements(released.values[v].shape) > 0);
    }
  }
  CHECK(freed > 0);
  CHECK(kept_bytes < (*a)->weight_bytes());  // what is left is not a second copy
  CHECK((*b)->weight_bytes() == (*a)->weight_bytes());
}

TEST_CASE("runners of one prepared program share kernels and answer bit for bit", "[runtime][memory]") {
  const Graph g = TinyYolo();
  const auto inputs = Inputs(g);
  std::vector<TensorData> want;
  auto ex = Executor::Create(g, {});
  REQUIRE(ex.ok());
  REQUIRE((*ex)->Run(inputs, &want).ok());
  // One device: every layer whole, no links; the same kernels in the same order.
  CompiledPlan compiled = Compile(g, ForcedScheme::kPipeline, 1);
  REQUIRE(compiled.programs.size() == 1);
  DeviceProgram& program = compiled.programs[0];
  RunnerOptions ro;
  auto prepared = PreparedProgram::PrepareReleasingWeights(&program, ro);
  REQUIRE(prepared.ok());
  auto r1 = (*prepared)->NewRunner();
  auto r2 = (*prepared)->NewRunner();
  REQUIRE(r1.ok());
  REQUIRE(r2.ok());
  for (int round = 0; round < 2; ++round)  // a reused arena holds the last run's bytes
    for (auto* r : {r1->get(), r2->get()}) {
      std::vector<TensorData> got;
      REQUIRE(r->Run({}, inputs, &got).ok());
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i].values == want[i].values);
    }
  CHECK((*r1)->weight_bytes() == (*prepared)->weight_bytes());
}

TEST_CASE("the device arena is no larger than separate buffers and executor arenas", "[runtime][memory]") {
  const Graph g = TinyYolo();
  for (ForcedScheme scheme : {ForcedScheme::kFfmt, ForcedScheme::kPairs, ForcedScheme::kPipeline}) {
    CompiledPlan compiled = Compile(g, scheme, 4);
    for (const DeviceProgram& p : compiled.programs) {
      // What the runner allocated before issue 11: every buffer for the whole
      // program, plus one arena per subgraph executor.
      size_t separate = static_cast<size_t>(p.BufferValues()) * sizeof(float);
      for (const Graph& sub : p.subgraphs) {
        ExecutorOptions eo;
        eo.external_io = true;
        auto ex = Executor::Create(sub, eo);
        REQUIRE(ex.ok());
        separate += (*ex)->arena_bytes();
      }
      auto prepared = PreparedProgram::Prepare(p, {});
      REQUIRE(prepared.ok());
      INFO("device " << p.device << ": arena " << (*prepared)->memory_bytes() << " vs " << separate);
      CHECK((*prepared)->memory_bytes() <= separate);
    }
    // And answers equal the unsplit run, as before.
    auto ex = Executor::Create(g, {});
    REQUIRE(ex.ok());
    const auto inputs = Inputs(g);
    std::vector<TensorData> want;
    REQUIRE((*ex)->Run(inputs, &want).ok());
    auto run = RunProgramsInProcess(g, compiled.programs, inputs, {});
    REQUIRE(run.ok());
    double max_abs = 0, max_ref = 1e-30;
    for (size_t k = 0; k < want[0].values.size(); ++k) {
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(run->outputs[0].values[k] - want[0].values[k])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[0].values[k])));
    }
    CHECK(max_abs / max_ref <= 1e-5);
  }
}

}  // namespace
}  // namespace tessera
