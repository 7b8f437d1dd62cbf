// `tessera deploy --cluster FILE --plan plan.pb --model MODEL`: compiles the
// plan and pushes every device its program with weights (streamed in chunks),
// with a progress bar.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/cli/cli_tls_options.h"
#include "daemon/cluster/gateway.h"
#include "daemon/cluster/gateway_plan.h"
#include "planner/cluster.h"

namespace tessera {

void RegisterDeployCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("deploy", "Push a plan's programs and weights to the cluster's workers");
  struct Args {
    ModelOptions model;
    std::string cluster;
    ServePlanOptions serve;
    TlsOptions tls;
    std::vector<std::string> gateway_names{"gateway"};
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model.model_path,
                  "Model file (.onnx or darknet .cfg); default: the models: the cluster file lists");
  cmd->add_option("--input-shape", a->model.input_shapes, "Input shape override");
  cmd->add_option("--with-model", a->model.with_models,
                  "A further model every request runs too, merged with --model into one graph with identical layers "
                  "shared (repeatable)");
  cmd->add_option("--weights", a->model.weights_path, "darknet .weights file");
  cmd->add_option("--seed", a->model.seed, "Seed of generated weights")->capture_default_str();
  cmd->add_option("--cluster", a->cluster, "Cluster file (YAML)")->required();
  cmd->add_option("--plan", a->serve.plan_path, "Plan file (tessera plan --out)")->required();
  cmd->add_option("--worker-threads", a->serve.memory.threads,
                  "The workers' --threads, for sizing their memory against ram:")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--gateway-name", a->gateway_names,
                  "With --tls-dir: the certificate name of a gateway that may start requests of this plan "
                  "(repeatable; besides this deploy's own identity)")
      ->capture_default_str();
  a->tls.AddTo(*cmd, "deploy", "Allow plaintext gRPC to non-loopback workers");
  cmd->callback([a] {
    auto security = a->tls.Resolve("deploy");
    if (!security.ok()) throw CLI::RuntimeError(ReportError("deploy", security.status()));
    a->serve.security = *security;
    auto cluster = LoadClusterFile(a->cluster);
    if (!cluster.ok()) throw CLI::RuntimeError(ReportError("deploy", cluster.status()));
    if (Status st = TakeClusterModels(cluster->models, a->cluster, &a->model); !st.ok())
      throw CLI::RuntimeError(ReportError("deploy", st));
    auto graph = LoadModel(a->model);
    if (!graph.ok()) throw CLI::RuntimeError(ReportError("deploy", graph.status()));
    // The plan id names the model too: other weights are another plan to the workers.
    auto import_options = a->model.ToImportOptions();
    if (!import_options.ok()) throw CLI::RuntimeError(ReportError("deploy", import_options.status()));
    auto fingerprint = ModelFingerprint({a->model.model_path, *import_options, a->model.with_models});
    if (!fingerprint.ok()) throw CLI::RuntimeError(ReportError("deploy", fingerprint.status()));
    a->serve.model_fingerprint = *fingerprint;
    auto served = PrepareServedPlan(*graph, *cluster, a->serve);
    if (!served.ok()) throw CLI::RuntimeError(ReportError("deploy", served.status()));
    int last = -1;
    auto deployed = DeployPrograms(served->programs, served->plan_id, served->plan.source, served->workers,
                                   a->serve.security, [&](int64_t sent, int64_t total) {
                                     const int percent = total ? static_cast<int>(100 * sent / total) : 100;
                                     if (percent == last) return;
                                     last = percent;
                                     std::fprintf(stderr, "\rdeploy [%-40s] %3d%%  %.1f / %.1f MiB",
                                                  std::string(percent * 40 / 100, '#').c_str(), percent,
                                                  sent / 1048576.0, total / 1048576.0);
                                   },
                                   a->gateway_names);
    std::fprintf(stderr, "\n");
    if (!deployed.ok()) throw CLI::RuntimeError(ReportError("deploy", deployed.status()));
    std::printf("plan %s deployed\n", served->plan_id.c_str());
    for (size_t i = 0; i < deployed->size(); ++i)
      std::printf(
          "  %-12s %-22s program %8.2f MiB, weights %8.2f MiB, working memory %8.2f MiB, pipeline buffers "
          "%8.2f MiB per request%s%s\n",
          served->workers[i].name.c_str(), served->workers[i].address.c_str(), (*deployed)[i].program_bytes / 1048576.0,
          (*deployed)[i].weight_bytes / 1048576.0, (*deployed)[i].working_bytes / 1048576.0,
          (*deployed)[i].buffer_bytes / 1048576.0,
          i < served->memory.size() && served->memory[i].in_flight ? "; promised " : "",
          i < served->memory.size() && served->memory[i].in_flight ? DescribeDeviceMemory(served->memory[i]).c_str()
                                                                   : "");
  });
}

}  // namespace tessera
