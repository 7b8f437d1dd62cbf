// Tile profiles (issue 15): the planner prices a row tile of r of a layer's
// H rows at factor × r/H of the layer's time, the factor measured by
// `tessera run --plan/--force halo --profile` (planner/layer_profile.h).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "partition/graph/metrics.h"
#include "partition/import/model_import.h"
#include "planner/cluster.h"
#include "planner/layer_profile.h"
#include "planner/plan.h"

using namespace tessera;

namespace {

struct Model {
  Graph graph;
  std::vector<LayerFigures> layers;
};

const Model& Tiny() {
  static const Model model = [] {
    ImportOptions io;
    io.input_shapes = {{"", {1, 3, 64, 64}}};
    auto g = ImportDarknet("/usr/share/darknet/cfg/yolov2-tiny.cfg", io);
    REQUIRE(g.ok());
    Model m{std::move(g).value(), {}};
    m.layers = ComputeLayerFigures(m.graph);
    return m;
  }();
  return model;
}

std::string Write(const nlohmann::json& j, const std::string& name) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << j.dump();
  return path;
}

nlohmann::json Entry(const LayerFigures& f, int64_t rows, double ms, double layer_ms, const std::string& device) {
  return {{"device", device}, {"index", f.index},    {"node", f.name},
          {"op", f.op},       {"rows", rows},        {"layer_rows", f.output_shape[2]},
          {"ms", ms},         {"layer_ms", layer_ms}};
}

std::string ErrorOf(const nlohmann::json& j) {
  std::vector<LayerFigures> layers = Tiny().layers;
  auto r = ApplyTileProfile(Write(j, "tessera_bad_tiles.json"), &layers);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

}  // namespace

TEST_CASE("tile profile: a tile's factor is measured at its height or interpolated between heights",
          "[planner][tile_profile]") {
  LayerFigures f;
  f.output_shape = {1, 8, 16, 16};
  CHECK(f.TileTimeFactor(3) == 1.0);  // nothing measured
  f.tile_time_factor = {{2, 1.5}, {4, 1.2}, {8, 1.0}};
  CHECK(f.TileTimeFactor(1) == Approx(1.5));  // below the lowest: the nearest
  CHECK(f.TileTimeFactor(2) == Approx(1.5));
  CHECK(f.TileTimeFactor(3) == Approx(1.35));  // halfway between 2 and 4
  CHECK(f.TileTimeFactor(4) == Approx(1.2));
  CHECK(f.TileTimeFactor(6) == Approx(1.1));
  CHECK(f.TileTimeFactor(12) == Approx(1.0));  // above the highest: the nearest
  CHECK(f.TileTimeFactor(16) == 1.0);          // the whole layer is its own time
}

TEST_CASE("tile profile: per layer and height the median factor over devices is kept", "[planner][tile_profile]") {
  const Model& m = Tiny();
  const LayerFigures& conv = m.layers[0];
  REQUIRE(conv.op == "Conv");
  const int64_t H = conv.output_shape[2];
  // Three devices computed a quarter of the rows: 1.2x, 1.4x and 1.3x their
  // share of the layer's 10 ms. A whole-layer entry and a layer too fast to
  // time say nothing.
  const double share = static_cast<double>(H / 4) / static_cast<double>(H);
  nlohmann::json j = {{"tile_profile",
                       {Entry(conv, H / 4, 1.2 * share * 10, 10, "a"), Entry(conv, H / 4, 1.4 * share * 10, 10, "b"),
                        Entry(conv, H / 4, 1.3 * share * 10, 10, "c"), Entry(conv, H / 2, 0.5 * 10, 10, "d"),
                        Entry(conv, H, 10, 10, "e"), Entry(m.layers[1], 2, 1e-5, 1e-5, "a")}}};
  std::vector<LayerFigures> layers = m.layers;
  auto summary = ApplyTileProfile(Write(j, "tessera_tiles.json"), &layers);
  REQUIRE(summary.ok());
  CHECK(summary->layers == 1);
  CHECK(summary->tiles == 2);
  REQUIRE(layers[0].tile_time_factor.size() == 2);
  CHECK(layers[0].tile_time_factor[0].first == H / 4);
  CHECK(layers[0].tile_time_factor[0].second == Approx(1.3));
  CHECK(layers[0].tile_time_factor[1].first == H / 2);
  CHECK(layers[0].tile_time_factor[1].second == Approx(1.0));
  CHECK(summary->largest_factor == Approx(1.3));
  CHECK(summary->largest_layer == conv.name);
  CHECK(layers[1].tile_time_factor.empty());
  CHECK(DescribeTileProfile("t.json", *summary).find("at 1.30x") != std::string::npos);
}

TEST_CASE("tile profile: a profile of another model or a broken file is refused by name", "[planner][tile_profile]") {
  const Model& m = Tiny();
  const LayerFigures& conv = m.layers[0];
  const int64_t H = conv.output_shape[2];
  CHECK(ErrorOf(nlohmann::json::array()).find("is not JSON") != std::string::npos);
  CHECK(ErrorOf({{"profile", nlohmann::json::array()}}).find("no \"tile_profile\"") != std::string::npos);
  nlohmann::json renamed = Entry(conv, H / 2, 1, 2, "a");
  renamed["node"] = "another layer";
  CHECK(ErrorOf({{"tile_profile", {renamed}}}).find("'another layer'") != std::string::npos);
  nlohmann::json taller = Entry(conv, H / 2, 1, 2, "a");
  taller["layer_rows"] = H * 2;  // measured at another input shape
  CHECK(ErrorOf({{"tile_profile", {taller}}}).find("input shape") != std::string::npos);
  CHECK(ErrorOf({{"tile_profile", {Entry(conv, H + 1, 1, 2, "a")}}}).find("rows within the layer") !=
        std::string::npos);
  CHECK(ErrorOf({{"tile_profile", {Entry(conv, 2, -1, 2, "a")}}}).find("not negative") != std::string::npos);
  nlohmann::json beyond = Entry(conv, 2, 1, 2, "a");
  beyond["index"] = 100000;
  CHECK(ErrorOf({{"tile_profile", {beyond}}}).find("not one of the model's") != std::string::npos);
  nlohmann::json partial = Entry(conv, 2, 1, 2, "a");
  partial.erase("layer_ms");
  CHECK(ErrorOf({{"tile_profile", {partial}}}).find("needs") != std::string::npos);
  std::vector<LayerFigures> layers = m.layers;
  CHECK(ApplyTileProfile("/nonexistent/tiles.json", &layers).status().code() == StatusCode::kIOError);
}

TEST_CASE("tile profile: the tiled plan's devices take the measured time of their tiles", "[planner][tile_profile]") {
  const Model& m = Tiny();
  auto c = ParseCluster(
      "devices:\n"
      "  - { name: a, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
      "  - { name: b, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
      "  - { name: c, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
      "  - { name: d, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
      "links:\n  default: { bandwidth: 1000Gbit/s }\n",
      "four.yaml", {});
  REQUIRE(c.ok());
  PlanOptions options;
  options.objective = Objective::kLatency;
  options.solver = "tiled";
  auto plain = BuildPlan(m.graph, m.layers, *c, options);
  REQUIRE(plain.ok());
  // Every tile of every layer measured at 1.5x its share: the tiled plan's
  // compute takes 1.5x as long for the layers it tiles.
  std::vector<LayerFigures> slow = m.layers;
  for (LayerFigures& f : slow)
    if (f.output_shape.size() == 4 && f.output_shape[2] > 1) f.tile_time_factor = {{1, 1.5}};
  auto priced = BuildPlan(m.graph, slow, *c, options);
  REQUIRE(priced.ok());
  INFO(plain->choice << "\n" << priced->choice);
  for (const PlannedLayer& l : plain->layers)
    if (l.scheme == "ffmt") CHECK(l.stack_start);
  CHECK(priced->choice.find("--solver tiled") != std::string::npos);
  const double before = plain->latency_s, after = priced->latency_s;
  CHECK(after > 1.2 * before);
  CHECK(after < 1.5 * before + 1e-9);  // layers not tiled (the region layer) keep their time
  // The MACs are what they were: only the time of a tile changed.
  for (size_t i = 0; i < plain->loads.size(); ++i)
    CHECK(priced->loads[i].compute_share == Approx(plain->loads[i].compute_share));
}

namespace {
nlohmann::json Slice(const LayerFigures& f, const char* axis, int64_t channels, double ms, double layer_ms) {
  const bool out = std::string(axis) == "out_channels";
  return {{"device", "a"},
          {"index", f.index},
          {"node", f.name},
          {"op", f.op},
          {"axis", axis},
          {"channels", channels},
          {"layer_channels", out ? f.output_shape[1] : f.input_shapes[0][1]},
          {"ms", ms},
          {"layer_ms", layer_ms}};
}
}  // namespace

TEST_CASE("tile profile: FDT channel slices get their own factors, by axis", "[planner][tile_profile]") {
  LayerFigures f;
  f.output_shape = {1, 64, 8, 8};
  f.input_shapes = {{1, 32, 8, 8}};
  CHECK(f.SliceTimeFactor(true, 16) == 1.0);  // nothing measured
  f.out_slice_time_factor = {{16, 1.4}, {32, 1.2}};
  f.in_slice_time_factor = {{8, 1.1}};
  CHECK(f.SliceTimeFactor(true, 24) == Approx(1.3));
  CHECK(f.SliceTimeFactor(true, 64) == 1.0);  // the whole layer
  CHECK(f.SliceTimeFactor(false, 16) == Approx(1.1));
  CHECK(f.SliceTimeFactor(false, 32) == 1.0);

  const Model& m = Tiny();
  const LayerFigures& conv = m.layers[2];  // the second conv: 16 input, 32 output channels
  REQUIRE(conv.op == "Conv");
  const int64_t O = conv.output_shape[1], C = conv.input_shapes[0][1];
  // Fan-out: three devices at 1.1x, 1.5x and 1.2x of a quarter of the
  // layer's 8 ms; fan-in: half the input channels at 1.25x.
  nlohmann::json j = {{"tile_profile",
                       {Slice(conv, "out_channels", O / 4, 1.1 * 2, 8), Slice(conv, "out_channels", O / 4, 1.5 * 2, 8),
                        Slice(conv, "out_channels", O / 4, 1.2 * 2, 8), Slice(conv, "in_channels", C / 2, 1.25 * 4, 8),
                        Entry(conv, conv.output_shape[2] / 2, 4.4, 8, "a")}}};
  std::vector<LayerFigures> layers = m.layers;
  auto summary = ApplyTileProfile(Write(j, "tessera_slices.json"), &layers);
  REQUIRE(summary.ok());
  CHECK(summary->slices == 2);
  CHECK(summary->tiles == 1);
  REQUIRE(layers[2].out_slice_time_factor.size() == 1);
  CHECK(layers[2].out_slice_time_factor[0].second == Approx(1.2));
  CHECK(layers[2].SliceTimeFactor(true, O / 4) == Approx(1.2));
  CHECK(layers[2].SliceTimeFactor(false, C / 2) == Approx(1.25));
  CHECK(summary->largest_slice_factor == Approx(1.25));
  CHECK(DescribeTileProfile("t.json", *summary).find("2 FDT channel slices") != std::string::npos);

  nlohmann::json sideways = Slice(conv, "out_channels", 2, 1, 2);
  sideways["axis"] = "columns";
  CHECK(ErrorOf({{"tile_profile", {sideways}}}).find("not out_channels or in_channels") != std::string::npos);
  nlohmann::json wider = Slice(conv, "in_channels", 2, 1, 2);
  wider["layer_channels"] = C * 2;  // another model
  CHECK(ErrorOf({{"tile_profile", {wider}}}).find("input shape") != std::string::npos);
  CHECK(ErrorOf({{"tile_profile", {Slice(conv, "out_channels", O + 1, 1, 2)}}}).find("channels within the layer") !=
        std::string::npos);
}

TEST_CASE("tile profile: an FDT plan's devices take the measured time of their slices", "[planner][tile_profile]") {
  const Model& m = Tiny();
  auto c = ParseCluster(
      "devices:\n"
      "  - { name: a, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
      "  - { name: b, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9 }\n"
      "links:\n  default: { bandwidth: 1000Gbit/s }\n",
      "two.yaml", {});
  REQUIRE(c.ok());
  PlanOptions options;
  options.objective = Objective::kMemory;
  auto plain = BuildPlan(m.graph, m.layers, *c, options);
  REQUIRE(plain.ok());
  bool sliced = false;
  for (const PlannedLayer& l : plain->layers) sliced |= l.scheme.rfind("fdt", 0) == 0;
  REQUIRE(sliced);
  // Every slice on either axis measured at 1.5x its share.
  std::vector<LayerFigures> slow = m.layers;
  for (LayerFigures& f : slow) {
    f.out_slice_time_factor = {{1, 1.5}};
    f.in_slice_time_factor = {{1, 1.5}};
  }
  auto priced = BuildPlan(m.graph, slow, *c, options);
  REQUIRE(priced.ok());
  double before = 0, after = 0;
  for (size_t i = 0; i < plain->loads.size(); ++i) {
    before += plain->loads[i].compute_s;
    after += priced->loads[i].compute_s;
    CHECK(priced->loads[i].compute_share == Approx(plain->loads[i].compute_share));
  }
  CHECK(after > 1.05 * before);
  CHECK(after < 1.5 * before + 1e-9);
}
