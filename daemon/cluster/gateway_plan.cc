#include "daemon/cluster/gateway_plan.h"
#include "planner/layer_profile.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <set>

#include "daemon/cluster/plan_fit.h"
#include "transport/tls/content_hash.h"
#include "planner/plan_file.h"
#include "util/process_memory.h"
#include "partition/graph/metrics.h"
#include "partition/compile/program_compiler.h"
#include "planner/cluster.h"
#include "planner/plan.h"

namespace tessera {

Result<ServedPlan> PrepareServedPlan(const Graph& graph, const Cluster& cluster, const ServePlanOptions& options) {
  ServedPlan served;
  std::string plan_path = options.plan_path;
  if (plan_path.empty()) {
    // Plan for the devices that answer now: Linux workers, and MCUs whose
    // via worker serves them at the address the cluster file gives.
    std::vector<WorkerEndpoint> all;
    for (const auto& d : cluster.devices) all.push_back({d.name, d.address});
    std::vector<bool> up = options.only_healthy ? ProbeWorkers(all, options.security, options.probe_timeout)
                                                : std::vector<bool>(all.size(), true);
    Cluster live = cluster;
    live.devices.clear();
    live.links.clear();
    for (size_t i = 0; i < cluster.devices.size(); ++i) {
      if (cluster.devices[i].address.empty()) {
        spdlog::warn("{} {} has no address in {}; planning without it", DeviceKindName(cluster.devices[i].kind),
                     cluster.devices[i].name, cluster.origin);
        continue;
      }
      if (!up[i]) {
        spdlog::warn("worker {} ({}) does not answer; planning without it", cluster.devices[i].name,
                     cluster.devices[i].address);
        continue;
      }
      live.devices.push_back(cluster.devices[i]);
    }
    if (live.devices.empty()) return Status::Unavailable("no worker of " + cluster.origin + " answers Health");
    for (const auto& [pair, link] : cluster.links) {
      const int a = live.Find(cluster.devices[pair.first].name), b = live.Find(cluster.devices[pair.second].name);
      if (a >= 0 && b >= 0) live.links[{std::min(a, b), std::max(a, b)}] = link;
    }
    PlanOptions po;
    TS_ASSIGN_OR_RETURN(po.objective, ParseObjective(options.objective));
    FitOptions fit;
    fit.memory = options.memory;
    std::vector<LayerFigures> layers = ComputeLayerFigures(graph);
    TS_ASSIGN_OR_RETURN(const std::string time_model,
                        ApplyProfiles(options.layer_profile, options.tile_profile, &layers, options.compact_profile));
    TS_ASSIGN_OR_RETURN(Plan plan, PlanWithinMemory(graph, layers, live, po, fit));
    plan.time_model = time_model;
    served.table = FormatPlanTable(plan);
    served.predicted_cost = ObjectiveCost(plan);
    for (const auto& l : plan.loads) served.predicted_sent_bytes.push_back(l.sent_bytes);
    std::filesystem::create_directories(options.work_dir.empty() ? "." : options.work_dir);
    plan_path = (std::filesystem::path(options.work_dir.empty() ? "." : options.work_dir) / "plan.pb").string();
    TS_RETURN_IF_ERROR(WritePlanProto(plan, plan_path));
  }
  TS_ASSIGN_OR_RETURN(LoadedPlan loaded, ReadPlanFile(plan_path, graph));
  served.plan_id = loaded.id;
  served.device_names = loaded.device_names;
  served.plan = loaded.plan;
  std::vector<const Device*> devices;
  std::vector<int> cluster_index;
  for (const auto& name : loaded.device_names) {
    const int i = cluster.Find(name);
    cluster_index.push_back(i);
    if (i < 0)
      return Status::InvalidArgument(plan_path + " names device '" + name + "', which " + cluster.origin + " lacks");
    if (cluster.devices[i].address.empty())
      return Status::InvalidArgument(cluster.origin + ": device '" + name + "' has no gRPC address");
    const Device& device = cluster.devices[i];
    // An MCU's frames and Runs come from the worker it hangs off (its
    // process, its certificate).
    served.workers.push_back(
        {name, device.address, device.kind == DeviceKind::kMcu && !device.via.empty() ? device.via : name});
    devices.push_back(&cluster.devices[i]);
  }
  if (!options.model_fingerprint.empty()) {
    std::string deployment = options.model_fingerprint;
    for (const WorkerEndpoint& w : served.workers) deployment += "\n" + w.name + " " + w.address + " " + w.identity;
    served.plan_id = loaded.id + "-" + Sha256Hex(deployment).substr(0, 12);
  }
  for (size_t d = 0; d < devices.size(); ++d)
    if (devices[d]->kind == DeviceKind::kMcu) served.compile.contiguous_io_devices.insert(static_cast<int>(d));
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, loaded.plan, served.compile));
  served.mcu_ports = DirectMcuPorts(cluster, cluster_index);
  int direct = 0;
  for (DeviceProgram& p : compiled.programs) direct += MarkDirectMcuTransfers(served.mcu_ports, &p);
  if (direct > 0) spdlog::info("{} transfer steps go over direct MCU<->MCU UARTs", direct);
  // Nothing is deployed unless every worker's promise fits its ram: (issue 11).
  auto fits = CheckProgramsFit(compiled.programs, devices, options.memory);
  if (!fits.ok()) return fits.status().WithContext(plan_path);
  served.memory = std::move(*fits);
  for (const Device* device : devices) served.ram_bytes.push_back(device->ram_bytes);
  if (const double rate = cluster.GatewayBytesPerSecond(); rate > 0)
    served.request_link_s = static_cast<double>(ModelRequestBytes(graph)) / rate;
  served.programs = std::move(compiled.programs);
  served.halo_mac_overhead = compiled.halo_mac_overhead;
  return served;
}

Result<std::string> ModelFingerprint(const ModelSource& model) {
  std::string parts;
  TS_ASSIGN_OR_RETURN(const std::string model_hash, Sha256FileHex(model.path));
  parts += "model " + model_hash + "\n";
  if (!model.options.weights_path.empty()) {
    TS_ASSIGN_OR_RETURN(const std::string weights_hash, Sha256FileHex(model.options.weights_path));
    parts += "weights " + weights_hash + "\n";
  }
  for (const std::string& with : model.with_paths) {
    TS_ASSIGN_OR_RETURN(const std::string with_hash, Sha256FileHex(with));
    parts += "with " + with_hash + "\n";
  }
  parts += "seed " + std::to_string(model.options.seed) + "\nbatch " + std::to_string(model.options.batch) + "\n";
  for (const auto& [name, shape] : model.options.input_shapes) parts += "input " + name + " " + ShapeToString(shape) + "\n";
  return Sha256Hex(parts);
}

namespace {

// The windows of CompileDeviceProgramWithWeights: names of the nodes that
// `device` runs a part of, grouped in node order so that each group's
// weights (whole tensors, as imported) stay within `window_bytes` (a node
// larger than that is a window of its own). Largest window first: a window
// is held whole beside the program built so far, which is smallest at the
// start (YOLOv2 on 3 devices: 125 MiB peak instead of 152 MiB in node order).
std::vector<std::set<std::string>> WeightWindows(const Graph& shapes, const PartitionPlan& plan, int device,
                                                 int64_t window_bytes) {
  std::vector<std::set<std::string>> windows;
  std::vector<int64_t> window_sizes;
  int64_t bytes_in_last = 0;
  for (size_t n = 0; n < shapes.nodes.size(); ++n) {
    const auto& devices = plan.layers[n].devices;
    if (std::find(devices.begin(), devices.end(), device) == devices.end()) continue;
    int64_t bytes = 0;
    for (int v : shapes.nodes[n].inputs)
      if (v >= 0 && shapes.IsConstant(v)) bytes += NumElements(shapes.values[v].shape) * 4;
    if (bytes == 0) continue;
    if (windows.empty() || (bytes_in_last > 0 && bytes_in_last + bytes > window_bytes)) {
      windows.emplace_back();
      window_sizes.push_back(0);
      bytes_in_last = 0;
    }
    windows.back().insert(shapes.nodes[n].name);
    bytes_in_last += bytes;
    window_sizes.back() = bytes_in_last;
  }
  std::vector<size_t> order(windows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return window_sizes[a] > window_sizes[b]; });
  std::vector<std::set<std::string>> largest_first;
  for (size_t i : order) largest_first.push_back(std::move(windows[i]));
  return largest_first;
}

// Moves the weight values `from` has into `into`, which has the same steps
// and subgraphs (the same plan compiled from the same graph structure).
Status MoveWeightValues(DeviceProgram from, DeviceProgram* into) {
  if (from.subgraphs.size() != into->subgraphs.size() || from.steps.size() != into->steps.size())
    return Status::Internal("device " + std::to_string(into->device) +
                            ": the program compiled with weights differs in structure from the one without");
  for (size_t s = 0; s < from.subgraphs.size(); ++s)
    for (auto& [id, data] : from.subgraphs[s].constants) {
      if (data.values.empty()) continue;
      auto it = into->subgraphs[s].constants.find(id);
      if (it == into->subgraphs[s].constants.end() || it->second.shape != data.shape)
        return Status::Internal("device " + std::to_string(into->device) + ": weight '" +
                                from.subgraphs[s].values[id].name + "' of subgraph '" + from.subgraphs[s].name +
                                "' has no counterpart of the same shape");
      if (it->second.values.empty()) it->second.values = std::move(data.values);
    }
  // The figures of an integer conv's split that the compiler takes from its
  // weight values (program_compiler.cc IntegerMergeOf): only a window
  // holding that conv's weights has them.
  for (size_t s = 0; s < from.subgraphs.size(); ++s) {
    auto& into_nodes = into->subgraphs[s].nodes;
    const auto& from_nodes = from.subgraphs[s].nodes;
    if (from_nodes.size() != into_nodes.size())
      return Status::Internal("device " + std::to_string(into->device) + ": subgraph '" + from.subgraphs[s].name +
                              "' differs in its nodes between the two compiles");
    for (size_t n = 0; n < from_nodes.size(); ++n)
      for (const char* attr : {"int8_row_scales", "int8_requant_mult"})
        if (from_nodes[n].attrs.Has(attr) && !into_nodes[n].attrs.Has(attr))
          into_nodes[n].attrs.Set(attr, from_nodes[n].attrs.all().at(attr));
  }
  return Status::OK();
}

}  // namespace

Result<Graph> ImportModelSource(const ModelSource& model, MergeReport* report) {
  ImportOptions io = model.options;
  io.shapes_only = false;
  io.values_for_nodes.reset();
  std::vector<Graph> models;
  TS_ASSIGN_OR_RETURN(Graph first, ImportModel(model.path, io));
  if (model.with_paths.empty()) return first;
  models.push_back(std::move(first));
  io.weights_path.clear();  // the darknet .weights file is `path`'s
  for (const std::string& with : model.with_paths) {
    auto m = ImportModel(with, io);
    if (!m.ok()) return m.status().WithContext("--with-model");
    models.push_back(std::move(*m));
  }
  return MergeModels(models, report);
}

Result<DeviceProgram> CompileDeviceProgramWithWeights(const Graph& shapes, const PartitionPlan& plan, int device,
                                                      const ModelSource& model, int64_t window_bytes,
                                                      const CompileOptions& options) {
  CompileOptions co = options;
  co.values_for_device = device;
  if (!model.with_paths.empty()) {
    // Merged models: imported whole (their values decide what is shared),
    // then the device's program with its weights only.
    TS_ASSIGN_OR_RETURN(Graph merged, ImportModelSource(model));
    if (merged.nodes.size() != shapes.nodes.size())
      return Status::FailedPrecondition("the merged models now have " + std::to_string(merged.nodes.size()) +
                                        " layers, the served graph has " + std::to_string(shapes.nodes.size()) +
                                        " (was a model file changed?)");
    TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(merged, plan, co));
    if (device < 0 || device >= static_cast<int>(compiled.programs.size()))
      return Status::InvalidArgument("the plan has no device " + std::to_string(device));
    return std::move(compiled.programs[device]);
  }
  TS_ASSIGN_OR_RETURN(CompiledPlan skeleton, CompilePlan(shapes, plan, co));
  if (device < 0 || device >= static_cast<int>(skeleton.programs.size()))
    return Status::InvalidArgument("the plan has no device " + std::to_string(device));
  DeviceProgram program = std::move(skeleton.programs[device]);
  skeleton.programs.clear();
  for (auto& nodes : WeightWindows(shapes, plan, device, window_bytes)) {
    ImportOptions io = model.options;
    io.shapes_only = false;
    io.values_for_nodes = std::move(nodes);
    TS_ASSIGN_OR_RETURN(Graph weighted, ImportModel(model.path, io));
    if (weighted.nodes.size() != shapes.nodes.size())
      return Status::FailedPrecondition(model.path + " now imports to " + std::to_string(weighted.nodes.size()) +
                                        " layers, the served graph has " + std::to_string(shapes.nodes.size()) +
                                        " (was the model file changed?)");
    TS_ASSIGN_OR_RETURN(CompiledPlan window, CompilePlan(weighted, plan, co));
    TS_RETURN_IF_ERROR(MoveWeightValues(std::move(window.programs[device]), &program));
    const ProcessMemory m = ReadProcessMemory();
    spdlog::debug("device {}: weights of {} layers read; RSS {:.1f} MiB, peak {:.1f} MiB", device,
                  io.values_for_nodes->size(), m.rss_bytes / 1048576.0, m.peak_rss_bytes / 1048576.0);
  }
  for (const Graph& sub : program.subgraphs)
    for (const auto& [id, data] : sub.constants)
      if (static_cast<int64_t>(data.values.size()) != NumElements(data.shape))
        return Status::Internal("device " + std::to_string(device) + ": weight '" + sub.values[id].name +
                                "' of subgraph '" + sub.name + "' got no values from " + model.path);
  return program;
}

int64_t ServedCluster::HeldBytes(size_t d, int in_flight) const {
  if (d >= weight_bytes.size()) return 0;
  const int64_t working = d < working_bytes.size() ? working_bytes[d] : 0;
  return std::max(weight_bytes[d] + working + std::max(in_flight, 1) * request_bytes[d], load_peak_bytes[d]);
}

ServedCluster ServedClusterOf(const ServedPlan& plan) {
  ServedCluster c{plan.plan_id, plan.plan.source, plan.workers, PlannedLinkBytes(plan.programs), plan.predicted_cost};
  c.request_link_s = plan.request_link_s;
  if (plan.memory.size() == plan.workers.size() && plan.ram_bytes.size() == plan.workers.size())
    for (size_t d = 0; d < plan.workers.size(); ++d) {
      // An MCU (not sized here: in_flight 0) holds one program in its own RAM.
      const DeviceMemory& m = plan.memory[d];
      const bool mcu = m.in_flight == 0;
      c.weight_bytes.push_back(mcu ? 0 : m.weight_bytes);
      c.working_bytes.push_back(mcu ? 0 : m.compute_slots * m.working_bytes);
      c.request_bytes.push_back(mcu ? 0 : m.request_bytes());
      c.load_peak_bytes.push_back(mcu ? 0 : m.load_peak_bytes);
      c.baseline_bytes.push_back(m.baseline_bytes);
      c.ram_bytes.push_back(plan.ram_bytes[d]);
    }
  return c;
}

Result<ServedCluster> DeployServedPlan(const ServedPlan& plan, const TransportSecurity& security) {
  TS_RETURN_IF_ERROR(
      DeployPrograms(plan.programs, plan.plan_id, plan.plan.source, plan.workers, security, nullptr).status());
  return ServedClusterOf(plan);
}

Result<ServedCluster> DeployServedPlan(const ServedPlan& plan, const Graph& shapes, const ModelSource& model,
                                       const TransportSecurity& security, const DeployOptions& deploy) {
  auto program = [&](int d) -> Result<DeviceProgram> {
    TS_ASSIGN_OR_RETURN(DeviceProgram p,
                        CompileDeviceProgramWithWeights(shapes, plan.plan, d, model, kWeightWindowBytes, plan.compile));
    MarkDirectMcuTransfers(plan.mcu_ports, &p);
    return p;
  };
  TS_RETURN_IF_ERROR(
      DeployProgramsOneByOne(program, plan.plan_id, plan.plan.source, plan.workers, security, deploy).status());
  return ServedClusterOf(plan);
}

Result<ServedPlan> PrepareLoopbackPlan(const Graph& graph, const std::vector<WorkerEndpoint>& workers,
                                       const ServePlanOptions& options) {
  Cluster cluster = UniformCluster(static_cast<int>(workers.size()));
  cluster.origin = "loopback cluster";
  for (size_t i = 0; i < workers.size(); ++i) {
    cluster.devices[i].name = workers[i].name;
    cluster.devices[i].address = workers[i].address;
    if (options.loopback_ram_bytes > 0) cluster.devices[i].ram_bytes = options.loopback_ram_bytes;
  }
  return PrepareServedPlan(graph, cluster, options);
}

}  // namespace tessera
