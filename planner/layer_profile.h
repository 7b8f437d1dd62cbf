// Measured per-layer times for the planner's compute model (issue 18 item 1,
// issue 15 item 3). METHODS §5 prices layer j on device i at
// L_ij = MAC_j / rate_i: every MAC of a model costs the same. Measured, they
// do not: yolov2-tiny at 160² spends 16 % of its time in its first conv
// (3 input channels) that holds 3 % of its MACs, so a stage of early layers
// runs ~1.5x longer than its MAC count says and the printed pipeline period
// misses the measured one by as much.
//
// A layer profile is the per-node times of `tessera run MODEL --profile
// --json` (on any machine: only their ratios are used). Applied to the
// layer figures, each profiled layer's time-MACs become
//     R̃_j = t_j · Σ_k R_k / Σ_k t_k
// so the model's MAC-equivalents are unchanged (Σ R̃ = Σ R), and the time a
// device spends on layer j is R̃_j / macs_per_s_i with macs_per_s_i the
// device's whole-model rate (per-kind rates do not apply to profiled
// layers: the profile already says how kinds differ).
#pragma once

#include <string>
#include <vector>

#include "partition/graph/metrics.h"
#include "util/status.h"

namespace tessera {

struct LayerProfileSummary {
  int layers = 0;             // profiled layers applied
  double profiled_ms = 0;     // Σ t_k of the profile
  double largest_change = 1;  // max of R̃_j / R_j over layers with R_j ≥ 1 % of Σ R
  std::string largest_layer;  // its name
};

// Reads `path` (`tessera run --profile --json` output) and sets
// time_macs of every layer of `layers`. The profile must be of the same
// model: one entry per layer, matched by index (or name) with the same op;
// anything else is an InvalidArgument naming the first mismatch.
Result<LayerProfileSummary> ApplyLayerProfile(const std::string& path, std::vector<LayerFigures>* layers);

// "layer profile FILE (N layers, T ms measured; largest correction: layer
// 'x' at K x its MAC share)", for Plan::time_model.
std::string DescribeLayerProfile(const std::string& path, const LayerProfileSummary& summary);

// Tile profile (issue 15): the per-device tile times of `tessera run MODEL
// --plan PLAN --profile --json` ("tile_profile": a layer's row tile of r of
// its H output rows took `ms` on a device, the whole layer `layer_ms` in the
// unsplit run). For each layer and tile height the median factor
//     (ms / layer_ms) / (r / H)
// becomes LayerFigures::tile_time_factor, so the planner prices a tile of r
// rows at factor × r/H of the layer's time (TileTimeFactor) instead of r/H:
// a tile a few rows high runs its GEMMs on fewer columns and rounds its
// rows up to the kernel's blocks. Entries with an "axis" are FDT channel
// slices (a fan-out device's c of O output channels, a fan-in device's c of
// C input channels, METHODS §4): their factor (ms / layer_ms) / (c / O or C)
// becomes LayerFigures::out_ / in_slice_time_factor (SliceTimeFactor). A
// fan-out slice still transforms the whole input of a Winograd conv and a
// fan-in slice its whole output, so a slice costs more than its share
// (VGG-16 on 4 devices, one process: each device's CPU 1.17-1.31x its
// share). Entries must name the model's layers at this input shape;
// anything else is an InvalidArgument naming it.
struct TileProfileSummary {
  int layers = 0, tiles = 0;  // layers with a factor; (layer, height) pairs
  double largest_factor = 0;
  std::string largest_layer;
  int64_t largest_rows = 0;
  // FDT channel slices given a factor ((layer, axis, channels) triples), and
  // the largest factor among them.
  int slices = 0;
  double largest_slice_factor = 0;
  std::string largest_slice_layer;
};
Result<TileProfileSummary> ApplyTileProfile(const std::string& path, std::vector<LayerFigures>* layers);
// "tile profile FILE (N tile heights of L layers; largest: r rows of 'x' at
// F x their share of the layer)", for Plan::time_model.
std::string DescribeTileProfile(const std::string& path, const TileProfileSummary& summary);

// Compact profile (issue 15): the per-node times of `tessera run MODEL
// --compact-weights --profile --json` on the machine of the layer profile
// (already applied). A device over its RAM may keep its conv weights at
// their raw size (no Winograd; daemon/cluster/plan_fit.h), and its 3x3
// convs then run slower: each Conv's LayerFigures::compact_time_factor
// becomes compact ms / layer-profile ms, and the planner adds the
// difference to such a device's time. Without it the planner prices those
// convs at the Winograd speed it profiled (measured on emulated devices:
// YOLOv2 608² in 128 MiB on 4 devices ran 2.07x its predicted latency).
struct CompactProfileSummary {
  int convs = 0;  // convs given a factor
  double largest_factor = 0;
  std::string largest_layer;
};
Result<CompactProfileSummary> ApplyCompactProfile(const std::string& path, std::vector<LayerFigures>* layers);
std::string DescribeCompactProfile(const std::string& path, const CompactProfileSummary& summary);

// Applies the layer profile, then the tile profile, then the compact
// profile (any path may be empty; a compact profile needs the layer
// profile) to `layers`; returns Plan::time_model, naming what was applied
// ("" when none). `tessera plan` and the gateway's planning share it.
Result<std::string> ApplyProfiles(const std::string& layer_profile, const std::string& tile_profile,
                                  std::vector<LayerFigures>* layers, const std::string& compact_profile = "");

}  // namespace tessera
