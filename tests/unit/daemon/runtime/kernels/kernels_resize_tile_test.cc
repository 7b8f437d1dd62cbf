// Resize on FFMT tiles (METHODS §2, resize_map.h): a tile's Resize, given its
// input region (halo.h) and the tile_* attributes the program compiler sets,
// computes bit for bit what the whole-map Resize computes at those
// positions. Bit-identical, not merely close: the tile evaluates the same
// float/double expressions on the same input values (the coordinate maths is
// resize_map.h for both, fed the whole map's sizes and global indices).
#include <catch2/catch.hpp>

#include <random>
#include <tuple>

#include "partition/graph/halo.h"
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

struct ResizeCase {
  std::string mode, transform, rounding;
  int64_t in_h, in_w, out_h, out_w;
  std::vector<double> scales;  // empty: the sizes form (out/in)
};

Attributes ResizeAttrs(const ResizeCase& c) {
  Attributes a;
  a.Set("mode", c.mode);
  a.Set("coordinate_transformation_mode", c.transform);
  if (c.mode == "nearest") a.Set("nearest_mode", c.rounding);
  if (!c.scales.empty()) a.Set("scales", c.scales);
  return a;
}

// The Resize's window as the planner and compiler see it.
SpatialWindow WindowOf(const ResizeCase& c, const Attributes& attrs) {
  Graph g;
  const int x = g.AddValue("x", {1, 3, c.in_h, c.in_w});
  const int y = g.AddValue("y", {1, 3, c.out_h, c.out_w});
  g.inputs = {x};
  g.outputs = {y};
  g.AddNode(Node{"resize", "Resize", {x}, {y}, attrs});
  auto w = SpatialWindowOf(g, g.nodes[0]);
  INFO(w.status().ToString());
  REQUIRE(w.ok());
  return *w;
}

// Rows [r0, r1) and cols [c0, c1) of every plane of an NCHW tensor.
std::vector<float> Crop(const std::vector<float>& v, const Shape& s, const TileRegion& r) {
  std::vector<float> out;
  for (int64_t p = 0; p < s[0] * s[1]; ++p)
    for (int64_t y = r.rows.begin; y < r.rows.end; ++y)
      for (int64_t x = r.cols.begin; x < r.cols.end; ++x) out.push_back(v[(p * s[2] + y) * s[3] + x]);
  return out;
}

NodeRun RunTile(const ResizeCase& c, Attributes attrs, const std::vector<float>& x, const TileRegion& in,
                const TileRegion& out) {
  attrs.Set(kResizeTileOutputOrigin, std::vector<int64_t>{out.rows.begin, out.cols.begin});
  attrs.Set(kResizeTileInputOrigin, std::vector<int64_t>{in.rows.begin, in.cols.begin});
  attrs.Set(kResizeTileFullInput, std::vector<int64_t>{c.in_h, c.in_w});
  attrs.Set(kResizeTileFullOutput, std::vector<int64_t>{c.out_h, c.out_w});
  const Shape xs = {1, 3, c.in_h, c.in_w};
  return RunNode("Resize", attrs, {Activation({1, 3, in.rows.size(), in.cols.size()}, Crop(x, xs, in))},
                 {{1, 3, out.rows.size(), out.cols.size()}});
}

std::vector<ResizeCase> AllCases() {
  // Scales 2, 1.5, 0.5, an odd sizes-form resize, and a mixed one.
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, std::vector<double>>> sizes = {
      {7, 9, 14, 18, {1, 1, 2, 2}}, {6, 10, 9, 15, {1, 1, 1.5, 1.5}}, {9, 11, 4, 5, {1, 1, 0.5, 0.5}},
      {7, 5, 11, 13, {}},           {5, 12, 10, 6, {1, 1, 2, 0.5}},
  };
  const std::vector<std::string> transforms = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                               "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"};
  std::vector<ResizeCase> cases;
  for (const auto& [ih, iw, oh, ow, scales] : sizes)
    for (const std::string& t : transforms) {
      cases.push_back({"linear", t, "", ih, iw, oh, ow, scales});
      for (const char* r : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})
        cases.push_back({"nearest", t, r, ih, iw, oh, ow, scales});
    }
  return cases;
}

}  // namespace

TEST_CASE("a Resize tile equals the whole Resize bit for bit in every mode, transform and grid", "[kernels][resize]") {
  std::mt19937 rng(13);
  const std::vector<std::pair<std::vector<double>, std::vector<double>>> grids = {
      {{1, 1}, {1, 1}}, {{1, 1, 1}, {1}}, {{1}, {1, 1, 1}}, {{3, 1, 2}, {1, 2}}};
  int tiles_checked = 0;
  for (const ResizeCase& c : AllCases()) {
    INFO(c.mode << " " << c.transform << " " << c.rounding << " " << c.in_h << "x" << c.in_w << " -> " << c.out_h << "x"
                << c.out_w);
    const Attributes attrs = ResizeAttrs(c);
    const Shape xs = {1, 3, c.in_h, c.in_w};
    const std::vector<float> x = RandomValues(NumElements(xs), rng);
    auto whole = RunNode("Resize", attrs, {Activation(xs, x)}, {{1, 3, c.out_h, c.out_w}});
    REQUIRE(whole.status.ok());
    const SpatialWindow w = WindowOf(c, attrs);
    for (const auto& [rw, cw] : grids)
      for (const TileRegion& tile : GridTiles(c.out_h, c.out_w, rw, cw)) {
        auto regions = BackPropagateTile({w}, tile);
        REQUIRE(regions.ok());
        const TileLayerRegion& r = (*regions)[0];
        CHECK(r.pad_begin[0] + r.pad_begin[1] + r.pad_end[0] + r.pad_end[1] == 0);  // a Resize never pads
        auto run = RunTile(c, attrs, x, r.input, tile);
        INFO(run.status.ToString());
        REQUIRE(run.status.ok());
        CHECK(run.outputs[0] == Crop(whole.outputs[0], {1, 3, c.out_h, c.out_w}, tile));
        ++tiles_checked;
      }
  }
  CHECK(tiles_checked > 1000);
}

TEST_CASE("a Resize tile given one input row or column less than its halo region is refused", "[kernels][resize]") {
  // The kernel reads every index of the region (halo_test checks the region
  // is the minimal one): dropping its first or last row makes Prepare fail.
  std::mt19937 rng(14);
  for (const ResizeCase& c : AllCases()) {
    INFO(c.mode << " " << c.transform << " " << c.rounding << " " << c.in_h << "x" << c.in_w);
    const Attributes attrs = ResizeAttrs(c);
    const std::vector<float> x = RandomValues(3 * c.in_h * c.in_w, rng);
    const SpatialWindow w = WindowOf(c, attrs);
    for (const TileRegion& tile : GridTiles(c.out_h, c.out_w, {1, 1}, {1, 1})) {
      const TileRegion in = (*BackPropagateTile({w}, tile))[0].input;
      TileRegion less_top = in, less_bottom = in, less_left = in;
      ++less_top.rows.begin;
      --less_bottom.rows.end;
      ++less_left.cols.begin;
      for (const TileRegion& bad : {less_top, less_bottom, less_left}) {
        if (bad.rows.size() == 0 || bad.cols.size() == 0) continue;
        auto run = RunTile(c, attrs, x, bad, tile);
        CHECK(run.status.IsInvalidArgument());
      }
    }
  }
}

TEST_CASE("a Resize tile whose tile attributes lie outside the whole map is refused", "[kernels][resize]") {
  ResizeCase c{"linear", "half_pixel", "", 4, 4, 8, 8, {1, 1, 2, 2}};
  Attributes attrs = ResizeAttrs(c);
  const std::vector<float> x(3 * 16, 1.f);
  auto beyond = RunTile(c, attrs, x, {{0, 4}, {0, 4}}, {{4, 12}, {0, 8}});
  CHECK(beyond.status.IsInvalidArgument());
  attrs.Set(kResizeTileOutputOrigin, std::vector<int64_t>{0, 0});  // one of four attributes only
  auto partial = RunNode("Resize", attrs, {Activation({1, 3, 4, 4}, x)}, {{1, 3, 8, 8}});
  CHECK(partial.status.IsInvalidArgument());
}
