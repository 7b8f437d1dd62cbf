#include "partition/compile/forced_plan.h"

#include <set>

#include "partition/graph/metrics.h"
#include "partition/graph/op_traits.h"
#include "partition/compile/program_compiler.h"

namespace tessera {

namespace {

bool ChannelWise(const Graph& g, const Node& n) { return CheckPerChannel(g, n).ok(); }

LayerAssignment Whole(int d) { return {LayerScheme::kWhole, {d}, {}, 1, 1, {}, {}}; }

}  // namespace

Result<ForcedScheme> ParseForcedScheme(const std::string& t) {
  if (t == "ffmt") return ForcedScheme::kFfmt;
  if (t == "fdto") return ForcedScheme::kFdto;
  if (t == "fdti") return ForcedScheme::kFdti;
  if (t == "pairs") return ForcedScheme::kPairs;
  if (t == "pipeline") return ForcedScheme::kPipeline;
  if (t == "parts") return ForcedScheme::kParts;
  if (t == "halo") return ForcedScheme::kHalo;
  return Status::InvalidArgument("unknown forced scheme '" + t +
                                 "': use ffmt, fdto, fdti, pairs, pipeline, parts or halo");
}

Result<PartitionPlan> MakeForcedPlan(const Graph& g, ForcedScheme scheme, const ForcedPlanOptions& o) {
  if (o.devices < 1) return Status::InvalidArgument("a plan needs at least one device");
  const int L = static_cast<int>(g.nodes.size());
  PartitionPlan plan;
  plan.num_devices = o.devices;
  plan.layers.assign(L, Whole(0));
  std::vector<int> all(o.devices);
  for (int i = 0; i < o.devices; ++i) all[i] = i;
  auto split = [&](LayerScheme s) { return LayerAssignment{s, all, {}, 1, 1, {}, {}}; };
  // Which values are left as in-place channel slices (FDTO/FDT1/PART outputs).
  std::set<int> sliced;
  auto input_sliced = [&](int n) {
    auto acts = g.ActivationInputs(g.nodes[n]);
    return acts.size() == 1 && sliced.count(acts[0]);
  };
  switch (scheme) {
    case ForcedScheme::kFfmt:
    case ForcedScheme::kHalo:
      // Every layer the op traits let into a stack whose output has a row and
      // a column per tile (an SE gate's 1x1 branch, global pools and dense
      // layers run whole between the stacks).
      // A QDQ model's input is quantized whole on the source: its tiles
      // travel as int8 codes (QuantizesModelInput).
      for (int n = 0; n < L; ++n) {
        if (!CheckTileable(g, n).ok() || QuantizesModelInput(g, n)) continue;
        const Shape& y = g.values[g.nodes[n].outputs[0]].shape;
        if (y[2] < o.grid_rows || y[3] < o.grid_cols) continue;
        plan.layers[n] = {LayerScheme::kFfmt, all, {}, o.grid_rows, o.grid_cols, o.row_weights, o.col_weights};
        plan.layers[n].stack_start = scheme == ForcedScheme::kHalo;
      }
      break;
    case ForcedScheme::kParts:
      // The same layers, on the source alone, in grid_rows row bands.
      for (int n = 0; n < L; ++n) {
        if (!CheckTileable(g, n).ok()) continue;
        const Shape& y = g.values[g.nodes[n].outputs[0]].shape;
        if (y[2] < o.grid_rows) continue;
        plan.layers[n] = {LayerScheme::kFfmt, {0}, {}, o.grid_rows, 1, o.row_weights, {}};
        plan.layers[n].parts = true;
      }
      break;
    case ForcedScheme::kFdto:
      for (int n = 0; n < L; ++n) {
        const Node& node = g.nodes[n];
        if (IsWeightSplitLayer(g, node)) plan.layers[n] = split(LayerScheme::kFdto);
        else if (input_sliced(n) && ChannelWise(g, node)) plan.layers[n] = split(LayerScheme::kPart);
        else continue;
        sliced.insert(node.outputs[0]);
      }
      break;
    case ForcedScheme::kFdti:
      for (int n = 0; n < L; ++n)
        if (IsWeightSplitLayer(g, g.nodes[n])) plan.layers[n] = split(LayerScheme::kFdti);
      break;
    case ForcedScheme::kPairs: {
      auto consumers = g.Consumers();
      for (int n = 0; n < L; ++n) {
        if (plan.layers[n].scheme != LayerScheme::kWhole || !IsWeightSplitLayer(g, g.nodes[n])) continue;
        // Follow single-consumer channel-wise layers to the next weight layer.
        std::vector<int> carried;
        int cur = n, next = -1;
        while (true) {
          int v = g.nodes[cur].outputs[0];
          if (consumers[v].size() != 1) break;
          int c = consumers[v][0];
          if (ChannelWise(g, g.nodes[c])) {
            carried.push_back(c);
            cur = c;
            continue;
          }
          if (IsWeightSplitLayer(g, g.nodes[c])) next = c;
          break;
        }
        if (next >= 0) {
          plan.layers[n] = split(LayerScheme::kFdt1);
          for (int c : carried) plan.layers[c] = split(LayerScheme::kPart);
          plan.layers[next] = split(LayerScheme::kFdt2);
        } else {
          plan.layers[n] = split(LayerScheme::kFdto);
        }
      }
      break;
    }
    case ForcedScheme::kPipeline: {
      // Contiguous ranges with about equal MACs per device.
      auto figures = ComputeLayerFigures(g);
      int64_t total = 0;
      for (const auto& f : figures) total += f.R;
      int64_t acc = 0;
      for (int n = 0; n < L; ++n) {
        int d = total > 0 ? static_cast<int>((acc * o.devices) / std::max<int64_t>(1, total)) : n * o.devices / L;
        plan.layers[n] = Whole(std::min(d, o.devices - 1));
        acc += figures[n].R;
      }
      // A stage that ends just before the QuantizeDequantize of its last
      // layer's output takes it along: the tensor then crosses as int8
      // codes (device_program.h WireGrid), a quarter of the float bytes.
      for (int n = 1; n < L; ++n) {
        const Node& q = g.nodes[n];
        const auto acts = g.ActivationInputs(q);
        if (!ByteGrid(QuantizeDequantizeGrid(q)) || acts.size() != 1 || g.values[acts[0]].producer != n - 1) continue;
        int readers = 0;
        for (const Node& r : g.nodes)
          for (int v : g.ActivationInputs(r)) readers += v == acts[0];
        if (readers == 1) plan.layers[n] = plan.layers[n - 1];
      }
      break;
    }
  }
  return plan;
}

}  // namespace tessera
