// Command-line options shared by every verb that loads a model
// (`--input-shape`, `--weights`, `--seed`), and the one place that turns them
// into ImportOptions.
#pragma once

#include <string>
#include <vector>

#include "partition/import/model_import.h"

namespace CLI {
class App;
}

namespace tessera {

struct ModelOptions {
  std::string model_path;
  // Further models run on the same request, merged with MODEL into one graph
  // whose identical layers are shared (partition/graph/merge_models.h).
  std::vector<std::string> with_models;
  std::vector<std::string> input_shapes;  // "NAME:1x3x224x224" or "1x3x224x224"
  std::string weights_path;
  uint64_t seed = 1;

  // Adds MODEL (positional, required) and the options above to `cmd`.
  void AddTo(CLI::App& cmd);
  // Parses the shape strings; InvalidArgument naming the bad one.
  Result<ImportOptions> ToImportOptions() const;
};

// Parses "1x3x224x224" (also "1,3,224,224").
Result<Shape> ParseShape(const std::string& text);

// Imports the model with a clear error prefix; logs the import time.
// `shapes_only`: for verbs that never run the model (ImportOptions::shapes_only).
Result<Graph> LoadModel(const ModelOptions& options, bool shapes_only = false);

// The models a cluster file lists (`models:`, Cluster::models) as the
// options' model and --with-model ones, when no --model was given; with
// --model, the file's list is left aside (said in the log). InvalidArgument
// when neither names a model.
Status TakeClusterModels(const std::vector<std::string>& cluster_models, const std::string& cluster_path,
                         ModelOptions* options);

// Prints "tessera <verb>: error: <message>" to stderr and returns the exit code 1.
int ReportError(const std::string& verb, const Status& status);

// --max-mac-overhead of the memory flow: "10%", "0.1", "none" (no limit) ->
// the fraction; < 0 means none. InvalidArgument naming the text otherwise.
Result<double> ParseMacOverhead(const std::string& text);

}  // namespace tessera
