#include "daemon/cluster/plan_fit.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "daemon/runtime/memory_flow.h"
#include "partition/compile/program_compiler.h"
#include "util/quantity.h"

namespace tessera {

namespace {

// One device over its RAM: who, by how much, and why.
struct Overrun {
  int device = 0;
  DeviceMemory need;
  int64_t ram = 0;
};

std::string DescribeOverruns(const std::vector<Overrun>& overruns, const std::vector<const Device*>& devices) {
  std::string text;
  for (const Overrun& o : overruns) {
    if (!text.empty()) text += "; ";
    text += "device " + devices[o.device]->name + " needs " + DescribeDeviceMemory(o.need) + " but has ram: " +
            FormatBytes(static_cast<double>(o.ram)) + " (short by " + std::to_string(o.need.total_bytes() - o.ram) +
            " bytes)";
  }
  return text;
}

// Sizes every Linux device's program; lists the devices over their RAM.
Result<std::vector<DeviceMemory>> SizePrograms(const std::vector<DeviceProgram>& programs,
                                               const std::vector<const Device*>& devices,
                                               const DeviceMemoryOptions& options, std::vector<Overrun>* overruns) {
  std::vector<DeviceMemory> sizes(programs.size());
  for (size_t i = 0; i < programs.size(); ++i) {
    sizes[i].device = static_cast<int>(i);
    if (devices[i]->kind != DeviceKind::kLinux) {
      sizes[i].baseline_bytes = 0;
      sizes[i].in_flight = 0;
      continue;
    }
    TS_ASSIGN_OR_RETURN(sizes[i], SizeDeviceProgram(programs[i], options));
    sizes[i].device = static_cast<int>(i);
    if (devices[i]->ram_bytes != kUnlimitedBytes && sizes[i].total_bytes() > devices[i]->ram_bytes)
      overruns->push_back({static_cast<int>(i), sizes[i], devices[i]->ram_bytes});
  }
  return sizes;
}

void FillPromises(const std::vector<DeviceMemory>& sizes, Plan* plan) {
  for (size_t i = 0; i < sizes.size() && i < plan->loads.size(); ++i) {
    if (sizes[i].in_flight == 0) continue;  // MCU: the planner's own model
    DeviceLoad& d = plan->loads[i];
    d.promised_bytes = sizes[i].total_bytes();
    d.promised_weight_bytes = sizes[i].weight_bytes;
    d.promised_arena_bytes = sizes[i].arena_bytes;
    d.promised_working_bytes = sizes[i].working_bytes;
    d.promised_buffer_bytes = sizes[i].buffer_bytes;
    d.compute_slots = sizes[i].compute_slots;
    d.promised_io_bytes = sizes[i].io_bytes;
    d.promised_link_bytes = sizes[i].link_bytes;
    d.promised_load_peak_bytes = sizes[i].load_peak_bytes;
    d.baseline_bytes = sizes[i].baseline_bytes;
    d.in_flight = sizes[i].in_flight;
  }
}

// `extra` seconds more on device `d`: in its compute time and the predicted
// latency (an upper bound: the device may be off the critical path); a
// pipelined plan's period is the longest stage again.
void AddDeviceTime(int d, double extra, Plan* plan) {
  DeviceLoad& load = plan->loads[d];
  load.compute_s += extra;
  plan->latency_s += extra;
  if (plan->period_s > 0) {
    const double stage = plan->cluster.devices[d].StageSeconds(load.compute_s, load.send_s);
    if (stage > plan->period_s) {  // this stage is now the longest: it sets the period
      plan->period_s = stage;
      plan->bottleneck_device = d;
    }
    plan->throughput_per_s = 1.0 / plan->period_s;
  } else if (plan->latency_s > 0 && plan->throughput_per_s > 0) {
    plan->throughput_per_s = std::min(plan->throughput_per_s, 1.0 / plan->latency_s);
  }
}

// Devices in `compact` run their convs without Winograd: each conv's part
// on such a device takes compact_time_factor × its planned time
// (planner/layer_profile.h ApplyCompactProfile; 1 without a compact
// profile). The difference goes into the device's compute time (and
// DeviceLoad::compact_s); the latency grows by each layer's largest
// difference among its devices (a layer's parts run at once), summed over
// the layers; a pipelined plan's period is the longest stage again.
void PriceCompactWeights(const std::vector<LayerFigures>& layers, const std::set<int>& compact, Plan* plan) {
  double latency_extra = 0;
  for (const PlannedLayer& l : plan->layers) {
    const int k = l.index - 1;
    if (k < 0 || k >= static_cast<int>(layers.size()) || l.devices.empty()) continue;
    const LayerFigures& f = layers[k];
    if (f.compact_time_factor <= 1) continue;
    int64_t total = 0;
    for (int64_t x : l.split) total += x;
    double layer_extra = 0;
    for (size_t i = 0; i < l.devices.size(); ++i) {
      const int d = l.devices[i];
      if (!compact.count(d) || d >= static_cast<int>(plan->loads.size())) continue;
      const double rate = plan->cluster.devices[d].MacsPerSecond(f.RateKind());
      if (!(rate > 0)) continue;
      double share = 1.0 / static_cast<double>(l.devices.size());
      double factor = 1;
      if (l.split.size() == l.devices.size() && total > 0) {
        share = static_cast<double>(l.split[i]) / static_cast<double>(total);
        if (l.split_axis == "rows") factor = f.TileTimeFactor(l.split[i]);
      }
      const double extra = (f.compact_time_factor - 1) * factor * share * f.TimeMacs() / rate;
      plan->loads[d].compute_s += extra;
      plan->loads[d].compact_s += extra;
      layer_extra = std::max(layer_extra, extra);
    }
    latency_extra += layer_extra;
  }
  plan->latency_s += latency_extra;
  if (plan->period_s > 0) {
    for (size_t i = 0; i < plan->loads.size() && i < plan->cluster.devices.size(); ++i) {
      const double stage = plan->cluster.devices[i].StageSeconds(plan->loads[i].compute_s, plan->loads[i].send_s);
      if (stage > plan->period_s) {
        plan->period_s = stage;
        plan->bottleneck_device = static_cast<int>(i);
      }
    }
    plan->throughput_per_s = 1.0 / plan->period_s;
  } else if (plan->latency_s > 0 && plan->throughput_per_s > 0) {
    plan->throughput_per_s = std::min(plan->throughput_per_s, 1.0 / plan->latency_s);
  }
}

// The request's own trip: the gateway hands the model's inputs to the
// source device (device 0, ToPartitionPlan) and takes its outputs back over its link
// (Cluster::GatewaySeconds), before the first layer and after the last, so
// the latency grows by that time; requests in flight overlap their trips
// with each other's compute, so a stream runs at most at the link's rate
// over the request's bytes. Measured on the emulated cluster
// (bench/cluster-emulated, MobileNetV2 on one device): 0.142 / 0.181 /
// 0.623 s at 1 Gbit/s / 100 Mbit/s / 10 Mbit/s against 0.170 s predicted
// for all three before this was priced.
void PriceRequest(const Graph& graph, Plan* plan) {
  const int64_t bytes = ModelRequestBytes(graph);
  plan->request_bytes = bytes;
  plan->request_s = plan->cluster.GatewaySeconds(bytes);
  const double rate = plan->cluster.GatewayBytesPerSecond();
  plan->request_wire_rate_per_s = rate > 0 && bytes > 0 ? rate / static_cast<double>(bytes) : 0.0;
  plan->latency_s += plan->request_s;
  // The source's network stack receives the input and sends the output:
  // its CPU for those bytes (Device::net_macs_per_byte, as for the bytes
  // between devices) and for serving the request (Device::request_macs) is
  // in its time and a pipeline's period. In the latency it works while the
  // bytes are on the gateway's link: the trip takes the longer of the two
  // (as a transfer between devices does). Measured on the emulated
  // cluster (bench/cluster-emulated, MobileNetV2 224², one device at 100
  // Mbit/s, three runs): 0.206-0.213 s of the device's CPU per request in a
  // stream against 0.162 s of layers, the ~45 ms a request the source
  // spends whatever the cable (1 Gbit/s multi-device pipelines: 30-46 ms).
  if (!plan->loads.empty() && !plan->cluster.devices.empty()) {
    plan->request_cpu_s = plan->cluster.devices[0].RequestCpuSeconds(static_cast<double>(bytes));
    if (plan->request_cpu_s > 0) {
      AddDeviceTime(0, plan->request_cpu_s, plan);
      plan->latency_s -= std::min(plan->request_cpu_s, plan->request_s);
    }
  }
  if (plan->request_wire_rate_per_s > 0 && plan->throughput_per_s > plan->request_wire_rate_per_s)
    plan->throughput_per_s = plan->request_wire_rate_per_s;
}

// Runs the one-device memory flow for device `d` of `plan` and writes the
// paths it keeps into the plan's layers (scheme ffmt on `d` alone, its grid)
// and the device's load. Nothing changes when no path shrinks the arena.
//
// Time: the recomputed (halo) MACs run at the device's rate for the tiled
// layers (the MAC-weighted rate of their kinds, LayerFigures::TimeMacs), and
// are added to the device's compute time and to the predicted latency (an
// upper bound: the device may be off the critical path); a pipelined plan's
// period is the longest stage again.
// What the flow's result depends on: the partition and the device. Re-plans
// that give the same partition (one device: every time) reuse the result.
std::string FlowKey(const PartitionPlan& p, int device) {
  std::string key = std::to_string(device) + "/" + std::to_string(p.num_devices) + "/" + std::to_string(p.source);
  for (int c : p.compact_weights) key += "c" + std::to_string(c);
  for (const LayerAssignment& a : p.layers) {
    key += "|" + std::to_string(static_cast<int>(a.scheme)) + (a.parts ? "p" : "") + ":";
    for (int x : a.devices) key += std::to_string(x) + ",";
    key += ":";
    for (int64_t x : a.split) key += std::to_string(x) + ",";
    key += ":" + std::to_string(a.grid_rows) + "x" + std::to_string(a.grid_cols) + ":";
    char w[32];
    for (double x : a.row_weights) key += (std::snprintf(w, sizeof w, "%.17g,", x), w);
    key += ":";
    for (double x : a.col_weights) key += (std::snprintf(w, sizeof w, "%.17g,", x), w);
  }
  return key;
}

Status TileDeviceLayers(const Graph& graph, const std::vector<LayerFigures>& layers, int d, const FitOptions& fit,
                        std::map<std::string, MemoryFlowResult>* flows, Plan* plan) {
  MemoryFlowOptions mo;
  mo.max_mac_overhead = fit.max_mac_overhead;
  mo.memory = fit.memory;
  mo.memory.in_flight = 1;
  const PartitionPlan base = ToPartitionPlan(*plan);
  const std::string key = FlowKey(base, d);
  auto found = flows->find(key);
  if (found == flows->end()) {
    TS_ASSIGN_OR_RETURN(MemoryFlowResult flow, OptimizeDeviceMemory(graph, base, d, mo));
    found = flows->emplace(key, std::move(flow)).first;
  } else {
    spdlog::info("device {}: the plan is the same as before, and so is its memory flow", plan->cluster.devices[d].name);
  }
  const MemoryFlowResult& r = found->second;
  if (r.paths.empty()) return Status::OK();
  const PartitionPlan flowed = PlanOf(base, d, r.paths);
  for (const MemoryPath& p : r.paths)
    for (int k = p.first; k <= p.last; ++k) {
      // The layer as the flow cut it (ToPartitionPlan reads it back): tiles
      // or row bands on d alone, or a channel slice of a channel path on d.
      const LayerAssignment& a = flowed.layers[k];
      PlannedLayer& l = plan->layers[k];
      l.scheme = LayerSchemeName(a.scheme);
      l.devices = a.devices;
      l.split.clear();
      l.grid.clear();
      if (a.scheme == LayerScheme::kFfmt) {
        l.split_axis = a.parts ? "parts" : "rows";
        l.grid = {a.grid_rows, a.grid_cols};
        l.stack_start = a.stack_start;
      } else {
        l.split_axis = a.scheme == LayerScheme::kFdt2 ? "in_channels" : "out_channels";
      }
    }
  DeviceLoad& load = plan->loads[d];
  load.tiled_paths = static_cast<int>(r.paths.size());
  load.tiled_halo_macs = r.halo_macs;
  const Device& device = plan->cluster.devices[d];
  double macs = 0, seconds = 0;
  for (const MemoryPath& p : r.paths)
    for (int k = p.first; k <= p.last && k < static_cast<int>(layers.size()); ++k) {
      const double rate = device.MacsPerSecond(layers[k].kind);
      if (rate <= 0 || layers[k].R <= 0) continue;
      macs += static_cast<double>(layers[k].R);
      seconds += layers[k].TimeMacs() / rate;
    }
  if (macs > 0 && r.halo_macs > 0) {
    const double extra = static_cast<double>(r.halo_macs) * seconds / macs;
    load.tiled_halo_s = extra;
    AddDeviceTime(d, extra, plan);
  }
  spdlog::info(
      "device {}: {} stretch(es) of its layers as tiles, row bands or channel slices: arena {} -> {} bytes, "
      "{} MACs recomputed",
      plan->cluster.devices[d].name, r.paths.size(), r.arena_before_bytes, r.arena_after_bytes, r.halo_macs);
  return Status::OK();
}

// The genetic choice of parts for device `d` (FitOptions::parts_time):
// writes the chosen stretches into the plan's layers and the device's load.
Status PartsDeviceLayers(const Graph& graph, const std::vector<LayerFigures>& layers, int d, const FitOptions& fit,
                         Plan* plan) {
  const PartitionPlan base = ToPartitionPlan(*plan);
  const Device& device = plan->cluster.devices[d];
  DeviceLoad& load = plan->loads[d];
  // The device's time model: its layers at its rate, the calibrated slowdowns.
  PartsTimeModel time = *fit.parts_time;
  time.unsplit_seconds = load.compute_s;
  time.layer_seconds.assign(graph.nodes.size(), 0.0);
  for (size_t k = 0; k < layers.size() && k < graph.nodes.size(); ++k) {
    const double rate = device.MacsPerSecond(layers[k].RateKind());
    if (rate > 0) time.layer_seconds[k] = layers[k].TimeMacs() / rate;
  }
  PartsSearchOptions po = fit.parts;
  po.bands = time.bands;
  TS_ASSIGN_OR_RETURN(PartsSearchResult r, GeneticParts(graph, base, d, time, po));
  // The target: the device's time may rise to the period (pipelined) or not at all.
  const double limit = plan->period_s > 0 ? device.StageComputeLimit(plan->period_s, load.send_s) : load.compute_s;
  DeviceMemoryOptions memory = fit.memory;
  auto total = [&](const PartsPoint& p) -> Result<int64_t> {
    TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, PlanOf(base, d, p.paths)));
    TS_ASSIGN_OR_RETURN(DeviceMemory m, SizeDeviceProgram(compiled.programs.at(d), memory));
    return m.total_bytes();
  };
  const PartsPoint* chosen = nullptr;
  for (const PartsPoint& p : r.front)  // least memory first: the first that keeps the time
    if (p.predicted_seconds <= limit * (1 + 1e-9)) {
      TS_ASSIGN_OR_RETURN(int64_t bytes, total(p));
      if (device.ram_bytes == kUnlimitedBytes || bytes <= device.ram_bytes) chosen = &p;
      break;
    }
  if (!chosen)  // it does not fit: the fastest point that does
    for (auto it = r.front.rbegin(); it != r.front.rend() && !chosen; ++it) {
      TS_ASSIGN_OR_RETURN(int64_t bytes, total(*it));
      if (device.ram_bytes == kUnlimitedBytes || bytes <= device.ram_bytes) chosen = &*it;
    }
  if (!chosen || chosen->paths.empty()) {
    spdlog::info("device {}: no choice of its layers in parts fits its RAM ({} choices on the front)", device.name,
                 r.front.size());
    return Status::OK();
  }
  for (const MemoryPath& p : chosen->paths)
    for (int k = p.first; k <= p.last; ++k) {
      PlannedLayer& l = plan->layers[k];
      l.scheme = "ffmt";
      l.devices = {d};
      l.split.clear();
      l.split_axis = "parts";
      l.grid = {p.grid_rows, 1};
    }
  load.tiled_paths = static_cast<int>(chosen->paths.size());
  load.parts_layers = chosen->layers_in_parts();
  load.parts_bands = chosen->bands;
  const double extra = std::max(0.0, chosen->predicted_seconds - time.unsplit_seconds);
  load.parts_s = extra;
  AddDeviceTime(d, extra, plan);
  spdlog::info(
      "device {}: {} layer(s) in {} row bands (genetic search, {} programs sized): arena + weights {} -> {} "
      "bytes, +{:.6f} s",
      device.name, load.parts_layers, chosen->bands, r.sized, r.unsplit.size.need(), chosen->size.need(), extra);
  return Status::OK();
}

}  // namespace

Result<std::vector<DeviceMemory>> CheckProgramsFit(const std::vector<DeviceProgram>& programs,
                                                   const std::vector<const Device*>& devices,
                                                   const DeviceMemoryOptions& options) {
  if (programs.size() != devices.size())
    return Status::Internal("CheckProgramsFit: " + std::to_string(programs.size()) + " programs for " +
                            std::to_string(devices.size()) + " devices");
  std::vector<Overrun> overruns;
  TS_ASSIGN_OR_RETURN(auto sizes, SizePrograms(programs, devices, options, &overruns));
  if (!overruns.empty())
    return Status::ResourceExhausted("the plan does not fit: " + DescribeOverruns(overruns, devices) +
                                     "; plan again for this cluster (tessera plan --cluster) or use larger devices");
  return sizes;
}

int64_t ModelRequestBytes(const Graph& graph) {
  int64_t bytes = 0;
  for (int v : graph.inputs) bytes += NumElements(graph.values[v].shape) * static_cast<int64_t>(sizeof(float));
  for (int v : graph.outputs) bytes += NumElements(graph.values[v].shape) * static_cast<int64_t>(sizeof(float));
  return bytes;
}

Result<Plan> PlanWithinMemory(const Graph& graph, const std::vector<LayerFigures>& layers, const Cluster& cluster,
                              const PlanOptions& options, const FitOptions& fit) {
  // Compiling for sizes only: no weight values are copied (Graph::ShapesOnly).
  const Graph shapes = graph.ShapesOnly();
  std::map<std::string, MemoryFlowResult> flows;  // FlowKey -> the flow's result
  Cluster planning = cluster;
  std::vector<const Device*> devices;
  for (const Device& d : cluster.devices) devices.push_back(&d);
  std::string last_overrun;
  // Devices whose convs keep raw-size weights (no Winograd). A device over
  // its RAM first tries that (same plan, slower 3x3 convs on it, up to
  // 0.44x of their Winograd weight bytes saved) before the planner is asked
  // to put less on it: rounds that only add such devices are not re-plans.
  std::set<int> compact;
  // Devices whose WHOLE layers go through the one-device memory flow (tried
  // after compact weights, before a re-plan moves work elsewhere).
  std::set<int> tiled;
  for (int attempt = 0; attempt <= fit.max_replans;) {
    auto plan = BuildPlan(graph, layers, planning, options);
    if (!plan.ok()) {
      // The planner's own model gave up on the tightened capacities: the
      // overrun that made us tighten them is the honest reason.
      if (attempt > 0 && plan.status().code() == StatusCode::kResourceExhausted)
        return Status::ResourceExhausted("no plan fits " + cluster.origin + " after " + std::to_string(attempt) +
                                         " re-plans: " + last_overrun + "; add devices or use larger ones");
      return plan.status();
    }
    for (int d : compact) plan->loads[d].compact_weights = true;
    for (int d : tiled)
      TS_RETURN_IF_ERROR(fit.parts_time ? PartsDeviceLayers(shapes, layers, d, fit, &*plan)
                                        : TileDeviceLayers(shapes, layers, d, fit, &flows, &*plan));
    TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(shapes, ToPartitionPlan(*plan)));
    std::vector<Overrun> overruns;
    TS_ASSIGN_OR_RETURN(auto sizes, SizePrograms(compiled.programs, devices, fit.memory, &overruns));
    if (overruns.empty()) {
      plan->cluster = cluster;
      if (!compact.empty()) PriceCompactWeights(layers, compact, &*plan);
      PriceRequest(graph, &*plan);
      FillPromises(sizes, &*plan);
      if (attempt > 0 || !compact.empty())
        spdlog::info("plan fits every device's RAM after {} re-plan(s), compact weights on {} device(s)", attempt,
                     compact.size());
      return plan;
    }
    last_overrun = DescribeOverruns(overruns, devices);
    bool newly_compact = false;
    for (const Overrun& o : overruns)
      if (compact.insert(o.device).second) {
        newly_compact = true;
        spdlog::info("device {} over its RAM: trying compact weights (no Winograd) on it", devices[o.device]->name);
      }
    if (newly_compact) continue;
    bool newly_tiled = false;
    for (const Overrun& o : overruns)
      if (fit.memory_flow && tiled.insert(o.device).second) {
        newly_tiled = true;
        spdlog::info("device {} over its RAM: trying its layers {} (memory flow, METHODS §6)", devices[o.device]->name,
                     fit.parts_time ? "in parts, chosen by the genetic search"
                                    : "as tiles, row bands or channel slices in turn");
      }
    if (newly_tiled) continue;
    ++attempt;
    if (attempt <= fit.max_replans) spdlog::info("re-planning ({}/{}): {}", attempt, fit.max_replans, last_overrun);
    for (const Overrun& o : overruns) {
      // Shrink what the planner may put on this device by how much the
      // worker's real need exceeds its RAM (at least 5 %, at most half).
      Device& d = planning.devices[o.device];
      const double factor =
          std::clamp(static_cast<double>(o.ram) / static_cast<double>(o.need.total_bytes()), 0.5, 0.95);
      const int64_t cap = static_cast<int64_t>(static_cast<double>(std::min(d.ram_bytes, o.ram)) * factor);
      d.ram_bytes = cap;
      d.flash_bytes = std::min(d.flash_bytes, cap);  // a Linux worker holds its weights in RAM
    }
  }
  return Status::ResourceExhausted("no plan fits " + cluster.origin + " after " + std::to_string(fit.max_replans) +
                                   " re-plans: " + last_overrun + "; add devices or use larger ones");
}

}  // namespace tessera
