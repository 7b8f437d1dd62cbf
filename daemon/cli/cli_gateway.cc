// `tessera gateway --cluster FILE --model MODEL [--plan plan.pb] --listen ADDR
// --http ADDR`: the clients' entry point (daemon/cluster/gateway.h). Without --plan it
// plans with the planner for the workers that answer and deploys the plan.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/cli/cli_tls_options.h"
#include "daemon/cluster/gateway.h"
#include "daemon/cluster/gateway_plan.h"
#include "daemon/cluster/gateway_tokens.h"
#include "daemon/cluster/http_endpoint.h"
#include "daemon/cluster/oip_grpc.h"
#include "daemon/cluster/service_notify.h"
#include "planner/cluster.h"

namespace tessera {

namespace {

std::atomic<bool> g_stop{false};
void OnStop(int) { g_stop = true; }

struct GatewayArgs {
  ModelOptions model;
  std::string cluster, listen = "127.0.0.1:7000", http = "127.0.0.1:8080";
  ServePlanOptions serve;
  bool deploy = false;
  bool failover = false;
  bool no_rejoin = false;
  GatewayOptions gateway;
  HttpEndpointOptions http_options;
  TlsOptions tls;
  std::string token_file;
};

// Each request in flight needs its own device arena on every worker
// (daemon/runtime/device_memory.h): run no more at once than every device's
// ram: holds.
void LimitInFlightToRam(const ServedPlan& served, const Cluster& cluster, int* max_in_flight) {
  for (size_t i = 0; i < served.memory.size() && i < served.workers.size(); ++i) {
    const int d = cluster.Find(served.workers[i].name);
    if (d < 0 || served.memory[i].in_flight == 0 || cluster.devices[d].ram_bytes == kUnlimitedBytes) continue;
    const int fits = std::max(1, InFlightThatFits(served.memory[i], cluster.devices[d].ram_bytes));
    if (fits < *max_in_flight) {
      spdlog::warn("gateway: {} has ram for {} request(s) at once ({} each); --max-in-flight {} lowered to {}",
                   served.workers[i].name, fits, DescribeDeviceMemory(served.memory[i]), *max_in_flight, fits);
      *max_in_flight = fits;
    }
  }
  // The table above promises one request at a time; say what K at once holds.
  if (*max_in_flight > 1)
    for (size_t i = 0; i < served.memory.size() && i < served.workers.size(); ++i) {
      if (served.memory[i].in_flight == 0) continue;  // an MCU
      DeviceMemory at_k = served.memory[i];
      at_k.in_flight = *max_in_flight;
      spdlog::info("gateway: {} with {} requests at once: worker RAM {}", served.workers[i].name, *max_in_flight,
                   DescribeDeviceMemory(at_k));
    }
}

int RunGateway(GatewayArgs& a) {
  // Refused before anything is planned or deployed.
  auto security = a.tls.Resolve("gateway");
  if (!security.ok()) return ReportError("gateway", security.status());
  a.gateway.security = *security;
  if (!a.token_file.empty()) {
    auto tokens = GatewayTokens::Load(a.token_file);
    if (!tokens.ok()) return ReportError("gateway", tokens.status());
    spdlog::info("gateway: {} bearer token(s) from {}; /healthz and /metrics {}", tokens->size(), a.token_file,
                 a.gateway.protect_metrics ? "need one too" : "stay open");
    a.gateway.tokens = std::make_shared<const GatewayTokens>(std::move(*tokens));
  } else if (a.gateway.protect_metrics) {
    return ReportError("gateway", Status::InvalidArgument("--protect-metrics needs --token-file"));
  }
  if (!a.http.empty())
    if (Status st = CheckHttpListenAddress(a.http, a.gateway.security.allow_plaintext_remote); !st.ok())
      return ReportError("gateway", st);
  // Issue 11: the gateway runs no layer. It keeps the model's shapes only
  // and reads weights one device at a time while it deploys
  // (gateway_plan.h CompileDeviceProgramWithWeights).
  auto cluster = LoadClusterFile(a.cluster);
  if (!cluster.ok()) return ReportError("gateway", cluster.status());
  if (Status st = TakeClusterModels(cluster->models, a.cluster, &a.model); !st.ok()) return ReportError("gateway", st);
  auto graph = LoadModel(a.model, /*shapes_only=*/true);
  if (!graph.ok()) return ReportError("gateway", graph.status());
  auto import_options = a.model.ToImportOptions();
  if (!import_options.ok()) return ReportError("gateway", import_options.status());
  const ModelSource weights{a.model.model_path, *import_options, a.model.with_models};
  a.serve.security = a.gateway.security;
  if (a.serve.work_dir.empty()) a.serve.work_dir = ".";
  // The served plan id names the model too (the same as tessera deploy's for
  // the same plan, model and cluster).
  auto fingerprint = ModelFingerprint(weights);
  if (!fingerprint.ok()) return ReportError("gateway", fingerprint.status());
  a.serve.model_fingerprint = *fingerprint;
  auto served = PrepareServedPlan(*graph, *cluster, a.serve);
  if (!served.ok()) return ReportError("gateway", served.status());
  if (!served->table.empty()) std::fprintf(stderr, "%s", served->table.c_str());
  LimitInFlightToRam(*served, *cluster, &a.gateway.max_in_flight);
  if (a.deploy || a.serve.plan_path.empty()) {
    auto deployed = DeployServedPlan(*served, *graph, weights, a.gateway.security);
    if (!deployed.ok()) return ReportError("gateway", deployed.status());
    spdlog::info("gateway: deployed plan {} to {} workers", served->plan_id, served->workers.size());
  }
  a.gateway.served = ServedClusterOf(*served);
  a.gateway.signature = ModelSignature::Of(*graph);
  if (a.failover) {
    // Re-plan for the devices of the cluster file that answer now (the
    // planner, --objective) and deploy; the gateway swaps plans and retries.
    // A worker found down that answers again by now (restarted, perhaps
    // without the plan) is planned for like the others: the deploy gives it
    // its program back. `graph` and `cluster` outlive the gateway (declared
    // before it).
    a.gateway.failover = [&a, &graph, &cluster, &weights](const std::vector<std::string>&) -> Result<ServedCluster> {
      ServePlanOptions so = a.serve;
      so.plan_path.clear();
      so.only_healthy = true;
      so.probe_timeout = std::chrono::milliseconds(1000);
      if (so.work_dir.empty()) so.work_dir = ".";
      TS_ASSIGN_OR_RETURN(ServedPlan next, PrepareServedPlan(*graph, *cluster, so));
      if (!next.table.empty()) std::fprintf(stderr, "failover plan:\n%s", next.table.c_str());
      return DeployServedPlan(next, *graph, weights, a.gateway.security);
    };
  }
  if (a.failover && !a.no_rejoin) {
    // Rejoin (issue 14): a worker of the cluster file that answers again is
    // offered to the planner; the gateway deploys the proposal while its
    // plan keeps serving (the workers keep it loaded) and swaps.
    for (const auto& d : cluster->devices)
      if (!d.address.empty())
        a.gateway.cluster_workers.push_back(
            {d.name, d.address, d.kind == DeviceKind::kMcu && !d.via.empty() ? d.via : d.name});
    a.gateway.propose = [&a, &graph, &cluster, &weights]() -> Result<PlanProposal> {
      ServePlanOptions so = a.serve;
      so.plan_path.clear();
      so.only_healthy = true;
      so.probe_timeout = std::chrono::milliseconds(1000);
      auto next = PrepareServedPlan(*graph, *cluster, so);
      if (!next.ok()) return next.status();
      auto plan = std::make_shared<const ServedPlan>(std::move(*next));
      PlanProposal proposal;
      proposal.cluster = ServedClusterOf(*plan);
      proposal.deploy = [&a, &graph, &weights, plan](const std::string& keep_plan_id) -> Status {
        if (!plan->table.empty()) std::fprintf(stderr, "rejoin plan:\n%s", plan->table.c_str());
        DeployOptions deploy;
        deploy.keep_plan_id = keep_plan_id;
        // The workers answered Health just now: one that cannot be reached
        // within this went away again (the attempt fails and backs off).
        deploy.connect_timeout = std::chrono::milliseconds(3000);
        return DeployServedPlan(*plan, *graph, weights, a.gateway.security, deploy).status();
      };
      return proposal;
    };
  }
  auto gateway = Gateway::Create(a.gateway);
  if (!gateway.ok()) return ReportError("gateway", gateway.status());
  GatewayService service(gateway->get());
  OipService oip(gateway->get());  // the Open Inference Protocol v2 on the same port
  std::string bound;
  auto server = StartGatewayServer(&service, a.listen, a.gateway.security, &bound, &oip);
  if (!server.ok()) return ReportError("gateway", server.status());
  std::unique_ptr<HttpEndpoint> http;
  if (!a.http.empty()) {
    HttpEndpointOptions ho = a.http_options;
    ho.listen = a.http;
    // The body carries the input plus its .npy header or JSON text around it.
    ho.max_body_bytes = a.gateway.max_input_bytes;
    ho.allow_remote = a.gateway.security.allow_plaintext_remote;
    auto h = HttpEndpoint::Start(gateway->get(), ho);
    if (!h.ok()) return ReportError("gateway", h.status());
    http = std::move(*h);
  }
  std::fprintf(stderr, "gateway: plan %s on %zu workers; gRPC %s%s%s\n", served->plan_id.c_str(),
               served->workers.size(), bound.c_str(), http ? ", HTTP " : "", http ? http->address().c_str() : "");
  // systemd (Type=notify, WatchdogSec=): ready once both endpoints listen;
  // the watchdog pings while the gRPC server answers its own Gateway.Status
  // (in-process, with the first --token-file token so that the probe is
  // neither refused nor counted as an unauthenticated call).
  std::string probe_token;
  if (!a.token_file.empty()) {
    auto token = GatewayTokens::FirstToken(a.token_file);
    if (!token.ok()) return ReportError("gateway", token.status());
    probe_token = std::move(*token);
  }
  auto self = proto::Gateway::NewStub((*server)->InProcessChannel(grpc::ChannelArguments()));
  ServiceNotifyOptions notify;
  notify.healthy = [&self, &probe_token] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    if (!probe_token.empty()) context.AddMetadata("authorization", "Bearer " + probe_token);
    proto::GatewayStatusRequest request;
    proto::GatewayStatusReply reply;
    const grpc::Status st = self->Status(&context, request, &reply);
    if (!st.ok()) spdlog::warn("gateway: own Status call failed: {}", st.error_message());
    return st.ok();
  };
  notify.describe = [g = gateway->get()] {
    const ServedCluster served = g->Served();
    return "serving plan " + served.plan_id + " on " + std::to_string(served.workers.size()) + " workers" +
           (g->AllWorkersUp() ? "" : "; a worker is down");
  };
  ServiceNotifier notifier(std::move(notify));
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnStop);
  notifier.Ready();
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  notifier.Stopping();
  http.reset();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace

void RegisterGatewayCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gateway", "Serve inference requests for a cluster (gRPC Gateway + HTTP; Open Inference Protocol v2 on both)");
  auto a = std::make_shared<GatewayArgs>();
  cmd->add_option("--model", a->model.model_path,
                  "Model file (.onnx or darknet .cfg); default: the models: the cluster file lists");
  cmd->add_option("--input-shape", a->model.input_shapes, "Input shape override, e.g. 1x3x160x160");
  cmd->add_option("--with-model", a->model.with_models,
                  "A further model every request runs too, merged with --model into one graph with identical layers "
                  "shared (repeatable)");
  cmd->add_option("--weights", a->model.weights_path, "darknet .weights file");
  cmd->add_option("--seed", a->model.seed, "Seed of generated weights")->capture_default_str();
  cmd->add_option("--cluster", a->cluster, "Cluster file (YAML)")->required();
  cmd->add_option("--plan", a->serve.plan_path, "Plan file (tessera plan --out); default: plan for the live workers");
  cmd->add_option("--objective", a->serve.objective, "Planner objective without --plan")->capture_default_str();
  cmd->add_option("--layer-profile", a->serve.layer_profile,
                  "Per-layer times of the model for the planner (`tessera run MODEL --profile --json > FILE`); also "
                  "used by every re-plan");
  cmd->add_option("--tile-profile", a->serve.tile_profile,
                  "Measured row tiles for the planner (`tessera run MODEL --plan PLAN --profile --json > FILE`); also "
                  "used by every re-plan");
  cmd->add_option("--compact-profile", a->serve.compact_profile,
                  "Per-layer times without Winograd for the planner (`tessera run MODEL --compact-weights --profile "
                  "--json > FILE`; needs --layer-profile); also used by every re-plan");
  cmd->add_option("--data-dir", a->serve.work_dir, "Where a plan made here is written")->capture_default_str();
  cmd->add_option("--worker-threads", a->serve.memory.threads,
                  "The workers' --threads, for sizing their memory against ram:")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--deploy", a->deploy, "Push the programs to the workers also when --plan is given");
  cmd->add_flag("--failover", a->failover,
                "When a worker is down, re-plan (--objective) on the devices that answer, deploy, and retry the "
                "request once; when a worker of the cluster file answers again, re-plan to take it back "
                "(README \"Rejoin\")");
  cmd->add_flag("--no-rejoin", a->no_rejoin, "With --failover: never take back a worker that answers again");
  cmd->add_option("--listen", a->listen, "gRPC address")->capture_default_str();
  cmd->add_option("--http", a->http, "HTTP address (\"\" = none)")->capture_default_str();
  cmd->add_option("--max-in-flight", a->gateway.max_in_flight, "Requests on the cluster at once")->capture_default_str();
  cmd->add_option("--queue", a->gateway.queue_capacity, "Requests waiting before RESOURCE_EXHAUSTED")->capture_default_str();
  cmd->add_option("--default-deadline-ms", a->gateway.default_deadline_ms,
                  "Deadline of a request that sets none (HTTP requests, gRPC calls without a deadline), from its "
                  "arrival: time in the queue included")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  cmd->add_option("--max-body-bytes", a->gateway.max_input_bytes,
                  "Largest accepted request: HTTP body (413 beyond) and gRPC inputs")
      ->capture_default_str();
  cmd->add_option("--http-max-connections", a->http_options.max_connections,
                  "HTTP connections served at once (more are answered 503)")
      ->capture_default_str();
  cmd->add_option_function<int64_t>(
         "--http-idle-timeout-ms", [a](int64_t ms) { a->http_options.idle_timeout = std::chrono::milliseconds(ms); },
         "Close an HTTP connection that sends no request header for this long (default 10000)");
  cmd->add_option("--token-file", a->token_file,
                  "Bearer tokens, one per line (# comments): HTTP requests need 'Authorization: Bearer TOKEN', "
                  "gRPC calls 'authorization: Bearer TOKEN' metadata");
  cmd->add_flag("--protect-metrics", a->gateway.protect_metrics,
                "With --token-file: /healthz, /metrics and the v2 health probes (HTTP /v2/health/live|ready, gRPC "
                "ServerLive/ServerReady) need a token too (default: open for probes)");
  a->tls.AddTo(*cmd, "gateway",
               "Allow plaintext gRPC and HTTP off loopback: to non-loopback workers, and --listen/--http on "
               "other interfaces (trusted network only; --tls-dir covers gRPC, not HTTP)");
  cmd->callback([a] {
    if (int rc = RunGateway(*a)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
