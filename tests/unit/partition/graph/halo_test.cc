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
