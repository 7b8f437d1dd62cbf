// METHODS §3: the feature→weight switch that minimises the per-device footprint.
#include <catch2/catch.hpp>
#include <random>

#include "planner/memory_split.h"
#include "planner_test_chains.h"

using namespace tessera;
using tessera::planner_test::DenseChain;

// Sanity chain of METHODS §4: dense 4→8→16→4→4, no biases.
//   layer  M   K   Q    M+K
//     1    4   8   32   12
//     2    8  16  128   24
//     3   16   4   64   20
//     4    4   4   16    8
// Σ Q = 240 (METHODS' "single device F = 240" counts weights only); with the
// largest live pair (24) the §3 single-device footprint is 264.
TEST_CASE("memory split: footprint of every switch on the sanity chain, N = 2", "[planner][memory]") {
  const auto layers = DenseChain({4, 8, 16, 4, 4});
  CHECK(SingleDeviceFootprint(layers) == Approx(264));
  CHECK(EvaluateMemorySplit(layers, 1, 0).weights == Approx(240));
  // s = 1: all FDT: weights 240/2 = 120, c = max(M+K) = 24              -> 144
  // s = 2: 32 + 208/2 = 136, c = max(12/2, 24, 20, 8) = 24               -> 160
  // s = 3: 32 + 128 + 80/2 = 200, c = max(6, 12, 20, 8) = 20             -> 220
  // s = 4: 32 + 128 + 64 + 16/2 = 232, c = max(6, 12, 10, 8) = 12        -> 244
  // none:  240, c = max(6, 12, 10, 4) = 12                               -> 252
  const double expected[] = {144, 160, 220, 244};
  for (int s = 1; s <= 4; ++s) CHECK(EvaluateMemorySplit(layers, 2, s).footprint == Approx(expected[s - 1]));
  CHECK(EvaluateMemorySplit(layers, 2, 0).footprint == Approx(252));
  CHECK(EvaluateMemorySplit(layers, 2, 0).switch_layer == 0);

  const MemorySplit exact = SolveMemorySplitExact(layers, 2);
  CHECK(exact.switch_layer == 1);
  CHECK(exact.footprint == Approx(144));
  CHECK(exact.solver.optimal);
  auto ilp = SolveMemorySplitIlp(layers, 2);
  REQUIRE(ilp.ok());
  CHECK(ilp->switch_layer == 1);
  CHECK(ilp->footprint == Approx(144));
  CHECK(ilp->solver.name == "cbc");
}

// Feature-heavy early, weight-heavy late: the switch lands in the middle.
//   conv-like layer 1: M+K = 1000, Q = 10;  layer 2: M+K = 600, Q = 20;
//   layer 3: M+K = 50, Q = 5000.  N = 4.
//   s=1: 5030/4 + 1000 = 2257.5;  s=2: 10 + 5020/4 + max(250, 600) = 1865
//   s=3: 30 + 1250 + max(250, 150, 50) = 1530;  none: 5030 + 250 = 5280
TEST_CASE("memory split: switch where features stop dominating", "[planner][memory]") {
  std::vector<LayerFigures> layers(3);
  const int64_t io[] = {1000, 600, 50}, q[] = {10, 20, 5000};
  for (int l = 0; l < 3; ++l) {
    layers[l].index = l + 1;
    layers[l].M = io[l] / 2;
    layers[l].K = io[l] - io[l] / 2;
    layers[l].Q = q[l];
  }
  const MemorySplit exact = SolveMemorySplitExact(layers, 4);
  CHECK(exact.switch_layer == 3);
  CHECK(exact.footprint == Approx(1530));
  auto ilp = SolveMemorySplitIlp(layers, 4);
  REQUIRE(ilp.ok());
  CHECK(ilp->switch_layer == 3);
}

TEST_CASE("memory split: CBC ILP equals exact enumeration on random chains", "[planner][memory]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 25);
    std::vector<LayerFigures> layers(L);
    for (int l = 0; l < L; ++l) {
      layers[l].index = l + 1;
      layers[l].M = static_cast<int64_t>(rng() % 100000);
      layers[l].K = static_cast<int64_t>(rng() % 100000);
      layers[l].Q = rng() % 3 ? static_cast<int64_t>(rng() % 2000000) : 0;
    }
    const int n = 2 + static_cast<int>(rng() % 15);
    const MemorySplit exact = SolveMemorySplitExact(layers, n);
    auto ilp = SolveMemorySplitIlp(layers, n);
    REQUIRE(ilp.ok());
    INFO("trial " << trial << " L=" << L << " N=" << n);
    CHECK(ilp->footprint == Approx(exact.footprint).epsilon(1e-9));
  }
}
