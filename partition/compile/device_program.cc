#include "partition/compile/device_program.h"

#include "transport/wire/mcu_program.h"

#include "util/limits.h"

#include <map>
#include <set>
#include <sstream>

#include "partition/compile/partition_plan.h"

namespace tessera {

Box Box::Full(const Shape& shape) {
  Box b;
  for (int64_t d : shape) b.dims.push_back({0, d});
  return b;
}

Shape Box::shape() const {
  Shape s;
  for (const auto& r : dims) s.push_back(std::max<int64_t>(0, r.size()));
  return s;
}

int64_t Box::volume() const {
  if (dims.empty()) return 0;
  int64_t v = 1;
  for (const auto& r : dims) v *= std::max<int64_t>(0, r.size());
  return v;
}

bool Box::empty() const { return volume() == 0; }

bool Box::Contains(const Box& o) const {
  if (o.dims.size() != dims.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (o.dims[i].begin < dims[i].begin || o.dims[i].end > dims[i].end) return false;
  return true;
}

Box Box::Intersect(const Box& o) const {
  Box r;
  for (size_t i = 0; i < dims.size() && i < o.dims.size(); ++i)
    r.dims.push_back({std::max(dims[i].begin, o.dims[i].begin), std::min(dims[i].end, o.dims[i].end)});
  return r;
}

Box Box::RelativeTo(const Box& outer) const {
  Box r = *this;
  for (size_t i = 0; i < r.dims.size(); ++i) {
    r.dims[i].begin -= outer.dims[i].begin;
    r.dims[i].end -= outer.dims[i].begin;
  }
  return r;
}

std::string Box::ToString() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "," : "") << dims[i].begin << ':' << dims[i].end;
  os << ']';
  return os.str();
}

int64_t ContiguousStart(const Shape& shape, const Box& box) {
  if (box.dims.size() != shape.size()) return -1;
  // Row-major: a box is one run when, for the innermost dimension it does
  // not cover whole, every dimension outside it has extent 1.
  size_t last_partial = shape.size();
  for (size_t k = shape.size(); k-- > 0;)
    if (box.dims[k].begin != 0 || box.dims[k].end != shape[k]) {
      last_partial = k;
      break;
    }
  if (last_partial == shape.size()) return 0;  // the whole buffer
  for (size_t k = 0; k < last_partial; ++k)
    if (box.dims[k].end - box.dims[k].begin != 1) return -1;
  int64_t start = 0;
  for (size_t k = 0; k < shape.size(); ++k) start = start * shape[k] + box.dims[k].begin;
  return start;
}

std::vector<Box> ContiguousPieces(const Box& region, const Box& a, const Box& b) {
  std::vector<Box> out;
  if (region.empty()) return out;
  if (ContiguousStart(a.shape(), region.RelativeTo(a)) >= 0 && ContiguousStart(b.shape(), region.RelativeTo(b)) >= 0)
    return {region};
  // Cut along the outermost dimension the region spans more than once; a
  // region one value wide in every dimension is one value, always contiguous.
  size_t k = 0;
  while (k < region.dims.size() && region.dims[k].end - region.dims[k].begin <= 1) ++k;
  if (k == region.dims.size()) return {region};
  for (int64_t i = region.dims[k].begin; i < region.dims[k].end; ++i) {
    Box slab = region;
    slab.dims[k] = {i, i + 1};
    for (Box& piece : ContiguousPieces(slab, a, b)) out.push_back(std::move(piece));
  }
  return out;
}

const char* StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kSend: return "send";
    case StepKind::kRecv: return "recv";
    case StepKind::kCopy: return "copy";
    case StepKind::kCompute: return "compute";
    case StepKind::kMerge: return "merge";
  }
  return "?";
}

const char* LayerSchemeName(LayerScheme scheme) {
  switch (scheme) {
    case LayerScheme::kWhole: return "whole";
    case LayerScheme::kFfmt: return "ffmt";
    case LayerScheme::kFdto: return "fdto";
    case LayerScheme::kFdti: return "fdti";
    case LayerScheme::kFdt1: return "fdt1";
    case LayerScheme::kFdt2: return "fdt2";
    case LayerScheme::kPart: return "part";
  }
  return "?";
}

PartitionPlan SingleDevicePlan(size_t layers, int device) {
  PartitionPlan p;
  p.num_devices = device + 1;
  p.source = device;
  p.layers.assign(layers, LayerAssignment{LayerScheme::kWhole, {device}, {}, 1, 1, {}, {}});
  return p;
}

void MarkQuantizedBuffers(const Graph& graph, std::vector<DeviceProgram>* programs) {
  for (DeviceProgram& program : *programs)
    for (ProgramBuffer& b : program.buffers) {
      b.grid.reset();
      if (b.value < 0 || b.value >= static_cast<int>(graph.values.size())) continue;
      const int producer = graph.values[b.value].producer;
      if (producer >= 0) b.grid = QuantizeDequantizeGrid(graph.nodes[producer]);
    }
}

int DeviceProgram::AddBuffer(int value, const Box& box, const std::string& name) {
  buffers.push_back({name, value, box, std::nullopt});
  return static_cast<int>(buffers.size()) - 1;
}

int64_t DeviceProgram::WeightValues() const {
  int64_t n = 0;
  for (const Graph& g : subgraphs) n += g.WeightCount();
  return n;
}

int64_t DeviceProgram::BufferValues() const {
  int64_t n = 0;
  for (const auto& b : buffers) n += b.box.volume();
  return n;
}

namespace {

// The highest UART port a direct MCU link may name (UART0 is the owning board's).
constexpr int kMaxUartPort = static_cast<int>(mcu::kMaxPorts) - 1;

std::string Where(int device, size_t step, const ProgramStep& s) {
  return "device " + std::to_string(device) + " step " + std::to_string(step) + " (" + StepKindName(s.kind) + ")";
}

Status CheckBufferBox(const DeviceProgram& p, size_t i, const ProgramStep& s, int buffer, const Box& box) {
  if (buffer < 0 || buffer >= static_cast<int>(p.buffers.size()))
    return Status::InvalidArgument(Where(p.device, i, s) + " names buffer " + std::to_string(buffer) +
                                   ", which does not exist");
  if (!box.dims.empty() && !Box::Full(p.buffers[buffer].shape()).Contains(box))
    return Status::InvalidArgument(Where(p.device, i, s) + ": region " + box.ToString() + " lies outside buffer " +
                                   p.buffers[buffer].name + " " + ShapeToString(p.buffers[buffer].shape()));
  return Status::OK();
}

}  // namespace

Status ValidateProgram(const DeviceProgram& p, int num_devices) {
  // A program may come from the wire: no buffer beyond the tensor limit
  // (util/limits.h), checked before the arena is sized from them.
  for (const ProgramBuffer& b : p.buffers)
    TS_RETURN_IF_ERROR(CheckedElementCount(b.shape(), "program for device " + std::to_string(p.device) + ": buffer '" +
                                           b.name + "'")
                           .status());
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const ProgramStep& s = p.steps[i];
    switch (s.kind) {
      case StepKind::kSend:
      case StepKind::kRecv: {
        const bool send = s.kind == StepKind::kSend;
        TS_RETURN_IF_ERROR(CheckBufferBox(p, i, s, send ? s.src_buffer : s.dst_buffer, send ? s.src_box : s.dst_box));
        if (s.peer < 0 || (num_devices >= 0 && s.peer >= num_devices) || s.peer == p.device)
          return Status::InvalidArgument(Where(p.device, i, s) + " names peer " + std::to_string(s.peer) +
                                         ", which is not another device of the plan");
        if (s.receive_from < 0 || s.receive_from > static_cast<int>(i) || (send && s.receive_from != 0))
          return Status::InvalidArgument(Where(p.device, i, s) + " says its message arrives from step " +
                                         std::to_string(s.receive_from) + " on; a Recv's is in [0, its own step]");
        if (s.release_after < 0 || s.release_after > static_cast<int>(p.steps.size()) ||
            (!send && s.release_after != 0))
          return Status::InvalidArgument(Where(p.device, i, s) + " says its memory is free after step " +
                                         std::to_string(s.release_after) + "; a Send's is at most the step count (" +
                                         std::to_string(p.steps.size()) + ")");
        if (s.uart_port < 0 || s.uart_port > kMaxUartPort)
          return Status::InvalidArgument(Where(p.device, i, s) + " names UART port " + std::to_string(s.uart_port) +
                                         "; a direct MCU link is port 1.." + std::to_string(kMaxUartPort) +
                                         ", 0 the ordinary path");
        break;
      }
      case StepKind::kCopy:
        TS_RETURN_IF_ERROR(CheckBufferBox(p, i, s, s.src_buffer, s.src_box));
        TS_RETURN_IF_ERROR(CheckBufferBox(p, i, s, s.dst_buffer, s.dst_box));
        if (s.src_box.shape() != s.dst_box.shape())
          return Status::InvalidArgument(Where(p.device, i, s) + " copies " + s.src_box.ToString() + " into " +
                                         s.dst_box.ToString());
        break;
      case StepKind::kCompute:
      case StepKind::kMerge: {
        if (s.subgraph < 0 || s.subgraph >= static_cast<int>(p.subgraphs.size()))
          return Status::InvalidArgument(Where(p.device, i, s) + " names a missing subgraph");
        const Graph& g = p.subgraphs[s.subgraph];
        if (g.inputs.size() != s.inputs.size() || g.outputs.size() != s.outputs.size())
          return Status::InvalidArgument(Where(p.device, i, s) + ": subgraph arity does not match its buffers");
        for (size_t k = 0; k < s.inputs.size(); ++k) {
          TS_RETURN_IF_ERROR(CheckBufferBox(p, i, s, s.inputs[k], Box{}));
          if (p.buffers[s.inputs[k]].shape() != g.values[g.inputs[k]].shape)
            return Status::InvalidArgument(Where(p.device, i, s) + ": input buffer " + p.buffers[s.inputs[k]].name +
                                           " does not have the subgraph's input shape " +
                                           ShapeToString(g.values[g.inputs[k]].shape));
        }
        for (size_t k = 0; k < s.outputs.size(); ++k) {
          TS_RETURN_IF_ERROR(CheckBufferBox(p, i, s, s.outputs[k], Box{}));
          if (p.buffers[s.outputs[k]].shape() != g.values[g.outputs[k]].shape)
            return Status::InvalidArgument(Where(p.device, i, s) + ": output buffer " + p.buffers[s.outputs[k]].name +
                                           " does not have the subgraph's shape");
        }
        break;
      }
      default:
        return Status::InvalidArgument(Where(p.device, i, s) + " has an unknown step kind");
    }
  }
  return Status::OK();
}

Status ValidatePrograms(const std::vector<DeviceProgram>& programs) {
  struct End {
    int device;
    int peer;
    int64_t volume;
    bool direct;                    // over a direct MCU<->MCU UART (uart_port > 0)
    std::optional<QuantGrid> grid;  // WireGrid
  };
  std::map<int64_t, End> sends, recvs;
  for (size_t d = 0; d < programs.size(); ++d) {
    const DeviceProgram& p = programs[d];
    if (p.device != static_cast<int>(d))
      return Status::InvalidArgument("program " + std::to_string(d) + " says it is for device " +
                                     std::to_string(p.device));
    TS_RETURN_IF_ERROR(ValidateProgram(p, static_cast<int>(programs.size())));
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const ProgramStep& s = p.steps[i];
      if (s.kind != StepKind::kSend && s.kind != StepKind::kRecv) continue;
      const bool send = s.kind == StepKind::kSend;
      auto& table = send ? sends : recvs;
      if (!table
               .emplace(s.message,
                        End{p.device, s.peer, (send ? s.src_box : s.dst_box).volume(), s.uart_port > 0, WireGrid(p, s)})
               .second)
        return Status::InvalidArgument(Where(p.device, i, s) + " reuses message id " + std::to_string(s.message));
    }
  }
  for (const auto& [id, s] : sends) {
    auto it = recvs.find(id);
    if (it == recvs.end() || it->second.device != s.peer || it->second.peer != s.device)
      return Status::InvalidArgument("device " + std::to_string(s.device) + " sends message " + std::to_string(id) +
                                     " to device " + std::to_string(s.peer) + ", which never receives it");
    if (it->second.volume != s.volume)
      return Status::InvalidArgument("message " + std::to_string(id) + ": device " + std::to_string(s.device) +
                                     " sends " + std::to_string(s.volume) + " values, device " +
                                     std::to_string(s.peer) + " expects " + std::to_string(it->second.volume));
    if (it->second.direct != s.direct)
      return Status::InvalidArgument(
          "message " + std::to_string(id) + ": device " + std::to_string(s.direct ? s.device : s.peer) +
          " uses a direct MCU UART for it, device " + std::to_string(s.direct ? s.peer : s.device) + " does not");
    const std::optional<QuantGrid>& g = s.grid;
    const std::optional<QuantGrid>& h = it->second.grid;
    if (g.has_value() != h.has_value() ||
        (g && (g->scale != h->scale || g->zero_point != h->zero_point || g->qmin != h->qmin || g->qmax != h->qmax)))
      return Status::InvalidArgument("message " + std::to_string(id) + ": device " + std::to_string(s.device) +
                                     " sends it " + (g ? "as int8 codes" : "as float32") + ", device " +
                                     std::to_string(s.peer) + " expects " + (h ? "int8 codes" : "float32") +
                                     (g && h ? " of another grid" : ""));
  }
  for (const auto& [id, r] : recvs)
    if (!sends.count(id))
      return Status::InvalidArgument("device " + std::to_string(r.device) + " waits for message " +
                                     std::to_string(id) + " from device " + std::to_string(r.peer) +
                                     ", which never sends it");
  return Status::OK();
}

std::optional<QuantGrid> WireGrid(const DeviceProgram& program, const ProgramStep& step) {
  if (step.kind != StepKind::kSend && step.kind != StepKind::kRecv) return std::nullopt;
  const int b = step.kind == StepKind::kSend ? step.src_buffer : step.dst_buffer;
  if (b < 0 || b >= static_cast<int>(program.buffers.size())) return std::nullopt;
  return ByteGrid(program.buffers[b].grid);
}

int64_t WireBytes(const DeviceProgram& program, const ProgramStep& step) {
  return step.values() * (WireGrid(program, step) ? 1 : 4);
}

Status SetMessageWindows(std::vector<DeviceProgram>* programs) {
  // Vector clocks over the steps: clock[d][i][e] = the last step of device e
  // that happens-before the end of step i on device d (-1: none). A Recv
  // joins the clock of its Send. Devices advance in turn as far as their
  // messages allow; the programs' consistent global order guarantees progress.
  const int n = static_cast<int>(programs->size());
  std::map<int64_t, std::pair<int, int>> send_of, recv_of;  // message -> (device, step)
  for (int d = 0; d < n; ++d)
    for (size_t i = 0; i < (*programs)[d].steps.size(); ++i) {
      const ProgramStep& s = (*programs)[d].steps[i];
      if (s.kind == StepKind::kSend) send_of[s.message] = {d, static_cast<int>(i)};
      if (s.kind == StepKind::kRecv) recv_of[s.message] = {d, static_cast<int>(i)};
    }
  std::vector<std::vector<std::vector<int>>> clock(n);
  std::vector<size_t> next(n, 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int d = 0; d < n; ++d) {
      DeviceProgram& p = (*programs)[d];
      while (next[d] < p.steps.size()) {
        const size_t i = next[d];
        ProgramStep& s = p.steps[i];
        std::vector<int> c = i == 0 ? std::vector<int>(n, -1) : clock[d][i - 1];
        c[d] = static_cast<int>(i);
        if (s.kind == StepKind::kRecv) {
          const auto it = send_of.find(s.message);
          if (it == send_of.end()) return Status::Internal(Where(d, i, s) + " has no matching Send");
          const auto [from, k] = it->second;
          if (next[from] <= static_cast<size_t>(k)) break;  // the Send has not been reached yet
          const std::vector<int>& sent = clock[from][k];
          s.receive_from = sent[d] + 1;
          for (int e = 0; e < n; ++e) c[e] = std::max(c[e], sent[e]);
        }
        clock[d].push_back(std::move(c));
        ++next[d];
        progressed = true;
      }
    }
  }
  for (int d = 0; d < n; ++d)
    if (next[d] < (*programs)[d].steps.size())
      return Status::Internal("device " + std::to_string(d) + " would wait forever at step " + std::to_string(next[d]) +
                              " (the programs have no consistent order)");
  for (int d = 0; d < n; ++d) {
    DeviceProgram& p = (*programs)[d];
    for (size_t i = 0; i < p.steps.size(); ++i) {
      ProgramStep& s = p.steps[i];
      if (s.kind != StepKind::kSend) continue;
      const auto it = recv_of.find(s.message);
      if (it == recv_of.end()) return Status::Internal(Where(d, i, s) + " has no matching Recv");
      const auto [to, k] = it->second;
      size_t j = i + 1;
      while (j < p.steps.size() && clock[d][j][to] < k) ++j;
      s.release_after = static_cast<int>(j);
    }
  }
  return Status::OK();
}

}  // namespace tessera

namespace tessera {

namespace {
// Walks every contiguous run of the last dimension inside `box`.
template <typename F>
void ForEachRow(const Shape& shape, const Box& box, F&& f) {
  const size_t rank = shape.size();
  if (rank == 0) {
    f(0, 0, 1);
    return;
  }
  if (box.volume() == 0) return;
  std::vector<int64_t> strides(rank, 1);
  for (size_t i = rank - 1; i-- > 0;) strides[i] = strides[i + 1] * shape[i + 1];
  std::vector<int64_t> idx(rank - 1);
  for (size_t i = 0; i + 1 < rank; ++i) idx[i] = box.dims[i].begin;
  const int64_t run = box.dims[rank - 1].size();
  int64_t packed = 0;
  while (true) {
    int64_t offset = box.dims[rank - 1].begin;
    for (size_t i = 0; i + 1 < rank; ++i) offset += idx[i] * strides[i];
    f(offset, packed, run);
    packed += run;
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < box.dims[d].end) break;
      idx[d] = box.dims[d].begin;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}
}  // namespace

void ExtractBox(const float* tensor, const Shape& shape, const Box& box, float* out) {
  ForEachRow(shape, box, [&](int64_t off, int64_t packed, int64_t n) {
    std::copy(tensor + off, tensor + off + n, out + packed);
  });
}

void InsertBox(const float* in, float* tensor, const Shape& shape, const Box& box) {
  ForEachRow(shape, box, [&](int64_t off, int64_t packed, int64_t n) {
    std::copy(in + packed, in + packed + n, tensor + off);
  });
}

void ExtractBoxCodes(const float* tensor, const Shape& shape, const Box& box, const QuantGrid& grid, uint8_t* out) {
  ForEachRow(shape, box, [&](int64_t off, int64_t packed, int64_t n) {
    for (int64_t k = 0; k < n; ++k) out[packed + k] = ByteCode(tensor[off + k], grid);
  });
}

void InsertBoxCodes(const uint8_t* in, const QuantGrid& grid, float* tensor, const Shape& shape, const Box& box) {
  ForEachRow(shape, box, [&](int64_t off, int64_t packed, int64_t n) {
    for (int64_t k = 0; k < n; ++k) tensor[off + k] = ByteValue(in[packed + k], grid);
  });
}

}  // namespace tessera

namespace tessera {

std::vector<std::vector<int>> StepWriters(const DeviceProgram& program) {
  const int n = static_cast<int>(program.steps.size());
  std::vector<std::vector<int>> written_by(program.buffers.size());  // buffer -> steps so far writing it
  std::vector<std::vector<int>> writers(n);
  auto valid = [&](int b) { return b >= 0 && b < static_cast<int>(written_by.size()); };
  for (int i = 0; i < n; ++i) {
    const ProgramStep& s = program.steps[i];
    std::set<int> reads;
    if (s.kind == StepKind::kCopy || s.kind == StepKind::kSend) reads.insert(s.src_buffer);
    if (s.kind == StepKind::kCompute || s.kind == StepKind::kMerge) reads.insert(s.inputs.begin(), s.inputs.end());
    std::set<int> from;
    for (int b : reads)
      if (valid(b)) from.insert(written_by[b].begin(), written_by[b].end());
    writers[i].assign(from.begin(), from.end());
    std::vector<int> writes;
    if (s.kind == StepKind::kRecv || s.kind == StepKind::kCopy) writes.push_back(s.dst_buffer);
    if (s.kind == StepKind::kCompute || s.kind == StepKind::kMerge) writes = s.outputs;
    for (int b : writes)
      if (valid(b)) written_by[b].push_back(i);
  }
  return writers;
}

void SetScenarios(const std::vector<GraphModel>& models, std::vector<DeviceProgram>* programs) {
  for (DeviceProgram& p : *programs) p.scenarios.clear();
  if (models.size() < 2) return;
  const int n = static_cast<int>(programs->size());
  // Per device, the steps writing each buffer; per message, its Send.
  std::vector<std::vector<std::vector<int>>> writers(n);
  std::map<int64_t, std::pair<int, int>> send_of;  // message -> (device, step)
  for (int d = 0; d < n; ++d) {
    const DeviceProgram& p = (*programs)[d];
    writers[d].resize(p.buffers.size());
    for (int i = 0; i < static_cast<int>(p.steps.size()); ++i) {
      const ProgramStep& s = p.steps[i];
      switch (s.kind) {
        case StepKind::kSend:
          send_of[s.message] = {d, i};
          break;
        case StepKind::kRecv:
        case StepKind::kCopy:
          writers[d][s.dst_buffer].push_back(i);
          break;
        case StepKind::kCompute:
        case StepKind::kMerge:
          for (int b : s.outputs) writers[d][b].push_back(i);
          break;
      }
    }
  }
  for (const GraphModel& model : models) {
    const std::set<int> outputs(model.outputs.begin(), model.outputs.end());
    std::vector<std::vector<char>> step_needed(n), buffer_needed(n);
    std::vector<std::pair<int, int>> work;  // (device, buffer) newly needed
    auto need_buffer = [&](int d, int b) {
      if (!buffer_needed[d][b]) buffer_needed[d][b] = 1, work.push_back({d, b});
    };
    for (int d = 0; d < n; ++d) {
      const DeviceProgram& p = (*programs)[d];
      step_needed[d].assign(p.steps.size(), 0);
      buffer_needed[d].assign(p.buffers.size(), 0);
    }
    for (int d = 0; d < n; ++d)
      for (const auto& [value, b] : (*programs)[d].model_outputs)
        if (outputs.count(value)) need_buffer(d, b);
    while (!work.empty()) {
      const auto [d, b] = work.back();
      work.pop_back();
      for (int w : writers[d][b]) {
        if (step_needed[d][w]) continue;
        step_needed[d][w] = 1;
        const ProgramStep& s = (*programs)[d].steps[w];
        if (s.kind == StepKind::kCopy) need_buffer(d, s.src_buffer);
        for (int in : s.inputs) need_buffer(d, in);
        if (s.kind == StepKind::kRecv) {
          const auto [peer, send] = send_of.at(s.message);
          step_needed[peer][send] = 1;
          need_buffer(peer, (*programs)[peer].steps[send].src_buffer);
        }
      }
    }
    for (int d = 0; d < n; ++d) {
      ProgramScenario sc{model.name, {}, model.inputs, model.outputs, {}};
      const std::vector<std::vector<int>> step_writers = StepWriters((*programs)[d]);
      for (int i = 0; i < static_cast<int>(step_needed[d].size()); ++i)
        if (step_needed[d][i]) {
          sc.steps.push_back(i);
          sc.waits.push_back(static_cast<int>(step_writers[i].size()));
        }
      (*programs)[d].scenarios.push_back(std::move(sc));
    }
  }
}

}  // namespace tessera
