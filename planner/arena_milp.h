// METHODS §6 "Arena layout", exact: the big-M MILP over buffer offsets,
// solved with COIN-OR CBC under a time limit, started only when the greedy
// layouts miss the lower bound.
//
//   minimise A
//   o_i + s_i ≤ A                                   every buffer i
//   o_i + s_i ≤ o_j + U·(1 − z_ij)                  i below j   (z_ij = 1)
//   o_j + s_j ≤ o_i + U·z_ij                        j below i   (z_ij = 0)
//                                  for every pair alive at a common step
//   LB ≤ A ≤ U,  0 ≤ o_i ≤ U − s_i,  z_ij ∈ {0, 1}
//
// Sizes and offsets are in units of the alignment; U is the best greedy
// arena (so the MILP never does worse) and LB the largest live sum. The
// solution's offsets fix an order; first fit in that order gives offsets no
// higher than the MILP's (placing an optimal layout's buffers bottom-up
// never raises one) and exactly aligned.
#pragma once

#include <string>
#include <vector>

#include "partition/graph/arena_layout.h"

namespace tessera {

class MilpArenaLayout final : public ArenaLayout {
 public:
  explicit MilpArenaLayout(double time_limit_s = 10.0, size_t alignment = 64)
      : time_limit_s_(time_limit_s), alignment_(alignment) {}
  std::string name() const override { return "milp"; }
  // The smaller of the best greedy layout and the MILP's; strategy names the
  // one used ("milp" or the greedy's name), optimal when CBC proved it or the
  // lower bound is met. Never fails: without a MILP answer, the greedy one.
  ArenaPlan Plan(const std::vector<BufferRequest>& buffers) const override;

 private:
  const double time_limit_s_;
  const size_t alignment_;
};

}  // namespace tessera
