#include "planner/plan_file.h"

#include <fstream>
#include <sstream>

#include "proto/tessera.pb.h"

namespace tessera {

namespace {
Result<LayerScheme> SchemeFromProto(proto::LayerScheme s, const std::string& where) {
  switch (s) {
    case proto::WHOLE: return LayerScheme::kWhole;
    case proto::FFMT: return LayerScheme::kFfmt;
    case proto::FDTO: return LayerScheme::kFdto;
    case proto::FDTI: return LayerScheme::kFdti;
    case proto::FDT1: return LayerScheme::kFdt1;
    case proto::FDT2: return LayerScheme::kFdt2;
    case proto::PART: return LayerScheme::kPart;
    default: return Status::InvalidArgument(where + " has no scheme");
  }
}
}  // namespace

Result<LoadedPlan> ReadPlanFile(const std::string& path, const Graph& graph) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::FromErrno(errno, path);
  proto::Plan p;
  if (!p.ParseFromIstream(&in))
    return Status::InvalidArgument(path + ": not a tessera plan (write one with `tessera plan ... --out FILE`)");
  if (p.layers_size() != static_cast<int>(graph.nodes.size()))
    return Status::InvalidArgument(path + ": the plan is for a model with " + std::to_string(p.layers_size()) +
                                   " layers ('" + p.model_name() + "'), this model has " +
                                   std::to_string(graph.nodes.size()));
  if (p.devices_size() < 1) return Status::InvalidArgument(path + ": the plan has no devices");
  LoadedPlan out;
  out.id = p.id();
  for (int i = 0; i < p.devices_size(); ++i) {
    out.device_names.push_back(p.devices(i).name());
    if (p.devices(i).compact_weights()) out.plan.compact_weights.insert(i);
  }
  out.plan.num_devices = p.devices_size();
  out.plan.source = 0;
  for (int i = 0; i < p.layers_size(); ++i) {
    const proto::LayerPlan& l = p.layers(i);
    const std::string where = path + ": layer " + std::to_string(i + 1) + " ('" + l.name() + "')";
    if (l.name() != graph.nodes[i].name)
      return Status::InvalidArgument(where + " does not match the model's layer " + std::to_string(i + 1) + " ('" +
                                     graph.nodes[i].name + "'): the plan was made for another model");
    LayerAssignment a;
    TS_ASSIGN_OR_RETURN(a.scheme, SchemeFromProto(l.scheme(), where));
    for (int d : l.devices()) {
      if (d < 0 || d >= p.devices_size())
        return Status::InvalidArgument(where + " names device " + std::to_string(d) + ", the plan has " +
                                       std::to_string(p.devices_size()));
      a.devices.push_back(d);
    }
    if (l.grid_size() == 2) a.grid_rows = l.grid(0), a.grid_cols = l.grid(1);
    if (a.scheme == LayerScheme::kFfmt) {
      // Processed in parts on one device (issue 18 item 3): split_axis "parts".
      a.parts = l.split_axis() == "parts";
      a.stack_start = l.stack_start();
      // FFMT splits are output rows per device (an uneven row grid).
      for (int64_t s : l.split()) a.row_weights.push_back(static_cast<double>(s));
      if (!a.row_weights.empty()) a.grid_rows = static_cast<int64_t>(a.row_weights.size());
    } else {
      a.split.assign(l.split().begin(), l.split().end());
    }
    out.plan.layers.push_back(std::move(a));
  }
  return out;
}

}  // namespace tessera
