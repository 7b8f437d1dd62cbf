#include "daemon/cli/cli_model_options.h"

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "daemon/cluster/gateway_plan.h"
#include "util/limits.h"

namespace tessera {

void ModelOptions::AddTo(CLI::App& cmd) {
  cmd.add_option("model", model_path, "Model file: .onnx, or a darknet .cfg")->required();
  cmd.add_option("--with-model", with_models,
                 "A further model (.onnx or .cfg) every request runs too, merged with MODEL into one graph: a "
                 "frame feeds the inputs of equal shape, identical layers (op, attributes, inputs, weight values) "
                 "are held and computed once; outputs are MODEL's, then each --with-model's (repeatable)");
  cmd.add_option("--input-shape", input_shapes,
                 "Fix an input's shape, e.g. 1x3x224x224 or input:1x3x224x224 (repeatable)");
  cmd.add_option("--weights", weights_path, "darknet .weights file (default: seeded random weights)");
  cmd.add_option("--seed", seed, "Seed for generated weights and inputs")->capture_default_str();
}

Result<Shape> ParseShape(const std::string& text) {
  Shape shape;
  std::string item;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == 'x' || text[i] == ',') {
      if (item.empty()) return Status::InvalidArgument("bad shape '" + text + "': expected e.g. 1x3x224x224");
      char* end = nullptr;
      long long d = std::strtoll(item.c_str(), &end, 10);
      if (*end != '\0' || d <= 0)
        return Status::InvalidArgument("bad shape '" + text + "': '" + item + "' is not a positive integer");
      shape.push_back(d);
      item.clear();
    } else {
      item += text[i];
    }
  }
  TS_RETURN_IF_ERROR(CheckedElementCount(shape, "the input").status());
  return shape;
}

Result<ImportOptions> ModelOptions::ToImportOptions() const {
  ImportOptions o;
  o.weights_path = weights_path;
  o.seed = seed;
  for (const std::string& s : input_shapes) {
    std::string name, dims = s;
    // NAME:dims — the name may itself contain ':' (ONNX names can), so split at the last one.
    auto colon = s.rfind(':');
    if (colon != std::string::npos) name = s.substr(0, colon), dims = s.substr(colon + 1);
    auto shape = ParseShape(dims);
    if (!shape.ok()) return shape.status().WithContext("--input-shape");
    o.input_shapes[name] = *shape;
  }
  return o;
}

Result<Graph> LoadModel(const ModelOptions& options, bool shapes_only) {
  TS_ASSIGN_OR_RETURN(ImportOptions io, options.ToImportOptions());
  io.shapes_only = shapes_only;
  auto t0 = std::chrono::steady_clock::now();
  if (!options.with_models.empty()) {
    MergeReport report;
    TS_ASSIGN_OR_RETURN(Graph merged, ImportModelSource({options.model_path, io, options.with_models}, &report));
    // Said on stderr whatever the log level: what the user's models share is
    // the point of merging them (and a surprise when nothing is).
    std::fprintf(stderr, "tessera: %zu models as one graph '%s' (%zu layers):\n%s", report.models.size(),
                 merged.name.c_str(), merged.nodes.size(), report.Describe().c_str());
    if (shapes_only) return merged.ShapesOnly();
    return merged;
  }
  auto graph = ImportModel(options.model_path, io);
  if (!graph.ok()) return graph.status();
  spdlog::debug("imported {} ({} layers) in {:.1f} ms", options.model_path, graph->nodes.size(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return graph;
}

Status TakeClusterModels(const std::vector<std::string>& cluster_models, const std::string& cluster_path,
                         ModelOptions* options) {
  if (!options->model_path.empty()) {
    if (!cluster_models.empty())
      spdlog::warn("--model {} given: the models: of {} are left aside", options->model_path, cluster_path);
    return Status::OK();
  }
  if (cluster_models.empty())
    return Status::InvalidArgument(
        "no model: give --model FILE, or list the models the cluster serves under "
        "'models:' in " +
        cluster_path);
  options->model_path = cluster_models[0];
  options->with_models.insert(options->with_models.begin(), cluster_models.begin() + 1, cluster_models.end());
  return Status::OK();
}

int ReportError(const std::string& verb, const Status& status) {
  std::cerr << "tessera " << verb << ": error: " << status.message() << " [" << StatusCodeName(status.code())
            << "]\n";
  return 1;
}

Result<double> ParseMacOverhead(const std::string& text) {
  if (text == "none" || text == "inf") return -1.0;
  std::string t = text;
  const bool percent = !t.empty() && t.back() == '%';
  if (percent) t.pop_back();
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v) || v < 0)
    return Status::InvalidArgument("--max-mac-overhead '" + text + "': give a share such as 10% or 0.1, or none");
  return percent ? v / 100.0 : v;
}

}  // namespace tessera
