// `tessera demo`: the README's main command.
//
// Today it is the single-device part of the demo: it imports a model the
// project builds itself (darknet's yolov2-tiny.cfg from Debian's `darknet`
// package, with seeded weights — nothing is downloaded), shows its layers
// and memory, runs it, and checks that two runs agree bit for bit. The local
// multi-worker cluster (issue 5) will extend this verb.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "daemon/cli.h"
#include "daemon/cli_model_options.h"
#include "daemon/executor.h"
#include "daemon/seeded_input.h"
#include "partition/metrics.h"

namespace tessera {

namespace {

constexpr const char* kDefaultModel = "/usr/share/darknet/cfg/yolov2-tiny.cfg";

struct DemoOptions {
  std::string model = kDefaultModel;
  int threads = 2;
  int requests = 5;
  bool json = false;
};

int RunDemo(const DemoOptions& d) {
  if (!std::filesystem::exists(d.model))
    return ReportError("demo", Status::NotFound(d.model + " does not exist; install Debian's 'darknet' package "
                                                "(deploy/install-deps.sh) or pass --model FILE"));
  ModelOptions mo;
  mo.model_path = d.model;
  auto graph = LoadModel(mo);
  if (!graph.ok()) return ReportError("demo", graph.status());
  const auto layers = ComputeLayerFigures(*graph);
  const ModelTotals totals = ComputeTotals(layers);

  ExecutorOptions eo;
  eo.threads = d.threads;
  auto ex = Executor::Create(*graph, eo);
  if (!ex.ok()) return ReportError("demo", ex.status());

  std::vector<TensorData> inputs;
  for (size_t i = 0; i < graph->inputs.size(); ++i)
    inputs.push_back(SeededInput(graph->values[graph->inputs[i]].shape, 1 + i));
  std::vector<TensorData> first, out;
  std::vector<double> ms;
  bool all_match = true, finite = true;
  for (int r = 0; r < std::max(1, d.requests); ++r) {
    auto t0 = std::chrono::steady_clock::now();
    if (Status st = (*ex)->Run(inputs, r == 0 ? &first : &out); !st.ok()) return ReportError("demo", st);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (r == 0) continue;
    for (size_t o = 0; o < out.size(); ++o)
      all_match &= out[o].values.size() == first[o].values.size() &&
                   std::memcmp(out[o].values.data(), first[o].values.data(), out[o].values.size() * 4) == 0;
  }
  for (const auto& t : first)
    for (float x : t.values) finite &= std::isfinite(x);
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];

  if (d.json) {
    nlohmann::json j = {{"model", d.model},         {"devices", 1},
                        {"requests", ms.size()},    {"all_match", all_match && finite},
                        {"max_rel_diff", 0.0},      {"latency_ms", median},
                        {"single_device_latency_ms", median},
                        {"throughput_per_s", 1000.0 / median},
                        {"arena_bytes", (*ex)->arena_bytes()},
                        {"weights_bytes", totals.weights * 4}};
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("tessera demo — %s (%zu layers, %.2f MiB weights, %.2f GMACs)\n", d.model.c_str(), layers.size(),
                totals.weights * 4.0 / 1048576.0, totals.macs / 1e9);
    std::printf("%5s  %-24s %-12s %-18s %12s\n", "layer", "name", "op", "output", "MACs");
    for (const auto& l : layers)
      std::printf("%5d  %-24s %-12s %-18s %12lld\n", l.index, l.name.c_str(), l.op.c_str(),
                  ShapeToString(l.output_shape).c_str(), static_cast<long long>(l.R));
    std::printf("\ndevice 'local' (this machine): weights %.2f MiB, arena %.2f MiB (%.2f MiB unplanned)\n",
                totals.weights * 4.0 / 1048576.0, (*ex)->arena_bytes() / 1048576.0,
                (*ex)->unplanned_bytes() / 1048576.0);
    std::printf("requests: %zu, latency %.2f ms median (%d threads), %.1f inferences/s\n", ms.size(), median,
                d.threads, 1000.0 / median);
    std::printf("answers: %s\n", all_match && finite ? "all identical across runs and finite"
                                                     : "MISMATCH or non-finite output");
    std::printf("(the multi-worker loopback cluster is not built yet: this demo runs on one device)\n");
  }
  return all_match && finite ? 0 : 2;
}

}  // namespace

void RegisterDemoCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Run the bundled demo model end to end and check its answers");
  auto d = std::make_shared<DemoOptions>();
  cmd->add_option("--model", d->model, "Model to run (.cfg or .onnx)")->capture_default_str();
  cmd->add_option("--threads", d->threads, "Intra-op threads")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--requests", d->requests, "Number of inferences")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_flag("--json", d->json, "Print JSON");
  cmd->callback([d] {
    if (int rc = RunDemo(*d)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
