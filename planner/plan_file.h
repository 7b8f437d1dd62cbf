// Reading a plan file (`tessera plan --out plan.pb`, proto/tessera.proto
// `Plan`) into the compiler's view, checked against the model it is for.
#pragma once

#include <string>

#include "partition/graph/graph.h"
#include "partition/compile/partition_plan.h"
#include "util/status.h"

namespace tessera {

struct LoadedPlan {
  std::string id;
  std::vector<std::string> device_names;
  PartitionPlan plan;
};

// Errors name the file: unreadable, not a Plan, made for a model with a
// different number of layers, a layer naming a device the plan lacks.
Result<LoadedPlan> ReadPlanFile(const std::string& path, const Graph& graph);

}  // namespace tessera
