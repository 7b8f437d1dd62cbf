// METHODS §4, Optimized Weight Partitioning (OWP): for every
// weight-partitioned layer choose FDTO, FDTI, or one half of a fused pair
// (FDT1 then FDT2) so that the values exchanged are fewest.
//
//   C_l(FDTO) = (1−r_{l−1})·M_l·(N−1) + r_l·K_l·(N−1) + (1−r_l)·K_l·(N−1)/N
//   C_l(FDTI) = M_l·(N−1)/N + K_l·(N−1)
//   C_l(FDT1) = (1−r_{l−1})·M_l·(N−1)
//   C_l(FDT2) = K_l·(N−1)
//   r_l = o_l·(o_{l+1} + f_{l+1}),  s_{l+1} = f_l,  f_L = 0, s_1 = 0, r_L = 0
//
// The chain holds the weight layers (conv, dense) from the switch layer on,
// in topological order. Consecutive weight layers are *linked* when only
// layers that FDT carries per slice (activations, pooling, depthwise conv,
// flatten of a 1×1 map — PART) lie between them and nothing else reads the
// tensors in between. Only linked neighbours can form a fused pair or reuse
// an output in place; at an unlinked boundary r = 0 and f = 0.
#pragma once

#include <string>
#include <vector>

#include "partition/graph/graph.h"
#include "partition/graph/metrics.h"
#include "partition/graph/op_traits.h"
#include "util/status.h"
#include "planner/solver_report.h"

namespace tessera {

enum class FdtScheme { kFanOut = 0, kFanIn = 1, kPairFirst = 2, kPairSecond = 3 };
// "fdto" | "fdti" | "fdt1" | "fdt2"
const char* FdtSchemeName(FdtScheme scheme);

struct OwpLayer {
  int index = 0;  // 1-based layer index in the model
  int64_t M = 0, K = 0;
  bool linked_to_next = false;
  // A grouped Conv: fan-in (FDTI, FDT2) splits it by whole groups, so each
  // device ends with its groups' outputs complete (no partial sums): the
  // K·(N−1) term of C_l(FDTI) and C_l(FDT2) becomes K·(N−1)/N.
  bool grouped = false;
};

struct OwpPlan {
  std::vector<FdtScheme> schemes;  // one per chain layer
  double values = 0;               // C, in values
  SolverReport solver;
};

// True when the schemes satisfy the constraints above; `why` says which not.
bool OwpIsValid(const std::vector<OwpLayer>& chain, const std::vector<FdtScheme>& schemes, std::string* why = nullptr);
// C of one layer / of the whole chain for valid schemes (values).
double OwpLayerCommunication(const std::vector<OwpLayer>& chain, const std::vector<FdtScheme>& schemes, int n, int l);
double OwpCommunication(const std::vector<OwpLayer>& chain, const std::vector<FdtScheme>& schemes, int n);

// Exact dynamic program over the chain; state = (scheme of l−1, scheme of l).
OwpPlan SolveOwpDp(const std::vector<OwpLayer>& chain, int n);
// The ILP of METHODS §4 with CBC (products linearised). The reported C is
// re-evaluated from the chosen schemes with OwpCommunication.
Result<OwpPlan> SolveOwpIlp(const std::vector<OwpLayer>& chain, int n);


// The OWP chain of a graph: its FDT weight layers (IsWeightSplitLayer of
// op_traits.h; PART layers are those CheckPerChannel accepts) with index ≥ switch_layer
// (1-based; 0 = none, giving an empty chain), with `linked_to_next` set by
// the rule above. `layers` are ComputeLayerFigures(graph).
std::vector<OwpLayer> WeightPartitionedChain(const Graph& graph, const std::vector<LayerFigures>& layers,
                                             int switch_layer);

}  // namespace tessera
