// The Plan (ARCHITECTURE.md): for every layer its scheme, devices and split
// sizes, plus what the planner predicts per device. BuildPlan runs the
// searches of METHODS §3–§5 for one objective and assembles the result:
//
//  * memory / communication: FFMT tiles (row stripes) before the switch
//    layer of §3, the OWP choice of §4 (FDTO / FDTI / fused pair, PART for
//    layers carried per slice) from it on; splits proportional to device
//    capacity (RAM and flash for memory, MAC rate for communication).
//  * latency / throughput: whole layers pipelined across devices (§5).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partition/graph/graph.h"
#include "partition/graph/halo.h"  // SplitProportional
#include "partition/graph/metrics.h"
#include "partition/compile/partition_plan.h"
#include "util/status.h"
#include "planner/cluster.h"
#include "planner/solver_report.h"

namespace tessera {

enum class Objective { kMemory, kCommunication, kLatency, kThroughput };
const char* ObjectiveName(Objective objective);
Result<Objective> ParseObjective(const std::string& text);

struct PlanOptions {
  Objective objective = Objective::kMemory;
  // memory/communication: "cbc" (default) | "exact";
  // latency/throughput: "" (auto: dp, else bnb seeded by bisection) | "exact"
  // (= auto) | "dp" | "bnb" | "exhaustive" | "bisection".
  std::string solver;
};

struct PlannedLayer {
  int index = 0;  // 1-based
  std::string name, op;
  std::string scheme;                // ffmt|fdto|fdti|fdt1|fdt2|part|whole
  std::vector<int> devices;          // cluster device indices
  std::vector<int64_t> split;        // per device: rows or channels
  std::string split_axis;            // rows|out_channels|in_channels|""
  std::vector<int64_t> grid;         // ffmt: [rows, cols]
  bool stack_start = false;          // ffmt: a stack of its own (LayerAssignment::stack_start)
};

struct DeviceLoad {
  int64_t weight_bytes = 0;
  int64_t peak_buffer_bytes = 0;
  double compute_s = 0;
  double send_s = 0;         // layer-assignment plans: its outgoing transfers per inference
  double compute_share = 0;  // of the model's MACs
  int64_t sent_bytes = 0, received_bytes = 0;
  // What the device's worker will hold (issue 11 item 4), sized by the
  // worker's own code from the compiled program (daemon/cluster/plan_fit.h);
  // 0 = not sized (an MCU, or BuildPlan alone). promised = baseline +
  // max(weights as stored + compute_slots × working memory + in_flight ×
  // (pipeline buffers + request I/O), weights held while loading); the
  // arena is working memory + pipeline buffers (program_runner.h).
  int64_t promised_bytes = 0, promised_weight_bytes = 0, promised_arena_bytes = 0, baseline_bytes = 0;
  int64_t promised_working_bytes = 0, promised_buffer_bytes = 0;
  // The device's convs keep raw-size weights (no Winograd) to fit its RAM
  // (PartitionPlan::compact_weights; chosen by PlanWithinMemory).
  bool compact_weights = false;
  // What that costs it: the seconds its convs take beyond their profiled
  // (Winograd) time, included in compute_s and the latency (a compact
  // profile, planner/layer_profile.h; 0 without one).
  double compact_s = 0;
  // Stretches of its WHOLE layers the device computes as tiles, one after
  // the other, to fit its RAM (the one-device memory flow of METHODS §6,
  // chosen by PlanWithinMemory; the layers' scheme is ffmt on this device
  // alone, with their grid), and the MACs its tiles recompute.
  int tiled_paths = 0;
  int64_t tiled_halo_macs = 0;
  double tiled_halo_s = 0;  // their time at the device's rate, included in compute_s and the plan's latency
  // Of those, the layers processed in parts chosen by the genetic search
  // (tessera plan --parts-search genetic; daemon/runtime/parts_search.h),
  // their band count, and the slowdown the calibrated model gives them,
  // included in compute_s, the latency and the period.
  int parts_layers = 0;
  int64_t parts_bands = 0;
  double parts_s = 0;
  int64_t promised_load_peak_bytes = 0, promised_io_bytes = 0;
  int64_t promised_link_bytes = 0;  // tensor frames on its peers' links (device_memory.h)
  int in_flight = 0, compute_slots = 0;
};

struct Plan {
  std::string model_name;
  int64_t model_layers = 0, model_weights = 0, model_macs = 0;
  Cluster cluster;
  Objective objective = Objective::kMemory;
  int switch_layer = 0;                    // §3, 1-based, 0 = none
  double footprint_single_bytes = 0;       // §3, float32
  double footprint_per_device_bytes = 0;   // §3 ILP figure, float32
  int64_t footprint_plan_bytes = 0;        // largest weights+buffers of any device in this plan
  double communication_all_fdto_values = 0;  // §4 over the weight-partitioned layers
  double communication_plan_values = 0;
  double latency_s = 0, throughput_per_s = 0;
  SolverReport solver;
  std::vector<SolverReport> sub_solvers;   // every search that ran, in order
  std::vector<PlannedLayer> layers;
  std::vector<DeviceLoad> loads;           // per cluster device
  // Latency/throughput objectives: which family of plans won and by how
  // much ("split plan (memory ILP, METHODS §3): 0.81 s predicted; layer
  // assignment (§5): 2.90 s"); empty for the other objectives.
  std::string choice;
  // Layer-assignment plans (METHODS §5): time between outputs of a stream and
  // the device whose stage sets it (-1: not a pipeline plan).
  double period_s = 0;
  int bottleneck_device = -1;
  // The request's own trip (PriceRequest in daemon/cluster/plan_fit.cc):
  // the model's inputs and outputs in bytes and the seconds the gateway's
  // link (Cluster::GatewaySeconds) takes to carry them, included in
  // latency_s; the stream's rate is at most request_wire_rate_per_s
  // (the link's rate / request_bytes; 0: not priced).
  // request_cpu_s: the source's network-stack CPU for those bytes
  // (net_macs_per_byte) and for serving the request (request_macs), in its
  // compute_s and the period, and in the latency where it outlasts
  // request_s.
  int64_t request_bytes = 0;
  double request_s = 0, request_wire_rate_per_s = 0, request_cpu_s = 0;
  // Where compute times came from when not from MACs alone: "layer profile
  // FILE (...)" (planner/layer_profile.h); empty = MACs at each device's rate.
  std::string time_model;
};

// REQUIRES: `layers` = ComputeLayerFigures(graph). Errors: InvalidArgument
// for an unknown solver, ResourceExhausted (naming the layer, device and
// shortfall in bytes) when the plan does not fit the devices.
Result<Plan> BuildPlan(const Graph& graph, const std::vector<LayerFigures>& layers, const Cluster& cluster,
                       const PlanOptions& options);

// The figure plan.objective minimises, as predicted (lower is better):
// memory -> footprint_plan_bytes, communication -> communication_plan_values,
// latency -> latency_s, throughput -> 1 / throughput_per_s (infinity when
// 0). What a gateway compares to decide whether a re-plan is better.
double ObjectiveCost(const Plan& plan);

// The JSON of `tessera plan --json` (shape in issue 3).
nlohmann::ordered_json PlanToJson(const Plan& plan);
// The readable table: one row per layer, then one per device, then totals.
std::string FormatPlanTable(const Plan& plan);
// Writes the Plan protobuf (proto/tessera.proto) to `path`.
Status WritePlanProto(const Plan& plan, const std::string& path);

// The compiler's view (partition/compile/partition_plan.h) of the plan: same
// schemes, devices and split sizes, one entry per graph node.
PartitionPlan ToPartitionPlan(const Plan& plan);


}  // namespace tessera
