// Folds of METHODS §1 on a canonical Graph: "batch-norm and bias/activation
// that follow a conv or dense are folded into it before planning".
//
// Works on any importer's output (nothing ONNX-specific in the Graph), so the
// darknet importer may call it too.
#pragma once

#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

// In node order, for a Conv or Gemm producer P whose output has exactly one
// consumer C and is not a graph output:
//  * C = BatchNormalization with constant parameters: folded into P's
//    weights and bias (W'[o] = W[o]·s[o], b'[o] = (b[o] - mean[o])·s[o] + beta[o],
//    s = scale / sqrt(var + eps));
//  * C = Add of a constant broadcasting per output channel: added to P's bias;
//  * C = Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid or Tanh: becomes P's
//    attr "activation" (graph.h), once.
// P then produces C's output (its name and id stay) and C is removed. Folded
// weights are new constants; shared weights are never modified in place.
// Unused values stay in `graph` (ids are stable); RemoveDeadNodes drops their data.
// `folded` (optional) gets one (C's name, P's name) pair per fold.
Status FoldIntoProducers(Graph* graph, std::vector<std::pair<std::string, std::string>>* folded = nullptr);

}  // namespace tessera
