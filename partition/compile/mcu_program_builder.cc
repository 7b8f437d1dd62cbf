#include "partition/compile/mcu_program_builder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "partition/graph/arena_layout.h"
#include "partition/graph/int8_weights.h"
#include "transport/wire/mcu_program.h"

namespace tessera {

namespace {

Status Unsupported(const Node& node, const std::string& what) {
  return Status::NotSupported("node '" + node.name + "' (" + node.op + "): " + what + " is not supported on an MCU");
}

// [N, C, H, W] or [N, F] as (C, H, W) for one image.
Status ImageDims(const Node& node, const Shape& s, uint32_t* c, uint32_t* h, uint32_t* w) {
  if (s.empty() || s[0] != 1)
    return Status::InvalidArgument("node '" + node.name + "': MCU programs run batch 1, shape is " + ShapeToString(s));
  int64_t d[3] = {1, 1, 1};
  if (s.size() == 4) {
    d[0] = s[1], d[1] = s[2], d[2] = s[3];
  } else if (s.size() == 2) {
    d[0] = s[1];
  } else {
    return Unsupported(node, "rank-" + std::to_string(s.size()) + " tensor " + ShapeToString(s));
  }
  *c = static_cast<uint32_t>(d[0]);
  *h = static_cast<uint32_t>(d[1]);
  *w = static_cast<uint32_t>(d[2]);
  return Status::OK();
}

// Accumulates layers, weights and the activation region of one program.
// Activations are *virtual buffers* while the layers are emitted; Finish lays
// them out in the activation region by liveness (METHODS §6 arena layout, the
// executor's BestOfGreedyLayout) and rewrites every offset. Inputs and outputs
// stay alive for the whole program: the firmware takes the next request's
// inputs while it is still sending this one's outputs.
class McuProgramWriter {
 public:
  // A new virtual buffer of `values` values, float32 or (with `grid`) int8
  // codes (mcu_program.h, version 5); its id stands for its offset until
  // Finish.
  uint32_t Allocate(int64_t values, const std::optional<QuantGrid>& grid = std::nullopt) {
    const uint32_t g = grid ? GridIndex(*grid) : mcu::kNoWeights;
    buffers_.push_back({static_cast<size_t>(values) * mcu::ValueBytes(g), kUnused, kUnused});
    buffer_grid_.push_back(g);
    return static_cast<uint32_t>(buffers_.size() - 1);
  }
  bool Codes(uint32_t buffer) const { return buffer_grid_[buffer] != mcu::kNoWeights; }
  // The phase of an input or output is the number of layers emitted before
  // it (mcu_program.h): received before the next layer runs / sent after
  // the layers so far.
  // `start`: the first value of the tensor inside the buffer (a part of
  // it that is contiguous, e.g. a channel range of an NCHW map).
  // `port`: the UART (mcu_program.h kMaxPorts; 0: the owning Linux board).
  void AddInput(uint32_t message, uint32_t buffer, int64_t count, int64_t start = 0, uint32_t port = 0) {
    inputs_.push_back({message, buffer, static_cast<uint32_t>(count), num_layers(), port, mcu::kNoWeights});
    input_starts_.push_back(static_cast<uint32_t>(start));
    io_.push_back(buffer);
  }
  void AddOutput(uint32_t message, uint32_t buffer, int64_t count, int64_t start = 0, uint32_t port = 0) {
    outputs_.push_back({message, buffer, static_cast<uint32_t>(count), num_layers(), port, mcu::kNoWeights});
    output_starts_.push_back(static_cast<uint32_t>(start));
    io_.push_back(buffer);
  }
  uint32_t num_layers() const { return static_cast<uint32_t>(layers_.size()); }
  // The phase of the last input (0 when none).
  uint32_t last_input_layer() const { return inputs_.empty() ? 0 : inputs_.back().layer; }
  bool has_inputs() const { return !inputs_.empty(); }
  bool has_outputs() const { return !outputs_.empty(); }
  // Emits the layers of `graph`. `offset[v]`: where value v lives in the
  // activation region (UINT32_MAX: not placed yet — allocated here).
  Status EmitGraph(const Graph& graph, std::vector<uint32_t>& offset);
  // A copy of `count` contiguous values from buffer `src` at `src_start` to
  // buffer `dst` at `dst_start` (a program's local Copy step; decoded or
  // encoded when the two are stored differently).
  void AddCopy(uint32_t src, int64_t src_start, uint32_t dst, int64_t dst_start, int64_t count) {
    mcu::Layer l{};
    l.op = mcu::kOpCopy;
    l.c = l.oc = static_cast<uint32_t>(count);
    l.h = l.w = l.oh = l.ow = 1;
    l.weight = l.bias = mcu::kNoWeights;
    const int step = static_cast<int>(layers_.size());
    Operands o{src, kNoBuffer, dst};
    o.in0_start = static_cast<uint32_t>(src_start);
    o.out_start = static_cast<uint32_t>(dst_start);
    Touch(src, step);
    Touch(dst, step);
    operands_.push_back(o);
    layers_.push_back(l);
  }
  McuProgramImage Finish(uint32_t plan_id, bool segments) const;
  // The weight-block index of `grid` (each grid stored once).
  uint32_t GridIndex(const QuantGrid& grid) {
    const float q[4] = {grid.scale, static_cast<float>(grid.zero_point), static_cast<float>(grid.qmin),
                        static_cast<float>(grid.qmax)};
    for (uint32_t at : grids_)
      if (std::memcmp(&weights_[at], q, sizeof q) == 0) return at;
    const uint32_t at = static_cast<uint32_t>(weights_.size());
    weights_.insert(weights_.end(), q, q + 4);
    grids_.push_back(at);
    return at;
  }
  // Conv / Gemm weights as int8 codes with per-channel scales where they
  // have an exact int8 form (issue 16 item 3; McuProgramOptions).
  bool int8_weights = true;

 private:
  // A conv's or a dense layer's weights into `l`: int8 where allowed, exact
  // and smaller (partition/graph/int8_weights.h SmallerAsInt8, as the
  // planner prices them), else float32.
  void AddLayerWeights(const Graph& graph, int value, mcu::Layer* l) {
    const TensorData* d = graph.ConstantData(value);
    const int64_t rows = l->oc, n = d ? static_cast<int64_t>(d->values.size()) : 0;
    std::optional<Int8Rows> q;
    if (int8_weights && rows > 0 && n % rows == 0) q = SmallerAsInt8(d->values.data(), rows, n / rows);
    if (!q) {
      l->weight = AddWeights(graph, value);
      return;
    }
    StoreInt8Rows(*q, l);
  }
  // Scales, then the codes packed 4 to a word (mcu_program.h kWeightsInt8).
  void StoreInt8Rows(const Int8Rows& q, mcu::Layer* l) {
    l->weight_format = mcu::kWeightsInt8;
    l->weight = static_cast<uint32_t>(weights_.size());
    weights_.insert(weights_.end(), q.scales.begin(), q.scales.end());
    std::vector<float> words((q.codes.size() + 3) / 4, 0.0f);
    std::memcpy(words.data(), q.codes.data(), q.codes.size());
    weights_.insert(weights_.end(), words.begin(), words.end());
    ++int8_layers_;
  }
  // A partial conv's weights (attr "int8_row_scales", program_compiler.cc
  // MarkIntegerPartial): each value is code · the full row's scale, stored
  // as those codes and scales. NotSupported when one is not.
  Status AddRowScaledWeights(const Graph& graph, const Node& node, mcu::Layer* l) {
    const TensorData* d = graph.ConstantData(node.inputs.at(1));
    const std::vector<double> scales = node.attrs.Floats("int8_row_scales");
    const int64_t rows = l->oc, n = d ? static_cast<int64_t>(d->values.size()) : 0;
    if (!d || rows <= 0 || static_cast<int64_t>(scales.size()) != rows || n % rows != 0 ||
        n / rows > kMaxIntegerDotTerms || (node.inputs.size() > 2 && node.inputs[2] >= 0) ||
        l->activation != mcu::kActNone)
      return Status::NotSupported("node '" + node.name +
                                  "': an int32 partial sum needs int8 weights with one row scale per output "
                                  "channel, no bias and no activation");
    const int64_t per = n / rows;
    Int8Rows q;
    q.codes.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      const float s = static_cast<float>(scales[r]);
      q.scales.push_back(s);
      for (int64_t i = 0; i < per; ++i) {
        const float w = d->values[r * per + i], code = s > 0 ? std::nearbyint(w / s) : 0.0f;
        if (!(code >= -127 && code <= 127) || code * s != w)
          return Status::NotSupported("node '" + node.name + "': weight " + std::to_string(r * per + i) +
                                      " is no int8 code of its row's scale");
        q.codes[r * per + i] = static_cast<int8_t>(code);
      }
    }
    StoreInt8Rows(q, l);
    return Status::OK();
  }
  uint32_t AddWeights(const Graph& graph, int value) {
    const TensorData* d = graph.ConstantData(value);
    if (!d) return mcu::kNoWeights;
    uint32_t at = static_cast<uint32_t>(weights_.size());
    weights_.insert(weights_.end(), d->values.begin(), d->values.end());
    return at;
  }
  static constexpr int kUnused = -1;
  // Marks virtual buffer `b` as touched by layer `step`.
  void Touch(uint32_t b, int step) {
    BufferRequest& r = buffers_[b];
    r.first = r.first == kUnused ? step : std::min(r.first, step);
    r.last = std::max(r.last, step);
  }
  std::vector<mcu::IoEntry> inputs_, outputs_;
  std::vector<uint32_t> input_starts_, output_starts_;
  std::vector<mcu::Layer> layers_;
  std::vector<float> weights_;
  std::vector<BufferRequest> buffers_;  // virtual buffers: size in bytes, first/last layer
  std::vector<uint32_t> buffer_grid_;   // per virtual buffer: its grid (kNoWeights: float32)
  std::vector<uint32_t> grids_;         // weight-block indices of the grids stored
  std::vector<uint32_t> io_;            // virtual buffers sent or received
  struct Operands {
    uint32_t in0, in1, out;                 // virtual buffers (in1: kNoBuffer)
    int64_t in_place_scratch = -1;          // floats the layer needs to run in place; -1: it cannot
    uint32_t in0_start = 0, out_start = 0;  // value offsets inside in0 / out (kOpCopy)
    uint32_t sums = 0;                      // which operands are int32 sums (kSumsIn0 | kSumsIn1 | kSumsOut)
  };
  static constexpr uint32_t kNoBuffer = UINT32_MAX;
  std::vector<Operands> operands_;  // per layer
  int64_t macs_ = 0;
  int int8_layers_ = 0;
};

}  // namespace

// ValidateProgram (transport/wire/mcu_program.h) refuses integer sums of more
// terms than the builder stores.
static_assert(kMaxIntegerDotTerms == 65535, "mcu_program.h ValidateProgram's bound on an integer sum's terms");

// What an MCU layer of `node` is, without emitting it: every check of
// BuildMcuProgram on one node (McuCanRun asks the same). An alias
// (Reshape, Flatten, Identity) has op 0.
Result<McuLayerDescription> DescribeMcuLayer(const Graph& graph, const Node& node) {
  using namespace mcu;
  McuLayerDescription out;
  std::vector<int> xs = graph.ActivationInputs(node);
  if (xs.empty() || node.outputs.size() != 1) return Unsupported(node, "a node without one activation input/output");
  const bool partial = node.attrs.Int("integer_partial", 0) != 0, merge = node.attrs.Int("integer_sum", 0) != 0;
  out.requant = node.attrs.Int("integer_requant", 0) != 0;
  if (partial && node.op != "Conv" && node.op != "Gemm") return Unsupported(node, "integer_partial on a " + node.op);
  if ((merge || out.requant) && node.op != "Add") return Unsupported(node, "an integer merge that is not an Add");
  out.sums = partial ? kSumsOut : merge ? kSumsIn0 | kSumsIn1 | kSumsOut : out.requant ? kSumsIn0 : 0;
  const int y = node.outputs[0];
  if (node.op == "Reshape" || node.op == "Flatten" || node.op == "Identity") return out;
  Layer& l = out.layer;
  l.kh = l.kw = l.sh = l.sw = l.dh = l.dw = 1;
  l.weight = l.bias = kNoWeights;
  TS_RETURN_IF_ERROR(ImageDims(node, graph.values[xs[0]].shape, &l.c, &l.h, &l.w));
  TS_RETURN_IF_ERROR(ImageDims(node, graph.values[y].shape, &l.oc, &l.oh, &l.ow));
  const std::string activation = node.attrs.String("activation", "");
  if (activation == "relu") {
    l.activation = kActRelu;
  } else if (!activation.empty()) {
    return Unsupported(node, "fused activation '" + activation + "'");
  }
  auto window = [&]() -> Status {
    auto k = node.attrs.Ints("kernel_shape"), s = node.attrs.Ints("strides", {1, 1}),
         p = node.attrs.Ints("pads", {0, 0, 0, 0}), d = node.attrs.Ints("dilations", {1, 1});
    if (k.size() != 2 || s.size() != 2 || p.size() != 4 || d.size() != 2) return Unsupported(node, "a non-2-D window");
    if (node.attrs.String("auto_pad", "NOTSET") != "NOTSET") return Unsupported(node, "auto_pad");
    l.kh = uint32_t(k[0]), l.kw = uint32_t(k[1]), l.sh = uint32_t(s[0]), l.sw = uint32_t(s[1]);
    l.pad_top = uint32_t(p[0]), l.pad_left = uint32_t(p[1]), l.dh = uint32_t(d[0]), l.dw = uint32_t(d[1]);
    return Status::OK();
  };
  if (node.op == "Conv") {
    l.op = kOpConv;
    TS_RETURN_IF_ERROR(window());
    l.group = static_cast<uint32_t>(node.attrs.Int("group", 1));
    if (node.inputs.size() < 2 || !graph.IsConstant(node.inputs[1])) return Unsupported(node, "non-constant weights");
    out.macs = int64_t(l.oc) * l.oh * l.ow * (l.c / std::max<uint32_t>(l.group, 1)) * l.kh * l.kw;
  } else if (node.op == "Gemm") {
    l.op = kOpDense;
    if (node.attrs.Int("transB", 1) == 0) return Unsupported(node, "transB=0");
    if (node.inputs.size() < 2 || !graph.IsConstant(node.inputs[1])) return Unsupported(node, "non-constant weights");
    if (node.inputs.size() > 2) {
      const TensorData* b = graph.ConstantData(node.inputs[2]);
      if (!b || NumElements(b->shape) != l.oc) return Unsupported(node, "a bias that is not one value per output");
    }
    out.macs = int64_t(l.oc) * l.c * l.h * l.w;
  } else if (node.op == "MaxPool" || node.op == "AveragePool") {
    l.op = node.op == "MaxPool" ? kOpMaxPool : kOpAvgPool;
    TS_RETURN_IF_ERROR(window());
    l.group = static_cast<uint32_t>(node.attrs.Int("count_include_pad", 0));
  } else if (node.op == "GlobalAveragePool") {
    l.op = kOpGlobalAvgPool;
  } else if (node.op == "Relu") {
    l.op = kOpRelu;
  } else if (auto q = QuantizeDequantizeGrid(node)) {
    l.op = kOpQuantize;
    out.grid[0] = q->scale;
    out.grid[1] = static_cast<float>(q->zero_point);
    out.grid[2] = static_cast<float>(q->qmin);
    out.grid[3] = static_cast<float>(q->qmax);
    if (!(out.grid[0] > 0) || out.grid[2] > out.grid[1] || out.grid[1] > out.grid[3])
      return Unsupported(node, "a grid without a positive scale");
  } else if (node.op == "Softmax") {
    const Shape& s = graph.values[xs[0]].shape;
    const int64_t rank = static_cast<int64_t>(s.size()), axis = node.attrs.Int("axis", -1);
    if (axis != -1 && axis != rank - 1) return Unsupported(node, "Softmax over an axis other than the last");
    l.op = kOpSoftmax;
    l.group = static_cast<uint32_t>(s.back());
  } else if (node.op == "Add" && out.requant) {
    // The merged sum (int32) and the conv's bias: one value per channel
    // (program_compiler.cc IntegerRequant), the conv's multipliers in an
    // attribute.
    l.op = kOpAdd;
    const TensorData* b = node.inputs.size() == 2 ? graph.ConstantData(node.inputs[1]) : nullptr;
    if (xs.size() != 1 || !b || NumElements(b->shape) != l.oc ||
        static_cast<int64_t>(node.attrs.Floats("int8_requant_mult").size()) != l.oc)
      return Unsupported(node, "a requantization without one bias and one multiplier per channel");
  } else if (node.op == "Add") {
    l.op = kOpAdd;
    if (xs.size() != 2 || graph.values[xs[0]].shape != graph.values[xs[1]].shape)
      return Unsupported(node, "Add with broadcasting or constant operands");
  } else {
    return Unsupported(node, "the op");
  }
  return out;
}

Status McuCanRun(const Graph& graph, const Node& node) { return DescribeMcuLayer(graph, node).status(); }

// A grid an MCU can hold codes on (mcu_program.h version 5): ByteGrid.
std::optional<QuantGrid> McuActivationGrid(const Node& node) { return ByteGrid(QuantizeDequantizeGrid(node)); }

int64_t McuLayerBufferBytes(const Graph& graph, const Node& node) {
  int64_t bytes = 0;
  const bool quantize = McuActivationGrid(node).has_value();
  for (int v : graph.ActivationInputs(node)) {
    // This QuantizeDequantize alone reads it: fused with whatever writes it
    // on the MCU (a layer, another QuantizeDequantize, a Recv its board
    // relays), it is never held, and the codes are this node's output,
    // counted below. (Received over a direct link it is held as floats:
    // more than 0, so 0 stays a lower bound.)
    if (quantize && std::find(graph.outputs.begin(), graph.outputs.end(), v) == graph.outputs.end()) {
      int readers = 0;
      for (const Node& n : graph.nodes) {
        const std::vector<int> xs = graph.ActivationInputs(n);
        readers += std::find(xs.begin(), xs.end(), v) != xs.end();
      }
      if (readers == 1) continue;
    }
    bytes += NumElements(graph.values[v].shape) * McuValueBytes(graph, v);
  }
  if (!node.outputs.empty())
    bytes += NumElements(graph.values[node.outputs[0]].shape) * McuValueBytes(graph, node.outputs[0]);
  return bytes;
}

std::optional<QuantGrid> McuBufferGrid(const ProgramBuffer& b) { return ByteGrid(b.grid); }

McuFusions FuseMcuQuantizeSteps(const DeviceProgram& program) {
  const size_t nb = program.buffers.size();
  auto ok = [&](int b) { return b >= 0 && static_cast<size_t>(b) < nb; };
  // Per buffer: its readers; its writers by kind (computing steps, Recvs
  // the Linux board relays, anything else: a Copy, a direct-link Recv, the
  // caller's model input).
  std::vector<int> reads(nb, 0), computed(nb, 0), relayed(nb, 0), other(nb, 0);
  for (auto [value, buffer] : program.model_inputs)
    if (ok(buffer)) ++other[buffer];
  for (auto [value, buffer] : program.model_outputs)
    if (ok(buffer)) ++reads[buffer];
  for (const ProgramStep& s : program.steps) {
    if (s.kind == StepKind::kCompute || s.kind == StepKind::kMerge) {
      for (int b : s.inputs)
        if (ok(b)) ++reads[b];
      for (int b : s.outputs)
        if (ok(b)) ++computed[b];
    } else if (s.kind == StepKind::kSend || s.kind == StepKind::kCopy) {
      if (ok(s.src_buffer)) ++reads[s.src_buffer];
    }
    if (s.kind == StepKind::kRecv && ok(s.dst_buffer)) ++(s.uart_port == 0 ? relayed : other)[s.dst_buffer];
    if (s.kind == StepKind::kCopy && ok(s.dst_buffer)) ++other[s.dst_buffer];
  }
  McuFusions f;
  f.fused_into.assign(nb, -1);
  f.fused_step.assign(program.steps.size(), false);
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const ProgramStep& s = program.steps[i];
    if (s.kind != StepKind::kCompute || s.inputs.size() != 1 || s.outputs.size() != 1 || s.subgraph < 0 ||
        s.subgraph >= static_cast<int>(program.subgraphs.size()))
      continue;
    const Graph& g = program.subgraphs[s.subgraph];
    const int b = s.inputs[0], q = s.outputs[0];
    if (g.nodes.size() != 1 || !ok(b) || !ok(q) || b == q) continue;
    const std::optional<QuantGrid> grid = McuActivationGrid(g.nodes[0]), holds = McuBufferGrid(program.buffers[q]);
    if (!grid || !holds || std::memcmp(&*grid, &*holds, sizeof(QuantGrid)) != 0) continue;
    if (reads[b] != 1 || other[b] != 0 || McuBufferGrid(program.buffers[b]) ||
        !(program.buffers[b].box == program.buffers[q].box))
      continue;
    // Computed here, or received through the board only: not both.
    if ((computed[b] > 0) == (relayed[b] > 0)) continue;
    f.fused_into[b] = q;
    f.fused_step[i] = true;
  }
  return f;
}

std::optional<QuantGrid> McuWireGrid(const DeviceProgram& program, const McuFusions& fusions, const ProgramStep& step) {
  int b = step.kind == StepKind::kRecv ? step.dst_buffer : step.src_buffer;
  if (b < 0 || b >= static_cast<int>(program.buffers.size())) return std::nullopt;
  if (static_cast<size_t>(b) < fusions.fused_into.size() && fusions.fused_into[b] >= 0) b = fusions.fused_into[b];
  return McuBufferGrid(program.buffers[b]);
}

int64_t McuWireBytes(const DeviceProgram& program, const McuFusions& fusions, const ProgramStep& step) {
  return McuWireGrid(program, fusions, step) ? step.values() : 4 * step.values();
}

namespace {
void GridFloats(const QuantGrid& g, float* q) {
  q[0] = g.scale, q[1] = static_cast<float>(g.zero_point), q[2] = static_cast<float>(g.qmin),
  q[3] = static_cast<float>(g.qmax);
}
}  // namespace

Result<std::string> McuEncode(const QuantGrid& grid, const std::string& float_bytes, int64_t values) {
  if (static_cast<int64_t>(float_bytes.size()) != 4 * values)
    return Status::InvalidArgument("a tensor of " + std::to_string(values) + " floats has " +
                                   std::to_string(float_bytes.size()) + " bytes");
  float q[4];
  GridFloats(grid, q);
  std::vector<float> x(static_cast<size_t>(values));
  std::memcpy(x.data(), float_bytes.data(), float_bytes.size());
  std::string codes(static_cast<size_t>(values), '\0');
  mcu::EncodeTensor(q, 0, x.data(), static_cast<uint32_t>(values), codes.data());
  return codes;
}

Result<std::string> McuDecode(const QuantGrid& grid, const std::string& codes, int64_t values) {
  if (static_cast<int64_t>(codes.size()) != values)
    return Status::InvalidArgument("a tensor of " + std::to_string(values) + " int8 codes has " +
                                   std::to_string(codes.size()) + " bytes");
  float q[4];
  GridFloats(grid, q);
  std::vector<float> x(static_cast<size_t>(values));
  mcu::DecodeTensor(q, 0, codes.data(), static_cast<uint32_t>(values), x.data());
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
}

namespace {
bool SameGrid(const std::optional<QuantGrid>& a, const std::optional<QuantGrid>& b) {
  if (!a || !b) return a.has_value() == b.has_value();
  return a->scale == b->scale && a->zero_point == b->zero_point && a->qmin == b->qmin && a->qmax == b->qmax;
}
}  // namespace

Result<std::string> RecodeMessage(const std::optional<QuantGrid>& from, const std::optional<QuantGrid>& to,
                                  std::string bytes, int64_t values) {
  if (SameGrid(from, to)) {
    const int64_t want = values * (from ? 1 : 4);
    if (static_cast<int64_t>(bytes.size()) != want)
      return Status::InvalidArgument("a tensor of " + std::to_string(values) + " values " +
                                     (from ? "as int8 codes" : "as float32") + " has " + std::to_string(bytes.size()) +
                                     " bytes, not " + std::to_string(want));
    return bytes;
  }
  if (from) {
    TS_ASSIGN_OR_RETURN(bytes, McuDecode(*from, bytes, values));
  }
  if (to) return McuEncode(*to, bytes, values);
  return bytes;
}

int64_t McuValueBytes(const Graph& graph, int value) {
  const int producer = graph.values[value].producer;
  if (producer >= 0 && McuActivationGrid(graph.nodes[producer])) return 1;
  if (std::find(graph.outputs.begin(), graph.outputs.end(), value) != graph.outputs.end()) return 4;
  int reader = -1;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    const std::vector<int> xs = graph.ActivationInputs(graph.nodes[k]);
    if (std::find(xs.begin(), xs.end(), value) == xs.end()) continue;
    if (reader >= 0) return 4;
    reader = static_cast<int>(k);
  }
  return reader >= 0 && McuActivationGrid(graph.nodes[reader]) ? 1 : 4;
}

namespace {

Status McuProgramWriter::EmitGraph(const Graph& graph, std::vector<uint32_t>& offset) {
  using namespace mcu;
  // A value a QuantizeDequantize of an 8-bit grid produces is kept as codes.
  auto place = [&](int value) {
    if (offset[value] == UINT32_MAX) {
      const int producer = graph.values[value].producer;
      offset[value] = Allocate(NumElements(graph.values[value].shape),
                               producer >= 0 ? McuActivationGrid(graph.nodes[producer]) : std::nullopt);
    }
    return offset[value];
  };
  // The one node reading each value (-1: none or several), for fusing a
  // QuantizeDequantize into the layer before it.
  std::vector<int> reader(graph.values.size(), -1), readers(graph.values.size(), 0);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    std::vector<int> xs = graph.ActivationInputs(graph.nodes[k]);
    std::sort(xs.begin(), xs.end());
    xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
    for (int x : xs) ++readers[x], reader[x] = static_cast<int>(k);
  }
  for (int v : graph.outputs) readers[v] += 1;  // read outside: kept as computed
  std::vector<bool> fused(graph.nodes.size(), false);
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    if (fused[k]) continue;
    const Node& node = graph.nodes[k];
    TS_ASSIGN_OR_RETURN(McuLayerDescription described, DescribeMcuLayer(graph, node));
    std::vector<int> xs = graph.ActivationInputs(node);
    int y = node.outputs[0];
    if (described.layer.op == 0) {
      // Same bytes, another shape: an alias — unless the output already has
      // a place (a buffer of the device program, e.g. a pipeline stage that
      // starts with Flatten on the tensor it received): then a copy.
      if (offset[y] != UINT32_MAX && offset[y] != place(xs[0])) {
        AddCopy(place(xs[0]), 0, offset[y], 0, NumElements(graph.values[y].shape));
        continue;
      }
      offset[y] = place(xs[0]);
      continue;
    }
    Layer l = described.layer;
    macs_ += described.macs;
    if ((l.op == kOpConv || l.op == kOpDense) && (described.sums & kSumsOut)) {
      // An FDTI slice's partial sums: its codes in the full rows' scales
      // (so that every slice's sums count alike), no bias, no activation.
      TS_RETURN_IF_ERROR(AddRowScaledWeights(graph, node, &l));
      if (!Codes(place(xs[0])))
        return Status::NotSupported("node '" + node.name + "': an int32 partial sum of an input that is not codes");
    } else if (l.op == kOpConv || l.op == kOpDense) {
      AddLayerWeights(graph, node.inputs[1], &l);
      if (node.inputs.size() > 2) l.bias = AddWeights(graph, node.inputs[2]);
    } else if (described.requant) {
      l.weight = static_cast<uint32_t>(weights_.size());
      for (double m : node.attrs.Floats("int8_requant_mult")) weights_.push_back(static_cast<float>(m));
      l.bias = AddWeights(graph, node.inputs[1]);
    } else if (l.op == kOpQuantize) {
      l.weight = static_cast<uint32_t>(weights_.size());
      weights_.insert(weights_.end(), described.grid, described.grid + 4);
    }
    // A QuantizeDequantize that alone reads this layer's output, which
    // nothing else needs, is fused into it: the layer stores its results
    // as the codes (issue 16 item 1: the float tensor between them is
    // never held).
    if (offset[y] == UINT32_MAX && readers[y] == 1 && reader[y] > static_cast<int>(k)) {
      const Node& q = graph.nodes[reader[y]];
      const int qy = q.outputs.empty() ? -1 : q.outputs[0];
      if (McuActivationGrid(q) && qy >= 0 && (offset[qy] == UINT32_MAX || Codes(offset[qy]))) {
        fused[reader[y]] = true;
        y = qy;
      }
    }
    uint32_t in0 = place(xs[0]);
    if ((l.op == kOpConv || l.op == kOpDense) && l.weight_format != kWeightsInt8 && Codes(in0)) {
      // Codes are read by int8-weight kernels only (mcu_program.h): a
      // float-weight layer on codes (weights without an exact int8 form,
      // or one weight per output channel) reads a decoded float copy.
      const int64_t n = NumElements(graph.values[xs[0]].shape);
      const uint32_t decoded = Allocate(n);
      AddCopy(in0, 0, decoded, 0, n);
      in0 = decoded;
    }
    const int step = static_cast<int>(layers_.size());
    Operands o{in0, l.op == kOpAdd && xs.size() > 1 ? place(xs[1]) : kNoBuffer, place(y)};
    o.sums = described.sums;
    // Segments: what the layer needs to run in place (mcu_program.h; a
    // conv's in1, unused otherwise, will name its scratch). Its input and
    // output must be stored alike (Finish checks).
    if (l.op == kOpRelu || l.op == kOpAdd || l.op == kOpQuantize) {
      o.in_place_scratch = 0;
    } else if (l.op == kOpConv && InPlaceScratchFloats(l) > 0) {
      o.in_place_scratch = static_cast<int64_t>(InPlaceScratchFloats(l));
    }
    Touch(o.in0, step);
    if (o.in1 != kNoBuffer) Touch(o.in1, step);
    Touch(o.out, step);
    operands_.push_back(o);
    layers_.push_back(l);
  }
  return Status::OK();
}

McuProgramImage McuProgramWriter::Finish(uint32_t plan_id, bool segments) const {
  using namespace mcu;
  // Lifetimes over the layers 0..L-1; inputs and outputs span them all.
  const int last = std::max<int>(0, static_cast<int>(layers_.size()) - 1);
  std::vector<BufferRequest> requests = buffers_;
  for (BufferRequest& r : requests)
    if (r.first == kUnused) r.first = r.last = 0, r.size = 0;  // never touched (fused away): no room
  std::vector<bool> io(buffers_.size(), false);
  for (uint32_t b : io_) requests[b] = buffers_[b], requests[b].first = 0, requests[b].last = last, io[b] = true;
  // Segments (METHODS §6): a layer that can run in place over an operand
  // it reads last, neither sent nor received and stored like its output,
  // is a candidate; its scratch is one more request alive at that layer
  // only (size 0 unless merged).
  std::vector<SegmentCandidate> candidates;
  std::vector<int> candidate_of(layers_.size(), -1);
  std::vector<size_t> scratch_of(layers_.size(), 0);
  for (size_t k = 0; segments && k < layers_.size(); ++k) {
    const Operands& o = operands_[k];
    if (o.in_place_scratch < 0 || io[o.out] || requests[o.out].first != static_cast<int>(k)) continue;
    uint32_t in = kNoBuffer;
    for (uint32_t x : {o.in0, o.in1})  // Add: either operand
      if (in == kNoBuffer && x != kNoBuffer && x != o.out && !io[x] && requests[x].last == static_cast<int>(k) &&
          (x == o.in0 || layers_[k].op == kOpAdd) && o.in0 != o.in1 && Codes(x) == Codes(o.out))
        in = x;
    if (in == kNoBuffer) continue;
    scratch_of[k] = requests.size();
    requests.push_back({0, static_cast<int>(k), static_cast<int>(k)});
    candidate_of[k] = static_cast<int>(candidates.size());
    candidates.push_back({in, o.out, scratch_of[k], static_cast<size_t>(o.in_place_scratch) * sizeof(float)});
  }
  const SegmentPlan laid = PlanWithSegments(BestOfGreedyLayout(sizeof(float)), requests, candidates);
  const ArenaPlan& plan = laid.plan;
  // Byte offsets (version 5); `start` values into buffer b.
  auto at = [&](size_t b, uint32_t start = 0) {
    const uint32_t bytes = b < buffer_grid_.size() ? ValueBytes(buffer_grid_[b]) : 4u;
    return static_cast<uint32_t>(plan.offsets[b]) + start * bytes;
  };
  auto grid = [&](uint32_t b) { return b == kNoBuffer ? kNoWeights : buffer_grid_[b]; };
  std::vector<Layer> layers = layers_;
  for (size_t k = 0; k < layers.size(); ++k) {
    const Operands& o = operands_[k];
    layers[k].in0 = at(o.in0, o.in0_start);
    layers[k].in0_grid = grid(o.in0);
    layers[k].in1_grid = kNoWeights;
    if (o.in1 != kNoBuffer) layers[k].in1 = at(o.in1), layers[k].in1_grid = grid(o.in1);
    layers[k].out = at(o.out, o.out_start);
    layers[k].out_grid = grid(o.out);
    // Int32 sums sit in buffers of 4-byte values; the layer says so.
    if (o.sums & kSumsIn0) layers[k].in0_grid = kInt32Sums;
    if (o.sums & kSumsIn1) layers[k].in1_grid = kInt32Sums;
    if (o.sums & kSumsOut) layers[k].out_grid = kInt32Sums;
    // A merged conv: its output is at its input (the plan gave them one
    // offset) and in1 names its float scratch.
    if (candidate_of[k] >= 0 && laid.merged[candidate_of[k]] && layers[k].op == kOpConv)
      layers[k].in1 = at(scratch_of[k]);
  }
  std::vector<IoEntry> inputs = inputs_, outputs = outputs_;
  for (size_t k = 0; k < inputs.size(); ++k)
    inputs[k].grid = grid(inputs[k].offset), inputs[k].offset = at(inputs[k].offset, input_starts_[k]);
  for (size_t k = 0; k < outputs.size(); ++k)
    outputs[k].grid = grid(outputs[k].offset), outputs[k].offset = at(outputs[k].offset, output_starts_[k]);
  const uint32_t act = static_cast<uint32_t>((plan.size + sizeof(float) - 1) / sizeof(float));
  ProgramHeader h{kProgramMagic,
                  kProgramVersion,
                  plan_id,
                  act,
                  uint32_t(layers.size()),
                  uint32_t(inputs.size()),
                  uint32_t(outputs.size()),
                  uint32_t(weights_.size())};
  McuProgramImage image;
  image.activation_words = act;
  image.macs = macs_;
  image.in_place_layers = laid.merges;
  image.int8_weight_layers = int8_layers_;
  for (size_t b = 0; b < buffers_.size(); ++b)
    if (Codes(static_cast<uint32_t>(b))) ++image.int8_activation_tensors;
  auto append = [&](const void* p, size_t n) { image.bytes.append(static_cast<const char*>(p), n); };
  append(&h, sizeof h);
  append(inputs.data(), inputs.size() * sizeof(IoEntry));
  append(outputs.data(), outputs.size() * sizeof(IoEntry));
  append(layers.data(), layers.size() * sizeof(Layer));
  append(weights_.data(), weights_.size() * sizeof(float));
  return image;
}

// ContiguousStart of `box` in buffer `b`, or NotSupported naming both.
Result<int64_t> StartIn(const DeviceProgram& program, int b, const Box& box, const std::string& what) {
  const int64_t start = ContiguousStart(program.buffers[b].shape(), box);
  if (start < 0)
    return Status::NotSupported(what + " a part of a buffer that is not one contiguous run of floats (" +
                                box.ToString() + " of " + program.buffers[b].name + ")");
  return start;
}

uint32_t MessageFor(const std::map<int, uint32_t>& messages, int value) {
  auto it = messages.find(value);
  return it == messages.end() ? static_cast<uint32_t>(value) : it->second;
}

}  // namespace

Result<McuProgramImage> BuildMcuProgram(const Graph& graph, const McuProgramOptions& options) {
  McuProgramWriter writer;
  writer.int8_weights = options.int8_weights;
  std::vector<uint32_t> offset(graph.values.size(), UINT32_MAX);
  for (int v : graph.inputs) {
    offset[v] = writer.Allocate(NumElements(graph.values[v].shape));
    writer.AddInput(MessageFor(options.input_messages, v), offset[v], NumElements(graph.values[v].shape));
  }
  TS_RETURN_IF_ERROR(writer.EmitGraph(graph, offset));
  for (int v : graph.outputs) {
    if (offset[v] == UINT32_MAX) return Status::InvalidArgument("graph output '" + graph.values[v].name + "' is never computed");
    writer.AddOutput(MessageFor(options.output_messages, v), offset[v], NumElements(graph.values[v].shape));
  }
  return writer.Finish(options.plan_id, options.segments);
}

Result<McuProgramImage> BuildMcuProgram(const DeviceProgram& program, const McuProgramOptions& options) {
  const std::string me = "device " + std::to_string(program.device) + " (mcu)";
  McuProgramWriter writer;
  writer.int8_weights = options.int8_weights;
  std::vector<uint32_t> buffer_offset;
  // A buffer of a value on an 8-bit grid (the compiler marks them,
  // ProgramBuffer::grid) is kept as codes: received, held and sent as 1 B
  // a value.
  for (const ProgramBuffer& b : program.buffers)
    buffer_offset.push_back(writer.Allocate(b.box.volume(), McuBufferGrid(b)));
  const McuFusions fusions = FuseMcuQuantizeSteps(program);
  const std::vector<int>& fused_into = fusions.fused_into;
  const std::vector<bool>& fused_step = fusions.fused_step;
  const size_t nb = program.buffers.size();
  for (auto [value, buffer] : program.model_inputs)
    writer.AddInput(MessageFor(options.input_messages, value), buffer_offset[buffer],
                    program.buffers[buffer].box.volume());
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const ProgramStep& s = program.steps[i];
    const std::string at = me + " step " + std::to_string(i) + " (" + StepKindName(s.kind) + ")";
    if (s.uart_port < 0 || s.uart_port >= static_cast<int>(mcu::kMaxPorts))
      return Status::InvalidArgument(at + ": UART port " + std::to_string(s.uart_port) + " (an MCU has ports 0.." +
                                     std::to_string(mcu::kMaxPorts - 1) + ")");
    switch (s.kind) {
      // A Recv after a Send too: the MCU runs its program in phases
      // (METHODS §4's FDT rounds: send a partial sum, receive the next
      // layer's input).
      case StepKind::kRecv: {
        TS_ASSIGN_OR_RETURN(const int64_t start, StartIn(program, s.dst_buffer, s.dst_box, at + ": receives into"));
        // Into the codes of the QuantizeDequantize it is fused with (the
        // bridge encodes it), else the buffer itself.
        const int into = s.dst_buffer >= 0 && static_cast<size_t>(s.dst_buffer) < nb && fused_into[s.dst_buffer] >= 0
                             ? fused_into[s.dst_buffer]
                             : s.dst_buffer;
        writer.AddInput(static_cast<uint32_t>(s.message), buffer_offset[into], s.dst_box.volume(), start,
                        static_cast<uint32_t>(s.uart_port));
        break;
      }
      case StepKind::kSend: {
        TS_ASSIGN_OR_RETURN(const int64_t start, StartIn(program, s.src_buffer, s.src_box, at + ": sends"));
        writer.AddOutput(static_cast<uint32_t>(s.message), buffer_offset[s.src_buffer], s.src_box.volume(), start,
                         static_cast<uint32_t>(s.uart_port));
        break;
      }
      case StepKind::kCompute:
      case StepKind::kMerge: {
        if (!writer.has_inputs())
          return Status::NotSupported(at + ": computes before receiving anything; an MCU's run starts with a tensor");
        if (fused_step[i]) break;  // its QuantizeDequantize runs in the step before
        const Graph& g = program.subgraphs.at(s.subgraph);
        std::vector<uint32_t> offset(g.values.size(), UINT32_MAX);
        for (size_t k = 0; k < g.inputs.size() && k < s.inputs.size(); ++k) offset[g.inputs[k]] = buffer_offset[s.inputs[k]];
        for (size_t k = 0; k < g.outputs.size() && k < s.outputs.size(); ++k) {
          const int b = s.outputs[k];
          offset[g.outputs[k]] =
              buffer_offset[b >= 0 && static_cast<size_t>(b) < nb && fused_into[b] >= 0 ? fused_into[b] : b];
        }
        Status st = writer.EmitGraph(g, offset);
        if (!st.ok()) return st.WithContext(at + ": ");
        break;
      }
      case StepKind::kCopy: {
        TS_ASSIGN_OR_RETURN(const int64_t from, StartIn(program, s.src_buffer, s.src_box, at + ": copies from"));
        TS_ASSIGN_OR_RETURN(const int64_t to, StartIn(program, s.dst_buffer, s.dst_box, at + ": copies into"));
        if (!writer.has_inputs())
          return Status::NotSupported(at + ": copies before receiving anything; an MCU's run starts with a tensor");
        writer.AddCopy(buffer_offset[s.src_buffer], from, buffer_offset[s.dst_buffer], to, s.src_box.volume());
        break;
      }
    }
  }
  for (auto [value, buffer] : program.model_outputs)
    writer.AddOutput(MessageFor(options.output_messages, value), buffer_offset[buffer], program.buffers[buffer].box.volume());
  // No inputs: an idle MCU's empty program (the plan gives it nothing), or
  // sends without receiving, which the MCU cannot start.
  if (!writer.has_inputs() && (writer.num_layers() > 0 || writer.has_outputs()))
    return Status::NotSupported(me + ": sends without receiving anything; an MCU's run starts with a tensor");
  if (writer.num_layers() > 0 && writer.last_input_layer() >= writer.num_layers())
    return Status::NotSupported(me + ": receives a tensor after its last layer, which nothing reads");
  return writer.Finish(options.plan_id, options.segments);
}

namespace {

struct GraphBuilder {
  Graph g;
  std::mt19937 rng;
  explicit GraphBuilder(uint32_t seed) : rng(seed) {}

  // Names the graph and adds its one input.
  int Input(const std::string& graph_name, const std::string& name, Shape shape) {
    g.name = graph_name;
    const int x = g.AddValue(name, std::move(shape));
    g.inputs = {x};
    return x;
  }
  int Constant(const std::string& name, Shape shape, float scale) {
    TensorData d;
    d.shape = shape;
    std::uniform_real_distribution<float> u(-scale, scale);
    d.values.resize(NumElements(shape));
    for (float& v : d.values) v = u(rng);
    return g.AddConstant(name, std::move(d));
  }
  // A conv of a kh x kw kernel, `stride` both ways, pads {top, left, bottom, right}.
  int Conv(const std::string& name, int x, int64_t oc, int64_t kh, int64_t kw, int64_t stride,
           std::vector<int64_t> pads, int64_t group, bool relu) {
    const Shape s = g.values[x].shape;  // a copy: adding constants grows g.values
    const int64_t c = s[1];
    const int64_t oh = (s[2] + pads[0] + pads[2] - kh) / stride + 1, ow = (s[3] + pads[1] + pads[3] - kw) / stride + 1;
    int w = Constant(name + ".weight", {oc, c / group, kh, kw}, 1.0f / std::sqrt(float(c / group * kh * kw)));
    int b = Constant(name + ".bias", {oc}, 0.1f);
    int y = g.AddValue(name, {1, oc, oh, ow});
    Node n{name, "Conv", {x, w, b}, {y}, {}};
    n.attrs.Set("kernel_shape", std::vector<int64_t>{kh, kw});
    n.attrs.Set("strides", std::vector<int64_t>{stride, stride});
    n.attrs.Set("pads", std::move(pads));
    n.attrs.Set("dilations", std::vector<int64_t>{1, 1});
    n.attrs.Set("group", group);
    if (relu) n.attrs.Set("activation", std::string("relu"));
    g.AddNode(std::move(n));
    return y;
  }
  // A k x k conv, stride 1, "same" padding.
  int Conv(const std::string& name, int x, int64_t oc, int64_t k, int64_t group, bool relu) {
    return Conv(name, x, oc, k, k, 1, {k / 2, k / 2, k / 2, k / 2}, group, relu);
  }
  // Global average pool, then a dense layer of `out`.
  int PoolAndDense(int x, int64_t out) {
    const Shape s = g.values[x].shape;
    const int gap = g.AddValue("gap", {1, s[1], 1, 1});
    g.AddNode(Node{"gap", "GlobalAveragePool", {x}, {gap}, {}});
    return Dense("fc", gap, out);
  }
  int Pool(const std::string& name, const std::string& op, int x, int64_t k) {
    const Shape s = g.values[x].shape;  // a copy: adding constants grows g.values
    int y = g.AddValue(name, {1, s[1], s[2] / k, s[3] / k});
    Node n{name, op, {x}, {y}, {}};
    n.attrs.Set("kernel_shape", std::vector<int64_t>{k, k});
    n.attrs.Set("strides", std::vector<int64_t>{k, k});
    n.attrs.Set("pads", std::vector<int64_t>{0, 0, 0, 0});
    g.AddNode(std::move(n));
    return y;
  }
  int Dense(const std::string& name, int x, int64_t out) {
    const Shape s = g.values[x].shape;  // a copy: adding constants grows g.values
    int64_t in = NumElements(s);
    int w = Constant(name + ".weight", {out, in}, 1.0f / std::sqrt(float(in)));
    int b = Constant(name + ".bias", {out}, 0.1f);
    int y = g.AddValue(name, {1, out});
    Node n{name, "Gemm", {x, w, b}, {y}, {}};
    if (s.size() != 2) n.attrs.Set("flatten_input", int64_t{1});
    g.AddNode(std::move(n));
    return y;
  }
};

}  // namespace

Graph MakeKeywordSpottingGraph(uint32_t seed) {
  GraphBuilder b(seed);
  const int x = b.Input("kws_cnn", "mfcc", {1, 1, 49, 10});
  int y = b.Conv("conv1", x, 16, 3, 1, true);
  y = b.Pool("pool1", "MaxPool", y, 2);
  y = b.Conv("conv2", y, 32, 3, 1, true);
  y = b.Pool("pool2", "MaxPool", y, 2);
  y = b.Conv("conv3", y, 32, 3, 1, true);
  y = b.Dense("fc", y, 12);
  b.g.outputs = {y};
  return std::move(b.g);
}

Graph MakeDsCnnGraph(uint32_t seed) {
  GraphBuilder b(seed);
  const int x = b.Input("kws_dscnn", "mfcc", {1, 1, 32, 8});
  int y = b.Conv("conv", x, 32, 3, 1, true);
  y = b.Conv("depthwise", y, 32, 3, 32, true);
  y = b.Conv("pointwise", y, 32, 1, 1, true);
  b.g.outputs = {b.PoolAndDense(y, 12)};
  return std::move(b.g);
}

Graph MakeMlperfDsCnnGraph(uint32_t seed) {
  GraphBuilder b(seed);
  const int x = b.Input("mlperf_dscnn", "mfcc", {1, 1, 49, 10});
  // conv 10x4, stride 2, "same" padding: 49x10 -> 25x5 (pads top 4, bottom 5, left 1, right 1).
  int y = b.Conv("conv1", x, 64, 10, 4, 2, {4, 1, 5, 1}, 1, true);
  for (int block = 1; block <= 4; ++block) {
    y = b.Conv("dw" + std::to_string(block), y, 64, 3, 64, true);
    y = b.Conv("pw" + std::to_string(block), y, 64, 1, 1, true);
  }
  b.g.outputs = {b.PoolAndDense(y, 12)};
  return std::move(b.g);
}

Graph MakeMcuOpsGraph(uint32_t seed) {
  GraphBuilder b(seed);
  const int x = b.Input("mcu_ops", "image", {1, 8, 12, 12});
  int a = b.Conv("conv", x, 8, 3, 1, false);
  int d = b.Conv("depthwise", a, 8, 3, 8, true);
  int s = b.g.AddValue("residual", {1, 8, 12, 12});
  b.g.AddNode(Node{"residual", "Add", {d, x}, {s}, {}});
  int r = b.g.AddValue("relu", {1, 8, 12, 12});
  b.g.AddNode(Node{"relu", "Relu", {s}, {r}, {}});
  int p = b.Pool("avgpool", "AveragePool", r, 2);
  int m = b.Conv("conv5x5", p, 16, 5, 1, true);
  int gap = b.g.AddValue("gap", {1, 16, 1, 1});
  b.g.AddNode(Node{"gap", "GlobalAveragePool", {m}, {gap}, {}});
  int f = b.g.AddValue("flat", {1, 16});
  Node flat{"flatten", "Reshape", {gap}, {f}, {}};
  flat.attrs.Set("shape", std::vector<int64_t>{1, 16});
  b.g.AddNode(std::move(flat));
  int y = b.Dense("fc", f, 10);
  b.g.outputs = {y};
  return std::move(b.g);
}

Graph MakeVwwStemGraph(uint32_t seed) {
  GraphBuilder b(seed);
  const int x = b.Input("vww_stem", "image", {1, 3, 24, 24});
  // MobileNetV1's stem: conv 3x3 stride 2 (TF "same": pads bottom/right), then
  // depthwise-separable blocks, the second depthwise with stride 2.
  int y = b.Conv("conv", x, 8, 3, 3, 2, {0, 0, 1, 1}, 1, true);
  y = b.Conv("dw1", y, 8, 3, 8, true);
  y = b.Conv("pw1", y, 16, 1, 1, true);
  y = b.Conv("dw2", y, 16, 3, 3, 2, {1, 1, 1, 1}, 16, true);
  y = b.Conv("pw2", y, 32, 1, 1, true);
  b.g.outputs = {b.PoolAndDense(y, 2)};
  return std::move(b.g);
}

}  // namespace tessera
