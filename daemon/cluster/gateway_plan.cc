#include "daemon/cluster/gateway_plan.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "daemon/cluster/plan_fit.h"
#include "planner/plan_file.h"
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
    TS_ASSIGN_OR_RETURN(Plan plan, PlanWithinMemory(graph, ComputeLayerFigures(graph), live, po, fit));
    served.table = FormatPlanTable(plan);
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
  for (const auto& name : loaded.device_names) {
    const int i = cluster.Find(name);
    if (i < 0)
      return Status::InvalidArgument(plan_path + " names device '" + name + "', which " + cluster.origin + " lacks");
    if (cluster.devices[i].address.empty())
      return Status::InvalidArgument(cluster.origin + ": device '" + name + "' has no gRPC address");
    served.workers.push_back({name, cluster.devices[i].address});
    devices.push_back(&cluster.devices[i]);
  }
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, CompilePlan(graph, loaded.plan));
  // Nothing is deployed unless every worker's promise fits its ram: (issue 11).
  auto fits = CheckProgramsFit(compiled.programs, devices, options.memory);
  if (!fits.ok()) return fits.status().WithContext(plan_path);
  served.memory = std::move(*fits);
  served.programs = std::move(compiled.programs);
  served.halo_mac_overhead = compiled.halo_mac_overhead;
  return served;
}

Result<ServedCluster> DeployServedPlan(const ServedPlan& plan, const TransportSecurity& security) {
  TS_RETURN_IF_ERROR(
      DeployPrograms(plan.programs, plan.plan_id, plan.plan.source, plan.workers, security, nullptr).status());
  return ServedCluster{plan.plan_id, plan.plan.source, plan.workers, PlannedLinkBytes(plan.programs)};
}

Result<ServedPlan> PrepareLoopbackPlan(const Graph& graph, const std::vector<WorkerEndpoint>& workers,
                                       const ServePlanOptions& options) {
  Cluster cluster = UniformCluster(static_cast<int>(workers.size()));
  cluster.origin = "loopback cluster";
  for (size_t i = 0; i < workers.size(); ++i) {
    cluster.devices[i].name = workers[i].name;
    cluster.devices[i].address = workers[i].address;
  }
  return PrepareServedPlan(graph, cluster, options);
}

}  // namespace tessera
