// What a planner search reports about itself: which method, whether the
// answer is proven optimal, how long it took and how much it explored.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

struct SolverReport {
  std::string name;      // "cbc" | "exact" | "dp" | "bnb" | "exhaustive" | "bisection"
  bool optimal = false;  // proven optimal for the stated objective
  double seconds = 0;
  int64_t nodes = 0;     // explored nodes / states / assignments
};

}  // namespace tessera
