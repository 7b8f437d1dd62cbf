// Plan -> proto/tessera.proto's Plan message (`tessera plan --out`).
#include <fstream>
#include <cstdio>

#include "planner/plan.h"
#include "proto/tessera.pb.h"

namespace tessera {

namespace {

proto::LayerScheme SchemeToProto(const std::string& s) {
  if (s == "whole") return proto::WHOLE;
  if (s == "ffmt") return proto::FFMT;
  if (s == "fdto") return proto::FDTO;
  if (s == "fdti") return proto::FDTI;
  if (s == "fdt1") return proto::FDT1;
  if (s == "fdt2") return proto::FDT2;
  if (s == "part") return proto::PART;
  return proto::LAYER_SCHEME_UNSPECIFIED;
}

proto::Objective ObjectiveToProto(Objective o) {
  switch (o) {
    case Objective::kMemory: return proto::MEMORY;
    case Objective::kCommunication: return proto::COMMUNICATION;
    case Objective::kLatency: return proto::LATENCY;
    case Objective::kThroughput: return proto::THROUGHPUT;
  }
  return proto::OBJECTIVE_UNSPECIFIED;
}

int64_t Limit(int64_t bytes) { return bytes == kUnlimitedBytes ? 0 : bytes; }

}  // namespace

Status WritePlanProto(const Plan& plan, const std::string& path) {
  proto::Plan p;
  p.set_model_name(plan.model_name);
  p.set_model_layers(plan.model_layers);
  p.set_model_weights(plan.model_weights);
  p.set_model_macs(plan.model_macs);
  p.set_objective(ObjectiveToProto(plan.objective));
  for (int i = 0; i < plan.cluster.size(); ++i) {
    const Device& d = plan.cluster.devices[i];
    const DeviceLoad& load = plan.loads[i];
    auto* pd = p.add_devices();
    pd->set_name(d.name);
    pd->set_kind(DeviceKindName(d.kind));
    pd->set_address(d.address);
    pd->set_serial(d.serial);
    pd->set_baud(d.baud);
    pd->set_via(d.via);
    pd->set_ram_bytes(Limit(d.ram_bytes));
    pd->set_flash_bytes(Limit(d.flash_bytes));
    pd->set_macs_per_s(d.macs_per_s);
    pd->set_weight_bytes(load.weight_bytes);
    pd->set_peak_buffer_bytes(load.peak_buffer_bytes);
    pd->set_compute_share(load.compute_share);
    pd->set_sent_bytes(load.sent_bytes);
    pd->set_received_bytes(load.received_bytes);
    pd->set_compact_weights(load.compact_weights);
  }
  for (const auto& a : plan.layers) {
    auto* pl = p.add_layers();
    pl->set_index(a.index);
    pl->set_name(a.name);
    pl->set_op(a.op);
    pl->set_scheme(SchemeToProto(a.scheme));
    for (int d : a.devices) pl->add_devices(d);
    for (int64_t s : a.split) pl->add_split(s);
    for (int64_t g : a.grid) pl->add_grid(g);
    pl->set_split_axis(a.split_axis);
    pl->set_stack_start(a.stack_start);
  }
  p.set_switch_layer(plan.switch_layer);
  p.set_footprint_single_bytes(static_cast<int64_t>(plan.footprint_single_bytes));
  p.set_footprint_per_device_bytes(static_cast<int64_t>(plan.footprint_per_device_bytes));
  p.set_footprint_plan_bytes(plan.footprint_plan_bytes);
  p.set_communication_all_fdto_values(plan.communication_all_fdto_values);
  p.set_communication_plan_values(plan.communication_plan_values);
  p.set_latency_s(plan.latency_s);
  p.set_throughput_per_s(plan.throughput_per_s);
  auto* s = p.mutable_solver();
  s->set_name(plan.solver.name);
  s->set_optimal(plan.solver.optimal);
  s->set_seconds(plan.solver.seconds);
  s->set_nodes(plan.solver.nodes);
  // The id names the plan's content (not its timing): hash of the layers and devices.
  proto::Plan content;
  *content.mutable_layers() = p.layers();
  *content.mutable_devices() = p.devices();
  std::string bytes;
  content.SerializeToString(&bytes);
  uint64_t hash = 14695981039346656037ULL;  // FNV-1a: same id on every platform
  for (unsigned char ch : bytes) hash = (hash ^ ch) * 1099511628211ULL;
  char id[32];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(hash));
  p.set_id(id);

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IOError("cannot write plan to " + path + "; check the directory exists and is writable");
  if (!p.SerializeToOstream(&out)) return Status::IOError("writing plan to " + path + " failed");
  return Status::OK();
}

}  // namespace tessera
