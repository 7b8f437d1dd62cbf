#include "partition/graph/halo.h"

#include <algorithm>
#include <numeric>

#include "partition/graph/op_traits.h"

namespace tessera {

Result<SpatialWindow> SpatialWindowOf(const Graph& graph, const Node& node) {
  auto activations = graph.ActivationInputs(node);
  if (activations.size() != 1 || node.outputs.size() != 1)
    return Status::NotSupported("node '" + node.name + "' (" + node.op +
                                ") has several activation inputs and cannot be tiled inside an FFMT stack");
  const Shape& in = graph.values[activations[0]].shape;
  const Shape& out = graph.values[node.outputs[0]].shape;
  if (in.size() != 4 || out.size() != 4)
    return Status::NotSupported("node '" + node.name + "' (" + node.op + ") is not a 4-D NCHW feature map layer");
  SpatialWindow w;
  w.in_size[0] = in[2], w.in_size[1] = in[3];
  w.out_size[0] = out[2], w.out_size[1] = out[3];
  const bool conv = node.op == "Conv";
  if (conv || node.op == "MaxPool" || node.op == "AveragePool") {
    std::vector<int64_t> k = node.attrs.Ints("kernel_shape");
    if (conv && k.empty()) {
      const Shape& ws = graph.values[node.inputs.at(1)].shape;
      k = {ws.at(2), ws.at(3)};
    }
    if (k.size() != 2) return Status::NotSupported("node '" + node.name + "': only 2-D windows can be tiled");
    auto s = node.attrs.Ints("strides", {1, 1});
    auto d = node.attrs.Ints("dilations", {1, 1});
    auto p = node.attrs.Ints("pads", {0, 0, 0, 0});
    for (int a = 0; a < 2; ++a) {
      w.kernel[a] = k[a];
      w.stride[a] = s.at(a);
      w.dilation[a] = d.at(a);
      w.pad_begin[a] = p.at(a);
    }
    if (conv) {
      const Shape& ws = graph.values[node.inputs.at(1)].shape;  // (O, C/g, kH, kW)
      w.macs_per_output = ws.at(0) * ws.at(1) * ws.at(2) * ws.at(3);
    } else {
      w.macs_per_output = out[1] * k[0] * k[1];
    }
    return w;
  }
  if (TraitsOf(node.op).spatial == SpatialRule::kPointwise && node.op != "Concat") {
    if (in != out)
      return Status::NotSupported("node '" + node.name + "' (" + node.op + ") changes the shape and cannot be tiled");
    w.macs_per_output = out[1];
    return w;
  }
  return Status::NotSupported("node '" + node.name + "' (" + node.op +
                              ") has no spatial locality and cannot be inside an FFMT stack");
}

Result<std::vector<TileLayerRegion>> BackPropagateTile(const std::vector<SpatialWindow>& stack,
                                                       const TileRegion& output_tile) {
  std::vector<TileLayerRegion> regions(stack.size());
  Range1D want[2] = {output_tile.rows, output_tile.cols};
  for (size_t i = stack.size(); i-- > 0;) {
    const SpatialWindow& w = stack[i];
    TileLayerRegion& r = regions[i];
    Range1D got[2];
    for (int a = 0; a < 2; ++a) {
      if (want[a].begin < 0 || want[a].end > w.out_size[a] || want[a].size() <= 0)
        return Status::InvalidArgument("tile [" + std::to_string(want[a].begin) + "," + std::to_string(want[a].end) +
                                       ") lies outside layer " + std::to_string(i) + "'s output of size " +
                                       std::to_string(w.out_size[a]));
      const int64_t start = want[a].begin * w.stride[a] - w.pad_begin[a];
      const int64_t end = (want[a].end - 1) * w.stride[a] + (w.kernel[a] - 1) * w.dilation[a] + 1 - w.pad_begin[a];
      got[a] = {std::max<int64_t>(0, start), std::min(w.in_size[a], end)};
      r.pad_begin[a] = std::max<int64_t>(0, -start);
      r.pad_end[a] = std::max<int64_t>(0, end - w.in_size[a]);
    }
    r.output = {want[0], want[1]};
    r.input = {got[0], got[1]};
    want[0] = got[0];
    want[1] = got[1];
  }
  return regions;
}

std::vector<int64_t> SplitProportional(int64_t total, const std::vector<double>& weights) {
  if (weights.empty()) return {};
  double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  if (sum <= 0) return SplitProportional(total, std::vector<double>(weights.size(), 1.0));  // no capacity known: equal
  std::vector<int64_t> parts(weights.size(), 0);
  std::vector<std::pair<double, size_t>> remainders;
  int64_t assigned = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = total * weights[i] / sum;
    parts[i] = static_cast<int64_t>(exact);
    assigned += parts[i];
    remainders.push_back({exact - parts[i], i});
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first + 1e-12; });
  for (size_t k = 0; assigned < total; ++k, ++assigned) ++parts[remainders[k % remainders.size()].second];
  return parts;
}

std::vector<TileRegion> GridTiles(int64_t rows, int64_t cols, const std::vector<double>& row_weights,
                                  const std::vector<double>& col_weights) {
  const auto r = SplitProportional(rows, row_weights);
  const auto c = SplitProportional(cols, col_weights);
  std::vector<TileRegion> tiles;
  int64_t r0 = 0;
  for (int64_t rs : r) {
    int64_t c0 = 0;
    for (int64_t cs : c) {
      if (rs > 0 && cs > 0) tiles.push_back({{r0, r0 + rs}, {c0, c0 + cs}});
      c0 += cs;
    }
    r0 += rs;
  }
  return tiles;
}

int64_t HaloMacOverhead(const std::vector<SpatialWindow>& stack, const std::vector<TileRegion>& tiles) {
  int64_t tiled = 0, whole = 0;
  for (const auto& w : stack) whole += w.out_size[0] * w.out_size[1] * w.macs_per_output;
  for (const auto& t : tiles) {
    auto regions = BackPropagateTile(stack, t);
    if (!regions.ok()) continue;
    for (size_t i = 0; i < stack.size(); ++i)
      tiled += (*regions)[i].output.rows.size() * (*regions)[i].output.cols.size() * stack[i].macs_per_output;
  }
  return tiled - whole;
}

}  // namespace tessera
