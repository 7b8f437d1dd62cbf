// The gateway (`tessera gateway`, ARCHITECTURE.md "Processes"): the entry
// point for clients. It knows the model's inputs and outputs, the plan id and
// which worker runs which device; an inference goes, with its inputs, to the
// source device's worker, which starts the request on every other device and
// returns the outputs (workers exchange tiles among themselves).
//
// Issue 5 limits: a bounded queue (RESOURCE_EXHAUSTED when full), an id and
// a deadline on every request, worker health polled through Worker.Health,
// link byte counters pulled from Worker.GetStatus for /metrics.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/cluster/gateway_tokens.h"
#include "partition/compile/device_program.h"
#include "partition/graph/graph.h"
#include "proto/services.grpc.pb.h"
#include "transport/grpc/grpc_channel.h"
#include "util/limits.h"

namespace tessera {

struct WorkerEndpoint {
  WorkerEndpoint() = default;
  WorkerEndpoint(std::string n, std::string a, std::string id = "")
      : name(std::move(n)), address(std::move(a)), identity(std::move(id)) {}
  std::string name, address;
  // The name in the certificate that speaks for this device with TLS: the
  // device's own name ("" = name), or for an MCU the worker it hangs off
  // (`via:`), whose process serves it. Workers accept the device's frames
  // only from a peer with this name (issue 14).
  std::string identity;
};

// What a client must send and gets back: graph inputs/outputs in order.
struct ModelSignature {
  std::vector<int> input_values, output_values;  // graph value ids
  std::vector<std::string> input_names, output_names;
  std::vector<Shape> input_shapes;
  // The Open Inference Protocol's view (oip_http.h, oip_grpc.h): the model
  // file's stem, which clients name in /v2/models/{name}, and output shapes.
  std::string model_name;
  std::vector<Shape> output_shapes;
  // A merged graph's models (Graph::models), each a signature of its own
  // that a request may name (Gateway::Infer's `model`); empty for one model.
  std::vector<ModelSignature> models;
  static ModelSignature Of(const Graph& graph);
};

// Pushes program d to workers[d] (client-streamed in kChunkBytes chunks),
// all devices in parallel. `progress(sent, total)` is called as bytes go out.
// Every worker learns each device's name (WorkerEndpoint::identity) and that
// requests may be started by the deploying identity or by `run_callers`
// (with TLS, the names in their certificates; e.g. the gateway that will
// serve a plan `tessera deploy` pushed). A worker that holds a different
// program under `plan_id` refuses it (ALREADY_EXISTS); the same program
// again is accepted without change.
struct DeployedDevice {
  int64_t program_bytes = 0, memory_bytes = 0, weight_bytes = 0;
  int64_t working_bytes = 0, buffer_bytes = 0;  // memory_bytes's parts (LoadProgramReply)
};
Result<std::vector<DeployedDevice>> DeployPrograms(const std::vector<DeviceProgram>& programs,
                                                   const std::string& plan_id, int source,
                                                   const std::vector<WorkerEndpoint>& workers,
                                                   const TransportSecurity& security,
                                                   const std::function<void(int64_t, int64_t)>& progress,
                                                   const std::vector<std::string>& run_callers = {});

// How a deploy treats what the workers serve now.
struct DeployOptions {
  // "" = each new program replaces what its worker holds (requests still
  // running there fail). Else the plan a gateway keeps serving while it
  // deploys (rejoin): every worker keeps that plan's program loaded beside
  // the new one until Worker.Retire (ProgramChunk.keep_plan_id).
  std::string keep_plan_id;
  // Each worker releases what it holds (but keep_plan_id) before decoding
  // the new program (ProgramChunk.release_current): a worker's peak during
  // the deploy is one plan's memory plus the kept one.
  bool release_current = true;
  // How long to wait for each worker's connection.
  std::chrono::milliseconds connect_timeout{10000};
};

// The same one device at a time, for a caller that cannot hold every
// program at once (the weightless gateway, issue 11): program(d) builds
// device d's program, which is serialized, freed, sent to workers[d] and its
// bytes freed before program(d + 1) is built. Peak: one program + its bytes.
using ProgramSource = std::function<Result<DeviceProgram>(int device)>;
Result<std::vector<DeployedDevice>> DeployProgramsOneByOne(const ProgramSource& program, const std::string& plan_id,
                                                           int source, const std::vector<WorkerEndpoint>& workers,
                                                           const TransportSecurity& security,
                                                           const DeployOptions& deploy = {});

// Payload bytes one request sends on each link (from, to), read off the
// programs' Send steps: what /metrics compares the measured counters with.
// Sends over a direct MCU<->MCU UART (uart_port > 0) cross no worker's link
// and are not counted.
std::map<std::pair<int, int>, int64_t> PlannedLinkBytes(const std::vector<DeviceProgram>& programs);

// Health of every worker right now (Worker.Health with a short deadline).
std::vector<bool> ProbeWorkers(const std::vector<WorkerEndpoint>& workers, const TransportSecurity& security,
                               std::chrono::milliseconds timeout);

// A plan and the workers that run it: what a gateway serves at one time.
struct ServedCluster {
  std::string plan_id;
  int source = 0;
  std::vector<WorkerEndpoint> workers;  // index = plan device
  // Payload bytes one request sends per link (PlannedLinkBytes of its
  // programs), exported in /metrics so measured/planned is one division.
  std::map<std::pair<int, int>, int64_t> planned_link_bytes;
  // The figure the plan's objective minimises, as the planner predicted it
  // (planner/plan.h ObjectiveCost); < 0 = unknown (a plan file).
  double predicted_cost = -1;
  // Seconds one request's input and output take on the gateway's link to
  // the source (ServedPlan::request_link_s): a Health probe of the source
  // waits behind the requests in flight on that link (ProbeWorker).
  double request_link_s = 0;
  // Per plan device, when planned or sized here (else empty): what its
  // worker holds for this plan (DeviceMemory: weights as stored plus its
  // working memories, each request's pipeline buffers + I/O, weights while
  // loading; all 0 for an MCU, which
  // holds its program in its own RAM), the daemon's baseline, and the
  // device's ram: (INT64_MAX = none given). A rejoin keeps the old plan
  // beside the new one only where both fit at the gateway's requests in
  // flight (Gateway::Rejoin, HeldBytes).
  std::vector<int64_t> weight_bytes{}, request_bytes{}, load_peak_bytes{}, baseline_bytes{}, ram_bytes{};
  std::vector<int64_t> working_bytes{};  // compute_slots x working memory
  // What device d's worker holds for this plan besides its baseline with
  // `in_flight` requests running (DeviceMemory::total_bytes - baseline).
  int64_t HeldBytes(size_t d, int in_flight) const;
};

// Failover: re-plans for the workers that still answer and deploys the new
// programs, given the names of the workers found down; returns what to serve
// from now on. Called by at most one request at a time.
using FailoverFn = std::function<Result<ServedCluster>(const std::vector<std::string>& down)>;

// Rejoin (issue 14): a plan made for the workers that answer now, not yet
// deployed. `deploy(keep_plan_id)` pushes its programs to cluster.workers
// while plan keep_plan_id keeps serving on them (DeployOptions).
struct PlanProposal {
  ServedCluster cluster;
  std::function<Status(const std::string& keep_plan_id)> deploy;
};
using ProposeFn = std::function<Result<PlanProposal>()>;

struct GatewayOptions {
  // The plan served at start (replaced as a whole by a failover; the
  // current one is Gateway::Served()).
  ServedCluster served;
  ModelSignature signature;
  int max_in_flight = 4;        // requests on the cluster at once
  int queue_capacity = 64;      // waiting beyond that -> RESOURCE_EXHAUSTED
  int64_t default_deadline_ms = 60000;
  int64_t max_input_bytes = kMaxRequestBytes;  // util/limits.h
  std::chrono::milliseconds health_interval{1000};
  TransportSecurity security;
  // Set: when a worker of the served plan is down (found before a request
  // runs, or because the source's Run failed), re-plan on the survivors with
  // this, then retry the request once on the new plan. Unset: such requests
  // fail fast with UNAVAILABLE naming the worker.
  FailoverFn failover;
  // Set (with failover): the health loop also polls `cluster_workers` (every
  // worker of the cluster file) that are not in the served plan. When one
  // answers Health again under its own name, the gateway asks `propose` for a
  // plan over the workers that answer and switches to it when it includes
  // the returning worker and either (a) the worker was lost by a failover
  // (the served plan is a forced one; back to the plan the objective would
  // choose for the healthy workers, as a restart would) or (b) its
  // predicted_cost is lower than the served plan's. The new plan is deployed
  // while the old one serves, then swapped in: requests in flight finish on
  // the old plan, which the workers let go (Worker.Retire) once the last one
  // is done. A failed attempt keeps the old plan and is tried again after a
  // backoff of rejoin_backoff, doubling up to rejoin_backoff_max.
  ProposeFn propose;
  std::vector<WorkerEndpoint> cluster_workers;
  std::chrono::milliseconds rejoin_backoff{1000}, rejoin_backoff_max{30000};
  // A rejoin where some worker cannot hold the old and the new plan at once
  // pauses new requests until the running ones finish (at most this long,
  // else it backs off and tries later), then swaps.
  std::chrono::milliseconds drain_timeout{30000};
  // Set (`--token-file`): gRPC Infer/Status and HTTP requests need one of
  // these bearer tokens; /healthz and /metrics too with protect_metrics.
  std::shared_ptr<const GatewayTokens> tokens;
  bool protect_metrics = false;
};

struct InferResult {
  uint64_t request_id = 0;         // the client's id, or one the gateway counts
  uint32_t worker_request_id = 0;  // the id on the workers: random, never told to clients
  std::vector<TensorData> outputs;  // graph output order
  double seconds = 0;
};

struct LinkBytes {
  int from = 0, to = 0;
  int64_t payload_bytes = 0, wire_bytes = 0, messages = 0;
};

// The ids requests carry on the workers: random (a peer that saw one cannot
// guess the next, issue 14), unique among requests in flight, and never one
// of the last `window` ids drawn. A worker remembers the ids of its last
// kRememberedFinishedRequests requests and drops their late frames
// (ExchangeInbox); an id drawn again within that window would have the
// early frames of its new request dropped as late ones of the old, and the
// request would wait for them until its deadline. Thread-safe.
class WorkerRequestIds {
 public:
  explicit WorkerRequestIds(size_t window = kRememberedFinishedRequests, std::function<uint32_t()> random = nullptr);
  // An id in [1, 2^31), in flight until Release.
  uint32_t Take();
  void Release(uint32_t id);

 private:
  const size_t window_;
  const std::function<uint32_t()> random_;
  std::mutex mu_;
  std::set<uint32_t> in_flight_;  // GUARDED_BY(mu_)
  std::set<uint32_t> recent_;     // GUARDED_BY(mu_): the last window_ ids taken
  std::deque<uint32_t> order_;    // GUARDED_BY(mu_): recent_, oldest first
};

class Gateway {
 public:
  static Result<std::unique_ptr<Gateway>> Create(GatewayOptions options);
  ~Gateway();

  // `inputs` in graph input order. `deadline_unix_ms` 0 = the default.
  // `model` names one model of merged ones (ModelSignature::models): the
  // inputs and outputs are that model's and only its steps run on the
  // workers, with no drain between requests of different models.
  Result<InferResult> Infer(std::vector<TensorData> inputs, uint64_t client_request_id, int64_t deadline_unix_ms,
                            const std::string& model = "");

  bool AllWorkersUp() const;
  // Polls every worker's Status now (link byte counters, up/down).
  void RefreshWorkerState();
  std::vector<LinkBytes> Links() const;
  std::string MetricsText() const;
  void FillStatus(proto::GatewayStatusReply* reply) const;
  // The signature, limits and security; options().served is the plan served
  // at start only — Served() is the current one.
  const GatewayOptions& options() const { return options_; }
  ServedCluster Served() const;
  // Whether `plan_id` is, or was, served by this gateway.
  bool KnowsPlan(const std::string& plan_id) const;
  int64_t failovers() const;
  // Plan switches for `reason` ("failover", "rejoin") and failed attempts.
  int64_t replans(const std::string& reason) const;
  int64_t replan_failures(const std::string& reason) const;
  // "plan P on N workers: w1, w2, ..." (the plan served now), for /healthz.
  std::string DescribePlan() const;
  // OK when no tokens are configured or `authorization` (an HTTP header or
  // gRPC metadata value) carries one; else Unauthenticated, counted in
  // /metrics. `where` names the endpoint for the message.
  Status Authorize(std::string_view authorization, const std::string& where);

 private:
  // One served plan with its worker stubs. Requests hold the snapshot they
  // started with; a failover swaps in a new one.
  struct Serving {
    ServedCluster cluster;
    std::vector<std::unique_ptr<proto::Worker::Stub>> stubs;
  };
  explicit Gateway(GatewayOptions options) : options_(std::move(options)) {}
  static Result<std::shared_ptr<const Serving>> MakeServing(ServedCluster cluster, const TransportSecurity& security);
  std::shared_ptr<const Serving> Current() const;
  void HealthLoop();
  // Worker.Health of worker i of `serving` now; records (if `serving` is
  // still current) and returns whether it answers and holds the plan.
  bool ProbeWorker(const Serving& serving, size_t i, std::chrono::milliseconds timeout, proto::HealthReply* reply);
  // How long the requests in flight keep worker i's link busy: their input
  // and output on the gateway's link when i is the source (a Health probe
  // of the source queues behind them: on a 10 Mbit/s cable a 224² image
  // takes ~0.5 s), else 0. The health loop waits that much longer.
  std::chrono::milliseconds LinkBacklog(const Serving& serving, size_t i) const;
  // Workers of `serving` that do not answer Health now (only those the
  // health loop saw down, unless `probe_all`): their names, and in *why the
  // first one's error.
  std::vector<std::string> DownWorkers(const Serving& serving, std::chrono::milliseconds timeout, bool probe_all,
                                       Status* why);
  // Replaces `seen` with a plan for the survivors (options_.failover). OK
  // without doing anything when another request already replaced `seen`.
  // DeadlineExceeded when the re-plan (or another one before it: a rejoin's
  // deploy) still runs at `deadline_ms`; it goes on and swaps when done.
  Status Failover(const std::shared_ptr<const Serving>& seen, const std::vector<std::string>& down,
                  int64_t deadline_ms);
  // Failover's re-plan, on its own thread, one at a time (failover_mu_).
  Status FailoverNow(const std::shared_ptr<const Serving>& seen, const std::vector<std::string>& down);
  // Makes `next` the served plan in place of `seen` (a failover's or a
  // rejoin's), counted under `reason`. REQUIRES: failover_mu_ held.
  void Swap(const std::shared_ptr<const Serving>& seen, std::shared_ptr<const Serving> next, const std::string& reason);
  // Health loop: workers of options_.cluster_workers outside the served plan
  // that answer Health under their own name now.
  std::vector<std::string> ReturnedWorkers(const Serving& serving);
  // Health loop: the rejoin of GatewayOptions::propose, with its backoff.
  void MaybeRejoin();
  // One attempt: OK when the plan was switched or the rule declined it.
  Status Rejoin(const std::shared_ptr<const Serving>& seen, const std::vector<std::string>& back, bool restore,
                const std::string& attempt_key);
  // Health loop: tells the workers of each plan replaced by a rejoin to let
  // it go (Worker.Retire) once no request runs on it any more.
  // Rejoin where `tight` workers cannot hold both plans: pause admissions,
  // wait for the running requests, deploy the proposal in place of `seen`.
  Status DrainAndSwap(const std::shared_ptr<const Serving>& seen, const PlanProposal& proposal,
                      const std::vector<std::string>& tight, std::chrono::steady_clock::time_point t0);
  void RetireUnused();

  // A worker-side request id nobody outside can guess (issue 14: frames for
  // guessed future ids were merged into answers), unique among the
  // requests in flight. REQUIRES: mu_ not held.
  // Gateway::Infer's steps.
  // One attempt's outcome: an answer (status OK, again false), a final
  // error, or try again (after a failover; same_attempt: the plan changed
  // while the request queued, not a failover).
  struct Attempt {
    Status status;
    bool again = false;
    bool same_attempt = false;
  };
  void CountOutcome(const Status& st, std::chrono::steady_clock::time_point t0);
  Status CheckInputs(const ModelSignature& sig, const std::vector<TensorData>& inputs) const;
  // The signature of `model` ("" = the whole graph); InvalidArgument naming the models served.
  Result<const ModelSignature*> SignatureOf(const std::string& model) const;
  // Waits for a slot among max_in_flight (the bounded queue); false: the
  // served plan is no longer `serving` (no slot taken).
  Result<bool> Admit(const std::shared_ptr<const Serving>& serving, int64_t deadline_ms);
  void LeaveFlight();
  Attempt RunOnce(const std::shared_ptr<const Serving>& serving, bool may_fail_over, int64_t deadline_ms,
                  proto::RunRequest* req, proto::RunReply* reply);
  Result<InferResult> CollectOutputs(const ModelSignature& sig, const proto::RunReply& reply) const;

  const GatewayOptions options_;
  std::atomic<uint32_t> next_request_{1};  // client-facing ids when the client gives none
  // One re-plan (failover or rejoin) at a time; a request waits for one no
  // longer than its deadline (Failover).
  std::mutex failover_mu_;
  int failovers_running_ = 0;  // Failover threads not finished; GUARDED_BY(mu_)
  // Health of options_.cluster_workers (index as there); made once in Create.
  std::vector<std::unique_ptr<proto::Worker::Stub>> cluster_stubs_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const Serving> serving_;               // GUARDED_BY(mu_)
  std::vector<std::string> served_plan_ids_;             // GUARDED_BY(mu_)
  int64_t failovers_ = 0;                                // GUARDED_BY(mu_)
  // Completed RefreshWorkerState passes: the link/UART counters in /metrics
  // are as of the last one (a scraper that waits for two has counts that
  // include every request finished before it started waiting).
  int64_t status_pulls_ = 0;                                  // GUARDED_BY(mu_)
  std::map<std::string, int64_t> replans_, replan_failures_;  // by reason; GUARDED_BY(mu_)
  // Workers a failover dropped and no plan has taken back since.
  std::set<std::string> lost_;  // GUARDED_BY(mu_)
  // Used by the health loop thread only: plans replaced by a rejoin, not yet
  // retired; the rejoin backoff; the served plan and returned workers for
  // which the rule last declined a re-plan (not asked again until either
  // changes).
  std::vector<std::shared_ptr<const Serving>> retiring_;
  int rejoin_failures_in_row_ = 0;
  std::chrono::steady_clock::time_point next_rejoin_{};
  std::string declined_;
  std::atomic<int64_t> unauthenticated_{0};  // requests refused for want of a token
  int in_flight_ = 0, queued_ = 0;                       // GUARDED_BY(mu_)
  std::map<std::string, int64_t> requests_by_code_;      // GUARDED_BY(mu_)
  std::vector<int64_t> latency_buckets_;                 // GUARDED_BY(mu_), cumulative at render
  double latency_sum_s_ = 0;                             // GUARDED_BY(mu_)
  int64_t latency_count_ = 0;                            // GUARDED_BY(mu_)
  std::vector<bool> worker_up_;                          // GUARDED_BY(mu_)
  std::vector<std::string> worker_plan_;                 // GUARDED_BY(mu_)
  std::map<std::pair<int, int>, LinkBytes> links_;       // GUARDED_BY(mu_)
  std::map<size_t, proto::UartCounters> uart_;           // by device (MCU bridges); GUARDED_BY(mu_)
  std::map<size_t, proto::McuState> mcu_;                // by device: the MCU's last STATUS; GUARDED_BY(mu_)
  std::map<size_t, std::pair<int64_t, int64_t>> worker_rss_;  // by device: (VmRSS, VmHWM); GUARDED_BY(mu_)
  std::map<size_t, bool> worker_flush_sends_;  // by device, Linux workers only: --flush-sends resolved; GUARDED_BY(mu_)
  std::map<size_t, proto::ExchangeDrops> worker_dropped_;     // by device; GUARDED_BY(mu_)
  std::map<size_t, proto::ExchangeMemory> worker_exchange_memory_;  // by device; GUARDED_BY(mu_)
  WorkerRequestIds worker_ids_;
  std::map<size_t, int64_t> worker_refused_;                  // Runs refused, by device; GUARDED_BY(mu_)
  // By device: its status reply's concurrency (peak_in_flight, runners,
  // working_memories; issue 18 item 2). GUARDED_BY(mu_)
  std::map<size_t, std::array<int64_t, 3>> worker_concurrency_;

  bool stopping_ = false;  // GUARDED_BY(mu_)
  bool draining_ = false;  // GUARDED_BY(mu_): a rejoin waits for requests to finish; none admitted
  std::thread health_;
};

class GatewayService final : public proto::Gateway::Service {
 public:
  explicit GatewayService(Gateway* gateway) : gateway_(gateway) {}
  grpc::Status Infer(grpc::ServerContext* context, const proto::InferRequest* request,
                     proto::InferReply* reply) override;
  grpc::Status Status(grpc::ServerContext* context, const proto::GatewayStatusRequest* request,
                      proto::GatewayStatusReply* reply) override;

 private:
  Gateway* const gateway_;
};

// Starts the gRPC Gateway service on `listen` (":0" = any port), and `also`
// on the same port when given (the Open Inference Protocol's service,
// oip_grpc.h; borrowed, outlives the server); returns the server and writes
// the bound address to *bound.
Result<std::unique_ptr<grpc::Server>> StartGatewayServer(GatewayService* service, const std::string& listen,
                                                         const TransportSecurity& security, std::string* bound,
                                                         grpc::Service* also = nullptr);

}  // namespace tessera
