// What each canonical op allows (issue 13): the one table that the importer's
// producer folds, the planner (METHODS §2-§4), the forced plans and the
// program compiler read, so that the planner never emits a scheme the
// compiler cannot run.
//
// Two levels:
//  * TraitsOf(op): what the op type allows, whatever its shapes.
//  * The node-level rules below add what depends on shapes and attributes
//    (a depthwise Conv is per-channel, a grouped Conv splits only at group
//    boundaries, a Reshape is per-channel only when it flattens a 1×1 map,
//    a Mul may read a [N, C, 1, 1] gate that every FFMT tile needs whole).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "partition/graph/graph.h"
#include "partition/graph/halo.h"
#include "util/status.h"

namespace tessera {

// How an op's output positions depend on its input positions (FFMT, §2).
enum class SpatialRule {
  kNone,       // rows of the output read every input row (or no feature map):
               // cannot sit inside a fused tile stack
  kWindow,     // a sliding window (Conv, MaxPool, AveragePool, constant Pad)
               // or another per-axis output-range -> input-range map (Resize,
               // ConvTranspose; halo.h SpatialMap): a tile reads the input
               // region its output region maps to, the halo of §2
  kPointwise,  // output (y, x) reads input (y, x) of every input of the
               // output's size, and all of an input broadcast over space
};

// How an op's output channels depend on its input channels (FDT, §4).
enum class ChannelRule {
  kMixed,       // any output channel may read any input channel
  kPerChannel,  // output channel c reads input channel c only: runs on a
                // channel slice unchanged (PART)
  kWeights,     // Conv / Gemm with constant weights: the weights are split by
                // output channels (FDTO, FDT1) or input channels (FDTI, FDT2)
};

struct OpTraits {
  SpatialRule spatial = SpatialRule::kNone;
  ChannelRule channels = ChannelRule::kMixed;
  // May carry a fused activation (graph.h attr "activation").
  bool carries_activation = false;
  // The name this op takes as a producer's fused activation ("relu", ...);
  // nullptr when it cannot be fused.
  const char* fused_name = nullptr;
};

// The traits of a canonical op; an op the table does not know gets the most
// restrictive traits (not tileable, channels mixed), so it runs whole.
const OpTraits& TraitsOf(const std::string& op);

// ---- FFMT (METHODS §2) --------------------------------------------------------

// How a node inside a fused stack maps an output region back to its inputs.
struct TileRule {
  bool window = false;  // true: `w` maps the region (halo); false: the same region
  SpatialWindow w;
  // Per activation input (graph.ActivationInputs order): true when the input
  // is broadcast over space ([N, C, 1, 1], e.g. a squeeze-and-excitation
  // gate) and every tile reads all of it.
  std::vector<bool> whole_input;
};

// The tile rule of node `n`, or InvalidArgument naming the layer and why it
// cannot be inside an FFMT stack.
Result<TileRule> TileRuleOf(const Graph& graph, int n);
// TileRuleOf(graph, n).status().
Status CheckTileable(const Graph& graph, int n);
// A 4-D LayerNormalization over the channels at each position (graph.h:
// axis 1, span 1): spatially point-wise, so it may sit inside a stack.
bool IsChannelLayerNorm(const Graph& graph, const Node& node);

// ---- Channel slices (METHODS §4) ----------------------------------------------

// Conv whose every group has one input channel and one output channel.
bool IsDepthwise(const Graph& graph, const Node& node);
// Conv (not depthwise) or Gemm with constant weights: FDT splits its weights.
bool IsWeightSplitLayer(const Graph& graph, const Node& node);
// OK when the node computes each channel slice of its output from the same
// slice of its inputs (PART); InvalidArgument naming the layer otherwise.
Status CheckPerChannel(const Graph& graph, const Node& node);

// Output channels per unit of an output-channel split (FDTO/FDT1): the
// output channels of one group for a grouped Conv, 1 otherwise.
int64_t OutputSplitGranule(const Graph& graph, const Node& node);
// Input channels per unit of an input-channel split (FDTI/FDT2): the input
// channels of one group for a grouped Conv (a slice holds whole groups), 1
// otherwise.
int64_t InputSplitGranule(const Graph& graph, const Node& node);
// Splits `total` channels proportionally to `weights` in whole units of
// `granule` channels (SplitProportional of halo.h on total / granule units).
std::vector<int64_t> SplitChannels(int64_t total, int64_t granule, const std::vector<double>& weights);
// OK when every size of `sizes` (one per device, summing to the channels)
// ends on a granule boundary; InvalidArgument naming the layer otherwise.
Status CheckChannelSplit(const Graph& graph, int n, const std::vector<int64_t>& sizes, bool by_input);

// ---- Fused activations (graph.h, METHODS §1) ------------------------------------

// Sets the producer's "activation" attrs for activation node `act`; false when
// `act` is not an activation that can be fused.
bool FuseActivation(const Node& act, Attributes* producer);

}  // namespace tessera
