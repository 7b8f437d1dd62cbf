#include <catch2/catch.hpp>
#include <random>

#include "partition/graph/arena_layout.h"

using namespace tessera;

TEST_CASE("greedy-by-size arena needs 10 units for the METHODS §6 chain 5,3,2,4 whose lower bound is 8") {
  // A chain: buffer i is produced by step i and read by step i+1.
  std::vector<BufferRequest> chain = {{5, 0, 1}, {3, 1, 2}, {2, 2, 3}, {4, 3, 4}};
  GreedyBySizeLayout greedy(/*alignment=*/1);
  ArenaPlan plan = greedy.Plan(chain);
  REQUIRE(CheckNoOverlap(chain, plan).ok());
  // Hand layout: 5@0, 4@0 (not alive with 5), 3@5 (alive with 5), 2 is alive
  // with 3@[5,8) and 4@[0,4) -> no gap of 2 below 8 -> 2@8, arena 10.
  CHECK(plan.size == 10);
  CHECK(LiveBytesLowerBound(chain) == 8);  // max(5+3, 3+2, 2+4)
}

TEST_CASE("arena layout never overlaps live buffers on random lifetimes") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferRequest> b;
    int n = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      int first = static_cast<int>(rng() % 20);
      b.push_back({1 + rng() % 1000, first, first + static_cast<int>(rng() % 6)});
    }
    ArenaPlan plan = GreedyBySizeLayout(64).Plan(b);
    REQUIRE(CheckNoOverlap(b, plan).ok());
    CHECK(plan.size >= LiveBytesLowerBound(b));
  }
}

TEST_CASE("overlap checker names the clashing buffers") {
  std::vector<BufferRequest> b = {{8, 0, 2}, {8, 1, 3}};
  ArenaPlan bad{{0, 4}, 12};
  Status st = CheckNoOverlap(b, bad);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("buffers 0 and 1") != std::string::npos);
  ArenaPlan disjoint_lifetimes{{0, 0}, 8};
  std::vector<BufferRequest> seq = {{8, 0, 1}, {8, 2, 3}};
  CHECK(CheckNoOverlap(seq, disjoint_lifetimes).ok());
}
