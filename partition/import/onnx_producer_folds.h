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

// A Pad whose zeros only a window reads becomes that window's own padding:
// a constant Pad by value 0 of the spatial axes only (no crop), whose value
// is not a graph output and has one reader, W — or one QuantizeDequantize
// whose grid holds 0 (it maps 0 to 0, so it commutes with the Pad) and whose
// value W alone reads — where W is a Conv (no auto_pad) reading it as its
// activation, or an AveragePool with ceil_mode 0 that counts its padding
// (count_include_pad, or no pads of its own; it then gets count_include_pad).
// W's pads grow by the Pad's {top, left, bottom, right}; the Pad is removed
// and the QuantizeDequantize, if any, reads the unpadded tensor. The answer is
// the same: the window reads the same zeros at the same places.
// TF-"same" models (MobileNet VWW, exported from ZeroPad2d) pad before every
// stride-2 conv: one pass and one padded copy fewer on a host, and layers an
// MCU can run (its firmware has no Pad).
// A chain of such Pads folds whole. Returns how many Pads were folded;
// `folded` gets (Pad's name, W's name).
int FoldPadsIntoWindows(Graph* graph, std::vector<std::pair<std::string, std::string>>* folded = nullptr);

}  // namespace tessera
