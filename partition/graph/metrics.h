// Per-layer figures of METHODS §1: Q (weight values, biases included),
// R (multiplications, MACs), M (input values, summed over all activation
// inputs), K (output values), for a Graph in canonical form (folds done).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "partition/graph/graph.h"

namespace tessera {

struct LayerFigures {
  int index = 0;  // 1-based, the node's position in Graph::nodes
  int node = 0;   // 0-based node index
  std::string name;
  std::string op;
  std::vector<Shape> input_shapes;  // activation inputs only
  Shape output_shape;               // first output
  int64_t Q = 0, R = 0, M = 0, K = 0;
};

struct ModelTotals {
  int64_t layers = 0;
  int64_t weights = 0;  // Σ Q
  int64_t macs = 0;     // Σ R
  int64_t max_io = 0;   // max (M + K)
};

std::vector<LayerFigures> ComputeLayerFigures(const Graph& graph);
ModelTotals ComputeTotals(const std::vector<LayerFigures>& layers);

}  // namespace tessera
