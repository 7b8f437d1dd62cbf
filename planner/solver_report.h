// What a planner search reports about itself: which method, whether the
// answer is proven optimal, how long it took and how much it explored.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace tessera {

struct SolverReport {
  SolverReport() = default;
  SolverReport(std::string name_, bool optimal_, double seconds_, int64_t nodes_)
      : name(std::move(name_)), optimal(optimal_), seconds(seconds_), nodes(nodes_) {}

  std::string name;      // "cbc" | "exact" | "dp" | "bnb" | "exhaustive" | "bisection" | "pipeline-dp"
  bool optimal = false;  // proven optimal for the stated objective
  double seconds = 0;
  int64_t nodes = 0;     // explored nodes / states / assignments
  // Proven lower bound on the objective within the searched space (0: none
  // stated) and what the optimality claim covers (empty: every assignment).
  double bound = 0;
  std::string optimal_among;
  // Proven lower bound over every whole-layer assignment (0: none stated).
  double bound_any = 0;
  // A heuristic's settings and how it stopped (empty: none to state).
  std::string settings;
};

}  // namespace tessera
