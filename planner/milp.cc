#include "planner/milp.h"

#include <CbcModel.hpp>
#include <CoinPackedMatrix.hpp>
#include <CoinPackedVector.hpp>
#include <OsiClpSolverInterface.hpp>
#include <chrono>

namespace tessera {

int MilpModel::AddBinary(double cost) {
  cost_.push_back(cost);
  lower_.push_back(0);
  upper_.push_back(1);
  integer_.push_back(true);
  return columns() - 1;
}

int MilpModel::AddContinuous(double lower, double upper, double cost) {
  cost_.push_back(cost);
  lower_.push_back(lower);
  upper_.push_back(upper);
  integer_.push_back(false);
  return columns() - 1;
}

void MilpModel::AddRow(const std::vector<std::pair<int, double>>& terms, double lower, double upper) {
  rows_.push_back({terms, lower, upper});
}

Result<MilpSolution> MilpModel::Solve(double time_limit_s) const {
  const auto start = std::chrono::steady_clock::now();
  const int n = columns();
  CoinPackedMatrix matrix(false, 0, 0);  // row-ordered
  matrix.setDimensions(0, n);
  std::vector<double> row_lo, row_hi;
  for (const Row& r : rows_) {
    CoinPackedVector v;
    for (const auto& [col, coef] : r.terms) v.insert(col, coef);
    matrix.appendRow(v);
    row_lo.push_back(r.lower <= -kInfinity ? -COIN_DBL_MAX : r.lower);
    row_hi.push_back(r.upper >= kInfinity ? COIN_DBL_MAX : r.upper);
  }
  std::vector<double> col_lo(lower_), col_hi(upper_);
  for (auto& u : col_hi)
    if (u >= kInfinity) u = COIN_DBL_MAX;
  for (auto& l : col_lo)
    if (l <= -kInfinity) l = -COIN_DBL_MAX;

  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, col_lo.data(), col_hi.data(), cost_.data(), row_lo.data(), row_hi.data());
  for (int j = 0; j < n; ++j)
    if (integer_[j]) solver.setInteger(j);

  CbcModel model(solver);  // copies the solver
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.solver()->messageHandler()->setLogLevel(0);
  model.setMaximumSeconds(time_limit_s);
  // Exact answers: no relative or absolute gap tolerated.
  model.setAllowableGap(1e-9);
  model.setAllowableFractionGap(0.0);
  model.branchAndBound();

  MilpSolution out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.nodes = model.getNodeCount();
  if (model.bestSolution() == nullptr)
    return Status::Internal("CBC found no feasible solution (status " + std::to_string(model.status()) +
                            "); the planner's ILP should always be feasible");
  out.x.assign(model.bestSolution(), model.bestSolution() + n);
  out.objective = model.getObjValue();
  out.optimal = model.isProvenOptimal();
  return out;
}

}  // namespace tessera
