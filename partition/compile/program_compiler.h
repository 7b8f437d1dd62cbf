// Plan -> DeviceProgram compiler (issue 4; METHODS §2–§4).
//
// Walks the graph in node order and keeps, for every value, where its pieces
// live: a *primary* cover of disjoint boxes (who computed what) and
// *replicas* (copies a device already received). Every layer states the box
// of each input it needs on each of its devices; the compiler serves the need
// from a local piece if one contains it, else assembles it from the primary
// cover with Send/Recv (or a local Copy). Scheme by scheme:
//
//  WHOLE  device d needs every input in full; computes the node.
//  FFMT   a fused stack of consecutive FFMT layers; per output tile the
//         regions are walked back through the stack (halo.h), the stack input
//         region is fetched once, and the tile runs with no communication.
//  FDTO   every device needs the full input and computes its output-channel
//  FDT1   slice with its weight slice (bias + activation applied locally).
//  FDTI   device i needs input-channel slice i, computes a partial sum with
//  FDT2   its weight slice; partials go to devices[0] and are merged there in
//         device order, then bias and activation are applied once.
//  PART   channel-wise layers run per slice where the slices already are.
//
// A channel split that names *one* device N times is a channel path on that
// device (METHODS §6 "Path discovery", issue 17 item 3): the run
// (FDTO|FDT1|PART) PART* (FDTI|FDT2)? is computed slice after slice, one step
// per slice with every layer of the run in it, the fan-in's partial sums
// added as they come (no slice of the run's inner maps outlives its step;
// no MAC added). program_compiler.cc "Channel paths" states the rules.
//
// Weight-partitioned layers follow METHODS §4's data movement exactly: an
// FDT layer's input is first collected on the layer's source device unless
// it reaches the layer *in place* — slices of an FDTO/FDT1/PART output read
// by an FDTO/FDT1 (all-gather: the reuse r = 1 case) or by PART/FDT2 (the
// fused pair: no transfer).
#pragma once

#include <vector>

#include "partition/compile/device_program.h"
#include "partition/graph/graph.h"
// What the compiler accepts (tileable, per-channel, weight-split layers and
// their split granules) is the op-traits table, shared with the planner.
#include "partition/graph/op_traits.h"
#include "partition/compile/partition_plan.h"
#include "util/status.h"

namespace tessera {

struct CompiledPlan {
  std::vector<DeviceProgram> programs;  // one per device, index = device
  int64_t halo_mac_overhead = 0;        // MACs recomputed in FFMT halos
};

struct CompileOptions {
  // >= 0: only this device's program gets weight values; every other
  // program's weights keep their shapes and no values. For building one
  // device's program at a time without holding every device's weight
  // slices at once (the gateway, issue 11).
  int values_for_device = -1;
  // FDTI / FDT2 of a conv that runs in integers (partition/graph/
  // int8_weights.h): the partial sums stay int32 (conv attr
  // "integer_partial", the merge's Adds "integer_sum") and are rounded once
  // after the last ("integer_requant"), so the split answers the unsplit
  // conv bit for bit, on Linux devices and MCUs alike (mcu::kInt32Sums).
  // false: float partial sums (within one step of the output grid, as any
  // two orders of a float sum).
  bool integer_partial_sums = true;
  // Devices that send, receive and copy only contiguous runs of a buffer
  // (MCUs: each IoEntry of an MCU program is one run). A transfer or copy
  // to or from one of them whose region is not one run in both buffers (a
  // row band of an NCHW map with more than one channel: an FFMT tile and
  // its halo) becomes one message per run (ContiguousPieces), so such
  // devices can take FFMT tiles (METHODS §3).
  std::set<int> contiguous_io_devices;
};

// REQUIRES: `graph` canonical and validated. Errors name the layer and what
// about its scheme cannot be done (e.g. FDTI on a grouped conv).
Result<CompiledPlan> CompilePlan(const Graph& graph, const PartitionPlan& plan,
                                 const CompileOptions& options = CompileOptions());

// The slice [begin, end) of `t` along `axis` (row-major), as the compiler
// cuts FDT weights. A tensor without values (TensorData::values empty: a
// shapes-only import, ImportOptions::shapes_only) gives a slice of the right
// shape and no values, so shapes-only graphs compile (memory accounting).
// REQUIRES: axis < rank, 0 <= begin <= end <= t.shape[axis], and t.values
// empty or holding NumElements(t.shape) values.
TensorData SliceAxis(const TensorData& t, size_t axis, int64_t begin, int64_t end);

}  // namespace tessera
