#include "daemon/runtime/program_runner.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "partition/graph/arena_layout.h"
#include "util/limits.h"

namespace tessera {

namespace {
// CPU time of the calling thread (its share of a device's work in process).
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

int64_t MonotonicMicros() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000 + t.tv_nsec / 1000;
}

// The step trace's file (OpenStepTrace); lines are written whole under the mutex.
std::mutex step_trace_mu;
std::FILE* step_trace = nullptr;  // GUARDED_BY(step_trace_mu)
std::atomic<int64_t> step_trace_runs{0};

constexpr size_t kAlign = 64;
size_t Bytes(int64_t values) { return static_cast<size_t>(values) * sizeof(float); }
}  // namespace

Status OpenStepTrace(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return Status::InvalidArgument("cannot open the step trace " + path + ": " + std::strerror(errno));
  std::lock_guard<std::mutex> lock(step_trace_mu);
  if (step_trace) std::fclose(step_trace);
  step_trace = f;
  return Status::OK();
}

// What Prepare computes once and every runner shares: the prepared executor
// of every subgraph (weights packed once) and the device arena's layout.
struct PreparedProgram::Layout {
  const DeviceProgram* program = nullptr;
  RunnerOptions options;
  std::vector<std::unique_ptr<Executor>> prepared;  // per subgraph; never run, only forked
  // Per subgraph: its constants whose values another subgraph holds
  // (ExecutorOptions::constant_data); sized once, its maps never move.
  std::vector<std::unordered_map<int, const TensorData*>> constant_data;
  std::vector<size_t> buffer_offset;  // per buffer, in its part (buffer_working)
  std::vector<bool> buffer_working;   // per buffer: in the working memory, else a pipeline buffer
  // Per step: its executor arena / Copy staging (working memory) or where a
  // Recv's message lands / a Send's message is read (pipeline buffers).
  std::vector<size_t> step_offset;
  // Per step and the end (index steps.size()): the run of Compute/Merge/Copy
  // steps it belongs to, -1 for a Send or Recv; the end belongs to the last
  // run when the last step computes (model outputs are copied out in it).
  std::vector<int> run_of;
  std::vector<int> run_last;      // per run: its last step
  std::vector<bool> recv_direct;  // per Recv step: its message lands in its buffer itself
  std::vector<bool> send_direct;  // per Send step: the link reads its buffer itself
  // Per step: the grid of a Send/Recv whose message is int8 codes (WireGrid,
  // device_program.h), converted from/to the buffer's floats on the way.
  std::vector<std::optional<QuantGrid>> wire_grid;
  std::vector<size_t> wire_bytes;                   // per Send/Recv step: its message's bytes
  std::vector<std::vector<int>> wait_sent_after;    // per step (and the end): Sends whose memory is reused after it
  std::vector<std::vector<int>> expect_at;          // per step: Recv steps whose message may arrive from there on
  std::vector<std::vector<int>> zero_at;            // per step: buffers first touched there
  std::vector<std::vector<char>> scenario_steps;    // per scenario, per step: whether it runs
  std::vector<std::vector<int>> scenario_waits;     // per scenario, per step: its wait count (ProgramScenario::waits)
  std::vector<std::vector<int>> step_writers;       // per step: earlier steps writing what it reads (StepWriters)
  std::vector<size_t> step_bytes;                   // per step: its own request (executor arena, staging), 0 if none
  std::vector<BufferRequest> buffer_requests;       // per buffer: its bytes and lifetime in the arena
  size_t arena_bytes = 0;                           // working_bytes + request_bytes: one request's memory
  size_t working_bytes = 0;                         // one working memory
  size_t request_bytes = 0;                         // one request's pipeline buffers
  size_t whole_bytes = 0;                           // everything laid out as one arena
  // Whether the runners share working memories; else each keeps one whole
  // arena (all of it in its pipeline buffers) and runs its steps in it.
  bool share_working = true;
  size_t weight_bytes = 0;
  size_t load_peak_bytes = 0;
};

namespace {

// Liveness of every buffer over the steps: [first, last] step touching it.
// Model inputs are alive from step 0 (copied in before it), model outputs
// until after the last step (copied out).
void BufferLifetimes(const DeviceProgram& p, std::vector<int>* first, std::vector<int>* last) {
  const int n = static_cast<int>(p.steps.size());
  first->assign(p.buffers.size(), n);
  last->assign(p.buffers.size(), -1);
  auto touch = [&](int b, int i) {
    if (b < 0) return;
    (*first)[b] = std::min((*first)[b], i);
    (*last)[b] = std::max((*last)[b], i);
  };
  for (int i = 0; i < n; ++i) {
    const ProgramStep& s = p.steps[i];
    touch(s.src_buffer, i);
    touch(s.dst_buffer, i);
    for (int b : s.inputs) touch(b, i);
    for (int b : s.outputs) touch(b, i);
  }
  for (const auto& [value, b] : p.model_inputs) touch(b, 0);
  for (const auto& [value, b] : p.model_outputs) touch(b, n);
}

// A Compute/Merge step's subgraph must read and write exactly its buffers'
// shapes: the executor runs on them in place.
Status CheckStepShapes(const DeviceProgram& p, size_t i) {
  const ProgramStep& s = p.steps[i];
  const Graph& g = p.subgraphs[s.subgraph];
  const std::string where = "device " + std::to_string(p.device) + " step " + std::to_string(i);
  if (s.inputs.size() != g.inputs.size() || s.outputs.size() != g.outputs.size())
    return Status::InvalidArgument(where + ": subgraph " + g.name + " takes " + std::to_string(g.inputs.size()) +
                                   " inputs and " + std::to_string(g.outputs.size()) + " outputs, the step gives " +
                                   std::to_string(s.inputs.size()) + " and " + std::to_string(s.outputs.size()));
  for (size_t k = 0; k < s.inputs.size(); ++k)
    if (p.buffers[s.inputs[k]].shape() != g.values[g.inputs[k]].shape)
      return Status::InvalidArgument(where + ": input " + std::to_string(k) + " of " + g.name + " has shape " +
                                     ShapeToString(g.values[g.inputs[k]].shape) + ", its buffer " +
                                     ShapeToString(p.buffers[s.inputs[k]].shape()));
  for (size_t k = 0; k < s.outputs.size(); ++k)
    if (p.buffers[s.outputs[k]].shape() != g.values[g.outputs[k]].shape)
      return Status::InvalidArgument(where + ": output " + std::to_string(k) + " of " + g.name + " has shape " +
                                     ShapeToString(g.values[g.outputs[k]].shape) + ", its buffer " +
                                     ShapeToString(p.buffers[s.outputs[k]].shape()));
  return Status::OK();
}

}  // namespace

Result<std::shared_ptr<const PreparedProgram>> PreparedProgram::Prepare(const DeviceProgram& program,
                                                                         const RunnerOptions& options) {
  return Prepare(program, options, nullptr);
}

Result<std::shared_ptr<const PreparedProgram>> PreparedProgram::PrepareReleasingWeights(
    DeviceProgram* program, const RunnerOptions& options) {
  return Prepare(*program, options, program);
}

Result<std::shared_ptr<const PreparedProgram>> PreparedProgram::Prepare(const DeviceProgram& program,
                                                                         const RunnerOptions& options,
                                                                         DeviceProgram* release) {
  auto layout = std::make_unique<Layout>();
  layout->program = &program;
  layout->options = options;
  ExecutorOptions eo;
  eo.threads = options.threads;
  eo.external_io = true;
  eo.allocate_arena = false;  // the device arena holds every step's executor memory
  eo.shapes_only = options.shapes_only;
  // One set of packed weight forms for all the program's subgraphs: the tiles
  // of an FFMT stack pack their shared weights once (kernels/weight_forms.h).
  WeightForms forms;
  eo.weight_forms = &forms;

  // Each constant once (ConstantIdentity, graph.h). The first subgraph with
  // a constant of an identity owns it; later ones read the owner's through
  // ExecutorOptions::constant_data. The pairs come from the program
  // (shared_constants: a worker decoded them without values) or are found
  // here (a compiled program holds a copy per subgraph; with release, those
  // copies are freed before anything prepares). An owner read by others is
  // kept until every subgraph has prepared, then freed unless a kernel
  // still reads it in Eval (in a streamed load nothing is kept: readers
  // read it from the file, below).
  const size_t ns = program.subgraphs.size();
  layout->constant_data.resize(ns);
  // A streamed load (constants left in the program's file, issue 11 item
  // 2): every constant, owners included, is read from the file as its
  // kernels prepare; readers in later subgraphs read the owner's from the
  // file too, so no owner is kept whole for them.
  const bool size_streamed = options.shapes_only && options.streamed_load;
  const bool streamed_load = !program.streamed_constants.empty() || size_streamed;
  auto owner_streamed = [&](std::pair<int, int> o) { return size_streamed || program.streamed_constants.count(o) > 0; };
  std::vector<std::unordered_set<int>> keep(ns);
  std::vector<std::tuple<int, int, int, int>> shares;  // (owner s, owner v, reader s, reader v)
  {
    std::map<std::string, std::pair<int, int>> owner;
    for (size_t i = 0; i < ns; ++i) {
      const Graph& g = program.subgraphs[i];
      for (int v = 0; v < static_cast<int>(g.values.size()); ++v) {
        if (!g.values[v].constant) continue;
        std::pair<int, int> ref;
        // A constant left in the program's file is its own owner: any copy
        // of it was written as a reference (shared_constants).
        if (program.streamed_constants.count({static_cast<int>(i), v})) continue;
        auto shared = program.shared_constants.find({static_cast<int>(i), v});
        if (shared != program.shared_constants.end()) {
          ref = shared->second;
        } else {
          auto [it, inserted] =
              owner.emplace(ConstantIdentity(g, v, !options.shapes_only), std::pair<int, int>{static_cast<int>(i), v});
          if (inserted) continue;
          ref = it->second;
          if (release != nullptr) std::vector<float>().swap(release->subgraphs[i].constants.at(v).values);
        }
        if (ref.first < 0 || ref.first >= static_cast<int>(i) ||
            program.subgraphs[ref.first].ConstantData(ref.second) == nullptr)
          return Status::Internal("device " + std::to_string(program.device) + ": constant '" + g.values[v].name +
                                  "' of " + g.name + " refers to a constant no earlier subgraph has");
        layout->constant_data[i][v] = program.subgraphs[ref.first].ConstantData(ref.second);
        if (!owner_streamed(ref)) keep[ref.first].insert(ref.second);
        shares.emplace_back(ref.first, ref.second, static_cast<int>(i), v);
      }
    }
  }

  // Weight bytes while loading: decoding holds the message (every raw
  // weight, each once) plus one tensor; then subgraphs prepare in order,
  // each releasing its raw weights as its kernels repack them
  // (Executor::load_peak_bytes), except those kept for later subgraphs.
  // A streamed load holds no raw weight up front; each is read as its
  // kernel prepares (Executor, ExecutorOptions::streamed_constants).
  std::vector<std::unordered_map<int, int64_t>> streamed(ns);
  for (const auto& [sv, offset] : program.streamed_constants) streamed.at(sv.first)[sv.second] = offset;
  if (size_streamed)
    for (size_t i = 0; i < ns; ++i)
      for (const auto& [v, data] : program.subgraphs[i].constants)
        if (!layout->constant_data[i].count(v)) streamed[i][v] = 0;
  // Streamed owners in memory now (a kernel reads them in Eval).
  std::set<std::pair<int, int>> resident;
  std::vector<size_t> raw(ns, 0);
  size_t raw_total = 0, largest_tensor = 0;
  for (size_t i = 0; i < ns; ++i)
    for (const auto& [v, data] : program.subgraphs[i].constants) {
      if (layout->constant_data[i].count(v) || streamed[i].count(v)) continue;
      const size_t bytes = Bytes(NumElements(data.shape));
      raw[i] += bytes;
      largest_tensor = std::max(largest_tensor, bytes);
    }
  for (size_t r : raw) raw_total += r;
  layout->load_peak_bytes = raw_total + (streamed_load ? 0 : largest_tensor);
  size_t stored_before = 0, raw_after = raw_total, kept_held = 0;
  for (size_t i = 0; i < ns; ++i) {
    const Graph& g = program.subgraphs[i];
    eo.constant_data = &layout->constant_data[i];
    eo.keep_constants = &keep[i];
    // This subgraph's copies of streamed owners not in memory: read from
    // the owner's place in the file.
    std::map<int, std::pair<int, int>> read_from_file;  // value -> owner
    for (const auto& [os, ov, rs, rv] : shares)
      if (rs == static_cast<int>(i) && owner_streamed({os, ov}) && !resident.count({os, ov})) {
        read_from_file[rv] = {os, ov};
        streamed[i][rv] = size_streamed ? 0 : program.streamed_constants.at({os, ov});
      }
    eo.streamed_constants = &streamed[i];
    eo.constant_file = program.constant_file.get();
    auto ex = release ? Executor::CreateReleasingWeights(&release->subgraphs[i], eo) : Executor::Create(g, eo);
    if (!ex.ok()) return ex.status().WithContext("device " + std::to_string(program.device) + ", " + g.name);
    raw_after -= raw[i];
    layout->load_peak_bytes =
        std::max(layout->load_peak_bytes, stored_before + kept_held + (*ex)->load_peak_bytes() + raw_after);
    stored_before += (*ex)->weight_bytes();
    layout->weight_bytes += (*ex)->weight_bytes();
    for (const auto& [v, offset] : streamed[i]) {
      if (!(*ex)->ReadsConstant(v)) continue;
      auto from = read_from_file.find(v);
      if (from == read_from_file.end()) {
        resident.insert({static_cast<int>(i), v});  // counted in the executor's weight_bytes
      } else if (resident.insert(from->second).second) {
        stored_before += Bytes(NumElements(g.values[v].shape));  // counted once, below
      }
    }
    for (int v : keep[i])
      if (!(*ex)->ReadsConstant(v)) kept_held += Bytes(NumElements(g.values[v].shape));
    layout->prepared.push_back(std::move(*ex));
  }
  // Owners read by other subgraphs: held while anything reads them in Eval
  // (counted once, here, when only readers elsewhere do), freed otherwise.
  std::set<std::pair<int, int>> read_elsewhere, owners;
  for (const auto& [os, ov, rs, rv] : shares) {
    owners.insert({os, ov});
    if (layout->prepared[rs]->ReadsConstant(rv)) read_elsewhere.insert({os, ov});
  }
  for (const auto& [i, v] : owners) {
    if (layout->prepared[i]->ReadsConstant(v)) continue;
    if (read_elsewhere.count({i, v})) {
      layout->weight_bytes += Bytes(NumElements(program.subgraphs[i].values[v].shape));
    } else if (release != nullptr) {
      std::vector<float>().swap(release->subgraphs[i].constants.at(v).values);
    }
  }

  // The device arena: buffers by liveness, plus each step's own memory.
  // A received message has its place from the first step during which it
  // can arrive (ProgramStep::receive_from) to its Recv step: the inbox
  // writes its frames there as they come (issue 11 item 1). A message that
  // fills a buffer no earlier step touches lands in that buffer itself.
  std::vector<int> first, last;
  BufferLifetimes(program, &first, &last);
  std::vector<bool> is_model_input(program.buffers.size(), false);
  for (const auto& [value, b] : program.model_inputs) is_model_input[b] = true;
  const int num_steps = static_cast<int>(program.steps.size());
  layout->recv_direct.assign(program.steps.size(), false);
  layout->expect_at.assign(program.steps.size(), {});
  layout->wire_grid.assign(program.steps.size(), std::nullopt);
  layout->wire_bytes.assign(program.steps.size(), 0);
  for (int i = 0; i < num_steps; ++i) {
    layout->wire_grid[i] = WireGrid(program, program.steps[i]);
    layout->wire_bytes[i] = static_cast<size_t>(WireBytes(program, program.steps[i]));
  }
  std::vector<bool> received_whole(program.buffers.size(), false);
  for (int i = 0; i < num_steps; ++i) {
    const ProgramStep& s = program.steps[i];
    if (s.kind != StepKind::kRecv) continue;
    const int from = std::clamp(s.receive_from, 0, i);
    layout->expect_at[from].push_back(i);
    const int b = s.dst_buffer;
    if (first[b] == i && !is_model_input[b] && !layout->wire_grid[i] &&
        s.dst_box == Box::Full(program.buffers[b].shape())) {
      layout->recv_direct[i] = true;
      received_whole[b] = true;
      first[b] = from;
    }
  }
  // A sent message is read by the link from the Send step until a step that
  // happens-after the peer's Recv (ProgramStep::release_after): from its
  // buffer when it is the whole buffer and nothing writes it meanwhile (the
  // buffer lives that long), else from its own place in the arena.
  layout->send_direct.assign(program.steps.size(), false);
  layout->wait_sent_after.assign(program.steps.size() + 1, {});
  std::vector<int> release_at(program.steps.size(), num_steps);
  for (int i = 0; i < num_steps; ++i) {
    const ProgramStep& s = program.steps[i];
    if (s.kind != StepKind::kSend) continue;
    if (s.release_after > i && s.release_after <= num_steps) release_at[i] = s.release_after;
    layout->wait_sent_after[release_at[i]].push_back(i);
    const int b = s.src_buffer;
    if (s.src_box != Box::Full(program.buffers[b].shape()) || layout->wire_grid[i]) continue;
    bool written = false;
    for (int t = i + 1; t <= std::min(release_at[i], num_steps - 1) && !written; ++t) {
      const ProgramStep& w = program.steps[t];
      written = ((w.kind == StepKind::kRecv || w.kind == StepKind::kCopy) && w.dst_buffer == b) ||
                std::find(w.outputs.begin(), w.outputs.end(), b) != w.outputs.end();
    }
    if (written) continue;
    layout->send_direct[i] = true;
    last[b] = std::max(last[b], release_at[i]);
  }
  std::vector<BufferRequest> requests;
  for (size_t b = 0; b < program.buffers.size(); ++b)
    requests.push_back({Bytes(program.buffers[b].box.volume()), std::min(first[b], last[b]), std::max(last[b], 0)});
  std::vector<int> step_request(program.steps.size(), -1);
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const ProgramStep& s = program.steps[i];
    size_t bytes = 0;
    if (s.kind == StepKind::kCompute || s.kind == StepKind::kMerge) {
      TS_RETURN_IF_ERROR(CheckStepShapes(program, i));
      bytes = layout->prepared[s.subgraph]->arena_bytes();
    } else if (s.kind == StepKind::kCopy) {
      bytes = Bytes(s.src_box.volume());
    } else if (s.kind == StepKind::kRecv && !layout->recv_direct[i]) {
      bytes = layout->wire_bytes[i];  // codes (a quarter of the floats) or floats
    } else if (s.kind == StepKind::kSend && !layout->send_direct[i]) {
      bytes = layout->wire_bytes[i];
    }
    if (bytes == 0) continue;
    step_request[i] = static_cast<int>(requests.size());
    int from = static_cast<int>(i), to = static_cast<int>(i);
    if (s.kind == StepKind::kRecv) from = std::clamp(s.receive_from, 0, static_cast<int>(i));
    if (s.kind == StepKind::kSend) to = release_at[i];
    requests.push_back({bytes, from, to});
  }
  layout->buffer_requests.assign(requests.begin(), requests.begin() + program.buffers.size());
  layout->step_bytes.assign(program.steps.size(), 0);
  for (size_t i = 0; i < program.steps.size(); ++i)
    if (step_request[i] >= 0) layout->step_bytes[i] = requests[step_request[i]].size;

  // Working memory or pipeline buffers (the header's picture): runs of
  // Compute/Merge/Copy steps between Send/Recv steps; a request whose first
  // and last step are in the same run lives in the working memory. Model
  // inputs are copied in when the request takes the working memory for the
  // run of step 0, outputs copied out before it gives back the last run's.
  layout->run_of.assign(program.steps.size() + 1, -1);
  for (int i = 0; i < num_steps; ++i) {
    const StepKind k = program.steps[i].kind;
    if (k == StepKind::kSend || k == StepKind::kRecv) continue;
    if (i > 0 && layout->run_of[i - 1] >= 0) {
      layout->run_of[i] = layout->run_of[i - 1];
      layout->run_last.back() = i;
    } else {
      layout->run_of[i] = static_cast<int>(layout->run_last.size());
      layout->run_last.push_back(i);
    }
  }
  if (num_steps > 0) layout->run_of[num_steps] = layout->run_of[num_steps - 1];
  for (const ProgramScenario& sc : program.scenarios) {
    std::vector<char> runs(program.steps.size(), 0);
    std::vector<int> waits(program.steps.size(), 0);
    for (size_t k = 0; k < sc.steps.size(); ++k)
      if (sc.steps[k] >= 0 && sc.steps[k] < num_steps) {
        runs[sc.steps[k]] = 1;
        waits[sc.steps[k]] = k < sc.waits.size() ? sc.waits[k] : 0;
      }
    layout->scenario_steps.push_back(std::move(runs));
    layout->scenario_waits.push_back(std::move(waits));
  }
  if (!program.scenarios.empty()) layout->step_writers = StepWriters(program);
  std::vector<BufferRequest> working, buffers;
  std::vector<std::pair<bool, size_t>> part(requests.size());  // (working, index in its part)
  for (size_t r = 0; r < requests.size(); ++r) {
    const BufferRequest& q = requests[r];
    const bool in_working = q.first <= q.last && q.first >= 0 && q.last <= num_steps && layout->run_of[q.first] >= 0 &&
                            layout->run_of[q.first] == layout->run_of[q.last];
    std::vector<BufferRequest>& to = in_working ? working : buffers;
    part[r] = {in_working, to.size()};
    to.push_back(q);
  }
  const BestOfGreedyLayout arena_layout(kAlign);
  ArenaPlan working_plan = arena_layout.Plan(working), buffers_plan = arena_layout.Plan(buffers);
  const ArenaPlan whole_plan = arena_layout.Plan(requests);
  const std::string where = "device " + std::to_string(program.device);
  // Sharing the working memory pays once one more request is in flight than
  // there are working memories: slots · W + (slots + 1) · B < (slots + 1) · A
  // (A: everything as one arena per request). Otherwise (a program whose
  // memory is mostly tiles kept across its links, as FFMT's) each request
  // keeps one whole arena, its runs need no turn, and W = 0. The sizing
  // (SizeDeviceProgram) takes the same decision, so the promise is what runs.
  const int64_t slots = std::max(1, options.compute_slots);
  layout->share_working =
      slots * static_cast<int64_t>(working_plan.size) + (slots + 1) * static_cast<int64_t>(buffers_plan.size) <
      (slots + 1) * static_cast<int64_t>(whole_plan.size);
  if (!layout->share_working) {
    for (auto& pr : part) pr = {false, static_cast<size_t>(&pr - part.data())};
    buffers = requests;
    buffers_plan = whole_plan;
    working.clear();
    working_plan = ArenaPlan{};
    std::fill(layout->run_of.begin(), layout->run_of.end(), -1);
    layout->run_last.clear();
  }
  TS_RETURN_IF_ERROR(CheckNoOverlap(working, working_plan).WithContext(where + " working memory"));
  TS_RETURN_IF_ERROR(CheckNoOverlap(buffers, buffers_plan).WithContext(where + " pipeline buffers"));
  layout->whole_bytes = whole_plan.size;
  layout->working_bytes = working_plan.size;
  layout->request_bytes = buffers_plan.size;
  layout->arena_bytes = working_plan.size + buffers_plan.size;
  auto offset_of = [&](size_t r) {
    return part[r].first ? working_plan.offsets[part[r].second] : buffers_plan.offsets[part[r].second];
  };
  layout->buffer_offset.resize(program.buffers.size());
  layout->buffer_working.resize(program.buffers.size());
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    layout->buffer_offset[b] = offset_of(b);
    layout->buffer_working[b] = part[b].first;
  }
  layout->step_offset.assign(program.steps.size(), 0);
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const ProgramStep& s = program.steps[i];
    if (step_request[i] >= 0) layout->step_offset[i] = offset_of(step_request[i]);
    if (layout->recv_direct[i]) layout->step_offset[i] = layout->buffer_offset[s.dst_buffer];
    if (layout->send_direct[i]) layout->step_offset[i] = layout->buffer_offset[s.src_buffer];
    // A link reads and writes only pipeline buffers (it works while the
    // request holds no working memory), and a step's own memory is where
    // its run keeps it: by construction; checked, as a layout bug would
    // let two requests write the same bytes.
    // (Without sharing everything is a pipeline buffer.)
    const bool link_step = s.kind == StepKind::kSend || s.kind == StepKind::kRecv;
    const bool own_working = step_request[i] >= 0 && part[step_request[i]].first;
    const bool linked_working =
        (layout->recv_direct[i] && part[s.dst_buffer].first) || (layout->send_direct[i] && part[s.src_buffer].first);
    if (layout->share_working && (link_step ? own_working || linked_working : step_request[i] >= 0 && !own_working))
      return Status::Internal(where + " step " + std::to_string(i) + ": its memory is in the wrong part of the arena");
  }
  layout->zero_at.assign(program.steps.size() + 1, {});
  for (size_t b = 0; b < program.buffers.size(); ++b)
    if (!is_model_input[b] && !received_whole[b] && first[b] <= static_cast<int>(program.steps.size()))
      layout->zero_at[first[b]].push_back(b);

  auto prepared = std::make_shared<PreparedProgram>(std::move(layout));
  prepared->self_ = prepared;
  return std::shared_ptr<const PreparedProgram>(std::move(prepared));
}

// One working memory and the executors of the program's Compute/Merge
// steps bound to it (their arenas are in it).
struct WorkingSlot {
  float* memory = nullptr;
  bool owns_memory = true;                           // else a runner's own arena (no sharing)
  std::vector<std::unique_ptr<Executor>> executors;  // per step (Compute/Merge)
  ~WorkingSlot() {
    executors.clear();
    if (owns_memory) std::free(memory);
  }
};

namespace {

Result<float*> AllocateAligned(size_t bytes, const std::string& what) {
  const size_t alloc = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  auto* p = static_cast<float*>(std::aligned_alloc(kAlign, alloc));
  if (p == nullptr)
    return Status::ResourceExhausted("cannot allocate " + what + " of " + std::to_string(alloc) + " bytes");
  return p;
}

}  // namespace

// The executors of the program's Compute/Merge steps, their arenas in `slot`.
static void BindExecutors(const PreparedProgram::Layout& layout, WorkingSlot* slot) {
  const DeviceProgram& p = *layout.program;
  slot->executors.resize(p.steps.size());
  char* base = reinterpret_cast<char*>(slot->memory);
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const ProgramStep& s = p.steps[i];
    if (s.kind == StepKind::kCompute || s.kind == StepKind::kMerge)
      slot->executors[i] = layout.prepared[s.subgraph]->Fork(base + layout.step_offset[i]);
  }
}

// The working memories of one prepared program: made as requests overlap,
// up to RunnerOptions::compute_slots; a request waits for one to be free.
class PreparedProgram::WorkingPool {
 public:
  explicit WorkingPool(const Layout& layout) : layout_(layout), limit_(std::max(1, layout.options.compute_slots)) {}

  // At least one working memory exists (made now when none does).
  Status EnsureOne() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!all_.empty()) return Status::OK();
    TS_ASSIGN_OR_RETURN(auto slot, Make());
    idle_.push_back(slot.get());
    all_.push_back(std::move(slot));
    return Status::OK();
  }

  // Waits until a working memory is free (or makes one while fewer than the
  // limit exist). No request waits on a peer while it holds one, so every
  // holder gives it back after a bounded run of compute steps.
  Result<WorkingSlot*> Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    if (idle_.empty() && static_cast<int>(all_.size()) < limit_) {
      TS_ASSIGN_OR_RETURN(auto slot, Make());
      all_.push_back(std::move(slot));
      return all_.back().get();
    }
    free_.wait(lock, [this] { return !idle_.empty(); });
    WorkingSlot* slot = idle_.back();
    idle_.pop_back();
    return slot;
  }

  void Release(WorkingSlot* slot) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle_.push_back(slot);
    }
    free_.notify_one();
  }

  int made() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(all_.size());
  }

 private:
  Result<std::unique_ptr<WorkingSlot>> Make() const {
    auto slot = std::make_unique<WorkingSlot>();
    TS_ASSIGN_OR_RETURN(slot->memory,
                        AllocateAligned(layout_.working_bytes,
                                        "device " + std::to_string(layout_.program->device) + "'s working memory"));
    BindExecutors(layout_, slot.get());
    return slot;
  }

  const Layout& layout_;
  const int limit_;
  mutable std::mutex mu_;
  std::condition_variable free_;
  std::vector<std::unique_ptr<WorkingSlot>> all_;  // GUARDED_BY(mu_)
  std::vector<WorkingSlot*> idle_;                 // GUARDED_BY(mu_)
};

PreparedProgram::PreparedProgram(std::unique_ptr<Layout> layout)
    : layout_(std::move(layout)), pool_(std::make_unique<WorkingPool>(*layout_)) {}
PreparedProgram::~PreparedProgram() = default;

Result<std::unique_ptr<ProgramRunner>> PreparedProgram::NewRunner() const {
  if (layout_->options.shapes_only)
    return Status::FailedPrecondition("device " + std::to_string(layout_->program->device) +
                                      ": a program prepared for sizes only cannot run");
  if (layout_->arena_bytes > static_cast<size_t>(kMaxDeviceArenaBytes))
    return Status::ResourceExhausted("device " + std::to_string(layout_->program->device) +
                                     ": its program needs an arena of " + std::to_string(layout_->arena_bytes) +
                                     " bytes, over the limit of " + std::to_string(kMaxDeviceArenaBytes) +
                                     " (util/limits.h kMaxDeviceArenaBytes)");
  // The first runner proves the working memory allocates.
  if (layout_->share_working) TS_RETURN_IF_ERROR(pool_->EnsureOne());
  std::unique_ptr<ProgramRunner> r(new ProgramRunner(self_.lock()));
  TS_RETURN_IF_ERROR(r->BindArena());
  return r;
}

size_t PreparedProgram::memory_bytes() const { return layout_->arena_bytes; }
size_t PreparedProgram::working_bytes() const { return layout_->working_bytes; }
size_t PreparedProgram::whole_bytes() const { return layout_->whole_bytes; }
size_t PreparedProgram::request_bytes() const { return layout_->request_bytes; }
int PreparedProgram::compute_slots() const { return std::max(1, layout_->options.compute_slots); }
int PreparedProgram::working_memories() const { return pool_->made(); }
bool PreparedProgram::shares_working() const { return layout_->share_working; }
size_t PreparedProgram::weight_bytes() const { return layout_->weight_bytes; }
size_t PreparedProgram::load_peak_bytes() const { return layout_->load_peak_bytes; }
const std::vector<size_t>& PreparedProgram::step_bytes() const { return layout_->step_bytes; }
const std::vector<BufferRequest>& PreparedProgram::buffer_requests() const { return layout_->buffer_requests; }
std::vector<int64_t> PreparedProgram::live_bytes() const {
  const int steps = static_cast<int>(layout_->step_bytes.size());
  std::vector<int64_t> live(layout_->step_bytes.begin(), layout_->step_bytes.end());
  for (const BufferRequest& b : layout_->buffer_requests)
    for (int s = std::max(b.first, 0); s <= std::min(b.last, steps - 1); ++s) live[s] += static_cast<int64_t>(b.size);
  return live;
}
bool PreparedProgram::ReadsConstant(int subgraph, int value) const {
  // An executor's weight accounting knows which constants its kernels read.
  return layout_->prepared.at(subgraph)->ReadsConstant(value);
}

ProgramRunner::ProgramRunner(std::shared_ptr<const PreparedProgram> prepared)
    : prepared_(std::move(prepared)), layout_(prepared_->layout_.get()) {}

Result<std::unique_ptr<ProgramRunner>> ProgramRunner::Create(const DeviceProgram& program,
                                                             const RunnerOptions& options) {
  TS_ASSIGN_OR_RETURN(auto prepared, PreparedProgram::Prepare(program, options));
  return prepared->NewRunner();
}

Result<std::unique_ptr<ProgramRunner>> ProgramRunner::Fork() const { return prepared_->NewRunner(); }

ProgramRunner::~ProgramRunner() {
  own_.reset();
  std::free(buffers_);
}

Status ProgramRunner::BindArena() {
  TS_ASSIGN_OR_RETURN(buffers_,
                      AllocateAligned(layout_->request_bytes,
                                      "device " + std::to_string(layout_->program->device) + "'s pipeline buffers"));
  if (!layout_->share_working) {  // its steps run in its own arena
    own_ = std::make_unique<WorkingSlot>();
    own_->memory = buffers_;
    own_->owns_memory = false;
    BindExecutors(*layout_, own_.get());
  }
  return Status::OK();
}

float* ProgramRunner::Buffer(int b, const WorkingSlot* working) const {
  char* base = reinterpret_cast<char*>(layout_->buffer_working[b] ? working->memory : buffers_);
  return reinterpret_cast<float*>(base + layout_->buffer_offset[b]);
}

size_t ProgramRunner::memory_bytes() const { return layout_->arena_bytes; }
size_t ProgramRunner::weight_bytes() const { return layout_->weight_bytes; }

Status ProgramRunner::Run(const std::vector<Link*>& peers, const std::vector<TensorData>& inputs,
                          std::vector<TensorData>* outputs, int scenario) {
  const DeviceProgram& p = *layout_->program;
  const PreparedProgram::Layout& l = *layout_;
  const std::string me = "device " + std::to_string(p.device);
  if (inputs.size() != p.model_inputs.size())
    return Status::InvalidArgument(me + " expects " + std::to_string(p.model_inputs.size()) + " model inputs");
  if (scenario < -1 || scenario >= static_cast<int>(p.scenarios.size()))
    return Status::InvalidArgument(me + ": no model " + std::to_string(scenario) + " in this program (it has " +
                                   std::to_string(p.scenarios.size()) + ")");
  // A scenario (one merged model, DeviceProgram::scenarios) runs its steps
  // only; it reads and writes its own model inputs and outputs only.
  const std::vector<char>* only = scenario >= 0 ? &l.scenario_steps[scenario] : nullptr;
  auto runs = [only](size_t i) { return only == nullptr || (*only)[i] != 0; };
  // A scenario's step starts once its wait count of writers ran in this
  // request (ProgramScenario::waits).
  std::vector<char> ran(scenario >= 0 ? p.steps.size() : 0, 0);
  auto ready = [&](size_t i) -> Status {
    if (scenario < 0) return Status::OK();
    int done = 0;
    for (int w : l.step_writers[i]) done += ran[w];
    const int want = l.scenario_waits[scenario][i];
    if (done == want) return Status::OK();
    return Status::FailedPrecondition(me + ": model '" + p.scenarios[scenario].name + "' step " + std::to_string(i) +
                                      " waits for " + std::to_string(want) + " earlier step(s) writing its inputs, " +
                                      std::to_string(done) + " ran: the program's scenario skips a step it needs");
  };
  auto in_scenario = [&](int value, bool input) {
    if (scenario < 0) return true;
    const auto& values = input ? p.scenarios[scenario].inputs : p.scenarios[scenario].outputs;
    return std::find(values.begin(), values.end(), value) != values.end();
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int b = p.model_inputs[i].second;
    if (inputs[i].values.empty() && !in_scenario(p.model_inputs[i].first, true)) continue;
    if (static_cast<int64_t>(inputs[i].values.size()) != p.buffers[b].box.volume())
      return Status::InvalidArgument(me + ": model input " + std::to_string(i) + " has the wrong size");
  }
  // Model inputs and outputs, those in the working memory (`in_working`)
  // or those among the pipeline buffers.
  auto copy_inputs = [&](bool in_working, const WorkingSlot* slot) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int b = p.model_inputs[i].second;
      if (l.buffer_working[b] == in_working && !inputs[i].values.empty())
        std::copy(inputs[i].values.begin(), inputs[i].values.end(), Buffer(b, slot));
    }
  };
  outputs->assign(p.model_outputs.size(), TensorData{});
  auto copy_outputs = [&](bool in_working, const WorkingSlot* slot) {
    for (size_t k = 0; k < p.model_outputs.size(); ++k) {
      const int b = p.model_outputs[k].second;
      if (l.buffer_working[b] != in_working || !in_scenario(p.model_outputs[k].first, false)) continue;
      TensorData& t = (*outputs)[k];
      t.shape = p.buffers[b].shape();
      const float* src = Buffer(b, slot);
      t.values.assign(src, src + p.buffers[b].box.volume());
    }
  };
  copy_inputs(false, nullptr);
  char* base = reinterpret_cast<char*>(buffers_);
  // The link to `peer`; null when the caller gave none (checked at its Send/Recv step).
  auto link_to = [&peers](int peer) -> Link* {
    return peer >= 0 && peer < static_cast<int>(peers.size()) ? peers[peer] : nullptr;
  };
  // Whatever way Run returns, no link writes into these buffers afterwards
  // (the runner goes back to the pool and serves another request), and the
  // working memory it holds goes back to the program's pool.
  struct DetachOnReturn {
    const std::vector<Link*>& links;
    ~DetachOnReturn() {
      for (Link* link : links)
        if (link) link->Detach();
    }
  } detach{peers};
  PreparedProgram::WorkingPool& pool = *prepared_->pool_;
  struct Holding {
    PreparedProgram::WorkingPool& pool;
    WorkingSlot* slot = nullptr;
    void Give() {
      if (slot) pool.Release(slot);
      slot = nullptr;
    }
    ~Holding() { Give(); }
  } working{pool};
  auto wait_sent = [&](size_t after) {
    for (int snd : l.wait_sent_after[after]) {
      if (!runs(snd)) continue;
      const ProgramStep& s = p.steps[snd];
      if (Link* link = link_to(s.peer)) TS_RETURN_IF_ERROR(link->WaitSent(s.message).WithContext(me));
    }
    return Status::OK();
  };
  const size_t n = p.steps.size();
  size_t flushed = 0;  // steps before this have no Send still leaving (RunnerOptions::flush_sends)
  const bool tracing = [] {
    std::lock_guard<std::mutex> lock(step_trace_mu);
    return step_trace != nullptr;
  }();
  const int64_t trace_run = tracing ? step_trace_runs.fetch_add(1) : 0;
  for (size_t i = 0; i < n; ++i) {
    const ProgramStep& s = p.steps[i];
    const int run = l.run_of[i];
    // Recv steps whose message may land from this step on (in the pipeline
    // buffers: no working memory needed).
    auto expect = [&] {
      for (int r : l.expect_at[i]) {
        if (!runs(r)) continue;
        const ProgramStep& recv = p.steps[r];
        if (Link* link = link_to(recv.peer)) link->Expect(recv.message, base + l.step_offset[r], l.wire_bytes[r]);
      }
    };
    if (!runs(i)) {
      expect();
      // Skipped (another model's step). A run still ends here: its working
      // memory goes back, with the model outputs it holds when it is the last.
      if (run >= 0 && static_cast<int>(i) == l.run_last[run]) {
        if (i + 1 == n && working.slot != nullptr) copy_outputs(true, working.slot);
        working.Give();
      }
      if (run < 0 || static_cast<int>(i) == l.run_last[run]) TS_RETURN_IF_ERROR(wait_sent(i));
      continue;
    }
    if (run >= 0 && working.slot == nullptr) {
      // A run starts. Sends whose memory the run reuses are waited for
      // before it takes the working memory (no peer is waited on while
      // holding it; no step of the run sends or receives, so waiting here
      // rather than at the step is the same for the peers).
      for (int t = static_cast<int>(i); t < l.run_last[run]; ++t) TS_RETURN_IF_ERROR(wait_sent(t));
      // RunnerOptions::flush_sends: every message sent so far leaves first.
      for (size_t t = flushed; l.options.flush_sends && t < i; ++t)
        if (p.steps[t].kind == StepKind::kSend && runs(static_cast<int>(t)))
          if (Link* link = link_to(p.steps[t].peer))
            TS_RETURN_IF_ERROR(link->WaitSent(p.steps[t].message).WithContext(me));
      flushed = i;
      TS_ASSIGN_OR_RETURN(working.slot, pool.Acquire());
      // The run of step 0 holds the model inputs in the working memory (a
      // scenario may start it after step 0).
      if (run == l.run_of[0]) copy_inputs(true, working.slot);
    }
    const int64_t trace_start = tracing ? MonotonicMicros() : 0;
    const double trace_cpu = tracing ? ThreadCpuSeconds() : 0.0;
    TS_RETURN_IF_ERROR(ready(i));
    const WorkingSlot* slot = l.share_working ? working.slot : own_.get();
    for (int b : l.zero_at[i]) std::memset(Buffer(b, slot), 0, Bytes(p.buffers[b].box.volume()));
    expect();
    switch (s.kind) {
      case StepKind::kSend: {
        Link* link = link_to(s.peer);
        if (!link) return Status::FailedPrecondition(me + " has no link to device " + std::to_string(s.peer));
        // The link reads the message from the pipeline buffers until
        // wait_sent (ProgramStep::release_after).
        char* from = base + l.step_offset[i];
        if (l.wire_grid[i])
          ExtractBoxCodes(Buffer(s.src_buffer, slot), p.buffers[s.src_buffer].shape(), s.src_box, *l.wire_grid[i],
                          reinterpret_cast<uint8_t*>(from));
        else if (!l.send_direct[i])
          ExtractBox(Buffer(s.src_buffer, slot), p.buffers[s.src_buffer].shape(), s.src_box,
                     reinterpret_cast<float*>(from));
        TS_RETURN_IF_ERROR(link->SendFrom(s.message, from, l.wire_bytes[i]));
        break;
      }
      case StepKind::kRecv: {
        Link* link = link_to(s.peer);
        if (!link) return Status::FailedPrecondition(me + " has no link to device " + std::to_string(s.peer));
        // Into its place among the pipeline buffers (the link checks its size against the program's).
        char* landed = base + l.step_offset[i];
        if (Status st = link->RecvInto(s.message, landed, l.wire_bytes[i], l.options.timeout); !st.ok())
          return st.WithContext(me + ", message " + std::to_string(s.message) + " from device " +
                                std::to_string(s.peer));
        if (l.wire_grid[i])
          InsertBoxCodes(reinterpret_cast<const uint8_t*>(landed), *l.wire_grid[i], Buffer(s.dst_buffer, slot),
                         p.buffers[s.dst_buffer].shape(), s.dst_box);
        else if (!l.recv_direct[i])
          InsertBox(reinterpret_cast<const float*>(landed), Buffer(s.dst_buffer, slot), p.buffers[s.dst_buffer].shape(),
                    s.dst_box);
        break;
      }
      case StepKind::kCopy: {
        auto* staging = reinterpret_cast<float*>(reinterpret_cast<char*>(slot->memory) + l.step_offset[i]);
        ExtractBox(Buffer(s.src_buffer, slot), p.buffers[s.src_buffer].shape(), s.src_box, staging);
        InsertBox(staging, Buffer(s.dst_buffer, slot), p.buffers[s.dst_buffer].shape(), s.dst_box);
        break;
      }
      case StepKind::kCompute:
      case StepKind::kMerge:
        step_inputs_.clear();
        step_outputs_.clear();
        for (int b : s.inputs) step_inputs_.push_back(Buffer(b, slot));
        for (int b : s.outputs) step_outputs_.push_back(Buffer(b, slot));
        {
          const double cpu0 = l.options.time_steps ? ThreadCpuSeconds() : 0.0;
          slot->executors[i]->RunInPlace(step_inputs_.data(), step_outputs_.data());
          if (l.options.time_steps) {
            step_cpu_seconds_.resize(n, 0.0);
            step_cpu_seconds_[i] += ThreadCpuSeconds() - cpu0;
          }
        }
        break;
    }
    if (scenario >= 0) ran[i] = 1;
    if (run >= 0 && static_cast<int>(i) == l.run_last[run]) {
      if (i + 1 == n) copy_outputs(true, slot);
      working.Give();
    }
    if (run < 0 || static_cast<int>(i) == l.run_last[run]) TS_RETURN_IF_ERROR(wait_sent(i));
    if (tracing) {
      const int64_t end = MonotonicMicros();
      const double cpu_us = (ThreadCpuSeconds() - trace_cpu) * 1e6;
      std::lock_guard<std::mutex> lock(step_trace_mu);
      if (step_trace)
        std::fprintf(step_trace,
                     "{\"device\":%d,\"run\":%lld,\"step\":%zu,\"kind\":\"%s\",\"layer\":%d,\"peer\":%d,"
                     "\"message\":%lld,\"bytes\":%zu,\"start_us\":%lld,\"end_us\":%lld,\"cpu_us\":%.0f}\n",
                     p.device, static_cast<long long>(trace_run), i, StepKindName(s.kind), s.layer, s.peer,
                     static_cast<long long>((s.kind == StepKind::kSend || s.kind == StepKind::kRecv) ? s.message : -1),
                     (s.kind == StepKind::kSend || s.kind == StepKind::kRecv) ? l.wire_bytes[i] : size_t{0},
                     static_cast<long long>(trace_start), static_cast<long long>(end), cpu_us);
    }
  }
  if (tracing) {
    std::lock_guard<std::mutex> lock(step_trace_mu);
    if (step_trace) std::fflush(step_trace);
  }
  TS_RETURN_IF_ERROR(wait_sent(n));
  copy_outputs(false, nullptr);
  return Status::OK();
}

Result<InProcessRun> RunProgramsInProcess(const Graph& graph, const std::vector<DeviceProgram>& programs,
                                          const std::vector<TensorData>& inputs, const RunnerOptions& options,
                                          int repeat, int scenario) {
  const size_t n = programs.size();
  const auto t_prepare = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<ProgramRunner>> runners;
  for (const auto& p : programs) {
    TS_ASSIGN_OR_RETURN(auto r, ProgramRunner::Create(p, options));
    runners.push_back(std::move(r));
  }
  // One in-process link per unordered pair that exchanges messages.
  std::vector<std::vector<std::unique_ptr<Link>>> links(n);
  for (auto& row : links) row.resize(n);
  for (const auto& p : programs)
    for (const auto& s : p.steps)
      if ((s.kind == StepKind::kSend || s.kind == StepKind::kRecv) && !links[p.device][s.peer]) {
        auto [a, b] = MakeInProcessLinkPair(std::to_string(p.device), std::to_string(s.peer));
        links[p.device][s.peer] = std::move(a);
        links[s.peer][p.device] = std::move(b);
      }
  std::map<int, size_t> input_index;
  for (size_t i = 0; i < graph.inputs.size(); ++i) input_index[graph.inputs[i]] = i;
  if (inputs.size() != graph.inputs.size())
    return Status::InvalidArgument("the model takes " + std::to_string(graph.inputs.size()) + " inputs");

  std::vector<Status> status(n);
  std::vector<std::vector<TensorData>> outs(n);
  InProcessRun result;
  result.prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_prepare).count();
  std::vector<double> seconds;
  std::vector<std::vector<double>> cpu(n);  // per device, per run
  std::vector<int64_t> sent_before(n * n, 0);
  std::vector<std::vector<double>> first_steps(n);  // step times after the first run
  for (int r = 0; r < std::max(1, repeat); ++r) {
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) sent_before[a * n + b] = links[a][b] ? links[a][b]->bytes_sent() : 0;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (size_t d = 0; d < n; ++d)
      threads.emplace_back([&, d] {
        std::vector<Link*> peers(n, nullptr);
        for (size_t q = 0; q < n; ++q) peers[q] = links[d][q].get();
        std::vector<TensorData> my_inputs;
        for (const auto& [value, buffer] : programs[d].model_inputs) my_inputs.push_back(inputs[input_index.at(value)]);
        const double cpu0 = ThreadCpuSeconds();
        status[d] = runners[d]->Run(peers, my_inputs, &outs[d], scenario);
        cpu[d].push_back(ThreadCpuSeconds() - cpu0);
        if (!status[d].ok())  // unblock peers waiting on this device
          for (auto& l : links[d]) l.reset();
      });
    for (auto& t : threads) t.join();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (size_t d = 0; d < n; ++d)
      if (!status[d].ok()) return status[d];
    if (r == 0 && repeat > 1)  // the first run warms caches up: its step times are not kept
      for (size_t d = 0; d < n; ++d) first_steps[d] = runners[d]->step_cpu_seconds();
  }
  if (options.time_steps)
    for (size_t d = 0; d < n; ++d) {
      std::vector<double> t = runners[d]->step_cpu_seconds();
      t.resize(programs[d].steps.size(), 0.0);
      const int runs = repeat > 1 ? repeat - 1 : 1;
      for (size_t i = 0; i < t.size(); ++i)
        t[i] = (t[i] - (i < first_steps[d].size() ? first_steps[d][i] : 0.0)) / runs;
      result.step_cpu_seconds.push_back(std::move(t));
    }
  std::sort(seconds.begin(), seconds.end());
  result.seconds = seconds[seconds.size() / 2];
  for (auto& c : cpu) {
    std::sort(c.begin(), c.end());
    result.device_cpu_seconds.push_back(c[c.size() / 2]);
  }
  std::map<int, TensorData> by_value;
  for (size_t d = 0; d < n; ++d)
    for (size_t k = 0; k < programs[d].model_outputs.size(); ++k)
      by_value[programs[d].model_outputs[k].first] = outs[d][k];
  for (int v : graph.outputs) {
    if (!by_value.count(v)) return Status::Internal("no device produced model output '" + graph.values[v].name + "'");
    result.outputs.push_back(by_value[v]);
  }
  for (size_t a = 0; a < n; ++a) {
    result.device_memory_bytes.push_back(runners[a]->memory_bytes());
    for (size_t b = 0; b < n; ++b)
      if (links[a][b] && links[a][b]->bytes_sent() > sent_before[a * n + b]) {  // the last run's bytes
        const int64_t bytes = links[a][b]->bytes_sent() - sent_before[a * n + b];
        result.links.push_back({static_cast<int>(a), static_cast<int>(b), bytes});
        result.total_bytes += bytes;
      }
  }
  return result;
}

}  // namespace tessera
