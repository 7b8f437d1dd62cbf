#include "partition/graph/halo.h"

#include <algorithm>
#include <numeric>

#include "partition/graph/op_traits.h"

namespace tessera {

namespace {

// A Resize of H and W as a SpatialMap::kResize (resize_map.h). Scales as the
// kernel reads them: attr "scales", else a constant scales input, else out/in.
Result<SpatialWindow> ResizeWindow(const Graph& graph, const Node& node, const Shape& in, const Shape& out,
                                   SpatialWindow w) {
  const std::string label = "node '" + node.name + "' (Resize)";
  const std::string mode = node.attrs.String("mode", "nearest");
  const std::string transform = node.attrs.String("coordinate_transformation_mode", "half_pixel");
  const std::string rounding = node.attrs.String("nearest_mode", "round_prefer_floor");
  if (Status s = CheckResizeModes(mode, transform, rounding); !s.ok())
    return Status::NotSupported(label + " cannot be tiled: " + s.message());
  if (mode == "linear" && node.attrs.Int("antialias", 0) != 0)
    return Status::NotSupported(label + " antialiases and cannot be tiled");
  if (in[0] != out[0] || in[1] != out[1])
    return Status::NotSupported(label + " resizes the batch or channel axis and cannot be tiled");
  std::vector<double> scales = node.attrs.Floats("scales");
  const size_t scales_input = node.inputs.size() == 2 ? 1 : 2;
  if (scales.empty() && scales_input < node.inputs.size() && node.inputs[scales_input] >= 0) {
    auto it = graph.constants.find(node.inputs[scales_input]);
    if (it != graph.constants.end()) scales.assign(it->second.values.begin(), it->second.values.end());
  }
  if (!scales.empty() && scales.size() != 4) return Status::NotSupported(label + " has no scale per dim");
  w.map = SpatialMap::kResize;
  for (int a = 0; a < 2; ++a) {
    auto axis = MakeResizeAxis(mode == "linear", transform, rounding, scales, 2 + a, in[2 + a], out[2 + a]);
    if (!axis.ok()) return Status::NotSupported(label + " cannot be tiled: " + axis.status().message());
    w.resize[a] = *std::move(axis);
  }
  w.macs_per_output = mode == "linear" ? 3 * out[1] : 0;  // metrics.cc: three lerps, or a copy
  return w;
}

// A 2-D ConvTranspose as a SpatialMap::kTransposed (halo.h). Weights (C, M/g, kH, kW).
Result<SpatialWindow> TransposedWindow(const Graph& graph, const Node& node, const Shape& out, SpatialWindow w) {
  const std::string label = "node '" + node.name + "' (ConvTranspose)";
  if (node.inputs.size() < 2 || node.inputs[1] < 0 || !graph.IsConstant(node.inputs[1]))
    return Status::NotSupported(label + " has no constant weights and cannot be tiled");
  const Shape& ws = graph.values[node.inputs[1]].shape;
  const auto s = node.attrs.Ints("strides", {1, 1});
  const auto d = node.attrs.Ints("dilations", {1, 1});
  const auto p = node.attrs.Ints("pads", {0, 0, 0, 0});
  if (ws.size() != 4 || s.size() != 2 || d.size() != 2 || p.size() != 4)
    return Status::NotSupported(label + ": only 2-D ConvTranspose can be tiled");
  if (s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1)
    return Status::NotSupported(label + ": strides and dilations below 1 cannot be tiled");
  w.map = SpatialMap::kTransposed;
  for (int a = 0; a < 2; ++a) {
    w.kernel[a] = ws[2 + a];
    w.stride[a] = s[a];
    w.dilation[a] = d[a];
    w.pad_begin[a] = p[a];
  }
  // R / (H_out·W_out): the MACs scale with the input, spread over the output.
  const int64_t positions = std::max<int64_t>(1, out[2] * out[3]);
  w.macs_per_output = std::max<int64_t>(1, w.in_size[0] * w.in_size[1] * ws[0] * ws[1] * ws[2] * ws[3] / positions);
  return w;
}

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The hull of the inputs of a ConvTranspose that reach outputs `out` (halo.h).
Range1D TransposedInputRange(const SpatialWindow& w, int a, Range1D out) {
  const int64_t s = w.stride[a], p = w.pad_begin[a], n = w.in_size[a];
  int64_t lo = n, hi = -1;
  for (int64_t j = 0; j < w.kernel[a]; ++j) {
    const int64_t first = std::max<int64_t>(0, -FloorDiv(-(out.begin + p - j * w.dilation[a]), s));
    const int64_t last = std::min(n - 1, FloorDiv(out.end - 1 + p - j * w.dilation[a], s));
    if (first <= last) lo = std::min(lo, first), hi = std::max(hi, last);
  }
  if (hi < 0) {  // nothing reaches these outputs: one row, all dropped
    const int64_t row = std::clamp<int64_t>(FloorDiv(out.begin + p, s), 0, n - 1);
    return {row, row + 1};
  }
  return {lo, hi + 1};
}

}  // namespace

Range1D InputRangeOf(const SpatialWindow& w, int a, Range1D out) {
  if (w.map == SpatialMap::kResize) {
    Range1D r;
    ResizeInputRange(w.resize[a], out.begin, out.end, &r.begin, &r.end);
    return r;
  }
  if (w.map == SpatialMap::kTransposed) return TransposedInputRange(w, a, out);
  return {out.begin * w.stride[a] - w.pad_begin[a],
          (out.end - 1) * w.stride[a] + (w.kernel[a] - 1) * w.dilation[a] + 1 - w.pad_begin[a]};
}

int64_t MaxInputSpan(const SpatialWindow& w, int a, int64_t out_len) {
  out_len = std::clamp<int64_t>(out_len, 1, std::max<int64_t>(1, w.out_size[a]));
  if (w.map == SpatialMap::kWindow)
    return std::min(w.in_size[a], (out_len - 1) * w.stride[a] + (w.kernel[a] - 1) * w.dilation[a] + 1);
  // A Resize's or ConvTranspose's span varies with the position (rounding,
  // stride phase): one pass over the positions finds the largest.
  int64_t most = 0;
  for (int64_t o0 = 0; o0 + out_len <= w.out_size[a]; ++o0)
    most = std::max(most, InputRangeOf(w, a, {o0, o0 + out_len}).size());
  return std::min(w.in_size[a], most);
}

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
  if (node.op == "Resize") return ResizeWindow(graph, node, in, out, w);
  if (node.op == "ConvTranspose") return TransposedWindow(graph, node, out, w);
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
      const Range1D unclipped = InputRangeOf(w, a, want[a]);
      const int64_t start = unclipped.begin, end = unclipped.end;
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
