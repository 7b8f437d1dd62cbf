// Model import: ONNX (through the ONNX library) and darknet .cfg/.weights.
// Both produce a Graph in canonical form (graph.h) with every value's shape
// known and the folds of METHODS §1 done (BN into conv, bias and activation
// into their producer, Identity/Dropout/Constant removed).
#pragma once

#include <cstdint>
#include <map>
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
  // YOLOv2 then holds no 194 MiB of weights (issue 11). darknet only for
  // now; ONNX constant folding needs values and ignores it.
  bool shapes_only = false;
};

// Reads an .onnx file. Errors name the file, the node and the op type.
Result<Graph> ImportOnnx(const std::string& path, const ImportOptions& options);
// Same from bytes already in memory (`origin` names them in errors).
Result<Graph> ImportOnnxBytes(const std::string& bytes, const std::string& origin,
                              const ImportOptions& options);

// Reads a darknet .cfg (one Graph node per section, in file order, so node
// index i+1 is darknet's layer i+1). Errors name the file, line and section.
Result<Graph> ImportDarknet(const std::string& cfg_path, const ImportOptions& options);

// Chooses the importer by extension (.onnx / .cfg); clear error otherwise.
Result<Graph> ImportModel(const std::string& path, const ImportOptions& options);

}  // namespace tessera
