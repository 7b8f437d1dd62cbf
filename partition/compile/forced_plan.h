// Plans that force one scheme everywhere it applies (issue 4's equivalence
// matrix, and `--force` for users who want to study one scheme). Layers the
// scheme cannot cut run WHOLE on the source device.
#pragma once

#include <string>

#include "partition/graph/graph.h"
#include "partition/compile/partition_plan.h"
#include "util/status.h"

namespace tessera {

enum class ForcedScheme {
  kFfmt,      // the longest tileable prefix as FFMT stacks over grid_rows × grid_cols
  kFdto,      // every splittable conv/dense FDTO, channel-wise layers after them PART
  kFdti,      // every ungrouped conv/dense FDTI
  kPairs,     // fused pairs FDT1→(PART…)→FDT2 wherever two weight layers allow it, else FDTO
  kPipeline,  // contiguous layer ranges, one per device, sized by MACs
  kParts,     // FFMT's stacks on device 0 alone, processed in grid_rows row bands
              // with their overlaps kept (LayerAssignment::parts; issue 18 item 3)
  kHalo,      // FFMT's layers, each a stack of its own: halo exchange between
              // neighbouring tiles (LayerAssignment::stack_start; issue 15)
};

Result<ForcedScheme> ParseForcedScheme(const std::string& text);  // ffmt|fdto|fdti|pairs|pipeline|parts|halo

struct ForcedPlanOptions {
  int devices = 2;
  int64_t grid_rows = 2, grid_cols = 1;            // ffmt
  std::vector<double> row_weights, col_weights;    // ffmt, uneven grids
};

Result<PartitionPlan> MakeForcedPlan(const Graph& graph, ForcedScheme scheme, const ForcedPlanOptions& options);

}  // namespace tessera
