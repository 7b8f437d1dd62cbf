#include "daemon/cluster/gateway.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <random>
#include <sstream>

#include "daemon/cluster/worker_tensor.h"
#include "partition/compile/program_codec.h"
#include "planner/cluster.h"
#include "transport/tls/content_hash.h"
#include "util/process_memory.h"
#include "util/quantity.h"

namespace tessera {

namespace {
// Latency histogram bucket bounds, seconds (Prometheus `le`).
constexpr double kLatencyBounds[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30};
constexpr size_t kNumBounds = sizeof(kLatencyBounds) / sizeof(kLatencyBounds[0]);

const char* GrpcCodeName(StatusCode code) { return StatusCodeName(code); }
}  // namespace

namespace {
// The signature of the model whose inputs and outputs are these graph values.
ModelSignature SignatureOfValues(const Graph& graph, const GraphModel& model) {
  ModelSignature s;
  for (int v : model.inputs) {
    s.input_values.push_back(v);
    s.input_names.push_back(graph.values[v].name);
    s.input_shapes.push_back(graph.values[v].shape);
  }
  for (int v : model.outputs) {
    s.output_values.push_back(v);
    s.output_names.push_back(graph.values[v].name);
    s.output_shapes.push_back(graph.values[v].shape);
  }
  s.model_name = model.name;
  return s;
}
}  // namespace

ModelSignature ModelSignature::Of(const Graph& graph) {
  ModelSignature s = SignatureOfValues(graph, GraphModel{graph.name, graph.inputs, graph.outputs});
  for (const GraphModel& m : graph.models) s.models.push_back(SignatureOfValues(graph, m));
  return s;
}

namespace {

// Streams one serialized program to workers[d] in kChunkBytes chunks.
// `sent` counts the bytes that went out (for progress). DeployOptions'
// connect_timeout: a worker that is still starting gets this long; a
// refused TLS handshake fails after it.
Status SendProgram(int d, const std::string& b, int num_devices, const std::string& plan_id, int source,
                   const std::vector<WorkerEndpoint>& workers, const TransportSecurity& security,
                   const std::function<void(int64_t)>& sent, const std::vector<std::string>& run_callers,
                   const DeployOptions& deploy, DeployedDevice* out) {
  const std::string where = "worker " + workers[d].name + " (" + workers[d].address + ")";
  TS_ASSIGN_OR_RETURN(auto channel, OpenChannel(workers[d].address, security));
  // A refused handshake would keep the wait_for_ready load below retrying
  // for its whole ten minutes: reach the worker first.
  TS_RETURN_IF_ERROR(
      WaitUntilConnected(channel, workers[d].address, security, deploy.connect_timeout).WithContext(where));
  auto stub = proto::Worker::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  ctx.set_wait_for_ready(true);
  proto::LoadProgramReply reply;
  auto writer = stub->LoadProgram(&ctx, &reply);
  int64_t seq = 0;
  for (size_t off = 0; off < b.size() || seq == 0; off += kChunkBytes, ++seq) {
    proto::ProgramChunk chunk;
    chunk.set_plan_id(plan_id);
    chunk.set_seq(seq);
    chunk.set_deadline_unix_ms(UnixMillisNow() + 600000);
    if (seq == 0) {
      chunk.set_device(d);
      chunk.set_num_devices(num_devices);
      chunk.set_source(source);
      chunk.set_total_bytes(static_cast<int64_t>(b.size()));
      for (size_t q = 0; q < workers.size(); ++q) {
        (*chunk.mutable_peers())[static_cast<int>(q)] = workers[q].address;
        (*chunk.mutable_device_names())[static_cast<int>(q)] =
            workers[q].identity.empty() ? workers[q].name : workers[q].identity;
      }
      for (const std::string& caller : run_callers) chunk.add_run_callers(caller);
      chunk.set_keep_plan_id(deploy.keep_plan_id);
      chunk.set_release_current(deploy.release_current);
    }
    const size_t n = std::min(kChunkBytes, b.size() - std::min(off, b.size()));
    chunk.set_data(b.substr(std::min(off, b.size()), n));
    if (!writer->Write(chunk)) break;
    if (sent) sent(static_cast<int64_t>(n));
    if (off + n >= b.size()) break;
  }
  writer->WritesDone();
  TS_RETURN_IF_ERROR(FromGrpcStatus(writer->Finish(), where));
  *out = {static_cast<int64_t>(b.size()), reply.memory_bytes(), reply.weight_bytes(), reply.working_bytes(),
          reply.buffer_bytes()};
  return Status::OK();
}

}  // namespace

Result<std::vector<DeployedDevice>> DeployPrograms(const std::vector<DeviceProgram>& programs,
                                                   const std::string& plan_id, int source,
                                                   const std::vector<WorkerEndpoint>& workers,
                                                   const TransportSecurity& security,
                                                   const std::function<void(int64_t, int64_t)>& progress,
                                                   const std::vector<std::string>& run_callers) {
  if (programs.size() != workers.size())
    return Status::InvalidArgument("the plan has " + std::to_string(programs.size()) + " devices but " +
                                   std::to_string(workers.size()) + " workers were given");
  std::vector<std::string> bytes;
  int64_t total = 0;
  for (const auto& p : programs) {
    bytes.push_back(SerializeProgram(p, plan_id));
    total += static_cast<int64_t>(bytes.back().size());
  }
  std::atomic<int64_t> sent{0};
  std::mutex progress_mu;
  auto count = [&](int64_t n) {
    sent += n;
    if (progress) {
      std::lock_guard<std::mutex> lock(progress_mu);
      progress(sent.load(), total);
    }
  };
  std::vector<DeployedDevice> out(programs.size());
  std::vector<std::future<Status>> done;
  for (size_t d = 0; d < programs.size(); ++d)
    done.push_back(std::async(std::launch::async, [&, d]() -> Status {
      return SendProgram(static_cast<int>(d), bytes[d], static_cast<int>(programs.size()), plan_id, source, workers,
                         security, count, run_callers, DeployOptions{}, &out[d]);
    }));
  Status first;
  for (auto& f : done) {
    Status st = f.get();
    if (!st.ok() && first.ok()) first = st;
  }
  if (!first.ok()) return first;
  return out;
}

Result<std::vector<DeployedDevice>> DeployProgramsOneByOne(const ProgramSource& program, const std::string& plan_id,
                                                           int source, const std::vector<WorkerEndpoint>& workers,
                                                           const TransportSecurity& security,
                                                           const DeployOptions& deploy) {
  std::vector<DeployedDevice> out(workers.size());
  for (size_t d = 0; d < workers.size(); ++d) {
    std::string bytes;
    {
      TS_ASSIGN_OR_RETURN(DeviceProgram p, program(static_cast<int>(d)));
      bytes = SerializeProgram(std::move(p), plan_id);  // frees p's weights as it encodes them
    }
    const ProcessMemory m = ReadProcessMemory();
    spdlog::debug("deploy: device {} program encoded, {:.1f} MiB; RSS {:.1f} MiB, peak {:.1f} MiB", d,
                  bytes.size() / 1048576.0, m.rss_bytes / 1048576.0, m.peak_rss_bytes / 1048576.0);
    TS_RETURN_IF_ERROR(SendProgram(static_cast<int>(d), bytes, static_cast<int>(workers.size()), plan_id, source,
                                   workers, security, nullptr, {}, deploy, &out[d]));
  }
  return out;
}

std::vector<bool> ProbeWorkers(const std::vector<WorkerEndpoint>& workers, const TransportSecurity& security,
                               std::chrono::milliseconds timeout) {
  std::vector<bool> up(workers.size(), false);
  for (size_t i = 0; i < workers.size(); ++i) {
    auto channel = OpenChannel(workers[i].address, security);
    if (!channel.ok()) continue;
    auto stub = proto::Worker::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    ctx.set_wait_for_ready(true);
    proto::HealthRequest req;
    proto::HealthReply reply;
    up[i] = stub->Health(&ctx, req, &reply).ok() && reply.serving();
  }
  return up;
}

Result<std::shared_ptr<const Gateway::Serving>> Gateway::MakeServing(ServedCluster cluster,
                                                                     const TransportSecurity& security) {
  if (cluster.workers.empty()) return Status::InvalidArgument("the gateway has no workers");
  if (cluster.source < 0 || cluster.source >= static_cast<int>(cluster.workers.size()))
    return Status::InvalidArgument("source device " + std::to_string(cluster.source) + " is out of range");
  auto s = std::make_shared<Serving>();
  for (const auto& w : cluster.workers) {
    TS_ASSIGN_OR_RETURN(auto channel, OpenChannel(w.address, security));
    s->stubs.push_back(proto::Worker::NewStub(channel));
  }
  s->cluster = std::move(cluster);
  return std::shared_ptr<const Serving>(std::move(s));
}

Result<std::unique_ptr<Gateway>> Gateway::Create(GatewayOptions options) {
  TS_ASSIGN_OR_RETURN(auto serving, MakeServing(options.served, options.security));
  std::unique_ptr<Gateway> g(new Gateway(std::move(options)));
  g->serving_ = std::move(serving);
  g->served_plan_ids_.push_back(g->serving_->cluster.plan_id);
  g->next_request_ = 1;
  g->latency_buckets_.assign(kNumBounds, 0);
  g->worker_up_.assign(g->serving_->stubs.size(), false);
  g->worker_plan_.assign(g->serving_->stubs.size(), "");
  for (const WorkerEndpoint& w : g->options_.cluster_workers) {
    TS_ASSIGN_OR_RETURN(auto channel, OpenChannel(w.address, g->options_.security));
    g->cluster_stubs_.push_back(proto::Worker::NewStub(channel));
  }
  g->RefreshWorkerState();
  g->health_ = std::thread([gw = g.get()] { gw->HealthLoop(); });
  return g;
}

Gateway::~Gateway() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    // A failover's re-plan may outlive the request that started it.
    cv_.wait(lock, [&] { return failovers_running_ == 0; });
  }
  cv_.notify_all();
  if (health_.joinable()) health_.join();
}

void Gateway::HealthLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.health_interval, [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    RefreshWorkerState();
    RetireUnused();
    MaybeRejoin();
    lock.lock();
  }
}

std::shared_ptr<const Gateway::Serving> Gateway::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return serving_;
}

ServedCluster Gateway::Served() const { return Current()->cluster; }

bool Gateway::KnowsPlan(const std::string& plan_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(served_plan_ids_.begin(), served_plan_ids_.end(), plan_id) != served_plan_ids_.end();
}

int64_t Gateway::failovers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failovers_;
}

int64_t Gateway::replans(const std::string& reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = replans_.find(reason);
  return it == replans_.end() ? 0 : it->second;
}

int64_t Gateway::replan_failures(const std::string& reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = replan_failures_.find(reason);
  return it == replan_failures_.end() ? 0 : it->second;
}

namespace {
std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<std::string> WorkerNames(const ServedCluster& cluster) {
  std::vector<std::string> names;
  for (const WorkerEndpoint& w : cluster.workers) names.push_back(w.name);
  return names;
}
}  // namespace

std::string Gateway::DescribePlan() const {
  const auto serving = Current();
  return "plan " + serving->cluster.plan_id + " on " + std::to_string(serving->cluster.workers.size()) +
         " workers: " + JoinNames(WorkerNames(serving->cluster));
}

std::chrono::milliseconds Gateway::LinkBacklog(const Serving& serving, size_t i) const {
  if (i != static_cast<size_t>(serving.cluster.source) || !(serving.cluster.request_link_s > 0))
    return std::chrono::milliseconds(0);
  int running = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running = in_flight_;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(running * serving.cluster.request_link_s * 1e3)));
}

bool Gateway::ProbeWorker(const Serving& serving, size_t i, std::chrono::milliseconds timeout,
                          proto::HealthReply* health) {
  proto::HealthRequest hreq;
  hreq.set_plan_id(serving.cluster.plan_id);
  grpc::ClientContext hctx;
  hctx.set_deadline(std::chrono::system_clock::now() + timeout);
  // Wait (up to the timeout) for a channel that is reconnecting, instead of
  // failing at once while it backs off: a worker that just restarted is up.
  hctx.set_wait_for_ready(true);
  const bool up = serving.stubs[i]->Health(&hctx, hreq, health).ok() && health->serving();
  std::lock_guard<std::mutex> lock(mu_);
  if (serving_.get() != &serving) return up;  // a failover replaced it meanwhile
  const WorkerEndpoint& w = serving.cluster.workers[i];
  if (worker_up_[i] != up) spdlog::info("gateway: worker {} ({}) is {}", w.name, w.address, up ? "up" : "down");
  worker_up_[i] = up;
  // A worker may hold another plan as its current program while it keeps
  // this one for the gateway (a rejoin's deploy that did not finish).
  worker_plan_[i] = up ? serving.cluster.plan_id : health->plan_id();
  return up;
}

std::vector<std::string> Gateway::DownWorkers(const Serving& serving, std::chrono::milliseconds timeout,
                                              bool probe_all, Status* why) {
  std::vector<std::string> down;
  for (size_t i = 0; i < serving.stubs.size(); ++i) {
    if (!probe_all) {
      std::lock_guard<std::mutex> lock(mu_);
      if (serving_.get() == &serving && worker_up_[i]) continue;
    }
    proto::HealthReply health;
    if (ProbeWorker(serving, i, timeout, &health)) continue;
    const WorkerEndpoint& w = serving.cluster.workers[i];
    down.push_back(w.name);
    if (!why->ok()) continue;
    const std::string who = "worker " + w.name + " (" + w.address + ", device " + std::to_string(i) + ")";
    *why = health.name().empty()
               ? Status::Unavailable(who + " does not answer; plan " + serving.cluster.plan_id +
                                     " cannot run without it")
               : Status::FailedPrecondition(who + " holds plan '" + health.plan_id() + "', not the served plan " +
                                            serving.cluster.plan_id + "; redeploy (tessera deploy)");
  }
  return down;
}

Status Gateway::Failover(const std::shared_ptr<const Serving>& seen, const std::vector<std::string>& down,
                         int64_t deadline_ms) {
  // The re-plan runs on a thread of its own: it finishes (and swaps) even
  // when this request's deadline passes first, and the request is answered
  // by its deadline either way.
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++failovers_running_;
  }
  std::thread([this, seen, down, done] {
    done->set_value(FailoverNow(seen, down));
    std::lock_guard<std::mutex> lock(mu_);
    --failovers_running_;
    cv_.notify_all();  // ~Gateway waits for it
  }).detach();
  if (result.wait_for(std::chrono::milliseconds(std::max<int64_t>(0, deadline_ms - UnixMillisNow()))) ==
      std::future_status::timeout)
    return Status::DeadlineExceeded("the gateway was still re-planning (a failover after " + JoinNames(down) +
                                    " went down, or a rejoin's deploy) at the request's deadline");
  return result.get();
}

Status Gateway::FailoverNow(const std::shared_ptr<const Serving>& seen, const std::vector<std::string>& down) {
  std::lock_guard<std::mutex> one_at_a_time(failover_mu_);
  if (Current() != seen) return Status::OK();  // another request did it already
  const std::string names = JoinNames(down);
  spdlog::warn("gateway: failover: {} down; re-planning plan {} on the workers that answer", names,
               seen->cluster.plan_id);
  const auto t0 = std::chrono::steady_clock::now();
  Status st;
  if (auto next = options_.failover(down); !next.ok())
    st = next.status();
  else if (auto serving = MakeServing(std::move(*next), options_.security); !serving.ok())
    st = serving.status();
  else
    Swap(seen, std::move(*serving), "failover");
  if (!st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++replan_failures_["failover"];
    return st.WithContext("failover after " + names + " went down");
  }
  spdlog::warn("gateway: failover done in {:.2f} s: {}",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), DescribePlan());
  return Status::OK();
}

void Gateway::Swap(const std::shared_ptr<const Serving>& seen, std::shared_ptr<const Serving> next,
                   const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  // Workers the new plan leaves out are lost until a plan takes them back.
  const std::vector<std::string> now = WorkerNames(next->cluster);
  for (const std::string& name : WorkerNames(seen->cluster))
    if (std::find(now.begin(), now.end(), name) == now.end()) lost_.insert(name);
  for (const std::string& name : now) lost_.erase(name);
  served_plan_ids_.push_back(next->cluster.plan_id);
  ++replans_[reason];
  if (reason == "failover") ++failovers_;
  worker_up_.assign(next->stubs.size(), true);  // they answered Health and took the programs just now
  worker_plan_.assign(next->stubs.size(), next->cluster.plan_id);
  links_.clear();  // device indices changed; refilled from Worker.GetStatus
  uart_.clear();
  mcu_.clear();
  worker_rss_.clear();
  worker_flush_sends_.clear();
  worker_dropped_.clear();
  worker_exchange_memory_.clear();
  worker_refused_.clear();
  worker_concurrency_.clear();
  serving_ = std::move(next);
}

std::vector<std::string> Gateway::ReturnedWorkers(const Serving& serving) {
  const std::vector<std::string> served = WorkerNames(serving.cluster);
  std::vector<std::string> back;
  for (size_t j = 0; j < options_.cluster_workers.size(); ++j) {
    const WorkerEndpoint& w = options_.cluster_workers[j];
    if (std::find(served.begin(), served.end(), w.name) != served.end()) continue;
    proto::HealthRequest req;
    proto::HealthReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
    ctx.set_wait_for_ready(true);  // a restarted worker's channel may still be backing off
    if (!cluster_stubs_[j]->Health(&ctx, req, &reply).ok()) continue;
    // The same worker, not another process on its port (with TLS the
    // channel has checked its certificate names the address already).
    const std::string& expected = w.identity.empty() ? w.name : w.identity;
    if (reply.name() != w.name && reply.name() != expected) {
      spdlog::warn("gateway: {} ({}) answers as '{}'; not taken back", w.name, w.address, reply.name());
      continue;
    }
    back.push_back(w.name);
  }
  return back;
}

void Gateway::MaybeRejoin() {
  if (!options_.propose || cluster_stubs_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_rejoin_) return;
  const auto serving = Current();
  const std::vector<std::string> back = ReturnedWorkers(*serving);
  if (back.empty()) return;
  bool restore = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& name : back) restore = restore || lost_.count(name) > 0;
  }
  // The rule declined this very situation already: the planner would say the same.
  const std::string key = serving->cluster.plan_id + ": " + JoinNames(back);
  if (!restore && key == declined_) return;
  Status st;
  {
    std::lock_guard<std::mutex> one_at_a_time(failover_mu_);
    if (Current() != serving) return;  // a failover replaced it meanwhile: look again next time
    st = Rejoin(serving, back, restore, key);
  }
  if (st.ok()) {
    rejoin_failures_in_row_ = 0;
    return;
  }
  const auto backoff = std::min<std::chrono::milliseconds>(
      options_.rejoin_backoff * (1 << std::min(rejoin_failures_in_row_, 16)), options_.rejoin_backoff_max);
  ++rejoin_failures_in_row_;
  next_rejoin_ = std::chrono::steady_clock::now() + backoff;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++replan_failures_["rejoin"];
  }
  spdlog::error("gateway: rejoin of {} failed ({} in a row): {}; still serving {}; next try in {:.1f} s",
                JoinNames(back), rejoin_failures_in_row_, st.ToString(), DescribePlan(),
                std::chrono::duration<double>(backoff).count());
}

Status Gateway::Rejoin(const std::shared_ptr<const Serving>& seen, const std::vector<std::string>& back, bool restore,
                       const std::string& attempt_key) {
  const auto t0 = std::chrono::steady_clock::now();
  TS_ASSIGN_OR_RETURN(PlanProposal proposal, options_.propose());
  const ServedCluster& next = proposal.cluster;
  const std::vector<std::string> names = WorkerNames(next);
  std::vector<std::string> joining;
  for (const std::string& name : back)
    if (std::find(names.begin(), names.end(), name) != names.end()) joining.push_back(name);
  if (joining.empty())
    return Status::Unavailable("the plan for the workers that answer now leaves out " + JoinNames(back) +
                               " (did it stop answering?)");
  const double before = seen->cluster.predicted_cost, after = next.predicted_cost;
  const bool better = before >= 0 && after >= 0 && after < before;
  if (!restore && !better) {
    spdlog::info(
        "gateway: {} answer(s) again; plan {} over them predicts {:.6g} against {:.6g} for the served plan {}: "
        "not better by the objective, keeping it",
        JoinNames(joining), next.plan_id, after, before, seen->cluster.plan_id);
    declined_ = attempt_key;
    return Status::OK();
  }
  if (next.plan_id == seen->cluster.plan_id) return Status::OK();
  if (restore)
    spdlog::warn(
        "gateway: rejoin: {} answer(s) again (lost in a failover); deploying plan {} on {} workers while "
        "plan {} serves",
        JoinNames(joining), next.plan_id, next.workers.size(), seen->cluster.plan_id);
  else
    spdlog::warn(
        "gateway: rejoin: {} answer(s) again (predicted {:.6g} < {:.6g}); deploying plan {} on {} workers "
        "while plan {} serves",
        JoinNames(joining), after, before, next.plan_id, next.workers.size(), seen->cluster.plan_id);
  // Workers that serve both plans hold both while the new one loads and
  // until the old one retires: only where that fits their ram: (issue 11,
  // the promise is what runs). Elsewhere the swap drains instead.
  std::vector<std::string> tight;
  // Both at the gateway's requests in flight: the old plan keeps serving
  // while the new one loads and takes over.
  const int k = options_.max_in_flight;
  for (size_t d = 0; d < next.workers.size() && d < next.weight_bytes.size(); ++d)
    for (size_t o = 0; o < seen->cluster.workers.size() && o < seen->cluster.weight_bytes.size(); ++o) {
      if (seen->cluster.workers[o].name != next.workers[d].name || next.ram_bytes[d] == kUnlimitedBytes) continue;
      const int64_t both = next.baseline_bytes[d] + next.HeldBytes(d, k) + seen->cluster.HeldBytes(o, k);
      if (both > next.ram_bytes[d])
        tight.push_back(next.workers[d].name + " (both " + FormatBytes(static_cast<double>(both)) + ", ram " +
                        FormatBytes(static_cast<double>(next.ram_bytes[d])) + ")");
    }
  if (!tight.empty()) return DrainAndSwap(seen, proposal, tight, t0);
  TS_RETURN_IF_ERROR(proposal.deploy(seen->cluster.plan_id).WithContext("deploying plan " + next.plan_id));
  TS_ASSIGN_OR_RETURN(auto serving, MakeServing(next, options_.security));
  Swap(seen, std::move(serving), "rejoin");
  // Requests that started on the old plan finish on it; its workers keep it
  // until they have (RetireUnused).
  retiring_.push_back(seen);
  spdlog::warn("gateway: rejoin done in {:.2f} s: {}; plan {} retires once its requests finish",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), DescribePlan(),
               seen->cluster.plan_id);
  return Status::OK();
}

Status Gateway::DrainAndSwap(const std::shared_ptr<const Serving>& seen, const PlanProposal& proposal,
                             const std::vector<std::string>& tight, std::chrono::steady_clock::time_point t0) {
  const ServedCluster& next = proposal.cluster;
  std::string names;
  for (const std::string& t : tight) names += (names.empty() ? "" : ", ") + t;
  int running = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    draining_ = true;
    running = in_flight_;
  }
  spdlog::warn(
      "gateway: rejoin: {} cannot hold plans {} and {} at once; draining: no new request starts until the {} "
      "running finish (at most {:.0f} s), then plan {} is deployed in place of {}",
      names, seen->cluster.plan_id, next.plan_id, running,
      std::chrono::duration<double>(options_.drain_timeout).count(), next.plan_id, seen->cluster.plan_id);
  struct Undrain {
    Gateway* g;
    ~Undrain() {
      {
        std::lock_guard<std::mutex> lock(g->mu_);
        g->draining_ = false;
      }
      g->cv_.notify_all();
    }
  } undrain{this};
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, options_.drain_timeout, [&] { return in_flight_ == 0 || stopping_; }))
      return Status::Unavailable(std::to_string(in_flight_) + " requests still ran after " +
                                 std::to_string(options_.drain_timeout.count()) + " ms of draining; plan " +
                                 seen->cluster.plan_id + " keeps serving");
    if (stopping_) return Status::Unavailable("the gateway is stopping");
  }
  const auto drained = std::chrono::steady_clock::now();
  // The workers release the old plan before they decode the new one
  // (release_current): each holds one plan at a time. If this fails the old
  // plan may be gone on some of them: the next request fails over.
  TS_RETURN_IF_ERROR(proposal.deploy("").WithContext("deploying plan " + next.plan_id + " after draining"));
  TS_ASSIGN_OR_RETURN(auto serving, MakeServing(next, options_.security));
  Swap(seen, std::move(serving), "rejoin");
  spdlog::warn("gateway: rejoin done in {:.2f} s (drained in {:.2f} s, requests paused {:.2f} s): {}",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               std::chrono::duration<double>(drained - t0).count(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - drained).count(), DescribePlan());
  return Status::OK();
}

void Gateway::RetireUnused() {
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    // Requests hold the Serving they run on; only retiring_ holds it once
    // the last has finished (nobody can take a new copy: it is not served).
    if (it->use_count() > 1) {
      ++it;
      continue;
    }
    const Serving& old = **it;
    for (size_t i = 0; i < old.stubs.size(); ++i) {
      proto::RetireRequest req;
      req.set_plan_id(old.cluster.plan_id);
      proto::RetireReply reply;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1000));
      // A worker that does not answer lets the plan go at its next load.
      if (const grpc::Status st = old.stubs[i]->Retire(&ctx, req, &reply); !st.ok())
        spdlog::info("gateway: worker {} did not retire plan {}: {}", old.cluster.workers[i].name, old.cluster.plan_id,
                     st.error_message());
    }
    spdlog::warn("gateway: plan {} retired on its workers (its last request finished)", old.cluster.plan_id);
    it = retiring_.erase(it);
  }
}

void Gateway::RefreshWorkerState() {
  const auto serving = Current();
  for (size_t i = 0; i < serving->stubs.size(); ++i) {
    proto::HealthReply health;
    // The source answers over the link that carries the requests in
    // flight: behind them its answer is late, not missing (LinkBacklog).
    const bool up = ProbeWorker(*serving, i, std::chrono::milliseconds(500) + LinkBacklog(*serving, i), &health);
    proto::StatusRequest sreq;
    proto::WorkerStatusReply status;
    grpc::ClientContext sctx;
    sctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    const bool have_status = up && serving->stubs[i]->GetStatus(&sctx, sreq, &status).ok();
    std::lock_guard<std::mutex> lock(mu_);
    if (serving_ != serving) return;
    if (have_status) {
      for (const auto& l : status.links())
        links_[{l.from_device(), l.to_device()}] = {l.from_device(), l.to_device(), l.payload_bytes(), l.wire_bytes(),
                                                    l.messages()};
      if (status.has_uart()) uart_[i] = status.uart();
      if (status.has_mcu()) mcu_[i] = status.mcu();
      worker_rss_[i] = {status.rss_bytes(), status.peak_rss_bytes()};
      if (!status.cpu_share().empty()) worker_flush_sends_[i] = status.flush_sends();
      worker_dropped_[i] = status.exchange_dropped();
      worker_exchange_memory_[i] = status.exchange_memory();
      worker_refused_[i] = status.requests_refused();
      worker_concurrency_[i] = {status.peak_in_flight(), status.runners(), status.working_memories()};
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (serving_ == serving) ++status_pulls_;
}

bool Gateway::AllWorkersUp() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (bool u : worker_up_)
    if (!u) return false;
  return true;
}

std::vector<LinkBytes> Gateway::Links() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LinkBytes> out;
  for (const auto& [k, l] : links_) out.push_back(l);
  return out;
}

Status Gateway::Authorize(std::string_view authorization, const std::string& where) {
  if (!options_.tokens || options_.tokens->Accepts(authorization)) return Status::OK();
  ++unauthenticated_;
  // The message never repeats what was presented.
  return Status::Unauthenticated(where + " needs a bearer token of the gateway's --token-file (" +
                                 (authorization.empty() ? "none was given" : "the one given is not among them") +
                                 ")");
}

WorkerRequestIds::WorkerRequestIds(size_t window, std::function<uint32_t()> random)
    : window_(window), random_(random ? std::move(random) : std::function<uint32_t()>(RandomUint32)) {}

uint32_t WorkerRequestIds::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  for (;;) {
    const uint32_t id = random_() & 0x7fffffff;  // workers take ids below 2^31
    if (id == 0 || recent_.count(id) || !in_flight_.insert(id).second) continue;
    recent_.insert(id);
    order_.push_back(id);
    if (order_.size() > window_) {
      recent_.erase(order_.front());
      order_.pop_front();
    }
    return id;
  }
}

void WorkerRequestIds::Release(uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(id);
}

void Gateway::CountOutcome(const Status& st, std::chrono::steady_clock::time_point t0) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_by_code_[st.ok() ? "ok" : GrpcCodeName(st.code())];
  if (!st.ok()) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t b = 0; b < kNumBounds; ++b)
    if (s <= kLatencyBounds[b]) ++latency_buckets_[b];
  latency_sum_s_ += s;
  ++latency_count_;
}

Result<const ModelSignature*> Gateway::SignatureOf(const std::string& model) const {
  if (model.empty()) return &options_.signature;
  std::string names;
  for (const ModelSignature& m : options_.signature.models) {
    if (m.model_name == model) return &m;
    names += (names.empty() ? "'" : ", '") + m.model_name + "'";
  }
  return Status::InvalidArgument(
      "unknown model '" + model + "': " +
      (names.empty() ? "the gateway serves one model, '" + options_.signature.model_name + "' (name none)"
                     : "the gateway serves " + names));
}

Status Gateway::CheckInputs(const ModelSignature& sig, const std::vector<TensorData>& inputs) const {
  if (inputs.size() != sig.input_values.size())
    return Status::InvalidArgument("the model takes " + std::to_string(sig.input_values.size()) +
                                   " input(s), the request has " + std::to_string(inputs.size()));
  int64_t bytes = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape != sig.input_shapes[i])
      return Status::InvalidArgument("input '" + sig.input_names[i] + "' has shape " + ShapeToString(inputs[i].shape) +
                                     ", the model expects " + ShapeToString(sig.input_shapes[i]));
    if (static_cast<int64_t>(inputs[i].values.size()) != NumElements(inputs[i].shape))
      return Status::InvalidArgument("input '" + sig.input_names[i] + "' has the wrong number of values");
    bytes += static_cast<int64_t>(inputs[i].values.size()) * 4;
  }
  if (bytes > options_.max_input_bytes)
    return Status::InvalidArgument("the inputs are " + std::to_string(bytes) + " bytes, over the limit of " +
                                   std::to_string(options_.max_input_bytes));
  return Status::OK();
}

Result<bool> Gateway::Admit(const std::shared_ptr<const Serving>& serving, int64_t deadline_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (in_flight_ >= options_.max_in_flight && queued_ >= options_.queue_capacity)
    return Status::ResourceExhausted("the gateway queue is full (" + std::to_string(options_.queue_capacity) +
                                     " waiting, " + std::to_string(options_.max_in_flight) + " running); retry later");
  ++queued_;
  const int64_t wait_ms = std::max<int64_t>(0, deadline_ms - UnixMillisNow());
  const bool admitted =
      cv_.wait_until(lock, std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms),
                     [&] { return (in_flight_ < options_.max_in_flight && !draining_) || stopping_; });
  --queued_;
  if (!admitted || stopping_) return Status::DeadlineExceeded("the request waited in the queue past its deadline");
  // A rejoin swapped plans while this request waited (a drain): it runs on
  // the plan served now, not the one it saw.
  if (serving_ != serving) return false;
  ++in_flight_;
  return true;
}

void Gateway::LeaveFlight() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
  }
  cv_.notify_all();
}

Gateway::Attempt Gateway::RunOnce(const std::shared_ptr<const Serving>& serving, bool may_fail_over,
                                  int64_t deadline_ms, proto::RunRequest* req, proto::RunReply* reply) {
  // A worker the health loop saw down is asked once more, now; if it still
  // does not answer (or lost the plan), fail over, or fail fast naming it
  // instead of the source waiting out the deadline for tiles that never come.
  Status why;
  const auto probe = std::chrono::milliseconds(std::clamp<int64_t>(deadline_ms - UnixMillisNow(), 1, 1000));
  std::vector<std::string> down = DownWorkers(*serving, probe, /*probe_all=*/false, &why);
  if (!down.empty()) {
    if (!may_fail_over) return {why, false};
    if (Status st = Failover(serving, down, deadline_ms); !st.ok()) return {st, false};
    return {Status::OK(), true};
  }
  // Admission: a bounded queue in front of max_in_flight running requests.
  Result<bool> admitted = Admit(serving, deadline_ms);
  if (!admitted.ok()) return {admitted.status(), false};
  if (!*admitted) return {Status::OK(), true, /*same_attempt=*/true};
  req->set_plan_id(serving->cluster.plan_id);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineFromUnixMillis(deadline_ms));
  reply->Clear();
  const int source = serving->cluster.source;
  const grpc::Status gs = serving->stubs[source]->Run(&ctx, *req, reply);
  LeaveFlight();
  if (gs.ok()) return {Status::OK(), false};
  const WorkerEndpoint& src = serving->cluster.workers[source];
  Status st = FromGrpcStatus(gs, "source worker " + src.name + " (" + src.address + ")");
  // The run failed: if a worker died under it, fail over and retry while the
  // deadline leaves time; anything else is the answer. Without failover, a
  // worker found down is named in the error.
  if (st.code() != StatusCode::kUnavailable && st.code() != StatusCode::kDeadlineExceeded) return {st, false};
  Status down_why;
  down = DownWorkers(*serving, std::chrono::milliseconds(300), /*probe_all=*/true, &down_why);
  if (down.empty()) return {st, false};
  if (!may_fail_over)
    return {Status(down_why.code(), down_why.message() + " (the request failed: " + st.message() + ")"), false};
  if (Status f = Failover(serving, down, deadline_ms); !f.ok()) return {f, false};
  if (UnixMillisNow() >= deadline_ms) return {st, false};
  spdlog::warn("gateway: request {} failed on plan {} ({}); retrying it on plan {}", req->request_id(),
               serving->cluster.plan_id, st.ToString(), Current()->cluster.plan_id);
  return {Status::OK(), true};
}

Result<InferResult> Gateway::CollectOutputs(const ModelSignature& sig, const proto::RunReply& reply) const {
  InferResult result;
  result.outputs.resize(sig.output_values.size());
  std::vector<bool> got(sig.output_values.size(), false);
  for (int k = 0; k < reply.outputs_size() && k < reply.output_values_size(); ++k)
    for (size_t o = 0; o < sig.output_values.size(); ++o)
      if (sig.output_values[o] == reply.output_values(k)) {
        TS_ASSIGN_OR_RETURN(result.outputs[o], FromTensorMsg(reply.outputs(k), "output '" + sig.output_names[o] + "'"));
        got[o] = true;
      }
  for (size_t o = 0; o < got.size(); ++o)
    if (!got[o]) return Status::Internal("the source worker returned no model output '" + sig.output_names[o] + "'");
  return result;
}

Result<InferResult> Gateway::Infer(std::vector<TensorData> inputs, uint64_t client_request_id, int64_t deadline_unix_ms,
                                   const std::string& model) {
  const auto t0 = std::chrono::steady_clock::now();
  auto finish = [&](const Status& st) {
    CountOutcome(st, t0);
    return st;
  };
  // Bad input is refused here, before it costs the cluster anything.
  auto signature = SignatureOf(model);
  if (!signature.ok()) return finish(signature.status());
  const ModelSignature& sig = **signature;
  if (Status st = CheckInputs(sig, inputs); !st.ok()) return finish(st);
  const int64_t now_ms = UnixMillisNow();
  const int64_t deadline_ms = deadline_unix_ms > 0 ? deadline_unix_ms : now_ms + options_.default_deadline_ms;
  if (deadline_ms <= now_ms) return finish(Status::DeadlineExceeded("the request's deadline has already passed"));

  // Worker-side request ids are the gateway's own: random, unique among
  // in-flight requests, and never in an answer.
  const uint32_t id = worker_ids_.Take();
  struct IdRelease {
    WorkerRequestIds& ids;
    uint32_t id;
    ~IdRelease() { ids.Release(id); }
  } release{worker_ids_, id};
  proto::RunRequest req;
  req.set_request_id(id);
  req.set_deadline_unix_ms(deadline_ms);
  req.set_fan_out(true);
  req.set_model(model);
  for (size_t i = 0; i < inputs.size(); ++i) {
    *req.add_inputs() = ToTensorMsg(inputs[i]);
    req.add_input_values(sig.input_values[i]);
  }
  inputs.clear();

  // At most two attempts: the second only after a failover replaced the plan
  // because a worker of the first was down (a plan swapped by a drained
  // rejoin while the request queued is the same attempt).
  proto::RunReply reply;
  for (int attempt = 0;; ++attempt) {
    const Attempt a = RunOnce(Current(), options_.failover && attempt == 0, deadline_ms, &req, &reply);
    if (!a.status.ok()) return finish(a.status);
    if (!a.again) break;
    if (a.same_attempt) --attempt;
  }
  auto result = CollectOutputs(sig, reply);
  if (!result.ok()) return finish(result.status());
  result->request_id = client_request_id ? client_request_id : next_request_.fetch_add(1) & 0x7fffffff;
  result->worker_request_id = id;
  result->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  static_cast<void>(finish(Status::OK()));  // the outcome is counted; the answer is `result`
  return result;
}

std::map<std::pair<int, int>, int64_t> PlannedLinkBytes(const std::vector<DeviceProgram>& programs) {
  std::map<std::pair<int, int>, int64_t> bytes;
  for (const auto& p : programs)
    for (const auto& s : p.steps)
      if (s.kind == StepKind::kSend && s.uart_port == 0) bytes[std::make_pair(p.device, s.peer)] += WireBytes(p, s);
  return bytes;
}

std::string Gateway::MetricsText() const {
  std::lock_guard<std::mutex> lock(mu_);
  const ServedCluster& served = serving_->cluster;
  std::ostringstream m;
  m << "# HELP tessera_requests_total Inference requests by outcome.\n# TYPE tessera_requests_total counter\n";
  for (const auto& [code, n] : requests_by_code_) m << "tessera_requests_total{code=\"" << code << "\"} " << n << "\n";
  m << "# HELP tessera_request_latency_seconds Latency of answered requests.\n"
       "# TYPE tessera_request_latency_seconds histogram\n";
  for (size_t b = 0; b < kNumBounds; ++b)
    m << "tessera_request_latency_seconds_bucket{le=\"" << kLatencyBounds[b] << "\"} " << latency_buckets_[b] << "\n";
  m << "tessera_request_latency_seconds_bucket{le=\"+Inf\"} " << latency_count_ << "\n";
  m << "tessera_request_latency_seconds_sum " << latency_sum_s_ << "\n";
  m << "tessera_request_latency_seconds_count " << latency_count_ << "\n";
  m << "# HELP tessera_requests_in_flight Requests running on the cluster.\n# TYPE tessera_requests_in_flight gauge\n"
    << "tessera_requests_in_flight " << in_flight_ << "\n";
  m << "# HELP tessera_requests_queued Requests waiting at the gateway.\n# TYPE tessera_requests_queued gauge\n"
    << "tessera_requests_queued " << queued_ << "\n";
  m << "# HELP tessera_gateway_status_pulls_total Times the gateway pulled every worker's status (link, UART and "
       "memory counters below are as of the last pull).\n# TYPE tessera_gateway_status_pulls_total counter\n"
       "tessera_gateway_status_pulls_total "
    << status_pulls_ << "\n";
  m << "# HELP tessera_failovers_total Times the gateway re-planned on the surviving workers.\n"
       "# TYPE tessera_failovers_total counter\ntessera_failovers_total " << failovers_ << "\n";
  m << "# HELP tessera_gateway_replans_total Times the gateway switched plans, by reason (failover: a worker was "
       "lost; rejoin: a worker came back).\n# TYPE tessera_gateway_replans_total counter\n";
  for (const char* reason : {"failover", "rejoin"}) {
    const auto it = replans_.find(reason);
    m << "tessera_gateway_replans_total{reason=\"" << reason << "\"} " << (it == replans_.end() ? 0 : it->second)
      << "\n";
  }
  m << "# HELP tessera_gateway_replan_failures_total Re-plans that failed; the served plan stayed.\n"
       "# TYPE tessera_gateway_replan_failures_total counter\n";
  for (const char* reason : {"failover", "rejoin"}) {
    const auto it = replan_failures_.find(reason);
    m << "tessera_gateway_replan_failures_total{reason=\"" << reason << "\"} "
      << (it == replan_failures_.end() ? 0 : it->second) << "\n";
  }
  m << "# HELP tessera_gateway_plan_workers Workers of the served plan.\n# TYPE tessera_gateway_plan_workers gauge\n"
    << "tessera_gateway_plan_workers " << served.workers.size() << "\n";
  m << "# HELP tessera_worker_up 1 when the worker answers Health and holds the plan.\n# TYPE tessera_worker_up gauge\n";
  for (size_t i = 0; i < worker_up_.size(); ++i)
    m << "tessera_worker_up{worker=\"" << served.workers[i].name << "\",device=\"" << i << "\"} "
      << (worker_up_[i] ? 1 : 0) << "\n";
  // Memory as each process's kernel counts it (issue 11: promises are
  // checked against these). Workers: from their last Status poll.
  m << "# HELP tessera_worker_rss_bytes Resident memory of the worker process (VmRSS).\n"
       "# TYPE tessera_worker_rss_bytes gauge\n";
  for (const auto& [i, r] : worker_rss_)
    m << "tessera_worker_rss_bytes{worker=\"" << served.workers[i].name << "\",device=\"" << i << "\"} " << r.first
      << "\n";
  m << "# HELP tessera_worker_peak_rss_bytes Peak resident memory of the worker process (VmHWM).\n"
       "# TYPE tessera_worker_peak_rss_bytes gauge\n";
  for (const auto& [i, r] : worker_rss_)
    m << "tessera_worker_peak_rss_bytes{worker=\"" << served.workers[i].name << "\",device=\"" << i << "\"} "
      << r.second << "\n";
  m << "# HELP tessera_worker_flush_sends 1 when the worker's messages of a request leave before each of its "
       "compute runs (worker --flush-sends, resolved; auto: its compute threads take every CPU it may use).\n"
       "# TYPE tessera_worker_flush_sends gauge\n";
  for (const auto& [i, on] : worker_flush_sends_)
    m << "tessera_worker_flush_sends{worker=\"" << served.workers[i].name << "\",device=\"" << i << "\"} "
      << (on ? 1 : 0) << "\n";
  m << "# HELP tessera_worker_exchange_dropped_frames_total Exchange frames a worker refused to keep, by reason.\n"
       "# TYPE tessera_worker_exchange_dropped_frames_total counter\n";
  for (const auto& [i, x] : worker_dropped_) {
    const std::string labels = "worker=\"" + served.workers[i].name + "\",device=\"" + std::to_string(i) + "\"";
    m << "tessera_worker_exchange_dropped_frames_total{" << labels << ",reason=\"unexpected\"} " << x.unexpected() << "\n"
      << "tessera_worker_exchange_dropped_frames_total{" << labels << ",reason=\"finished\"} " << x.finished() << "\n"
      << "tessera_worker_exchange_dropped_frames_total{" << labels << ",reason=\"early_over_limit\"} "
      << x.early_over_limit() << "\n"
      << "tessera_worker_exchange_dropped_frames_total{" << labels << ",reason=\"wrong_sender\"} " << x.wrong_sender()
      << "\n"
      << "tessera_worker_exchange_dropped_frames_total{" << labels << ",reason=\"foreign_plan\"} " << x.foreign_plan()
      << "\n";
  }
  m << "# HELP tessera_worker_exchange_heap_peak_bytes Most received exchange bytes a worker held at once outside "
       "its device arena (frames before their request or receiving step started).\n"
       "# TYPE tessera_worker_exchange_heap_peak_bytes gauge\n";
  for (const auto& [i, x] : worker_exchange_memory_)
    m << "tessera_worker_exchange_heap_peak_bytes{worker=\"" << served.workers[i].name << "\",device=\"" << i << "\"} "
      << x.heap_peak_bytes() << "\n";
  m << "# HELP tessera_worker_exchange_sent_messages_total Messages a worker sent, read from its device arena or "
       "from a copy.\n"
       "# TYPE tessera_worker_exchange_sent_messages_total counter\n";
  for (const auto& [i, x] : worker_exchange_memory_) {
    const std::string labels = "worker=\"" + served.workers[i].name + "\",device=\"" + std::to_string(i) + "\"";
    m << "tessera_worker_exchange_sent_messages_total{" << labels << ",from=\"arena\"} " << x.arena_messages() << "\n"
      << "tessera_worker_exchange_sent_messages_total{" << labels << ",from=\"copy\"} " << x.copied_messages() << "\n";
  }
  m << "# HELP tessera_gateway_unauthenticated_total Requests refused for want of a valid bearer token.\n"
       "# TYPE tessera_gateway_unauthenticated_total counter\ntessera_gateway_unauthenticated_total "
    << unauthenticated_.load() << "\n";
  m << "# HELP tessera_worker_requests_refused_total Runs a worker refused: the caller is not one the plan allows.\n"
       "# TYPE tessera_worker_requests_refused_total counter\n";
  for (const auto& [i, n] : worker_refused_)
    m << "tessera_worker_requests_refused_total{worker=\"" << served.workers[i].name << "\",device=\"" << i << "\"} "
      << n << "\n";
  // Requests in flight on each worker and what they held (issue 18 item 2:
  // every runner keeps its pipeline buffers; working memories are shared).
  static const char* const kConcurrency[3][2] = {
      {"tessera_worker_peak_in_flight", "Most requests the worker ran at once since it started."},
      {"tessera_worker_runners", "Runners the worker made for the plan: one set of pipeline buffers each."},
      {"tessera_worker_working_memories",
       "Working memories the worker made for the plan, shared by its runners (at most --compute-slots; 0 when "
       "each runner keeps a whole arena)."}};
  for (int k = 0; k < 3; ++k) {
    m << "# HELP " << kConcurrency[k][0] << " " << kConcurrency[k][1] << "\n# TYPE " << kConcurrency[k][0]
      << " gauge\n";
    for (const auto& [i, c] : worker_concurrency_)
      m << kConcurrency[k][0] << "{worker=\"" << served.workers[i].name << "\",device=\"" << i << "\"} " << c[k]
        << "\n";
  }
  const ProcessMemory own = ReadProcessMemory();
  m << "# HELP tessera_gateway_rss_bytes Resident memory of the gateway process (VmRSS).\n"
       "# TYPE tessera_gateway_rss_bytes gauge\ntessera_gateway_rss_bytes " << own.rss_bytes << "\n";
  m << "# HELP tessera_gateway_peak_rss_bytes Peak resident memory of the gateway process (VmHWM).\n"
       "# TYPE tessera_gateway_peak_rss_bytes gauge\ntessera_gateway_peak_rss_bytes " << own.peak_rss_bytes << "\n";
  m << "# HELP tessera_link_payload_bytes_total Tensor bytes sent between devices (pulled from the workers by the "
       "gateway's health check, every second).\n"
       "# TYPE tessera_link_payload_bytes_total counter\n";
  for (const auto& [k, l] : links_)
    m << "tessera_link_payload_bytes_total{from=\"" << l.from << "\",to=\"" << l.to << "\"} " << l.payload_bytes << "\n";
  m << "# HELP tessera_link_wire_bytes_total Serialized frame bytes (payload + framing) between devices (pulled "
       "every second).\n"
       "# TYPE tessera_link_wire_bytes_total counter\n";
  for (const auto& [k, l] : links_)
    m << "tessera_link_wire_bytes_total{from=\"" << l.from << "\",to=\"" << l.to << "\"} " << l.wire_bytes << "\n";
  m << "# HELP tessera_link_messages_total Messages sent between devices (each tensor a program step hands to "
       "the link; pulled every second).\n"
       "# TYPE tessera_link_messages_total counter\n";
  for (const auto& [k, l] : links_)
    m << "tessera_link_messages_total{from=\"" << l.from << "\",to=\"" << l.to << "\"} " << l.messages << "\n";
  if (!uart_.empty()) {
    // The UART of every MCU (issue 6: bad frames are dropped, counted and
    // reported here; they never reach a kernel).
    auto label = [&](size_t i) { return "device=\"" + served.workers[i].name + "\""; };
    m << "# HELP tessera_uart_bad_frames_total Frames dropped by the UART decoder, by reason.\n"
         "# TYPE tessera_uart_bad_frames_total counter\n";
    for (const auto& [i, u] : uart_) {
      std::map<std::string, uint64_t> sorted(u.bad_frames().begin(), u.bad_frames().end());
      for (const auto& [reason, n] : sorted)
        m << "tessera_uart_bad_frames_total{" << label(i) << ",reason=\"" << reason << "\"} " << n << "\n";
    }
    struct Series {
      const char* name;
      const char* help;
      uint64_t (*get)(const proto::UartCounters&);
    };
    const Series series[] = {
        {"tessera_uart_retransmissions_total", "Frames sent again (lost: by timeout or a later frame acknowledged).",
         [](const proto::UartCounters& u) { return u.retransmissions(); }},
        {"tessera_uart_fast_retransmissions_total",
         "Of the retransmissions: frames found lost because the MCU acknowledged a later frame.",
         [](const proto::UartCounters& u) { return u.fast_retransmissions(); }},
        {"tessera_uart_out_of_order_frames_total", "Frames from the MCU kept past a gap until it was filled.",
         [](const proto::UartCounters& u) { return u.out_of_order(); }},
        {"tessera_uart_out_of_window_frames_total", "Frames from the MCU too far past a gap to keep (dropped).",
         [](const proto::UartCounters& u) { return u.out_of_window(); }},
        {"tessera_uart_wire_bytes_sent_total", "Bytes written to the MCU's UART.",
         [](const proto::UartCounters& u) { return u.wire_bytes_sent(); }},
        {"tessera_uart_wire_bytes_received_total", "Bytes read from the MCU's UART.",
         [](const proto::UartCounters& u) { return u.wire_bytes_received(); }},
        {"tessera_uart_duplicate_frames_total", "Frames received twice (dropped).",
         [](const proto::UartCounters& u) { return u.duplicates(); }},
        {"tessera_uart_foreign_plan_frames_total", "Tensors for a plan the link does not hold (refused).",
         [](const proto::UartCounters& u) { return u.foreign_plan(); }},
    };
    for (const Series& s : series) {
      m << "# HELP " << s.name << " " << s.help << "\n# TYPE " << s.name << " counter\n";
      for (const auto& [i, u] : uart_) m << s.name << "{" << label(i) << "} " << s.get(u) << "\n";
    }
  }
  if (!mcu_.empty()) {
    // What each UART of an MCU carried, counted by the firmware (port 0: to
    // its Linux board; 1, 2: direct MCU<->MCU links, issue 16 item 4).
    m << "# HELP tessera_mcu_port_payload_bytes_total Tensor payload bytes per UART of an MCU, counted by its "
         "firmware (port 0: its Linux board; 1, 2: direct links to other MCUs).\n"
         "# TYPE tessera_mcu_port_payload_bytes_total counter\n";
    for (const auto& [i, s] : mcu_) {
      for (int k = 0; k < s.port_payload_sent_size(); ++k)
        m << "tessera_mcu_port_payload_bytes_total{device=\"" << served.workers[i].name << "\",port=\"" << k
          << "\",direction=\"sent\"} " << s.port_payload_sent(k) << "\n";
      for (int k = 0; k < s.port_payload_received_size(); ++k)
        m << "tessera_mcu_port_payload_bytes_total{device=\"" << served.workers[i].name << "\",port=\"" << k
          << "\",direction=\"received\"} " << s.port_payload_received(k) << "\n";
    }
  }
  if (!served.planned_link_bytes.empty()) {
    m << "# HELP tessera_link_planned_payload_bytes Payload bytes one request sends on the link, per the plan's "
         "programs.\n# TYPE tessera_link_planned_payload_bytes gauge\n";
    for (const auto& [k, bytes] : served.planned_link_bytes)
      m << "tessera_link_planned_payload_bytes{from=\"" << k.first << "\",to=\"" << k.second << "\"} " << bytes
        << "\n";
  }
  return m.str();
}

void Gateway::FillStatus(proto::GatewayStatusReply* reply) const {
  const std::string metrics = MetricsText();
  std::lock_guard<std::mutex> lock(mu_);
  const ServedCluster& served = serving_->cluster;
  reply->set_plan_id(served.plan_id);
  for (size_t i = 0; i < served.workers.size(); ++i) {
    auto* w = reply->add_workers();
    w->set_name(served.workers[i].name);
    w->set_address(served.workers[i].address);
    w->set_device(static_cast<int>(i));
    w->set_up(worker_up_[i]);
    w->set_plan_id(worker_plan_[i]);
  }
  int64_t ok = 0, failed = 0, rejected = 0;
  for (const auto& [code, n] : requests_by_code_)
    (code == "ok" ? ok : code == StatusCodeName(StatusCode::kResourceExhausted) ? rejected : failed) += n;
  reply->set_requests_ok(ok);
  reply->set_requests_failed(failed);
  reply->set_requests_rejected(rejected);
  reply->set_queued(queued_);
  reply->set_in_flight(in_flight_);
  for (const auto& [k, l] : links_) {
    auto* c = reply->add_links();
    c->set_from_device(l.from);
    c->set_to_device(l.to);
    c->set_payload_bytes(l.payload_bytes);
    c->set_wire_bytes(l.wire_bytes);
    c->set_messages(l.messages);
  }
  reply->set_metrics_text(metrics);
}

namespace {
// The `authorization` metadata of a call ("" when absent).
std::string_view AuthorizationMetadata(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  return it == metadata.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
}
}  // namespace

grpc::Status GatewayService::Infer(grpc::ServerContext* context, const proto::InferRequest* request,
                                   proto::InferReply* reply) {
  if (tessera::Status st = gateway_->Authorize(AuthorizationMetadata(*context), "Gateway.Infer"); !st.ok())
    return ToGrpcStatus(st);
  // A client naming a plan (model) this gateway does not serve sent bad input
  // (issue 5: unknown model -> INVALID_ARGUMENT); FAILED_PRECONDITION is kept
  // for a worker asked to run a plan it does not hold.
  if (!request->plan_id().empty() && !gateway_->KnowsPlan(request->plan_id()))
    return ToGrpcStatus(tessera::Status::InvalidArgument("unknown plan '" + request->plan_id() +
                                                         "': the gateway serves plan " + gateway_->Served().plan_id));
  std::vector<TensorData> inputs;
  for (int i = 0; i < request->inputs_size(); ++i) {
    auto t = FromTensorMsg(request->inputs(i), "input " + std::to_string(i));
    if (!t.ok()) return ToGrpcStatus(t.status());
    inputs.push_back(std::move(*t));
  }
  int64_t deadline = request->deadline_unix_ms();
  if (deadline == 0 && context->deadline() != std::chrono::system_clock::time_point::max())
    deadline = std::chrono::duration_cast<std::chrono::milliseconds>(context->deadline().time_since_epoch()).count();
  auto result = gateway_->Infer(std::move(inputs), request->request_id(), deadline, request->model());
  if (!result.ok()) return ToGrpcStatus(result.status());
  reply->set_request_id(result->request_id);
  reply->set_plan_id(gateway_->Served().plan_id);
  reply->set_seconds(result->seconds);
  for (const auto& t : result->outputs) *reply->add_outputs() = ToTensorMsg(t);
  return grpc::Status::OK;
}

grpc::Status GatewayService::Status(grpc::ServerContext* context, const proto::GatewayStatusRequest*,
                                    proto::GatewayStatusReply* reply) {
  if (tessera::Status st = gateway_->Authorize(AuthorizationMetadata(*context), "Gateway.Status"); !st.ok())
    return ToGrpcStatus(st);
  gateway_->FillStatus(reply);
  return grpc::Status::OK;
}

Result<std::unique_ptr<grpc::Server>> StartGatewayServer(GatewayService* service, const std::string& listen,
                                                         const TransportSecurity& security, std::string* bound,
                                                         grpc::Service* also) {
  TS_ASSIGN_OR_RETURN(auto credentials, ServerCredentialsFor(listen, security));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, credentials, &port);
  ConfigureServer(&builder);
  builder.RegisterService(service);
  if (also) builder.RegisterService(also);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) return Status::Unavailable("cannot listen on " + listen + " (address in use?)");
  if (bound) *bound = listen.substr(0, listen.rfind(':')) + ":" + std::to_string(port);
  return server;
}

}  // namespace tessera
