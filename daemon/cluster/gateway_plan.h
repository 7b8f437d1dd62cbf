// The plan a gateway / deploy / demo serves: read from a plan file, or made
// here by the planner for the workers that answer (issue 5: "the planner is
// callable from the gateway"), then compiled into one program per device.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "daemon/cluster/gateway.h"
#include "daemon/cluster/mcu_direct_links.h"
#include "daemon/runtime/device_memory.h"
#include "partition/compile/partition_plan.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/graph.h"
#include "partition/graph/merge_models.h"
#include "partition/import/model_import.h"

namespace tessera {

class Cluster;  // planner/cluster.h (not included: its `Link` is not transport's)

struct ServedPlan {
  std::string plan_id;
  // How the programs are compiled: with MCUs among the devices, their
  // transfers move contiguous runs only (CompileOptions).
  CompileOptions compile;
  std::vector<std::string> device_names;  // plan device index -> cluster device name
  PartitionPlan plan;
  std::vector<DeviceProgram> programs;
  std::vector<WorkerEndpoint> workers;    // plan device index -> worker
  std::string table;                      // the planner's table, when planned here
  std::vector<int64_t> predicted_sent_bytes;  // per plan device, when planned here
  double predicted_cost = -1;                 // ObjectiveCost (planner/plan.h) when planned here, else -1
  int64_t halo_mac_overhead = 0;
  // Per plan device: what its worker will hold (daemon/runtime/device_memory.h),
  // checked against the device's ram: before anything is deployed.
  // MCU devices: in_flight 0, not sized here.
  std::vector<DeviceMemory> memory;
  std::vector<int64_t> ram_bytes;  // per plan device: its ram: from the cluster file
  // Seconds one request's input and output take on the gateway's link
  // (ModelRequestBytes over Cluster::GatewayBytesPerSecond; 0: not priced).
  double request_link_s = 0;
  // MCUs the cluster file joins UART-to-UART: their transfers are marked in
  // `programs` (and in every program compiled again for deployment).
  McuPortMap mcu_ports;
};

struct ServePlanOptions {
  std::string plan_path;      // "" = plan here
  // What decides the programs besides the plan (ModelFingerprint): when
  // set, the served plan id is "<plan file id>-<12 hex digits of SHA-256 of
  // it and the workers>", so another model, other weights or other worker
  // addresses make another plan id (workers refuse a different program
  // under a plan id they hold, issue 14). "" = the plan file's id as is.
  std::string model_fingerprint;
  std::string objective = "memory";
  std::string work_dir;       // where a plan made here is written (plan.pb)
  bool only_healthy = true;   // plan only for workers answering Health
  std::chrono::milliseconds probe_timeout{3000};  // per worker, with only_healthy
  TransportSecurity security;
  DeviceMemoryOptions memory;  // the workers' threads and requests in flight
  // PrepareLoopbackPlan: the ram: of every worker (0: unlimited).
  int64_t loopback_ram_bytes = 0;
  // Measured per-layer times for the compute model (planner/layer_profile.h;
  // `tessera run --profile --json`); "" = MACs at each device's rate.
  std::string layer_profile;
  // Measured row tiles (ApplyTileProfile; `tessera plan --tile-profile`).
  std::string tile_profile;
  // Per-layer times without Winograd (ApplyCompactProfile; `tessera plan
  // --compact-profile`).
  std::string compact_profile;
};

Result<ServedPlan> PrepareServedPlan(const Graph& graph, const Cluster& cluster, const ServePlanOptions& options);

// The model file a gateway reads weights from when it deploys.
struct ModelSource {
  std::string path;
  ImportOptions options;  // as for the graph served (shapes_only is ignored)
  // Further models merged with `path` (partition/graph/merge_models.h; the
  // CLI's --with-model): their weights decide what is shared, so a merged
  // source is imported whole, with values, when a device's program is built.
  std::vector<std::string> with_paths = {};
};

// The graph `model` names with weight values: `path` imported, merged with
// `with_paths` when there are any (`report` says what is shared).
Result<Graph> ImportModelSource(const ModelSource& model, MergeReport* report = nullptr);

// SHA-256 (hex) of everything of `model` that decides weight values and
// shapes: the model file's bytes, the darknet .weights file's, the seed of
// generated weights and the input shapes. IOError naming an unreadable file.
Result<std::string> ModelFingerprint(const ModelSource& model);

// Issue 11 item 3, "no weights where none are needed": a gateway runs no
// layer, so it keeps only the shapes-only graph (ImportOptions::shapes_only)
// and plans and compiles with it (programs whose weights have shapes and no
// values: enough for link bytes, validation and /metrics). When it deploys,
// it builds one device's program at a time with that device's weights and
// frees it once sent (DeployProgramsOneByOne). Building device d's program:
// the layers d runs a part of are taken in windows of at most `window_bytes`
// of their (whole) weights; for each window the model is imported with
// values for those layers only (ImportOptions::values_for_nodes: darknet
// generates or reads nothing else) and the plan compiled with values for d
// only (CompileOptions::values_for_device); the window's weight slices are
// moved into d's program and the window's graph freed. The compiler is
// deterministic, so the result equals CompilePlan(weighted graph,
// plan).programs[d] bit for bit; every weight of it is checked to have
// values. Peak: d's weights + one window + one slice, not the model.
inline constexpr int64_t kWeightWindowBytes = 16 << 20;
Result<DeviceProgram> CompileDeviceProgramWithWeights(const Graph& shapes, const PartitionPlan& plan, int device,
                                                      const ModelSource& model,
                                                      int64_t window_bytes = kWeightWindowBytes,
                                                      const CompileOptions& options = CompileOptions());

// Pushes `plan`'s programs, as compiled (from a graph with weights), to its
// workers and returns what a gateway then serves (the demo's failover).
Result<ServedCluster> DeployServedPlan(const ServedPlan& plan, const TransportSecurity& security);

// Pushes `plan`'s programs to its workers, one device at a time with its
// weights read from `model` (CompileDeviceProgramWithWeights), and returns
// what a gateway then serves (a failover's answer: gateway.h FailoverFn;
// a rejoin's deploys with DeployOptions::keep_plan_id).
Result<ServedCluster> DeployServedPlan(const ServedPlan& plan, const Graph& shapes, const ModelSource& model,
                                       const TransportSecurity& security, const DeployOptions& deploy = {});

// What a gateway serves once `plan` is deployed.
ServedCluster ServedClusterOf(const ServedPlan& plan);

// The demo's cluster: identical Linux devices (UniformCluster) at `workers`.
Result<ServedPlan> PrepareLoopbackPlan(const Graph& graph, const std::vector<WorkerEndpoint>& workers,
                                       const ServePlanOptions& options);

}  // namespace tessera
