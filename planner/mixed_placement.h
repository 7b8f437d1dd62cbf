// Whole-layer placement on a cluster of Linux boards and microcontrollers
// (METHODS §5) that gives every MCU at least one layer: what `tessera demo
// --mcu` runs, and the shape of a plan for MCU chains.
//
// The planner's latency plan is used as is when it already puts a layer on
// every MCU and keeps every layer whole (an MCU runs receive-all / compute /
// send-all programs). Otherwise (the UART usually makes any MCU hop slower
// than computing on the board) the fastest feasible contiguous pipeline with
// at least one layer per MCU is searched exhaustively, for chains of up to
// kMaxMixedChainLayers layers.
#pragma once

#include <string>
#include <vector>

#include "partition/graph/graph.h"
#include "planner/cluster.h"
#include "planner/placement.h"
#include "util/status.h"

namespace tessera {

inline constexpr int kMaxMixedChainLayers = 10;

struct MixedPlacement {
  std::vector<int> device_of_layer;  // per graph node
  PlacementCost cost;                // EvaluatePlacement of it
  bool forced = false;               // not the planner's own plan
  std::string note;                  // why this placement, for the user
  std::string planner_table;         // the planner's plan (FormatPlanTable), when it planned
};

// Source device 0 takes the inputs and returns the outputs.
Result<MixedPlacement> PlaceMixed(const Graph& graph, const Cluster& cluster);

// The fastest contiguous pipeline (each device's layers consecutive) that
// gives every device in `must_use` a layer; ResourceExhausted when none fits
// the devices' RAM and flash, InvalidArgument for chains over
// kMaxMixedChainLayers layers.
Result<MixedPlacement> FastestPipelineUsing(const PlacementProblem& problem, const std::vector<int>& must_use,
                                           int layers, int devices);

}  // namespace tessera
