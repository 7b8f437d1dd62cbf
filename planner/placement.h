// METHODS §5: whole layers assigned to heterogeneous devices (pipelining),
// minimising the latency of one inference or the time between outputs of a
// stream.
//
//   L_ij = MAC_j · CpM_i / f_i            compute of layer j on device i
//   T_ih = bytes_ih / bandwidth_ih        transfer (UART 8N1: 10 bits/byte)
//   latency = Σ compute + Σ transfers
//             (+ the model's inputs from the source device to the layers
//             that read them and its outputs back, when `source` is set:
//             the gateway hands a request to the source and takes the
//             answer from it, so on an MCU pipeline those UART bytes are
//             part of every inference)
//   period  = compute(ī) + out-transfers(ī) + Σ compute of layers between
//             ī's first and last layer that run elsewhere,
//   with ī the device of largest total compute, and never less than the
//   longest stage: max over devices of compute + out-transfers (issue 18's
//   dataflow view: a device cannot start the next input before it has sent
//   this one's results); throughput = 1 / period.
//
// Feasible: every device's flash ≥ Σ weights of its layers and RAM ≥ the
// largest input+output pair among its layers.
//
// Searches: exhaustive (d^n, refused above a limit), bisection heuristic on
// the period with contiguous greedy packing (linear per probe, not exact),
// branch-and-bound (exact; bound = cost so far + fastest compute of every
// unassigned layer, communication ignored), and a dynamic program over
// (layer, device of previous layer), exact for latency on chains when the
// flash sums do not bind. For throughput, PlacePipeline: an exact dynamic
// program over pipelines (every device one contiguous range of layers in
// topological order), polynomial in the layers for a fixed number of device
// kinds; on DAGs it optimises a stated lower bound and proves optimality when
// the bound is met.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "partition/graph/graph.h"
#include "partition/graph/metrics.h"
#include "util/status.h"
#include "planner/cluster.h"
#include "planner/solver_report.h"

namespace tessera {

enum class PlacementObjective { kLatency, kThroughput };

struct PlacementProblem {
  const Cluster* cluster = nullptr;  // borrowed
  std::vector<std::string> names;    // "12 conv5 (Conv)" for messages
  std::vector<int64_t> macs;         // R_j
  std::vector<OpKind> kinds;         // of R_j: which of a device's rates applies (empty: macs_per_s)
  std::vector<int64_t> weight_bytes; // Q_j · 4
  // On an MCU, layer j's weights in the program's form: a conv's or a
  // dense layer's weights with an exact int8 form take 1 B per value and
  // 4 B per output channel (partition/graph/int8_weights.h, as
  // BuildMcuProgram stores them). Empty: weight_bytes.
  std::vector<int64_t> mcu_weight_bytes;
  // Why an MCU cannot run layer j (partition/compile/mcu_program_builder.h
  // McuCanRun: an op or an attribute its firmware lacks); "" when it can.
  // Empty: every layer can.
  std::vector<std::string> mcu_refusals;
  std::vector<int64_t> buffer_bytes; // (M_j + K_j) · 4
  // On an MCU, layer j's input and output as its program holds them: 1 B a
  // value on an 8-bit grid (partition/compile/mcu_program_builder.h
  // McuValueBytes), else 4. Empty: buffer_bytes.
  std::vector<int64_t> mcu_buffer_bytes;
  // Layer j's output on a link: K_j · 4, or K_j when a QuantizeDequantize
  // of an 8-bit grid makes it (it travels as int8 codes between any two
  // devices: partition/compile/device_program.h WireGrid).
  std::vector<int64_t> output_bytes;
  std::vector<std::vector<int>> producers;  // 0-based layers whose outputs layer j reads
  // The device that receives the model's inputs and returns its outputs (the
  // plan's source); -1: that traffic is not counted (problems made by hand).
  int source = -1;
  // Per layer: the model inputs it reads, as (input index, bytes), and the
  // bytes of model outputs it produces.
  std::vector<std::vector<std::pair<int, int64_t>>> model_inputs;
  std::vector<int64_t> model_output_bytes;

  int layers() const { return static_cast<int>(macs.size()); }
  // Whether device i can run layer j at all (an MCU only the ops its firmware has).
  bool Runs(int i, int j) const {
    return mcu_refusals.empty() || cluster->devices[i].kind != DeviceKind::kMcu || mcu_refusals[j].empty();
  }
  // The flash layer j's weights take on device i.
  int64_t WeightBytes(int i, int j) const {
    return !mcu_weight_bytes.empty() && cluster->devices[i].kind == DeviceKind::kMcu ? mcu_weight_bytes[j]
                                                                                     : weight_bytes[j];
  }
  // The bytes layer j's output takes on the link from device `from` to `to`.
  // (The same on every link; the devices are named for the callers.)
  int64_t OutputBytes(int /*from*/, int /*to*/, int j) const { return output_bytes[j]; }
  // The RAM layer j's input and output take on device i.
  int64_t BufferBytes(int i, int j) const {
    return !mcu_buffer_bytes.empty() && cluster->devices[i].kind == DeviceKind::kMcu ? mcu_buffer_bytes[j]
                                                                                     : buffer_bytes[j];
  }
  // L_ij of METHODS §5: layer j's MACs at device i's rate for its kind.
  double ComputeSeconds(int i, int j) const {
    return cluster->devices[i].ComputeSeconds(macs[j], j < static_cast<int>(kinds.size()) ? kinds[j] : OpKind::kOther);
  }
  // Every layer reads only the previous one (and only layer 0 reads model
  // inputs), so the latency decomposes layer by layer.
  bool IsChain() const;
};

// From a graph (edges from the graph) or from figures alone (a chain).
PlacementProblem MakePlacementProblem(const Graph& graph, const std::vector<LayerFigures>& layers,
                                      const Cluster& cluster);
PlacementProblem MakeChainPlacementProblem(const std::vector<LayerFigures>& layers, const Cluster& cluster);

struct PlacementCost {
  bool feasible = false;
  std::string infeasible_reason;  // the first device over its flash or RAM
  double latency_s = 0;
  double period_s = 0;                // METHODS §5 definition (with in-between layers), >= naive_period_s
  double naive_period_s = 0;          // max over devices of Device::StageSeconds(compute, out-transfers)
  int bottleneck = -1;                // the device that sets period_s: ī, or the longest stage when that is longer
  std::vector<double> compute_s;      // per device
  std::vector<double> send_s;         // per device: its outgoing transfers per inference
  std::vector<int64_t> sent_bytes;    // per device
  std::vector<int64_t> received_bytes;
  std::vector<int64_t> weight_bytes;  // per device
  std::vector<int64_t> peak_buffer_bytes;
};

PlacementCost EvaluatePlacement(const PlacementProblem& problem, const std::vector<int>& device_of_layer);
double PlacementObjectiveValue(const PlacementCost& cost, PlacementObjective objective);

struct PlacementResult {
  std::vector<int> device_of_layer;
  PlacementCost cost;
  SolverReport solver;
};

// ResourceExhausted naming the layer, the device closest to holding it and
// the shortfall in bytes when a layer fits on no device, or when the
// weights exceed the total flash.
Status CheckPlacementFeasible(const PlacementProblem& problem);

Result<PlacementResult> PlaceExhaustive(const PlacementProblem& problem, PlacementObjective objective,
                                        double max_assignments = 5e6);
Result<PlacementResult> PlaceBisection(const PlacementProblem& problem, PlacementObjective objective);
// `incumbent` (optional) seeds the upper bound. Stops after `node_limit`
// nodes with the best found so far (solver.optimal = false).
Result<PlacementResult> PlaceBranchAndBound(const PlacementProblem& problem, PlacementObjective objective,
                                            const PlacementResult* incumbent = nullptr,
                                            int64_t node_limit = 20'000'000);
// Latency only, chains only (FailedPrecondition otherwise). When the result
// breaks a flash sum, cost.feasible is false and the caller should use B&B.
Result<PlacementResult> PlaceLatencyDp(const PlacementProblem& problem);

// Throughput over pipelines: every used device runs one contiguous range of
// the layers (topological order), stages in any order of devices.
//
//   F(r, c, s) = least period of layers [s, n) when the stage starting at s
//                runs on a device of kind c and r counts the devices of each
//                kind still free (including that one)
//              = min over e > s, next kind c' of
//                  max(stage(s, e, c, c'), F(r - c, c', e))
//   stage(s, e, c, c') = compute of [s, e) on c + sends: every tensor
//                produced in [s, e) and read at or after e, once; to c' when
//                layer e reads it, else at the cheapest link (a lower bound
//                on DAGs, exact on chains) + model outputs back to the source
//                (+ the source's input sends when c is the source's kind).
//
// Devices with equal speed, memory and links are one kind (the source is a
// kind of its own), so the states are (layers + 1) x kinds x Π(count + 1):
// 16, 64 or 256 identical devices cost O(n² · d) at most, pruned by the
// incumbent. The DP's pipeline is evaluated exactly (EvaluatePlacement);
// solver.optimal is true when that period meets the DP's bound, i.e. the
// plan is proven optimal among pipelines. `solver.bound` is that bound;
// `solver.bound_any` a period no whole-layer assignment can beat
// (max(largest layer on its fastest device, total MACs / total speed)).
// NotSupported when the state space exceeds `max_states`.
Result<PlacementResult> PlacePipeline(const PlacementProblem& problem, int64_t max_states = 40'000'000);

// Issue 18 item 6: a genetic search, for large DAGs and as a comparison to
// the exact searches; not proven optimal. One gene per layer, its device.
// Fitness: the objective of the assignment as EvaluatePlacement computes it
// (for throughput the period: the longest per-device time, compute + its
// sends, i.e. the imbalance of the devices' times; for latency the latency);
// an assignment over a device's flash or RAM ranks after every feasible one.
// Initial population: the bisection heuristic's assignment, pipelines with
// random cuts over random device orders, a quarter of them scrambled.
// Each epoch keeps the `elite` best; children come from tournament
// selection, two-point crossover (a stretch of layers from a second parent)
// with probability `crossover`, a stage boundary shifted by one layer with
// probability `mutation`, and each gene set to a random device with
// probability 1/layers. Stops after `epochs`, or `patience` epochs without a
// better assignment. Deterministic for a seed.
struct GeneticOptions {
  int population = 64;
  int epochs = 2000;
  int patience = 300;
  double crossover = 0.9;
  double mutation = 0.5;
  int tournament = 3;
  int elite = 2;
  uint64_t seed = 1;
};
std::string DescribeGeneticOptions(const GeneticOptions& options);
Result<PlacementResult> PlaceGenetic(const PlacementProblem& problem, PlacementObjective objective,
                                     const GeneticOptions& options = {});

// The default: DP for latency on chains when feasible; for throughput the
// pipeline DP; else B&B seeded by the bisection heuristic.
Result<PlacementResult> PlaceLayers(const PlacementProblem& problem, PlacementObjective objective);

}  // namespace tessera
