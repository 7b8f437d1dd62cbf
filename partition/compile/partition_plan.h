// The compiler's view of a Plan (proto/tessera.proto `Plan`, written by the
// planner): for every graph layer, how it is cut and on which devices.
// Kept free of protobuf so partition/ builds without it; the planner converts.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace tessera {

// METHODS §2.
enum class LayerScheme {
  kWhole,  // the whole layer on devices[0] (pipeline / layer split)
  kFfmt,   // fused feature-map tiling over a grid; consecutive FFMT layers with
           // the same devices and grid form one fused stack
  kFdto,   // fan-out: output channels/neurons split by `split`
  kFdti,   // fan-in: input channels split by `split`, partial sums merged on devices[0]
  kFdt1,   // first of a fused pair: fan-out whose slices stay where they are
  kFdt2,   // second of a fused pair: fan-in over the slices of the FDT1 before it
  kPart,   // channel-wise layer carried per slice between FDT layers
};

const char* LayerSchemeName(LayerScheme scheme);  // "whole", "ffmt", "fdto", ...

struct LayerAssignment {
  LayerScheme scheme = LayerScheme::kWhole;
  std::vector<int> devices;     // in split order; FDT merges and gathers happen on devices[0]
  std::vector<int64_t> split;   // per device (FDT*/PART); empty = even split
  int64_t grid_rows = 1, grid_cols = 1;                  // FFMT
  std::vector<double> row_weights, col_weights;          // FFMT uneven grids; empty = even
  // FFMT on one device as *processing in parts* (issue 18 item 3): the
  // stack's output in grid_rows row bands computed in turn, each layer
  // computing only rows no earlier band computed and keeping the rows the
  // next band reads again (its window's overlap, kh − stride rows for a
  // conv) in a small buffer between bands: no MAC is recomputed, and every
  // feature map of the stack is held a band's window at a time.
  bool parts = false;
  // FFMT: this layer begins a new fused stack even when the layer before it
  // has the same devices and grid (METHODS §2 FFMT, issue 15). A stack of one
  // layer after a stack on the same row split is *halo exchange*: each device
  // assembles its input tile from its own rows (a local copy) and the halo
  // rows its neighbours computed (sent device to device), so no row is
  // recomputed and nothing passes through the source.
  bool stack_start = false;
};

struct PartitionPlan {
  int num_devices = 1;
  int source = 0;  // where model inputs arrive and outputs are collected
  std::vector<LayerAssignment> layers;  // one per Graph::nodes entry, same order
  // Devices whose programs store their weights compactly: no Winograd
  // transform (F(2x2,3x3) keeps 16 values per 9 of a 3x3 kernel, 1.78x the
  // raw bytes), every conv on packed im2col/pointwise weights at their raw
  // size. Chosen by the planner for a device that does not fit its RAM
  // otherwise (daemon/cluster/plan_fit.h); slower on those layers.
  std::set<int> compact_weights{};
};

// Every layer WHOLE on `device`: the trivial plan (a one-device run).
PartitionPlan SingleDevicePlan(size_t layers, int device = 0);

}  // namespace tessera
