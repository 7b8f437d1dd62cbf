#include "partition/graph/graph.h"

#include "util/limits.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <set>
#include <sstream>

namespace tessera {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << ']';
  return os.str();
}

namespace {
template <typename T>
const T* Get(const std::map<std::string, AttrValue>& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) return nullptr;
  return std::get_if<T>(&it->second);
}
}  // namespace

int64_t Attributes::Int(const std::string& name, int64_t def) const {
  if (auto* v = Get<int64_t>(map_, name)) return *v;
  if (auto* f = Get<double>(map_, name)) return static_cast<int64_t>(*f);
  return def;
}

double Attributes::Float(const std::string& name, double def) const {
  if (auto* v = Get<double>(map_, name)) return *v;
  if (auto* i = Get<int64_t>(map_, name)) return static_cast<double>(*i);
  return def;
}

std::string Attributes::String(const std::string& name, const std::string& def) const {
  if (auto* v = Get<std::string>(map_, name)) return *v;
  return def;
}

std::vector<int64_t> Attributes::Ints(const std::string& name, std::vector<int64_t> def) const {
  if (auto* v = Get<std::vector<int64_t>>(map_, name)) return *v;
  return def;
}

std::vector<double> Attributes::Floats(const std::string& name, std::vector<double> def) const {
  if (auto* v = Get<std::vector<double>>(map_, name)) return *v;
  return def;
}

int Graph::AddValue(const std::string& value_name, const Shape& shape) {
  Value v;
  v.name = value_name;
  v.shape = shape;
  values.push_back(std::move(v));
  return static_cast<int>(values.size()) - 1;
}

int Graph::AddConstant(const std::string& value_name, TensorData data) {
  Value v;
  v.name = value_name;
  v.shape = data.shape;
  v.constant = true;
  values.push_back(std::move(v));
  int id = static_cast<int>(values.size()) - 1;
  constants[id] = std::move(data);
  return id;
}

int Graph::AddNode(Node node) {
  int index = static_cast<int>(nodes.size());
  for (int out : node.outputs) values.at(out).producer = index;
  nodes.push_back(std::move(node));
  return index;
}

const TensorData* Graph::ConstantData(int value_id) const {
  auto it = constants.find(value_id);
  return it == constants.end() ? nullptr : &it->second;
}

std::vector<int> Graph::ActivationInputs(const Node& node) const {
  std::vector<int> out;
  for (int v : node.inputs)
    if (v >= 0 && !values.at(v).constant) out.push_back(v);
  return out;
}

std::vector<std::vector<int>> Graph::Consumers() const {
  std::vector<std::vector<int>> c(values.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int v : nodes[n].inputs)
      if (v >= 0) c[v].push_back(static_cast<int>(n));
  return c;
}

Status Graph::Validate() const {
  const int nv = static_cast<int>(values.size());
  std::set<std::string> names;
  std::vector<bool> available(values.size(), false);
  // Every tensor within the stated limit (util/limits.h): a model or a
  // program from the wire that claims more is refused here, before anything
  // is allocated for it.
  for (const Value& value : values) {
    const std::string what = "value '" + value.name + "'" +
                             (value.producer >= 0 && value.producer < static_cast<int>(nodes.size())
                                  ? " (output of node '" + nodes[value.producer].name + "')"
                                  : "");
    TS_RETURN_IF_ERROR(CheckedElementCount(value.shape, what).status());
  }
  for (int v : inputs) {
    if (v < 0 || v >= nv) return Status::Internal("graph input id out of range");
    available[v] = true;
  }
  for (int v = 0; v < nv; ++v)
    if (values[v].constant) {
      if (!constants.count(v)) return Status::Internal("constant '" + values[v].name + "' has no data");
      available[v] = true;
    }
  for (size_t n = 0; n < nodes.size(); ++n) {
    const Node& node = nodes[n];
    if (!names.insert(node.name).second)
      return Status::InvalidArgument("two nodes are named '" + node.name + "'");
    for (int v : node.inputs) {
      if (v < 0) continue;  // optional input left out
      if (v >= nv) return Status::Internal("node '" + node.name + "' reads a value id out of range");
      if (!available[v])
        return Status::InvalidArgument("node '" + node.name + "' (" + node.op + ") reads '" + values[v].name +
                                       "' before it is produced (graph not in topological order, or a cycle)");
    }
    for (int v : node.outputs) {
      if (v < 0 || v >= nv) return Status::Internal("node '" + node.name + "' writes a value id out of range");
      if (available[v]) return Status::InvalidArgument("value '" + values[v].name + "' is produced twice");
      if (values[v].producer != static_cast<int>(n))
        return Status::Internal("value '" + values[v].name + "' has a stale producer index");
      available[v] = true;
    }
  }
  for (int v : outputs) {
    if (v < 0 || v >= nv) return Status::Internal("graph output id out of range");
    if (!available[v]) return Status::InvalidArgument("graph output '" + values[v].name + "' is never produced");
  }
  const std::set<int> graph_inputs(inputs.begin(), inputs.end()), graph_outputs(outputs.begin(), outputs.end());
  for (const GraphModel& m : models) {
    for (int v : m.inputs)
      if (!graph_inputs.count(v))
        return Status::InvalidArgument("model '" + m.name + "' of the merged graph names an input it does not have");
    for (int v : m.outputs)
      if (!graph_outputs.count(v))
        return Status::InvalidArgument("model '" + m.name + "' of the merged graph names an output it does not have");
  }
  return Status::OK();
}

Status Graph::SortTopologically() {
  const size_t n = nodes.size();
  std::vector<int> pending(n, 0);
  auto consumers = Consumers();
  std::vector<int> producer(values.size(), -1);
  for (size_t i = 0; i < n; ++i)
    for (int v : nodes[i].outputs) producer[v] = static_cast<int>(i);
  for (size_t i = 0; i < n; ++i)
    for (int v : nodes[i].inputs)
      if (v >= 0 && producer[v] >= 0) ++pending[i];
  // Min-heap on the original index keeps the order stable for graphs that are sorted already.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push(static_cast<int>(i));
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int v : nodes[i].outputs)
      for (int c : consumers[v])
        if (--pending[c] == 0) ready.push(c);
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (pending[i] > 0) return Status::InvalidArgument("graph has a cycle through node '" + nodes[i].name + "'");
  }
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (int i : order) sorted.push_back(std::move(nodes[i]));
  nodes = std::move(sorted);
  for (size_t i = 0; i < n; ++i)
    for (int v : nodes[i].outputs) values[v].producer = static_cast<int>(i);
  return Status::OK();
}

void Graph::RemoveDeadNodes() {
  std::vector<bool> live_value(values.size(), false);
  for (int v : outputs) live_value[v] = true;
  std::vector<bool> keep(nodes.size(), false);
  for (int i = static_cast<int>(nodes.size()) - 1; i >= 0; --i) {
    bool needed = false;
    for (int v : nodes[i].outputs) needed |= live_value[v];
    if (!needed) continue;
    keep[i] = true;
    for (int v : nodes[i].inputs)
      if (v >= 0) live_value[v] = true;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  for (auto& v : values) v.producer = -1;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].outputs) values[v].producer = static_cast<int>(i);
  for (auto it = constants.begin(); it != constants.end();) {
    if (!live_value[it->first]) it = constants.erase(it);
    else ++it;
  }
  // Constants whose data was dropped are no longer constants of this graph;
  // leave their Value entries (ids stay stable) but unmark them.
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].constant && !constants.count(static_cast<int>(v))) values[v].constant = false;
}

int64_t Graph::WeightCount() const {
  std::set<int> used;
  for (const Node& node : nodes)
    for (int v : node.inputs)
      if (v >= 0 && values[v].constant) used.insert(v);
  int64_t total = 0;
  for (int v : used) total += NumElements(values[v].shape);
  return total;
}

Graph Graph::ShapesOnly() const {
  Graph out;
  out.name = name;
  out.values = values;
  out.nodes = nodes;
  out.inputs = inputs;
  out.outputs = outputs;
  out.models = models;
  out.constants.reserve(constants.size());
  for (const auto& [id, data] : constants) out.constants.emplace(id, TensorData{data.shape, {}});
  return out;
}

namespace {
constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Round(uint64_t acc, uint64_t word) { return Rotl(acc + word * kPrime2, 31) * kPrime1; }
}  // namespace

uint64_t DigestValues(const float* data, size_t n) {
  // Four independent multiply-rotate lanes over 32-byte blocks (memory-bound
  // speed), folded, then the tail and the length, then a final mix.
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data);
  size_t bytes = n * sizeof(float);
  uint64_t lane[4] = {kPrime1 + kPrime2, kPrime2, 0, ~kPrime1};
  for (; bytes >= 32; p += 32, bytes -= 32)
    for (int i = 0; i < 4; ++i) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      lane[i] = Round(lane[i], w);
    }
  uint64_t h = Rotl(lane[0], 1) + Rotl(lane[1], 7) + Rotl(lane[2], 12) + Rotl(lane[3], 18);
  for (; bytes >= 4; p += 4, bytes -= 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    h = Round(h, w);
  }
  h ^= static_cast<uint64_t>(n) * kPrime1;
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  return h;
}

std::string ConstantIdentity(const Graph& g, int value_id, bool with_digest) {
  const Value& v = g.values.at(value_id);
  std::string id = v.name + "|" + ShapeToString(v.shape);
  const TensorData* data = g.ConstantData(value_id);
  if (with_digest && data != nullptr && !data->values.empty())
    id += "|" + std::to_string(DigestValues(data->values.data(), data->values.size()));
  return id;
}

std::optional<QuantGrid> QuantizeDequantizeGrid(const Node& node) {
  if (node.op != "QuantizeDequantize") return std::nullopt;
  QuantGrid g;
  g.scale = static_cast<float>(node.attrs.Float("scale", 0.0));
  g.zero_point = static_cast<int32_t>(node.attrs.Int("zero_point", 0));
  g.qmin = static_cast<int32_t>(node.attrs.Int("qmin", -128));
  g.qmax = static_cast<int32_t>(node.attrs.Int("qmax", 127));
  return g;
}

int64_t ValueWireBytes(const Graph& graph, int value) {
  if (value < 0 || value >= static_cast<int>(graph.values.size())) return 4;
  const int producer = graph.values[value].producer;
  if (producer < 0 || producer >= static_cast<int>(graph.nodes.size())) return 4;
  return ByteGrid(QuantizeDequantizeGrid(graph.nodes[producer])) ? 1 : 4;
}

bool QuantizesModelInput(const Graph& graph, int n) {
  if (n < 0 || n >= static_cast<int>(graph.nodes.size())) return false;
  auto sole_reader = [&](int v) {
    int reader = -1;
    for (size_t k = 0; k < graph.nodes.size(); ++k)
      for (int x : graph.ActivationInputs(graph.nodes[k]))
        if (x == v) {
          if (reader >= 0 && reader != static_cast<int>(k)) return -1;
          reader = static_cast<int>(k);
        }
    return reader;
  };
  for (int v : graph.inputs) {
    std::vector<int> chain;
    for (int r = sole_reader(v); r >= 0; r = sole_reader(v)) {
      const Node& node = graph.nodes[r];
      if (graph.ActivationInputs(node).size() != 1 || node.outputs.size() != 1) break;
      if (ByteGrid(QuantizeDequantizeGrid(node))) {
        if (r == n || std::find(chain.begin(), chain.end(), n) != chain.end()) return true;
        break;  // another input's chain may hold n
      }
      if (node.op != "Pad" && node.op != "Transpose" && node.op != "Reshape" && node.op != "Identity") break;
      if (std::find(graph.outputs.begin(), graph.outputs.end(), node.outputs[0]) != graph.outputs.end()) break;
      chain.push_back(r);
      v = node.outputs[0];
    }
  }
  return false;
}

}  // namespace tessera
