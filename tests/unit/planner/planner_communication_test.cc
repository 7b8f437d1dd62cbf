// METHODS §4: Optimized Weight Partitioning — FDTO / FDTI / fused pairs.
#include <catch2/catch.hpp>
#include <random>

#include "partition/graph/metrics.h"
#include "partition/import/model_import.h"
#include "planner/plan.h"
#include "planner/weight_partition.h"
#include "planner_test_chains.h"

using namespace tessera;

namespace {

constexpr FdtScheme O = FdtScheme::kFanOut, I = FdtScheme::kFanIn, F = FdtScheme::kPairFirst,
                    S = FdtScheme::kPairSecond;

std::vector<OwpLayer> Chain(const std::vector<int64_t>& dims, bool linked = true) {
  std::vector<OwpLayer> chain;
  for (size_t l = 0; l + 1 < dims.size(); ++l)
    chain.push_back({static_cast<int>(l) + 1, dims[l], dims[l + 1], linked && l + 2 < dims.size()});
  return chain;
}

// Brute force over all 4^L scheme strings: the third oracle.
double BruteForce(const std::vector<OwpLayer>& chain, int n) {
  const int L = static_cast<int>(chain.size());
  double best = 1e300;
  std::vector<FdtScheme> x(L, O);
  for (int64_t code = 0; code < (int64_t{1} << (2 * L)); ++code) {
    for (int l = 0; l < L; ++l) x[l] = static_cast<FdtScheme>((code >> (2 * l)) & 3);
    if (OwpIsValid(chain, x)) best = std::min(best, OwpCommunication(chain, x, n));
  }
  return best;
}

}  // namespace

// Sanity chain, N = 2 ((N−1) = 1, (N−1)/N = 1/2); (M, K) = (4,8) (8,16) (16,4) (4,4).
TEST_CASE("owp: the sanity chain's hand-derived figures", "[planner][communication]") {
  const auto chain = Chain({4, 8, 16, 4, 4});
  // All FDTO: r1 = r2 = r3 = 1, r4 = 0.
  //   C1 = 4 + 8 = 12, C2 = 0 + 16 = 16, C3 = 0 + 4 = 4, C4 = 0 + 4/2 = 2   -> 34
  CHECK(OwpCommunication(chain, {O, O, O, O}, 2) == Approx(34));
  // All FDTI: C_l = M/2 + K: 10 + 20 + 12 + 6                                 -> 48
  CHECK(OwpCommunication(chain, {I, I, I, I}, 2) == Approx(48));
  // Two fused pairs: C1 = 4, C2 = 16, C3 = 16 (r2 = 0), C4 = 4                -> 40
  CHECK(OwpCommunication(chain, {F, S, F, S}, 2) == Approx(40));
  // Optimum: FDTO, pair, FDTO: r1 = 1 (next is fdt1), so
  //   C1 = 4 + 8 = 12, C2 = 0, C3 = K3 = 4, C4 = 4 (r3 = 0) + 4/2 = 6          -> 22
  CHECK(OwpCommunication(chain, {O, F, S, O}, 2) == Approx(22));
  CHECK(OwpCommunication(chain, {O, F, S, I}, 2) == Approx(22));

  const OwpPlan dp = SolveOwpDp(chain, 2);
  CHECK(dp.values == Approx(22));
  auto ilp = SolveOwpIlp(chain, 2);
  REQUIRE(ilp.ok());
  CHECK(ilp->values == Approx(22));
  CHECK(BruteForce(chain, 2) == Approx(22));
}

TEST_CASE("owp: invalid scheme strings are rejected", "[planner][communication]") {
  const auto chain = Chain({4, 8, 16, 4, 4});
  std::string why;
  CHECK_FALSE(OwpIsValid(chain, {S, O, O, O}, &why));  // s_1 = 0
  CHECK_FALSE(OwpIsValid(chain, {O, O, O, F}, &why));  // f_L = 0
  CHECK_FALSE(OwpIsValid(chain, {F, O, O, O}, &why));  // s_{l+1} = f_l
  auto unlinked = chain;
  unlinked[1].linked_to_next = false;
  CHECK_FALSE(OwpIsValid(unlinked, {O, F, S, O}, &why));  // no pair across a break
  CHECK(why.find("layer 2") != std::string::npos);
}

TEST_CASE("owp: an unlinked boundary stops reuse", "[planner][communication]") {
  auto chain = Chain({4, 8, 16, 4, 4});
  chain[0].linked_to_next = false;
  // All FDTO with r1 = 0: C1 = 4 + 8/2 = 8, C2 = 8 + 16 = 24 (input redistributed), C3 = 4, C4 = 2 -> 38
  CHECK(OwpCommunication(chain, {O, O, O, O}, 2) == Approx(38));
}

TEST_CASE("owp: CBC ILP, DP and brute force agree on random chains", "[planner][communication]") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 7);
    std::vector<OwpLayer> chain(L);
    for (int l = 0; l < L; ++l)
      chain[l] = {l + 1, 1 + static_cast<int64_t>(rng() % 5000), 1 + static_cast<int64_t>(rng() % 5000),
                  l + 1 < L && rng() % 4 != 0};
    const int n = 2 + static_cast<int>(rng() % 15);
    const OwpPlan dp = SolveOwpDp(chain, n);
    auto ilp = SolveOwpIlp(chain, n);
    REQUIRE(ilp.ok());
    INFO("trial " << trial << " L=" << L << " N=" << n);
    CHECK(OwpIsValid(chain, dp.schemes));
    CHECK(dp.values == Approx(BruteForce(chain, n)).epsilon(1e-9));
    CHECK(ilp->values == Approx(dp.values).epsilon(1e-9));
  }
}

namespace {

// input[1,3,8,8] → conv A (3→16, 3×3) → relu-carrying maxpool 2×2 → conv B (16→32, 1×1)
// → softmax → conv C (32→8, 1×1). Weights are constant inputs (graph.h).
Graph ConvChainWithPassThrough() {
  Graph g;
  g.name = "pass_through";
  int x = g.AddValue("x", {1, 3, 8, 8});
  g.inputs = {x};
  auto conv = [&](const std::string& name, int in, int64_t cin, int64_t cout, int64_t k, int64_t hw) {
    TensorData w{{cout, cin, k, k}, std::vector<float>(cout * cin * k * k, 0.1f)};
    int wid = g.AddConstant(name + ".w", w);
    int y = g.AddValue(name + ".y", {1, cout, hw, hw});
    Node n;
    n.name = name;
    n.op = "Conv";
    n.inputs = {in, wid};
    n.outputs = {y};
    n.attrs.Set("kernel_shape", std::vector<int64_t>{k, k});
    n.attrs.Set("strides", std::vector<int64_t>{1, 1});
    n.attrs.Set("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
    n.attrs.Set("group", int64_t{1});
    g.AddNode(n);
    return y;
  };
  auto unary = [&](const std::string& name, const std::string& op, int in, const Shape& out) {
    int y = g.AddValue(name + ".y", out);
    Node n;
    n.name = name;
    n.op = op;
    n.inputs = {in};
    n.outputs = {y};
    if (op == "MaxPool") {
      n.attrs.Set("kernel_shape", std::vector<int64_t>{2, 2});
      n.attrs.Set("strides", std::vector<int64_t>{2, 2});
    }
    g.AddNode(n);
    return y;
  };
  int a = conv("convA", x, 3, 16, 3, 8);
  int p = unary("pool", "MaxPool", a, {1, 16, 4, 4});
  int b = conv("convB", p, 16, 32, 1, 4);
  int s = unary("softmax", "Softmax", b, {1, 32, 4, 4});
  int c = conv("convC", s, 32, 8, 1, 4);
  g.outputs = {c};
  return g;
}

}  // namespace

TEST_CASE("owp chain: a pool between weight layers keeps the pair, softmax breaks it", "[planner][communication]") {
  const Graph g = ConvChainWithPassThrough();
  REQUIRE(g.Validate().ok());
  const auto layers = ComputeLayerFigures(g);
  const auto chain = WeightPartitionedChain(g, layers, 1);
  REQUIRE(chain.size() == 3);
  CHECK(chain[0].index == 1);
  CHECK(chain[1].index == 3);
  CHECK(chain[2].index == 5);
  CHECK(chain[0].linked_to_next);        // convA → maxpool → convB
  CHECK_FALSE(chain[1].linked_to_next);  // convB → softmax → convC
  CHECK(CheckPerChannel(g, g.nodes[1]).ok());
  CHECK_FALSE(CheckPerChannel(g, g.nodes[3]).ok());
  // A pair across the pool is valid; across the softmax it is not.
  CHECK(OwpIsValid(chain, {F, S, O}));
  CHECK_FALSE(OwpIsValid(chain, {O, F, S}));
  // Switch after layer 1: only convB and convC are weight-partitioned.
  CHECK(WeightPartitionedChain(g, layers, 2).size() == 2);
  CHECK(WeightPartitionedChain(g, layers, 0).empty());
}

// The plan's latency prices each layer's transfers in two steps (before and
// after its compute) on full-duplex cables (issue 15): a device's sends and
// receives of one step cross its cable at once. Four dense layers 256→…→256
// on two devices whose compute is free and whose cables carry 1 MB/s: an
// FDTO chain that reuses its slices in place exchanges half a layer's output
// each way, which takes the time of one direction, not of both in turn.
TEST_CASE("owp plan: a step's sends and receives share a full-duplex cable", "[planner][communication]") {
  std::string cfg = "[net]\nwidth=1\nheight=1\nchannels=256\n";
  for (int l = 0; l < 4; ++l) cfg += "\n[connected]\noutput=256\nactivation=linear\n";
  auto graph = ImportDarknetText(cfg, "dense.cfg", ImportOptions{});
  REQUIRE(graph.ok());
  const std::vector<LayerFigures> layers = ComputeLayerFigures(*graph);
  Cluster c = planner_test::HandCluster({1e18, 1e18}, kUnlimitedBytes, kUnlimitedBytes, 1e6);
  PlanOptions options;
  options.objective = Objective::kCommunication;
  auto plan = BuildPlan(*graph, layers, c, options);
  REQUIRE(plan.ok());
  // METHODS §4 on this chain: fdto (reused) → fdto (reused) → fused pair.
  std::vector<std::string> schemes;
  for (const auto& a : plan->layers) schemes.push_back(a.scheme);
  REQUIRE(schemes == std::vector<std::string>{"fdto", "fdto", "fdt1", "fdt2"});
  // Bytes (float32): layer 1 sends its 256-value input to device 1 (1024)
  // before, then both devices swap their 128-value slices (512 each way);
  // layer 2 swaps slices again (512 each way); fdt1 moves nothing; fdt2
  // returns device 1's 256-value partial sum (1024).
  CHECK(plan->loads[0].sent_bytes == 1024 + 512 + 512);
  CHECK(plan->loads[0].received_bytes == 512 + 512 + 1024);
  CHECK(plan->loads[1].sent_bytes == 512 + 512 + 1024);
  CHECK(plan->loads[1].received_bytes == 1024 + 512 + 512);
  // Duplex: a swap costs one direction (512 B), so 1024 + 512 + 512 + 1024
  // bytes at 1 MB/s. Sends and receives in turn would have made it 4096.
  CHECK(plan->latency_s == Approx(3072 / 1e6).epsilon(1e-9));
  // Each step that moves bytes is one message's latency: four steps
  // (layer 1's scatter and swap, layer 2's swap, fdt2's merge).
  c.default_link.latency_s = 1e-3;
  auto with_latency = BuildPlan(*graph, layers, c, options);
  REQUIRE(with_latency.ok());
  CHECK(with_latency->latency_s == Approx(3072 / 1e6 + 4e-3).epsilon(1e-9));
  // A device's network stack works on a step's bytes while they are on the
  // wire: the step lasts the longer of the two. At 2 us of CPU per byte sent
  // or received (net_macs_per_byte at 1e18 MAC/s) against 1 us per byte on
  // the cable, each of the four steps takes its busiest device's bytes of
  // CPU: 1024 B (the scatter and the merge: one end sends, the other
  // receives; a swap: 512 each way) x 2 us. Added to the wire time instead,
  // device 0's 4096 B would have cost 8192 us on top of the 3072.
  c.default_link.latency_s = 0;
  for (Device& d : c.devices) d.net_macs_per_byte = 2e-6 * d.macs_per_s;
  auto priced = BuildPlan(*graph, layers, c, options);
  REQUIRE(priced.ok());
  schemes.clear();
  for (const auto& a : priced->layers) schemes.push_back(a.scheme);
  REQUIRE(schemes == std::vector<std::string>{"fdto", "fdto", "fdt1", "fdt2"});
  CHECK(priced->latency_s == Approx(4 * 1024 * 2e-6).epsilon(1e-9));
  // The device's busy time still counts all of it: 4096 B x 2 us.
  CHECK(priced->loads[0].compute_s == Approx(4096 * 2e-6).epsilon(1e-6));
}
