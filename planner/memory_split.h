// METHODS §3: where to switch from feature-map (FFMT) to weight (FDT)
// partitioning so that the per-device footprint F is smallest.
//
//   F(s) = c + Σ_{l<s} Q_l + Σ_{l≥s} Q_l/N
//   c    = max( max_{l<s} (M_l+K_l)/N , max_{l≥s} (M_l+K_l) )
//
// with s the switch layer (b_l = 1 ⇔ l ≥ s; s = L+1 means no layer is
// weight-partitioned). All figures are in values (×4 for float32 bytes).
#pragma once

#include <vector>

#include "partition/graph/metrics.h"
#include "util/status.h"
#include "planner/solver_report.h"

namespace tessera {

struct MemorySplit {
  int switch_layer = 0;    // 1-based first layer with b_l = 1; 0 = none
  double footprint = 0;    // F in values
  double weights = 0;      // the Σ-weights part of F
  double buffers = 0;      // c, the largest live input+output pair
  SolverReport solver;
};

// F for a given switch (1-based; 0 or L+1 = none) on N devices.
MemorySplit EvaluateMemorySplit(const std::vector<LayerFigures>& layers, int n, int switch_layer);

// Single-device footprint: max_l (M_l+K_l) + Σ_l Q_l (values).
double SingleDeviceFootprint(const std::vector<LayerFigures>& layers);

// Exact enumeration of all L+1 switch positions (prefix sums, O(L)). Ties
// go to the latest switch (fewer weight-partitioned layers, less traffic).
MemorySplit SolveMemorySplitExact(const std::vector<LayerFigures>& layers, int n);

// The ILP of METHODS §3 solved with CBC: binaries b_l, continuous c,
// b_l ≥ b_{l−1}. The reported footprint is re-evaluated from the switch
// the solver chose, so it is comparable with the exact one bit for bit.
Result<MemorySplit> SolveMemorySplitIlp(const std::vector<LayerFigures>& layers, int n);

}  // namespace tessera
