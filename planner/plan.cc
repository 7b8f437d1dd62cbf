#include "planner/plan.h"
#include "transport/wire/mcu_program.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <set>

#include "partition/compile/program_compiler.h"
#include "planner/memory_split.h"
#include "planner/placement.h"
#include "util/quantity.h"
#include "planner/weight_partition.h"

namespace tessera {

namespace {

constexpr int64_t kFloatBytes = 4;

// Layers that may sit inside an FFMT fused stack (METHODS §2): output rows
// depend only on a window of input rows. The op-traits table decides
// (CheckTileable), the same rule the compiler applies, so a plan never puts
// a layer in a stack that the compiler then refuses (e.g. Reorg, whose
// output rows mix every input row).
// A QDQ model's input quantization runs whole on the source, so the tiles
// leave as int8 codes (QuantizesModelInput).
bool SpatiallyTileable(const Graph& graph, const LayerFigures& f) {
  if (f.output_shape.size() != 4 || f.output_shape[2] < 2 || QuantizesModelInput(graph, f.node)) return false;
  return CheckTileable(graph, f.node).ok();
}

// Input rows an FFMT tile of `out_rows` output rows reads (the halo of §2):
// (rows−1)·stride + (kernel−1)·dilation + 1 for a window, the most rows any
// `out_rows` output rows of a Resize read (halo.h, MaxInputSpan), the same
// rows for a point-wise layer, at most the whole input.
int64_t InputRowsForTile(const Graph& graph, const LayerFigures& f, int64_t out_rows) {
  if (f.input_shapes.empty() || f.input_shapes[0].size() != 4) return out_rows;
  const int64_t h_in = f.input_shapes[0][2];
  const int64_t h_out = f.output_shape[2];
  auto rule = TileRuleOf(graph, f.node);
  if (rule.ok() && rule->window) {
    return std::min(h_in, MaxInputSpan(rule->w, 0, out_rows));
  }
  if (h_out > 0 && h_in != h_out) return std::min(h_in, (out_rows * h_in + h_out - 1) / h_out);
  return std::min(h_in, out_rows);
}

int64_t Channels(const Shape& s) { return s.size() >= 2 ? s[1] : (s.empty() ? 1 : s.back()); }

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Per-layer traffic between devices, in bytes (a value of a QuantizeDequantize's
// output travels as one byte: ValueWireBytes), for the device summary.
struct Traffic {
  std::vector<double> sent, received;
  explicit Traffic(int d) : sent(d, 0), received(d, 0) {}
  void Move(int from, int to, double values) {
    if (from == to || values <= 0) return;
    sent[from] += values;
    received[to] += values;
  }
};

Status CheckDeviceMemory(const Plan& plan, const std::vector<LayerFigures>& layers,
                         const std::vector<std::vector<int64_t>>& buffer_of_layer) {
  for (int i = 0; i < plan.cluster.size(); ++i) {
    const Device& d = plan.cluster.devices[i];
    const DeviceLoad& load = plan.loads[i];
    if (load.weight_bytes > d.flash_bytes) {
      return Status::ResourceExhausted(
          "device " + d.name + " would hold " + FormatBytes(load.weight_bytes) + " of weights but has " +
          FormatBytes(d.flash_bytes) + " flash: short by " + std::to_string(load.weight_bytes - d.flash_bytes) +
          " bytes (switch layer " + std::to_string(plan.switch_layer) + "); add devices or use larger ones");
    }
    if (load.peak_buffer_bytes > d.ram_bytes) {
      size_t worst = 0;
      for (size_t l = 0; l < layers.size(); ++l)
        if (buffer_of_layer[l][i] > buffer_of_layer[worst][i]) worst = l;
      return Status::ResourceExhausted("layer " + std::to_string(layers[worst].index) + " '" + layers[worst].name + "' (" +
                                       layers[worst].op + ") needs " + FormatBytes(buffer_of_layer[worst][i]) +
                                       " of input+output buffers on device " + d.name + ", which has " +
                                       FormatBytes(d.ram_bytes) + " RAM: short by " +
                                       std::to_string(buffer_of_layer[worst][i] - d.ram_bytes) +
                                       " bytes; add devices or use larger ones");
    }
  }
  return Status::OK();
}

void FillModelTotals(const Graph& graph, const std::vector<LayerFigures>& layers, Plan* plan) {
  const ModelTotals totals = ComputeTotals(layers);
  plan->model_name = graph.name;
  plan->model_layers = totals.layers;
  plan->model_weights = totals.weights;
  plan->model_macs = totals.macs;
}

// What the §3 and §4 solvers chose: the switch layer, the weight layers
// after it (the OWP chain) and the FDT scheme of each.
struct SplitSolution {
  MemorySplit split;
  std::vector<OwpLayer> chain;
  OwpPlan owp;
};

// Solves the memory split (§3) and the OWP schemes (§4) with cbc or the exact
// solvers, and records their reports and figures in `plan`.
Result<SplitSolution> SolveSplitAndSchemes(const Graph& graph, const std::vector<LayerFigures>& layers,
                                           const PlanOptions& options, Plan* plan) {
  const int n = plan->cluster.size();
  const bool use_cbc = options.solver.empty() || options.solver == "cbc";
  if (!use_cbc && options.solver != "exact")
    return Status::InvalidArgument("--solver " + options.solver + " is not available for --objective " +
                                   ObjectiveName(options.objective) + "; use cbc or exact");
  const auto start = std::chrono::steady_clock::now();

  SplitSolution s;
  if (use_cbc) {
    TS_ASSIGN_OR_RETURN(s.split, SolveMemorySplitIlp(layers, n));
  } else {
    s.split = SolveMemorySplitExact(layers, n);
  }
  plan->sub_solvers.push_back(s.split.solver);
  plan->switch_layer = s.split.switch_layer;
  plan->footprint_single_bytes = SingleDeviceFootprint(layers) * kFloatBytes;
  plan->footprint_per_device_bytes = s.split.footprint * kFloatBytes;

  s.chain = WeightPartitionedChain(graph, layers, s.split.switch_layer);
  if (use_cbc) {
    TS_ASSIGN_OR_RETURN(s.owp, SolveOwpIlp(s.chain, n));
  } else {
    s.owp = SolveOwpDp(s.chain, n);
  }
  plan->sub_solvers.push_back(s.owp.solver);
  plan->communication_all_fdto_values =
      OwpCommunication(s.chain, std::vector<FdtScheme>(s.chain.size(), FdtScheme::kFanOut), n);
  plan->communication_plan_values = s.owp.values;

  const SolverReport& main = options.objective == Objective::kMemory ? s.split.solver : s.owp.solver;
  plan->solver.name = use_cbc ? "cbc" : main.name;
  plan->solver.optimal = s.split.solver.optimal && s.owp.solver.optimal;
  plan->solver.nodes = s.split.solver.nodes + s.owp.solver.nodes;
  plan->solver.seconds = Seconds(start);
  return s;
}

// Relative size of each device's FFMT row tile and OWP channel slice.
struct SplitCapacities {
  std::vector<double> tile, slice;
};

// Capacities for unequal devices: memory objective by RAM (tiles) and by
// where weights live (slices: a Linux worker holds them in RAM, an MCU in
// flash), otherwise by MAC rate. An unlimited device counts as large as the
// largest limited one (not as 1 byte against the others' millions).
SplitCapacities CapacitiesFor(const Cluster& c, Objective objective) {
  const int n = c.size();
  SplitCapacities cap{std::vector<double>(n), std::vector<double>(n)};
  auto bounded = [&](const std::vector<int64_t>& bytes, std::vector<double>* out) {
    int64_t largest = 0;
    for (int64_t b : bytes)
      if (b != kUnlimitedBytes) largest = std::max(largest, b);
    for (int i = 0; i < n; ++i)
      (*out)[i] = bytes[i] != kUnlimitedBytes ? static_cast<double>(bytes[i]) : largest > 0 ? largest : 1.0;
  };
  if (objective == Objective::kMemory) {
    std::vector<int64_t> ram(n), weights(n);
    for (int i = 0; i < n; ++i) {
      const Device& d = c.devices[i];
      ram[i] = d.ram_bytes;
      weights[i] = d.kind == DeviceKind::kLinux ? std::min(d.ram_bytes, d.flash_bytes) : d.flash_bytes;
    }
    bounded(ram, &cap.tile);
    bounded(weights, &cap.slice);
  } else {
    for (int i = 0; i < n; ++i) cap.tile[i] = cap.slice[i] = c.devices[i].macs_per_s;
  }
  if (c.Homogeneous()) {
    std::fill(cap.tile.begin(), cap.tile.end(), 1.0);
    std::fill(cap.slice.begin(), cap.slice.end(), 1.0);
  }
  return cap;
}

// Position in the OWP chain of each layer index; -1 for layers not in it.
std::vector<int> ChainPositions(const std::vector<OwpLayer>& chain, size_t layer_count) {
  std::vector<int> chain_pos(layer_count + 2, -1);
  for (size_t k = 0; k < chain.size(); ++k) chain_pos[chain[k].index] = static_cast<int>(k);
  return chain_pos;
}

// Layers carried per slice between linked weight layers (PART), by layer index.
std::vector<char> PartLayers(const std::vector<OwpLayer>& chain, size_t layer_count) {
  std::vector<char> part(layer_count + 2, 0);
  for (size_t k = 0; k + 1 < chain.size(); ++k)
    if (chain[k].linked_to_next)
      for (int idx = chain[k].index + 1; idx < chain[k + 1].index; ++idx) part[idx] = 1;
  return part;
}

// One layer's part on each device: of its MACs (share), of its input and
// output buffers, of its weights; and the values it moves between devices.
struct LayerShares {
  std::vector<double> share, in_share, out_share, w_share;
  // Measured time of device i's part over `share` of the layer's time
  // (LayerFigures::TileTimeFactor; 1 = in proportion).
  std::vector<double> time_factor;
  // The layer's transfers in its two steps: `before` its compute (inputs
  // scattered, halos fetched, whole inputs broadcast) and `after` it (outputs
  // gathered, partial sums merged, slices exchanged for reuse in place).
  Traffic before, after;
  explicit LayerShares(int n)
      : share(n, 0.0), in_share(n, 0.0), out_share(n, 0.0), w_share(n, 0.0), time_factor(n, 1.0), before(n), after(n) {}
};

// Bytes a value of layer f's activation inputs (on average over them) and
// of its output takes on a link: 1 on an 8-bit grid, else 4 (ValueWireBytes).
double InputWireBytes(const Graph& graph, const LayerFigures& f) {
  double values = 0, bytes = 0;
  for (int v : graph.ActivationInputs(graph.nodes[f.node])) {
    const double n = static_cast<double>(NumElements(graph.values[v].shape));
    values += n;
    bytes += n * static_cast<double>(ValueWireBytes(graph, v));
  }
  return values > 0 ? bytes / values : 4.0;
}
double OutputWireBytes(const Graph& graph, const LayerFigures& f) {
  const Node& node = graph.nodes[f.node];
  return node.outputs.empty() ? 4.0 : static_cast<double>(ValueWireBytes(graph, node.outputs[0]));
}

// FFMT: n×1 grid of row stripes of the output. The first layer of a fused
// stack receives its input tiles from device 0; the last one gathers its
// output tiles there. An input broadcast over space (an SE gate,
// TileRule::whole_input) goes whole from device 0 to every tile's device.
LayerShares PlanFfmtLayer(const Graph& graph, const LayerFigures& f, const std::vector<double>& tile_capacity,
                          bool stack_starts, bool stack_ends, PlannedLayer* a) {
  const int n = static_cast<int>(tile_capacity.size());
  // Traffic in bytes: the input's and output's values at their wire width.
  double M = static_cast<double>(f.M) * InputWireBytes(graph, f);
  const double K = static_cast<double>(f.K) * OutputWireBytes(graph, f);
  double broadcast = 0;  // bytes every tile needs whole
  if (auto rule = TileRuleOf(graph, f.node); rule.ok()) {
    const auto acts = graph.ActivationInputs(graph.nodes[f.node]);
    for (size_t k = 0; k < acts.size() && k < rule->whole_input.size(); ++k)
      if (rule->whole_input[k])
        broadcast += static_cast<double>(NumElements(graph.values[acts[k]].shape) * ValueWireBytes(graph, acts[k]));
  }
  M -= broadcast;
  LayerShares shares(n);
  const int64_t rows = f.output_shape[2];
  const int64_t h_in = (!f.input_shapes.empty() && f.input_shapes[0].size() == 4) ? f.input_shapes[0][2] : rows;
  std::vector<double> cap = tile_capacity;
  std::vector<int64_t> r = SplitProportional(rows, cap);
  a->scheme = "ffmt";
  a->split_axis = "rows";
  for (int i = 0; i < n; ++i)
    if (r[i] > 0) {
      a->devices.push_back(i);
      a->split.push_back(r[i]);
    }
  a->grid = {static_cast<int64_t>(a->devices.size()), 1};
  for (int i = 0; i < n; ++i) {
    if (r[i] == 0) continue;
    const int64_t rin = InputRowsForTile(graph, f, r[i]);
    shares.out_share[i] = static_cast<double>(r[i]) / rows;
    shares.in_share[i] = static_cast<double>(rin) / std::max<int64_t>(h_in, 1);
    shares.share[i] = shares.out_share[i];
    shares.w_share[i] = 1.0;  // every tile needs all the weights
  }
  if (stack_starts)  // the stack's input tiles come from device 0
    for (int i = 1; i < n; ++i) shares.before.Move(0, i, M * shares.in_share[i]);
  for (int i = 1; i < n; ++i)
    if (r[i] > 0) shares.before.Move(0, i, broadcast);
  if (stack_ends)  // gather the output tiles on device 0
    for (int i = 1; i < n; ++i) shares.after.Move(i, 0, K * shares.out_share[i]);
  return shares;
}

// Fan-out (fdto, fdt1): each device reads the whole input and writes its
// output channels. `r_prev`: the previous layer already left the input on
// every device; `r`: the next layer reuses the slices in place.
// `in_width`, `out_width`: bytes a value of the input / output takes on a link.
void FillFanOutShares(const LayerFigures& f, FdtScheme x, bool r_prev, bool r, double in_width, double out_width,
                      LayerShares* shares) {
  const int n = static_cast<int>(shares->share.size());
  const double M = static_cast<double>(f.M) * in_width, K = static_cast<double>(f.K) * out_width;
  const std::vector<double>& share = shares->share;
  for (int i = 0; i < n; ++i) {
    shares->in_share[i] = share[i] > 0 ? 1.0 : 0.0;
    shares->out_share[i] = share[i];
  }
  if (!r_prev)
    for (int i = 1; i < n; ++i)
      if (share[i] > 0) shares->before.Move(0, i, M);  // distribute the whole input
  if (x == FdtScheme::kFanOut) {
    for (int i = 0; i < n; ++i) {
      if (share[i] == 0) continue;
      if (r) {  // share my slice with every peer (in-place reuse by l+1)
        for (int h = 0; h < n; ++h)
          if (h != i && share[h] > 0) shares->after.Move(i, h, K * share[i]);
      } else {
        shares->after.Move(i, 0, K * share[i]);  // back to the source for concatenation
      }
    }
  }
}

// Fan-in (fdti, fdt2): input slices out, full-size partial sums back. A
// grouped Conv (OwpLayer::grouped) ends with its groups' outputs complete on
// each device: output slices, gathered by whoever reads the whole map next.
// Partial sums are float32 (4 bytes a value); a grouped Conv's output slices
// travel at `out_width`.
void FillFanInShares(const LayerFigures& f, FdtScheme x, bool grouped, double in_width, double out_width,
                     LayerShares* shares) {
  const int n = static_cast<int>(shares->share.size());
  const double M = static_cast<double>(f.M) * in_width, K = static_cast<double>(f.K) * (grouped ? out_width : 4.0);
  const std::vector<double>& share = shares->share;
  for (int i = 0; i < n; ++i) {
    shares->in_share[i] = share[i];
    shares->out_share[i] = grouped ? share[i] : (share[i] > 0 ? 1.0 : 0.0);
  }
  if (x == FdtScheme::kFanIn)
    for (int i = 1; i < n; ++i) shares->before.Move(0, i, M * share[i]);
  for (int i = 1; i < n; ++i)
    if (share[i] > 0) shares->after.Move(i, 0, grouped ? K * share[i] : K);
}

// Channels per unit of layer k's split (op_traits.h): whole groups of a
// grouped Conv; the first of a pair also keeps its partner's input groups whole.
int64_t SplitGranule(const Graph& graph, const std::vector<OwpLayer>& chain, const OwpPlan& owp, int k) {
  const Node& node = graph.nodes[chain[k].index - 1];
  const FdtScheme x = owp.schemes[k];
  if (x == FdtScheme::kFanIn || x == FdtScheme::kPairSecond) return InputSplitGranule(graph, node);
  int64_t g = OutputSplitGranule(graph, node);
  if (x == FdtScheme::kPairFirst && k + 1 < static_cast<int>(chain.size()))
    g = std::lcm(g, InputSplitGranule(graph, graph.nodes[chain[k + 1].index - 1]));
  return g;
}

// Weight layer `k` of the OWP chain: channel slices per its FDT scheme.
// Sets `previous_slice` to the channel split the PART layers after it carry.
LayerShares PlanFdtLayer(const Graph& graph, const LayerFigures& f, const SplitSolution& solution, int k,
                         const std::vector<double>& slice_capacity, PlannedLayer* a,
                         std::vector<int64_t>* previous_slice) {
  const int n = static_cast<int>(slice_capacity.size());
  const std::vector<OwpLayer>& chain = solution.chain;
  const OwpPlan& owp = solution.owp;
  LayerShares shares(n);
  const FdtScheme x = owp.schemes[k];
  a->scheme = FdtSchemeName(x);
  const bool fan_out = x == FdtScheme::kFanOut || x == FdtScheme::kPairFirst;
  const int64_t channels = fan_out ? Channels(f.output_shape)
                                   : (f.input_shapes.empty() ? 1 : Channels(f.input_shapes[0]));
  std::vector<int64_t> s = SplitChannels(channels, SplitGranule(graph, chain, owp, k), slice_capacity);
  // The second of a pair reads the slices the first left in place.
  if (x == FdtScheme::kPairSecond && static_cast<int>(previous_slice->size()) == n &&
      std::accumulate(previous_slice->begin(), previous_slice->end(), int64_t{0}) == channels)
    s = *previous_slice;
  a->split_axis = fan_out ? "out_channels" : "in_channels";
  for (int i = 0; i < n; ++i)
    if (s[i] > 0) {
      a->devices.push_back(i);
      a->split.push_back(s[i]);
    }
  for (int i = 0; i < n; ++i) {
    shares.share[i] = static_cast<double>(s[i]) / std::max<int64_t>(channels, 1);
    // Measured slices (tessera plan --tile-profile; 1 = in proportion).
    if (s[i] > 0) shares.time_factor[i] = f.SliceTimeFactor(fan_out, s[i]);
  }
  shares.w_share = shares.share;
  const int prev = k > 0 ? static_cast<int>(owp.schemes[k - 1]) : -1;
  const bool r_prev = k > 0 && chain[k - 1].linked_to_next && prev == static_cast<int>(FdtScheme::kFanOut) &&
                      fan_out;
  const int next = k + 1 < static_cast<int>(chain.size()) ? static_cast<int>(owp.schemes[k + 1]) : -1;
  const bool r = chain[k].linked_to_next && x == FdtScheme::kFanOut &&
                 (next == static_cast<int>(FdtScheme::kFanOut) || next == static_cast<int>(FdtScheme::kPairFirst));
  if (fan_out) {
    FillFanOutShares(f, x, r_prev, r, InputWireBytes(graph, f), OutputWireBytes(graph, f), &shares);
  } else {
    FillFanInShares(f, x, chain[k].grouped, InputWireBytes(graph, f), OutputWireBytes(graph, f), &shares);
  }
  // After a fan-in merge the whole output sits on the source: channel-wise
  // layers that follow run whole there (no slices to carry).
  *previous_slice = fan_out ? s : std::vector<int64_t>{};
  return shares;
}

// PART: a layer between linked weight layers keeps the channel slices of
// the weight layer before it.
LayerShares PlanPartLayer(const LayerFigures& f, const std::vector<int64_t>& previous_slice,
                          const std::vector<double>& slice_capacity, PlannedLayer* a) {
  const int n = static_cast<int>(slice_capacity.size());
  LayerShares shares(n);
  a->scheme = "part";
  a->split_axis = "out_channels";
  std::vector<int64_t> s = previous_slice.empty() ? SplitProportional(Channels(f.output_shape), slice_capacity)
                                                  : previous_slice;
  const double total = std::max<double>(1.0, std::accumulate(s.begin(), s.end(), 0.0));
  for (int i = 0; i < n; ++i) {
    if (s[i] > 0) {
      a->devices.push_back(i);
      a->split.push_back(s[i]);
    }
    shares.share[i] = shares.in_share[i] = shares.out_share[i] = shares.w_share[i] = s[i] / total;
  }
  return shares;
}

LayerShares PlanWholeLayer(int n, PlannedLayer* a) {
  LayerShares shares(n);
  a->scheme = "whole";
  a->devices = {0};
  shares.share[0] = shares.in_share[0] = shares.out_share[0] = shares.w_share[0] = 1.0;
  return shares;
}

// Per-device sums over the layers of a split plan.
struct SplitTotals {
  std::vector<std::vector<int64_t>> buffer_of_layer;  // [layer][device], bytes
  std::vector<double> weights, compute_s, macs;       // [device]
  Traffic traffic;
  std::vector<double> latency_per_layer;
  SplitTotals(int layers, int n)
      : buffer_of_layer(layers, std::vector<int64_t>(n, 0)),
        weights(n, 0),
        compute_s(n, 0),
        macs(n, 0),
        traffic(n),
        latency_per_layer(layers, 0) {}
};

// Time of one step of a layer's transfers (METHODS §4-§5; issue 15). Every device
// has its own full-duplex cable to the switch (a UART has a wire each way):
// what a device sends and what it receives in the same step cross its cable
// at once, so the step takes as long as the busiest cable's larger direction.
// The devices' cables work in parallel (counting every sender in turn
// overcounts devices that exchange slices or halos at once). A gather around
// device 0 is the sum over senders, as all of it crosses device 0's cable.
// A device's network stack works on the step's bytes while they are on the
// wire (Device::net_macs_per_byte): its CPU time hides under the cable's
// time, and the step lasts the longer of the two. (Added to the wire time, a
// CPU at 45 MACs a byte on 2 GMAC/s devices made MobileNetV2's plans at
// 100 Mbit/s predicted 1.3x slower than measured on the emulated cluster.)
double StepTransferSeconds(const Cluster& c, const Traffic& step) {
  const int n = c.size();
  double seconds = 0;
  for (int i = 0; i < n; ++i) {
    const double busiest = std::max(step.sent[i], step.received[i]);
    if (busiest > 0)
      seconds = std::max(seconds,
                         c.TransferSeconds(i, i == 0 ? (n > 1 ? 1 : 0) : 0, static_cast<int64_t>(std::ceil(busiest))));
    seconds = std::max(seconds, c.devices[i].NetworkCpuSeconds(step.sent[i] + step.received[i]));
  }
  return seconds;
}

// Adds layer `l` to the totals; its latency is the slowest device's compute
// plus the time of its two transfer steps (before and after the compute).
// A device's busy time (compute_s: its share of a pipeline's period, its
// load) also counts its network stack's CPU for the layer's bytes.
void AddLayerCosts(const Cluster& c, const LayerFigures& f, int l, const LayerShares& shares, SplitTotals* t) {
  const int n = c.size();
  const double M = static_cast<double>(f.M), K = static_cast<double>(f.K), Q = static_cast<double>(f.Q);
  double slowest = 0;
  for (int i = 0; i < n; ++i) {
    t->weights[i] += Q * shares.w_share[i];
    const double buf = M * shares.in_share[i] + K * shares.out_share[i];
    t->buffer_of_layer[l][i] = static_cast<int64_t>(std::ceil(buf)) * kFloatBytes;
    t->macs[i] += static_cast<double>(f.R) * shares.share[i];
    // Time from the layer's time-MACs: its MACs, or its measured time when
    // profiled; plus the CPU its network stack spends on the layer's bytes
    // (Device::net_macs_per_byte; 0 unless the cluster file declares it).
    const double bytes =
        shares.before.sent[i] + shares.before.received[i] + shares.after.sent[i] + shares.after.received[i];
    const double seconds =
        f.TimeMacs() * shares.share[i] * shares.time_factor[i] / c.devices[i].MacsPerSecond(f.RateKind());
    t->compute_s[i] += seconds + c.devices[i].NetworkCpuSeconds(bytes);
    slowest = std::max(slowest, seconds);
  }
  for (const Traffic* phase : {&shares.before, &shares.after})
    for (int i = 0; i < n; ++i) {
      t->traffic.sent[i] += phase->sent[i];
      t->traffic.received[i] += phase->received[i];
    }
  const double transfer_s = StepTransferSeconds(c, shares.before) + StepTransferSeconds(c, shares.after);
  t->latency_per_layer[l] = slowest + transfer_s;
}

// Picks each layer's scheme in model order: FFMT before the switch (fused
// stacks of tileable layers), the OWP scheme for chain layers after it, PART
// between linked weight layers, otherwise whole on device 0.
SplitTotals PlanSplitLayers(const Graph& graph, const std::vector<LayerFigures>& layers,
                            const SplitSolution& solution, const SplitCapacities& capacity, Plan* plan) {
  const Cluster& c = plan->cluster;
  const int n = c.size();
  const int L = static_cast<int>(layers.size());
  const int switch_layer = solution.split.switch_layer;
  const std::vector<int> chain_pos = ChainPositions(solution.chain, layers.size());
  const std::vector<char> part = PartLayers(solution.chain, layers.size());
  SplitTotals totals(L, n);
  std::vector<int64_t> previous_slice;  // the channel split flowing into PART layers
  bool in_ffmt_stack = false;
  for (int l = 0; l < L; ++l) {
    const LayerFigures& f = layers[l];
    PlannedLayer a;
    a.index = f.index;
    a.name = f.name;
    a.op = f.op;
    LayerShares shares(n);
    const bool before_switch = switch_layer == 0 || f.index < switch_layer;
    if (before_switch && SpatiallyTileable(graph, f)) {
      const bool stack_ends = l + 1 == L || !(switch_layer == 0 || layers[l + 1].index < switch_layer) ||
                              !SpatiallyTileable(graph, layers[l + 1]);
      shares = PlanFfmtLayer(graph, f, capacity.tile, !in_ffmt_stack, stack_ends, &a);
      in_ffmt_stack = !stack_ends;
    } else if (!before_switch && chain_pos[f.index] >= 0) {
      shares = PlanFdtLayer(graph, f, solution, chain_pos[f.index], capacity.slice, &a, &previous_slice);
    } else if (!before_switch && part[f.index] && !previous_slice.empty()) {
      shares = PlanPartLayer(f, previous_slice, capacity.slice, &a);
    } else {
      shares = PlanWholeLayer(n, &a);
      in_ffmt_stack = false;
    }
    AddLayerCosts(c, f, l, shares, &totals);
    plan->layers.push_back(std::move(a));
  }
  return totals;
}

// Device loads, largest footprint, latency and throughput from the totals.
void FillSplitLoads(const SplitTotals& t, Plan* plan) {
  const int n = plan->cluster.size();
  const int L = static_cast<int>(t.buffer_of_layer.size());
  const double total_macs = std::max<double>(1.0, static_cast<double>(plan->model_macs));
  plan->loads.assign(n, DeviceLoad{});
  for (int i = 0; i < n; ++i) {
    DeviceLoad& d = plan->loads[i];
    d.weight_bytes = static_cast<int64_t>(std::ceil(t.weights[i])) * kFloatBytes;
    for (int l = 0; l < L; ++l) d.peak_buffer_bytes = std::max(d.peak_buffer_bytes, t.buffer_of_layer[l][i]);
    d.compute_s = t.compute_s[i];
    d.compute_share = t.macs[i] / total_macs;
    d.sent_bytes = static_cast<int64_t>(std::ceil(t.traffic.sent[i]));
    d.received_bytes = static_cast<int64_t>(std::ceil(t.traffic.received[i]));
    plan->footprint_plan_bytes = std::max(plan->footprint_plan_bytes, d.weight_bytes + d.peak_buffer_bytes);
  }
  plan->latency_s = std::accumulate(t.latency_per_layer.begin(), t.latency_per_layer.end(), 0.0);
  // Every device takes part in every layer: one inference at a time.
  plan->throughput_per_s = plan->latency_s > 0 ? 1.0 / plan->latency_s : 0.0;
}

// METHODS §3 + §4: FFMT before the switch, OWP after it.
Status BuildSplitPlan(const Graph& graph, const std::vector<LayerFigures>& layers, const PlanOptions& options,
                      Plan* plan) {
  TS_ASSIGN_OR_RETURN(const SplitSolution solution, SolveSplitAndSchemes(graph, layers, options, plan));
  const SplitCapacities capacity = CapacitiesFor(plan->cluster, options.objective);
  const SplitTotals totals = PlanSplitLayers(graph, layers, solution, capacity, plan);
  FillSplitLoads(totals, plan);
  return CheckDeviceMemory(*plan, layers, totals.buffer_of_layer);
}

// Where a value lives in a tiled plan, as the compiler tracks it
// (program_compiler.h): its primary pieces (rows per device: one device's
// whole value, or a row tile on each device) and, per device, the row
// ranges it holds (its own rows plus the replicas it fetched before).
struct TiledValue {
  std::vector<std::pair<int, Range1D>> primary;
  std::vector<std::vector<Range1D>> held;
};

// The input rows device i's output rows `out` of layer f read from its
// activation input of `in_rows` rows (the halo of METHODS §2), clipped to it.
Range1D TileInputRows(const TileRule& rule, const LayerFigures& f, int64_t in_rows, Range1D out) {
  Range1D in = out;
  const int64_t out_rows = f.output_shape[2];
  if (rule.window) {
    in = InputRangeOf(rule.w, 0, out);
  } else if (in_rows != out_rows && out_rows > 0) {
    in = {out.begin * in_rows / out_rows, (out.end * in_rows + out_rows - 1) / out_rows};
  }
  return {std::clamp<int64_t>(in.begin, 0, in_rows), std::clamp<int64_t>(in.end, 0, in_rows)};
}

int64_t Overlap(Range1D a, Range1D b) {
  return std::max<int64_t>(0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
}

// FFMT with halo exchange (METHODS §2, issue 15): every layer a stack may
// hold is cut into row tiles over all devices (sized by MAC rate), each
// layer a stack of its own (LayerAssignment::stack_start). A tile's input
// is its device's own rows of the layer before plus the halo rows its
// neighbours computed, sent device to device: no MAC is recomputed and only
// halos cross the cables, at the price of every device holding all the
// weights of those layers. Layers no stack may hold run whole on device 0,
// which gathers the tiles they read; the tiles of the next stack leave from
// there. Model inputs arrive on device 0, outputs are gathered there. The
// traffic follows the compiler's Fetch exactly (a region a device already
// holds is not sent again), so the bytes this plan promises are the bytes
// its programs send.
Status BuildTiledPlan(const Graph& graph, const std::vector<LayerFigures>& layers, const PlanOptions& options,
                      Plan* plan) {
  const auto start = std::chrono::steady_clock::now();
  const Cluster& c = plan->cluster;
  const int n = c.size();
  const int L = static_cast<int>(layers.size());
  const SplitCapacities capacity = CapacitiesFor(c, options.objective);
  SplitTotals totals(L, n);
  std::vector<TiledValue> where(graph.values.size());
  auto rows_of = [&](int v) {
    const Shape& s = graph.values[v].shape;
    return s.size() == 4 ? s[2] : int64_t{1};
  };
  auto row_bytes = [&](int v) {
    return static_cast<double>(NumElements(graph.values[v].shape) / std::max<int64_t>(rows_of(v), 1) *
                               ValueWireBytes(graph, v));
  };
  auto place_whole = [&](int v, int device) {
    where[v].primary = {{device, Range1D{0, rows_of(v)}}};
    where[v].held.assign(n, {});
    where[v].held[device].push_back({0, rows_of(v)});
  };
  // Rows `need` of value v on device i (program_compiler.cc Fetch).
  auto fetch = [&](int v, int i, Range1D need, Traffic* traffic) {
    TiledValue& w = where[v];
    for (const Range1D& h : w.held[i])
      if (h.begin <= need.begin && need.end <= h.end) return;
    for (const auto& [j, rows] : w.primary)
      if (j != i) traffic->Move(j, i, Overlap(need, rows) * row_bytes(v));
    w.held[i].push_back(need);
  };
  for (int v : graph.inputs) place_whole(v, 0);
  bool tiled_any = false;
  for (int l = 0; l < L; ++l) {
    const LayerFigures& f = layers[l];
    const Node& node = graph.nodes[f.node];
    PlannedLayer a;
    a.index = f.index;
    a.name = f.name;
    a.op = f.op;
    LayerShares shares(n);
    const auto acts = graph.ActivationInputs(node);
    if (SpatiallyTileable(graph, f)) {
      tiled_any = true;
      TS_ASSIGN_OR_RETURN(const TileRule rule, TileRuleOf(graph, f.node));
      const int64_t rows = f.output_shape[2];
      const std::vector<int64_t> r = SplitProportional(rows, capacity.tile);
      std::vector<Range1D> out(n);
      int64_t row = 0;
      for (int i = 0; i < n; ++i) {
        out[i] = {row, row + r[i]};
        row += r[i];
      }
      a.scheme = "ffmt";
      a.split_axis = "rows";
      a.stack_start = true;
      for (int i = 0; i < n; ++i)
        if (r[i] > 0) {
          a.devices.push_back(i);
          a.split.push_back(r[i]);
        }
      a.grid = {static_cast<int64_t>(a.devices.size()), 1};
      for (int i = 0; i < n; ++i) {
        if (r[i] == 0) continue;
        for (size_t k = 0; k < acts.size(); ++k) {
          const int v = acts[k];
          const bool whole = (k < rule.whole_input.size() && rule.whole_input[k]) || graph.values[v].shape.size() != 4;
          const Range1D need = whole ? Range1D{0, rows_of(v)} : TileInputRows(rule, f, rows_of(v), out[i]);
          if (k == 0) shares.in_share[i] = static_cast<double>(need.size()) / std::max<int64_t>(rows_of(v), 1);
          fetch(v, i, need, &shares.before);
        }
        shares.out_share[i] = shares.share[i] = static_cast<double>(r[i]) / rows;
        shares.time_factor[i] = f.TileTimeFactor(r[i]);  // measured tiles (tessera plan --tile-profile)
        shares.w_share[i] = 1.0;                         // every tile needs all the weights
      }
      for (int y : node.outputs) {
        where[y].primary.clear();
        where[y].held.assign(n, {});
        for (int i = 0; i < n; ++i)
          if (r[i] > 0) {
            where[y].primary.push_back({i, out[i]});
            where[y].held[i].push_back(out[i]);
          }
      }
    } else {
      shares = PlanWholeLayer(n, &a);
      for (int v : acts) fetch(v, 0, {0, rows_of(v)}, &shares.before);
      for (int y : node.outputs) place_whole(y, 0);
    }
    // The model's outputs are collected on device 0.
    for (int y : node.outputs)
      if (std::find(graph.outputs.begin(), graph.outputs.end(), y) != graph.outputs.end())
        fetch(y, 0, {0, rows_of(y)}, &shares.after);
    AddLayerCosts(c, f, l, shares, &totals);
    plan->layers.push_back(std::move(a));
  }
  if (!tiled_any) return Status::NotFound("no layer of the model can be cut into row tiles");
  FillSplitLoads(totals, plan);
  const MemorySplit split = SolveMemorySplitExact(layers, n);
  plan->footprint_single_bytes = SingleDeviceFootprint(layers) * kFloatBytes;
  plan->footprint_per_device_bytes = split.footprint * kFloatBytes;
  double sent = 0;
  for (const DeviceLoad& d : plan->loads) sent += static_cast<double>(d.sent_bytes);
  plan->communication_plan_values = sent / kFloatBytes;
  plan->solver = SolverReport("tiled", false, Seconds(start), L);
  plan->sub_solvers.push_back(plan->solver);
  return CheckDeviceMemory(*plan, layers, totals.buffer_of_layer);
}

// METHODS §5: whole layers pipelined across devices.
Status BuildPipelinePlan(const Graph& graph, const std::vector<LayerFigures>& layers, const PlanOptions& options,
                         Plan* plan) {
  const Cluster& c = plan->cluster;
  const PlacementObjective objective =
      options.objective == Objective::kLatency ? PlacementObjective::kLatency : PlacementObjective::kThroughput;
  PlacementProblem problem = MakePlacementProblem(graph, layers, c);
  problem.source = 0;  // ToPartitionPlan: device 0 takes the inputs and returns the outputs
  PlacementResult result;
  const std::string& s = options.solver;
  if (s.empty() || s == "exact") {
    TS_ASSIGN_OR_RETURN(result, PlaceLayers(problem, objective));
  } else if (s == "dp") {
    if (objective != PlacementObjective::kLatency)
      return Status::InvalidArgument("--solver dp solves --objective latency only; use bnb for throughput");
    TS_ASSIGN_OR_RETURN(result, PlaceLatencyDp(problem));
    if (!result.cost.feasible)
      return Status::ResourceExhausted("the DP's placement breaks a flash limit (" + result.cost.infeasible_reason +
                                       "); use --solver bnb");
  } else if (s == "bnb") {
    auto seed = PlaceBisection(problem, objective);
    TS_ASSIGN_OR_RETURN(result, PlaceBranchAndBound(problem, objective, seed.ok() ? &seed.value() : nullptr));
  } else if (s == "exhaustive") {
    TS_ASSIGN_OR_RETURN(result, PlaceExhaustive(problem, objective));
  } else if (s == "bisection") {
    TS_ASSIGN_OR_RETURN(result, PlaceBisection(problem, objective));
  } else if (s == "ga" || s == "genetic") {
    TS_ASSIGN_OR_RETURN(result, PlaceGenetic(problem, objective));
  } else if (s == "pipeline") {
    if (objective != PlacementObjective::kThroughput)
      return Status::InvalidArgument("--solver pipeline solves --objective throughput only; use dp for latency");
    TS_ASSIGN_OR_RETURN(result, PlacePipeline(problem));
  } else {
    return Status::InvalidArgument("--solver " + s + " is not available for --objective " +
                                   ObjectiveName(options.objective) +
                                   "; use exact, dp, pipeline, bnb, exhaustive, bisection or ga");
  }
  plan->solver = result.solver;
  plan->sub_solvers.push_back(result.solver);
  const PlacementCost& cost = result.cost;
  for (size_t l = 0; l < layers.size(); ++l) {
    PlannedLayer a;
    a.index = layers[l].index;
    a.name = layers[l].name;
    a.op = layers[l].op;
    a.scheme = "whole";
    a.devices = {result.device_of_layer[l]};
    plan->layers.push_back(std::move(a));
  }
  const double total_macs = std::max<double>(1.0, static_cast<double>(plan->model_macs));
  std::vector<double> macs_on(c.size(), 0.0);  // per kind rates: time no longer says how many MACs
  for (size_t l = 0; l < layers.size(); ++l) macs_on[result.device_of_layer[l]] += static_cast<double>(layers[l].R);
  plan->loads.assign(c.size(), DeviceLoad{});
  double sent = 0;
  for (int i = 0; i < c.size(); ++i) {
    DeviceLoad& d = plan->loads[i];
    d.weight_bytes = cost.weight_bytes[i];
    d.peak_buffer_bytes = cost.peak_buffer_bytes[i];
    d.compute_s = cost.compute_s[i];
    d.compute_share = macs_on[i] / total_macs;
    d.sent_bytes = cost.sent_bytes[i];
    d.received_bytes = cost.received_bytes[i];
    sent += static_cast<double>(cost.sent_bytes[i]);
    plan->footprint_plan_bytes = std::max(plan->footprint_plan_bytes, d.weight_bytes + d.peak_buffer_bytes);
  }
  plan->latency_s = cost.latency_s;
  plan->throughput_per_s = cost.period_s > 0 ? 1.0 / cost.period_s : 0.0;
  plan->period_s = cost.period_s;
  plan->bottleneck_device = cost.bottleneck;
  for (int i = 0; i < c.size(); ++i) plan->loads[i].send_s = cost.send_s[i];
  plan->communication_plan_values = sent / kFloatBytes;
  // For reference: §3 on this cluster size (exact path, fast).
  const MemorySplit split = SolveMemorySplitExact(layers, c.size());
  plan->footprint_single_bytes = SingleDeviceFootprint(layers) * kFloatBytes;
  plan->footprint_per_device_bytes = static_cast<double>(plan->footprint_plan_bytes);
  const auto chain = WeightPartitionedChain(graph, layers, split.switch_layer);
  plan->communication_all_fdto_values =
      OwpCommunication(chain, std::vector<FdtScheme>(chain.size(), FdtScheme::kFanOut), c.size());
  if (!cost.feasible) return Status::ResourceExhausted(cost.infeasible_reason);
  return Status::OK();
}

// "0.812 s predicted, 1.23 /s".
std::string FormatPrediction(const Plan& p) {
  char text[96];
  std::snprintf(text, sizeof text, "%.3f s predicted, %.3f /s", p.latency_s, p.throughput_per_s);
  return text;
}

}  // namespace

const char* ObjectiveName(Objective objective) {
  switch (objective) {
    case Objective::kMemory: return "memory";
    case Objective::kCommunication: return "communication";
    case Objective::kLatency: return "latency";
    case Objective::kThroughput: return "throughput";
  }
  return "?";
}

double ObjectiveCost(const Plan& plan) {
  switch (plan.objective) {
    case Objective::kMemory:
      return static_cast<double>(plan.footprint_plan_bytes);
    case Objective::kCommunication:
      return plan.communication_plan_values;
    case Objective::kLatency:
      return plan.latency_s;
    case Objective::kThroughput:
      return plan.throughput_per_s > 0 ? 1.0 / plan.throughput_per_s : std::numeric_limits<double>::infinity();
  }
  return std::numeric_limits<double>::infinity();
}

Result<Objective> ParseObjective(const std::string& text) {
  for (Objective o : {Objective::kMemory, Objective::kCommunication, Objective::kLatency, Objective::kThroughput})
    if (text == ObjectiveName(o)) return o;
  return Status::InvalidArgument("unknown objective '" + text + "'; use memory, communication, latency or throughput");
}

// SplitProportional lives in partition/graph/halo.h (one definition for planner and compiler).

Result<Plan> BuildPlan(const Graph& graph, const std::vector<LayerFigures>& layers, const Cluster& cluster,
                       const PlanOptions& options) {
  if (cluster.size() == 0) return Status::InvalidArgument("the cluster has no devices");
  Plan plan;
  plan.cluster = cluster;
  plan.objective = options.objective;
  FillModelTotals(graph, layers, &plan);
  if (options.objective == Objective::kMemory || options.objective == Objective::kCommunication) {
    TS_RETURN_IF_ERROR(BuildSplitPlan(graph, layers, options, &plan));
    return plan;
  }
  if (options.solver == "tiled") {  // the tiled plan alone, whatever it predicts against the others
    TS_RETURN_IF_ERROR(BuildTiledPlan(graph, layers, options, &plan));
    plan.choice = "tiled plan (FFMT, halo exchange, METHODS §2), as --solver tiled asks: " + FormatPrediction(plan);
    return plan;
  }
  const Status pipeline = BuildPipelinePlan(graph, layers, options, &plan);
  // An explicit --solver asks for layer assignment (METHODS §5) itself.
  if (!options.solver.empty() || cluster.size() < 2) {
    TS_RETURN_IF_ERROR(pipeline);
    return plan;
  }
  // Layer assignment runs each layer of a request on one device; the split
  // plans (§3 FFMT tiles, §4 FDT slices) run every layer on every device at
  // once. For latency and throughput the plan is the one the model predicts
  // best (issue 15: YOLOv2 on 4 devices must beat one device by 2.5x).
  auto better = [&](const Plan& a, const Plan& b) {  // a strictly better than b
    return options.objective == Objective::kLatency ? a.latency_s < b.latency_s * (1 - 1e-9)
                                                    : a.throughput_per_s > b.throughput_per_s * (1 + 1e-9);
  };
  const bool have_pipeline = pipeline.ok();
  std::string choice = have_pipeline ? "layer assignment (METHODS §5): " + FormatPrediction(plan) : "";
  bool split_won = false;
  for (Objective split : {Objective::kMemory, Objective::kCommunication}) {
    PlanOptions o = options;
    o.objective = split;
    Plan candidate;
    candidate.cluster = cluster;
    FillModelTotals(graph, layers, &candidate);
    if (!BuildSplitPlan(graph, layers, o, &candidate).ok()) continue;
    const std::string what =
        std::string("split plan (") + ObjectiveName(split) + " ILP, METHODS §3-§4): " + FormatPrediction(candidate);
    if ((!have_pipeline && !split_won) || better(candidate, plan)) {
      candidate.objective = options.objective;
      choice = what + (choice.empty() ? "" : "; beats " + choice);
      plan = std::move(candidate);
      split_won = true;
    }
  }
  {
    Plan candidate;
    candidate.cluster = cluster;
    FillModelTotals(graph, layers, &candidate);
    if (BuildTiledPlan(graph, layers, options, &candidate).ok()) {
      const std::string what = "tiled plan (FFMT, halo exchange, METHODS §2): " + FormatPrediction(candidate);
      if ((!have_pipeline && !split_won) || better(candidate, plan)) {
        candidate.objective = options.objective;
        choice = what + (choice.empty() ? "" : "; beats " + choice);
        plan = std::move(candidate);
        split_won = true;
      }
    }
  }
  if (!have_pipeline && !split_won) return pipeline;
  plan.choice = choice;
  return plan;
}

PartitionPlan ToPartitionPlan(const Plan& plan) {
  PartitionPlan out;
  out.num_devices = plan.cluster.size();
  out.source = 0;
  for (const PlannedLayer& a : plan.layers) {
    LayerAssignment la;
    if (a.scheme == "ffmt") la.scheme = LayerScheme::kFfmt;
    else if (a.scheme == "fdto") la.scheme = LayerScheme::kFdto;
    else if (a.scheme == "fdti") la.scheme = LayerScheme::kFdti;
    else if (a.scheme == "fdt1") la.scheme = LayerScheme::kFdt1;
    else if (a.scheme == "fdt2") la.scheme = LayerScheme::kFdt2;
    else if (a.scheme == "part") la.scheme = LayerScheme::kPart;
    else la.scheme = LayerScheme::kWhole;
    la.devices = a.devices;
    la.stack_start = la.scheme == LayerScheme::kFfmt && a.stack_start;
    if (la.scheme == LayerScheme::kFfmt && a.devices.size() == 1 && a.split.empty() && a.grid.size() == 2) {
      // One device's tiles in turn (DeviceLoad::tiled_paths): its own grid;
      // split_axis "parts": processed in row bands, overlaps kept.
      la.grid_rows = a.grid[0];
      la.grid_cols = a.grid[1];
      la.parts = a.split_axis == "parts";
    } else if (la.scheme == LayerScheme::kFfmt) {
      la.grid_rows = static_cast<int64_t>(a.devices.size());
      la.grid_cols = 1;
      for (int64_t r : a.split) la.row_weights.push_back(static_cast<double>(r));
    } else if (la.scheme != LayerScheme::kWhole) {
      la.split = a.split;
    }
    out.layers.push_back(std::move(la));
  }
  for (size_t d = 0; d < plan.loads.size(); ++d)
    if (plan.loads[d].compact_weights) out.compact_weights.insert(static_cast<int>(d));
  return out;
}

nlohmann::ordered_json PlanToJson(const Plan& plan) {
  using json = nlohmann::ordered_json;
  json j;
  j["model"] = {{"name", plan.model_name}, {"layers", plan.model_layers}, {"weights", plan.model_weights},
                {"macs", plan.model_macs}};
  j["devices"] = plan.cluster.size();
  j["cluster"] = plan.cluster.origin;
  j["objective"] = ObjectiveName(plan.objective);
  j["switch_layer"] = plan.switch_layer;
  j["footprint_single_bytes"] = static_cast<int64_t>(std::ceil(plan.footprint_single_bytes));
  j["footprint_per_device_bytes"] = static_cast<int64_t>(std::ceil(plan.footprint_per_device_bytes));
  j["footprint_plan_bytes"] = plan.footprint_plan_bytes;
  j["communication"] = {{"all_fdto_values", plan.communication_all_fdto_values},
                        {"plan_values", plan.communication_plan_values},
                        {"plan_bytes", static_cast<int64_t>(std::ceil(plan.communication_plan_values * kFloatBytes))}};
  j["latency_s"] = plan.latency_s;
  j["throughput_per_s"] = plan.throughput_per_s;
  if (plan.request_bytes > 0)
    j["request"] = {{"bytes", plan.request_bytes},
                    {"gateway_link_s", plan.request_s},
                    {"wire_rate_per_s", plan.request_wire_rate_per_s},
                    {"source_network_cpu_s",
                     plan.cluster.devices.empty()
                         ? 0.0
                         : plan.cluster.devices[0].NetworkCpuSeconds(static_cast<double>(plan.request_bytes))},
                    {"source_cpu_s", plan.request_cpu_s}};
  if (!plan.choice.empty()) j["choice"] = plan.choice;
  if (!plan.time_model.empty()) j["time_model"] = plan.time_model;
  if (plan.bottleneck_device >= 0) {
    // Issue 18: the stream's period and the stage that sets it.
    const DeviceLoad& b = plan.loads[plan.bottleneck_device];
    j["pipeline"] = {{"period_s", plan.period_s},
                     {"bottleneck", plan.cluster.devices[plan.bottleneck_device].name},
                     {"bottleneck_compute_s", b.compute_s},
                     {"bottleneck_send_s", b.send_s}};
  }
  j["solver"] = {{"name", plan.solver.name}, {"optimal", plan.solver.optimal}, {"seconds", plan.solver.seconds},
                 {"nodes", plan.solver.nodes}};
  // The objective no plan in the searched space beats, and which space
  // `optimal` speaks of; `bound_any` holds for every whole-layer assignment.
  if (plan.solver.bound > 0) j["solver"]["bound"] = plan.solver.bound;
  if (!plan.solver.optimal_among.empty()) j["solver"]["optimal_among"] = plan.solver.optimal_among;
  if (!plan.solver.settings.empty()) j["solver"]["settings"] = plan.solver.settings;
  if (plan.solver.bound_any > 0) j["solver"]["bound_any"] = plan.solver.bound_any;
  json subs = json::array();
  for (const auto& s : plan.sub_solvers)
    subs.push_back({{"name", s.name}, {"optimal", s.optimal}, {"seconds", s.seconds}, {"nodes", s.nodes}});
  j["solver"]["steps"] = subs;
  json layers = json::array();
  for (const auto& a : plan.layers) {
    json names = json::array();
    for (int d : a.devices) names.push_back(plan.cluster.devices[d].name);
    json l = {{"index", a.index}, {"name", a.name}, {"op", a.op}, {"scheme", a.scheme}, {"devices", names}};
    if (!a.split.empty()) {
      l["split"] = a.split;
      l["split_axis"] = a.split_axis;
    }
    if (!a.grid.empty()) l["grid"] = a.grid;
    if (a.stack_start) l["stack_start"] = true;
    layers.push_back(l);
  }
  j["layers"] = layers;
  json per_device = json::array();
  for (int i = 0; i < plan.cluster.size(); ++i) {
    const auto& d = plan.loads[i];
    per_device.push_back({{"name", plan.cluster.devices[i].name},
                          {"weight_bytes", d.weight_bytes},
                          {"peak_buffer_bytes", d.peak_buffer_bytes},
                          {"compute_share", d.compute_share},
                          {"compute_s", d.compute_s},
                          {"macs_per_s", plan.cluster.devices[i].macs_per_s},
                          {"sent_bytes", d.sent_bytes},
                          {"received_bytes", d.received_bytes}});
    // Measured per-kind rates (macs_per_s_by_kind) the compute times used.
    json by_kind = json::object();
    for (int k = 1; k < kOpKinds; ++k)
      if (plan.cluster.devices[i].kind_macs_per_s[k] > 0)
        by_kind[OpKindName(static_cast<OpKind>(k))] = plan.cluster.devices[i].kind_macs_per_s[k];
    if (!by_kind.empty()) per_device.back()["macs_per_s_by_kind"] = by_kind;
    if (plan.cluster.devices[i].request_macs > 0)
      per_device.back()["request_macs"] = plan.cluster.devices[i].request_macs;
    if (plan.cluster.devices[i].net_macs_per_byte > 0) {  // compute_s includes the network stack's CPU
      const double bytes = static_cast<double>(d.sent_bytes + d.received_bytes);
      per_device.back()["net_macs_per_byte"] = plan.cluster.devices[i].net_macs_per_byte;
      per_device.back()["network_cpu_s"] = plan.cluster.devices[i].NetworkCpuSeconds(bytes);
    }
    if (d.promised_bytes > 0)
      per_device.back()["worker_ram"] = {{"promised_bytes", d.promised_bytes},
                                         {"weight_bytes", d.promised_weight_bytes},
                                         {"arena_bytes", d.promised_arena_bytes},
                                         {"working_bytes", d.promised_working_bytes},
                                         {"buffer_bytes", d.promised_buffer_bytes},
                                         {"compute_slots", d.compute_slots},
                                         {"io_bytes", d.promised_io_bytes},
                                         {"link_bytes", d.promised_link_bytes},
                                         {"load_peak_bytes", d.promised_load_peak_bytes},
                                         {"baseline_bytes", d.baseline_bytes},
                                         {"in_flight", d.in_flight},
                                         {"compact_weights", d.compact_weights},
                                         {"compact_s", d.compact_s},
                                         {"tiled_paths", d.tiled_paths},
                                         {"tiled_halo_macs", d.tiled_halo_macs},
                                         {"tiled_halo_s", d.tiled_halo_s},
                                         {"parts_layers", d.parts_layers},
                                         {"parts_bands", d.parts_bands},
                                         {"parts_s", d.parts_s},
                                         {"ram_bytes", plan.cluster.devices[i].ram_bytes == kUnlimitedBytes
                                                           ? json(nullptr)
                                                           : json(plan.cluster.devices[i].ram_bytes)}};
  }
  j["device_summary"] = per_device;
  return j;
}

std::string FormatPlanTable(const Plan& plan) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "model %s: %lld layers, %lld weights (%s), %lld MACs; %d devices (%s); objective %s\n",
                plan.model_name.c_str(), static_cast<long long>(plan.model_layers),
                static_cast<long long>(plan.model_weights), FormatBytes(plan.model_weights * 4.0).c_str(),
                static_cast<long long>(plan.model_macs), plan.cluster.size(), plan.cluster.origin.c_str(),
                ObjectiveName(plan.objective));
  out += line;
  std::snprintf(line, sizeof line, "%5s  %-30s %-18s %-6s %s\n", "index", "name", "op", "scheme", "devices (split)");
  out += line;
  for (size_t k = 0; k < plan.layers.size(); ++k) {
    const PlannedLayer& a = plan.layers[k];
    std::string devs;
    for (size_t k = 0; k < a.devices.size(); ++k) {
      devs += (k ? " " : "") + plan.cluster.devices[a.devices[k]].name;
      if (k < a.split.size()) devs += ":" + std::to_string(a.split[k]);
    }
    if (a.devices.size() > 6) {
      devs = "all " + std::to_string(a.devices.size());
      if (!a.split.empty()) {
        const auto [mn, mx] = std::minmax_element(a.split.begin(), a.split.end());
        devs += " (" + std::to_string(*mn) + (*mn == *mx ? "" : ".." + std::to_string(*mx)) + " " + a.split_axis + ")";
      }
    } else if (!a.split_axis.empty()) {
      devs += " " + a.split_axis;
    }
    // A stack of its own after tiles on the same devices: its input's halo
    // rows come from the neighbouring tiles (LayerAssignment::stack_start).
    if (a.stack_start && k > 0 && plan.layers[k - 1].scheme == "ffmt" && plan.layers[k - 1].devices == a.devices)
      devs += ", halo exchange";
    const std::string name = a.name.size() > 30 ? a.name.substr(0, 27) + "..." : a.name;
    std::snprintf(line, sizeof line, "%5d  %-30s %-18s %-6s %s\n", a.index, name.c_str(), a.op.c_str(),
                  a.scheme.c_str(), devs.c_str());
    out += line;
  }
  out += "\n";
  std::snprintf(line, sizeof line, "%-14s %-6s %12s %12s %12s %12s %8s %12s %12s %12s\n", "device", "kind", "weights",
                "peak buffer", "worker RAM", "RAM", "compute", "compute s", "sent", "received");
  out += line;
  bool sized = false;
  for (int i = 0; i < plan.cluster.size(); ++i) {
    const Device& dv = plan.cluster.devices[i];
    const DeviceLoad& d = plan.loads[i];
    sized |= d.promised_bytes > 0;
    std::snprintf(line, sizeof line, "%-14s %-6s %12s %12s %12s %12s %7.1f%% %12.6f %12s %12s\n", dv.name.c_str(),
                  DeviceKindName(dv.kind), FormatBytes(d.weight_bytes).c_str(), FormatBytes(d.peak_buffer_bytes).c_str(),
                  d.promised_bytes > 0 ? FormatBytes(d.promised_bytes).c_str() : "-",
                  dv.ram_bytes == kUnlimitedBytes ? "unlimited" : FormatBytes(dv.ram_bytes).c_str(),
                  d.compute_share * 100, d.compute_s, FormatBytes(d.sent_bytes).c_str(),
                  FormatBytes(d.received_bytes).c_str());
    out += line;
  }
  if (std::any_of(plan.cluster.devices.begin(), plan.cluster.devices.end(),
                  [](const Device& dv) { return dv.kind == DeviceKind::kMcu; }))
    out += "mcu RAM and flash: the board's less the tessera firmware's own (" + FormatBytes(mcu::kFirmwareRamBytes) +
           " RAM with its stack, " + FormatBytes(mcu::kFirmwareFlashBytes) + " flash)\n";
  if (sized) {
    // The promise's parts, for the device that needs the most.
    int worst = 0;
    for (int i = 0; i < plan.cluster.size(); ++i)
      if (plan.loads[i].promised_bytes > plan.loads[worst].promised_bytes) worst = i;
    const DeviceLoad& d = plan.loads[worst];
    const std::string slots = d.compute_slots > 1 ? std::to_string(d.compute_slots) + " x " : "";
    std::snprintf(
        line, sizeof line,
        "worker RAM = worker baseline + max(weights as the kernels store them + %sworking memory + %d x "
        "(pipeline buffers + request I/O) + links to peers, weights while loading); largest: %s: %s = %s + max(%s + "
        "%s%s + %d x (%s + %s) + %s, %s)\n",
        slots.c_str(), d.in_flight, plan.cluster.devices[worst].name.c_str(), FormatBytes(d.promised_bytes).c_str(),
        FormatBytes(d.baseline_bytes).c_str(), FormatBytes(d.promised_weight_bytes).c_str(), slots.c_str(),
        FormatBytes(d.promised_working_bytes).c_str(), d.in_flight, FormatBytes(d.promised_buffer_bytes).c_str(),
        FormatBytes(d.promised_io_bytes).c_str(), FormatBytes(d.promised_link_bytes).c_str(),
        FormatBytes(d.promised_load_peak_bytes).c_str());
    out += line;
    // Per device (issue 18 item 2): the memory its requests take turns in,
    // and what each request in flight holds across its sends and receives.
    out += "working memory (shared by requests) / pipeline buffers (each request in flight):";
    for (int i = 0; i < plan.cluster.size(); ++i) {
      const DeviceLoad& di = plan.loads[i];
      if (di.promised_bytes <= 0) continue;
      out += " " + plan.cluster.devices[i].name + " " + FormatBytes(di.promised_working_bytes) + " / " +
             FormatBytes(di.promised_buffer_bytes) + ";";
    }
    out.back() = '\n';
  }
  std::string compact;
  double compact_s = 0;
  for (int i = 0; i < plan.cluster.size(); ++i)
    if (plan.loads[i].compact_weights) {
      compact += (compact.empty() ? "" : ", ") + plan.cluster.devices[i].name;
      compact_s = std::max(compact_s, plan.loads[i].compact_s);
    }
  if (!compact.empty()) {
    out += "compact weights (no Winograd: raw-size conv weights, slower 3x3 convs) to fit RAM on: " + compact;
    if (compact_s > 0) {
      std::snprintf(line, sizeof line, "; up to +%.3f s a device, in its time and the predicted latency", compact_s);
      out += line;
    } else {
      out += " (their cost is not in the predicted times: plan with --compact-profile to price it)";
    }
    out += "\n";
  }
  for (int i = 0; i < plan.cluster.size(); ++i)
    if (plan.loads[i].tiled_paths > 0) {
      std::snprintf(
          line, sizeof line,
          "%s computes %d stretch(es) of its layers as tiles in turn, in row bands or in channel slices to fit its "
          "RAM (METHODS §6 memory flow; layers marked ffmt on it alone, or fdt1/part/fdt2 naming it once per "
          "slice): %lld MACs recomputed, +%.6f s in its time and the predicted latency\n",
          plan.cluster.devices[i].name.c_str(), plan.loads[i].tiled_paths,
          static_cast<long long>(plan.loads[i].tiled_halo_macs), plan.loads[i].tiled_halo_s);
      out += line;
      if (plan.loads[i].parts_layers > 0) {
        std::snprintf(line, sizeof line,
                      "  of them %d layer(s) in %lld row bands, chosen by the genetic search: +%.6f s (calibrated "
                      "slowdown)\n",
                      plan.loads[i].parts_layers, static_cast<long long>(plan.loads[i].parts_bands),
                      plan.loads[i].parts_s);
        out += line;
      }
    }
  out += "\n";
  std::snprintf(line, sizeof line,
                "switch layer %d; footprint single device %s, per device (METHODS §3) %s, this plan's largest %s\n",
                plan.switch_layer, FormatBytes(plan.footprint_single_bytes).c_str(),
                FormatBytes(plan.footprint_per_device_bytes).c_str(), FormatBytes(plan.footprint_plan_bytes).c_str());
  out += line;
  std::snprintf(line, sizeof line, "communication: all-FDTO %.0f values, this plan %.0f values (%s)\n",
                plan.communication_all_fdto_values, plan.communication_plan_values,
                FormatBytes(plan.communication_plan_values * kFloatBytes).c_str());
  out += line;
  std::snprintf(line, sizeof line, "predicted latency %.6f s, throughput %.3f /s\n", plan.latency_s,
                plan.throughput_per_s);
  out += line;
  if (plan.request_s > 0) {
    std::snprintf(line, sizeof line,
                  "  of which %.6f s is the request's %s in and out over the gateway's link (links.gateway, else "
                  "links.default), which "
                  "carries at most %.3f requests/s\n",
                  plan.request_s, FormatBytes(static_cast<double>(plan.request_bytes)).c_str(),
                  plan.request_wire_rate_per_s);
    out += line;
  }
  if (plan.request_cpu_s > 0 && !plan.cluster.devices.empty()) {
    std::snprintf(line, sizeof line,
                  "the source %s spends %.6f s of CPU on each request (net_macs_per_byte on its %s, request_macs "
                  "%.0f), in its compute s\n",
                  plan.cluster.devices[0].name.c_str(), plan.request_cpu_s,
                  FormatBytes(static_cast<double>(plan.request_bytes)).c_str(), plan.cluster.devices[0].request_macs);
    out += line;
  }
  if (!plan.time_model.empty()) out += "compute times from " + plan.time_model + "\n";
  for (const Device& d : plan.cluster.devices)
    if (d.net_macs_per_byte > 0) {
      out +=
          "compute s includes the network stack's CPU on each device's sent + received bytes (net_macs_per_byte "
          "in the cluster file); in the latency it overlaps the bytes' time on the cable\n";
      break;
    }
  if (!plan.choice.empty()) out += "chosen: " + plan.choice + "\n";
  if (plan.bottleneck_device >= 0) {
    const DeviceLoad& b = plan.loads[plan.bottleneck_device];
    int first = -1, last = -1;
    for (const auto& l : plan.layers)
      if (l.devices.size() == 1 && l.devices[0] == plan.bottleneck_device) {
        if (first < 0) first = l.index;
        last = l.index;
      }
    // The source may run no layer: its stage sends the inputs and takes the outputs.
    const std::string stage = first < 0 ? std::string("no layers: the source's input and output transfers")
                                        : "layers " + std::to_string(first) + "-" + std::to_string(last);
    // Device::StageSeconds: in turn, or the sends on the cable while it computes.
    const bool overlapped = plan.cluster.devices[plan.bottleneck_device].net_macs_per_byte > 0;
    std::snprintf(line, sizeof line, "pipeline period %.6f s; bottleneck stage %s (%s): compute %.6f s%s%.6f s%s\n",
                  plan.period_s, plan.cluster.devices[plan.bottleneck_device].name.c_str(), stage.c_str(), b.compute_s,
                  overlapped ? ", sends " : " + sends ", b.send_s, overlapped ? " on the cable meanwhile" : "");
    out += line;
  }
  std::snprintf(line, sizeof line, "solver %s (%s), %.4f s, %lld nodes\n", plan.solver.name.c_str(),
                plan.solver.optimal ? "optimal" : "not proven optimal", plan.solver.seconds,
                static_cast<long long>(plan.solver.nodes));
  out += line;
  if (!plan.solver.optimal_among.empty()) {
    std::snprintf(line, sizeof line,
                  "  %s among %s; no pipeline has a period below %.6f s, no assignment below %.6f s\n",
                  plan.solver.optimal ? "optimal" : "not proven optimal", plan.solver.optimal_among.c_str(),
                  plan.solver.bound, plan.solver.bound_any);
    out += line;
  }
  if (!plan.solver.settings.empty()) out += "  " + plan.solver.settings + "\n";
  return out;
}

}  // namespace tessera
