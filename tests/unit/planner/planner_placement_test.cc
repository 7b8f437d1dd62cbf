// METHODS §5: whole layers on heterogeneous devices; latency and throughput.
#include <catch2/catch.hpp>
#include <limits>
#include <random>

#include "partition/import/model_import.h"
#include "planner/placement.h"
#include "planner_test_chains.h"

using namespace tessera;
using tessera::planner_test::DenseChain;
using tessera::planner_test::HandCluster;

namespace {

// A chain whose layers cost `macs[j]` MACs and hold `q[j]` weight values.
std::vector<LayerFigures> MacsChain(const std::vector<int64_t>& macs, const std::vector<int64_t>& q = {}) {
  std::vector<LayerFigures> layers;
  for (size_t j = 0; j < macs.size(); ++j) {
    LayerFigures f;
    f.index = static_cast<int>(j) + 1;
    f.name = "l" + std::to_string(j + 1);
    f.op = "Gemm";
    f.M = f.K = 1;
    f.R = macs[j];
    f.Q = q.empty() ? 0 : q[j];
    layers.push_back(f);
  }
  return layers;
}

// n layers of 1..1000 MACs with 1..50 inputs and outputs.
std::vector<LayerFigures> RandomChain(std::mt19937_64& rng, int n) {
  std::vector<int64_t> macs(n);
  for (auto& m : macs) m = 1 + static_cast<int64_t>(rng() % 1000);
  auto layers = MacsChain(macs);
  for (auto& f : layers) f.M = 1 + rng() % 50, f.K = 1 + rng() % 50;
  return layers;
}

// d device speeds in [10, 110) MAC/s.
std::vector<double> RandomSpeeds(std::mt19937_64& rng, int d) {
  std::vector<double> speed(d);
  for (auto& s : speed) s = 10.0 + static_cast<double>(rng() % 100);
  return speed;
}

}  // namespace

// METHODS §4 sanity chain as a two-way pipeline: layers 1–2 on A, 3–4 on B.
// Weights 32+128 = 160 and 64+16 = 80 values; A sends layer 2's 16 outputs.
TEST_CASE("placement: the sanity chain as a two-way pipeline", "[planner][placement]") {
  const auto layers = DenseChain({4, 8, 16, 4, 4});
  const Cluster c = HandCluster({100, 100}, kUnlimitedBytes, kUnlimitedBytes, /*bytes_per_s=*/64);
  const auto p = MakeChainPlacementProblem(layers, c);
  const PlacementCost cost = EvaluatePlacement(p, {0, 0, 1, 1});
  CHECK(cost.weight_bytes[0] == 160 * 4);
  CHECK(cost.weight_bytes[1] == 80 * 4);
  CHECK(cost.sent_bytes[0] == 16 * 4);
  CHECK(cost.received_bytes[1] == 16 * 4);
  // Compute: (32+128)/100 = 1.6 s on A, (64+16)/100 = 0.8 s on B; transfer 64 B / 64 B/s = 1 s.
  CHECK(cost.compute_s[0] == Approx(1.6));
  CHECK(cost.compute_s[1] == Approx(0.8));
  CHECK(cost.latency_s == Approx(3.4));
  // ī = A: period = 1.6 + 1 (its outgoing transfer), no layers in between.
  CHECK(cost.bottleneck == 0);
  CHECK(cost.period_s == Approx(2.6));
}

// The same pipeline on devices that declare their network stack's CPU
// (Device::net_macs_per_byte): 0.5 s of CPU at each end for the 64 B.
// That CPU is in each device's compute time; in the latency it works while
// the bytes cross the cable (the transfer takes the longest of the wire
// and either end's CPU), and a stage's sends cross the cable while it
// computes the next inference (Device::StageSeconds). Measured on the
// emulated cluster (bench/cluster-emulated): MobileNetV2's throughput plan
// on 4 devices at 100 Mbit/s ran 0.24-0.26 s and 10.6-11.8 requests/s
// against 0.354 s and 7.85 predicted with the CPU and the sends added.
TEST_CASE("placement: a declared network CPU overlaps the cable", "[planner][placement]") {
  const auto layers = DenseChain({4, 8, 16, 4, 4});
  Cluster c = HandCluster({100, 100}, kUnlimitedBytes, kUnlimitedBytes, /*bytes_per_s=*/64);
  for (Device& d : c.devices) d.net_macs_per_byte = 0.5 / 64 * d.macs_per_s;
  const auto p = MakeChainPlacementProblem(layers, c);
  const PlacementCost cost = EvaluatePlacement(p, {0, 0, 1, 1});
  CHECK(cost.compute_s[0] == Approx(1.6 + 0.5));
  CHECK(cost.compute_s[1] == Approx(0.8 + 0.5));
  CHECK(cost.latency_s == Approx(1.6 + 0.8 + 1.0));  // was 4.4 with the CPU added
  CHECK(cost.period_s == Approx(2.1));               // A's compute; its 1 s send meanwhile (was 3.1)
  // CPU past the wire time: 2 s at each end. The transfer takes 2 s.
  for (Device& d : c.devices) d.net_macs_per_byte = 2.0 / 64 * d.macs_per_s;
  const auto p2 = MakeChainPlacementProblem(layers, c);
  const PlacementCost cpu_bound = EvaluatePlacement(p2, {0, 0, 1, 1});
  CHECK(cpu_bound.latency_s == Approx(1.6 + 0.8 + 2.0));
  CHECK(cpu_bound.period_s == Approx(3.6));
  // A slow cable (16 B/s: 4 s for the 64 B) sets A's stage.
  Cluster slow = HandCluster({100, 100}, kUnlimitedBytes, kUnlimitedBytes, /*bytes_per_s=*/16);
  for (Device& d : slow.devices) d.net_macs_per_byte = 0.5 / 64 * d.macs_per_s;
  const auto p3 = MakeChainPlacementProblem(layers, slow);
  const PlacementCost wire_bound = EvaluatePlacement(p3, {0, 0, 1, 1});
  CHECK(wire_bound.latency_s == Approx(1.6 + 0.8 + 4.0));
  CHECK(wire_bound.period_s == Approx(4.0));
  CHECK(wire_bound.bottleneck == 0);
  // No declared CPU: METHODS §5 as written (the sanity chain case above).
  const PlacementCost spec = EvaluatePlacement(
      MakeChainPlacementProblem(layers, HandCluster({100, 100}, kUnlimitedBytes, kUnlimitedBytes, 64)), {0, 0, 1, 1});
  CHECK(spec.latency_s == Approx(3.4));
  CHECK(spec.period_s == Approx(2.6));
}

// Two equal devices (1 MAC/s), layers of 2, 3 and 2 MACs, free links.
//   A,B,A: A computes 4, B 3. The naive period max(4, 3) = 4 assumes A runs
//   layer 1 of inference k+1 while B runs layer 2 of inference k — but A is
//   also due to run layer 3 of inference k in that window. Ours adds the
//   in-between layer: 4 + 3 = 7.
//   Contiguous splits: A,A,B -> 5 (A), A,B,B -> 5 (B); both definitions agree.
// So the naive optimum (4, A,B,A) double-books A; ours is 5.
TEST_CASE("placement: throughput counts the layers between a device's sub-models", "[planner][placement]") {
  const auto layers = MacsChain({2, 3, 2});
  const Cluster c = HandCluster({1, 1});
  const auto p = MakeChainPlacementProblem(layers, c);
  const PlacementCost aba = EvaluatePlacement(p, {0, 1, 0});
  CHECK(aba.naive_period_s == Approx(4));
  CHECK(aba.period_s == Approx(7));
  const PlacementCost aab = EvaluatePlacement(p, {0, 0, 1});
  CHECK(aab.naive_period_s == Approx(5));
  CHECK(aab.period_s == Approx(5));
  CHECK(aba.naive_period_s < aab.naive_period_s);  // the naive definition would pick A,B,A

  auto best = PlaceBranchAndBound(p, PlacementObjective::kThroughput);
  REQUIRE(best.ok());
  CHECK(best->cost.period_s == Approx(5));
  CHECK(best->device_of_layer != std::vector<int>{0, 1, 0});
  CHECK(best->solver.optimal);
  auto all = PlaceExhaustive(p, PlacementObjective::kThroughput);
  REQUIRE(all.ok());
  CHECK(all->cost.period_s == Approx(5));
  CHECK(all->solver.nodes == 8);  // 2^3 assignments
}

TEST_CASE("placement: latency on heterogeneous devices with flash limits", "[planner][placement]") {
  // A: 10 MAC/s, B: 1 MAC/s; links 1 B/s. Layers 10, 10, 10 MACs; weights 1 value (4 B) each.
  // With unlimited flash all on A: latency 3 s. With A holding only 8 B (two layers),
  // one layer goes to B: cheapest is the last (10 s compute + 4 B transfer = 4 s):
  //   1 + 1 + 4 + 10 = 16 s.
  const auto layers = MacsChain({10, 10, 10}, {1, 1, 1});
  Cluster c = HandCluster({10, 1}, kUnlimitedBytes, kUnlimitedBytes, 1.0);
  auto p = MakeChainPlacementProblem(layers, c);
  auto dp = PlaceLatencyDp(p);
  REQUIRE(dp.ok());
  CHECK(dp->cost.latency_s == Approx(3));
  CHECK(dp->device_of_layer == std::vector<int>{0, 0, 0});

  c.devices[0].flash_bytes = 8;
  p = MakeChainPlacementProblem(layers, c);
  auto dp2 = PlaceLatencyDp(p);
  REQUIRE(dp2.ok());
  CHECK_FALSE(dp2->cost.feasible);  // the DP ignores flash sums: B&B takes over
  auto bnb = PlaceBranchAndBound(p, PlacementObjective::kLatency);
  REQUIRE(bnb.ok());
  CHECK(bnb->cost.latency_s == Approx(16));
  auto ex = PlaceExhaustive(p, PlacementObjective::kLatency);
  REQUIRE(ex.ok());
  CHECK(ex->cost.latency_s == Approx(16));
  auto auto_pick = PlaceLayers(p, PlacementObjective::kLatency);
  REQUIRE(auto_pick.ok());
  CHECK(auto_pick->cost.latency_s == Approx(16));
  CHECK(auto_pick->solver.name == "bnb");
}

TEST_CASE("placement: exhaustive, B&B and DP agree and bisection is never better", "[planner][placement]") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 6);
    const int d = 2 + static_cast<int>(rng() % 2);
    std::vector<int64_t> macs(n), q(n);
    for (int j = 0; j < n; ++j) {
      macs[j] = 1 + static_cast<int64_t>(rng() % 1000);
      q[j] = static_cast<int64_t>(rng() % 100);
    }
    std::vector<double> speed(d);
    for (auto& s : speed) s = 10.0 + static_cast<double>(rng() % 100);
    Cluster c = HandCluster(speed, 4 * 100 * n, kUnlimitedBytes, 50.0 + static_cast<double>(rng() % 500));
    c.devices[0].flash_bytes = 4 * 150;  // the first device may not hold everything
    const auto p = MakeChainPlacementProblem(MacsChain(macs, q), c);
    INFO("trial " << trial);
    for (auto objective : {PlacementObjective::kLatency, PlacementObjective::kThroughput}) {
      auto ex = PlaceExhaustive(p, objective);
      auto bnb = PlaceBranchAndBound(p, objective);
      REQUIRE(ex.ok() == bnb.ok());
      if (!ex.ok()) continue;
      const double best = PlacementObjectiveValue(ex->cost, objective);
      CHECK(PlacementObjectiveValue(bnb->cost, objective) == Approx(best).epsilon(1e-9));
      CHECK(bnb->solver.nodes <= ex->solver.nodes * 2);
      auto bis = PlaceBisection(p, objective);
      if (bis.ok()) CHECK(PlacementObjectiveValue(bis->cost, objective) >= best * (1 - 1e-9));
      if (objective == PlacementObjective::kLatency) {
        auto dp = PlaceLatencyDp(p);
        REQUIRE(dp.ok());
        if (dp->cost.feasible) CHECK(dp->cost.latency_s == Approx(best).epsilon(1e-9));
      }
    }
  }
}

TEST_CASE("placement: a layer that fits nowhere is named with the shortfall", "[planner][placement]") {
  // Layer 2 holds 1000 weight values = 4000 B; the devices have 1000 and 3000 B flash.
  const auto layers = MacsChain({1, 1, 1}, {10, 1000, 10});
  Cluster c = HandCluster({1, 1}, 3000);
  c.devices[0].flash_bytes = 1000;
  const auto p = MakeChainPlacementProblem(layers, c);
  const Status st = CheckPlacementFeasible(p);
  REQUIRE(st.code() == StatusCode::kResourceExhausted);
  CHECK(st.message().find("layer 2 'l2'") != std::string::npos);
  CHECK(st.message().find("B") != std::string::npos);               // closest device: B (3000 B)
  CHECK(st.message().find("short by 1000 bytes") != std::string::npos);
  auto r = PlaceLayers(p, PlacementObjective::kLatency);
  CHECK_FALSE(r.ok());

  // Total flash too small although each layer fits somewhere.
  const auto small = MacsChain({1, 1, 1}, {200, 200, 200});  // 2400 B
  const Cluster c2 = HandCluster({1, 1}, 1000);             // 2000 B in all
  const Status total = CheckPlacementFeasible(MakeChainPlacementProblem(small, c2));
  REQUIRE(total.code() == StatusCode::kResourceExhausted);
  CHECK(total.message().find("by 400 bytes") != std::string::npos);
}

TEST_CASE("placement: exhaustive search refuses large cases", "[planner][placement]") {
  const auto layers = MacsChain(std::vector<int64_t>(30, 1));
  const Cluster c = HandCluster({1, 1, 1});
  auto r = PlaceExhaustive(MakeChainPlacementProblem(layers, c), PlacementObjective::kLatency);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kNotSupported);
}

// The source device takes the model's input and returns its output (the
// gateway talks to it), so moving work away from it costs those bytes too.
// A: 1 MAC/s (the source), B: 100 MAC/s; links 4 B/s. One layer of 100 MACs
// reading M = 3 values (12 B) and writing K = 2 values (8 B):
//   on A: 100 s;  on B: 12/4 + 100/100 + 8/4 = 3 + 1 + 2 = 6 s.
// Without a source the traffic is not counted: B costs 1 s.
TEST_CASE("placement: the source's input and output transfers count", "[planner][placement]") {
  auto layers = MacsChain({100});
  layers[0].M = 3;
  layers[0].K = 2;
  const Cluster c = HandCluster({1, 100}, kUnlimitedBytes, kUnlimitedBytes, 4.0);
  auto p = MakeChainPlacementProblem(layers, c);
  CHECK(EvaluatePlacement(p, {1}).latency_s == Approx(1));
  p.source = 0;
  const PlacementCost on_b = EvaluatePlacement(p, {1});
  CHECK(on_b.latency_s == Approx(6));
  CHECK(on_b.sent_bytes[0] == 12);
  CHECK(on_b.received_bytes[1] == 12);
  CHECK(on_b.sent_bytes[1] == 8);
  CHECK(on_b.received_bytes[0] == 8);
  CHECK(EvaluatePlacement(p, {0}).latency_s == Approx(100));
  auto dp = PlaceLatencyDp(p);
  REQUIRE(dp.ok());
  CHECK(dp->device_of_layer == std::vector<int>{1});
  CHECK(dp->cost.latency_s == Approx(6));

  // Slower links (0.1 B/s): 120 + 1 + 80 s on B, so the source keeps it.
  const Cluster slow = HandCluster({1, 100}, kUnlimitedBytes, kUnlimitedBytes, 0.1);
  auto ps = MakeChainPlacementProblem(layers, slow);
  ps.source = 0;
  auto dps = PlaceLatencyDp(ps);
  REQUIRE(dps.ok());
  CHECK(dps->device_of_layer == std::vector<int>{0});
  CHECK(dps->cost.latency_s == Approx(100));
}

TEST_CASE("placement: with a source, exhaustive, B&B and DP still agree", "[planner][placement]") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 5);
    const int d = 2 + static_cast<int>(rng() % 2);
    auto layers = RandomChain(rng, n);
    const std::vector<double> speed = RandomSpeeds(rng, d);
    const Cluster c = HandCluster(speed, kUnlimitedBytes, kUnlimitedBytes, 20.0 + static_cast<double>(rng() % 200));
    auto p = MakeChainPlacementProblem(layers, c);
    p.source = static_cast<int>(rng() % d);
    INFO("trial " << trial << " source " << p.source);
    auto ex = PlaceExhaustive(p, PlacementObjective::kLatency);
    auto bnb = PlaceBranchAndBound(p, PlacementObjective::kLatency);
    auto dp = PlaceLatencyDp(p);
    REQUIRE(ex.ok());
    REQUIRE(bnb.ok());
    REQUIRE(dp.ok());
    CHECK(bnb->cost.latency_s == Approx(ex->cost.latency_s).epsilon(1e-9));
    CHECK(dp->cost.latency_s == Approx(ex->cost.latency_s).epsilon(1e-9));
    auto thr_ex = PlaceExhaustive(p, PlacementObjective::kThroughput);
    auto thr_bnb = PlaceBranchAndBound(p, PlacementObjective::kThroughput);
    REQUIRE(thr_ex.ok());
    REQUIRE(thr_bnb.ok());
    CHECK(thr_bnb->cost.period_s == Approx(thr_ex->cost.period_s).epsilon(1e-9));
  }
}

namespace {

// Every assignment in which each device holds one contiguous range of layers
// (a pipeline), by exhaustive enumeration: the reference for PlacePipeline.
double BestPipelinePeriod(const PlacementProblem& p) {
  const int n = p.layers(), d = p.cluster->size();
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> dev(n, 0);
  while (true) {
    std::vector<int> last_seen(d, -2);
    bool contiguous = true;
    for (int j = 0; j < n && contiguous; ++j) {
      if (last_seen[dev[j]] >= 0 && last_seen[dev[j]] != j - 1) contiguous = false;
      last_seen[dev[j]] = j;
    }
    if (contiguous) {
      const PlacementCost cost = EvaluatePlacement(p, dev);
      if (cost.feasible) best = std::min(best, cost.period_s);
    }
    int k = 0;
    while (k < n && ++dev[k] == d) dev[k++] = 0;
    if (k == n) break;
  }
  return best;
}

// The DP's bound is below every pipeline's exact period, its plan is no
// better than the best one, and a plan it calls optimal is the best. True
// when it proved optimality.
bool CheckAgainstEveryPipeline(const PlacementProblem& p, const PlacementResult& pipe) {
  const double best = BestPipelinePeriod(p);
  CHECK(pipe.solver.bound <= best * (1 + 1e-9));
  CHECK(pipe.cost.period_s >= best * (1 - 1e-9));
  if (pipe.solver.optimal) CHECK(pipe.cost.period_s == Approx(best).epsilon(1e-9));
  return pipe.solver.optimal;
}

}  // namespace

// Issue 18 item 1: on chains the pipeline DP is exact, whatever the device
// speeds, links and source; B&B over every assignment never does worse.
TEST_CASE("placement: the pipeline DP equals exhaustive search over pipelines on chains", "[planner][placement]") {
  std::mt19937_64 rng(18);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 5);
    const int d = 2 + static_cast<int>(rng() % 3);
    auto layers = RandomChain(rng, n);
    std::vector<double> speed(d);
    for (auto& s : speed) s = 10.0 + static_cast<double>(rng() % 3) * 40.0;  // repeated speeds: device kinds
    const Cluster c = HandCluster(speed, kUnlimitedBytes, kUnlimitedBytes, 20.0 + static_cast<double>(rng() % 200));
    auto p = MakeChainPlacementProblem(layers, c);
    p.source = trial % 3 == 0 ? -1 : static_cast<int>(rng() % d);
    INFO("trial " << trial << " n " << n << " d " << d << " source " << p.source);
    auto pipe = PlacePipeline(p);
    REQUIRE(pipe.ok());
    CHECK(pipe->solver.optimal);
    CHECK(pipe->cost.period_s == Approx(BestPipelinePeriod(p)).epsilon(1e-9));
    CHECK(pipe->solver.bound <= pipe->cost.period_s * (1 + 1e-9));
    CHECK(pipe->solver.bound_any <= pipe->cost.period_s * (1 + 1e-9));
    auto bnb = PlaceBranchAndBound(p, PlacementObjective::kThroughput);
    REQUIRE(bnb.ok());
    CHECK(bnb->cost.period_s <= pipe->cost.period_s * (1 + 1e-9));
  }
}

// On DAGs (skip connections) a tensor may travel to several later stages:
// the DP's bound must still hold for every pipeline, and a plan it calls
// optimal must be the best pipeline.
TEST_CASE("placement: the pipeline DP's bound holds on DAGs with skips", "[planner][placement]") {
  std::mt19937_64 rng(1818);
  int proven = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 4);
    const int d = 2 + static_cast<int>(rng() % 2);
    auto layers = RandomChain(rng, n);
    const std::vector<double> speed = RandomSpeeds(rng, d);
    const Cluster c = HandCluster(speed, kUnlimitedBytes, kUnlimitedBytes, 5.0 + static_cast<double>(rng() % 50));
    auto p = MakeChainPlacementProblem(layers, c);
    for (int j = 2; j < n; ++j)  // a skip from j-2 or j-3 now and then
      if (rng() % 2) p.producers[j].push_back(j - 2 - static_cast<int>(rng() % std::min(2, j - 1)));
    p.source = static_cast<int>(rng() % d);
    INFO("trial " << trial);
    auto pipe = PlacePipeline(p);
    REQUIRE(pipe.ok());
    proven += CheckAgainstEveryPipeline(p, *pipe);
  }
  CHECK(proven > 30);  // the bound is usually tight on small skips
}

// With a declared network CPU the pipeline DP's stages take the longer of
// their compute and their sends; its bound stays below every pipeline's
// exact period (which also counts the CPU), and a plan it proves optimal
// is the best pipeline.
TEST_CASE("placement: the pipeline DP's bound holds with a declared network CPU", "[planner][placement]") {
  std::mt19937_64 rng(1515);
  int proven = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 5);
    const int d = 2 + static_cast<int>(rng() % 3);
    auto layers = RandomChain(rng, n);
    std::vector<double> speed(d);
    for (auto& s : speed) s = 10.0 + static_cast<double>(rng() % 3) * 40.0;
    Cluster c = HandCluster(speed, kUnlimitedBytes, kUnlimitedBytes, 5.0 + static_cast<double>(rng() % 200));
    const double net = static_cast<double>(rng() % 4) * 0.25;  // MACs a byte, 0 in a quarter of the trials
    for (Device& dv : c.devices) dv.net_macs_per_byte = net;
    auto p = MakeChainPlacementProblem(layers, c);
    p.source = trial % 3 == 0 ? -1 : static_cast<int>(rng() % d);
    INFO("trial " << trial << " n " << n << " d " << d << " net " << net << " source " << p.source);
    auto pipe = PlacePipeline(p);
    REQUIRE(pipe.ok());
    proven += CheckAgainstEveryPipeline(p, *pipe);
    // Latency: each transfer takes the longest of its wire time and either
    // end's CPU, so it lies between the wire-only latency (the same
    // assignment without a declared CPU) and that plus all of the CPU.
    const PlacementCost& cost = pipe->cost;
    Cluster free_stack = c;
    for (Device& dv : free_stack.devices) dv.net_macs_per_byte = 0;
    auto p0 = MakeChainPlacementProblem(layers, free_stack);
    p0.source = p.source;
    const double wire_only = EvaluatePlacement(p0, pipe->device_of_layer).latency_s;
    double cpu = 0;
    for (int i = 0; i < d; ++i)
      cpu += c.devices[i].NetworkCpuSeconds(static_cast<double>(cost.sent_bytes[i] + cost.received_bytes[i]));
    CHECK(cost.latency_s >= wire_only - 1e-9);
    CHECK(cost.latency_s <= wire_only + cpu + 1e-9);
    if (cpu > 0 && cost.latency_s > wire_only + 1e-9) CHECK(cost.latency_s < wire_only + cpu - 1e-12);
  }
  CHECK(proven > 20);
}

// Issue 18 item 1: densenet201 (darknet cfg, 305 layers with concatenations)
// on 16, 64 and 256 identical devices, proven optimal among pipelines.
// (Time: bench/planner prints it; ~0.1-0.6 s each on this kind of machine.)
TEST_CASE("placement: densenet201 on 16/64/256 identical devices is proven optimal", "[planner][placement]") {
  ImportOptions options;
  options.input_shapes[""] = {1, 3, 224, 224};
  auto g = ImportDarknet("/usr/share/darknet/cfg/densenet201.cfg", options);
  REQUIRE(g.ok());
  const auto layers = ComputeLayerFigures(*g);
  for (int devices : {16, 64, 256}) {
    INFO(devices << " devices");
    const Cluster c = UniformCluster(devices);
    PlacementProblem p = MakePlacementProblem(*g, layers, c);
    p.source = 0;
    auto pipe = PlacePipeline(p);
    REQUIRE(pipe.ok());
    CHECK(pipe->solver.optimal);
    CHECK(pipe->cost.period_s == Approx(pipe->solver.bound).epsilon(1e-9));
    CHECK(pipe->solver.bound_any <= pipe->cost.period_s);
  }
}

// Issue 18 item 6: the genetic search never beats the exhaustive optimum over
// every assignment (it evaluates the same cost), finds it on small chains
// almost always, and is deterministic for a seed.
TEST_CASE("placement: the genetic search against exhaustive search on small chains", "[planner][placement]") {
  std::mt19937_64 rng(606);
  int found = 0, trials = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 5);
    const int d = 2 + static_cast<int>(rng() % 2);
    auto layers = RandomChain(rng, n);
    const Cluster c =
        HandCluster(RandomSpeeds(rng, d), kUnlimitedBytes, kUnlimitedBytes, 20.0 + static_cast<double>(rng() % 200));
    auto p = MakeChainPlacementProblem(layers, c);
    p.source = static_cast<int>(rng() % d);
    for (PlacementObjective objective : {PlacementObjective::kThroughput, PlacementObjective::kLatency}) {
      INFO("trial " << trial << " n " << n << " d " << d << " objective " << static_cast<int>(objective));
      auto ex = PlaceExhaustive(p, objective);
      GeneticOptions go;
      go.seed = 7 + trial;
      auto ga = PlaceGenetic(p, objective, go);
      REQUIRE(ex.ok());
      REQUIRE(ga.ok());
      const double best = PlacementObjectiveValue(ex->cost, objective);
      const double got = PlacementObjectiveValue(ga->cost, objective);
      CHECK(got >= best * (1 - 1e-9));
      CHECK_FALSE(ga->solver.optimal);
      CHECK(ga->solver.name == "genetic");
      CHECK(ga->solver.nodes > 0);
      ++trials;
      found += got <= best * (1 + 1e-9);
      auto again = PlaceGenetic(p, objective, go);
      REQUIRE(again.ok());
      CHECK(again->device_of_layer == ga->device_of_layer);
    }
  }
  INFO(found << " of " << trials << " optimal");
  CHECK(found >= trials * 9 / 10);
}

TEST_CASE("placement: the genetic search on resnet50 respects the any-assignment bound, bad settings are refused",
          "[planner][placement]") {
  ImportOptions options;
  options.input_shapes[""] = {1, 3, 224, 224};
  auto g = ImportDarknet("/usr/share/darknet/cfg/resnet50.cfg", options);
  REQUIRE(g.ok());
  const auto layers = ComputeLayerFigures(*g);
  const Cluster c = UniformCluster(16);
  PlacementProblem p = MakePlacementProblem(*g, layers, c);
  p.source = 0;
  auto pipe = PlacePipeline(p);
  auto ga = PlaceGenetic(p, PlacementObjective::kThroughput);
  REQUIRE(pipe.ok());
  REQUIRE(ga.ok());
  // Not restricted to pipelines, it may beat the best pipeline, never the
  // bound over every whole-layer assignment.
  CHECK(ga->cost.period_s >= pipe->solver.bound_any * (1 - 1e-9));
  CHECK(ga->cost.feasible);
  GeneticOptions bad;
  bad.population = 2;
  auto refused = PlaceGenetic(p, PlacementObjective::kThroughput, bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("population 2") != std::string::npos);
}
