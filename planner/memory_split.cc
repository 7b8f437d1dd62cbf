#include "planner/memory_split.h"

#include <algorithm>
#include <chrono>

#include "planner/milp.h"

namespace tessera {

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

MemorySplit EvaluateMemorySplit(const std::vector<LayerFigures>& layers, int n, int switch_layer) {
  const int L = static_cast<int>(layers.size());
  if (switch_layer <= 0 || switch_layer > L) switch_layer = L + 1;
  MemorySplit m;
  m.switch_layer = switch_layer <= L ? switch_layer : 0;
  for (int l = 1; l <= L; ++l) {
    const auto& f = layers[l - 1];
    const double io = static_cast<double>(f.M + f.K);
    if (l < switch_layer) {  // b_l = 0: FFMT, weights whole, buffers /N
      m.weights += static_cast<double>(f.Q);
      m.buffers = std::max(m.buffers, io / n);
    } else {  // b_l = 1: FDT, weights /N, buffers whole
      m.weights += static_cast<double>(f.Q) / n;
      m.buffers = std::max(m.buffers, io);
    }
  }
  m.footprint = m.weights + m.buffers;
  return m;
}

double SingleDeviceFootprint(const std::vector<LayerFigures>& layers) {
  return EvaluateMemorySplit(layers, 1, 0).footprint;
}

MemorySplit SolveMemorySplitExact(const std::vector<LayerFigures>& layers, int n) {
  const auto start = std::chrono::steady_clock::now();
  const int L = static_cast<int>(layers.size());
  // prefix_q[s] = Σ_{l<s} Q_l, prefix_io[s] = max_{l<s} (M+K); suffix likewise.
  std::vector<double> prefix_q(L + 2, 0), prefix_io(L + 2, 0), suffix_io(L + 2, 0);
  for (int l = 1; l <= L; ++l) {
    prefix_q[l + 1] = prefix_q[l] + static_cast<double>(layers[l - 1].Q);
    prefix_io[l + 1] = std::max(prefix_io[l], static_cast<double>(layers[l - 1].M + layers[l - 1].K));
  }
  for (int l = L; l >= 1; --l)
    suffix_io[l] = std::max(suffix_io[l + 1], static_cast<double>(layers[l - 1].M + layers[l - 1].K));
  const double total_q = prefix_q[L + 1];
  int best_s = L + 1;
  double best_f = 0;
  for (int s = L + 1; s >= 1; --s) {  // from "none" backwards: ties keep the later switch
    const double weights = prefix_q[s] + (total_q - prefix_q[s]) / n;
    const double c = std::max(prefix_io[s] / n, suffix_io[s]);
    const double f = weights + c;
    if (s == L + 1 || f < best_f * (1 - 1e-12)) {
      best_f = f;
      best_s = s;
    }
  }
  MemorySplit m = EvaluateMemorySplit(layers, n, best_s);
  m.solver = {"exact", true, Seconds(start), L + 1};
  return m;
}

Result<MemorySplit> SolveMemorySplitIlp(const std::vector<LayerFigures>& layers, int n) {
  const auto start = std::chrono::steady_clock::now();
  const int L = static_cast<int>(layers.size());
  if (L == 0) {
    MemorySplit m;
    m.solver = {"cbc", true, 0, 0};
    return m;
  }
  MilpModel ilp;
  // F = c + Σ Q_l + Σ b_l·Q_l·(1/N − 1); the constant Σ Q_l is added back below.
  const int c = ilp.AddContinuous(0, MilpModel::kInfinity, 1.0);
  std::vector<int> b(L);
  for (int l = 0; l < L; ++l) b[l] = ilp.AddBinary(static_cast<double>(layers[l].Q) * (1.0 / n - 1.0));
  for (int l = 0; l < L; ++l) {
    // c ≥ a_l = (M+K)/N + b_l·(M+K)·(1 − 1/N)
    const double io = static_cast<double>(layers[l].M + layers[l].K);
    ilp.AddRow({{c, 1.0}, {b[l], -io * (1.0 - 1.0 / n)}}, io / n, MilpModel::kInfinity);
    // b_l ≥ b_{l−1}: switch at most once, feature → weight.
    if (l > 0) ilp.AddRow({{b[l], 1.0}, {b[l - 1], -1.0}}, 0, MilpModel::kInfinity);
  }
  TS_ASSIGN_OR_RETURN(MilpSolution sol, ilp.Solve());
  int s = 0;
  for (int l = 0; l < L && s == 0; ++l)
    if (sol.x[b[l]] > 0.5) s = l + 1;
  MemorySplit m = EvaluateMemorySplit(layers, n, s);
  m.solver = {"cbc", sol.optimal, Seconds(start), sol.nodes};
  return m;
}

}  // namespace tessera
