// Pattern fusions on a canonical Graph: subgraphs that exporters spell out op
// by op become the one canonical node they compute (graph.h), so kernels run
// them in one pass and the planner sees one layer.
//
// Works on the Graph, not the ONNX protobuf, after translation and before the
// producer folds (onnx_producer_folds.h), so the folds never split a pattern.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "partition/graph/graph.h"

namespace tessera {

// GELU as PyTorch exports nn.GELU() (approximate='none') at opsets < 20:
//   Div(x, √2) or Mul(x, 1/√2) -> Erf -> Add(·, 1) -> the product of x, that
//   and the scalar 0.5 in any association and operand order
// becomes one node Gelu(x) (graph.h). Constants must match to 1e-4
// (relative); every intermediate must have no other reader and not be a
// graph output. The last Mul is rewritten in place (its name and output id
// stay); the other nodes are left without readers for RemoveDeadNodes.
// `absorbed` (optional) gets one (absorbed node, fused node) name pair per
// node folded into a fused one. Returns how many were fused.
int FuseGelu(Graph* graph, std::vector<std::pair<std::string, std::string>>* absorbed = nullptr);

// LayerNormalization as PyTorch exports nn.LayerNorm (and F.layer_norm) at
// opsets < 17:
//   m = ReduceMean(x, axes = a..r−1, keepdims), d = Sub(x, m),
//   v = ReduceMean(Pow(d, 2), same axes), n = Div(d, Sqrt(Add(v, eps)))
//   [, Mul(n, scale constant) [, Add(·, bias constant)]]
// becomes LayerNormalization(x, scale, bias?) with attrs axis = a, epsilon
// (a constant of ones stands in for a missing scale). Scale and bias must
// not vary over the dims before a. Same in-place rewrite as FuseGelu.
// Returns how many were fused.
int FuseLayerNorm(Graph* graph, std::vector<std::pair<std::string, std::string>>* absorbed = nullptr);

// A LayerNorm over the channels of an NCHW map as PyTorch spells it,
//   Transpose(x, perm 0,2,3,1) -> LayerNormalization(axis 3, one output)
//   -> Transpose(perm 0,3,1,2)
// becomes LayerNormalization(x, scale, bias?) with axis 1, span 1 (graph.h):
// the same values, without the two copies, and spatially point-wise so FFMT
// can tile it. Run after FuseLayerNorm. Same in-place rewrite (the last
// Transpose becomes the node). Returns how many were fused.
int FuseChannelLayerNorm(Graph* graph, std::vector<std::pair<std::string, std::string>>* absorbed = nullptr);

}  // namespace tessera
