#include "planner/placement.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "partition/compile/mcu_program_builder.h"
#include "partition/graph/int8_weights.h"
#include "util/quantity.h"

namespace tessera {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

std::string LayerLabel(const LayerFigures& f) {
  return "layer " + std::to_string(f.index) + " '" + f.name + "' (" + f.op + ")";
}

bool FitsAlone(const PlacementProblem& p, int j, int i) {
  const Device& d = p.cluster->devices[i];
  return p.Runs(i, j) && p.WeightBytes(i, j) <= d.flash_bytes && p.BufferBytes(i, j) <= d.ram_bytes;
}

// Devices that are interchangeable (same memory, speed and links to every
// third device) get the same class; B&B tries only one unused device per class.
std::vector<int> DeviceClasses(const Cluster& c) {
  const int d = c.size();
  std::vector<int> cls(d, -1);
  int next = 0;
  for (int a = 0; a < d; ++a) {
    if (cls[a] >= 0) continue;
    cls[a] = next;
    for (int b = a + 1; b < d; ++b) {
      if (cls[b] >= 0) continue;
      const Device& da = c.devices[a];
      const Device& db = c.devices[b];
      bool same = da.kind == db.kind && da.SameCapacity(db);  // an MCU stores int8 weights in less
      for (int h = 0; same && h < d; ++h) {
        if (h == a || h == b) continue;
        same = c.TransferSeconds(a, h, 1000000) == c.TransferSeconds(b, h, 1000000) &&
               c.TransferSeconds(h, a, 1) == c.TransferSeconds(h, b, 1);
      }
      if (same) cls[b] = next;
    }
    ++next;
  }
  return cls;
}

// DeviceClasses for a problem: the source has a role of its own (it sends
// the model inputs and takes the outputs), so it is never interchangeable.
std::vector<int> ProblemDeviceClasses(const PlacementProblem& p) {
  std::vector<int> cls = DeviceClasses(*p.cluster);
  if (p.source >= 0) {
    bool shared = false;
    for (int i = 0; i < p.cluster->size(); ++i) shared |= i != p.source && cls[i] == cls[p.source];
    if (shared) cls[p.source] = *std::max_element(cls.begin(), cls.end()) + 1;
  }
  return cls;
}

// Fastest compute of each layer on any device that can hold it alone, and
// suffix sums of it (the admissible B&B bound of METHODS §5).
std::vector<double> SuffixFastest(const PlacementProblem& p) {
  const int n = p.layers();
  std::vector<double> suffix(n + 1, 0.0);
  for (int j = n - 1; j >= 0; --j) {
    double best = kInf;
    for (int i = 0; i < p.cluster->size(); ++i)
      if (FitsAlone(p, j, i)) best = std::min(best, p.ComputeSeconds(i, j));
    suffix[j] = suffix[j + 1] + (std::isfinite(best) ? best : 0.0);
  }
  return suffix;
}

}  // namespace

bool PlacementProblem::IsChain() const {
  for (int j = 0; j < layers(); ++j) {
    for (int p : producers[j])
      if (p != j - 1) return false;
    if (j > 0 && source >= 0 && !model_inputs[j].empty()) return false;
  }
  return true;
}

PlacementProblem MakeChainPlacementProblem(const std::vector<LayerFigures>& layers, const Cluster& cluster) {
  PlacementProblem p;
  p.cluster = &cluster;
  for (size_t j = 0; j < layers.size(); ++j) {
    const auto& f = layers[j];
    p.names.push_back(LayerLabel(f));
    p.macs.push_back(std::llround(f.TimeMacs()));  // measured time when profiled (planner/layer_profile.h)
    p.kinds.push_back(f.RateKind());
    p.weight_bytes.push_back(f.Q * 4);
    p.buffer_bytes.push_back((f.M + f.K) * 4);
    p.output_bytes.push_back(f.K * 4);
    p.producers.push_back(j ? std::vector<int>{static_cast<int>(j) - 1} : std::vector<int>{});
    p.model_inputs.push_back(j ? std::vector<std::pair<int, int64_t>>{}
                               : std::vector<std::pair<int, int64_t>>{{0, f.M * 4}});
    p.model_output_bytes.push_back(j + 1 == layers.size() ? f.K * 4 : 0);
  }
  return p;
}

namespace {

// How many bytes fewer than float32 a node's weights take in an MCU
// program (≤ 0): BuildMcuProgram's int8 form of a Conv's or a Gemm's
// (transB = 1) weights, one row per output channel.
int64_t McuWeightSavings(const Graph& graph, const Node& node) {
  if ((node.op != "Conv" && !(node.op == "Gemm" && node.attrs.Int("transB", 1) != 0)) || node.inputs.size() < 2)
    return 0;
  const TensorData* w = graph.ConstantData(node.inputs[1]);
  if (!w || w->shape.empty() || w->shape[0] <= 0) return 0;
  const int64_t n = static_cast<int64_t>(w->values.size()), rows = w->shape[0];
  if (n == 0 || n % rows) return 0;
  return CompactWeightBytes(w->values.data(), rows, n / rows) - 4 * n;
}

}  // namespace

PlacementProblem MakePlacementProblem(const Graph& graph, const std::vector<LayerFigures>& layers,
                                      const Cluster& cluster) {
  PlacementProblem p = MakeChainPlacementProblem(layers, cluster);
  std::vector<int> layer_of_node(graph.nodes.size(), -1);
  for (size_t j = 0; j < layers.size(); ++j) layer_of_node[layers[j].node] = static_cast<int>(j);
  for (size_t j = 0; j < layers.size(); ++j) {
    std::vector<int> prods;
    for (int v : graph.ActivationInputs(graph.nodes[layers[j].node])) {
      const int producer = graph.values[v].producer;
      if (producer < 0 || layer_of_node[producer] < 0) continue;
      if (std::find(prods.begin(), prods.end(), layer_of_node[producer]) == prods.end())
        prods.push_back(layer_of_node[producer]);
    }
    p.producers[j] = prods;
    // Model inputs read and model outputs produced, from the graph itself.
    p.model_inputs[j].clear();
    const Node& node = graph.nodes[layers[j].node];
    for (int v : graph.ActivationInputs(node)) {
      const auto at = std::find(graph.inputs.begin(), graph.inputs.end(), v);
      if (at != graph.inputs.end())
        p.model_inputs[j].push_back({static_cast<int>(at - graph.inputs.begin()), NumElements(graph.values[v].shape) * 4});
    }
    // A QuantizeDequantize's output of an 8-bit grid travels as int8 codes
    // between any two devices (device_program.h WireGrid): 1 B a value.
    p.output_bytes[j] = layers[j].K * (node.outputs.empty() ? 4 : ValueWireBytes(graph, node.outputs[0]));
    p.model_output_bytes[j] = 0;
    for (int v : node.outputs)
      if (std::find(graph.outputs.begin(), graph.outputs.end(), v) != graph.outputs.end())
        p.model_output_bytes[j] += NumElements(graph.values[v].shape) * ValueWireBytes(graph, v);
  }
  const bool mcus = std::any_of(cluster.devices.begin(), cluster.devices.end(),
                                [](const Device& d) { return d.kind == DeviceKind::kMcu; });
  if (mcus) {
    p.mcu_weight_bytes = p.weight_bytes;
    p.mcu_buffer_bytes.assign(layers.size(), 0);
    p.mcu_refusals.assign(layers.size(), "");
    for (size_t j = 0; j < layers.size(); ++j) {
      const Node& node = graph.nodes[layers[j].node];
      p.mcu_weight_bytes[j] += McuWeightSavings(graph, node);
      // int8 activations (mcu_program.h version 5): 1 B a value on an 8-bit
      // grid, as BuildMcuProgram holds them.
      p.mcu_buffer_bytes[j] = McuLayerBufferBytes(graph, node);
      if (Status can = McuCanRun(graph, node); !can.ok()) p.mcu_refusals[j] = can.message();
    }
  }
  return p;
}

namespace {
// A transfer's time in the latency of one inference: its wire time `wire_s`,
// or the sender's or the receiver's network-stack CPU for its bytes when
// longer (Device::net_macs_per_byte). The stacks work on the bytes while
// they are on the cable, as in a split plan's steps (plan.cc
// StepTransferSeconds); that CPU is also in each device's compute_s, so
// the latency counts each device's compute without it (EvaluatePlacement).
// Without a declared network CPU this is the wire time (METHODS §5).
// Measured on the emulated cluster (bench/cluster-emulated, MobileNetV2's
// throughput plan on 4 devices at 100 Mbit/s, three runs): 0.238-0.259 s
// against 0.354 s predicted when the CPU was added to the wire time.
double OverlappedTransferSeconds(const Cluster& c, int from, int to, int64_t bytes, double wire_s) {
  const double b = static_cast<double>(bytes);
  return std::max({wire_s, c.devices[from].NetworkCpuSeconds(b), c.devices[to].NetworkCpuSeconds(b)});
}

// Seconds to bring the model inputs layer j reads to device i (each input
// once per device: `delivered[input][i]`), and to return its model outputs
// to the source. Records the bytes in `cost` and the sender's time in
// `out_s` when given.
double SourceTraffic(const PlacementProblem& p, int j, int i, std::vector<std::vector<char>>* delivered,
                     PlacementCost* cost, std::vector<double>* out_s) {
  if (p.source < 0) return 0;
  const Cluster& c = *p.cluster;
  double t = 0;
  auto move = [&](int from, int to, int64_t bytes) {
    const double s = c.TransferSeconds(from, to, bytes);
    t += OverlappedTransferSeconds(c, from, to, bytes, s);
    if (out_s) (*out_s)[from] += s;
    if (cost) {
      cost->sent_bytes[from] += bytes;
      cost->received_bytes[to] += bytes;
    }
  };
  if (i != p.source) {
    for (const auto& [input, bytes] : p.model_inputs[j]) {
      if (static_cast<size_t>(input) >= delivered->size()) delivered->resize(input + 1);
      auto& row = (*delivered)[input];
      if (row.empty()) row.assign(c.size(), 0);
      if (row[i]) continue;
      row[i] = 1;
      move(p.source, i, bytes);
    }
    if (p.model_output_bytes[j] > 0) move(i, p.source, p.model_output_bytes[j]);
  }
  return t;
}
}  // namespace

PlacementCost EvaluatePlacement(const PlacementProblem& p, const std::vector<int>& dev) {
  const Cluster& c = *p.cluster;
  const int d = c.size(), n = p.layers();
  PlacementCost cost;
  cost.compute_s.assign(d, 0);
  cost.sent_bytes.assign(d, 0);
  cost.received_bytes.assign(d, 0);
  cost.weight_bytes.assign(d, 0);
  cost.peak_buffer_bytes.assign(d, 0);
  std::vector<double> out_s(d, 0);
  std::vector<int> first(d, n), last(d, -1);
  std::vector<double> layer_s(n, 0);
  double transfers = 0;
  std::vector<std::vector<char>> sent(n, std::vector<char>(d, 0));
  for (int j = 0; j < n; ++j) {
    const int i = dev[j];
    layer_s[j] = p.ComputeSeconds(i, j);
    cost.compute_s[i] += layer_s[j];
    cost.weight_bytes[i] += p.WeightBytes(i, j);
    cost.peak_buffer_bytes[i] = std::max(cost.peak_buffer_bytes[i], p.BufferBytes(i, j));
    first[i] = std::min(first[i], j);
    last[i] = std::max(last[i], j);
    for (int q : p.producers[j]) {
      const int h = dev[q];
      if (h == i || sent[q][i]) continue;
      sent[q][i] = 1;  // one copy per (tensor, receiving device)
      const double t = c.TransferSeconds(h, i, p.OutputBytes(h, i, q));
      transfers += OverlappedTransferSeconds(c, h, i, p.OutputBytes(h, i, q), t);
      out_s[h] += t;
      cost.sent_bytes[h] += p.OutputBytes(h, i, q);
      cost.received_bytes[i] += p.OutputBytes(h, i, q);
    }
  }
  std::vector<std::vector<char>> delivered;
  for (int j = 0; j < n; ++j) transfers += SourceTraffic(p, j, dev[j], &delivered, &cost, &out_s);
  // Each device's network stack works on what it sends and receives
  // (Device::net_macs_per_byte): device time beside its layers. The searches
  // below leave it out of their bounds, which stay lower bounds. The
  // latency takes the layers' time alone: the transfers above count the
  // network CPU where it outlasts the wire.
  const double layers_s = std::accumulate(cost.compute_s.begin(), cost.compute_s.end(), 0.0);
  for (int i = 0; i < d; ++i)
    cost.compute_s[i] +=
        c.devices[i].NetworkCpuSeconds(static_cast<double>(cost.sent_bytes[i] + cost.received_bytes[i]));
  cost.feasible = true;
  for (int j = 0; j < n && cost.feasible; ++j)
    if (!p.Runs(dev[j], j)) {
      cost.feasible = false;
      cost.infeasible_reason = "device " + c.devices[dev[j]].name + ": " + p.mcu_refusals[j];
    }
  for (int i = 0; i < d && cost.feasible; ++i) {
    const Device& dv = c.devices[i];
    if (cost.weight_bytes[i] > dv.flash_bytes) {
      cost.feasible = false;
      cost.infeasible_reason = "device " + dv.name + ": weights need " + FormatBytes(cost.weight_bytes[i]) +
                               ", flash is " + FormatBytes(dv.flash_bytes) + " (short by " +
                               std::to_string(cost.weight_bytes[i] - dv.flash_bytes) + " bytes)";
    } else if (cost.peak_buffer_bytes[i] > dv.ram_bytes) {
      cost.feasible = false;
      cost.infeasible_reason = "device " + dv.name + ": buffers need " + FormatBytes(cost.peak_buffer_bytes[i]) +
                               ", RAM is " + FormatBytes(dv.ram_bytes) + " (short by " +
                               std::to_string(cost.peak_buffer_bytes[i] - dv.ram_bytes) + " bytes)";
    }
  }
  cost.latency_s = layers_s + transfers;
  int bar = 0;
  for (int i = 1; i < d; ++i)
    if (cost.compute_s[i] > cost.compute_s[bar]) bar = i;
  cost.bottleneck = bar;
  double between = 0;  // layers inside ī's span that run elsewhere
  for (int j = first[bar] + 1; j < last[bar]; ++j)
    if (dev[j] != bar) between += layer_s[j];
  cost.period_s = c.devices[bar].StageSeconds(cost.compute_s[bar] + between, out_s[bar]);
  int longest = 0;
  for (int i = 0; i < d; ++i) {
    const double stage = c.devices[i].StageSeconds(cost.compute_s[i], out_s[i]);
    if (stage > cost.naive_period_s) longest = i;
    cost.naive_period_s = std::max(cost.naive_period_s, stage);
  }
  // A stage that sends more than ī is the bottleneck: the period is never
  // below the longest stage (issue 18's dataflow view).
  if (cost.naive_period_s > cost.period_s) {
    cost.period_s = cost.naive_period_s;
    cost.bottleneck = longest;
  }
  cost.send_s = out_s;
  return cost;
}

double PlacementObjectiveValue(const PlacementCost& cost, PlacementObjective objective) {
  if (!cost.feasible) return kInf;
  return objective == PlacementObjective::kLatency ? cost.latency_s : cost.period_s;
}

Status CheckPlacementFeasible(const PlacementProblem& p) {
  const Cluster& c = *p.cluster;
  for (int j = 0; j < p.layers(); ++j) {
    bool fits = false, runs = false;
    int closest = 0;
    int64_t least_short = std::numeric_limits<int64_t>::max();
    for (int i = 0; i < c.size(); ++i) {
      const Device& d = c.devices[i];
      if (!p.Runs(i, j)) continue;
      runs = true;
      const int64_t short_flash = std::max<int64_t>(0, p.WeightBytes(i, j) - d.flash_bytes);
      const int64_t short_ram = std::max<int64_t>(0, p.BufferBytes(i, j) - d.ram_bytes);
      if (short_flash == 0 && short_ram == 0) {
        fits = true;
        break;
      }
      if (short_flash + short_ram < least_short) {
        least_short = short_flash + short_ram;
        closest = i;
      }
    }
    if (fits) continue;
    if (!runs)
      return Status::NotSupported(p.names[j] + " runs on no device of the cluster: " + p.mcu_refusals[j] +
                                  "; add a Linux device");
    const Device& d = c.devices[closest];
    std::string what;
    const int64_t weights = p.WeightBytes(closest, j);
    if (weights > d.flash_bytes)
      what += "weights " + FormatBytes(weights) + " > flash " + FormatBytes(d.flash_bytes) + ", short by " +
              std::to_string(weights - d.flash_bytes) + " bytes";
    const int64_t buffers = p.BufferBytes(closest, j);
    if (buffers > d.ram_bytes)
      what += std::string(what.empty() ? "" : "; ") + "input+output " + FormatBytes(buffers) + " > RAM " +
              FormatBytes(d.ram_bytes) + ", short by " + std::to_string(buffers - d.ram_bytes) + " bytes";
    return Status::ResourceExhausted(p.names[j] + " fits on no device as a whole layer; closest is " + d.name + " (" +
                                     what + "); use --objective memory or communication to split it, or add a larger device");
  }
  int64_t weights = 0, flash = 0;  // each layer in its smallest form: a bound
  for (int j = 0; j < p.layers(); ++j)
    weights += p.mcu_weight_bytes.empty() ? p.weight_bytes[j] : std::min(p.weight_bytes[j], p.mcu_weight_bytes[j]);
  for (const auto& d : c.devices) flash = d.flash_bytes == kUnlimitedBytes ? kUnlimitedBytes : flash + d.flash_bytes;
  if (flash != kUnlimitedBytes && weights > flash)
    return Status::ResourceExhausted("the model's weights (" + FormatBytes(weights) + ") exceed the total flash of all " +
                                     std::to_string(c.size()) + " devices (" + FormatBytes(flash) + ") by " +
                                     std::to_string(weights - flash) + " bytes; add devices or split layers");
  return Status::OK();
}

Result<PlacementResult> PlaceExhaustive(const PlacementProblem& p, PlacementObjective objective,
                                        double max_assignments) {
  const auto start = std::chrono::steady_clock::now();
  const int n = p.layers(), d = p.cluster->size();
  const double count = std::pow(static_cast<double>(d), n);
  if (count > max_assignments)
    return Status::NotSupported("exhaustive search over " + std::to_string(d) + "^" + std::to_string(n) +
                                " assignments exceeds the limit of " + std::to_string(static_cast<int64_t>(max_assignments)) +
                                "; use --solver bnb (exact) or dp");
  PlacementResult best;
  double best_v = kInf;
  std::vector<int> dev(n, 0);
  int64_t visited = 0;
  while (true) {
    ++visited;
    PlacementCost cost = EvaluatePlacement(p, dev);
    const double v = PlacementObjectiveValue(cost, objective);
    if (v < best_v) {
      best_v = v;
      best.device_of_layer = dev;
      best.cost = cost;
    }
    int k = 0;
    while (k < n && ++dev[k] == d) dev[k++] = 0;
    if (k == n) break;
  }
  if (!std::isfinite(best_v)) {
    TS_RETURN_IF_ERROR(CheckPlacementFeasible(p));
    return Status::ResourceExhausted("no assignment of whole layers fits the devices' flash and RAM");
  }
  best.solver = {"exhaustive", true, Seconds(start), visited};
  return best;
}

Result<PlacementResult> PlaceBisection(const PlacementProblem& p, PlacementObjective objective) {
  const auto start = std::chrono::steady_clock::now();
  const Cluster& c = *p.cluster;
  const int n = p.layers(), d = c.size();
  std::vector<int> order(d);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return c.devices[a].macs_per_s > c.devices[b].macs_per_s; });
  // Greedy contiguous packing under a stage-time budget: each device (in
  // speed order) takes consecutive layers while its compute plus sending the
  // last output on stays within `budget` and its flash/RAM hold them.
  auto pack = [&](double budget, std::vector<int>* dev) {
    dev->assign(n, -1);
    int k = 0, j = 0;
    while (j < n && k < d) {
      const int i = order[k];
      const Device& dv = c.devices[i];
      double compute = 0;
      int64_t flash = 0;
      while (j < n) {
        if (!p.Runs(i, j) || p.BufferBytes(i, j) > dv.ram_bytes || flash + p.WeightBytes(i, j) > dv.flash_bytes) break;
        const double t = compute + p.ComputeSeconds(i, j);
        const double out =
            (j + 1 < n && k + 1 < d) ? c.TransferSeconds(i, order[k + 1], p.OutputBytes(i, order[k + 1], j)) : 0.0;
        if (t + out > budget) break;  // stage full (or this layer alone exceeds it: next device)
        compute = t;
        flash += p.WeightBytes(i, j);
        (*dev)[j++] = i;
      }
      ++k;
    }
    return j == n;
  };
  PlacementResult best;
  double best_v = kInf;
  int64_t probes = 0;
  auto consider = [&](double budget) {
    std::vector<int> dev;
    ++probes;
    if (!pack(budget, &dev)) return false;
    PlacementCost cost = EvaluatePlacement(p, dev);
    const double v = PlacementObjectiveValue(cost, objective);
    if (v < best_v) {
      best_v = v;
      best.device_of_layer = dev;
      best.cost = cost;
    }
    return true;
  };
  double hi = 0;
  for (int j = 0; j < n; ++j) {
    double slowest = 0;
    for (int i = 0; i < d; ++i) slowest = std::max(slowest, p.ComputeSeconds(i, j));
    hi += slowest + (j + 1 < n ? c.TransferSeconds(order.front(), order.back(), p.output_bytes[j]) : 0);
  }
  hi = std::max(hi, 1e-12) * 2;
  if (!consider(kInf)) {
    TS_RETURN_IF_ERROR(CheckPlacementFeasible(p));
    return Status::ResourceExhausted(
        "the bisection heuristic found no contiguous split that fits the devices' flash and RAM; try --solver bnb");
  }
  double lo = 0;
  for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (consider(mid)) hi = mid;
    else lo = mid;
  }
  best.solver = {"bisection", false, Seconds(start), probes};
  return best;
}

namespace {

// Depth-first branch-and-bound over layers in topological order.
class PlacementSearch {
 public:
  PlacementSearch(const PlacementProblem& p, PlacementObjective objective, int64_t node_limit)
      : p_(p), c_(*p.cluster), objective_(objective), node_limit_(node_limit) {
    n_ = p.layers();
    d_ = c_.size();
    suffix_fast_ = SuffixFastest(p);
    classes_ = ProblemDeviceClasses(p);
    dev_.assign(n_, -1);
    flash_.assign(d_, 0);
    compute_.assign(d_, 0);
    used_.assign(d_, 0);
    sent_.assign(n_, std::vector<char>(d_, 0));
    speed_order_.resize(d_);
    std::iota(speed_order_.begin(), speed_order_.end(), 0);
    std::stable_sort(speed_order_.begin(), speed_order_.end(),
                     [&](int a, int b) { return c_.devices[a].macs_per_s > c_.devices[b].macs_per_s; });
  }

  void Seed(const PlacementResult& r) {
    const double v = PlacementObjectiveValue(r.cost, objective_);
    if (v < best_v_) {
      best_v_ = v;
      best_ = r;
    }
  }

  void Run() { Visit(0, 0.0, 0.0); }

  bool complete() const { return nodes_ <= node_limit_; }
  int64_t nodes() const { return nodes_; }
  bool found() const { return std::isfinite(best_v_); }
  PlacementResult best() const { return best_; }

 private:
  double Bound(int next, double partial_latency, double total_compute) const {
    if (objective_ == PlacementObjective::kLatency) return partial_latency + suffix_fast_[next];
    // period ≥ compute(ī) ≥ every device's compute so far, and ≥ the average.
    double bound = *std::max_element(compute_.begin(), compute_.end());
    return std::max(bound, (total_compute + suffix_fast_[next]) / d_);
  }

  void Visit(int j, double partial_latency, double total_compute) {
    if (++nodes_ > node_limit_) return;
    if (j == n_) {
      PlacementCost cost = EvaluatePlacement(p_, dev_);
      const double v = PlacementObjectiveValue(cost, objective_);
      if (v < best_v_) {
        best_v_ = v;
        best_.device_of_layer = dev_;
        best_.cost = cost;
      }
      return;
    }
    // Try the previous layer's device first (no transfer), then by speed.
    std::vector<int> candidates;
    if (j > 0) candidates.push_back(dev_[j - 1]);
    for (int i : speed_order_)
      if (j == 0 || i != dev_[j - 1]) candidates.push_back(i);
    std::vector<char> unused_class_tried(d_, 0);
    for (int i : candidates) {
      const Device& dv = c_.devices[i];
      if (!p_.Runs(i, j) || p_.BufferBytes(i, j) > dv.ram_bytes || flash_[i] + p_.WeightBytes(i, j) > dv.flash_bytes)
        continue;
      if (used_[i] == 0) {  // interchangeable unused devices: try one of each class
        if (unused_class_tried[classes_[i]]) continue;
        unused_class_tried[classes_[i]] = 1;
      }
      const double compute = p_.ComputeSeconds(i, j);
      double transfer = 0;
      std::vector<int> marked;
      for (int q : p_.producers[j]) {
        const int h = dev_[q];
        if (h == i || sent_[q][i]) continue;
        sent_[q][i] = 1;
        marked.push_back(q);
        transfer += c_.TransferSeconds(h, i, p_.OutputBytes(h, i, q));
      }
      // Model inputs/outputs to and from the source (each input once per
      // device): a copy of `delivered_` keeps backtracking simple.
      std::vector<std::vector<char>> delivered = delivered_;
      transfer += SourceTraffic(p_, j, i, &delivered_, nullptr, nullptr);
      dev_[j] = i;
      flash_[i] += p_.WeightBytes(i, j);
      compute_[i] += compute;
      ++used_[i];
      const double latency = partial_latency + compute + transfer;
      if (Bound(j + 1, latency, total_compute + compute) < best_v_ * (1 - 1e-12)) Visit(j + 1, latency, total_compute + compute);
      --used_[i];
      compute_[i] -= compute;
      flash_[i] -= p_.WeightBytes(i, j);
      dev_[j] = -1;
      delivered_ = std::move(delivered);
      for (int q : marked) sent_[q][i] = 0;
      if (nodes_ > node_limit_) return;
    }
  }

  const PlacementProblem& p_;
  const Cluster& c_;
  PlacementObjective objective_;
  int64_t node_limit_;
  int n_ = 0, d_ = 0;
  std::vector<double> suffix_fast_;
  std::vector<int> classes_, dev_, used_, speed_order_;
  std::vector<int64_t> flash_;
  std::vector<double> compute_;
  std::vector<std::vector<char>> sent_;
  std::vector<std::vector<char>> delivered_;  // model input x device
  int64_t nodes_ = 0;
  double best_v_ = kInf;
  PlacementResult best_;
};

}  // namespace

Result<PlacementResult> PlaceBranchAndBound(const PlacementProblem& p, PlacementObjective objective,
                                            const PlacementResult* incumbent, int64_t node_limit) {
  const auto start = std::chrono::steady_clock::now();
  TS_RETURN_IF_ERROR(CheckPlacementFeasible(p));
  PlacementSearch search(p, objective, node_limit);
  if (incumbent && incumbent->cost.feasible) search.Seed(*incumbent);
  search.Run();
  if (!search.found())
    return Status::ResourceExhausted(search.complete()
                                         ? "no assignment of whole layers fits the devices' flash and RAM"
                                         : "branch-and-bound hit its node limit before finding a feasible assignment");
  PlacementResult r = search.best();
  r.solver = {"bnb", search.complete(), Seconds(start), search.nodes()};
  return r;
}

Result<PlacementResult> PlaceLatencyDp(const PlacementProblem& p) {
  const auto start = std::chrono::steady_clock::now();
  if (!p.IsChain())
    return Status::FailedPrecondition("the latency DP needs a chain model (every layer reads only the previous one); use --solver bnb");
  TS_RETURN_IF_ERROR(CheckPlacementFeasible(p));
  const Cluster& c = *p.cluster;
  const int n = p.layers(), d = c.size();
  PlacementResult r;
  if (n == 0) {
    r.solver = {"dp", true, Seconds(start), 0};
    return r;
  }
  // best[j][i]: least latency of layers 0..j with layer j on device i.
  std::vector<std::vector<double>> best(n, std::vector<double>(d, kInf));
  std::vector<std::vector<int>> back(n, std::vector<int>(d, -1));
  int64_t states = 0;
  // On a chain only layer 0 reads model inputs, so the source traffic of
  // (j, i) depends on nothing else: it joins the layer's own cost.
  auto own = [&](int j, int i) {
    std::vector<std::vector<char>> delivered;
    return p.ComputeSeconds(i, j) + SourceTraffic(p, j, i, &delivered, nullptr, nullptr);
  };
  for (int i = 0; i < d; ++i)
    if (FitsAlone(p, 0, i)) best[0][i] = own(0, i);
  for (int j = 1; j < n; ++j)
    for (int i = 0; i < d; ++i) {
      if (!FitsAlone(p, j, i)) continue;
      const double compute = own(j, i);
      for (int h = 0; h < d; ++h) {
        if (!std::isfinite(best[j - 1][h])) continue;
        ++states;
        const double v = best[j - 1][h] + c.TransferSeconds(h, i, p.OutputBytes(h, i, j - 1)) + compute;
        if (v < best[j][i]) {
          best[j][i] = v;
          back[j][i] = h;
        }
      }
    }
  int i = static_cast<int>(std::min_element(best[n - 1].begin(), best[n - 1].end()) - best[n - 1].begin());
  r.device_of_layer.assign(n, 0);
  for (int j = n - 1; j >= 0; --j) {
    r.device_of_layer[j] = i;
    i = back[j][i];
  }
  r.cost = EvaluatePlacement(p, r.device_of_layer);
  r.solver = {"dp", r.cost.feasible, Seconds(start), states};
  return r;
}

namespace {

// The pipeline DP of PlacePipeline (see placement.h for the recurrence).
class PipelineSearch {
 public:
  PipelineSearch(const PlacementProblem& p) : p_(p), c_(*p.cluster) {
    n_ = p.layers();
    const int d = c_.size();
    const std::vector<int> cls = ProblemDeviceClasses(p);
    std::vector<int> renumber(d + 1, -1);
    for (int i = 0; i < d; ++i) {
      if (renumber[cls[i]] < 0) {
        renumber[cls[i]] = k_++;
        members_.emplace_back();
      }
      members_[renumber[cls[i]]].push_back(i);
    }
    kind_of_.assign(d, 0);
    for (int k = 0; k < k_; ++k)
      for (int i : members_[k]) kind_of_[i] = k;
    source_kind_ = p.source >= 0 ? kind_of_[p.source] : -1;
    radix_.assign(k_, 1);
    for (int k = 1; k < k_; ++k) radix_[k] = radix_[k - 1] * (static_cast<int64_t>(members_[k - 1].size()) + 1);
    kind_states_ = radix_.back() * (static_cast<int64_t>(members_.back().size()) + 1);
    // Compute of every layer on every kind, prefix sums.
    prefix_.assign(k_, std::vector<double>(n_ + 1, 0.0));
    for (int k = 0; k < k_; ++k)
      for (int j = 0; j < n_; ++j) prefix_[k][j + 1] = prefix_[k][j] + p.ComputeSeconds(members_[k][0], j);
    suffix_macs_.assign(n_ + 1, 0.0);
    suffix_max_.assign(n_ + 1, 0.0);
    for (int j = n_ - 1; j >= 0; --j) {
      suffix_macs_[j] = suffix_macs_[j + 1] + static_cast<double>(p.macs[j]);
      suffix_max_[j] = std::max(suffix_max_[j + 1], static_cast<double>(p.macs[j]));
    }
    last_use_.assign(n_, -1);
    readers_.assign(n_, {});
    for (int j = 0; j < n_; ++j)
      for (int q : p.producers[j]) {
        last_use_[q] = std::max(last_use_[q], j);
        readers_[q].push_back(j);
      }
  }

  int64_t states() const { return kind_states_ * k_ * (n_ + 1) * (kReach + 1); }

  // A device of kind a and another of kind b (two of kind a when a == b);
  // false when kind a == b has one device.
  bool Between(int a, int b, int* from, int* to) const {
    *from = members_[a][0];
    *to = members_[b][0];
    if (*to == *from) {
      if (members_[b].size() < 2) return false;
      *to = members_[b][1];
    }
    return true;
  }
  // Seconds for `bytes` from a device of kind a to another device of kind b.
  double Transfer(int a, int b, int64_t bytes) const {
    int from, to;
    return Between(a, b, &from, &to) ? c_.TransferSeconds(from, to, bytes) : kInf;
  }
  // Seconds for layer q's output from a device of kind a to one of kind b
  // (its bytes on that link: PlacementProblem::OutputBytes).
  double TransferOutput(int a, int b, int q) const {
    int from, to;
    return Between(a, b, &from, &to) ? c_.TransferSeconds(from, to, p_.OutputBytes(from, to, q)) : kInf;
  }

  // Least period over pipelines and its stages; kInf when none beats `ub`.
  // With `first_fit`, any pipeline whose every stage fits in `ub`, found
  // depth first with the longest stages first (few cuts, few tensors that
  // travel twice on DAGs); its value is its number of stages.
  // With `pessimistic`, every reader of a tensor after the stage is charged
  // a copy at the dearest link: an upper bound, so a pipeline found under it
  // has an exact period no larger.
  double Solve(double ub, std::vector<std::pair<int, int>>* stages, bool first_fit = false, bool pessimistic = false) {
    ub_ = ub;
    count_stages_ = first_fit;
    pessimistic_ = pessimistic;
    double best = kInf;
    std::vector<int64_t> avail(k_);
    for (int k = 0; k < k_; ++k) avail[k] = static_cast<int64_t>(members_[k].size());
    const int64_t all = Index(avail);
    for (int f = 0; f < k_; ++f) {
      // The source sends the model inputs of layer 0 to the first stage.
      source_extra_ = 0;
      source_extra_bytes_ = 0;
      if (source_kind_ >= 0 && f != source_kind_)
        for (const auto& [input, bytes] : p_.model_inputs[0]) {
          source_extra_ += Transfer(source_kind_, f, bytes);
          source_extra_bytes_ += static_cast<double>(bytes);
        }
      if (source_extra_ >= ub_) continue;
      memo_.assign(static_cast<size_t>(states()), std::numeric_limits<double>::quiet_NaN());
      choice_.assign(static_cast<size_t>(states()), Choice{});
      const double v = count_stages_ ? F(all, f, 0, 0) : std::max(source_extra_, F(all, f, 0, 0));
      if (v < best) {
        best = v;
        if (!count_stages_) ub_ = std::min(ub_, v);
        stages->clear();
        int64_t r = all;
        int k = f, s = 0, hold = 0;
        while (s < n_) {
          const Choice c = choice_[Slot(r, k, s, hold)];
          stages->push_back({c.end, k});
          r -= radix_[k];
          k = c.next;
          hold = c.next_hold;
          s = c.end;
        }
      }
    }
    return best;
  }

  int64_t evaluated() const { return evaluated_; }
  const std::vector<std::vector<int>>& members() const { return members_; }
  int source_kind() const { return source_kind_; }

 private:
  int64_t Index(const std::vector<int64_t>& counts) const {
    int64_t r = 0;
    for (int k = 0; k < k_; ++k) r += counts[k] * radix_[k];
    return r;
  }
  int64_t Count(int64_t r, int k) const { return (r / radix_[k]) % (static_cast<int64_t>(members_[k].size()) + 1); }
  // No pipeline of layers [e, n) on the devices `rest` has a shorter period:
  // the largest layer runs on the fastest of them, and one of them does at
  // least its speed's share of the remaining work.
  double RestBound(int64_t rest, int e) const {
    double speed = 0, fastest = 0;
    for (int x = 0; x < k_; ++x) {
      const int64_t count = Count(rest, x);
      if (count == 0) continue;
      const double v = c_.devices[members_[x][0]].FastestMacsPerSecond();  // per-kind rates: admissible
      speed += static_cast<double>(count) * v;
      fastest = std::max(fastest, v);
    }
    if (speed <= 0) return kInf;
    return std::max(suffix_macs_[e] / speed, suffix_max_[e] / fastest);
  }

  size_t Slot(int64_t r, int k, int s, int hold) const {
    return static_cast<size_t>(((r * k_ + k) * (n_ + 1) + s) * (kReach + 1) + hold);
  }

  // `hold`: the stage must take at least that many layers (the previous
  // stage counted one copy per tensor, on the promise that every reader of
  // those tensors lies in this stage).
  double F(int64_t r, int k, int s, int hold) {
    const size_t slot = Slot(r, k, s, hold);
    if (!std::isnan(memo_[slot])) return memo_[slot];
    ++evaluated_;
    const int64_t rest = r - radix_[k];
    const int rep = members_[k][0];
    const Device& dv = c_.devices[rep];
    const bool sends_inputs = k == source_kind_ && s > 0;
    const double extra = sends_inputs ? source_extra_ : 0.0;
    double best = kInf;
    Choice pick;
    std::vector<Choice> deferred;
    int64_t flash = 0;
    double outputs = 0;  // model outputs of the stage back to the source
    // The bytes the stage's network stack handles (Device::net_macs_per_byte),
    // as EvaluatePlacement counts them: each earlier tensor a layer of the
    // stage reads, once; the model inputs from the source; what it sends.
    // Its CPU is part of the stage's compute (Device::StageSeconds).
    // Counting one copy of each tensor it sends (the optimistic model) keeps
    // the value a lower bound.
    double handled = sends_inputs ? source_extra_bytes_ : 0.0;
    if (s == 0 && source_kind_ >= 0 && k != source_kind_) handled += source_extra_bytes_;
    std::vector<int> received;
    std::vector<int> crossing;
    for (int e = s + 1; e <= n_; ++e) {
      const int j = e - 1;
      if (!p_.Runs(rep, j) || p_.BufferBytes(rep, j) > dv.ram_bytes) break;
      flash += p_.WeightBytes(rep, j);
      if (flash > dv.flash_bytes) break;
      for (int q : p_.producers[j])
        if (q < s && std::find(received.begin(), received.end(), q) == received.end()) {
          received.push_back(q);
          handled += static_cast<double>(p_.output_bytes[q]);
        }
      if (source_kind_ >= 0 && k != source_kind_ && p_.model_output_bytes[j] > 0) {
        outputs += Transfer(k, source_kind_, p_.model_output_bytes[j]);
        handled += static_cast<double>(p_.model_output_bytes[j]);
      }
      const double compute = prefix_[k][e] - prefix_[k][s] + dv.NetworkCpuSeconds(handled);
      // Longer stages only cost more.
      if (dv.StageSeconds(compute, extra) >= (count_stages_ ? ub_ : std::min(best, ub_))) break;
      if (last_use_[j] >= e) crossing.push_back(j);
      crossing.erase(std::remove_if(crossing.begin(), crossing.end(), [&](int q) { return last_use_[q] < e; }),
                     crossing.end());
      // The stage's compute and what it sends (Device::StageSeconds).
      const double own = dv.StageSeconds(compute, extra + outputs);
      if (e - s < hold) continue;
      if (e == n_) {
        const double v = count_stages_ ? (own < ub_ ? 1.0 : kInf) : own;
        if (v < best) {
          best = v;
          pick = {e, -1, 0};
        }
        break;
      }
      if (RestBound(rest, e) >= (count_stages_ ? ub_ : std::min(best, ub_))) continue;
      // Pessimistic option A: the next stage takes every reader of the
      // crossing tensors, so each travels once (exact).
      int reach = 1;
      for (int q : crossing) reach = std::max(reach, last_use_[q] + 1 - e);
      for (int next = 0; next < k_; ++next) {
        if (Count(rest, next) == 0) continue;
        double sends = 0, sent = 0;  // seconds on the wire; bytes
        for (int q : crossing) {
          const bool read_next = std::find(readers_[q].begin(), readers_[q].end(), e) != readers_[q].end();
          const double bytes = static_cast<double>(p_.output_bytes[q]);
          if (pessimistic_) {
            double dearest = 0;
            for (int x = 0; x < k_; ++x)
              if (Count(rest, x) > 0) dearest = std::max(dearest, TransferOutput(k, x, q));
            for (int reader : readers_[q])
              if (reader > e || (reader == e && !read_next)) {
                sends += dearest;
                sent += bytes;
              }
            if (read_next) {
              sends += TransferOutput(k, next, q);
              sent += bytes;
            }
          } else if (read_next) {
            sends += TransferOutput(k, next, q);
            sent += bytes;
          } else {
            double cheapest = kInf;
            for (int x = 0; x < k_; ++x)
              if (Count(rest, x) > 0) cheapest = std::min(cheapest, TransferOutput(k, x, q));
            sends += cheapest;
            sent += bytes;
          }
        }
        const double limit = count_stages_ ? ub_ : std::min(best, ub_);
        auto descend = [&](double stage, int next_hold) {
          if (stage >= (count_stages_ ? ub_ : std::min(best, ub_))) return;
          if (count_stages_) {  // tried longest first, after this loop
            deferred.push_back({e, next, next_hold});
            return;
          }
          const double sub = F(rest, next, e, next_hold);
          const double v = count_stages_ ? 1.0 + sub : std::max(stage, sub);
          if (v < best) {
            best = v;
            pick = {e, next, next_hold};
          }
        };
        if (pessimistic_ && reach > 1 && reach <= kReach) {
          double once = 0, once_bytes = 0;
          for (int q : crossing) {
            once += TransferOutput(k, next, q);
            once_bytes += static_cast<double>(p_.output_bytes[q]);
          }
          const double stage = dv.StageSeconds(compute + dv.NetworkCpuSeconds(once_bytes), extra + outputs + once);
          if (stage < limit) descend(stage, reach);
        }
        descend(dv.StageSeconds(compute + dv.NetworkCpuSeconds(sent), extra + outputs + sends), 0);
      }
    }
    // Depth first, longest stage first: the first pipeline that fits.
    for (auto it = deferred.rbegin(); count_stages_ && !std::isfinite(best) && it != deferred.rend(); ++it) {
      const double sub = F(rest, it->next, it->end, it->next_hold);
      if (std::isfinite(sub)) {
        best = 1.0 + sub;
        pick = *it;
      }
    }
    // Nothing here beats the incumbent (the value is not needed exactly).
    if (!count_stages_ && best >= ub_) best = kInf;
    memo_[slot] = best;
    choice_[slot] = pick;
    return best;
  }

  const PlacementProblem& p_;
  const Cluster& c_;
  int n_ = 0, k_ = 0, source_kind_ = -1;
  std::vector<std::vector<int>> members_;
  std::vector<int> kind_of_, last_use_;
  std::vector<std::vector<int>> readers_;
  std::vector<int64_t> radix_;
  int64_t kind_states_ = 1;
  std::vector<std::vector<double>> prefix_;
  std::vector<double> suffix_macs_, suffix_max_;
  double ub_ = kInf, source_extra_ = 0, source_extra_bytes_ = 0;
  bool count_stages_ = false, pessimistic_ = false;
  struct Choice {
    int end = -1, next = -1, next_hold = 0;
  };
  // Longest reach (layers past a cut) of a tensor the pessimistic model
  // may promise to the next stage alone.
  static constexpr int kReach = 8;
  std::vector<double> memo_;
  std::vector<Choice> choice_;
  int64_t evaluated_ = 0;
};

// No whole-layer assignment has a shorter period: some device runs the
// largest layer, and the busiest device computes at least the average share.
double AnyAssignmentPeriodBound(const PlacementProblem& p) {
  const Cluster& c = *p.cluster;
  double total_speed = 0, largest = 0;
  for (const auto& d : c.devices) total_speed += d.FastestMacsPerSecond();  // admissible with per-kind rates
  double total_macs = 0;
  for (int j = 0; j < p.layers(); ++j) {
    double fastest = kInf;
    for (int i = 0; i < c.size(); ++i)
      if (FitsAlone(p, j, i)) fastest = std::min(fastest, p.ComputeSeconds(i, j));
    if (std::isfinite(fastest)) largest = std::max(largest, fastest);
    total_macs += static_cast<double>(p.macs[j]);
  }
  return std::max(largest, total_speed > 0 ? total_macs / total_speed : 0.0);
}

}  // namespace

Result<PlacementResult> PlacePipeline(const PlacementProblem& p, int64_t max_states) {
  const auto start = std::chrono::steady_clock::now();
  TS_RETURN_IF_ERROR(CheckPlacementFeasible(p));
  PipelineSearch search(p);
  if (search.states() > max_states)
    return Status::NotSupported("the pipeline DP needs " + std::to_string(search.states()) +
                                " states for these device kinds (limit " + std::to_string(max_states) +
                                "); use --solver bnb");
  // Incumbent: the bisection heuristic's contiguous packing, evaluated exactly.
  PlacementResult r;
  double ub = kInf;
  if (auto seed = PlaceBisection(p, PlacementObjective::kThroughput); seed.ok() && seed->cost.feasible) {
    r = *seed;
    ub = seed->cost.period_s;
  }
  auto consider = [&](const std::vector<std::pair<int, int>>& stages) {
    std::vector<std::vector<int>> free_devices = search.members();
    for (auto& m : free_devices) std::reverse(m.begin(), m.end());  // pop_back takes the first member
    std::vector<int> dev(p.layers(), -1);
    int s = 0;
    for (const auto& [e, kind] : stages) {
      const int device = free_devices[kind].back();
      free_devices[kind].pop_back();
      for (int j = s; j < e; ++j) dev[j] = device;
      s = e;
    }
    PlacementCost cost = EvaluatePlacement(p, dev);
    if (cost.feasible && (r.device_of_layer.empty() || cost.period_s < r.cost.period_s)) {
      r.device_of_layer = dev;
      r.cost = cost;
    }
  };
  // 1. The least period under the optimistic send model: a bound for every
  //    pipeline, met exactly on chains.
  std::vector<std::pair<int, int>> stages;
  const double bound = search.Solve(ub * (1 + 1e-12), &stages);
  bool optimal = false;
  if (std::isfinite(bound)) {
    consider(stages);
    // 2. A pipeline that meets the bound even when every later reader gets
    //    its own copy proves the bound tight.
    //    Else bisect the cap under that pessimistic model for a better plan.
    //    The bisection stops after 12 probes or 3 s (a plan, not a proof).
    double lo = bound, hi = r.cost.period_s;
    for (int it = 0; it < 12 && hi > lo * (1 + 1e-9) && (it == 0 || Seconds(start) < 3.0); ++it) {
      const double cap = it == 0 ? lo * (1 + 1e-9) : 0.5 * (lo + hi);
      std::vector<std::pair<int, int>> capped;
      if (std::isfinite(search.Solve(cap, &capped, /*first_fit=*/true, /*pessimistic=*/true))) {
        consider(capped);
        hi = std::min(cap, r.cost.period_s);
        if (it == 0) break;
      } else {
        lo = cap;
      }
    }
    optimal = r.cost.period_s <= bound * (1 + 1e-9);
  } else if (!r.device_of_layer.empty()) {
    optimal = true;  // no pipeline beats the incumbent, itself a pipeline
  }
  if (r.device_of_layer.empty())
    return Status::ResourceExhausted(
        "no pipeline of contiguous layer ranges fits the devices' flash and RAM; try --solver bnb");
  r.solver = {"pipeline-dp", optimal, Seconds(start), search.evaluated()};
  r.solver.bound = std::isfinite(bound) ? std::min(bound, r.cost.period_s) : r.cost.period_s;
  r.solver.optimal_among = "pipelines (each device one contiguous range of layers in topological order)";
  r.solver.bound_any = AnyAssignmentPeriodBound(p);
  return r;
}

Result<PlacementResult> PlaceLayers(const PlacementProblem& p, PlacementObjective objective) {
  if (objective == PlacementObjective::kLatency && p.IsChain()) {
    TS_ASSIGN_OR_RETURN(PlacementResult dp, PlaceLatencyDp(p));
    if (dp.cost.feasible) return dp;
  }
  TS_RETURN_IF_ERROR(CheckPlacementFeasible(p));
  if (objective == PlacementObjective::kThroughput) {
    auto pipeline = PlacePipeline(p);
    if (pipeline.ok()) return pipeline;
  }
  auto seed = PlaceBisection(p, objective);
  PlacementResult r;
  TS_ASSIGN_OR_RETURN(r, PlaceBranchAndBound(p, objective, seed.ok() ? &seed.value() : nullptr, 2'000'000));
  return r;
}

}  // namespace tessera
