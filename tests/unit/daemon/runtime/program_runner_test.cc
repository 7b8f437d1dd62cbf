// The device arena (issue 11, daemon/runtime/program_runner.h): one arena per
// device program laid out by liveness, executors running in place, kernels
// prepared once and shared by every runner, repacked weights held once.
// Answers must not change at all: bit-for-bit equality where the arithmetic
// is the same (same kernels, same order), and the distributed runs stay
// within the equivalence tests' 1e-5 of the unsplit run.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "daemon/runtime/device_memory.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/program_runner.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/program_codec.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/merge_models.h"
#include "partition/import/model_import.h"
#include "transport/link.h"

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

// The unsplit graph's answer: one executor over the whole graph.
std::vector<TensorData> Unsplit(const Graph& g, const std::vector<TensorData>& inputs) {
  auto ex = Executor::Create(g, {});
  REQUIRE(ex.ok());
  std::vector<TensorData> want;
  REQUIRE((*ex)->Run(inputs, &want).ok());
  return want;
}

// max|got - want| / max|want|.
double MaxRelDiff(const TensorData& got, const TensorData& want) {
  double max_abs = 0, max_ref = 1e-30;
  for (size_t k = 0; k < want.values.size(); ++k) {
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(got.values[k] - want.values[k])));
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(want.values[k])));
  }
  return max_abs / max_ref;
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
  const std::vector<TensorData> want = Unsplit(g, inputs);
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
    const auto inputs = Inputs(g);
    const std::vector<TensorData> want = Unsplit(g, inputs);
    auto run = RunProgramsInProcess(g, compiled.programs, inputs, {});
    REQUIRE(run.ok());
    CHECK(MaxRelDiff(run->outputs[0], want[0]) <= 1e-5);
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

PartitionPlan TwoStages() {
  // dense0, dense1 on device 0; dense2 on device 1.
  PartitionPlan plan;
  plan.num_devices = 2;
  plan.layers = {{LayerScheme::kWhole, {0}, {}, 1, 1, {}, {}},
                 {LayerScheme::kWhole, {0}, {}, 1, 1, {}, {}},
                 {LayerScheme::kWhole, {1}, {}, 1, 1, {}, {}}};
  return plan;
}

TEST_CASE("pipeline buffers: what a request keeps across a send or receive, the rest shared working memory",
          "[runtime][memory][pipeline]") {
  // Issue 18 item 2, worked by hand. x [1,8] -> dense0 -> y0 [1,256] ->
  // dense1 -> y1 [1,8] | send to device 1 | dense2 -> y2 [1,8] -> back.
  // Device 0's steps: 0 dense0, 1 dense1, 2 send y1, 3 recv y2 (checked).
  // Run 0 = steps 0-1. Offsets are 64-byte aligned; a part ends at its last
  // buffer's end (8 floats = 32 B):
  //   x  [0, 0]  32 B, model input, copied in when run 0 starts -> working
  //   y0 [0, 1]  1024 B, inside run 0                           -> working
  //   y1 [1, 3]  32 B, read by the link from step 2 until 3     -> pipeline
  //   y2 [3, 4]  32 B, lands at step 3, model output            -> pipeline
  // working = y0 at 0 + x at 1024 = 1056 (alive together at step 0);
  // buffers = y1 at 0 + y2 at 64 = 96 (together at step 3); one arena:
  // 1056 too (y1 reuses x's place, y2 y0's). Sharing pays: 1056 + 2 x 96
  // < 2 x 1056; with 4 requests in flight 1056 + 4 x 96 = 1440 instead of
  // 4 x 1056 = 4224.
  Graph g;
  int x = g.AddValue("x", {1, 8});
  g.inputs = {x};
  const int64_t widths[3] = {256, 8, 8};
  int64_t in = 8;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.2f, 0.2f);
  for (int l = 0; l < 3; ++l) {
    TensorData w{{widths[l], in}, std::vector<float>(static_cast<size_t>(in * widths[l]))};  // [out, in]
    for (float& v : w.values) v = u(rng);
    const int wid = g.AddConstant("w" + std::to_string(l), std::move(w));
    const int y = g.AddValue("y" + std::to_string(l), {1, widths[l]});
    g.AddNode(Node{"dense" + std::to_string(l), "Gemm", {x, wid}, {y}, {}});
    x = y;
    in = widths[l];
  }
  g.outputs = {x};
  auto compiled = CompilePlan(g, TwoStages());
  REQUIRE(compiled.ok());
  const DeviceProgram& p0 = compiled->programs[0];
  REQUIRE(p0.steps.size() == 4);
  CHECK(p0.steps[0].kind == StepKind::kCompute);
  CHECK(p0.steps[1].kind == StepKind::kCompute);
  CHECK(p0.steps[2].kind == StepKind::kSend);
  CHECK(p0.steps[3].kind == StepKind::kRecv);
  auto prepared0 = PreparedProgram::Prepare(p0, {});
  INFO(prepared0.status().ToString());
  REQUIRE(prepared0.ok());
  CHECK((*prepared0)->shares_working());
  CHECK((*prepared0)->working_bytes() == 1056);
  CHECK((*prepared0)->request_bytes() == 96);
  CHECK((*prepared0)->whole_bytes() == 1056);
  CHECK((*prepared0)->memory_bytes() == 1056 + 96);
  // Device 1: recv y1 [0, 1], dense2 -> y2 [1, 3] (sent): both cross a link,
  // nothing is left to share (0 + 2 x 96 is not < 2 x 96): one whole arena.
  auto prepared1 = PreparedProgram::Prepare(compiled->programs[1], {});
  REQUIRE(prepared1.ok());
  CHECK(!(*prepared1)->shares_working());
  CHECK((*prepared1)->working_bytes() == 0);
  CHECK((*prepared1)->request_bytes() == 96);
  // Two working memories make sharing pay later: 2 x 1056 + 3 x 96 vs 3 x 1056.
  RunnerOptions two;
  two.compute_slots = 2;
  auto prepared2 = PreparedProgram::Prepare(p0, two);
  REQUIRE(prepared2.ok());
  CHECK((*prepared2)->shares_working());
  CHECK((*prepared2)->compute_slots() == 2);
  // The sizing is the worker's: the same numbers, and the RAM formula.
  DeviceMemoryOptions mo;
  mo.in_flight = 4;
  auto sized = SizeDeviceProgram(p0, mo);
  REQUIRE(sized.ok());
  CHECK(sized->working_bytes == 1056);
  CHECK(sized->buffer_bytes == 96);
  CHECK(sized->serving_bytes() == sized->weight_bytes + 1056 + 4 * (96 + sized->io_bytes) + sized->link_bytes);
  // And the pipeline answers what the unsplit graph does.
  const auto inputs = Inputs(g);
  const std::vector<TensorData> want = Unsplit(g, inputs);
  auto run = RunProgramsInProcess(g, compiled->programs, inputs, {});
  REQUIRE(run.ok());
  CHECK(run->outputs[0].values == want[0].values);
}

// x [1, 4, 32, 32] -> conv 3x3 pad 1 -> a -> conv -> b -> conv -> y, 8
// channels inside, seeded weights.
Graph ConvChain3() {
  Graph g;
  int x = g.AddValue("x", {1, 4, 32, 32});
  g.inputs = {x};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  const char* names[3] = {"a", "b", "y"};
  int64_t in = 4;
  for (int l = 0; l < 3; ++l) {
    const int64_t out = l == 2 ? 4 : 8;
    TensorData w{{out, in, 3, 3}, std::vector<float>(static_cast<size_t>(out * in * 9))};
    for (float& v : w.values) v = u(rng);
    const int wid = g.AddConstant(std::string("w") + names[l], std::move(w));
    const int y = g.AddValue(names[l], {1, out, 32, 32});
    Node conv{std::string("conv_") + names[l], "Conv", {x, wid}, {y}, {}};
    conv.attrs.Set("kernel_shape", std::vector<int64_t>{3, 3});
    conv.attrs.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
    g.AddNode(conv);
    x = y;
    in = out;
  }
  g.outputs = {x};
  return g;
}

TEST_CASE("processing in parts: each band computes new rows only and keeps kh - stride rows of each map",
          "[runtime][memory][parts]") {
  // Issue 18 item 3, worked by hand: y's 32 rows in 4 bands of 8. Band 1
  // computes y [8, 16), reading b [7, 17): b [9, 17) is new (band 0 computed
  // b [0, 9)), b [7, 9) was kept; b [9, 17) reads a [8, 18): a [10, 18) new,
  // a [8, 10) kept. So between bands each map keeps 2 rows (3x3, stride 1),
  // and over the 4 bands every layer computes its 32 rows exactly once.
  const Graph g = ConvChain3();
  PartitionPlan plan = SingleDevicePlan(g.nodes.size());
  for (auto& l : plan.layers) {
    l.scheme = LayerScheme::kFfmt;
    l.grid_rows = 4;
    l.parts = true;
  }
  auto compiled = CompilePlan(g, plan);
  INFO(compiled.status().ToString());
  REQUIRE(compiled.ok());
  CHECK(compiled->halo_mac_overhead == 0);
  const DeviceProgram& p = compiled->programs[0];
  std::vector<std::string> kept;
  for (const auto& b : p.buffers)
    if (b.name.find("@kept") != std::string::npos) kept.push_back(b.name);
  CHECK(kept.size() == 6);  // a and b, after bands 0, 1 and 2
  auto kept_box = [&](const std::string& value, int64_t r0, int64_t r1) {
    for (const auto& b : p.buffers)
      if (b.name.rfind(value + "@kept", 0) == 0 && b.box.dims[2].begin == r0 && b.box.dims[2].end == r1 &&
          b.box.dims[3].begin == 0 && b.box.dims[3].end == 32)
        return true;
    return false;
  };
  CHECK(kept_box("b", 7, 9));
  CHECK(kept_box("a", 8, 10));
  CHECK(kept_box("b", 15, 17));
  CHECK(kept_box("a", 16, 18));
  CHECK(kept_box("b", 23, 25));
  CHECK(kept_box("a", 24, 26));
  // Rows each conv computes, summed over the bands: 32 each, none twice.
  std::map<std::string, int64_t> rows;
  int bands = 0;
  for (const auto& s : p.steps) {
    if (s.kind != StepKind::kCompute) continue;
    ++bands;
    const Graph& sub = p.subgraphs[s.subgraph];
    for (const Node& n : sub.nodes)
      if (n.op == "Conv") rows[n.name] += sub.values[n.outputs[0]].shape[2];
  }
  CHECK(bands == 4);
  CHECK(rows == std::map<std::string, int64_t>{{"conv_a", 32}, {"conv_b", 32}, {"conv_y", 32}});
  // Answers: the unsplit run's, within 1e-5 (the kernels see other shapes).
  const auto inputs = Inputs(g);
  const std::vector<TensorData> want = Unsplit(g, inputs);
  auto run = RunProgramsInProcess(g, compiled->programs, inputs, {});
  REQUIRE(run.ok());
  CHECK(MaxRelDiff(run->outputs[0], want[0]) <= 1e-5);
  // Memory: the maps are held a band's window at a time.
  auto whole = PreparedProgram::Prepare(CompilePlan(g, SingleDevicePlan(g.nodes.size()))->programs[0], {});
  auto parts = PreparedProgram::Prepare(p, {});
  REQUIRE(whole.ok());
  REQUIRE(parts.ok());
  INFO("arena in parts " << (*parts)->memory_bytes() << " vs whole " << (*whole)->memory_bytes());
  CHECK((*parts)->memory_bytes() < (*whole)->memory_bytes());
  // More than one device, or a grid with columns: refused by name.
  plan.layers[0].grid_cols = 2;
  auto refused = CompilePlan(g, plan);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("processing in parts runs on one device in row bands") != std::string::npos);
}

TEST_CASE("requests in flight take turns in the working memory and answer bit for bit", "[runtime][memory][pipeline]") {
  const Graph g = TinyYolo();
  const auto inputs = Inputs(g);
  const std::vector<TensorData> want = Unsplit(g, inputs);
  CompiledPlan compiled = Compile(g, ForcedScheme::kPipeline, 1);
  for (int slots : {1, 2}) {
    RunnerOptions ro;
    ro.compute_slots = slots;
    auto prepared = PreparedProgram::Prepare(compiled.programs[0], ro);
    REQUIRE(prepared.ok());
    // One device, no links: everything is working memory, laid out as one arena.
    CHECK((*prepared)->shares_working());
    CHECK((*prepared)->request_bytes() == 0);
    CHECK((*prepared)->working_bytes() == (*prepared)->whole_bytes());
    constexpr int kRequests = 4;
    std::vector<std::unique_ptr<ProgramRunner>> runners;
    for (int r = 0; r < kRequests; ++r) {
      auto runner = (*prepared)->NewRunner();
      REQUIRE(runner.ok());
      runners.push_back(std::move(*runner));
    }
    std::vector<std::vector<TensorData>> got(kRequests);
    std::vector<Status> status(kRequests);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRequests; ++r)
      threads.emplace_back([&, r] {
        for (int round = 0; round < 3 && status[r].ok(); ++round) status[r] = runners[r]->Run({}, inputs, &got[r]);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < kRequests; ++r) {
      INFO("slots " << slots << ", request " << r << ": " << status[r].ToString());
      REQUIRE(status[r].ok());
      CHECK(got[r][0].values == want[0].values);
    }
    // Four runners, at most `slots` working memories (made as runs overlapped).
    CHECK((*prepared)->working_memories() >= 1);
    CHECK((*prepared)->working_memories() <= slots);
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// yolov2-tiny and yolov3-tiny at 96x96 with seeded weights: their first 13
// layers are the same computation (same cfg sections, same seeded values),
// so the merged graph shares them (partition/graph/merge_models.h).
Graph TwoTinyYolos(Graph* v2, Graph* v3) {
  ImportOptions io;
  io.input_shapes[""] = {1, 3, 96, 96};
  auto a = ImportModel("/usr/share/darknet/cfg/yolov2-tiny.cfg", io);
  auto b = ImportModel("/usr/share/darknet/cfg/yolov3-tiny.cfg", io);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  *v2 = *a;
  *v3 = *b;
  MergeReport report;
  auto g = MergeModels({std::move(*a), std::move(*b)}, &report);
  REQUIRE(g.ok());
  REQUIRE(report.models[1].shared_layers == 13);
  REQUIRE(g->models.size() == 2);
  return std::move(*g);
}

}  // namespace

TEST_CASE("scenarios: a request naming one merged model runs its steps only and answers as the model alone",
          "[runtime][scenarios]") {
  Graph v2, v3;
  const Graph g = TwoTinyYolos(&v2, &v3);
  const auto inputs = Inputs(g);
  REQUIRE(inputs.size() == 1);
  const std::vector<TensorData> want_v2 = Unsplit(v2, inputs), want_v3 = Unsplit(v3, inputs);
  for (ForcedScheme scheme : {ForcedScheme::kFfmt, ForcedScheme::kFdto, ForcedScheme::kPipeline}) {
    CAPTURE(static_cast<int>(scheme));
    const CompiledPlan c = Compile(g, scheme, 3);
    size_t all_steps = 0;
    std::vector<size_t> scenario_steps(2, 0);
    for (const DeviceProgram& p : c.programs) {
      REQUIRE(p.scenarios.size() == 2);
      CHECK(p.scenarios[0].name == "yolov2-tiny");
      all_steps += p.steps.size();
      for (int s = 0; s < 2; ++s) scenario_steps[s] += p.scenarios[s].steps.size();
    }
    // Each model skips the other's own layers; together they cover every step.
    CHECK(scenario_steps[0] < all_steps);
    CHECK(scenario_steps[1] < all_steps);
    CHECK(scenario_steps[0] + scenario_steps[1] >= all_steps);
    RunnerOptions ro;
    auto full = RunProgramsInProcess(g, c.programs, inputs, ro);
    REQUIRE(full.ok());
    REQUIRE(full->outputs.size() == 3);  // yolov2-tiny's, then yolov3-tiny's two
    for (int s = 0; s < 2; ++s) {
      CAPTURE(s);
      auto one = RunProgramsInProcess(g, c.programs, inputs, ro, 1, s);
      REQUIRE(one.ok());
      REQUIRE(one->outputs.size() == 3);
      if (s == 0) {
        CHECK(MaxRelDiff(one->outputs[0], want_v2[0]) <= 1e-5);
        CHECK(one->outputs[1].values.empty());
        CHECK(one->outputs[2].values.empty());
      } else {
        CHECK(one->outputs[0].values.empty());
        CHECK(MaxRelDiff(one->outputs[1], want_v3[0]) <= 1e-5);
        CHECK(MaxRelDiff(one->outputs[2], want_v3[1]) <= 1e-5);
      }
      // Only its messages travel: fewer bytes than running both.
      CHECK(one->total_bytes < full->total_bytes);
    }
    // Requests of either model through the same prepared runners, in turn.
    auto again = RunProgramsInProcess(g, c.programs, inputs, ro, 1, 0);
    REQUIRE(again.ok());
    CHECK(MaxRelDiff(again->outputs[0], want_v2[0]) <= 1e-5);
  }
}

TEST_CASE("scenarios survive the program codec and a bad scenario is refused by name", "[runtime][scenarios]") {
  Graph v2, v3;
  const Graph g = TwoTinyYolos(&v2, &v3);
  const CompiledPlan c = Compile(g, ForcedScheme::kPipeline, 2);
  for (const DeviceProgram& p : c.programs) {
    const std::string bytes = SerializeProgram(p, "plan");
    std::string plan_id;
    auto back = ParseProgram(bytes, "test", &plan_id);
    REQUIRE(back.ok());
    REQUIRE(back->scenarios.size() == p.scenarios.size());
    for (size_t s = 0; s < p.scenarios.size(); ++s) {
      CHECK(back->scenarios[s].name == p.scenarios[s].name);
      CHECK(back->scenarios[s].steps == p.scenarios[s].steps);
      CHECK(back->scenarios[s].outputs == p.scenarios[s].outputs);
      CHECK(back->scenarios[s].waits == p.scenarios[s].waits);
    }
  }
  // Wait counts that do not match the steps are refused when decoding.
  {
    DeviceProgram bad = c.programs[0];
    REQUIRE(!bad.scenarios[1].waits.empty());
    bad.scenarios[1].waits.pop_back();
    std::string plan_id;
    auto back = ParseProgram(SerializeProgram(bad, "plan"), "test", &plan_id);
    CHECK(back.status().code() == StatusCode::kDataLoss);
    CHECK(back.status().message().find("wait counts") != std::string::npos);
  }
  // A program written before wait counts existed gets them from its steps.
  {
    DeviceProgram old = c.programs[0];
    for (ProgramScenario& sc : old.scenarios) sc.waits.clear();
    std::string plan_id;
    auto back = ParseProgram(SerializeProgram(old, "plan"), "test", &plan_id);
    REQUIRE(back.ok());
    for (size_t s = 0; s < back->scenarios.size(); ++s)
      CHECK(back->scenarios[s].waits == c.programs[0].scenarios[s].waits);
  }
  // A scenario that skips a step its later step needs (a damaged program):
  // the later step's wait count is not reached, and the runner refuses it
  // by name instead of computing from a stale buffer.
  {
    DeviceProgram bad = c.programs[0];
    ProgramScenario& sc = bad.scenarios[1];
    const auto writers = StepWriters(bad);
    size_t k = 0;
    while (k < sc.steps.size() && sc.waits[k] == 0) ++k;
    REQUIRE(k < sc.steps.size());
    const int needing = sc.steps[k];
    const int victim = writers[needing].front();  // a writer of what it reads
    const auto at = std::find(sc.steps.begin(), sc.steps.end(), victim) - sc.steps.begin();
    REQUIRE(at < static_cast<long>(sc.steps.size()));
    sc.steps.erase(sc.steps.begin() + at);
    sc.waits.erase(sc.waits.begin() + at);
    auto damaged = ProgramRunner::Create(bad, RunnerOptions());
    REQUIRE(damaged.ok());
    std::vector<TensorData> none;
    Status refused = (*damaged)->Run({}, Inputs(g), &none, 1);
    INFO(refused.ToString());
    CHECK(refused.code() == StatusCode::kFailedPrecondition);
    CHECK(refused.message().find("skips a step it needs") != std::string::npos);
    CHECK(refused.message().find("step " + std::to_string(needing) + " waits") != std::string::npos);
  }
  auto runner = ProgramRunner::Create(c.programs[0], RunnerOptions());
  REQUIRE(runner.ok());
  std::vector<TensorData> out;
  Status st = (*runner)->Run({}, Inputs(g), &out, 2);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("no model 2") != std::string::npos);
}

}  // namespace tessera

namespace tessera {
namespace {

// A link that logs, in call order, the messages its device sends, waits
// out (WaitSent) and receives; everything else goes to the real link.
struct LinkLog {
  std::mutex mu;
  std::vector<std::pair<char, int64_t>> events;  // 'S' SendFrom, 'W' WaitSent, 'R' RecvInto
  void Add(char kind, int64_t message) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back({kind, message});
  }
};

class LoggingLink final : public Link {
 public:
  LoggingLink(std::unique_ptr<Link> inner, LinkLog* log) : inner_(std::move(inner)), log_(log) {}
  Status Send(int64_t message, std::string bytes) override { return inner_->Send(message, std::move(bytes)); }
  Result<std::string> Recv(int64_t message, std::chrono::milliseconds timeout) override {
    return inner_->Recv(message, timeout);
  }
  Status SendFrom(int64_t message, const void* data, size_t bytes) override {
    log_->Add('S', message);
    return inner_->SendFrom(message, data, bytes);
  }
  Status WaitSent(int64_t message) override {
    log_->Add('W', message);
    return inner_->WaitSent(message);
  }
  void Expect(int64_t message, void* dst, size_t bytes) override { inner_->Expect(message, dst, bytes); }
  Status RecvInto(int64_t message, void* dst, size_t bytes, std::chrono::milliseconds timeout) override {
    log_->Add('R', message);
    return inner_->RecvInto(message, dst, bytes, timeout);
  }
  void Detach() override { inner_->Detach(); }
  int64_t bytes_sent() const override { return inner_->bytes_sent(); }
  std::string description() const override { return "logging " + inner_->description(); }

 private:
  std::unique_ptr<Link> inner_;
  LinkLog* log_;
};

// Runs the programs once over logging in-process links; per device, its log.
std::vector<std::vector<std::pair<char, int64_t>>> RunLogged(const Graph& g, const CompiledPlan& compiled,
                                                             const RunnerOptions& ro, std::vector<TensorData>* out) {
  const size_t n = compiled.programs.size();
  std::vector<std::unique_ptr<ProgramRunner>> runners;
  for (const auto& p : compiled.programs) {
    auto r = ProgramRunner::Create(p, ro);
    REQUIRE(r.ok());
    runners.push_back(std::move(*r));
  }
  std::vector<LinkLog> logs(n);
  std::vector<std::vector<std::unique_ptr<Link>>> links(n);
  for (auto& row : links) row.resize(n);
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      auto [x, y] = MakeInProcessLinkPair(std::to_string(a), std::to_string(b));
      links[a][b] = std::make_unique<LoggingLink>(std::move(x), &logs[a]);
      links[b][a] = std::make_unique<LoggingLink>(std::move(y), &logs[b]);
    }
  const std::vector<TensorData> inputs = Inputs(g);
  std::vector<std::vector<TensorData>> outs(n);
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (size_t d = 0; d < n; ++d)
    threads.emplace_back([&, d] {
      std::vector<Link*> peers;
      for (auto& l : links[d]) peers.push_back(l.get());
      std::vector<TensorData> mine;
      for (size_t k = 0; k < compiled.programs[d].model_inputs.size(); ++k) mine.push_back(inputs[k]);
      status[d] = runners[d]->Run(peers, mine, &outs[d]);
    });
  for (auto& t : threads) t.join();
  for (size_t d = 0; d < n; ++d) {
    INFO("device " << d << ": " << status[d].ToString());
    REQUIRE(status[d].ok());
  }
  *out = outs[0];
  std::vector<std::vector<std::pair<char, int64_t>>> result;
  for (auto& l : logs) result.push_back(l.events);
  return result;
}

// Per device: the Sends whose WaitSent came after a later step's Recv or
// Send although a compute run started in between.
int SendsLeftBehind(const DeviceProgram& p, const std::vector<std::pair<char, int64_t>>& log) {
  std::map<int64_t, size_t> step_of;  // message -> its step on this device
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (p.steps[i].kind == StepKind::kSend || p.steps[i].kind == StepKind::kRecv) step_of[p.steps[i].message] = i;
  int behind = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i].kind != StepKind::kSend) continue;
    size_t run = i + 1;  // the first compute step after the Send
    while (run < p.steps.size() && p.steps[run].kind != StepKind::kCompute && p.steps[run].kind != StepKind::kMerge)
      ++run;
    if (run == p.steps.size()) continue;
    // Where the Send was waited out, and the first link call of a step after the run.
    size_t waited = log.size(), later = log.size();
    for (size_t e = 0; e < log.size(); ++e) {
      if (log[e].first == 'W' && log[e].second == p.steps[i].message && waited == log.size()) waited = e;
      if (log[e].first != 'W' && step_of.count(log[e].second) && step_of[log[e].second] > run && later == log.size())
        later = e;
    }
    behind += waited > later;
  }
  return behind;
}

TEST_CASE("flush_sends: every message leaves before the next compute run, answers unchanged", "[runtime][flush]") {
  const Graph g = TinyYolo();
  // FDT fan-out: the source sends each layer's input slices, then computes its own.
  const CompiledPlan compiled = Compile(g, ForcedScheme::kFdto, 2);
  RunnerOptions ro;
  std::vector<TensorData> plain, flushed;
  const auto without = RunLogged(g, compiled, ro, &plain);
  ro.flush_sends = true;
  const auto with = RunLogged(g, compiled, ro, &flushed);
  int behind_without = 0;
  for (size_t d = 0; d < compiled.programs.size(); ++d) {
    INFO("device " << d);
    CHECK(SendsLeftBehind(compiled.programs[d], with[d]) == 0);
    behind_without += SendsLeftBehind(compiled.programs[d], without[d]);
  }
  // Without it a Send is waited out only where its memory is reused: some
  // messages are still leaving while later steps run (what the option changes).
  CHECK(behind_without > 0);
  REQUIRE(plain.size() == flushed.size());
  for (size_t k = 0; k < plain.size(); ++k) CHECK(plain[k].values == flushed[k].values);
}

}  // namespace
}  // namespace tessera
