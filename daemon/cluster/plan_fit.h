// Plans whose memory promise is what the workers allocate (issue 11 item 4).
//
// The planner (planner/plan.h) models a device's memory as METHODS §3–§4 do:
// raw float32 weights and the largest live input+output buffers. A worker
// holds more and in other forms (packed and Winograd-transformed weights,
// every step's intermediates and scratch in one device arena, the daemon
// itself). So after BuildPlan the plan is compiled and every Linux device's
// program is sized by the worker's own code (daemon/runtime/device_memory.h):
//
//   promised(d) = weights as stored + in_flight × device arena + worker baseline
//
// and checked against the device's `ram:`. A device over its RAM gets its
// planning capacities (buffers and weights) scaled down by how much it is
// over, and the planner runs again, up to FitOptions::max_replans times;
// Before the planner is asked to put less on a device, the device tries
// compact weights (no Winograd), then the one-device memory flow over the
// layers it runs whole (METHODS §6: stretches computed as tiles in turn,
// DeviceLoad::tiled_paths), since neither moves work to other devices.
// When no plan fits, the answer is ResourceExhausted naming the device, its
// need (with its parts) and its limit. MCU devices keep the planner's model
// (their programs run on the MCU runtime, not on a worker's kernels).
#pragma once

#include <string>
#include <vector>

#include "daemon/runtime/device_memory.h"
#include "daemon/runtime/parts_search.h"
#include "partition/compile/device_program.h"
#include "partition/graph/graph.h"
#include "partition/graph/metrics.h"
#include "planner/cluster.h"
#include "planner/plan.h"
#include "util/status.h"

namespace tessera {

struct FitOptions {
  DeviceMemoryOptions memory;  // the workers' --threads, requests in flight
  int max_replans = 6;
  // A device over its RAM may compute stretches of its WHOLE layers as tiles
  // in turn (daemon/runtime/memory_flow.h) recomputing at most this share of
  // those layers' MACs; < 0: no limit; 0 still allows halo-free cuts.
  double max_mac_overhead = 0.10;
  bool memory_flow = true;  // false: never tile (tessera plan --memory-flow off)
  // Set: a device over its RAM chooses which of its WHOLE layers process in
  // parts by the genetic search (daemon/runtime/parts_search.h) instead of
  // the greedy flow. The slowdown per band count (`slowdown`, `bands`) is
  // the calibrated one of this machine (CalibratePartsTime); a layer's time
  // is the planner's (its time-MACs at the device's rate). The point taken
  // is the lowest-memory one whose device time keeps the plan's period (a
  // pipelined plan; otherwise its latency); when that one does not fit the
  // device's RAM, the fastest that fits, and the period or latency grows by
  // what the model gives it. Nothing fits: the re-plan goes on as before.
  const PartsTimeModel* parts_time = nullptr;
  PartsSearchOptions parts;
};

// BuildPlan, then size and re-plan as above. On success every Linux device's
// DeviceLoad::promised_* is filled and `plan.cluster` is `cluster` as given.
// `graph` may be shapes-only (ImportOptions::shapes_only).
// Bytes of one request's own trip between the gateway and the source: the
// model's inputs and outputs as float32 (PriceRequest; the gateway's health
// probes wait behind them on a busy link, gateway.cc ProbeWorker).
int64_t ModelRequestBytes(const Graph& graph);

Result<Plan> PlanWithinMemory(const Graph& graph, const std::vector<LayerFigures>& layers, const Cluster& cluster,
                              const PlanOptions& options, const FitOptions& fit);

// The same check for programs already compiled (a plan file given to deploy
// or the gateway): `devices[i]` is the cluster device that runs programs[i].
// Returns each program's promise (MCU entries: device index only, total 0);
// ResourceExhausted, naming every device over its RAM, when any is.
Result<std::vector<DeviceMemory>> CheckProgramsFit(const std::vector<DeviceProgram>& programs,
                                                   const std::vector<const Device*>& devices,
                                                   const DeviceMemoryOptions& options);

}  // namespace tessera
