// A small mixed-integer linear program handed to COIN-OR CBC. The planner's
// ILPs (METHODS §3, §4) build one of these; nothing else in tessera sees CBC.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/status.h"

namespace tessera {

struct MilpSolution {
  std::vector<double> x;  // one value per column
  double objective = 0;
  bool optimal = false;   // CBC proved optimality
  int64_t nodes = 0;      // branch-and-bound nodes CBC explored
  double seconds = 0;
};

// minimise Σ cost_j·x_j subject to lo ≤ Σ a_ij·x_j ≤ hi.
class MilpModel {
 public:
  static constexpr double kInfinity = 1e30;

  // Returns the column index.
  int AddBinary(double cost);
  int AddContinuous(double lower, double upper, double cost);
  // Σ terms ∈ [lower, upper]; use ±kInfinity for one-sided rows.
  void AddRow(const std::vector<std::pair<int, double>>& terms, double lower, double upper);
  void AddEquality(const std::vector<std::pair<int, double>>& terms, double rhs) { AddRow(terms, rhs, rhs); }

  int columns() const { return static_cast<int>(cost_.size()); }

  // Solves with CBC, its log silenced. Fails (Internal) when CBC finds no
  // feasible solution within `time_limit_s`; `optimal` is false when it
  // stopped at the limit with a feasible one.
  Result<MilpSolution> Solve(double time_limit_s = 60.0) const;

 private:
  std::vector<double> cost_, lower_, upper_;
  std::vector<bool> integer_;
  struct Row {
    std::vector<std::pair<int, double>> terms;
    double lower, upper;
  };
  std::vector<Row> rows_;
};

}  // namespace tessera
