#include "partition/compile/program_compiler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "partition/graph/int8_weights.h"
#include "partition/graph/metrics.h"
#include "partition/graph/op_traits.h"
#include "partition/graph/resize_map.h"

namespace tessera {

namespace {

struct Piece {
  int device = 0;
  int buffer = -1;
  Box box;
};

// Where a value's data lives (see program_compiler.h).
struct Placement {
  std::vector<Piece> primary;   // disjoint, covers the value
  std::vector<Piece> replicas;  // extra copies, for reuse on their device
  bool in_place_slices = false; // primary = channel slices left by FDTO/FDT1/PART
};

Box ChannelSlice(const Shape& shape, int64_t c0, int64_t c1) {
  Box b = Box::Full(shape);
  b.dims.at(1) = {c0, c1};
  return b;
}

Box SpatialBox(const Shape& shape, const TileRegion& r) {
  Box b = Box::Full(shape);
  b.dims.at(2) = r.rows;
  b.dims.at(3) = r.cols;
  return b;
}

TileRegion Union(const TileRegion& a, const TileRegion& b) {
  return {{std::min(a.rows.begin, b.rows.begin), std::max(a.rows.end, b.rows.end)},
          {std::min(a.cols.begin, b.cols.begin), std::max(a.cols.end, b.cols.end)}};
}

// Builds a subgraph out of nodes of a source graph.
class SubgraphBuilder {
 public:
  SubgraphBuilder(const Graph& src, const std::string& name) : src_(src) { out_.name = name; }
  int Input(int src_value, const Shape& shape, const std::string& suffix = "") {
    int id = out_.AddValue(src_.values[src_value].name + suffix, shape);
    out_.inputs.push_back(id);
    return id;
  }
  int InputNamed(const std::string& name, const Shape& shape) {
    int id = out_.AddValue(name, shape);
    out_.inputs.push_back(id);
    return id;
  }
  int Value(const std::string& name, const Shape& shape) { return out_.AddValue(name, shape); }
  int Constant(const std::string& name, TensorData data) { return out_.AddConstant(name, std::move(data)); }
  int CopyConstant(int src_value) {
    auto it = constants_.find(src_value);
    if (it != constants_.end()) return it->second;
    int id = Constant(src_.values[src_value].name, *src_.ConstantData(src_value));
    constants_[src_value] = id;
    return id;
  }
  void AddNode(Node n) {
    // Node names must be unique within the subgraph.
    if (!names_.insert(n.name).second) n.name += "#" + std::to_string(out_.nodes.size());
    names_.insert(n.name);
    out_.AddNode(std::move(n));
  }
  void Output(int v) { out_.outputs.push_back(v); }
  Result<Graph> Finish() {
    TS_RETURN_IF_ERROR(out_.Validate().WithContext("subgraph " + out_.name));
    return std::move(out_);
  }

 private:
  const Graph& src_;
  Graph out_;
  std::map<int, int> constants_;
  std::set<std::string> names_;
};

// The name of a slice of weight `name`: its range on `axis`, so that no two
// different weights of one device program share a name and shape (the
// runtime shares packed weight forms by name, shape and values;
// daemon/runtime/kernels/weight_forms.h).
std::string SliceName(const std::string& name, size_t axis, const Range1D& r) {
  return name + "[" + std::to_string(axis) + ":" + std::to_string(r.begin) + "-" + std::to_string(r.end) + "]";
}

std::string LayerLabel(const Graph& g, int n) {
  return "layer " + std::to_string(n + 1) + " ('" + g.nodes[n].name + "', " + g.nodes[n].op + ")";
}

class Compiler {
 public:
  Compiler(const Graph& g, const PartitionPlan& p, const CompileOptions& o) : g_(g), plan_(p), options_(o) {}

  Result<CompiledPlan> Run() {
    if (plan_.layers.size() != g_.nodes.size())
      return Status::InvalidArgument("the plan has " + std::to_string(plan_.layers.size()) + " layers, the model " +
                                     std::to_string(g_.nodes.size()) + " (was it made for another model?)");
    if (plan_.num_devices < 1 || plan_.source < 0 || plan_.source >= plan_.num_devices)
      return Status::InvalidArgument("the plan's source device is not one of its devices");
    for (size_t i = 0; i < plan_.layers.size(); ++i)
      for (int d : plan_.layers[i].devices)
        if (d < 0 || d >= plan_.num_devices)
          return Status::InvalidArgument("layer " + std::to_string(i + 1) + " ('" + g_.nodes[i].name +
                                         "') names device " + std::to_string(d) + ", the plan has " +
                                         std::to_string(plan_.num_devices));
    progs_.resize(plan_.num_devices);
    for (int d = 0; d < plan_.num_devices; ++d) progs_[d].device = d;
    place_.resize(g_.values.size());
    consumers_ = g_.Consumers();
    for (const auto& f : ComputeLayerFigures(g_)) {
      int64_t positions = f.output_shape.size() == 4 ? f.output_shape[2] * f.output_shape[3] : 1;
      macs_per_position_.push_back(positions > 0 ? f.R / positions : f.R);
    }

    for (int v : g_.inputs) {
      DeviceProgram& p = progs_[plan_.source];
      int buf = p.AddBuffer(v, Box::Full(g_.values[v].shape), g_.values[v].name);
      p.model_inputs.push_back({v, buf});
      place_[v].primary = {{plan_.source, buf, Box::Full(g_.values[v].shape)}};
    }

    for (size_t i = 0; i < g_.nodes.size();) {
      const LayerAssignment& a = plan_.layers[i];
      if (a.scheme == LayerScheme::kFfmt) {
        size_t j = i;
        while (j + 1 < g_.nodes.size() && SameStackAssignment(a, plan_.layers[j + 1])) ++j;
        TS_RETURN_IF_ERROR(CompileFfmtRun(static_cast<int>(i), static_cast<int>(j)));
        i = j + 1;
        continue;
      }
      if (OneDeviceSlices(a)) {  // a channel path on one device
        const int end = ChannelPathEnd(static_cast<int>(i));
        TS_RETURN_IF_ERROR(CompileChannelPath(static_cast<int>(i), end));
        i = end + 1;
        continue;
      }
      Status st;
      switch (a.scheme) {
        case LayerScheme::kWhole: st = CompileWhole(static_cast<int>(i)); break;
        case LayerScheme::kFdto:
        case LayerScheme::kFdt1: st = CompileFanOut(static_cast<int>(i)); break;
        case LayerScheme::kFdti:
        case LayerScheme::kFdt2: st = CompileFanIn(static_cast<int>(i)); break;
        case LayerScheme::kPart: st = CompilePart(static_cast<int>(i)); break;
        case LayerScheme::kFfmt: break;
      }
      TS_RETURN_IF_ERROR(st);
      ++i;
    }

    for (int v : g_.outputs) {
      TS_ASSIGN_OR_RETURN(int buf, Fetch(v, plan_.source, Box::Full(g_.values[v].shape)));
      progs_[plan_.source].model_outputs.push_back({v, buf});
    }
    CompiledPlan out;
    out.programs = std::move(progs_);
    out.halo_mac_overhead = halo_;
    MarkQuantizedBuffers(g_, &out.programs);
    TS_RETURN_IF_ERROR(ValidatePrograms(out.programs).WithContext("compiled programs are inconsistent (a tessera bug)"));
    TS_RETURN_IF_ERROR(SetMessageWindows(&out.programs));
    SetScenarios(g_.models, &out.programs);
    return out;
  }

 private:
  static bool SameStackAssignment(const LayerAssignment& a, const LayerAssignment& b) {
    return b.scheme == LayerScheme::kFfmt && a.devices == b.devices && a.grid_rows == b.grid_rows &&
           a.grid_cols == b.grid_cols && a.row_weights == b.row_weights && a.col_weights == b.col_weights &&
           a.parts == b.parts && !b.stack_start;
  }

  std::string LayerName(int n) const { return LayerLabel(g_, n); }

  std::vector<int> DevicesOf(int n) const {
    const auto& d = plan_.layers[n].devices;
    return d.empty() ? std::vector<int>{plan_.source} : d;
  }

  // Channel ranges [c0, c1) per device of layer n over `total` channels.
  // The channel ranges of layer n's devices: the plan's sizes, or even
  // slices in whole units of `granule` channels (op_traits.h).
  Result<std::vector<Range1D>> SplitOf(int n, int64_t total, int64_t granule = 1) const {
    const auto devices = DevicesOf(n);
    std::vector<int64_t> sizes = plan_.layers[n].split;
    if (sizes.empty()) sizes = SplitChannels(total, granule, std::vector<double>(devices.size(), 1.0));
    if (sizes.size() != devices.size())
      return Status::InvalidArgument(LayerName(n) + ": split has " + std::to_string(sizes.size()) + " sizes for " +
                                     std::to_string(devices.size()) + " devices");
    int64_t sum = 0;
    std::vector<Range1D> r;
    for (int64_t s : sizes) {
      if (s < 0) return Status::InvalidArgument(LayerName(n) + ": negative split size");
      r.push_back({sum, sum + s});
      sum += s;
    }
    if (sum != total)
      return Status::InvalidArgument(LayerName(n) + ": split sizes add up to " + std::to_string(sum) +
                                     ", the layer has " + std::to_string(total) + " channels");
    return r;
  }

  void AddTransfer(const Piece& from, const Box& region, int to_device, int to_buffer, const Box& to_box) {
    const bool from_runs = options_.contiguous_io_devices.count(from.device) > 0,
               to_runs = options_.contiguous_io_devices.count(to_device) > 0;
    if (from_runs || to_runs) {
      // Runs where it matters: a device that moves any box (the region
      // relative to itself is one run) sends or receives a piece as it is.
      const std::vector<Box> runs = ContiguousPieces(region, from_runs ? from.box : region, to_runs ? to_box : region);
      if (runs.size() > 1) {
        for (const Box& run : runs) AddOneTransfer(from, run, to_device, to_buffer, to_box);
        return;
      }
    }
    AddOneTransfer(from, region, to_device, to_buffer, to_box);
  }

  void AddOneTransfer(const Piece& from, const Box& region, int to_device, int to_buffer, const Box& to_box) {
    ProgramStep s;
    if (from.device == to_device) {
      s.kind = StepKind::kCopy;
      s.src_buffer = from.buffer;
      s.src_box = region.RelativeTo(from.box);
      s.dst_buffer = to_buffer;
      s.dst_box = region.RelativeTo(to_box);
      progs_[to_device].steps.push_back(s);
      return;
    }
    const int64_t msg = next_message_++;
    s.kind = StepKind::kSend;
    s.peer = to_device;
    s.message = msg;
    s.src_buffer = from.buffer;
    s.src_box = region.RelativeTo(from.box);
    progs_[from.device].steps.push_back(s);
    ProgramStep r;
    r.kind = StepKind::kRecv;
    r.peer = from.device;
    r.message = msg;
    r.dst_buffer = to_buffer;
    r.dst_box = region.RelativeTo(to_box);
    progs_[to_device].steps.push_back(r);
  }

  // A buffer on `device` holding exactly `box` of `value`.
  Result<int> Fetch(int value, int device, const Box& box) {
    Placement& pl = place_[value];
    auto local = [&](const Piece& p) { return p.device == device; };
    for (const auto* list : {&pl.primary, &pl.replicas})
      for (const Piece& p : *list)
        if (local(p) && p.box == box) return p.buffer;
    const std::string name = g_.values[value].name + "@" + box.ToString();
    for (const auto* list : {&pl.primary, &pl.replicas})
      for (const Piece& p : *list)
        if (local(p) && p.box.Contains(box)) {
          int buf = progs_[device].AddBuffer(value, box, name);
          AddTransfer(p, box, device, buf, box);
          pl.replicas.push_back({device, buf, box});
          return buf;
        }
    int buf = progs_[device].AddBuffer(value, box, name);
    int64_t covered = 0;
    for (const Piece& p : std::vector<Piece>(pl.primary)) {
      Box inter = p.box.Intersect(box);
      if (inter.empty()) continue;
      AddTransfer(p, inter, device, buf, box);
      covered += inter.volume();
    }
    if (covered != box.volume())
      return Status::Internal("value '" + g_.values[value].name + "': region " + box.ToString() +
                              " is not covered by the pieces computed so far");
    pl.replicas.push_back({device, buf, box});
    return buf;
  }

  // A fetch phase: the inputs of one layer (or stack) fetched for every
  // device before any of them computes. BeginFetchPhase marks where each
  // program stands; EndFetchPhase moves the phase's Send steps ahead of its
  // Recv and Copy steps on every device (in order), so no device waits on a
  // peer that first waits on something else. A Send in the phase reads a
  // primary piece, written before the phase (Fetch sends from primaries only).
  std::vector<size_t> BeginFetchPhase() const {
    std::vector<size_t> marks;
    for (const DeviceProgram& p : progs_) marks.push_back(p.steps.size());
    return marks;
  }
  void EndFetchPhase(const std::vector<size_t>& marks) {
    for (size_t d = 0; d < progs_.size(); ++d) {
      // An MCU's inputs and outputs keep the order they were compiled in:
      // its program builder reads its phases from it (mcu_program_builder.h).
      if (options_.contiguous_io_devices.count(static_cast<int>(d))) continue;
      auto& steps = progs_[d].steps;
      std::stable_partition(steps.begin() + static_cast<std::ptrdiff_t>(marks[d]), steps.end(),
                            [](const ProgramStep& st) { return st.kind == StepKind::kSend; });
    }
  }

  // Makes `device` the only holder of the whole value (METHODS §4: the
  // source collects outputs that are not reused in place).
  Status CollectAt(int value, int device) {
    const Box full = Box::Full(g_.values[value].shape);
    TS_ASSIGN_OR_RETURN(int buf, Fetch(value, device, full));
    place_[value].primary = {{device, buf, full}};
    place_[value].replicas.clear();
    place_[value].in_place_slices = false;
    return Status::OK();
  }

  int AddCompute(int device, Graph sub, const std::vector<int>& inputs, int layer, StepKind kind,
                 std::vector<Piece> outputs_as) {
    DeviceProgram& p = progs_[device];
    if (options_.values_for_device >= 0 && device != options_.values_for_device)
      for (auto& [id, data] : sub.constants) std::vector<float>().swap(data.values);
    ProgramStep s;
    s.kind = kind;
    s.layer = layer + 1;
    s.inputs = inputs;
    for (auto& o : outputs_as) s.outputs.push_back(o.buffer);
    p.subgraphs.push_back(std::move(sub));
    s.subgraph = static_cast<int>(p.subgraphs.size()) - 1;
    p.steps.push_back(s);
    return s.subgraph;
  }

  // A node input that is no activation: absent (-1) or a constant the
  // subgraph copies. True when `v` was one (and is now in `ins`).
  bool TakeNonActivation(int v, SubgraphBuilder* sb, std::vector<int>* ins) const {
    if (v < 0) {
      ins->push_back(-1);
      return true;
    }
    if (!g_.values[v].constant) return false;
    ins->push_back(sb->CopyConstant(v));
    return true;
  }

  Node Clone(const Node& n, std::vector<int> inputs, std::vector<int> outputs) const {
    Node c = n;
    // A conv on codes runs in integers (int8_weights.h); its copy may read
    // a tile or slice whose producer runs elsewhere, so it carries the grid.
    if (auto grid = ConvInputByteGrid(g_, n); grid && !n.attrs.Has("int8_input_scale")) SetConvInputGrid(*grid, &c);
    c.inputs = std::move(inputs);
    c.outputs = std::move(outputs);
    return c;
  }

  // ---- Integer partial sums (CompileOptions::integer_partial_sums) ----------
  // What the merge of an integer conv's partial sums needs: the scales of
  // its weights' full rows, in which every slice's codes count (a slice's
  // own RecoverInt8Rows scale could differ), and per output channel
  // s_x · s_w, the unsplit conv's multiplier (conv_int8.cc). Without
  // weight values (a shapes-only graph) the structure alone, no figures.
  struct IntegerMerge {
    bool known = false;
    std::vector<double> scales, mult;
  };
  std::optional<IntegerMerge> IntegerMergeOf(const Node& node) const {
    if (!options_.integer_partial_sums || (node.op != "Conv" && node.op != "Gemm")) return std::nullopt;
    const auto grid = IntegerConvInputGrid(g_, node);
    if (!grid) return std::nullopt;
    const TensorData* w = g_.ConstantData(node.inputs.at(1));
    IntegerMerge m;
    if (w == nullptr || w->values.empty()) return m;
    const int64_t rows = w->shape.at(0), per = static_cast<int64_t>(w->values.size()) / rows;
    const auto q = RecoverInt8Rows(w->values.data(), rows, per);
    if (!q) return std::nullopt;  // no int8 form: the conv runs in float, and so do its partial sums
    m.known = true;
    for (float s : q->scales) {
      m.scales.push_back(s);
      m.mult.push_back(static_cast<double>(grid->scale * s));
    }
    return m;
  }
  static void MarkIntegerPartial(const IntegerMerge& m, Node* clone) {
    clone->attrs.Set("integer_partial", int64_t{1});
    if (m.known) clone->attrs.Set("int8_row_scales", m.scales);
    for (const char* attr : {"activation", "act_alpha", "act_beta"}) clone->attrs.Erase(attr);
  }
  // y = fma(float(sum), s_x · s_w, bias) and the conv's activation, on the
  // merge's int32 sum (an Add in integer_requant mode, binary.cc).
  Node IntegerRequant(const Node& conv, const IntegerMerge& m, int sum, int bias, int out) const {
    Node r{conv.name + "/requantize", "Add", {sum, bias}, {out}, {}};
    r.attrs.Set("integer_requant", int64_t{1});
    if (m.known) r.attrs.Set("int8_requant_mult", m.mult);
    for (const char* attr : {"activation", "act_alpha", "act_beta"})
      if (conv.attrs.Has(attr)) r.attrs.Set(attr, conv.attrs.all().at(attr));
    return r;
  }
  // The conv's bias as the requantizing Add reads it ([1, C, 1, 1], a dense
  // layer's [1, C]), zeros when it has none.
  int RequantBias(const Node& conv, SubgraphBuilder* sb) const {
    const Shape& ys = g_.values[conv.outputs[0]].shape;
    const TensorData* b = conv.inputs.size() > 2 && conv.inputs[2] >= 0 ? g_.ConstantData(conv.inputs[2]) : nullptr;
    TensorData bias = b ? *b : TensorData{{ys[1]}, std::vector<float>(static_cast<size_t>(ys[1]), 0.f)};
    bias.shape = ys.size() == 4 ? Shape{1, ys[1], 1, 1} : Shape{1, ys.back()};
    return sb->Constant(b ? g_.values[conv.inputs[2]].name : conv.name + "/zero_bias", bias);
  }

  // ---- WHOLE ---------------------------------------------------------------
  Status CompileWhole(int n) {
    const Node& node = g_.nodes[n];
    const int d = DevicesOf(n)[0];
    SubgraphBuilder sb(g_, node.name);
    std::vector<int> ins, bufs;
    for (int v : node.inputs) {
      if (v < 0) {
        ins.push_back(-1);
      } else if (g_.values[v].constant) {
        ins.push_back(sb.CopyConstant(v));
      } else {
        TS_ASSIGN_OR_RETURN(int buf, Fetch(v, d, Box::Full(g_.values[v].shape)));
        bufs.push_back(buf);
        ins.push_back(sb.Input(v, g_.values[v].shape));
      }
    }
    std::vector<int> outs;
    std::vector<Piece> pieces;
    for (int v : node.outputs) {
      outs.push_back(sb.Value(g_.values[v].name, g_.values[v].shape));
      sb.Output(outs.back());
      const Box full = Box::Full(g_.values[v].shape);
      pieces.push_back({d, progs_[d].AddBuffer(v, full, g_.values[v].name), full});
    }
    sb.AddNode(Clone(node, ins, outs));
    TS_ASSIGN_OR_RETURN(Graph sub, sb.Finish());
    AddCompute(d, std::move(sub), bufs, n, StepKind::kCompute, pieces);
    for (size_t k = 0; k < node.outputs.size(); ++k) place_[node.outputs[k]] = Placement{{pieces[k]}, {}, false};
    return Status::OK();
  }

  // ---- FDTO / FDT1 -----------------------------------------------------------
  Status CompileFanOut(int n) {
    const Node& node = g_.nodes[n];
    if (!IsWeightSplitLayer(g_, node))
      return Status::InvalidArgument(LayerName(n) + " cannot be split by output channels (" +
                                     LayerSchemeName(plan_.layers[n].scheme) +
                                     "): only Conv (not depthwise) and Gemm with constant weights can");
    const int64_t O = g_.values[node.inputs.at(1)].shape.at(0);
    TS_ASSIGN_OR_RETURN(auto split, SplitOf(n, O, OutputSplitGranule(g_, node)));
    std::vector<int64_t> sizes;
    for (const Range1D& r : split) sizes.push_back(r.size());
    TS_RETURN_IF_ERROR(CheckChannelSplit(g_, n, sizes, /*by_input=*/false));
    return CompileOutputSlices(n, split, /*in_place=*/true);
  }

  // Each device computes output channels `split[i]` of layer n, complete
  // (bias and activation included), from the input channels they read: all
  // of them, or its groups' for a grouped Conv. `in_place`: the next layer
  // may reuse the slices where they are (FDTO, METHODS §4 r); otherwise it
  // reads the output from the source, as after a fan-in merge.
  Status CompileOutputSlices(int n, const std::vector<Range1D>& split, bool in_place) {
    const Node& node = g_.nodes[n];
    const bool conv = node.op == "Conv";
    const int x = node.inputs.at(0);
    const int y = node.outputs.at(0);
    const TensorData& w = *g_.ConstantData(node.inputs.at(1));
    const TensorData* b = node.inputs.size() > 2 && node.inputs[2] >= 0 ? g_.ConstantData(node.inputs[2]) : nullptr;
    const int64_t O = w.shape[0];
    const int64_t groups = conv ? node.attrs.Int("group", 1) : 1;
    const int64_t og = O / groups, cg = conv ? w.shape[1] : 0;
    const auto devices = DevicesOf(n);
    // METHODS §4: the input comes from the source unless it is reused in place.
    if (!place_[x].in_place_slices) TS_RETURN_IF_ERROR(CollectAt(x, devices[0]));
    auto need_of = [&](const Range1D& c) {
      Box need = Box::Full(g_.values[x].shape);
      if (groups > 1) need.dims[1] = {c.begin / og * cg, c.end / og * cg};
      return need;
    };
    // Every device's input first, then the slices (BeginFetchPhase).
    const auto phase = BeginFetchPhase();
    for (size_t i = 0; i < devices.size(); ++i)
      if (split[i].size() > 0) TS_RETURN_IF_ERROR(Fetch(x, devices[i], need_of(split[i])).status());
    EndFetchPhase(phase);
    std::vector<Piece> pieces;
    for (size_t i = 0; i < devices.size(); ++i) {
      const Range1D c = split[i];
      if (c.size() == 0) continue;
      const Box need = need_of(c);
      TS_ASSIGN_OR_RETURN(int in_buf, Fetch(x, devices[i], need));
      SubgraphBuilder sb(g_, node.name + "/out" + std::to_string(c.begin) + "-" + std::to_string(c.end));
      std::vector<int> ins = {sb.Input(x, need.shape()), sb.Constant(SliceName(g_.values[node.inputs[1]].name, 0, c),
                                                                     SliceAxis(w, 0, c.begin, c.end))};
      if (b)
        ins.push_back(sb.Constant(SliceName(g_.values[node.inputs[2]].name, 0, c), SliceAxis(*b, 0, c.begin, c.end)));
      Box out_box = ChannelSlice(g_.values[y].shape, c.begin, c.end);
      int out = sb.Value(g_.values[y].name, out_box.shape());
      sb.Output(out);
      Node clone = Clone(node, ins, {out});
      if (groups > 1) clone.attrs.Set("group", static_cast<int64_t>(c.size() / og));
      sb.AddNode(clone);
      TS_ASSIGN_OR_RETURN(Graph sub, sb.Finish());
      Piece piece{devices[i], progs_[devices[i]].AddBuffer(y, out_box, g_.values[y].name + "@" + out_box.ToString()),
                  out_box};
      AddCompute(devices[i], std::move(sub), {in_buf}, n, StepKind::kCompute, {piece});
      pieces.push_back(piece);
    }
    place_[y] = Placement{pieces, {}, in_place};
    return Status::OK();
  }

  // ---- FDTI / FDT2 -----------------------------------------------------------
  Status CompileFanIn(int n) {
    const Node& node = g_.nodes[n];
    const bool conv = node.op == "Conv";
    const LayerScheme scheme = plan_.layers[n].scheme;
    if (!IsWeightSplitLayer(g_, node))
      return Status::InvalidArgument(LayerName(n) + " cannot be split by input channels (" +
                                     LayerSchemeName(scheme) +
                                     "): only Conv (not depthwise) and Gemm with constant weights can");
    if (conv && node.attrs.Int("group", 1) > 1) return CompileGroupedFanIn(n);
    const int x = node.inputs.at(0);
    const int y = node.outputs.at(0);
    const Shape& xs = g_.values[x].shape;
    const TensorData& w = *g_.ConstantData(node.inputs.at(1));
    const TensorData* b = node.inputs.size() > 2 && node.inputs[2] >= 0 ? g_.ConstantData(node.inputs[2]) : nullptr;
    // Channels are the split unit. For a dense layer over a 4-D input
    // (flattened C-major), channel slice [c0,c1) is the contiguous feature
    // range [c0·H·W, c1·H·W).
    const int64_t C = xs.at(1);
    const int64_t per_channel = conv ? 1 : NumElements(xs) / (xs[0] * C);
    TS_ASSIGN_OR_RETURN(auto split, SplitOf(n, C));
    const auto devices = DevicesOf(n);
    const int merge_device = devices[0];
    if (scheme == LayerScheme::kFdti || !place_[x].in_place_slices) TS_RETURN_IF_ERROR(CollectAt(x, merge_device));

    const auto integer = IntegerMergeOf(node);
    // Every device's input slice first, then the partial sums (BeginFetchPhase).
    const auto phase = BeginFetchPhase();
    for (size_t i = 0; i < devices.size(); ++i)
      if (split[i].size() > 0)
        TS_RETURN_IF_ERROR(Fetch(x, devices[i], ChannelSlice(xs, split[i].begin, split[i].end)).status());
    EndFetchPhase(phase);
    std::vector<Piece> partials;  // in device order
    for (size_t i = 0; i < devices.size(); ++i) {
      const Range1D c = split[i];
      if (c.size() == 0) continue;
      const Box need = ChannelSlice(xs, c.begin, c.end);
      TS_ASSIGN_OR_RETURN(int in_buf, Fetch(x, devices[i], need));
      SubgraphBuilder sb(g_, node.name + "/in" + std::to_string(c.begin) + "-" + std::to_string(c.end));
      std::vector<int> ins = {
          sb.Input(x, need.shape()),
          sb.Constant(SliceName(g_.values[node.inputs[1]].name, 1, {c.begin * per_channel, c.end * per_channel}),
                      SliceAxis(w, 1, c.begin * per_channel, c.end * per_channel))};
      const Shape& ys = g_.values[y].shape;
      int out = sb.Value(g_.values[y].name + "/partial", ys);
      sb.Output(out);
      Node clone = Clone(node, ins, {out});
      clone.attrs.Erase("activation");  // applied once, after the merge
      if (integer) MarkIntegerPartial(*integer, &clone);
      sb.AddNode(clone);
      TS_ASSIGN_OR_RETURN(Graph sub, sb.Finish());
      Piece piece{devices[i],
                  progs_[devices[i]].AddBuffer(-1, Box::Full(ys), g_.values[y].name + "/partial" + std::to_string(i)),
                  Box::Full(ys)};
      AddCompute(devices[i], std::move(sub), {in_buf}, n, StepKind::kCompute, {piece});
      partials.push_back(piece);
    }
    // Partials travel to the merge device (METHODS §4: K·(N−1) values).
    std::vector<int> merge_inputs;
    for (const Piece& p : partials) {
      if (p.device == merge_device) {
        merge_inputs.push_back(p.buffer);
        continue;
      }
      int buf = progs_[merge_device].AddBuffer(-1, p.box, g_.values[y].name + "/partial-from-" +
                                                               std::to_string(p.device));
      AddTransfer(p, p.box, merge_device, buf, p.box);
      merge_inputs.push_back(buf);
    }
    // Merge: ((p0 + p1) + p2) + ... in device order, then bias; the last Add
    // carries the producer's fused activation (an Add may carry any of them,
    // op_traits.h), so it is applied once, after the sum.
    const Shape& ys = g_.values[y].shape;
    SubgraphBuilder sb(g_, node.name + "/merge");
    std::vector<int> ins;
    for (size_t i = 0; i < merge_inputs.size(); ++i) ins.push_back(sb.InputNamed("partial" + std::to_string(i), ys));
    const std::string activation = node.attrs.String("activation");
    const bool activated = !activation.empty() && activation != "linear";
    std::vector<Node> adds;
    int acc = ins[0];
    for (size_t i = 1; i < ins.size(); ++i) {
      int sum = sb.Value("sum" + std::to_string(i), ys);
      adds.push_back(Node{node.name + "/sum" + std::to_string(i), "Add", {acc, ins[i]}, {sum}, {}});
      if (integer) adds.back().attrs.Set("integer_sum", int64_t{1});
      acc = sum;
    }
    if (integer) {  // int32 sums: one rounding, with the bias and the activation
      const int bias = RequantBias(node, &sb);
      const int y_value = sb.Value("requantized", ys);
      for (Node& add : adds) sb.AddNode(std::move(add));
      sb.AddNode(IntegerRequant(node, *integer, acc, bias, y_value));
      adds.clear();
      acc = y_value;
    } else if (b || (activated && adds.empty())) {  // no sum to carry the activation: add a zero bias
      TensorData bias = b ? *b : TensorData{{ys[1]}, std::vector<float>(static_cast<size_t>(ys[1]), 0.f)};
      bias.shape = ys.size() == 4 ? Shape{1, ys[1], 1, 1} : Shape{1, ys.back()};
      int bc = sb.Constant(b ? g_.values[node.inputs[2]].name : node.name + "/zero_bias", bias);
      int with_bias = sb.Value("biased", ys);
      adds.push_back(Node{node.name + "/bias", "Add", {acc, bc}, {with_bias}, {}});
      acc = with_bias;
    }
    if (activated && !integer)
      for (const char* attr : {"activation", "act_alpha", "act_beta"})
        if (node.attrs.Has(attr)) adds.back().attrs.Set(attr, node.attrs.all().at(attr));
    for (Node& add : adds) sb.AddNode(std::move(add));
    if (acc == ins[0]) {  // one partial, no bias, no activation: still produce a separate output
      int copy = sb.Value("merged", ys);
      sb.AddNode(Node{node.name + "/merged", "Identity", {acc}, {copy}, {}});
      acc = copy;
    }
    sb.Output(acc);
    TS_ASSIGN_OR_RETURN(Graph merge, sb.Finish());
    const Box full = Box::Full(ys);
    Piece out{merge_device, progs_[merge_device].AddBuffer(y, full, g_.values[y].name), full};
    AddCompute(merge_device, std::move(merge), merge_inputs, n, StepKind::kMerge, {out});
    place_[y] = Placement{{out}, {}, false};
    return Status::OK();
  }

  // FDTI/FDT2 of a grouped Conv, by whole groups (op_traits.h): an input
  // slice holding groups [g0, g1) gives exactly those groups' output
  // channels, complete, so there are no partial sums to send and merge: each
  // device adds bias and activation itself and its output slice stays in
  // place, as after FDTO (METHODS §4 traffic: K·(N−1)/N back, not K·(N−1)).
  Status CompileGroupedFanIn(int n) {
    const Node& node = g_.nodes[n];
    const Shape& xs = g_.values[node.inputs.at(0)].shape;
    const Shape& ws = g_.values[node.inputs.at(1)].shape;
    const int64_t cg = ws.at(1), og = ws.at(0) / node.attrs.Int("group", 1);
    TS_ASSIGN_OR_RETURN(auto in_split, SplitOf(n, xs.at(1), cg));
    std::vector<int64_t> sizes;
    for (const Range1D& r : in_split) sizes.push_back(r.size());
    TS_RETURN_IF_ERROR(CheckChannelSplit(g_, n, sizes, /*by_input=*/true));
    if (plan_.layers[n].scheme == LayerScheme::kFdti) TS_RETURN_IF_ERROR(CollectAt(node.inputs[0], DevicesOf(n)[0]));
    std::vector<Range1D> out_split;
    for (const Range1D& r : in_split) out_split.push_back({r.begin / cg * og, r.end / cg * og});
    return CompileOutputSlices(n, out_split, /*in_place=*/false);
  }

  // A constant input `v` of PART layer `node` on channel slice `c`: per-channel
  // constants (BN parameters, depthwise weights, broadcast operands with a
  // channel axis) are sliced; the rest are copied whole.
  int PartConstant(const Node& node, int v, const Range1D& c, SubgraphBuilder* sb) const {
    const Shape& s = g_.values[v].shape;
    const Shape& ys = g_.values[node.outputs[0]].shape;
    const int64_t C = g_.values[g_.ActivationInputs(node).at(0)].shape.at(1);
    const TensorData& data = *g_.ConstantData(v);
    int64_t axis = -1;
    if (node.op == "BatchNormalization" || IsDepthwise(g_, node))
      axis = 0;
    else if (s.size() + 1 >= ys.size() && ys.size() >= 2) {
      int64_t a = static_cast<int64_t>(s.size()) - (static_cast<int64_t>(ys.size()) - 1);
      if (a >= 0 && a < static_cast<int64_t>(s.size()) && s[a] == C) axis = a;
    }
    if (axis >= 0 && s.size() > static_cast<size_t>(axis) && s[axis] == C)
      return sb->Constant(SliceName(g_.values[v].name, axis, c), SliceAxis(data, axis, c.begin, c.end));
    return sb->CopyConstant(v);
  }

  // PART layer `node` on channel slice `c`, reading `ins` and writing `out`:
  // a depthwise conv keeps one group per channel, a flatten of a 1x1 map
  // gives the slice's features.
  Node PartClone(const Node& node, std::vector<int> ins, int out, const Range1D& c) const {
    Node clone = Clone(node, std::move(ins), {out});
    const Shape& xs = g_.values[g_.ActivationInputs(node).at(0)].shape;
    const Shape& ys = g_.values[node.outputs[0]].shape;
    if (IsDepthwise(g_, node)) clone.attrs.Set("group", static_cast<int64_t>(c.size()));
    if ((node.op == "Reshape" || node.op == "Flatten") && xs.size() == 4 && ys.size() == 2 && clone.op == "Reshape")
      clone.attrs.Set("shape", std::vector<int64_t>{ys[0], c.size()});
    return clone;
  }

  // ---- PART ------------------------------------------------------------------
  Status CompilePart(int n) {
    const Node& node = g_.nodes[n];
    TS_RETURN_IF_ERROR(CheckPerChannel(g_, node));
    const auto acts = g_.ActivationInputs(node);
    const int y = node.outputs[0];
    const Shape& ys = g_.values[y].shape;
    const Shape& xs = g_.values[acts[0]].shape;
    const int64_t C = xs[1];
    std::vector<Range1D> split;
    std::vector<int> devices;
    if (plan_.layers[n].split.empty() && place_[acts[0]].in_place_slices) {
      for (const Piece& p : place_[acts[0]].primary) split.push_back(p.box.dims[1]), devices.push_back(p.device);
    } else {
      TS_ASSIGN_OR_RETURN(split, SplitOf(n, C));
      devices = DevicesOf(n);
    }
    // Every device's inputs first, then the slices (BeginFetchPhase).
    const auto phase = BeginFetchPhase();
    for (size_t i = 0; i < devices.size(); ++i)
      if (split[i].size() > 0)
        for (int v : node.inputs)
          if (v >= 0 && !g_.values[v].constant)
            TS_RETURN_IF_ERROR(
                Fetch(v, devices[i], ChannelSlice(g_.values[v].shape, split[i].begin, split[i].end)).status());
    EndFetchPhase(phase);
    std::vector<Piece> pieces;
    for (size_t i = 0; i < devices.size(); ++i) {
      const Range1D c = split[i];
      if (c.size() == 0) continue;
      SubgraphBuilder sb(g_, node.name + "/ch" + std::to_string(c.begin) + "-" + std::to_string(c.end));
      std::vector<int> ins, bufs;
      for (int v : node.inputs) {
        if (v < 0) {
          ins.push_back(-1);
          continue;
        }
        const Shape& s = g_.values[v].shape;
        if (g_.values[v].constant) {
          ins.push_back(PartConstant(node, v, c, &sb));
          continue;
        }
        Box need = ChannelSlice(s, c.begin, c.end);
        TS_ASSIGN_OR_RETURN(int buf, Fetch(v, devices[i], need));
        bufs.push_back(buf);
        ins.push_back(sb.Input(v, need.shape()));
      }
      Box out_box = Box::Full(ys);
      out_box.dims[1] = c;
      int out = sb.Value(g_.values[y].name, out_box.shape());
      sb.Output(out);
      sb.AddNode(PartClone(node, ins, out, c));
      TS_ASSIGN_OR_RETURN(Graph sub, sb.Finish());
      Piece piece{devices[i], progs_[devices[i]].AddBuffer(y, out_box, g_.values[y].name + "@" + out_box.ToString()),
                  out_box};
      AddCompute(devices[i], std::move(sub), bufs, n, StepKind::kCompute, {piece});
      pieces.push_back(piece);
    }
    place_[y] = Placement{pieces, {}, true};
    return Status::OK();
  }

  // ---- Channel paths on one device (METHODS §6 "Path discovery") -------------
  // A layer whose channel split names one device N >= 2 times is a slice of
  // a *channel path*: the run [start, end] of such layers, in the shape
  //   (FDTO | FDT1 | PART=SPLIT) PART* (FDTI | FDT2 | nothing=CONCAT),
  // computed slice after slice. Slice k's one step runs every layer of the
  // path on its channels c_k: the fan-out layer its output channels c_k
  // (input whole), the PART layers the same channels, the fan-in layer its
  // partial sum over input channels c_k, added at once to the sum of the
  // slices before it (sum_k = sum_{k-1} + partial_k; the bias in the first
  // slice, the activation on the last add). So every tensor inside the
  // path exists one slice at a time, at most two sums are alive, and no MAC
  // is added (only the N-1 adds of K values). Without a fan-in at the end
  // the slices stay pieces and the first reader of the whole output
  // gathers them (CONCAT).
  static bool OneDeviceSlices(const LayerAssignment& a) {
    if (a.scheme == LayerScheme::kWhole || a.scheme == LayerScheme::kFfmt || a.devices.size() < 2) return false;
    return std::all_of(a.devices.begin(), a.devices.end(), [&](int d) { return d == a.devices[0]; });
  }
  static bool FanIn(LayerScheme s) { return s == LayerScheme::kFdti || s == LayerScheme::kFdt2; }
  static bool FanOut(LayerScheme s) { return s == LayerScheme::kFdto || s == LayerScheme::kFdt1; }

  // The last layer of the channel path that starts at `start`.
  int ChannelPathEnd(int start) const {
    int end = start;
    while (!FanIn(plan_.layers[end].scheme) && end + 1 < static_cast<int>(g_.nodes.size())) {
      const LayerAssignment& next = plan_.layers[end + 1];
      if (!OneDeviceSlices(next) || next.devices != plan_.layers[start].devices ||
          !(next.scheme == LayerScheme::kPart || FanIn(next.scheme)))
        break;
      ++end;
    }
    return end;
  }

  Status CompileChannelPath(int start, int end) {
    const std::string what = "channel path " + LayerName(start) + " .. " + LayerName(end) + " on one device";
    const int device = plan_.layers[start].devices[0];
    // The path's shape: every layer after the first reads the one before it,
    // and nothing but the path reads what the path makes inside it.
    std::set<int> graph_outputs(g_.outputs.begin(), g_.outputs.end());
    for (int n = start; n <= end; ++n) {
      const Node& node = g_.nodes[n];
      const LayerScheme scheme = plan_.layers[n].scheme;
      if (node.outputs.size() != 1) return Status::InvalidArgument(what + ": " + LayerName(n) + " has several outputs");
      if (scheme == LayerScheme::kPart) {
        TS_RETURN_IF_ERROR(CheckPerChannel(g_, node).WithContext(what));
      } else {
        if (!IsWeightSplitLayer(g_, node) || (node.op == "Conv" && node.attrs.Int("group", 1) > 1))
          return Status::InvalidArgument(what + ": " + LayerName(n) + " (" + LayerSchemeName(scheme) +
                                         ") must be a Conv with one group or a Gemm with constant weights");
        if (FanOut(scheme) && n != start)
          return Status::InvalidArgument(what + ": the fan-out " + LayerName(n) + " must be the path's first layer");
      }
      if (n > start && g_.ActivationInputs(node).at(0) != g_.nodes[n - 1].outputs[0])
        return Status::InvalidArgument(what + ": " + LayerName(n) + " does not read " + LayerName(n - 1));
      if (n < end) {
        const int v = node.outputs[0];
        if (graph_outputs.count(v)) return Status::InvalidArgument(what + ": " + LayerName(n) + " is a model output");
        for (int c : consumers_[v])
          if (c != n + 1) return Status::InvalidArgument(what + ": " + LayerName(n) + "'s output is read outside it");
      }
    }
    // The path's channels: the fan-out's outputs, else the first layer's inputs.
    const Node& first = g_.nodes[start];
    const bool fan_out = FanOut(plan_.layers[start].scheme);
    const int64_t C =
        fan_out ? g_.values[first.inputs.at(1)].shape.at(0) : g_.values[g_.ActivationInputs(first).at(0)].shape.at(1);
    TS_ASSIGN_OR_RETURN(auto split, SplitOf(start, C));
    for (int n = start + 1; n <= end; ++n)
      if (!plan_.layers[n].split.empty() && plan_.layers[n].split != plan_.layers[start].split)
        return Status::InvalidArgument(what + ": " + LayerName(n) + " has another channel split than " +
                                       LayerName(start));
    for (int n = start; n <= end; ++n) {
      const Node& node = g_.nodes[n];
      const int64_t channels = FanIn(plan_.layers[n].scheme) ? g_.values[g_.ActivationInputs(node).at(0)].shape.at(1)
                                                             : g_.values[node.outputs[0]].shape.at(1);
      if (channels != C)
        return Status::InvalidArgument(what + ": " + LayerName(n) + " has " + std::to_string(channels) +
                                       " channels, the path " + std::to_string(C));
    }
    const Node& last = g_.nodes[end];
    const bool fan_in = FanIn(plan_.layers[end].scheme);
    const int y = last.outputs[0];
    const Shape& ys = g_.values[y].shape;
    int first_slice = -1, last_slice = -1;
    for (size_t k = 0; k < split.size(); ++k)
      if (split[k].size() > 0) {
        if (first_slice < 0) first_slice = static_cast<int>(k);
        last_slice = static_cast<int>(k);
      }

    std::vector<Piece> pieces;
    int sum_buffer = -1;  // the running sum of the fan-in's partials
    for (int k = first_slice; k <= last_slice && k >= 0; ++k) {
      const Range1D c = split[k];
      if (c.size() == 0) continue;
      SubgraphBuilder sb(g_, first.name + "/slice" + std::to_string(c.begin) + "-" + std::to_string(c.end));
      std::vector<int> bufs;
      std::map<int, int> sub;  // graph value -> subgraph value (a slice, or the whole fan-out input)
      auto fetched = [&](int v, const Box& box) -> Result<int> {
        if (auto it = sub.find(v); it != sub.end()) return it->second;
        TS_ASSIGN_OR_RETURN(int buf, Fetch(v, device, box));
        bufs.push_back(buf);
        return sub[v] = sb.Input(v, box.shape());
      };
      for (int n = start; n <= end; ++n) {
        const Node& node = g_.nodes[n];
        const LayerScheme scheme = plan_.layers[n].scheme;
        const int o = node.outputs[0];
        const Shape& os = g_.values[o].shape;
        std::vector<int> ins;
        if (scheme == LayerScheme::kPart) {
          for (int v : node.inputs) {
            if (v < 0) {
              ins.push_back(-1);
            } else if (g_.values[v].constant) {
              ins.push_back(PartConstant(node, v, c, &sb));
            } else {
              TS_ASSIGN_OR_RETURN(int sv, fetched(v, ChannelSlice(g_.values[v].shape, c.begin, c.end)));
              ins.push_back(sv);
            }
          }
          Box ob = Box::Full(os);
          ob.dims[1] = c;
          const int out = sb.Value(g_.values[o].name, ob.shape());
          sb.AddNode(PartClone(node, ins, out, c));
          sub[o] = out;
          continue;
        }
        const int x = node.inputs.at(0);
        const TensorData& w = *g_.ConstantData(node.inputs.at(1));
        const TensorData* b = node.inputs.size() > 2 && node.inputs[2] >= 0 ? g_.ConstantData(node.inputs[2]) : nullptr;
        if (FanOut(scheme)) {  // output channels c, from the whole input
          TS_ASSIGN_OR_RETURN(int sx, fetched(x, Box::Full(g_.values[x].shape)));
          ins = {sx, sb.Constant(SliceName(g_.values[node.inputs[1]].name, 0, c), SliceAxis(w, 0, c.begin, c.end))};
          if (b)
            ins.push_back(
                sb.Constant(SliceName(g_.values[node.inputs[2]].name, 0, c), SliceAxis(*b, 0, c.begin, c.end)));
          const int out = sb.Value(g_.values[o].name, ChannelSlice(os, c.begin, c.end).shape());
          sb.AddNode(Clone(node, ins, {out}));
          sub[o] = out;
          continue;
        }
        // Fan-in: the partial sum over input channels c, added to the sum so far.
        const Shape& xs = g_.values[x].shape;
        const int64_t per_channel = node.op == "Conv" ? 1 : NumElements(xs) / (xs[0] * xs[1]);
        TS_ASSIGN_OR_RETURN(int sx, fetched(x, ChannelSlice(xs, c.begin, c.end)));
        ins = {sx,
               sb.Constant(SliceName(g_.values[node.inputs[1]].name, 1, {c.begin * per_channel, c.end * per_channel}),
                           SliceAxis(w, 1, c.begin * per_channel, c.end * per_channel))};
        const bool first_k = k == first_slice, last_k = k == last_slice;
        // An integer conv split over several slices sums int32 and rounds
        // once after the last (IntegerMergeOf); one slice is the whole conv.
        const auto integer = first_k && last_k ? std::nullopt : IntegerMergeOf(node);
        if (first_k && b && !integer) ins.push_back(sb.CopyConstant(node.inputs[2]));  // the bias, once
        const int partial = sb.Value(g_.values[o].name + "/partial", os);
        Node clone = Clone(node, ins, {partial});
        if (!(first_k && last_k)) clone.attrs.Erase("activation");  // applied once, on the whole sum
        if (integer) MarkIntegerPartial(*integer, &clone);
        sb.AddNode(clone);
        int result = partial;
        if (!first_k) {
          const int before = sb.InputNamed(g_.values[o].name + "/sum", os);
          bufs.push_back(sum_buffer);
          result = sb.Value(g_.values[o].name + "/sum" + std::to_string(k), os);
          Node add{node.name + "/sum" + std::to_string(k), "Add", {before, partial}, {result}, {}};
          if (integer) {
            add.attrs.Set("integer_sum", int64_t{1});
          } else if (last_k) {  // an Add may carry any fused activation (op_traits.h)
            for (const char* attr : {"activation", "act_alpha", "act_beta"})
              if (node.attrs.Has(attr)) add.attrs.Set(attr, node.attrs.all().at(attr));
          }
          sb.AddNode(std::move(add));
        }
        if (integer && last_k) {
          const int requantized = sb.Value(g_.values[o].name + "/requantized", os);
          sb.AddNode(IntegerRequant(node, *integer, result, RequantBias(node, &sb), requantized));
          result = requantized;
        }
        sub[o] = result;
      }
      sb.Output(sub.at(y));
      TS_ASSIGN_OR_RETURN(Graph step, sb.Finish());
      Piece piece;
      if (fan_in) {
        const bool last_k = k == last_slice;
        const Box full = Box::Full(ys);
        piece = {device,
                 progs_[device].AddBuffer(last_k ? y : -1, full,
                                          g_.values[y].name + (last_k ? "" : "/sum" + std::to_string(k))),
                 full};
        sum_buffer = piece.buffer;
      } else {
        Box ob = Box::Full(ys);
        ob.dims[1] = c;
        piece = {device, progs_[device].AddBuffer(y, ob, g_.values[y].name + "@" + ob.ToString()), ob};
        pieces.push_back(piece);
      }
      AddCompute(device, std::move(step), bufs, start, StepKind::kCompute, {piece});
    }
    if (fan_in) pieces = {{device, sum_buffer, Box::Full(ys)}};
    place_[y] = Placement{pieces, {}, false};
    return Status::OK();
  }

  // ---- FFMT --------------------------------------------------------------------
  // Splits the run [first, last] of FFMT layers into fused stacks whose only
  // value leaving the stack is the last layer's output, longest first.
  Status CompileFfmtRun(int first, int last) {
    int start = first;
    while (start <= last) {
      int end = start;
      for (int k = start; k <= last; ++k)
        if (StackIsClosed(start, k)) end = k;
      TS_RETURN_IF_ERROR(CompileStack(start, end));
      start = end + 1;
    }
    return Status::OK();
  }

  bool StackIsClosed(int start, int k) const {
    if (g_.nodes[k].outputs.size() != 1) return false;
    std::set<int> graph_outputs(g_.outputs.begin(), g_.outputs.end());
    for (int n = start; n <= k; ++n)
      for (int v : g_.nodes[n].outputs) {
        if (v == g_.nodes[k].outputs[0]) continue;
        if (graph_outputs.count(v)) return false;
        for (int c : consumers_[v])
          if (c < start || c > k) return false;
      }
    return true;
  }

  // A QuantizeDequantize that reads a stack input and only that (a QDQ
  // model's input quantizer), on a device that moves contiguous runs only
  // (an MCU): computed per tile in a step of its own.
  bool QuantizesStackInputApart(const Node& node, int device, const std::set<int>& in_stack_values) const {
    if (node.op != "QuantizeDequantize" || !options_.contiguous_io_devices.count(device)) return false;
    const auto acts = g_.ActivationInputs(node);
    return acts.size() == 1 && !in_stack_values.count(acts[0]) && consumers_[acts[0]].size() == 1 &&
           g_.values[acts[0]].shape.size() == 4;
  }

  // One tile's walk back through a fused stack [start, end] from its region
  // of the stack output y (METHODS §2 FFMT).
  struct LayerView {
    std::vector<TileRegion> in;  // per activation input, the region it reads
    TileRegion out;              // the region of its output this tile computes
    int64_t pad_begin[2] = {0, 0}, pad_end[2] = {0, 0};
    bool used = false;
  };
  struct TileWalk {
    std::map<int, TileRegion> need;  // graph value -> region the tile needs of it
    std::vector<LayerView> view;     // per layer of the stack
    int64_t macs = 0;                // MACs the tile computes
  };
  Result<TileWalk> WalkTileBack(int start, int end, int y, const TileRegion& tile) const {
    TileWalk w;
    std::map<int, TileRegion>& need = w.need;
    w.view.resize(end - start + 1);
    need[y] = tile;
    for (int n = end; n >= start; --n) {
      const Node& node = g_.nodes[n];
      auto it = need.find(node.outputs[0]);
      if (it == need.end()) continue;
      LayerView& lv = w.view[n - start];
      lv.used = true;
      const TileRegion out = it->second;
      lv.out = out;
      TS_ASSIGN_OR_RETURN(const TileRule rule, TileRuleOf(g_, n));
      const auto acts = g_.ActivationInputs(node);
      for (size_t k = 0; k < acts.size(); ++k) {
        const int v = acts[k];
        TileRegion in = out;
        if (rule.whole_input[k]) {  // broadcast over space (an SE gate): every tile reads all of it
          const Shape& vs = g_.values[v].shape;
          in = TileRegion{{0, vs[2]}, {0, vs[3]}};
        } else if (rule.window) {
          TS_ASSIGN_OR_RETURN(auto regions, BackPropagateTile({rule.w}, out));
          in = regions[0].input;
          for (int ax = 0; ax < 2; ++ax)
            lv.pad_begin[ax] = regions[0].pad_begin[ax], lv.pad_end[ax] = regions[0].pad_end[ax];
        }
        lv.in.push_back(in);
        auto [pos, inserted] = need.emplace(v, in);
        if (!inserted) pos->second = Union(pos->second, in);
      }
      w.macs += out.rows.size() * out.cols.size() * macs_per_position_[n];
    }
    return w;
  }

  Status CompileStack(int start, int end) {
    for (int n = start; n <= end; ++n) TS_RETURN_IF_ERROR(CheckTileable(g_, n));
    const LayerAssignment& a = plan_.layers[start];
    if (a.parts) return CompileStackInParts(start, end);
    const auto devices = DevicesOf(start);
    const int y = g_.nodes[end].outputs[0];
    const Shape& ys = g_.values[y].shape;
    std::vector<double> rw = a.row_weights, cw = a.col_weights;
    if (rw.empty()) rw.assign(std::max<int64_t>(1, a.grid_rows), 1.0);
    if (cw.empty()) cw.assign(std::max<int64_t>(1, a.grid_cols), 1.0);
    const auto tiles = GridTiles(ys[2], ys[3], rw, cw);
    std::set<int> in_stack_values;
    for (int n = start; n <= end; ++n)
      for (int v : g_.nodes[n].outputs) in_stack_values.insert(v);

    int64_t tiled_macs = 0, whole_macs = 0;
    for (int n = start; n <= end; ++n) {
      const Shape& s = g_.values[g_.nodes[n].outputs[0]].shape;
      whole_macs += s[2] * s[3] * macs_per_position_[n];
    }
    // Backwards, every tile: the region each value must provide, and each
    // layer's view.
    std::vector<TileWalk> walks;
    for (const TileRegion& tile : tiles) {
      TS_ASSIGN_OR_RETURN(TileWalk w, WalkTileBack(start, end, y, tile));
      tiled_macs += w.macs;
      walks.push_back(std::move(w));
    }
    // Every tile's stack inputs are fetched before any tile computes, so a
    // device sends what its peers need of values it already holds before
    // it starts on its own tile (halo exchange: neighbours' rows of the
    // layer before); fetched inside the tile loop, a device's sends for
    // later tiles would wait for its own tile's compute, and each tile
    // would wait for the one before it.
    const auto phase = BeginFetchPhase();
    for (size_t t = 0; t < tiles.size(); ++t) {
      const int device = devices[t % devices.size()];
      for (int n = start; n <= end; ++n) {
        if (!walks[t].view[n - start].used) continue;
        for (int v : g_.nodes[n].inputs)
          if (v >= 0 && !g_.values[v].constant && !in_stack_values.count(v))
            TS_RETURN_IF_ERROR(Fetch(v, device, SpatialBox(g_.values[v].shape, walks[t].need.at(v))).status());
      }
    }
    EndFetchPhase(phase);
    std::vector<Piece> pieces;
    for (size_t t = 0; t < tiles.size(); ++t) {
      const int device = devices[t % devices.size()];
      std::map<int, TileRegion>& need = walks[t].need;
      const std::vector<LayerView>& view = walks[t].view;
      // Forwards: the tile's subgraph.
      SubgraphBuilder sb(g_, g_.nodes[start].name + "/tile" + std::to_string(t));
      std::map<int, int> sub_value;  // graph value -> subgraph value holding need[value]
      std::vector<int> bufs;
      for (int n = start; n <= end; ++n) {
        const Node& node = g_.nodes[n];
        const LayerView& lv = view[n - start];
        if (!lv.used) continue;
        if (QuantizesStackInputApart(node, device, in_stack_values)) {
          // A step of its own, so that an MCU receives its tile of the
          // input as codes (mcu_program_builder.h FuseMcuQuantizeSteps).
          const int in_v = node.inputs[0], out_v = node.outputs[0];
          const Box in_box = SpatialBox(g_.values[in_v].shape, need[in_v]);
          const Box out_box = SpatialBox(g_.values[out_v].shape, need[out_v]);
          TS_ASSIGN_OR_RETURN(int in_buf, Fetch(in_v, device, in_box));
          SubgraphBuilder qb(g_, node.name + "/tile" + std::to_string(t));
          std::vector<int> qins{qb.Input(in_v, in_box.shape())};
          for (size_t k = 1; k < node.inputs.size(); ++k) TakeNonActivation(node.inputs[k], &qb, &qins);
          const int q_out = qb.Value(g_.values[out_v].name, out_box.shape());
          qb.AddNode(Clone(node, qins, {q_out}));
          qb.Output(q_out);
          TS_ASSIGN_OR_RETURN(Graph qsub, qb.Finish());
          const int q_buf = progs_[device].AddBuffer(out_v, out_box, g_.values[out_v].name + "@" + out_box.ToString());
          AddCompute(device, std::move(qsub), {in_buf}, n, StepKind::kCompute, {Piece{device, q_buf, out_box}});
          bufs.push_back(q_buf);
          sub_value[out_v] = sb.Input(out_v, out_box.shape());
          continue;
        }
        std::vector<int> ins;
        size_t act_index = 0;
        for (int v : node.inputs) {
          if (TakeNonActivation(v, &sb, &ins)) continue;
          const Shape& vs = g_.values[v].shape;
          if (!sub_value.count(v)) {  // a stack input: fetch its region once
            TS_ASSIGN_OR_RETURN(int buf, Fetch(v, device, SpatialBox(vs, need[v])));
            bufs.push_back(buf);
            sub_value[v] = sb.Input(v, SpatialBox(vs, need[v]).shape());
          }
          int sv = sub_value[v];
          const TileRegion& have = need[v];
          const TileRegion& want = lv.in[act_index++];
          if (!(have == want)) {  // another consumer needed more: crop
            int cropped = sb.Value(g_.values[v].name + "/crop", SpatialBox(vs, want).shape());
            Node slice{node.name + "/crop", "Slice", {sv}, {cropped}, {}};
            slice.attrs.Set("starts", std::vector<int64_t>{want.rows.begin - have.rows.begin,
                                                           want.cols.begin - have.cols.begin});
            slice.attrs.Set("ends", std::vector<int64_t>{want.rows.end - have.rows.begin,
                                                         want.cols.end - have.cols.begin});
            slice.attrs.Set("axes", std::vector<int64_t>{2, 3});
            sb.AddNode(slice);
            sv = cropped;
          }
          ins.push_back(sv);
        }
        const int out_v = node.outputs[0];
        int out = sb.Value(g_.values[out_v].name, SpatialBox(g_.values[out_v].shape, need[out_v]).shape());
        sub_value[out_v] = out;
        Node clone = Clone(node, ins, {out});
        if (node.op == "Pad") {  // a window of size 1: only border tiles pad (op_traits.h)
          clone.attrs.Set("pads", std::vector<int64_t>{0, 0, lv.pad_begin[0], lv.pad_begin[1], 0, 0, lv.pad_end[0],
                                                       lv.pad_end[1]});
        } else if (node.op == "Conv" || node.op == "MaxPool" || node.op == "AveragePool") {
          clone.attrs.Set("pads", std::vector<int64_t>{lv.pad_begin[0], lv.pad_begin[1], lv.pad_end[0], lv.pad_end[1]});
          clone.attrs.Set("ceil_mode", static_cast<int64_t>(0));
        } else if (node.op == "Resize") {
          SetResizeTile(node, lv.in.at(0), lv.out, &clone);
        } else if (node.op == "ConvTranspose") {
          SetTransposedTile(node, lv.in.at(0), lv.out, &clone);
        }
        sb.AddNode(clone);
      }
      sb.Output(sub_value[y]);
      TS_ASSIGN_OR_RETURN(Graph sub, sb.Finish());
      const Box out_box = SpatialBox(ys, tiles[t]);
      Piece piece{device, progs_[device].AddBuffer(y, out_box, g_.values[y].name + "@" + out_box.ToString()),
                  out_box};
      AddCompute(device, std::move(sub), bufs, start, StepKind::kCompute, {piece});
      pieces.push_back(piece);
    }
    place_[y] = Placement{pieces, {}, false};
    halo_ += tiled_macs - whole_macs;
    return Status::OK();
  }

  // Processing in parts (issue 18 item 3; LayerAssignment::parts): the
  // stack's output y in row bands t = 0..P-1, on one device, full width.
  // Per band and per value v of the stack, backwards from y:
  //   computed_t(v) = rows of v band t computes: the rows its consumers'
  //                   computed rows read (window_t(v)) minus rows computed
  //                   by earlier bands (below end_{t-1}(v));
  //   window_t(v)   = rows [b, e) the consumers read = cache_t(v) (rows
  //                   [b, end_{t-1}) kept from band t-1) + computed_t(v).
  // Band t's subgraph takes the stack inputs' windows and every cache_t,
  // concatenates each cache with the rows it computes (Concat on the rows)
  // and gives y's rows and every cache_{t+1} (Slice of window_t). Pads are
  // those of the computed rows (BackPropagateTile), as for an FFMT tile.
  Status CompileStackInParts(int start, int end) {
    const LayerAssignment& a = plan_.layers[start];
    const auto devices = DevicesOf(start);
    if (devices.size() != 1 || a.grid_cols != 1)
      return Status::InvalidArgument("layers " + LayerLabel(g_, start) + " .. " + LayerLabel(g_, end) +
                                     ": processing in parts runs on one device in row bands (grid Px1), not " +
                                     std::to_string(devices.size()) + " devices with a " + std::to_string(a.grid_rows) +
                                     "x" + std::to_string(a.grid_cols) + " grid");
    const int device = devices[0];
    const int y = g_.nodes[end].outputs[0];
    const Shape& ys = g_.values[y].shape;
    std::vector<double> rw = a.row_weights;
    if (rw.empty()) rw.assign(std::max<int64_t>(1, a.grid_rows), 1.0);
    const auto bands = GridTiles(ys[2], ys[3], rw, {1.0});
    std::set<int> inside;  // values produced in the stack
    for (int n = start; n <= end; ++n) inside.insert(g_.nodes[n].outputs[0]);
    auto full_cols = [&](int v, Range1D rows) { return TileRegion{rows, {0, g_.values[v].shape[3]}}; };

    // Pass 1: every band's rows per value and per layer.
    struct LayerBand {
      bool used = false;
      Range1D out;                 // rows computed
      std::vector<TileRegion> in;  // per activation input, the region read (full width but for
                                   // the columns a strided window skips)
      int64_t pad_begin[2] = {0, 0}, pad_end[2] = {0, 0};
    };
    struct Band {
      std::map<int, Range1D> window, computed;  // per value
      std::map<int, int64_t> done;              // per value: rows [0, done) computed by earlier bands
      std::vector<LayerBand> layer;
    };
    std::vector<Band> plan(bands.size());
    std::map<int, int64_t> done;  // per value: rows [0, done) computed by earlier bands
    for (size_t t = 0; t < bands.size(); ++t) {
      Band& b = plan[t];
      b.done = done;
      b.layer.resize(end - start + 1);
      b.window[y] = bands[t].rows;
      for (int n = end; n >= start; --n) {
        const Node& node = g_.nodes[n];
        const int o = node.outputs[0];
        auto w = b.window.find(o);
        if (w == b.window.end()) continue;
        const int64_t from = std::max(w->second.begin, done.count(o) ? done[o] : 0);
        const Range1D rows{from, w->second.end};
        b.computed[o] = rows;
        if (rows.size() <= 0) continue;  // every row it must give is kept from earlier bands
        LayerBand& lb = b.layer[n - start];
        lb.used = true;
        lb.out = rows;
        TS_ASSIGN_OR_RETURN(const TileRule rule, TileRuleOf(g_, n));
        const auto acts = g_.ActivationInputs(node);
        for (size_t k = 0; k < acts.size(); ++k) {
          const int v = acts[k];
          TileRegion in = full_cols(v, rows);
          if (rule.whole_input[k]) {
            if (inside.count(v))
              return Status::InvalidArgument(LayerLabel(g_, n) + " reads all of " + g_.values[v].name +
                                             ", made in the same stack: it cannot be processed in parts");
            in = full_cols(v, {0, g_.values[v].shape[2]});
          } else if (rule.window) {
            TS_ASSIGN_OR_RETURN(auto regions, BackPropagateTile({rule.w}, full_cols(o, rows)));
            in = regions[0].input;
            for (int ax = 0; ax < 2; ++ax)
              lb.pad_begin[ax] = regions[0].pad_begin[ax], lb.pad_end[ax] = regions[0].pad_end[ax];
          }
          lb.in.push_back(in);
          auto [pos, inserted] = b.window.emplace(v, in.rows);
          if (!inserted)
            pos->second = {std::min(pos->second.begin, in.rows.begin), std::max(pos->second.end, in.rows.end)};
        }
      }
      for (const auto& [v, rows] : b.computed)
        if (rows.size() > 0) done[v] = std::max(done.count(v) ? done[v] : 0, rows.end);
    }

    // Pass 2: the subgraphs and the device program's steps.
    std::map<int, int> cache_buffer;  // value -> buffer holding cache_t(value) for the band being built
    std::map<int, Range1D> cache_rows;
    std::vector<Piece> pieces;
    for (size_t t = 0; t < bands.size(); ++t) {
      const Band& b = plan[t];
      SubgraphBuilder sb(g_, g_.nodes[start].name + "/part" + std::to_string(t));
      std::map<int, int> window_value;  // graph value -> subgraph value holding window_t(value)
      std::vector<int> in_bufs;
      // Caches from the band before, first (inputs of the subgraph).
      std::map<int, int> cache_value;
      for (const auto& [v, buf] : cache_buffer) {
        const Shape& vs = g_.values[v].shape;
        in_bufs.push_back(buf);
        cache_value[v] = sb.Input(v, SpatialBox(vs, full_cols(v, cache_rows[v])).shape(), "/kept");
      }
      for (int n = start; n <= end; ++n) {
        const Node& node = g_.nodes[n];
        const LayerBand& lb = b.layer[n - start];
        if (!lb.used) {  // every row of its output this band reads was kept
          if (auto kept = cache_value.find(node.outputs[0]); kept != cache_value.end())
            window_value[node.outputs[0]] = kept->second;
          continue;
        }
        std::vector<int> ins;
        size_t act = 0;
        for (int v : node.inputs) {
          if (TakeNonActivation(v, &sb, &ins)) continue;
          const Shape& vs = g_.values[v].shape;
          const Range1D have = b.window.at(v);
          if (!window_value.count(v)) {
            if (!inside.count(v)) {  // a stack input: fetch its window
              const Box box = SpatialBox(vs, full_cols(v, have));
              TS_ASSIGN_OR_RETURN(int buf, Fetch(v, device, box));
              in_bufs.push_back(buf);
              window_value[v] = sb.Input(v, box.shape());
            } else {
              return Status::Internal("value " + g_.values[v].name + " is read before its rows are computed");
            }
          }
          int sv = window_value[v];
          const TileRegion want = lb.in[act++];
          if (!(want == full_cols(v, have))) {  // another consumer reads more, or a strided window skips columns
            int cropped = sb.Value(g_.values[v].name + "/crop", SpatialBox(vs, want).shape());
            Node slice{node.name + "/crop", "Slice", {sv}, {cropped}, {}};
            slice.attrs.Set("starts", std::vector<int64_t>{want.rows.begin - have.begin, want.cols.begin});
            slice.attrs.Set("ends", std::vector<int64_t>{want.rows.end - have.begin, want.cols.end});
            slice.attrs.Set("axes", std::vector<int64_t>{2, 3});
            sb.AddNode(slice);
            sv = cropped;
          }
          ins.push_back(sv);
        }
        const int o = node.outputs[0];
        const Shape& os = g_.values[o].shape;
        int out = sb.Value(g_.values[o].name, SpatialBox(os, full_cols(o, lb.out)).shape());
        Node clone = Clone(node, ins, {out});
        if (node.op == "Pad") {
          clone.attrs.Set(
              "pads", std::vector<int64_t>{0, 0, lb.pad_begin[0], lb.pad_begin[1], 0, 0, lb.pad_end[0], lb.pad_end[1]});
        } else if (node.op == "Conv" || node.op == "MaxPool" || node.op == "AveragePool") {
          clone.attrs.Set("pads", std::vector<int64_t>{lb.pad_begin[0], lb.pad_begin[1], lb.pad_end[0], lb.pad_end[1]});
          clone.attrs.Set("ceil_mode", static_cast<int64_t>(0));
        } else if (node.op == "Resize" || node.op == "ConvTranspose") {
          return Status::InvalidArgument(LayerLabel(g_, n) + ": " + node.op + " is not processed in parts yet");
        }
        sb.AddNode(clone);
        // Its window for the layers after it: the kept rows, then these.
        int window = out;
        if (auto kept = cache_value.find(o); kept != cache_value.end()) {
          const Range1D w = b.window.count(o) ? b.window.at(o) : lb.out;
          window = sb.Value(g_.values[o].name + "/window", SpatialBox(os, full_cols(o, w)).shape());
          Node cat{node.name + "/window", "Concat", {kept->second, out}, {window}, {}};
          cat.attrs.Set("axis", static_cast<int64_t>(2));
          sb.AddNode(cat);
        }
        window_value[o] = window;
      }
      // Outputs: y's band, then what the next band keeps of each value.
      sb.Output(window_value.at(y));
      const Box out_box = SpatialBox(ys, bands[t]);
      std::vector<Piece> outs{
          {device, progs_[device].AddBuffer(y, out_box, g_.values[y].name + "@" + out_box.ToString()), out_box}};
      std::map<int, int> next_buffer;
      std::map<int, Range1D> next_rows;
      if (t + 1 < bands.size()) {
        const Band& nb = plan[t + 1];
        for (const auto& [v, w] : nb.window) {
          if (!inside.count(v) || v == y) continue;
          const int64_t computed_end = nb.done.count(v) ? nb.done.at(v) : 0;
          const Range1D keep{w.begin, std::min(w.end, computed_end)};
          if (keep.size() <= 0) continue;
          auto have = window_value.find(v);
          const Range1D have_rows = b.window.count(v) ? b.window.at(v) : Range1D{};
          if (have == window_value.end() || keep.begin < have_rows.begin || keep.end > have_rows.end)
            return Status::Internal("band " + std::to_string(t + 1) + " of " + LayerLabel(g_, start) +
                                    " reads rows of " + g_.values[v].name + " band " + std::to_string(t) +
                                    " does not hold");
          const Shape& vs = g_.values[v].shape;
          int kept = have->second;
          if (!(keep == have_rows)) {
            kept = sb.Value(g_.values[v].name + "/keep", SpatialBox(vs, full_cols(v, keep)).shape());
            Node slice{g_.values[v].name + "/keep", "Slice", {have->second}, {kept}, {}};
            slice.attrs.Set("starts", std::vector<int64_t>{keep.begin - have_rows.begin});
            slice.attrs.Set("ends", std::vector<int64_t>{keep.end - have_rows.begin});
            slice.attrs.Set("axes", std::vector<int64_t>{2});
            sb.AddNode(slice);
          }
          sb.Output(kept);
          const Box kb = SpatialBox(vs, full_cols(v, keep));
          const int buf = progs_[device].AddBuffer(v, kb, g_.values[v].name + "@kept" + kb.ToString());
          outs.push_back({device, buf, kb});
          next_buffer[v] = buf;
          next_rows[v] = keep;
        }
      }
      TS_ASSIGN_OR_RETURN(Graph sub, sb.Finish());
      AddCompute(device, std::move(sub), in_bufs, start, StepKind::kCompute, outs);
      pieces.push_back(outs[0]);
      cache_buffer = std::move(next_buffer);
      cache_rows = std::move(next_rows);
    }
    place_[y] = Placement{pieces, {}, false};
    return Status::OK();  // no MAC is computed twice (halo_ unchanged)
  }

  // Tells a Resize that computes `out` from `in` where they sit in the whole
  // map (resize_map.h, tile_* attributes), so it transforms coordinates as
  // the untiled Resize does.
  void SetResizeTile(const Node& node, const TileRegion& in, const TileRegion& out, Node* clone) const {
    const Shape& xs = g_.values[g_.ActivationInputs(node).at(0)].shape;
    const Shape& ys = g_.values[node.outputs[0]].shape;
    clone->attrs.Set(kResizeTileOutputOrigin, std::vector<int64_t>{out.rows.begin, out.cols.begin});
    clone->attrs.Set(kResizeTileInputOrigin, std::vector<int64_t>{in.rows.begin, in.cols.begin});
    clone->attrs.Set(kResizeTileFullInput, std::vector<int64_t>{xs[2], xs[3]});
    clone->attrs.Set(kResizeTileFullOutput, std::vector<int64_t>{ys[2], ys[3]});
  }

  // Pads that make a ConvTranspose on input rows [i0, i1) produce exactly
  // output rows [o0, o1) (halo.h): input i0 lands at o0 − (p + o0 − i0·s)
  // locally, so the leading pad is p + o0 − i0·s; the trailing pad makes the
  // kernel's output size (graph.h formula, output_padding 0) o1 − o0.
  void SetTransposedTile(const Node& node, const TileRegion& in, const TileRegion& out, Node* clone) const {
    const auto s = node.attrs.Ints("strides", {1, 1});
    const auto d = node.attrs.Ints("dilations", {1, 1});
    const auto p = node.attrs.Ints("pads", {0, 0, 0, 0});
    const Shape& ws = g_.values[node.inputs.at(1)].shape;
    const Range1D in_r[2] = {in.rows, in.cols}, out_r[2] = {out.rows, out.cols};
    std::vector<int64_t> pads(4);
    for (int a = 0; a < 2; ++a) {
      pads[a] = p[a] + out_r[a].begin - in_r[a].begin * s[a];
      pads[2 + a] = s[a] * (in_r[a].size() - 1) + (ws[2 + a] - 1) * d[a] + 1 - pads[a] - out_r[a].size();
    }
    clone->attrs.Set("pads", pads);
    clone->attrs.Set("output_padding", std::vector<int64_t>{0, 0});
  }

  const Graph& g_;
  const PartitionPlan& plan_;
  const CompileOptions options_;
  std::vector<DeviceProgram> progs_;
  std::vector<Placement> place_;
  std::vector<std::vector<int>> consumers_;
  std::vector<int64_t> macs_per_position_;
  int64_t next_message_ = 0;
  int64_t halo_ = 0;
};

}  // namespace

TensorData SliceAxis(const TensorData& t, size_t axis, int64_t begin, int64_t end) {
  TensorData out;
  out.shape = t.shape;
  out.shape.at(axis) = end - begin;
  // A weight without values (shapes-only import, issue 11) slices to a
  // weight without values: reading t.values here would run off an empty vector.
  if (t.values.empty()) return out;
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < axis; ++i) outer *= t.shape[i];
  for (size_t i = axis + 1; i < t.shape.size(); ++i) inner *= t.shape[i];
  out.values.reserve(static_cast<size_t>(NumElements(out.shape)));
  for (int64_t o = 0; o < outer; ++o) {
    const float* src = t.values.data() + (o * t.shape[axis] + begin) * inner;
    out.values.insert(out.values.end(), src, src + (end - begin) * inner);
  }
  return out;
}

Result<CompiledPlan> CompilePlan(const Graph& graph, const PartitionPlan& plan, const CompileOptions& options) {
  Compiler c(graph, plan, options);
  TS_ASSIGN_OR_RETURN(CompiledPlan compiled, c.Run());
  for (int d : plan.compact_weights) {
    if (d < 0 || d >= static_cast<int>(compiled.programs.size()))
      return Status::InvalidArgument("the plan marks device " + std::to_string(d) + " for compact weights; it has " +
                                     std::to_string(compiled.programs.size()) + " devices");
    for (Graph& sub : compiled.programs[d].subgraphs)
      for (Node& n : sub.nodes)
        if (n.op == "Conv") n.attrs.Set("compact_weights", int64_t{1});
  }
  return compiled;
}

}  // namespace tessera
