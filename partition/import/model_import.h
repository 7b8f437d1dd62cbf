// Model import: ONNX (through the ONNX library) and darknet .cfg/.weights.
// Both produce a Graph in canonical form (graph.h) with every value's shape
// known and the folds of METHODS §1 done (BN into conv, bias and activation
// into their producer, Identity/Dropout/Constant removed).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

struct ImportOptions {
  // --input-shape: fixes dynamic (or overrides) input dims, by input name;
  // the key "" applies to the first (or only) input.
  std::map<std::string, Shape> input_shapes;
  // darknet: the .weights file; empty = seeded random weights.
  std::string weights_path;
  // Seed for generated weights (darknet without .weights). Same seed, same weights.
  uint64_t seed = 1;
  // Batch size used where the model leaves it open (darknet: always 1).
  int64_t batch = 1;
  // Shapes only: weights get their shapes but no values (TensorData::values
  // empty), for verbs that never run the model (inspect, plan): planning
  // YOLOv2 then holds no 194 MiB of weights (issue 11). darknet: no weight
  // is generated or read. ONNX: float initializers larger than 64 KiB are
  // skipped in the file (onnx_weightless_reader.h); integer and small
  // tensors keep their values for constant folding and shape arithmetic, so
  // some small weights (biases, BN statistics) may still have values.
  bool shapes_only = false;
  // Values only for the weights read by these nodes (canonical Graph node
  // names); every other weight keeps its shape and no values. Unset = every
  // node. For a gateway that builds one device's program at a time (issue 11).
  // darknet generates or reads only those layers' weights (a .weights file is
  // seeked past the rest); ONNX reads the file twice: shapes only, to learn
  // which initializers those nodes' weights are computed from, then with
  // just those payloads (and the small ones). Ignored with shapes_only.
  std::optional<std::set<std::string>> values_for_nodes;
};

// Drops the values of every constant of `graph` that no node in `nodes`
// (by name) reads; shapes are kept.
void KeepValuesOnlyFor(const std::set<std::string>& nodes, Graph* graph);

// InvalidArgument naming `origin` when a model of `bytes` is over
// kMaxModelBytes (util/limits.h), for files and buffers alike.
Status CheckModelSize(uint64_t bytes, const std::string& origin);

// Reads an .onnx file. Errors name the file, the node and the op type.
Result<Graph> ImportOnnx(const std::string& path, const ImportOptions& options);
// Same from bytes already in memory (`origin` names them in errors).
Result<Graph> ImportOnnxBytes(const std::string& bytes, const std::string& origin,
                              const ImportOptions& options);

// Reads a darknet .cfg (one Graph node per section, in file order, so node
// index i+1 is darknet's layer i+1). Errors name the file, line and section.
Result<Graph> ImportDarknet(const std::string& cfg_path, const ImportOptions& options);
// Same from cfg text in memory (`origin` names it in errors and the graph;
// a .weights file still comes from options.weights_path).
Result<Graph> ImportDarknetText(const std::string& cfg_text, const std::string& origin, const ImportOptions& options);

// Chooses the importer by extension (.onnx / .cfg); clear error otherwise.
Result<Graph> ImportModel(const std::string& path, const ImportOptions& options);

}  // namespace tessera
