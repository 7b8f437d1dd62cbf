#include "partition/graph/int8_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "partition/graph/quantization.h"

namespace tessera {

namespace {

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Whether every value of the row is float(k) · s for an int8 k; the codes
// into `codes`.
bool Reproduces(const float* row, int64_t per, float s, int8_t* codes) {
  if (!(s > 0.0f) || !std::isfinite(s)) return false;
  for (int64_t i = 0; i < per; ++i) {
    const float k = std::nearbyint(row[i] / s);
    if (!(k >= -128.0f && k <= 127.0f)) return false;  // NaN fails too
    // What a kernel computes from the stored code (k may be −0.0; the code is 0).
    codes[i] = static_cast<int8_t>(k);
    if (!SameBits(static_cast<float>(codes[i]) * s, row[i])) return false;
  }
  return true;
}

// A scale for one row: the largest magnitude m is some code K times s
// (1 <= K <= 128), so s is m / K up to the rounding of the product; the
// neighbours of m / K (two ulps each way) are tried too.
bool RecoverRow(const float* row, int64_t per, float* scale, int8_t* codes) {
  float m = 0.0f;
  for (int64_t i = 0; i < per; ++i) {
    if (!std::isfinite(row[i])) return false;
    m = std::max(m, std::fabs(row[i]));
  }
  if (m == 0.0f) {  // all +0.0 (a −0.0 has no code: float(0) · s is +0.0)
    *scale = 1.0f;
    return Reproduces(row, per, 1.0f, codes);
  }
  for (int K = 128; K >= 1; --K) {
    float below = m / static_cast<float>(K), above = below;
    if (Reproduces(row, per, below, codes)) return *scale = below, true;
    for (int u = 0; u < 2; ++u) {
      below = std::nextafter(below, 0.0f);
      above = std::nextafter(above, INFINITY);
      if (Reproduces(row, per, below, codes)) return *scale = below, true;
      if (Reproduces(row, per, above, codes)) return *scale = above, true;
    }
  }
  return false;
}

}  // namespace

std::optional<Int8Rows> RecoverInt8Rows(const float* values, int64_t rows, int64_t per) {
  if (rows <= 0 || per <= 0) return std::nullopt;
  Int8Rows out;
  out.scales.resize(static_cast<size_t>(rows));
  out.codes.resize(static_cast<size_t>(rows * per));
  for (int64_t r = 0; r < rows; ++r)
    if (!RecoverRow(values + r * per, per, &out.scales[r], out.codes.data() + r * per)) return std::nullopt;
  return out;
}

bool Int8WeightShapeFits(int64_t rows, int64_t per) {
  return rows > 0 && per > 0 && per <= kMaxIntegerDotTerms &&
         Int8Rows::Int8RowsBytes(rows, rows * per) < 4 * rows * per;
}

std::optional<Int8Rows> SmallerAsInt8(const float* values, int64_t rows, int64_t per) {
  if (!Int8WeightShapeFits(rows, per)) return std::nullopt;
  return RecoverInt8Rows(values, rows, per);
}

std::optional<QuantGrid> ConvInputByteGrid(const Graph& g, const Node& conv) {
  if ((conv.op != "Conv" && conv.op != "Gemm") || conv.inputs.empty()) return std::nullopt;
  if (conv.attrs.Has("int8_input_scale")) {
    QuantGrid grid;
    grid.scale = static_cast<float>(conv.attrs.Float("int8_input_scale", 0.0));
    grid.zero_point = static_cast<int32_t>(conv.attrs.Int("int8_input_zero_point", 0));
    grid.qmin = static_cast<int32_t>(conv.attrs.Int("int8_input_qmin", -128));
    grid.qmax = static_cast<int32_t>(conv.attrs.Int("int8_input_qmax", 127));
    return ByteGrid(grid);
  }
  // The producer, through the aliases an MCU program does not copy
  // (Reshape, Flatten, Identity: the same buffer, the same codes).
  int x = conv.inputs[0];
  for (;;) {
    if (x < 0 || x >= static_cast<int>(g.values.size())) return std::nullopt;
    const int producer = g.values[x].producer;
    if (producer < 0 || producer >= static_cast<int>(g.nodes.size())) return std::nullopt;
    const Node& p = g.nodes[producer];
    if ((p.op == "Reshape" || p.op == "Flatten" || p.op == "Identity") && !p.inputs.empty()) {
      x = p.inputs[0];
      continue;
    }
    return ByteGrid(QuantizeDequantizeGrid(p));
  }
}

std::optional<QuantGrid> IntegerConvInputGrid(const Graph& g, const Node& conv) {
  if ((conv.op != "Conv" && conv.op != "Gemm") || conv.inputs.size() < 2) return std::nullopt;
  const int w = conv.inputs[1];
  if (w < 0 || w >= static_cast<int>(g.values.size()) || !g.IsConstant(w)) return std::nullopt;
  const Shape& ws = g.values[w].shape;
  if (conv.op == "Conv") {
    if (ws.size() != 4 || !Int8WeightShapeFits(ws[0], ws[1] * ws[2] * ws[3])) return std::nullopt;
  } else {
    // A dense layer in canonical form (graph.h), Y = X · Wᵀ + b, with one
    // bias value per output (the MCU's dense layer).
    const auto& a = conv.attrs;
    if (ws.size() != 2 || a.Int("transA", 0) != 0 || a.Int("transB", 1) == 0 || a.Float("alpha", 1.0) != 1.0 ||
        a.Float("beta", 1.0) != 1.0 || !Int8WeightShapeFits(ws[0], ws[1]))
      return std::nullopt;
    if (conv.inputs.size() > 2 && conv.inputs[2] >= 0 &&
        (!g.IsConstant(conv.inputs[2]) || NumElements(g.values[conv.inputs[2]].shape) != ws[0]))
      return std::nullopt;
  }
  return ConvInputByteGrid(g, conv);
}

void SetConvInputGrid(const QuantGrid& grid, Node* conv) {
  conv->attrs.Set("int8_input_scale", static_cast<double>(grid.scale));
  conv->attrs.Set("int8_input_zero_point", int64_t{grid.zero_point});
  conv->attrs.Set("int8_input_qmin", int64_t{grid.qmin});
  conv->attrs.Set("int8_input_qmax", int64_t{grid.qmax});
}

int64_t CompactWeightBytes(const float* values, int64_t rows, int64_t per) {
  if (auto q = SmallerAsInt8(values, rows, per)) return q->bytes();
  return 4 * std::max<int64_t>(rows, 0) * std::max<int64_t>(per, 0);
}

Graph WithInt8GridWeights(Graph g) {
  for (const Node& n : g.nodes) {
    if ((n.op != "Conv" && n.op != "Gemm") || n.inputs.size() < 2) continue;
    auto it = g.constants.find(n.inputs[1]);
    if (it == g.constants.end() || it->second.shape.empty() || it->second.shape[0] <= 0) continue;
    TensorData& w = it->second;
    const int64_t rows = w.shape[0], per = static_cast<int64_t>(w.values.size()) / rows;
    for (int64_t r = 0; r < rows; ++r) {
      float m = 0;
      for (int64_t i = 0; i < per; ++i) m = std::max(m, std::fabs(w.values[r * per + i]));
      const QuantGrid grid{m > 0 ? m / 127.0f : 1.0f, 0, -127, 127};
      for (int64_t i = 0; i < per; ++i) w.values[r * per + i] = QuantizeDequantize(w.values[r * per + i], grid);
    }
  }
  return g;
}

Graph WithQdqActivations(const Graph& src) {
  Graph g = src;
  std::vector<Node> nodes = std::move(g.nodes);
  g.nodes.clear();
  std::map<int, int> on_grid;  // value -> its QuantizeDequantize's output
  int k = 0;
  auto qdq = [&](int v) {
    const std::string name = g.values[v].name + "/qdq" + std::to_string(g.values.size());  // unique, also applied twice
    const int y = g.AddValue(name, Shape(g.values[v].shape));
    Node n{name, "QuantizeDequantize", {v}, {y}, {}};
    const bool u8 = k % 4 == 3;
    n.attrs.Set("scale", 0.011 + 0.007 * (k % 5));
    n.attrs.Set("zero_point", int64_t{u8 ? (k % 8 == 7 ? 0 : 128) : (k % 3) * 20 - 20});
    n.attrs.Set("qmin", int64_t{u8 ? 0 : -128});
    n.attrs.Set("qmax", int64_t{u8 ? 255 : 127});
    ++k;
    g.AddNode(std::move(n));
    on_grid[v] = y;
  };
  for (int v : g.inputs) qdq(v);
  for (Node n : nodes) {
    for (int& x : n.inputs)
      if (on_grid.count(x)) x = on_grid[x];
    const std::vector<int> ys = n.outputs;
    g.AddNode(std::move(n));
    for (int y : ys) qdq(y);
  }
  for (int& v : g.outputs) v = on_grid.at(v);
  return g;
}

}  // namespace tessera
