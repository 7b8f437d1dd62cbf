#include "daemon/runtime/program_runner.h"

#include <chrono>
#include <map>
#include <thread>

namespace tessera {

Result<std::unique_ptr<ProgramRunner>> ProgramRunner::Create(const DeviceProgram& program,
                                                             const RunnerOptions& options) {
  std::unique_ptr<ProgramRunner> r(new ProgramRunner());
  r->program_ = &program;
  r->options_ = options;
  ExecutorOptions eo;
  eo.threads = options.threads;
  for (const Graph& g : program.subgraphs) {
    auto ex = Executor::Create(g, eo);
    if (!ex.ok()) return ex.status().WithContext("device " + std::to_string(program.device) + ", " + g.name);
    r->executors_.push_back(std::move(*ex));
  }
  for (const auto& b : program.buffers) r->buffers_.emplace_back(static_cast<size_t>(b.box.volume()), 0.f);
  return r;
}

size_t ProgramRunner::memory_bytes() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b.size() * sizeof(float);
  for (const auto& e : executors_) n += e->arena_bytes();
  return n;
}

Status ProgramRunner::Run(const std::vector<Link*>& peers, const std::vector<TensorData>& inputs,
                          std::vector<TensorData>* outputs) {
  const DeviceProgram& p = *program_;
  const std::string me = "device " + std::to_string(p.device);
  if (inputs.size() != p.model_inputs.size())
    return Status::InvalidArgument(me + " expects " + std::to_string(p.model_inputs.size()) + " model inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto& buf = buffers_[p.model_inputs[i].second];
    if (inputs[i].values.size() != buf.size())
      return Status::InvalidArgument(me + ": model input " + std::to_string(i) + " has the wrong size");
    std::copy(inputs[i].values.begin(), inputs[i].values.end(), buf.begin());
  }
  std::vector<TensorData> in, out;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const ProgramStep& s = p.steps[i];
    switch (s.kind) {
      case StepKind::kSend: {
        Link* link = s.peer < static_cast<int>(peers.size()) ? peers[s.peer] : nullptr;
        if (!link) return Status::FailedPrecondition(me + " has no link to device " + std::to_string(s.peer));
        std::string bytes(static_cast<size_t>(s.src_box.volume()) * sizeof(float), '\0');
        ExtractBox(buffers_[s.src_buffer].data(), p.buffers[s.src_buffer].shape(), s.src_box,
                   reinterpret_cast<float*>(bytes.data()));
        TS_RETURN_IF_ERROR(link->Send(s.message, std::move(bytes)));
        break;
      }
      case StepKind::kRecv: {
        Link* link = s.peer < static_cast<int>(peers.size()) ? peers[s.peer] : nullptr;
        if (!link) return Status::FailedPrecondition(me + " has no link to device " + std::to_string(s.peer));
        TS_ASSIGN_OR_RETURN(std::string bytes, link->Recv(s.message, options_.timeout));
        // The receiver checks sizes against its program before accepting (ARCHITECTURE.md wire rules).
        if (bytes.size() != static_cast<size_t>(s.dst_box.volume()) * sizeof(float))
          return Status::DataLoss(me + ": message " + std::to_string(s.message) + " from device " +
                                  std::to_string(s.peer) + " has " + std::to_string(bytes.size()) +
                                  " bytes, the program expects " + std::to_string(s.dst_box.volume() * 4));
        InsertBox(reinterpret_cast<const float*>(bytes.data()), buffers_[s.dst_buffer].data(),
                  p.buffers[s.dst_buffer].shape(), s.dst_box);
        break;
      }
      case StepKind::kCopy: {
        std::vector<float> tmp(static_cast<size_t>(s.src_box.volume()));
        ExtractBox(buffers_[s.src_buffer].data(), p.buffers[s.src_buffer].shape(), s.src_box, tmp.data());
        InsertBox(tmp.data(), buffers_[s.dst_buffer].data(), p.buffers[s.dst_buffer].shape(), s.dst_box);
        break;
      }
      case StepKind::kCompute:
      case StepKind::kMerge: {
        in.resize(s.inputs.size());
        for (size_t k = 0; k < s.inputs.size(); ++k) {
          in[k].shape = p.buffers[s.inputs[k]].shape();
          in[k].values = buffers_[s.inputs[k]];
        }
        TS_RETURN_IF_ERROR(executors_[s.subgraph]->Run(in, &out).WithContext(me + " step " + std::to_string(i)));
        for (size_t k = 0; k < s.outputs.size(); ++k) buffers_[s.outputs[k]] = std::move(out[k].values);
        break;
      }
    }
  }
  outputs->clear();
  for (const auto& [value, buffer] : p.model_outputs) {
    TensorData t;
    t.shape = p.buffers[buffer].shape();
    t.values = buffers_[buffer];
    outputs->push_back(std::move(t));
  }
  return Status::OK();
}

Result<InProcessRun> RunProgramsInProcess(const Graph& graph, const std::vector<DeviceProgram>& programs,
                                          const std::vector<TensorData>& inputs, const RunnerOptions& options) {
  const size_t n = programs.size();
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
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t d = 0; d < n; ++d)
    threads.emplace_back([&, d] {
      std::vector<Link*> peers(n, nullptr);
      for (size_t q = 0; q < n; ++q) peers[q] = links[d][q].get();
      std::vector<TensorData> my_inputs;
      for (const auto& [value, buffer] : programs[d].model_inputs) my_inputs.push_back(inputs[input_index.at(value)]);
      status[d] = runners[d]->Run(peers, my_inputs, &outs[d]);
      if (!status[d].ok())  // unblock peers waiting on this device
        for (auto& l : links[d]) l.reset();
    });
  for (auto& t : threads) t.join();
  InProcessRun result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t d = 0; d < n; ++d)
    if (!status[d].ok()) return status[d];
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
      if (links[a][b] && links[a][b]->bytes_sent() > 0) {
        result.links.push_back({static_cast<int>(a), static_cast<int>(b), links[a][b]->bytes_sent()});
        result.total_bytes += links[a][b]->bytes_sent();
      }
  }
  return result;
}

}  // namespace tessera
