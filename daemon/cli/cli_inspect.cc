// `tessera inspect MODEL [--json]`: one row per layer with METHODS §1's
// Q, R, M, K, and the model totals.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "partition/graph/metrics.h"

namespace tessera {

namespace {

std::string JoinShapes(const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? "+" : "") + ShapeToString(shapes[i]);
  return s.empty() ? "-" : s;
}

// 1234567 -> "1.23M"; keeps the table narrow.
std::string Human(int64_t v) {
  char buf[32];
  if (v >= 10'000'000'000LL) std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  else if (v >= 10'000'000) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 100'000) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  return buf;
}

int RunInspect(const ModelOptions& mo, bool json) {
  auto graph = LoadModel(mo, /*shapes_only=*/true);
  if (!graph.ok()) return ReportError("inspect", graph.status());
  const auto layers = ComputeLayerFigures(*graph);
  const ModelTotals totals = ComputeTotals(layers);
  if (json) {
    nlohmann::json j;
    j["model"] = graph->name;
    j["layers"] = nlohmann::json::array();
    for (const auto& l : layers) {
      nlohmann::json in = nlohmann::json::array();
      for (const auto& s : l.input_shapes) in.push_back(s);
      j["layers"].push_back({{"index", l.index}, {"name", l.name}, {"op", l.op},
                             {"input_shape", l.input_shapes.size() == 1 ? nlohmann::json(l.input_shapes[0]) : in},
                             {"output_shape", l.output_shape}, {"Q", l.Q}, {"R", l.R}, {"M", l.M}, {"K", l.K}});
    }
    j["totals"] = {{"layers", totals.layers}, {"weights", totals.weights}, {"macs", totals.macs},
                   {"max_io", totals.max_io}};
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("%s: %zu layers\n", mo.model_path.c_str(), layers.size());
  std::printf("%5s  %-28s %-18s %-22s %-18s %10s %10s %10s %10s\n", "index", "name", "op", "input", "output", "Q",
              "R(MACs)", "M", "K");
  for (const auto& l : layers) {
    std::string name = l.name.size() > 28 ? l.name.substr(0, 25) + "..." : l.name;
    std::printf("%5d  %-28s %-18s %-22s %-18s %10s %10s %10s %10s\n", l.index, name.c_str(), l.op.c_str(),
                JoinShapes(l.input_shapes).c_str(), ShapeToString(l.output_shape).c_str(), Human(l.Q).c_str(),
                Human(l.R).c_str(), Human(l.M).c_str(), Human(l.K).c_str());
  }
  std::printf("totals: %lld layers, %lld weights (%.2f MiB float32), %lld MACs, largest M+K %lld values\n",
              static_cast<long long>(totals.layers), static_cast<long long>(totals.weights),
              totals.weights * 4.0 / (1 << 20), static_cast<long long>(totals.macs),
              static_cast<long long>(totals.max_io));
  return 0;
}

}  // namespace

void RegisterInspectCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Per-layer shapes and METHODS §1 figures (Q, R, M, K) of a model");
  auto mo = std::make_shared<ModelOptions>();
  auto json = std::make_shared<bool>(false);
  mo->AddTo(*cmd);
  cmd->add_flag("--json", *json, "Print JSON instead of a table");
  cmd->callback([mo, json] {
    if (int rc = RunInspect(*mo, *json)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
