// The plan a gateway / deploy / demo serves: read from a plan file, or made
// here by the planner for the workers that answer (issue 5: "the planner is
// callable from the gateway"), then compiled into one program per device.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "daemon/cluster/gateway.h"
#include "daemon/runtime/device_memory.h"
#include "partition/graph/graph.h"
#include "partition/compile/partition_plan.h"

namespace tessera {

class Cluster;  // planner/cluster.h (not included: its `Link` is not transport's)

struct ServedPlan {
  std::string plan_id;
  std::vector<std::string> device_names;  // plan device index -> cluster device name
  PartitionPlan plan;
  std::vector<DeviceProgram> programs;
  std::vector<WorkerEndpoint> workers;    // plan device index -> worker
  std::string table;                      // the planner's table, when planned here
  std::vector<int64_t> predicted_sent_bytes;  // per plan device, when planned here
  int64_t halo_mac_overhead = 0;
  // Per plan device: what its worker will hold (daemon/runtime/device_memory.h),
  // checked against the device's ram: before anything is deployed.
  // MCU devices: in_flight 0, not sized here.
  std::vector<DeviceMemory> memory;
};

struct ServePlanOptions {
  std::string plan_path;      // "" = plan here
  std::string objective = "memory";
  std::string work_dir;       // where a plan made here is written (plan.pb)
  bool only_healthy = true;   // plan only for workers answering Health
  std::chrono::milliseconds probe_timeout{3000};  // per worker, with only_healthy
  TransportSecurity security;
  DeviceMemoryOptions memory;  // the workers' threads and requests in flight
};

Result<ServedPlan> PrepareServedPlan(const Graph& graph, const Cluster& cluster, const ServePlanOptions& options);

// Pushes `plan`'s programs to its workers and returns what a gateway then
// serves (a failover's answer: gateway.h FailoverFn).
Result<ServedCluster> DeployServedPlan(const ServedPlan& plan, const TransportSecurity& security);

// The demo's cluster: identical Linux devices (UniformCluster) at `workers`.
Result<ServedPlan> PrepareLoopbackPlan(const Graph& graph, const std::vector<WorkerEndpoint>& workers,
                                       const ServePlanOptions& options);

}  // namespace tessera
