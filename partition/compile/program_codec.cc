#include "partition/compile/program_codec.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <fstream>
#include <map>
#include <optional>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "util/limits.h"

#include "proto/program.pb.h"

namespace tessera {

namespace {

void ToMsg(const Box& b, proto::BoxMsg* m) {
  for (const auto& r : b.dims) {
    auto* d = m->add_dims();
    d->set_begin(r.begin);
    d->set_end(r.end);
  }
}

Box FromMsg(const proto::BoxMsg& m) {
  Box b;
  for (const auto& d : m.dims()) b.dims.push_back({d.begin(), d.end()});
  return b;
}

// Constants of a program written so far, by identity (ConstantIdentity).
using SeenConstants = std::map<std::string, std::pair<int, int>>;

// `subgraph`, `seen`, `shared`: set when `g` is subgraph `subgraph` of a
// program; a constant equal to one written before (or one the program
// already shares) is written as a reference to it.
void ToMsg(const Graph& g, proto::GraphMsg* m, int subgraph = -1, SeenConstants* seen = nullptr,
           const std::map<std::pair<int, int>, std::pair<int, int>>* shared = nullptr) {
  m->set_name(g.name);
  for (size_t v = 0; v < g.values.size(); ++v) {
    auto* vm = m->add_values();
    vm->set_name(g.values[v].name);
    for (int64_t d : g.values[v].shape) vm->add_shape(d);
    if (const TensorData* data = g.ConstantData(static_cast<int>(v))) {
      vm->set_constant(true);
      std::optional<std::pair<int, int>> same;
      if (shared != nullptr) {
        auto it = shared->find({subgraph, static_cast<int>(v)});
        if (it != shared->end()) same = it->second;
      }
      if (!same && seen != nullptr && !data->values.empty()) {
        auto [it, inserted] =
            seen->emplace(ConstantIdentity(g, static_cast<int>(v)), std::pair<int, int>{subgraph, static_cast<int>(v)});
        if (!inserted) same = it->second;
      }
      if (same) {
        vm->mutable_same_as()->set_subgraph(same->first);
        vm->mutable_same_as()->set_value(same->second);
      } else {
        vm->set_data(std::string(reinterpret_cast<const char*>(data->values.data()), data->values.size() * 4));
      }
    }
  }
  for (const Node& n : g.nodes) {
    auto* nm = m->add_nodes();
    nm->set_name(n.name);
    nm->set_op(n.op);
    for (int i : n.inputs) nm->add_inputs(i);
    for (int o : n.outputs) nm->add_outputs(o);
    for (const auto& [name, value] : n.attrs.all()) {
      auto* am = nm->add_attrs();
      am->set_name(name);
      if (auto* i = std::get_if<int64_t>(&value)) am->set_i(*i);
      else if (auto* f = std::get_if<double>(&value)) am->set_f(*f);
      else if (auto* s = std::get_if<std::string>(&value)) am->set_s(*s);
      else if (auto* is = std::get_if<std::vector<int64_t>>(&value)) {
        auto* l = am->mutable_ints();
        for (int64_t x : *is) l->add_v(x);
      } else if (auto* fs = std::get_if<std::vector<double>>(&value)) {
        auto* l = am->mutable_floats();
        for (double x : *fs) l->add_v(x);
      }
    }
  }
  for (int i : g.inputs) m->add_inputs(i);
  for (int o : g.outputs) m->add_outputs(o);
}

// Each constant's bytes are released from `m` as soon as they are copied
// out (issue 11: a worker loading a program holds the message plus one
// tensor, not the message plus every decoded weight).
// `program`: the subgraphs decoded so far, for constants written as a
// reference to an earlier one (same_as): with `share`, the constant gets no
// values and is recorded in program->shared_constants under `subgraph`;
// otherwise it gets a copy of the values referred to.
// `extents`: where each constant's values are in the program's file
// (index in m.values -> byte offset, byte length), when it is parsed from
// its file with stream_constants: those constants get no values and are
// recorded in program->streamed_constants; a reference to one (same_as)
// stays a reference (share) or gets a copy read from the file.
using ValueExtents = std::map<int, std::pair<int64_t, int64_t>>;
Result<Graph> FromMsg(proto::GraphMsg& m, const std::string& origin, DeviceProgram* program = nullptr,
                      bool share = false, const ValueExtents* extents = nullptr) {
  Graph g;
  const int subgraph = program != nullptr ? static_cast<int>(program->subgraphs.size()) : -1;
  g.name = m.name();
  const int nv = m.values_size();
  auto check_id = [&](int id, const std::string& what) -> Status {
    if (id < -1 || id >= nv)
      return Status::DataLoss(origin + ": subgraph '" + m.name() + "': " + what + " refers to value " +
                              std::to_string(id) + " of " + std::to_string(nv));
    return Status::OK();
  };
  for (auto& vm : *m.mutable_values()) {
    Shape shape(vm.shape().begin(), vm.shape().end());
    int64_t volume = 1;
    for (int64_t d : shape) {
      if (d < 0 || d > (int64_t{1} << 31))
        return Status::DataLoss(origin + ": value '" + vm.name() + "' has an invalid dimension");
      volume *= std::max<int64_t>(1, d);
      if (volume > (int64_t{1} << 31)) return Status::DataLoss(origin + ": value '" + vm.name() + "' is implausibly large");
    }
    if (vm.constant() && vm.has_same_as()) {
      const int rs = vm.same_as().subgraph(), rv = vm.same_as().value();
      const TensorData* ref = nullptr;
      if (program != nullptr && rs >= 0 && rs < subgraph) {
        const Graph& earlier = program->subgraphs[rs];
        if (rv >= 0 && rv < static_cast<int>(earlier.values.size()) && earlier.values[rv].name == vm.name())
          ref = earlier.ConstantData(rv);
        if (program->shared_constants.count({rs, rv})) ref = nullptr;  // a reference to a reference
      }
      // A constant left in the file (stream_constants) stays there: its
      // readers read it from the file too, as they prepare.
      const int64_t n = NumElements(shape);
      auto streamed = program != nullptr ? program->streamed_constants.find({rs, rv})
                                         : std::map<std::pair<int, int>, int64_t>::iterator{};
      const bool in_file = program != nullptr && streamed != program->streamed_constants.end();
      if (ref == nullptr || ref->shape != shape || (!in_file && ref->values.size() != static_cast<size_t>(n)))
        return Status::DataLoss(origin + ": constant '" + vm.name() + "' refers to constant " + std::to_string(rv) +
                                " of subgraph " + std::to_string(rs) +
                                ", which is not an earlier constant of the same "
                                "name and shape");
      TensorData t;
      t.shape = shape;
      if (share) {
        program->shared_constants[{subgraph, static_cast<int>(g.values.size())}] = {rs, rv};
      } else if (in_file) {
        t.values.resize(static_cast<size_t>(n));
        TS_RETURN_IF_ERROR(program->constant_file->Read(streamed->second, n, t.values.data()).WithContext(origin));
      } else {
        t.values = ref->values;
      }
      g.AddConstant(vm.name(), std::move(t));
    } else if (auto extent = extents != nullptr ? extents->find(static_cast<int>(g.values.size()))
                                                : ValueExtents::const_iterator{};
               vm.constant() && extents != nullptr && extent != extents->end()) {
      const int64_t n = NumElements(shape);
      if (extent->second.second != n * 4)
        return Status::DataLoss(origin + ": constant '" + vm.name() + "' has " + std::to_string(extent->second.second) +
                                " bytes for shape " + ShapeToString(shape));
      program->streamed_constants[{subgraph, static_cast<int>(g.values.size())}] = extent->second.first;
      g.AddConstant(vm.name(), TensorData{shape, {}});
    } else if (vm.constant()) {
      TensorData t;
      t.shape = shape;
      const size_t n = static_cast<size_t>(NumElements(shape));
      if (vm.data().size() != n * 4)
        return Status::DataLoss(origin + ": constant '" + vm.name() + "' has " + std::to_string(vm.data().size()) +
                                " bytes for shape " + ShapeToString(shape));
      t.values.resize(n);
      // An empty constant (a 0 dimension) has no storage to copy into.
      if (n > 0) std::memcpy(t.values.data(), vm.data().data(), n * 4);
      std::string().swap(*vm.mutable_data());
      g.AddConstant(vm.name(), std::move(t));
    } else {
      g.AddValue(vm.name(), shape);
    }
  }
  for (const auto& nm : m.nodes()) {
    Node n;
    n.name = nm.name();
    n.op = nm.op();
    for (int i : nm.inputs()) {
      TS_RETURN_IF_ERROR(check_id(i, "node '" + n.name + "' input"));
      n.inputs.push_back(i);
    }
    for (int o : nm.outputs()) {
      TS_RETURN_IF_ERROR(check_id(o, "node '" + n.name + "' output"));
      if (o < 0) return Status::DataLoss(origin + ": node '" + n.name + "' has a missing output");
      n.outputs.push_back(o);
    }
    for (const auto& am : nm.attrs()) {
      switch (am.value_case()) {
        case proto::AttrMsg::kI: n.attrs.Set(am.name(), am.i()); break;
        case proto::AttrMsg::kF: n.attrs.Set(am.name(), am.f()); break;
        case proto::AttrMsg::kS: n.attrs.Set(am.name(), am.s()); break;
        case proto::AttrMsg::kInts:
          n.attrs.Set(am.name(), std::vector<int64_t>(am.ints().v().begin(), am.ints().v().end()));
          break;
        case proto::AttrMsg::kFloats:
          n.attrs.Set(am.name(), std::vector<double>(am.floats().v().begin(), am.floats().v().end()));
          break;
        default: break;
      }
    }
    g.AddNode(std::move(n));
  }
  for (int i : m.inputs()) {
    TS_RETURN_IF_ERROR(check_id(i, "graph input"));
    g.inputs.push_back(i);
  }
  for (int o : m.outputs()) {
    TS_RETURN_IF_ERROR(check_id(o, "graph output"));
    g.outputs.push_back(o);
  }
  TS_RETURN_IF_ERROR(g.Validate().WithContext(origin + ": subgraph '" + g.name + "'"));
  return g;
}

}  // namespace

std::string SerializeGraph(const Graph& graph) {
  proto::GraphMsg m;
  ToMsg(graph, &m);
  return m.SerializeAsString();
}

Result<Graph> ParseGraph(const std::string& bytes, const std::string& origin) {
  proto::GraphMsg m;
  if (!m.ParseFromString(bytes)) return Status::DataLoss(origin + ": not a serialized graph");
  return FromMsg(m, origin);
}

namespace {

// Everything of `p` but its subgraphs.
proto::DeviceProgramMsg ProgramMsgWithoutSubgraphs(const DeviceProgram& p, const std::string& plan_id) {
  proto::DeviceProgramMsg m;
  m.set_plan_id(plan_id);
  m.set_device(p.device);
  for (const auto& b : p.buffers) {
    auto* bm = m.add_buffers();
    bm->set_name(b.name);
    bm->set_value(b.value);
    ToMsg(b.box, bm->mutable_box());
    if (b.grid) {
      auto* g = bm->mutable_grid();
      g->set_scale(b.grid->scale);
      g->set_zero_point(b.grid->zero_point);
      g->set_qmin(b.grid->qmin);
      g->set_qmax(b.grid->qmax);
    }
  }
  for (const auto& s : p.steps) {
    auto* sm = m.add_steps();
    sm->set_kind(static_cast<proto::StepMsg::Kind>(static_cast<int>(s.kind)));
    sm->set_peer(s.peer);
    sm->set_message(s.message);
    sm->set_src_buffer(s.src_buffer);
    sm->set_dst_buffer(s.dst_buffer);
    ToMsg(s.src_box, sm->mutable_src_box());
    ToMsg(s.dst_box, sm->mutable_dst_box());
    sm->set_subgraph(s.subgraph);
    for (int i : s.inputs) sm->add_inputs(i);
    for (int o : s.outputs) sm->add_outputs(o);
    sm->set_layer(s.layer);
    sm->set_receive_from(s.receive_from);
    sm->set_release_after(s.release_after);
    sm->set_uart_port(s.uart_port);
  }
  for (const auto& [v, b] : p.model_inputs) {
    auto* io = m.add_model_inputs();
    io->set_value(v);
    io->set_buffer(b);
  }
  for (const auto& [v, b] : p.model_outputs) {
    auto* io = m.add_model_outputs();
    io->set_value(v);
    io->set_buffer(b);
  }
  for (const ProgramScenario& sc : p.scenarios) {
    auto* sm = m.add_scenarios();
    sm->set_name(sc.name);
    for (int i : sc.steps) sm->add_steps(i);
    for (int v : sc.inputs) sm->add_inputs(v);
    for (int v : sc.outputs) sm->add_outputs(v);
    for (int w : sc.waits) sm->add_waits(w);
  }
  return m;
}

}  // namespace

namespace {

// One subgraph as an entry of DeviceProgramMsg's repeated `subgraphs` field.
void AppendSubgraph(const DeviceProgram& p, int subgraph, SeenConstants* seen, std::string* out) {
  using Wire = google::protobuf::internal::WireFormatLite;
  using google::protobuf::io::CodedOutputStream;
  const uint32_t tag = Wire::MakeTag(proto::DeviceProgramMsg::kSubgraphsFieldNumber, Wire::WIRETYPE_LENGTH_DELIMITED);
  proto::GraphMsg gm;
  ToMsg(p.subgraphs[subgraph], &gm, subgraph, seen, &p.shared_constants);
  uint8_t prefix[16];
  uint8_t* end = CodedOutputStream::WriteTagToArray(tag, prefix);
  end = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(gm.ByteSizeLong()), end);
  out->append(reinterpret_cast<const char*>(prefix), static_cast<size_t>(end - prefix));
  gm.AppendToString(out);
}

size_t ReserveFor(const DeviceProgram& p) {
  int64_t weight_bytes = 0;
  for (const Graph& g : p.subgraphs)
    for (const auto& [id, data] : g.constants) weight_bytes += static_cast<int64_t>(data.values.size()) * 4;
  return static_cast<size_t>(weight_bytes) + p.subgraphs.size() * 16384 + (1 << 20);
}

}  // namespace

// Both forms write the same bytes for the same program: a worker identifies
// a program by the SHA-256 of its encoding, so `tessera deploy` (which
// moves) and the gateway (which copies) must agree byte for byte, or the
// gateway's redeploy of the plan deploy loaded is refused as "a different
// program" (issue 15: found when latency plans became split plans).
std::string SerializeProgram(const DeviceProgram& p, const std::string& plan_id) {
  std::string out;
  out.reserve(ReserveFor(p));
  SeenConstants seen;
  for (size_t s = 0; s < p.subgraphs.size(); ++s) AppendSubgraph(p, static_cast<int>(s), &seen, &out);
  ProgramMsgWithoutSubgraphs(p, plan_id).AppendToString(&out);
  return out;
}

std::string SerializeProgram(DeviceProgram&& p, const std::string& plan_id) {
  // Protobuf messages concatenate: the subgraphs are encoded one by one as
  // repeated field entries, each freed from `p` once encoded, then the rest
  // of the message is appended. ParseProgram reads the same program. The
  // output is reserved up front (weights + room for the structure) so that
  // it is not copied as it grows; reserved pages untouched stay unresident.
  std::string out;
  out.reserve(ReserveFor(p));
  SeenConstants seen;
  for (size_t s = 0; s < p.subgraphs.size(); ++s) {
    AppendSubgraph(p, static_cast<int>(s), &seen, &out);
    p.subgraphs[s] = Graph();
  }
  p.subgraphs.clear();
  ProgramMsgWithoutSubgraphs(p, plan_id).AppendToString(&out);
  return out;
}

namespace {
// `decoded`: a program whose subgraphs were decoded already (the streaming
// parse); m then has none.
Result<DeviceProgram> DecodeProgram(proto::DeviceProgramMsg& m, const std::string& origin, std::string* plan_id,
                                    bool share, DeviceProgram decoded = {});
}  // namespace

Result<DeviceProgram> ParseProgram(const std::string& bytes, const std::string& origin, std::string* plan_id) {
  proto::DeviceProgramMsg m;
  if (!m.ParseFromString(bytes)) return Status::DataLoss(origin + ": not a serialized device program");
  return DecodeProgram(m, origin, plan_id, false);
}

Result<DeviceProgram> ParseProgram(std::string&& bytes, const std::string& origin, std::string* plan_id,
                                   bool share_constants) {
  proto::DeviceProgramMsg m;
  const bool parsed = m.ParseFromString(bytes);
  std::string().swap(bytes);
  if (!parsed) return Status::DataLoss(origin + ": not a serialized device program");
  return DecodeProgram(m, origin, plan_id, share_constants);
}

namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using Wire = google::protobuf::internal::WireFormatLite;

// The next tag, 0 at the end of the message or file; *bad when it is
// encoded in more than 5 bytes (CodedInputStream accepts up to 10, the
// message parser does not: both decodes must refuse the same files).
uint32_t ReadTag(CodedInputStream* in, bool* bad) {
  const int before = in->CurrentPosition();
  const uint32_t tag = in->ReadTag();
  if (in->CurrentPosition() - before > 5) *bad = true;
  return *bad ? 0 : tag;
}

// One GraphMsg (the current limit of `in`) into `gm`, every constant's
// values left in the file: `extents` gets where they are (index in
// gm.values -> byte offset, byte length). The message's other fields are
// copied as they are and parsed, so the result is what ParseFromString
// gives but for the values' bytes.
bool ParseGraphLeavingValues(CodedInputStream* in, proto::GraphMsg* gm, ValueExtents* extents) {
  bool bad = false;
  std::string rest;
  {
    StringOutputStream rest_stream(&rest);
    CodedOutputStream rest_out(&rest_stream);
    while (const uint32_t tag = ReadTag(in, &bad)) {
      if (Wire::GetTagFieldNumber(tag) != proto::GraphMsg::kValuesFieldNumber ||
          Wire::GetTagWireType(tag) != Wire::WIRETYPE_LENGTH_DELIMITED) {
        if (!Wire::SkipField(in, tag, &rest_out)) return false;
        continue;
      }
      uint32_t length = 0;
      if (!in->ReadVarint32(&length)) return false;
      // PushLimit clamps a length past the graph's end to it: refuse it instead.
      if (static_cast<int64_t>(length) > in->BytesUntilLimit()) return false;
      const auto limit = in->PushLimit(static_cast<int>(length));
      std::string value_bytes;
      std::optional<std::pair<int64_t, int64_t>> extent;
      {
        StringOutputStream value_stream(&value_bytes);
        CodedOutputStream value_out(&value_stream);
        while (const uint32_t vtag = ReadTag(in, &bad)) {
          if (Wire::GetTagFieldNumber(vtag) == proto::ValueMsg::kDataFieldNumber &&
              Wire::GetTagWireType(vtag) == Wire::WIRETYPE_LENGTH_DELIMITED) {
            uint32_t data_length = 0;
            if (!in->ReadVarint32(&data_length)) return false;
            extent = {in->CurrentPosition(), data_length};
            if (!in->Skip(static_cast<int>(data_length))) return false;
          } else if (!Wire::SkipField(in, vtag, &value_out)) {
            return false;
          }
        }
      }
      // The file may end inside the value: then its end is not the limit's.
      if (bad || !in->ConsumedEntireMessage() || in->BytesUntilLimit() != 0) return false;
      in->PopLimit(limit);
      if (!gm->add_values()->ParseFromString(value_bytes)) return false;
      if (extent) (*extents)[gm->values_size() - 1] = *extent;
    }
  }
  return !bad && in->ConsumedEntireMessage() && gm->MergeFromString(rest);
}

// ParseProgramFile with stream_constants: the file is read field by field;
// each subgraph is decoded as soon as it is read, its constants' values
// left in the file (DeviceProgram::streamed_constants). What is held is the
// program's structure, never its weights.
Result<DeviceProgram> ParseProgramFileStreaming(const std::string& path, const std::string& origin,
                                                std::string* plan_id, bool share_constants) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<const ConstantFile> file, ConstantFile::Open(path));
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return Status::IOError(origin + ": cannot read " + path);
  google::protobuf::io::IstreamInputStream raw(&stream);
  CodedInputStream in(&raw);
  in.SetTotalBytesLimit(static_cast<int>(std::min<int64_t>(kMaxProgramBytes, INT32_MAX)));
  const Status corrupt = Status::DataLoss(origin + ": " + path + " is not a serialized device program");
  DeviceProgram p;
  p.constant_file = file;
  std::string rest;
  {
    StringOutputStream rest_stream(&rest);
    CodedOutputStream rest_out(&rest_stream);
    bool bad = false;
    while (const uint32_t tag = ReadTag(&in, &bad)) {
      if (Wire::GetTagFieldNumber(tag) != proto::DeviceProgramMsg::kSubgraphsFieldNumber ||
          Wire::GetTagWireType(tag) != Wire::WIRETYPE_LENGTH_DELIMITED) {
        if (!Wire::SkipField(&in, tag, &rest_out)) return corrupt;
        continue;
      }
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return corrupt;
      const auto limit = in.PushLimit(static_cast<int>(length));
      proto::GraphMsg gm;
      ValueExtents extents;
      if (!ParseGraphLeavingValues(&in, &gm, &extents) || in.BytesUntilLimit() != 0) return corrupt;
      in.PopLimit(limit);
      TS_ASSIGN_OR_RETURN(Graph g, FromMsg(gm, origin, &p, share_constants, &extents));
      p.subgraphs.push_back(std::move(g));
    }
    if (bad || !in.ConsumedEntireMessage()) return corrupt;
  }
  proto::DeviceProgramMsg m;
  if (!m.ParseFromString(rest)) return corrupt;
  return DecodeProgram(m, origin, plan_id, share_constants, std::move(p));
}

}  // namespace

Result<DeviceProgram> ParseProgramFile(const std::string& path, const std::string& origin, std::string* plan_id,
                                       bool share_constants, bool stream_constants) {
  if (stream_constants) return ParseProgramFileStreaming(path, origin, plan_id, share_constants);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(origin + ": cannot read " + path);
  proto::DeviceProgramMsg m;
  if (!m.ParseFromIstream(&in)) return Status::DataLoss(origin + ": " + path + " is not a serialized device program");
  return DecodeProgram(m, origin, plan_id, share_constants);
}

namespace {
// Decodes `m` into a DeviceProgram, clearing each subgraph message once it
// is decoded (its weights are then held once, in the result).
Result<DeviceProgram> DecodeProgram(proto::DeviceProgramMsg& m, const std::string& origin, std::string* plan_id,
                                    bool share, DeviceProgram decoded) {
  DeviceProgram p = std::move(decoded);
  p.device = m.device();
  if (plan_id) *plan_id = m.plan_id();
  // Bounds before anything is allocated: a corrupted size must not become a
  // multi-gigabyte allocation in the worker.
  constexpr int64_t kMaxValues = int64_t{1} << 31;
  for (const auto& bm : m.buffers()) {
    Box box = FromMsg(bm.box());
    int64_t volume = 1;
    for (const auto& r : box.dims) {
      if (r.begin < 0 || r.end < r.begin || r.end > kMaxValues)
        return Status::DataLoss(origin + ": buffer '" + bm.name() + "' has an invalid region " + box.ToString());
      volume *= std::max<int64_t>(1, r.size());
      if (volume > kMaxValues) return Status::DataLoss(origin + ": buffer '" + bm.name() + "' is implausibly large");
    }
    std::optional<QuantGrid> grid;
    if (bm.has_grid()) {
      const auto& g = bm.grid();
      if (!(g.scale() > 0) || !std::isfinite(g.scale()) || g.qmin() > g.zero_point() || g.zero_point() > g.qmax())
        return Status::DataLoss(origin + ": buffer '" + bm.name() + "' has an invalid grid (scale " +
                                std::to_string(g.scale()) + ", zero point " + std::to_string(g.zero_point()) + ", " +
                                std::to_string(g.qmin()) + ".." + std::to_string(g.qmax()) + ")");
      grid = QuantGrid{g.scale(), g.zero_point(), g.qmin(), g.qmax()};
    }
    p.buffers.push_back({bm.name(), bm.value(), box, grid});
  }
  for (auto& gm : *m.mutable_subgraphs()) {
    TS_ASSIGN_OR_RETURN(Graph g, FromMsg(gm, origin, &p, share));
    p.subgraphs.push_back(std::move(g));
    proto::GraphMsg().Swap(&gm);  // frees its bytes (Clear() would keep every constant's capacity)
  }
  const int nb = static_cast<int>(p.buffers.size());
  auto buffer_ok = [&](int b) { return b >= 0 && b < nb; };
  for (const auto& sm : m.steps()) {
    ProgramStep s;
    s.kind = static_cast<StepKind>(static_cast<int>(sm.kind()));
    s.peer = sm.peer();
    s.message = sm.message();
    s.src_buffer = sm.src_buffer();
    s.dst_buffer = sm.dst_buffer();
    s.src_box = FromMsg(sm.src_box());
    s.dst_box = FromMsg(sm.dst_box());
    s.subgraph = sm.subgraph();
    s.inputs.assign(sm.inputs().begin(), sm.inputs().end());
    s.outputs.assign(sm.outputs().begin(), sm.outputs().end());
    s.layer = sm.layer();
    s.receive_from = sm.receive_from();
    s.release_after = sm.release_after();
    s.uart_port = sm.uart_port();
    p.steps.push_back(std::move(s));
  }
  for (const auto& io : m.model_inputs()) {
    if (!buffer_ok(io.buffer())) return Status::DataLoss(origin + ": model input bound to a missing buffer");
    p.model_inputs.push_back({io.value(), io.buffer()});
  }
  for (const auto& io : m.model_outputs()) {
    if (!buffer_ok(io.buffer())) return Status::DataLoss(origin + ": model output bound to a missing buffer");
    p.model_outputs.push_back({io.value(), io.buffer()});
  }
  for (const auto& sm : m.scenarios()) {
    ProgramScenario sc{sm.name(),
                       {sm.steps().begin(), sm.steps().end()},
                       {sm.inputs().begin(), sm.inputs().end()},
                       {sm.outputs().begin(), sm.outputs().end()},
                       {sm.waits().begin(), sm.waits().end()}};
    for (size_t k = 0; k < sc.steps.size(); ++k)
      if (sc.steps[k] < 0 || sc.steps[k] >= static_cast<int>(p.steps.size()) ||
          (k > 0 && sc.steps[k] <= sc.steps[k - 1]))
        return Status::DataLoss(origin + ": scenario '" + sc.name + "' names steps out of range or out of order");
    if (sc.waits.empty() && !sc.steps.empty()) {
      // A program written before wait counts existed (a worker resuming one
      // from its --data-dir): they follow from its steps.
      const std::vector<std::vector<int>> writers = StepWriters(p);
      for (int i : sc.steps) sc.waits.push_back(static_cast<int>(writers[i].size()));
    }
    if (sc.waits.size() != sc.steps.size())
      return Status::DataLoss(origin + ": scenario '" + sc.name + "' has " + std::to_string(sc.waits.size()) +
                              " wait counts for " + std::to_string(sc.steps.size()) + " steps");
    for (size_t k = 0; k < sc.waits.size(); ++k)
      if (sc.waits[k] < 0 || sc.waits[k] > sc.steps[k])
        return Status::DataLoss(origin + ": scenario '" + sc.name + "' step " + std::to_string(sc.steps[k]) +
                                " waits for " + std::to_string(sc.waits[k]) + " steps; it has " +
                                std::to_string(sc.steps[k]) + " before it");
    p.scenarios.push_back(std::move(sc));
  }
  TS_RETURN_IF_ERROR(ValidateProgram(p).WithContext(origin));
  return p;
}
}  // namespace

}  // namespace tessera
