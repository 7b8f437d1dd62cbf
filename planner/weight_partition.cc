#include "planner/weight_partition.h"

#include <array>
#include <chrono>
#include <limits>

#include "planner/milp.h"

namespace tessera {

namespace {

constexpr int kNone = 4;  // "no neighbour" in the DP state
constexpr double kInf = std::numeric_limits<double>::infinity();

bool IsO(int x) { return x == static_cast<int>(FdtScheme::kFanOut); }
bool IsF(int x) { return x == static_cast<int>(FdtScheme::kPairFirst); }
bool IsS(int x) { return x == static_cast<int>(FdtScheme::kPairSecond); }

// r between layer l (scheme cur) and l+1 (scheme next): l is FDTO and l+1 is
// FDTO or the first of a pair, and the two are linked.
bool Reuse(const std::vector<OwpLayer>& chain, int l, int cur, int next) {
  return next != kNone && chain[l].linked_to_next && IsO(cur) && (IsO(next) || IsF(next));
}

// The per-layer cost of METHODS §4 given the neighbours' schemes.
double LayerCost(const std::vector<OwpLayer>& chain, int n, int l, int prev, int cur, int next) {
  const double M = static_cast<double>(chain[l].M), K = static_cast<double>(chain[l].K);
  const double n1 = n - 1.0;
  const bool r_prev = l > 0 && prev != kNone && Reuse(chain, l - 1, prev, cur);
  const bool r = Reuse(chain, l, cur, next);
  switch (static_cast<FdtScheme>(cur)) {
    case FdtScheme::kFanOut:
      return (r_prev ? 0.0 : M * n1) + (r ? K * n1 : K * n1 / n);
    case FdtScheme::kFanIn:
      return M * n1 / n + (chain[l].grouped ? K * n1 / n : K * n1);
    case FdtScheme::kPairFirst:
      return r_prev ? 0.0 : M * n1;
    case FdtScheme::kPairSecond:
      return chain[l].grouped ? K * n1 / n : K * n1;
  }
  return kInf;
}

// Local validity of (prev, cur) at layer l: s follows exactly f; f needs a
// linked successor.
bool Allowed(const std::vector<OwpLayer>& chain, int l, int prev, int cur) {
  if (IsS(cur) != (prev != kNone && IsF(prev))) return false;
  if (IsF(cur) && (l + 1 >= static_cast<int>(chain.size()) || !chain[l].linked_to_next)) return false;
  return true;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

const char* FdtSchemeName(FdtScheme scheme) {
  switch (scheme) {
    case FdtScheme::kFanOut: return "fdto";
    case FdtScheme::kFanIn: return "fdti";
    case FdtScheme::kPairFirst: return "fdt1";
    case FdtScheme::kPairSecond: return "fdt2";
  }
  return "?";
}

bool OwpIsValid(const std::vector<OwpLayer>& chain, const std::vector<FdtScheme>& schemes, std::string* why) {
  if (schemes.size() != chain.size()) {
    if (why) *why = "one scheme per chain layer expected";
    return false;
  }
  for (size_t l = 0; l < chain.size(); ++l) {
    const int prev = l ? static_cast<int>(schemes[l - 1]) : kNone;
    if (!Allowed(chain, static_cast<int>(l), prev, static_cast<int>(schemes[l]))) {
      if (why)
        *why = "layer " + std::to_string(chain[l].index) + ": " + FdtSchemeName(schemes[l]) +
               (IsS(static_cast<int>(schemes[l])) ? " must follow fdt1" :
                IsF(static_cast<int>(schemes[l])) ? " needs a linked next weight layer" : " cannot follow fdt1");
      return false;
    }
  }
  return true;
}

double OwpLayerCommunication(const std::vector<OwpLayer>& chain, const std::vector<FdtScheme>& schemes, int n, int l) {
  const int L = static_cast<int>(chain.size());
  const int prev = l > 0 ? static_cast<int>(schemes[l - 1]) : kNone;
  const int next = l + 1 < L ? static_cast<int>(schemes[l + 1]) : kNone;
  return LayerCost(chain, n, l, prev, static_cast<int>(schemes[l]), next);
}

double OwpCommunication(const std::vector<OwpLayer>& chain, const std::vector<FdtScheme>& schemes, int n) {
  double c = 0;
  for (int l = 0; l < static_cast<int>(chain.size()); ++l) c += OwpLayerCommunication(chain, schemes, n, l);
  return c;
}

OwpPlan SolveOwpDp(const std::vector<OwpLayer>& chain, int n) {
  const auto start = std::chrono::steady_clock::now();
  const int L = static_cast<int>(chain.size());
  OwpPlan plan;
  plan.solver = {"dp", true, 0, 0};
  if (L == 0) return plan;
  // best[l][p][c]: least Σ cost of layers < l with x_{l−1} = p, x_l = c
  // (layer l's own cost needs x_{l+1}, so it is added on the next step).
  using Table = std::array<std::array<double, 4>, 5>;
  using Back = std::array<std::array<int, 4>, 5>;
  std::vector<Table> best(L);
  std::vector<Back> back(L);
  for (auto& t : best)
    for (auto& row : t) row.fill(kInf);
  for (int c = 0; c < 4; ++c)
    if (Allowed(chain, 0, kNone, c)) best[0][kNone][c] = 0;
  int64_t states = 0;
  for (int l = 0; l + 1 < L; ++l)
    for (int p = 0; p < 5; ++p)
      for (int c = 0; c < 4; ++c) {
        if (best[l][p][c] == kInf) continue;
        for (int nx = 0; nx < 4; ++nx) {
          if (!Allowed(chain, l + 1, c, nx)) continue;
          ++states;
          const double v = best[l][p][c] + LayerCost(chain, n, l, p, c, nx);
          if (v < best[l + 1][c][nx]) {
            best[l + 1][c][nx] = v;
            back[l + 1][c][nx] = p;
          }
        }
      }
  double total = kInf;
  int bp = kNone, bc = 0;
  for (int p = 0; p < 5; ++p)
    for (int c = 0; c < 4; ++c) {
      if (best[L - 1][p][c] == kInf) continue;
      const double v = best[L - 1][p][c] + LayerCost(chain, n, L - 1, p, c, kNone);
      if (v < total) {
        total = v;
        bp = p;
        bc = c;
      }
    }
  plan.schemes.assign(L, FdtScheme::kFanOut);
  for (int l = L - 1; l >= 0; --l) {
    plan.schemes[l] = static_cast<FdtScheme>(bc);
    const int pp = l > 0 ? back[l][bp][bc] : kNone;
    bc = bp;
    bp = pp;
  }
  plan.values = OwpCommunication(chain, plan.schemes, n);
  plan.solver.nodes = states;
  plan.solver.seconds = Seconds(start);
  return plan;
}

Result<OwpPlan> SolveOwpIlp(const std::vector<OwpLayer>& chain, int n) {
  const auto start = std::chrono::steady_clock::now();
  const int L = static_cast<int>(chain.size());
  OwpPlan plan;
  plan.solver = {"cbc", true, 0, 0};
  if (L == 0) return plan;
  const double n1 = n - 1.0;
  MilpModel ilp;
  // Objective, expanded so every product is one variable:
  //   o·(1−r_{l−1})·M(N−1) = o·M(N−1) − u·M(N−1),   u = o_l·r_{l−1}
  //   f·(1−r_{l−1})·M(N−1) = f·M(N−1) − v·M(N−1),   v = f_l·r_{l−1}
  //   o·[r·K(N−1) + (1−r)·K(N−1)/N] = r·K(N−1)(1−1/N) + o·K(N−1)/N   (r ≤ o)
  std::vector<int> o(L), i(L), f(L), s(L), r(L), u(L, -1), v(L, -1);
  for (int l = 0; l < L; ++l) {
    const double M = static_cast<double>(chain[l].M), K = static_cast<double>(chain[l].K);
    o[l] = ilp.AddBinary(M * n1 + K * n1 / n);
    const double fan_in_back = chain[l].grouped ? K * n1 / n : K * n1;  // OwpLayer::grouped
    i[l] = ilp.AddBinary(M * n1 / n + fan_in_back);
    f[l] = ilp.AddBinary(M * n1);
    s[l] = ilp.AddBinary(fan_in_back);
    r[l] = ilp.AddBinary(K * n1 * (1.0 - 1.0 / n));
    if (l > 0) {
      u[l] = ilp.AddBinary(-M * n1);
      v[l] = ilp.AddBinary(-M * n1);
    }
  }
  auto product = [&](int z, int x, int y) {  // z = x·y
    ilp.AddRow({{z, 1}, {x, -1}}, -MilpModel::kInfinity, 0);
    ilp.AddRow({{z, 1}, {y, -1}}, -MilpModel::kInfinity, 0);
    ilp.AddRow({{z, 1}, {x, -1}, {y, -1}}, -1, MilpModel::kInfinity);
  };
  for (int l = 0; l < L; ++l) {
    ilp.AddEquality({{o[l], 1}, {i[l], 1}, {f[l], 1}, {s[l], 1}}, 1);  // exactly one scheme
    const bool linked = l + 1 < L && chain[l].linked_to_next;
    if (linked) {
      ilp.AddEquality({{s[l + 1], 1}, {f[l], -1}}, 0);  // s_{l+1} = f_l
      // r_l = o_l·(o_{l+1} + f_{l+1}); the sum is 0/1 because one scheme is chosen.
      ilp.AddRow({{r[l], 1}, {o[l], -1}}, -MilpModel::kInfinity, 0);
      ilp.AddRow({{r[l], 1}, {o[l + 1], -1}, {f[l + 1], -1}}, -MilpModel::kInfinity, 0);
      ilp.AddRow({{r[l], 1}, {o[l], -1}, {o[l + 1], -1}, {f[l + 1], -1}}, -1, MilpModel::kInfinity);
    } else {
      ilp.AddEquality({{f[l], 1}}, 0);  // f_L = 0 and no pair across an unlinked boundary
      ilp.AddEquality({{r[l], 1}}, 0);  // r_L = 0 likewise
      if (l + 1 < L) ilp.AddEquality({{s[l + 1], 1}}, 0);
    }
    if (l > 0) {
      product(u[l], o[l], r[l - 1]);
      product(v[l], f[l], r[l - 1]);
    }
  }
  ilp.AddEquality({{s[0], 1}}, 0);  // s_1 = 0
  TS_ASSIGN_OR_RETURN(MilpSolution sol, ilp.Solve());
  plan.schemes.resize(L);
  for (int l = 0; l < L; ++l) {
    FdtScheme x = FdtScheme::kFanOut;
    if (sol.x[i[l]] > 0.5) x = FdtScheme::kFanIn;
    else if (sol.x[f[l]] > 0.5) x = FdtScheme::kPairFirst;
    else if (sol.x[s[l]] > 0.5) x = FdtScheme::kPairSecond;
    plan.schemes[l] = x;
  }
  std::string why;
  if (!OwpIsValid(chain, plan.schemes, &why)) return Status::Internal("CBC returned an invalid OWP plan: " + why);
  plan.values = OwpCommunication(chain, plan.schemes, n);
  plan.solver = {"cbc", sol.optimal, Seconds(start), sol.nodes};
  return plan;
}

std::vector<OwpLayer> WeightPartitionedChain(const Graph& graph, const std::vector<LayerFigures>& layers,
                                             int switch_layer) {
  std::vector<OwpLayer> chain;
  if (switch_layer <= 0) return chain;
  std::vector<int> nodes;
  for (const auto& f : layers) {
    if (f.index < switch_layer) continue;
    const Node& node = graph.nodes[f.node];
    if (!IsWeightSplitLayer(graph, node)) continue;
    chain.push_back({f.index, f.M, f.K, false, InputSplitGranule(graph, node) > 1});
    nodes.push_back(f.node);
  }
  const auto consumers = graph.Consumers();
  auto is_graph_output = [&](int value) {
    for (int o : graph.outputs)
      if (o == value) return true;
    return false;
  };
  for (size_t k = 0; k + 1 < chain.size(); ++k) {
    // Follow the single consumer through PART layers until the next weight layer.
    int node = nodes[k];
    bool linked = false;
    for (int steps = 0; steps < 64; ++steps) {
      const Node& cur = graph.nodes[node];
      if (cur.outputs.size() != 1 || is_graph_output(cur.outputs[0])) break;
      const auto& readers = consumers[cur.outputs[0]];
      if (readers.size() != 1) break;
      const int next = readers[0];
      if (next == nodes[k + 1]) {
        linked = true;
        break;
      }
      const Node& nn = graph.nodes[next];
      if (IsWeightSplitLayer(graph, nn) || !CheckPerChannel(graph, nn).ok() || graph.ActivationInputs(nn).size() != 1)
        break;
      node = next;
    }
    chain[k].linked_to_next = linked;
  }
  return chain;
}

}  // namespace tessera
