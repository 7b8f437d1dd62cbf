// Whole-layer placement on a cluster of Linux boards and microcontrollers
// (METHODS §5) that gives every MCU at least one layer, with a stem in FFMT
// row tiles (METHODS §3) when an MCU-only placement needs one: what
// `tessera demo --mcu` runs, and the shape of a plan for MCU chains.
//
// The planner's latency plan is used as is when it already puts a layer on
// every MCU and keeps every layer whole (an MCU runs receive-all / compute /
// send-all programs). Otherwise (the UART usually makes any MCU hop slower
// than computing on the board) the fastest feasible contiguous pipeline with
// at least one layer per MCU is searched exhaustively over the contiguous
// pipelines (each device one run of layers), up to kMaxMixedCandidates of
// them (27 layers on 4 devices: about 69 000).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "partition/compile/mcu_program_builder.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/graph.h"
#include "planner/cluster.h"
#include "planner/placement.h"
#include "util/status.h"

namespace tessera {

inline constexpr double kMaxMixedCandidates = 2e6;

// How many contiguous pipelines `layers` layers make on `devices` devices
// (each device one run of consecutive layers, or none; order matters).
double ContiguousPipelines(int layers, int devices);

struct MixedPlacement {
  std::vector<int> device_of_layer;  // per graph node (a tiled layer: the first device of its tiles)
  // Non-empty: how each layer is cut, when some are cut over several MCUs
  // (an --mcu-only stem in FFMT row tiles, PlaceMixed); empty: every layer
  // whole on device_of_layer.
  std::vector<LayerAssignment> assignments;
  PlacementCost cost;                // EvaluatePlacement of it
  bool forced = false;               // not the planner's own plan
  std::string note;                  // why this placement, for the user
  std::string planner_table;         // the planner's plan (FormatPlanTable), when it planned
};

// Source device 0 takes the inputs and returns the outputs. `mcus_only`:
// every layer on an MCU (an MCU chain; the Linux source only feeds the
// input and takes the output), the fastest such pipeline, without asking
// the planner. When no pipeline of whole layers fits the MCUs' RAM (the
// large early feature maps of a CNN: VWW's 48x48 layers on 38 KiB), the
// shortest stem of layers [0, s] that leaves every later layer small
// enough for one MCU is cut into k row tiles on the first k MCUs (FFMT,
// METHODS §3: each tile with its halo), s and then k as small as fit once
// the MCU programs are built, and the layers after it are the fastest
// contiguous pipeline over the MCUs (`assignments` holds the cut). No
// latency is predicted for such a placement (cost.latency_s 0).
Result<MixedPlacement> PlaceMixed(const Graph& graph, const Cluster& cluster, bool mcus_only = false);

// The fastest contiguous pipeline (each device's layers consecutive) that
// gives every device in `must_use` a layer and layers to no device outside
// `may_use` (empty: any); ResourceExhausted when none fits the devices' RAM
// and flash, InvalidArgument when there are more than kMaxMixedCandidates
// such pipelines.
// `fits` (optional): a further check of a candidate before it becomes the
// best so far (PlaceMixed: its MCU programs, built, fit the MCUs).
using PlacementCheck = std::function<Status(const std::vector<int>& device_of_layer)>;
Result<MixedPlacement> FastestPipelineUsing(const PlacementProblem& problem, const std::vector<int>& must_use,
                                            int layers, int devices, const std::vector<int>& may_use = {},
                                            const PlacementCheck& fits = nullptr);

// Whether the MCU programs of a whole-layer placement, built as a worker's
// bridge builds them (partition/compile/mcu_program_builder.h), fit each
// MCU's flash and RAM: METHODS §5's feasibility ("RAM ≥ the largest working
// set of any of its sub-models") measured on the program itself. The
// planner's per-layer figures (a layer's input and output) are a lower
// bound of it: a program keeps the device's inputs and outputs alive and
// lays its activations out by liveness (§6 arena layout).
// ResourceExhausted naming the MCU and what it needs.
Status McuProgramsFit(const Graph& graph, const Cluster& cluster, const std::vector<int>& device_of_layer);

// The MCU programs of a compiled plan (device i of the plan is cluster
// device i), built and checked against each MCU's flash and RAM, less the
// firmware's (ResourceExhausted naming the MCU, its need and its preset):
// what `demo --mcu` promises each MCU and McuProgramsFit asks.
Result<std::map<int, McuProgramImage>> BuildMcuPrograms(const Cluster& cluster, const CompiledPlan& compiled);

// How plans with MCU devices compile: every transfer to, from or on an MCU
// moves contiguous runs (CompileOptions::contiguous_io_devices); integer
// FDT partial sums stay int32 on MCUs as on Linux (mcu::kInt32Sums).
CompileOptions McuCompileOptions(const Cluster& cluster);

// The plan of a MixedPlacement: its assignments, or every layer whole on
// device_of_layer.
PartitionPlan MixedPartitionPlan(const MixedPlacement& placement, int devices);

}  // namespace tessera
