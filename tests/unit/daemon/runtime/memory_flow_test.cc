// The one-device memory flow (issue 17 item 3, METHODS §6; daemon/runtime/
// memory_flow.h): the paths it cuts into tiles must shrink the arena it
// prints, the printed arena must be what the runner allocates for the
// transformed program, the answers must equal the unsplit run, and the MAC
// budget must hold.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "daemon/runtime/device_memory.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/kernel.h"
#include "daemon/runtime/memory_flow.h"
#include "daemon/runtime/program_runner.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/compile/program_codec.h"
#include "partition/compile/program_compiler.h"
#include "partition/import/model_import.h"
#include "tests/unit/daemon/runtime/cfg_graph.h"

namespace tessera {
namespace {

// darknet cfg sections.
std::string Net(int h, int w, int c) {
  return "[net]\nheight=" + std::to_string(h) + "\nwidth=" + std::to_string(w) + "\nchannels=" + std::to_string(c) +
         "\n\n";
}
std::string Conv(int filters, int size, int pad, const std::string& act, int groups = 1) {
  return "[convolutional]\nfilters=" + std::to_string(filters) + "\ngroups=" + std::to_string(groups) +
         "\nsize=" + std::to_string(size) + "\nstride=1\npad=" + std::to_string(pad) + "\nactivation=" + act + "\n\n";
}
const std::string kMaxPool = "[maxpool]\nsize=2\nstride=2\n\n";

// A stem that blows a small input up into wide maps and pools them down:
// the arena's peak is the 32-channel 64x64 maps (512 KiB each), which no
// schedule avoids and tiling does.
const std::string kStem = Net(64, 64, 3) + Conv(32, 3, 1, "leaky") + Conv(32, 3, 1, "leaky") + kMaxPool +
                          Conv(16, 3, 1, "leaky") + kMaxPool + Conv(8, 1, 0, "linear");

// Keyword-spotting-style: 32x8x1 input, conv -> depthwise -> pointwise ->
// pool -> dense.
const std::string kKws = Net(32, 8, 1) + Conv(32, 3, 1, "relu") + Conv(32, 3, 1, "relu", 32) + Conv(32, 1, 0, "relu") +
                         "[avgpool]\n\n[connected]\noutput=12\nactivation=linear\n";

// Runs one-device `plan` in process and `g` on one Executor: the answers agree within
// `tol` of max |ref|. Returns the device arena the runner allocated.
int64_t RunsLikeTheGraph(const Graph& g, const PartitionPlan& plan, double tol) {
  auto compiled = CompilePlan(g, plan);
  INFO(compiled.status().ToString());
  REQUIRE(compiled.ok());
  REQUIRE(compiled->programs.size() == 1);
  std::vector<TensorData> inputs;
  for (int v : g.inputs) inputs.push_back(SeededInput(g.values[v].shape, 7));
  auto run = RunProgramsInProcess(g, compiled->programs, inputs, RunnerOptions());
  INFO(run.status().ToString());
  REQUIRE(run.ok());
  auto ex = Executor::Create(g, ExecutorOptions());
  REQUIRE(ex.ok());
  std::vector<TensorData> want;
  REQUIRE((*ex)->Run(inputs, &want).ok());
  REQUIRE(want.size() == run->outputs.size());
  for (size_t k = 0; k < want.size(); ++k) {
    const auto& a = want[k].values;
    const auto& b = run->outputs[k].values;
    REQUIRE(a.size() == b.size());
    double diff = 0, ref = 0;
    for (size_t i = 0; i < a.size(); ++i)
      diff = std::max(diff, std::abs(double(a[i]) - b[i])), ref = std::max(ref, std::abs(double(a[i])));
    INFO("output " << k << ": max |a-b| " << diff << " of max |ref| " << ref);
    CHECK(diff <= tol * ref);
  }
  return static_cast<int64_t>(run->device_memory_bytes.at(0));
}

// The flow's plan runs in exactly the arena it printed, with the answers of
// the graph run whole.
void CheckRunsInPrintedArena(const Graph& g, const MemoryFlowResult& r, double tol) {
  CHECK(RunsLikeTheGraph(g, r.plan, tol) == r.arena_after_bytes);
}

TEST_CASE("optimize-memory tiles the wide stem: smaller arena, same answers, the printed arena is the run's") {
  const Graph g = FromCfg("stem", kStem);
  MemoryFlowOptions o;
  o.max_mac_overhead = -1;  // memory first
  auto r = OptimizeMemory(g, o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  // Untiled, conv1's and conv2's 512 KiB outputs are alive together: > 1 MiB.
  CHECK(r->arena_before_bytes > (1 << 20));
  // Tiled, no 32x64x64 map exists whole, and the tiles keep each weight
  // and packed form once (weight_forms.h): the weights as stored do not grow.
  CHECK(r->arena_after_bytes * 3 < r->arena_before_bytes * 2);
  CHECK(r->need_after() < r->need_before());
  CHECK(r->weight_after_bytes == r->weight_before_bytes);
  REQUIRE(!r->paths.empty());
  CHECK(r->paths.front().first == 0);
  // The first size is the untiled one-device program's, the last the chosen plan's.
  auto whole = SizeOneDevicePlan(g, SingleDevicePlan(g.nodes.size()), DeviceMemoryOptions());
  REQUIRE(whole.ok());
  CHECK(whole->arena_bytes == r->arena_before_bytes);
  auto chosen = SizeOneDevicePlan(g, r->plan, DeviceMemoryOptions());
  REQUIRE(chosen.ok());
  CHECK(chosen->arena_bytes == r->arena_after_bytes);
  CHECK(chosen->weight_bytes == r->weight_after_bytes);
  CHECK(chosen->halo_macs == r->halo_macs);
  CHECK(r->halo_macs > 0);  // 3x3 convs recompute their halos
  // Tiles sum in the same order as the whole convs: measured bit-identical.
  CheckRunsInPrintedArena(g, *r, 1e-5);
}

// An inverted residual without the residual (MobileNetV2's block): 1x1
// expand 8 -> 48 channels, 3x3 depthwise, 1x1 project 48 -> 8. Untiled, the
// two 48-channel maps are alive together at the depthwise step.
std::string Inverted(int size, int blocks) {
  std::string cfg = Net(size, size, 8);
  for (int b = 0; b < blocks; ++b) cfg += Conv(48, 1, 0, "relu") + Conv(48, 3, 1, "relu", 48) + Conv(8, 1, 0, "leaky");
  return cfg;
}

// Issue 17 item 3, channel paths (program_compiler.cc "Channel paths").
TEST_CASE("a channel path on one device answers like the unsplit run in a smaller arena, adding no MAC") {
  const Graph g = FromCfg("inverted", Inverted(16, 1));
  REQUIRE(g.nodes.size() == 3);
  const PartitionPlan whole = SingleDevicePlan(g.nodes.size());
  auto untiled = SizeOneDevicePlan(g, whole, DeviceMemoryOptions());
  REQUIRE(untiled.ok());
  // The two 48x16x16 maps (48 KiB each) are alive at the depthwise step.
  CHECK(untiled->arena_bytes >= 2 * 48 * 16 * 16 * 4);
  struct Case {
    int first, last;
    bool fan_out, fan_in;
    int64_t slices;
  };
  // FDTO -> PART -> FDTI; SPLIT -> FDTI; FDTO -> PART -> CONCAT; every channel a slice.
  for (const Case& c : {Case{0, 2, true, true, 2}, Case{0, 2, true, true, 3}, Case{0, 2, true, true, 6},
                        Case{0, 2, true, true, 48}, Case{1, 2, false, true, 4}, Case{0, 1, true, false, 4}}) {
    MemoryPath path{c.first, c.last, 1, 1, 0, "", false, c.slices, c.fan_out, c.fan_in};
    const PartitionPlan plan = PlanOf(whole, 0, {path});
    INFO(DescribeMemoryPath(g, path));
    auto compiled = CompilePlan(g, plan);
    INFO(compiled.status().ToString());
    REQUIRE(compiled.ok());
    REQUIRE(compiled->programs.size() == 1);
    CHECK(compiled->halo_mac_overhead == 0);
    int slice_steps = 0;
    for (const ProgramStep& s : compiled->programs[0].steps)
      slice_steps += s.kind == StepKind::kCompute && s.layer == c.first + 1;
    CHECK(slice_steps == c.slices);  // one step per slice, every layer of the path in it
    auto sized = SizeOneDevicePlan(g, plan, DeviceMemoryOptions());
    REQUIRE(sized.ok());
    // (Weights as stored: slices of the same weights, but each slice's packed
    // panels are padded to the ISA's microkernel width, so they depend on the
    // CPU; the flow counts them in its need.)
    // Sums of slices in another order than the whole conv's: float rounding.
    const int64_t arena = RunsLikeTheGraph(g, plan, 1e-5);
    CHECK(arena == sized->arena_bytes);
    if (c.fan_out && c.fan_in && c.slices >= 3) CHECK(sized->arena_bytes < untiled->arena_bytes);
  }
  // A path the compiler cannot take is refused naming it.
  PartitionPlan bad = whole;
  bad.layers[1].scheme = LayerScheme::kFdt1;  // the depthwise conv as a fan-out
  bad.layers[2].scheme = LayerScheme::kFdt2;
  bad.layers[1].devices = bad.layers[2].devices = {0, 0, 0};
  auto refused = CompilePlan(g, bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("channel path") != std::string::npos);
  CHECK(refused.status().message().find("one group") != std::string::npos);
}

TEST_CASE("optimize-memory with channel paths only cuts inverted blocks into channel slices, same answers") {
  const Graph g = FromCfg("inverted_flow", Inverted(24, 2));
  MemoryFlowOptions o;
  o.tiles = false;
  o.parts = false;
  auto r = OptimizeMemory(g, o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->paths.empty());
  for (const MemoryPath& p : r->paths) {
    INFO(DescribeMemoryPath(g, p));
    CHECK(p.channel_slices >= 2);
    CHECK(p.channel_slices <= 48);
  }
  CHECK(r->halo_macs == 0);
  // Measured 239616 -> 97472 bytes (6 slices each: a plateau round cuts
  // the first block before the second lowers the peak).
  CHECK(r->arena_after_bytes * 2 < r->arena_before_bytes);
  CheckRunsInPrintedArena(g, *r, 1e-5);
  // With every kind of path the flow needs no more than without channel paths.
  MemoryFlowOptions all, no_channels;
  no_channels.channels = false;
  auto a = OptimizeMemory(g, all), b = OptimizeMemory(g, no_channels);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->need_after() <= b->need_after());
  CheckRunsInPrintedArena(g, *a, 1e-5);
  // Nothing to try is an error, not an empty result.
  MemoryFlowOptions none;
  none.tiles = none.parts = none.channels = false;
  CHECK_FALSE(OptimizeMemory(g, none).ok());
}

TEST_CASE("optimize-memory keeps to the MAC budget") {
  const Graph g = FromCfg("stem_budget", kStem);
  MemoryFlowOptions unlimited;
  unlimited.max_mac_overhead = -1;
  auto free_run = OptimizeMemory(g, unlimited);
  REQUIRE(free_run.ok());
  for (double budget : {0.0, 0.02, 0.10}) {
    MemoryFlowOptions o;
    o.max_mac_overhead = budget;
    auto r = OptimizeMemory(g, o);
    REQUIRE(r.ok());
    INFO("budget " << budget << ": overhead " << r->mac_overhead());
    CHECK(r->mac_overhead() <= budget);
    CHECK(r->need_after() <= r->need_before());
    // A budget can only cost memory against no budget.
    CHECK(r->need_after() >= free_run->need_after());
    CheckRunsInPrintedArena(g, *r, 1e-5);
  }
}

TEST_CASE("optimize-memory on a keyword-spotting-style CNN never needs more and answers the same") {
  const Graph g = FromCfg("kws", kKws);
  MemoryFlowOptions o;
  o.max_mac_overhead = -1;
  auto r = OptimizeMemory(g, o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  // conv (32x32x8 = 32 KiB) and depthwise outputs are alive together
  // untiled; tiles would shrink the arena, but their copies of the weights
  // cost more than that here (measured: no path kept, 66.6 KiB arena).
  CHECK(r->need_after() <= r->need_before());
  CheckRunsInPrintedArena(g, *r, 1e-5);
}

TEST_CASE("optimize-memory leaves a model with nothing to tile as it is") {
  // Dense layers only: nothing tileable, no candidate, the plan is the whole model.
  const Graph g = FromCfg("dense", Net(1, 1, 64) + "[connected]\noutput=32\nactivation=relu\n\n" +
                                       "[connected]\noutput=8\nactivation=linear\n");
  auto r = OptimizeMemory(g, MemoryFlowOptions());
  REQUIRE(r.ok());
  CHECK(r->paths.empty());
  CHECK(r->arena_after_bytes == r->arena_before_bytes);
  CHECK(r->halo_macs == 0);
}

// The tiles of an FFMT stack are subgraphs that each name the stack's
// weights. The program must keep each weight once all the same: written once
// on the wire, decoded once by a worker (share_constants), packed once by
// the runner, and sized once by the planner's shapes-only sizing.
// A runner of `prepared` (one device, no peers) answers `expected` bit for bit.
void AnswersBitForBit(const PreparedProgram& prepared, const std::vector<TensorData>& inputs,
                      const std::vector<TensorData>& expected) {
  auto runner = prepared.NewRunner();
  REQUIRE(runner.ok());
  std::vector<TensorData> got;
  REQUIRE((*runner)->Run({nullptr}, inputs, &got).ok());
  REQUIRE(got.size() == expected.size());
  for (size_t k = 0; k < got.size(); ++k) CHECK(got[k].values == expected[k].values);
}

TEST_CASE("the tiles of a stack keep each weight once: on the wire, decoded, packed and sized") {
  // im2col 3x3 (packed), depthwise 3x3 (raw, read in Eval), pointwise (packed).
  // 8 input channels keep the first conv on im2col: Winograd (from 16
  // channels, conv.cc) sums a tile whose halo starts on an odd row in other
  // 2x2 blocks than the whole plane does, so the answers below would agree
  // only to rounding, not bit for bit.
  const Graph g = FromCfg("shared", Net(40, 40, 8) + Conv(64, 3, 1, "leaky") + Conv(64, 3, 1, "relu", 64) +
                                        Conv(64, 1, 0, "linear") + kMaxPool);
  PartitionPlan tiled_plan = SingleDevicePlan(g.nodes.size());
  for (int k = 0; k < 3; ++k) tiled_plan.layers[k] = LayerAssignment{LayerScheme::kFfmt, {0}, {}, 2, 2, {}, {}};
  auto whole = CompilePlan(g, SingleDevicePlan(g.nodes.size()));
  auto tiled = CompilePlan(g, tiled_plan);
  REQUIRE(whole.ok());
  REQUIRE(tiled.ok());
  const DeviceProgram& wp = whole->programs.at(0);
  const DeviceProgram& tp = tiled->programs.at(0);
  // The compiled tiles hold a copy each: 4x the stack's raw weights.
  CHECK(tp.WeightValues() >= 4 * (wp.WeightValues() - 64 * 4));

  // On the wire: each weight once, the rest is structure (a few KiB).
  const std::string wire_whole = SerializeProgram(wp, "p"), wire_tiled = SerializeProgram(tp, "p");
  const int64_t raw_bytes = wp.WeightValues() * 4;
  INFO("wire: whole " << wire_whole.size() << " bytes, tiled " << wire_tiled.size() << ", raw weights " << raw_bytes);
  CHECK(static_cast<int64_t>(wire_tiled.size()) < raw_bytes + 32 * 1024);
  CHECK(static_cast<int64_t>(wire_tiled.size()) < static_cast<int64_t>(wire_whole.size()) + 32 * 1024);

  // Decoded as before (every constant its own copy, equal values), or shared.
  std::string id;
  auto copied = ParseProgram(wire_tiled, "tiled", &id);
  REQUIRE(copied.ok());
  CHECK(copied->shared_constants.empty());
  CHECK(copied->WeightValues() == tp.WeightValues());
  for (size_t i = 0; i < tp.subgraphs.size(); ++i)
    for (const auto& [v, data] : tp.subgraphs[i].constants)
      CHECK(copied->subgraphs[i].constants.at(v).values == data.values);
  auto shared = ParseProgram(std::string(wire_tiled), "tiled", &id, /*share_constants=*/true);
  REQUIRE(shared.ok());
  int64_t held = 0;
  for (const Graph& sub : shared->subgraphs)
    for (const auto& [v, data] : sub.constants) held += static_cast<int64_t>(data.values.size());
  CHECK(held == wp.WeightValues());
  CHECK(shared->shared_constants.size() >= 3 * 5);  // 3 later tiles x (3 weights + 2 biases) at least

  // Packed once: the same weights as stored as the untiled program, whether
  // the runner found the copies itself, read the shared decode, or sized
  // shapes only; raw weights while loading are the untiled program's too.
  RunnerOptions ro;
  auto p_whole = PreparedProgram::Prepare(wp, ro);
  auto p_tiled = PreparedProgram::Prepare(tp, ro);
  DeviceProgram released = *shared;
  auto p_shared = PreparedProgram::PrepareReleasingWeights(&released, ro);
  REQUIRE(p_whole.ok());
  REQUIRE(p_tiled.ok());
  INFO(p_shared.status().ToString());
  REQUIRE(p_shared.ok());
  auto sized = SizeDeviceProgram(tp, DeviceMemoryOptions());
  REQUIRE(sized.ok());
  INFO("weights as stored: whole " << (*p_whole)->weight_bytes() << ", tiled " << (*p_tiled)->weight_bytes());
  CHECK((*p_tiled)->weight_bytes() == (*p_whole)->weight_bytes());
  CHECK((*p_shared)->weight_bytes() == (*p_whole)->weight_bytes());
  CHECK(sized->weight_bytes == static_cast<int64_t>((*p_whole)->weight_bytes()));
  CHECK((*p_shared)->load_peak_bytes() == (*p_tiled)->load_peak_bytes());
  // What the worker still holds after PrepareReleasingWeights: only the
  // raw constants some kernel reads in Eval (depthwise weights, biases),
  // each once.
  int64_t kept = 0;
  for (const Graph& sub : released.subgraphs)
    for (const auto& [v, data] : sub.constants) kept += static_cast<int64_t>(data.values.size()) * 4;
  int64_t read_whole = 0;
  for (size_t i = 0; i < wp.subgraphs.size(); ++i)
    for (const auto& [v, data] : wp.subgraphs[i].constants)
      if ((*p_whole)->ReadsConstant(static_cast<int>(i), v)) read_whole += static_cast<int64_t>(data.values.size()) * 4;
  CHECK(kept == read_whole);
  CHECK(kept > 0);

  // Same answers from the three (bit for bit: same kernels, same sums).
  std::vector<TensorData> inputs;
  for (int v : g.inputs) inputs.push_back(SeededInput(g.values[v].shape, 11));
  auto a = RunProgramsInProcess(g, {tp}, inputs, ro);
  auto b = RunProgramsInProcess(g, {*shared}, inputs, ro);
  REQUIRE(a.ok());
  INFO(b.status().ToString());
  REQUIRE(b.ok());
  REQUIRE(a->outputs.size() == b->outputs.size());
  for (size_t k = 0; k < a->outputs.size(); ++k) CHECK(a->outputs[k].values == b->outputs[k].values);
  AnswersBitForBit(**p_shared, inputs, a->outputs);

  // As a worker loads them (issue 11 item 2): from the program's file, each
  // weight left there until a kernel reads it; a tile reads a weight it
  // shares from the owner's place in the file, and only a kernel that reads
  // it in Eval (depthwise) keeps it, once. Same weights as stored, the load
  // peak the sizing promised (below the in-memory load's), the same answers.
  for (const DeviceProgram* program : {&tp, &wp}) {
    const bool is_tiled = program == &tp;
    CAPTURE(is_tiled);
    const std::string path = "/tmp/tessera-memory-flow-" + std::to_string(::getpid()) + ".pb";
    {
      std::ofstream out(path, std::ios::binary);
      out << SerializeProgram(*program, "p");
    }
    auto streamed = ParseProgramFile(path, "streamed", &id, true, /*stream_constants=*/true);
    std::remove(path.c_str());
    INFO(streamed.status().ToString());
    REQUIRE(streamed.ok());
    CHECK_FALSE(streamed->streamed_constants.empty());
    auto p_streamed = PreparedProgram::PrepareReleasingWeights(&*streamed, ro);
    INFO(p_streamed.status().ToString());
    REQUIRE(p_streamed.ok());
    auto sized_streamed = SizeDeviceProgram(*program, DeviceMemoryOptions());
    REQUIRE(sized_streamed.ok());
    CHECK((*p_streamed)->weight_bytes() == (*p_whole)->weight_bytes());
    CHECK(sized_streamed->load_peak_bytes == static_cast<int64_t>((*p_streamed)->load_peak_bytes()));
    CHECK((*p_streamed)->load_peak_bytes() < (*(is_tiled ? p_tiled : p_whole))->load_peak_bytes());
    CHECK((*p_streamed)->load_peak_bytes() <= (*p_streamed)->weight_bytes() + kConstantBlockBytes);
    AnswersBitForBit(**p_streamed, inputs, a->outputs);
  }

  // A reference to a later subgraph's constant is a clear error, not a read
  // of memory that is not there.
  DeviceProgram forward = tp;
  const auto& [first_shared, owner] = *shared->shared_constants.begin();
  forward.shared_constants[{owner.first, owner.second}] = first_shared;
  auto bad = ParseProgram(SerializeProgram(forward, "p"), "forward", &id, true);
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("not an earlier constant") != std::string::npos);
}

}  // namespace
}  // namespace tessera
