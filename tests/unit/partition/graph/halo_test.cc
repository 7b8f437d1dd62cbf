#include <array>
#include <catch2/catch.hpp>
#include <random>

#include "partition/graph/halo.h"

using namespace tessera;

namespace {
SpatialWindow Window(int64_t k, int64_t s, int64_t p, int64_t in, int64_t d = 1) {
  SpatialWindow w;
  for (int a = 0; a < 2; ++a) {
    w.kernel[a] = k, w.stride[a] = s, w.pad_begin[a] = p, w.dilation[a] = d, w.in_size[a] = in;
    w.out_size[a] = (in + 2 * p - (k - 1) * d - 1) / s + 1;
  }
  return w;
}
}  // namespace

TEST_CASE("a 3x3 pad-1 conv tile grows by one halo row and sees border padding only at the border") {
  std::vector<SpatialWindow> stack = {Window(3, 1, 1, 8)};
  // Top half [0,4): needs input [-1,5) -> clipped [0,5) with 1 row of top padding.
  auto top = BackPropagateTile(stack, {{0, 4}, {0, 8}});
  REQUIRE(top.ok());
  CHECK((*top)[0].input.rows == Range1D{0, 5});
  CHECK((*top)[0].pad_begin[0] == 1);
  CHECK((*top)[0].pad_end[0] == 0);
  CHECK((*top)[0].pad_begin[1] == 1);  // full width: both column borders
  CHECK((*top)[0].pad_end[1] == 1);
  // Bottom half [4,8): needs [3,9) -> [3,8) with 1 row of bottom padding.
  auto bottom = BackPropagateTile(stack, {{4, 8}, {0, 8}});
  REQUIRE(bottom.ok());
  CHECK((*bottom)[0].input.rows == Range1D{3, 8});
  CHECK((*bottom)[0].pad_begin[0] == 0);
  CHECK((*bottom)[0].pad_end[0] == 1);
}

TEST_CASE("halos accumulate backwards through a stack") {
  // conv3 p1 -> conv3 p1, tile rows [0,4) of 8: layer 2 needs [0,5) of layer 1's
  // output; layer 1 needs [-1,6) -> [0,6) of the input.
  std::vector<SpatialWindow> stack = {Window(3, 1, 1, 8), Window(3, 1, 1, 8)};
  auto r = BackPropagateTile(stack, {{0, 4}, {2, 6}});
  REQUIRE(r.ok());
  CHECK((*r)[1].input.rows == Range1D{0, 5});
  CHECK((*r)[0].output.rows == Range1D{0, 5});
  CHECK((*r)[0].input.rows == Range1D{0, 6});
  CHECK((*r)[0].input.cols == Range1D{0, 8});  // [2,6) -> [1,7) -> [0,8)
  CHECK((*r)[0].pad_begin[1] == 0);
}

TEST_CASE("strided and dilated windows map ranges by the METHODS §2 formula") {
  // k3 s2 p1 on 8 -> 4 outputs; outputs [2,4) need [2·2−1, 3·2+2+1−1) = [3,8).
  auto r = BackPropagateTile({Window(3, 2, 1, 8)}, {{2, 4}, {0, 4}});
  REQUIRE(r.ok());
  CHECK((*r)[0].input.rows == Range1D{3, 8});
  CHECK((*r)[0].pad_end[0] == 0);
  // k3 d2 p2 on 10 -> 10 outputs; outputs [0,3) need [−2, 2+4+1−2) = [−2,5).
  auto d = BackPropagateTile({Window(3, 1, 2, 10, 2)}, {{0, 3}, {0, 10}});
  REQUIRE(d.ok());
  CHECK((*d)[0].input.rows == Range1D{0, 5});
  CHECK((*d)[0].pad_begin[0] == 2);
}

TEST_CASE("every tile's clipped input plus its padding yields exactly the tile's outputs") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<SpatialWindow> stack;
    int64_t size = 16 + rng() % 40;
    int depth = 1 + rng() % 4;
    for (int l = 0; l < depth; ++l) {
      int64_t k = 1 + rng() % 4, s = 1 + rng() % 2, d = 1 + rng() % 2, p = rng() % (k * d);
      SpatialWindow w = Window(k, s, p, size, d);
      if (w.out_size[0] < 2) break;
      stack.push_back(w);
      size = w.out_size[0];
    }
    if (stack.empty()) continue;
    const int64_t out = stack.back().out_size[0];
    int n = 1 + rng() % std::min<int64_t>(4, out);
    for (const TileRegion& t : GridTiles(out, out, std::vector<double>(n, 1.0), {1.0})) {
      auto r = BackPropagateTile(stack, t);
      REQUIRE(r.ok());
      for (size_t i = 0; i < stack.size(); ++i) {
        const auto& w = stack[i];
        const auto& reg = (*r)[i];
        int64_t len = reg.input.rows.size() + reg.pad_begin[0] + reg.pad_end[0];
        int64_t produced = (len - (w.kernel[0] - 1) * w.dilation[0] - 1) / w.stride[0] + 1;
        CHECK(produced == reg.output.rows.size());
        if (i > 0) CHECK((*r)[i - 1].output == reg.input);
      }
    }
  }
}

TEST_CASE("proportional splits spread remainders: 64 over 3 is 22, 21, 21") {
  CHECK(SplitProportional(64, {1, 1, 1}) == std::vector<int64_t>{22, 21, 21});
  CHECK(SplitProportional(10, {2, 1}) == std::vector<int64_t>{7, 3});
  CHECK(SplitProportional(5, {1, 1, 1, 1, 1, 1}) == std::vector<int64_t>{1, 1, 1, 1, 1, 0});
  auto tiles = GridTiles(13, 13, {1, 1}, {1, 1});
  REQUIRE(tiles.size() == 4);
  CHECK(tiles[0] == TileRegion{{0, 7}, {0, 7}});
  CHECK(tiles[3] == TileRegion{{7, 13}, {7, 13}});
}

TEST_CASE("halo MAC overhead is zero for 1x1 stacks and positive for 3x3") {
  SpatialWindow pointwise = Window(1, 1, 0, 8);
  pointwise.macs_per_output = 16;
  auto tiles = GridTiles(8, 8, {1, 1}, {1, 1});
  CHECK(HaloMacOverhead({pointwise}, tiles) == 0);
  SpatialWindow a = Window(3, 1, 1, 8), b = Window(3, 1, 1, 8);
  a.macs_per_output = b.macs_per_output = 10;
  // Layer b computes exactly its tiles (no overlap); layer a computes 5x5 per tile
  // (one halo row and column into the neighbour): 4·25 − 64 = 36 extra outputs.
  CHECK(HaloMacOverhead({a, b}, tiles) == 36 * 10);
}

namespace {
// A Resize's window from a one-node graph (as the planner and compiler get it).
SpatialWindow ResizeWindow(const std::string& mode, const std::string& transform, const std::string& rounding,
                           int64_t in_h, int64_t out_h, std::vector<double> scales) {
  Graph g;
  const int x = g.AddValue("x", {1, 2, in_h, 5});
  const int y = g.AddValue("y", {1, 2, out_h, 5});
  g.inputs = {x};
  g.outputs = {y};
  Node n{"resize", "Resize", {x}, {y}, {}};
  n.attrs.Set("mode", mode);
  n.attrs.Set("coordinate_transformation_mode", transform);
  if (!rounding.empty()) n.attrs.Set("nearest_mode", rounding);
  if (!scales.empty()) n.attrs.Set("scales", scales);
  g.AddNode(n);
  auto w = SpatialWindowOf(g, g.nodes[0]);
  INFO(w.status().ToString());
  REQUIRE(w.ok());
  return *w;
}

// Brute force: every input row output rows [o0, o1) read, as [min, max + 1).
Range1D RowsRead(const ResizeAxis& a, int64_t o0, int64_t o1) {
  int64_t lo = a.in_size, hi = -1;
  for (int64_t o = o0; o < o1; ++o) {
    if (a.linear) {
      const LinearTap t = LinearSource(a, o);
      lo = std::min(lo, t.lo), hi = std::max(hi, t.hi);
    } else {
      lo = std::min(lo, NearestSource(a, o)), hi = std::max(hi, NearestSource(a, o));
    }
  }
  return {lo, hi + 1};
}
}  // namespace

TEST_CASE("a bilinear 2x Resize tile reads its rows' two taps and no more") {
  // half_pixel 8 -> 16: output o reads floor(s), floor(s)+1 for s = (o+0.5)/2 − 0.5.
  // Rows [0,8): s from −0.25 (row 0 only, clamped) to 3.25 (rows 3, 4) -> [0,5).
  // Rows [8,16): s from 3.75 (rows 3, 4) to 7.25 (row 7, clamped) -> [3,8).
  const SpatialWindow w = ResizeWindow("linear", "half_pixel", "", 8, 16, {1, 1, 2, 1});
  auto top = BackPropagateTile({w}, {{0, 8}, {0, 5}});
  REQUIRE(top.ok());
  CHECK((*top)[0].input.rows == Range1D{0, 5});
  CHECK((*top)[0].pad_begin[0] == 0);
  CHECK((*top)[0].pad_end[0] == 0);
  auto bottom = BackPropagateTile({w}, {{8, 16}, {0, 5}});
  REQUIRE(bottom.ok());
  CHECK((*bottom)[0].input.rows == Range1D{3, 8});
  // align_corners 5 -> 9: s = o/2; row 4 lands exactly on input 2 (weight 0
  // on row 3), so rows [0,5) read [0,3), not [0,4).
  const SpatialWindow ac = ResizeWindow("linear", "align_corners", "", 5, 9, {});
  CHECK(InputRangeOf(ac, 0, {0, 5}) == Range1D{0, 3});
  CHECK(InputRangeOf(ac, 0, {5, 9}) == Range1D{2, 5});
  // Nearest asymmetric floor 2x: outputs [4,8) copy inputs 2, 2, 3, 3.
  const SpatialWindow nn = ResizeWindow("nearest", "asymmetric", "floor", 8, 16, {1, 1, 2, 1});
  CHECK(InputRangeOf(nn, 0, {4, 8}) == Range1D{2, 4});
  CHECK(MaxInputSpan(nn, 0, 4) == 3);  // [1,5) reads 0, 1, 1, 2
  CHECK(MaxInputSpan(nn, 0, 3) == 2);  // [1,4) reads 0, 1, 1
}

TEST_CASE("a Resize tile's input range is exactly the rows it reads, for every mode and scale") {
  const std::vector<std::tuple<int64_t, int64_t, std::vector<double>>> sizes = {
      {7, 14, {1, 1, 2, 1}}, {6, 9, {1, 1, 1.5, 1}}, {9, 4, {1, 1, 0.5, 1}}, {7, 11, {}}, {13, 5, {}}};
  int checked = 0;
  for (const char* transform : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                "tf_half_pixel_for_nn", "half_pixel_symmetric"})
    for (const char* mode : {"linear", "nearest"})
      for (const char* rounding : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})
        for (const auto& [in_h, out_h, scales] : sizes) {
          const SpatialWindow w = ResizeWindow(mode, transform, rounding, in_h, out_h, scales);
          for (int64_t o0 = 0; o0 < out_h; ++o0)
            for (int64_t o1 = o0 + 1; o1 <= out_h; ++o1) {
              INFO(mode << " " << transform << " " << rounding << " " << in_h << "->" << out_h << " [" << o0 << ","
                        << o1 << ")");
              const Range1D got = InputRangeOf(w, 0, {o0, o1});
              REQUIRE(got == RowsRead(w.resize[0], o0, o1));  // an extra row either side fails here
              ++checked;
            }
          int64_t widest = 0;
          for (int64_t o0 = 0; o0 + 3 <= out_h; ++o0)
            widest = std::max(widest, RowsRead(w.resize[0], o0, o0 + 3).size());
          CHECK(MaxInputSpan(w, 0, 3) == std::min(widest, in_h));
        }
  CHECK(checked > 1000);
}

TEST_CASE("halos accumulate backwards through conv -> Resize -> conv") {
  // conv3 p1 (10 -> 10), Resize nearest asymmetric floor 2x (10 -> 20), conv3 p1 (20 -> 20).
  SpatialWindow up = ResizeWindow("nearest", "asymmetric", "floor", 10, 20, {1, 1, 2, 1});
  up.in_size[1] = 10, up.out_size[1] = 20;
  up.resize[1] = up.resize[0];
  std::vector<SpatialWindow> stack = {Window(3, 1, 1, 10), up, Window(3, 1, 1, 20)};
  // Output rows [10,20) -> conv needs [9,21) -> [9,20) padded below; Resize
  // rows [9,20) read inputs [4,10); the first conv needs [3,11) -> [3,10).
  auto r = BackPropagateTile(stack, {{10, 20}, {0, 20}});
  REQUIRE(r.ok());
  CHECK((*r)[2].input.rows == Range1D{9, 20});
  CHECK((*r)[1].input.rows == Range1D{4, 10});
  CHECK((*r)[0].input.rows == Range1D{3, 10});
  CHECK((*r)[0].pad_end[0] == 1);
  // The Resize copies (0 MACs); its neighbours' recomputed halo rows count.
  CHECK(HaloMacOverhead(stack, {{{0, 10}, {0, 20}}, {{10, 20}, {0, 20}}}) > 0);
}

TEST_CASE("a Resize that antialiases, resizes channels or is cubic is not tileable") {
  Graph g;
  const int x = g.AddValue("x", {1, 2, 4, 4});
  const int y = g.AddValue("y", {1, 4, 8, 8});
  Node n{"resize", "Resize", {x}, {y}, {}};
  g.AddNode(n);
  CHECK(SpatialWindowOf(g, g.nodes[0]).status().IsNotSupported());  // channels 2 -> 4
  g.values[y].shape = {1, 2, 8, 8};
  g.nodes[0].attrs.Set("mode", std::string("cubic"));
  CHECK(SpatialWindowOf(g, g.nodes[0]).status().IsNotSupported());
  g.nodes[0].attrs.Set("mode", std::string("linear"));
  g.nodes[0].attrs.Set("antialias", int64_t{1});
  CHECK(SpatialWindowOf(g, g.nodes[0]).status().IsNotSupported());
  g.nodes[0].attrs.Set("antialias", int64_t{0});
  CHECK(SpatialWindowOf(g, g.nodes[0]).ok());
}

namespace {
SpatialWindow Transposed(int64_t k, int64_t s, int64_t p, int64_t d, int64_t in, int64_t out_pad, int64_t p_end) {
  SpatialWindow w;
  w.map = SpatialMap::kTransposed;
  for (int a = 0; a < 2; ++a) {
    w.kernel[a] = k, w.stride[a] = s, w.pad_begin[a] = p, w.dilation[a] = d, w.in_size[a] = in;
    w.out_size[a] = s * (in - 1) + out_pad + (k - 1) * d + 1 - p - p_end;
  }
  return w;
}
}  // namespace

TEST_CASE("a ConvTranspose tile's input range is the hull of the inputs that reach it") {
  // k s p d in output_padding pad_end: ops_decoder's, stride > kernel (gaps),
  // dilation, asymmetric pads.
  const std::vector<std::array<int64_t, 7>> cases = {{3, 2, 1, 1, 10, 1, 1}, {2, 3, 0, 2, 7, 2, 0},
                                                     {2, 4, 0, 1, 5, 3, 0},  {4, 2, 2, 1, 6, 0, 1},
                                                     {3, 1, 1, 2, 8, 0, 1},  {1, 2, 0, 1, 6, 1, 0}};
  int checked = 0, unreached = 0;
  for (const auto& [k, s, p, d, in, op, pe] : cases) {
    const SpatialWindow w = Transposed(k, s, p, d, in, op, pe);
    for (int64_t o0 = 0; o0 < w.out_size[0]; ++o0)
      for (int64_t o1 = o0 + 1; o1 <= w.out_size[0]; ++o1) {
        int64_t lo = in, hi = -1;  // brute force: every (i, j) landing in [o0, o1)
        for (int64_t i = 0; i < in; ++i)
          for (int64_t j = 0; j < k; ++j)
            if (const int64_t o = i * s - p + j * d; o >= o0 && o < o1) lo = std::min(lo, i), hi = std::max(hi, i);
        INFO("k" << k << " s" << s << " p" << p << " d" << d << " [" << o0 << "," << o1 << ")");
        const Range1D got = InputRangeOf(w, 0, {o0, o1});
        if (hi < 0) {  // no input reaches: one row, in range
          CHECK(got.size() == 1);
          CHECK((got.begin >= 0 && got.end <= in));
          ++unreached;
        } else {
          REQUIRE(got == Range1D{lo, hi + 1});  // an extra row either side fails here
        }
        ++checked;
      }
  }
  CHECK(checked > 500);
  CHECK(unreached > 0);
  // Stride 2, k3, p1 on 10 -> 20: outputs [0,10) gather from inputs i with
  // 2i − 1 + j ∈ [0,10): i ∈ [0, 5]; the tile sees no padding.
  auto r = BackPropagateTile({Transposed(3, 2, 1, 1, 10, 1, 1)}, {{0, 10}, {10, 20}});
  REQUIRE(r.ok());
  CHECK((*r)[0].input.rows == Range1D{0, 6});
  CHECK((*r)[0].input.cols == Range1D{5, 10});
  CHECK((*r)[0].pad_begin[0] + (*r)[0].pad_end[0] == 0);
}
