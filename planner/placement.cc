#include "planner/placement.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

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
  return p.weight_bytes[j] <= d.flash_bytes && p.buffer_bytes[j] <= d.ram_bytes;
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
      bool same = da.SameCapacity(db);
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
    p.macs.push_back(f.R);
    p.kinds.push_back(f.kind);
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
    p.model_output_bytes[j] = 0;
    for (int v : node.outputs)
      if (std::find(graph.outputs.begin(), graph.outputs.end(), v) != graph.outputs.end())
        p.model_output_bytes[j] += NumElements(graph.values[v].shape) * 4;
  }
  return p;
}

namespace {
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
    t += s;
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
    cost.weight_bytes[i] += p.weight_bytes[j];
    cost.peak_buffer_bytes[i] = std::max(cost.peak_buffer_bytes[i], p.buffer_bytes[j]);
    first[i] = std::min(first[i], j);
    last[i] = std::max(last[i], j);
    for (int q : p.producers[j]) {
      const int h = dev[q];
      if (h == i || sent[q][i]) continue;
      sent[q][i] = 1;  // one copy per (tensor, receiving device)
      const double t = c.TransferSeconds(h, i, p.output_bytes[q]);
      transfers += t;
      out_s[h] += t;
      cost.sent_bytes[h] += p.output_bytes[q];
      cost.received_bytes[i] += p.output_bytes[q];
    }
  }
  std::vector<std::vector<char>> delivered;
  for (int j = 0; j < n; ++j) transfers += SourceTraffic(p, j, dev[j], &delivered, &cost, &out_s);
  cost.feasible = true;
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
  cost.latency_s = std::accumulate(cost.compute_s.begin(), cost.compute_s.end(), 0.0) + transfers;
  int bar = 0;
  for (int i = 1; i < d; ++i)
    if (cost.compute_s[i] > cost.compute_s[bar]) bar = i;
  cost.bottleneck = bar;
  double between = 0;  // layers inside ī's span that run elsewhere
  for (int j = first[bar] + 1; j < last[bar]; ++j)
    if (dev[j] != bar) between += layer_s[j];
  cost.period_s = cost.compute_s[bar] + out_s[bar] + between;
  for (int i = 0; i < d; ++i) cost.naive_period_s = std::max(cost.naive_period_s, cost.compute_s[i] + out_s[i]);
  return cost;
}

double PlacementObjectiveValue(const PlacementCost& cost, PlacementObjective objective) {
  if (!cost.feasible) return kInf;
  return objective == PlacementObjective::kLatency ? cost.latency_s : cost.period_s;
}

Status CheckPlacementFeasible(const PlacementProblem& p) {
  const Cluster& c = *p.cluster;
  for (int j = 0; j < p.layers(); ++j) {
    bool fits = false;
    int closest = 0;
    int64_t least_short = std::numeric_limits<int64_t>::max();
    for (int i = 0; i < c.size(); ++i) {
      const Device& d = c.devices[i];
      const int64_t short_flash = std::max<int64_t>(0, p.weight_bytes[j] - d.flash_bytes);
      const int64_t short_ram = std::max<int64_t>(0, p.buffer_bytes[j] - d.ram_bytes);
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
    const Device& d = c.devices[closest];
    std::string what;
    if (p.weight_bytes[j] > d.flash_bytes)
      what += "weights " + FormatBytes(p.weight_bytes[j]) + " > flash " + FormatBytes(d.flash_bytes) + ", short by " +
              std::to_string(p.weight_bytes[j] - d.flash_bytes) + " bytes";
    if (p.buffer_bytes[j] > d.ram_bytes)
      what += std::string(what.empty() ? "" : "; ") + "input+output " + FormatBytes(p.buffer_bytes[j]) + " > RAM " +
              FormatBytes(d.ram_bytes) + ", short by " + std::to_string(p.buffer_bytes[j] - d.ram_bytes) + " bytes";
    return Status::ResourceExhausted(p.names[j] + " fits on no device as a whole layer; closest is " + d.name + " (" +
                                     what + "); use --objective memory or communication to split it, or add a larger device");
  }
  int64_t weights = 0, flash = 0;
  for (int64_t w : p.weight_bytes) weights += w;
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
        if (p.buffer_bytes[j] > dv.ram_bytes || flash + p.weight_bytes[j] > dv.flash_bytes) break;
        const double t = compute + p.ComputeSeconds(i, j);
        const double out = (j + 1 < n && k + 1 < d) ? c.TransferSeconds(i, order[k + 1], p.output_bytes[j]) : 0.0;
        if (t + out > budget) break;  // stage full (or this layer alone exceeds it: next device)
        compute = t;
        flash += p.weight_bytes[j];
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
    classes_ = DeviceClasses(c_);
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
      if (p_.buffer_bytes[j] > dv.ram_bytes || flash_[i] + p_.weight_bytes[j] > dv.flash_bytes) continue;
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
        transfer += c_.TransferSeconds(h, i, p_.output_bytes[q]);
      }
      // Model inputs/outputs to and from the source (each input once per
      // device): a copy of `delivered_` keeps backtracking simple.
      std::vector<std::vector<char>> delivered = delivered_;
      transfer += SourceTraffic(p_, j, i, &delivered_, nullptr, nullptr);
      dev_[j] = i;
      flash_[i] += p_.weight_bytes[j];
      compute_[i] += compute;
      ++used_[i];
      const double latency = partial_latency + compute + transfer;
      if (Bound(j + 1, latency, total_compute + compute) < best_v_ * (1 - 1e-12)) Visit(j + 1, latency, total_compute + compute);
      --used_[i];
      compute_[i] -= compute;
      flash_[i] -= p_.weight_bytes[j];
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
        const double v = best[j - 1][h] + c.TransferSeconds(h, i, p.output_bytes[j - 1]) + compute;
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

Result<PlacementResult> PlaceLayers(const PlacementProblem& p, PlacementObjective objective) {
  if (objective == PlacementObjective::kLatency && p.IsChain()) {
    TS_ASSIGN_OR_RETURN(PlacementResult dp, PlaceLatencyDp(p));
    if (dp.cost.feasible) return dp;
  }
  TS_RETURN_IF_ERROR(CheckPlacementFeasible(p));
  auto seed = PlaceBisection(p, objective);
  PlacementResult r;
  TS_ASSIGN_OR_RETURN(r, PlaceBranchAndBound(p, objective, seed.ok() ? &seed.value() : nullptr, 2'000'000));
  return r;
}

}  // namespace tessera
