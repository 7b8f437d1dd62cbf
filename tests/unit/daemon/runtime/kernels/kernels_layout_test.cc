// Data-movement and normalisation kernels: Concat, Reshape/Flatten/Identity,
// Transpose, Softmax, Pad, Resize (nearest), Slice, BatchNormalization and
// the reductions, against naive references and hand-computed values.
#include <numeric>

#include "daemon/runtime/executor.h"
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

using testing::Activation;
using testing::ExpectClose;
using testing::RandomValues;
using testing::RunNode;
using testing::ToDouble;
using testing::Weights;

Attributes With(std::initializer_list<std::pair<const char*, AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.Set(k, v);
  return a;
}

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.f);
  return v;
}

// Multi-index helpers for references.
std::vector<int64_t> Unflatten(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}
int64_t Flatten(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

TEST_CASE("concat joins inputs along any axis, negative axes included", "[kernels][concat]") {
  std::mt19937 rng(51);
  for (int64_t axis = -4; axis < 4; ++axis) {
    const int64_t a = axis < 0 ? axis + 4 : axis;
    Shape s0{2, 3, 4, 5}, s1 = s0, s2 = s0;
    s1[a] = 1;
    s2[a] = 2;
    Shape out = s0;
    out[a] = s0[a] + 3;
    auto v0 = RandomValues(NumElements(s0), rng), v1 = RandomValues(NumElements(s1), rng),
         v2 = RandomValues(NumElements(s2), rng);
    auto run = RunNode("Concat", With({{"axis", axis}}), {Activation(s0, v0), Weights(s1, v1), Activation(s2, v2)},
                       {out});
    REQUIRE(run.status.ok());
    std::vector<double> ref(NumElements(out));
    for (int64_t f = 0; f < NumElements(out); ++f) {
      auto idx = Unflatten(f, out);
      if (idx[a] < s0[a]) {
        ref[f] = v0[Flatten(idx, s0)];
      } else if (idx[a] < s0[a] + 1) {
        idx[a] -= s0[a];
        ref[f] = v1[Flatten(idx, s1)];
      } else {
        idx[a] -= s0[a] + 1;
        ref[f] = v2[Flatten(idx, s2)];
      }
    }
    ExpectClose(run.outputs[0], ref, 0, 0);
  }
}

TEST_CASE("concat rejects inputs that differ off the axis", "[kernels][concat][errors]") {
  auto run = RunNode("Concat", With({{"axis", int64_t{1}}}),
                     {Activation({1, 2, 3}, std::vector<float>(6)), Activation({1, 2, 4}, std::vector<float>(8))},
                     {{1, 4, 3}}, 1, "route_12");
  REQUIRE(run.status.IsInvalidArgument());
  CHECK_THAT(run.status.message(), Catch::Contains("route_12") && Catch::Contains("Concat"));
  auto axis = RunNode("Concat", With({{"axis", int64_t{3}}}), {Activation({1, 2, 3}, std::vector<float>(6))},
                      {{1, 2, 3}}, 1, "cat_axis");
  REQUIRE(axis.status.IsInvalidArgument());
}

TEST_CASE("reshape, flatten and identity copy the data unchanged", "[kernels][copy]") {
  auto x = Iota(24);
  auto reshape = RunNode("Reshape", With({{"shape", std::vector<int64_t>{4, -1}}}), {Activation({2, 3, 4}, x)}, {{4, 6}});
  auto flatten = RunNode("Flatten", {}, {Activation({2, 3, 4}, x)}, {{2, 12}});
  auto identity = RunNode("Identity", {}, {Activation({2, 3, 4}, x)}, {{2, 3, 4}});
  for (auto* r : {&reshape, &flatten, &identity}) {
    REQUIRE(r->status.ok());
    ExpectClose(r->outputs[0], ToDouble(x), 0, 0);
  }
}

TEST_CASE("reshape rejects an element count change and a disagreeing shape attr", "[kernels][copy][errors]") {
  auto count = RunNode("Reshape", {}, {Activation({2, 3}, std::vector<float>(6))}, {{7}}, 1, "reshape_bad");
  REQUIRE(count.status.IsInvalidArgument());
  CHECK_THAT(count.status.message(), Catch::Contains("reshape_bad"));
  auto attr = RunNode("Reshape", With({{"shape", std::vector<int64_t>{3, 2}}}), {Activation({2, 3}, std::vector<float>(6))},
                      {{6}}, 1, "reshape_attr");
  REQUIRE(attr.status.IsInvalidArgument());
  auto flat = RunNode("Flatten", With({{"axis", int64_t{2}}}), {Activation({2, 3, 4}, std::vector<float>(24))}, {{2, 12}},
                      1, "flatten_axis");
  REQUIRE(flat.status.IsInvalidArgument());
}

TEST_CASE("transpose permutes dimensions for every permutation of rank 4", "[kernels][transpose]") {
  std::mt19937 rng(52);
  const Shape in{2, 3, 1, 5};
  std::vector<int64_t> perm = {0, 1, 2, 3};
  auto x = RandomValues(NumElements(in), rng);
  do {
    INFO("perm " << perm[0] << perm[1] << perm[2] << perm[3]);
    Shape out(4);
    for (int i = 0; i < 4; ++i) out[i] = in[perm[i]];
    auto run = RunNode("Transpose", With({{"perm", perm}}), {Activation(in, x)}, {out});
    REQUIRE(run.status.ok());
    std::vector<double> ref(x.size());
    for (int64_t f = 0; f < NumElements(out); ++f) {
      auto oi = Unflatten(f, out);
      std::vector<int64_t> ii(4);
      for (int i = 0; i < 4; ++i) ii[perm[i]] = oi[i];
      ref[f] = x[Flatten(ii, in)];
    }
    ExpectClose(run.outputs[0], ref, 0, 0);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST_CASE("transpose without perm reverses the dimensions", "[kernels][transpose]") {
  auto run = RunNode("Transpose", {}, {Activation({2, 3}, Iota(6))}, {{3, 2}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], {0, 3, 1, 4, 2, 5});
  auto bad = RunNode("Transpose", With({{"perm", std::vector<int64_t>{0, 0}}}), {Activation({2, 3}, Iota(6))}, {{2, 2}},
                     1, "tr");
  REQUIRE(bad.status.IsInvalidArgument());
  CHECK_THAT(bad.status.message(), Catch::Contains("tr") && Catch::Contains("perm"));
}

TEST_CASE("softmax normalises along one axis (opset 13)", "[kernels][softmax]") {
  std::mt19937 rng(53);
  const Shape s{2, 3, 4};
  auto x = RandomValues(24, rng, -5.f, 5.f);
  for (int64_t axis : {-1, 0, 1, 2}) {
    const int64_t a = axis < 0 ? 2 : axis;
    auto run = RunNode("Softmax", With({{"axis", axis}}), {Activation(s, x)}, {s});
    REQUIRE(run.status.ok());
    std::vector<double> ref(24);
    for (int64_t f = 0; f < 24; ++f) {
      auto idx = Unflatten(f, s);
      double denom = 0;
      for (int64_t k = 0; k < s[a]; ++k) {
        auto j = idx;
        j[a] = k;
        denom += std::exp(double(x[Flatten(j, s)]));
      }
      ref[f] = std::exp(double(x[f])) / denom;
    }
    ExpectClose(run.outputs[0], ref, 1e-5, 1e-7);
  }
  // Large logits stay finite.
  auto big = RunNode("Softmax", {}, {Activation({2}, {1000.f, 1000.f})}, {{2}});
  ExpectClose(big.outputs[0], {0.5, 0.5});
}

TEST_CASE("pad supports constant, reflect and edge modes with ONNX pad order", "[kernels][pad]") {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // [2,3]
  const std::vector<int64_t> pads = {1, 2, 0, 1};   // dim0 begin 1, dim1 begin 2, dim0 end 0, dim1 end 1
  auto constant = RunNode("Pad", With({{"pads", pads}, {"value", 9.0}}), {Activation({2, 3}, x)}, {{3, 6}});
  REQUIRE(constant.status.ok());
  ExpectClose(constant.outputs[0], {9, 9, 9, 9, 9, 9,  //
                                    9, 9, 1, 2, 3, 9,  //
                                    9, 9, 4, 5, 6, 9});
  auto reflect = RunNode("Pad", With({{"pads", pads}, {"mode", std::string("reflect")}}), {Activation({2, 3}, x)},
                         {{3, 6}});
  REQUIRE(reflect.status.ok());
  ExpectClose(reflect.outputs[0], {6, 5, 4, 5, 6, 5,  //
                                   3, 2, 1, 2, 3, 2,  //
                                   6, 5, 4, 5, 6, 5});
  auto edge = RunNode("Pad", With({{"pads", pads}, {"mode", std::string("edge")}}), {Activation({2, 3}, x)}, {{3, 6}});
  REQUIRE(edge.status.ok());
  ExpectClose(edge.outputs[0], {1, 1, 1, 2, 3, 3,  //
                                1, 1, 1, 2, 3, 3,  //
                                4, 4, 4, 5, 6, 6});
}

TEST_CASE("pad reads pads from a constant input and crops with negative pads", "[kernels][pad]") {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  auto run = RunNode("Pad", {}, {Activation({2, 3}, x), Weights({4}, {0, -1, 0, 1}), Weights({}, {7})}, {{2, 3}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], {2, 3, 7, 5, 6, 7});
}

TEST_CASE("pad rejects a wrong pads length and an unknown mode", "[kernels][pad][errors]") {
  auto len = RunNode("Pad", With({{"pads", std::vector<int64_t>{1, 1}}}), {Activation({2, 3}, std::vector<float>(6))},
                     {{3, 4}}, 1, "pad0");
  REQUIRE(len.status.IsInvalidArgument());
  CHECK_THAT(len.status.message(), Catch::Contains("pad0") && Catch::Contains("pads"));
  auto mode = RunNode("Pad", With({{"pads", std::vector<int64_t>{0, 0, 0, 0}}, {"mode", std::string("wrap")}}),
                      {Activation({2, 3}, std::vector<float>(6))}, {{2, 3}}, 1, "pad1");
  REQUIRE(mode.status.IsNotSupported());
}

TEST_CASE("nearest resize follows the coordinate transformation and rounding modes", "[kernels][resize]") {
  const std::vector<float> row = {10, 20, 30, 40};
  auto resize = [&](const std::string& transform, const std::string& rounding, int64_t out, double scale) {
    auto run = RunNode("Resize",
                       With({{"scales", std::vector<double>{1.0, scale}},
                             {"coordinate_transformation_mode", transform},
                             {"nearest_mode", rounding}}),
                       {Activation({1, 4}, row)}, {{1, out}});
    REQUIRE(run.status.ok());
    return run.outputs[0];
  };
  ExpectClose(resize("asymmetric", "floor", 8, 2.0), {10, 10, 20, 20, 30, 30, 40, 40});
  ExpectClose(resize("half_pixel", "round_prefer_floor", 8, 2.0), {10, 10, 20, 20, 30, 30, 40, 40});
  // Downsampling by 2 with half_pixel lands on ties: x = 0.5, 2.5.
  ExpectClose(resize("half_pixel", "round_prefer_floor", 2, 0.5), {10, 30});
  ExpectClose(resize("half_pixel", "round_prefer_ceil", 2, 0.5), {20, 40});
  ExpectClose(resize("asymmetric", "ceil", 2, 0.5), {10, 30});
  ExpectClose(resize("tf_half_pixel_for_nn", "floor", 2, 0.5), {20, 40});
  // align_corners 4 -> 7: x·3/6 = 0, .5, 1, 1.5, 2, 2.5, 3.
  ExpectClose(resize("align_corners", "round_prefer_ceil", 7, 1.75), {10, 20, 20, 30, 30, 40, 40});
  ExpectClose(resize("pytorch_half_pixel", "floor", 8, 2.0), {10, 10, 10, 20, 20, 30, 30, 40});
}

TEST_CASE("nearest resize 2x upsamples NCHW planes without scales", "[kernels][resize]") {
  std::mt19937 rng(54);
  auto x = RandomValues(2 * 3 * 4 * 5, rng);
  auto run = RunNode("Resize", With({{"coordinate_transformation_mode", std::string("asymmetric")},
                                     {"nearest_mode", std::string("floor")}}),
                     {Activation({2, 3, 4, 5}, x)}, {{2, 3, 8, 10}}, 2);
  REQUIRE(run.status.ok());
  std::vector<double> ref;
  for (int p = 0; p < 6; ++p)
    for (int h = 0; h < 8; ++h)
      for (int w = 0; w < 10; ++w) ref.push_back(x[(p * 4 + h / 2) * 5 + w / 2]);
  ExpectClose(run.outputs[0], ref, 0, 0);
}

TEST_CASE("resize rejects cubic mode, linear over channels and scales that contradict the output",
          "[kernels][resize][errors]") {
  auto cubic = RunNode("Resize", With({{"mode", std::string("cubic")}}), {Activation({1, 4}, std::vector<float>(4))},
                       {{1, 8}}, 1, "up1");
  REQUIRE(cubic.status.IsNotSupported());
  CHECK_THAT(cubic.status.message(), Catch::Contains("up1"));
  auto channels = RunNode("Resize", With({{"mode", std::string("linear")}}),
                          {Activation({1, 2, 4, 4}, std::vector<float>(32))}, {{1, 4, 4, 4}}, 1, "up3");
  REQUIRE(channels.status.IsNotSupported());
  CHECK_THAT(channels.status.message(), Catch::Contains("up3"));
  auto scales = RunNode("Resize", With({{"scales", std::vector<double>{1.0, 2.0}}}),
                        {Activation({1, 4}, std::vector<float>(4))}, {{1, 12}}, 1, "up2");
  REQUIRE(scales.status.IsInvalidArgument());
}

TEST_CASE("linear resize interpolates rows and columns with each coordinate transformation", "[kernels][resize]") {
  // One 2x3 plane resized to 3x5; expected values from ONNX's x_original
  // formulas, computed by hand: align_corners maps the corners exactly.
  const std::vector<float> x = {0, 10, 20, 30, 40, 50};
  auto align =
      RunNode("Resize",
              With({{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("align_corners")}}),
              {Activation({1, 1, 2, 3}, x)}, {{1, 1, 3, 5}});
  REQUIRE(align.status.ok());
  ExpectClose(align.outputs[0], {0, 5, 10, 15, 20, 15, 20, 25, 30, 35, 30, 35, 40, 45, 50}, 1e-5, 1e-5);
  // asymmetric, scales 2: source = out/2, the last row/column clamps.
  auto asym = RunNode("Resize",
                      With({{"mode", std::string("linear")},
                            {"coordinate_transformation_mode", std::string("asymmetric")},
                            {"scales", std::vector<double>{1, 1, 2, 2}}}),
                      {Activation({1, 1, 2, 3}, x)}, {{1, 1, 4, 6}});
  REQUIRE(asym.status.ok());
  ExpectClose(asym.outputs[0],
              {0, 5, 10, 15, 20, 20, 15, 20, 25, 30, 35, 35, 30, 35, 40, 45, 50, 50, 30, 35, 40, 45, 50, 50}, 1e-5,
              1e-5);
  // half_pixel, 2x3 -> 4x6: source = (o + 0.5)/2 - 0.5 = -0.25, 0.25, 0.75, ...
  auto half = RunNode("Resize", With({{"mode", std::string("linear")}}), {Activation({1, 1, 2, 3}, x)}, {{1, 1, 4, 6}});
  REQUIRE(half.status.ok());
  const double r[4] = {0, 0.25, 0.75, 1};  // row weights of row 1 (clamped at the ends)
  const double c[6] = {0, 0.25, 0.75, 1.25, 1.75, 2};
  std::vector<double> want;
  for (double rw : r)
    for (double cw : c) want.push_back(rw * 30 + cw * 10);
  ExpectClose(half.outputs[0], want, 1e-5, 1e-5);
}

TEST_CASE("slice takes starts, ends, axes and steps with ONNX clamping", "[kernels][slice]") {
  const auto x = Iota(20);  // [4,5]
  auto basic = RunNode("Slice", With({{"starts", std::vector<int64_t>{1, 0}}, {"ends", std::vector<int64_t>{3, 5}}}),
                       {Activation({4, 5}, x)}, {{2, 5}});
  REQUIRE(basic.status.ok());
  ExpectClose(basic.outputs[0], {5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
  auto stepped = RunNode("Slice",
                         With({{"starts", std::vector<int64_t>{-1}}, {"ends", std::vector<int64_t>{-1000}},
                               {"axes", std::vector<int64_t>{1}}, {"steps", std::vector<int64_t>{-2}}}),
                         {Activation({4, 5}, x)}, {{4, 3}});
  REQUIRE(stepped.status.ok());
  ExpectClose(stepped.outputs[0], {4, 2, 0, 9, 7, 5, 14, 12, 10, 19, 17, 15});
  auto inputs = RunNode("Slice", {},
                        {Activation({4, 5}, x), Weights({1}, {1}), Weights({1}, {1e30f}), Weights({1}, {0}),
                         Weights({1}, {2})},
                        {{2, 5}});
  REQUIRE(inputs.status.ok());
  ExpectClose(inputs.outputs[0], {5, 6, 7, 8, 9, 15, 16, 17, 18, 19});
  auto bad = RunNode("Slice", With({{"starts", std::vector<int64_t>{0}}, {"ends", std::vector<int64_t>{2}}}),
                     {Activation({4, 5}, x)}, {{3, 5}}, 1, "slice0");
  REQUIRE(bad.status.IsInvalidArgument());
  CHECK_THAT(bad.status.message(), Catch::Contains("slice0"));
}

TEST_CASE("batch normalization applies per-channel statistics", "[kernels][batchnorm]") {
  std::mt19937 rng(55);
  const Shape s{2, 3, 4, 2};
  auto x = RandomValues(NumElements(s), rng);
  auto scale = RandomValues(3, rng), bias = RandomValues(3, rng), mean = RandomValues(3, rng),
       var = RandomValues(3, rng, 0.1f, 2.f);
  std::vector<double> ref;
  for (int64_t f = 0; f < NumElements(s); ++f) {
    const int64_t c = (f / 8) % 3;
    ref.push_back((x[f] - mean[c]) / std::sqrt(double(var[c]) + 1e-3) * scale[c] + bias[c]);
  }
  for (bool constant : {true, false}) {
    auto param = [&](Shape sh, std::vector<float> v) {
      return constant ? Weights(std::move(sh), std::move(v)) : Activation(std::move(sh), std::move(v));
    };
    auto run = RunNode("BatchNormalization", With({{"epsilon", 1e-3}}),
                       {Activation(s, x), param({3}, scale), param({3}, bias), param({3}, mean), param({3}, var)}, {s});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], ref, 1e-5, 1e-5);
  }
  auto bad = RunNode("BatchNormalization", {},
                     {Activation(s, x), Weights({2}, {1, 1}), Weights({3}, bias), Weights({3}, mean), Weights({3}, var)},
                     {s}, 1, "bn3");
  REQUIRE(bad.status.IsInvalidArgument());
  CHECK_THAT(bad.status.message(), Catch::Contains("bn3") && Catch::Contains("scale"));
}

TEST_CASE("reductions over spatial axes with and without keepdims", "[kernels][reduce]") {
  std::mt19937 rng(56);
  const Shape s{2, 3, 4, 5};
  auto x = RandomValues(NumElements(s), rng);
  std::vector<double> mean, sum, mx;
  for (int p = 0; p < 6; ++p) {
    double total = 0, m = -1e30;
    for (int i = 0; i < 20; ++i) {
      total += x[p * 20 + i];
      m = std::max(m, double(x[p * 20 + i]));
    }
    mean.push_back(total / 20);
    sum.push_back(total);
    mx.push_back(m);
  }
  const std::vector<int64_t> axes = {2, 3};
  auto keep = RunNode("ReduceMean", With({{"axes", axes}}), {Activation(s, x)}, {{2, 3, 1, 1}});
  auto drop = RunNode("ReduceMean", With({{"axes", std::vector<int64_t>{-1, -2}}, {"keepdims", int64_t{0}}}),
                      {Activation(s, x)}, {{2, 3}});
  auto total = RunNode("ReduceSum", With({{"axes", axes}}), {Activation(s, x)}, {{2, 3, 1, 1}});
  auto maxed = RunNode("ReduceMax", {}, {Activation(s, x), Weights({2}, {2, 3})}, {{2, 3, 1, 1}});
  for (auto* r : {&keep, &drop, &total, &maxed}) REQUIRE(r->status.ok());
  ExpectClose(keep.outputs[0], mean, 1e-5, 1e-6);
  ExpectClose(drop.outputs[0], mean, 1e-5, 1e-6);
  ExpectClose(total.outputs[0], sum, 1e-5, 1e-6);
  ExpectClose(maxed.outputs[0], mx, 0, 0);
  // Reducing the channel axis (strided accumulation) and everything.
  auto channels = RunNode("ReduceSum", With({{"axes", std::vector<int64_t>{1}}}), {Activation(s, x)}, {{2, 1, 4, 5}});
  REQUIRE(channels.status.ok());
  std::vector<double> ref_c(40, 0.0);
  for (int64_t f = 0; f < NumElements(s); ++f) ref_c[(f / 60) * 20 + f % 20] += x[f];
  ExpectClose(channels.outputs[0], ref_c, 1e-5, 1e-6);
  auto all = RunNode("ReduceMean", With({{"keepdims", int64_t{0}}}), {Activation(s, x)}, {{}});
  REQUIRE(all.status.ok());
  double grand = 0;
  for (float v : x) grand += v;
  ExpectClose(all.outputs[0], {grand / x.size()}, 1e-5, 1e-6);
  auto bad = RunNode("ReduceMean", With({{"axes", axes}}), {Activation(s, x)}, {{2, 3}}, 1, "gap_mean");
  REQUIRE(bad.status.IsInvalidArgument());
  CHECK_THAT(bad.status.message(), Catch::Contains("gap_mean"));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// x -> relu -> a, x -> sigmoid -> b, concat(a, b) on `axis` -> c, then a
// global average pool (small) so the concat is the arena's peak.
Graph ConcatGraph(const Shape& x_shape, int64_t axis) {
  Graph g;
  const int x = g.AddValue("x", x_shape);
  const int a = g.AddValue("a", x_shape);
  const int b = g.AddValue("b", x_shape);
  Shape c_shape = x_shape;
  c_shape[axis] *= 2;
  const int c = g.AddValue("c", c_shape);
  const int d = g.AddValue("d", {c_shape[0], c_shape[1], 1, 1});
  g.inputs = {x};
  g.AddNode(Node{"relu", "Relu", {x}, {a}, {}});
  g.AddNode(Node{"sigmoid", "Sigmoid", {x}, {b}, {}});
  Attributes at;
  at.Set("axis", axis);
  g.AddNode(Node{"cat", "Concat", {a, b}, {c}, at});
  g.AddNode(Node{"pool", "GlobalAveragePool", {c}, {d}, {}});
  g.outputs = {d};
  return g;
}

TEST_CASE("a concat's inputs are written in place into its output: smaller arena, same answers",
          "[kernels][concat][executor]") {
  // 16 channels of 8x8: each input is a 4 KiB band of the 8 KiB output.
  // Copied, the peak is at the concat (a + b + c = 16 KiB); in place the
  // output's 8 KiB live from relu on, beside x (4 KiB): 12 KiB. Misaligned
  // bands (3 channels of 5x5: the second band starts at byte 300) and a
  // concat whose bands are not contiguous (axis 2) are copied as before.
  struct Case {
    Shape x;
    int64_t axis;
    size_t arena;
  };
  for (const Case& k : {Case{{1, 16, 8, 8}, 1, 12288}, Case{{1, 3, 5, 5}, 1, 0}, Case{{1, 4, 6, 8}, 2, 0}}) {
    CAPTURE(k.x, k.axis);
    const Graph g = ConcatGraph(k.x, k.axis);
    auto ex = Executor::Create(g, ExecutorOptions{});
    REQUIRE(ex.ok());
    std::mt19937 rng(7);
    const std::vector<float> x = RandomValues(NumElements(k.x), rng);
    std::vector<TensorData> out;
    REQUIRE((*ex)->Run({TensorData{k.x, x}}, &out).ok());
    // Reference: per channel of c, the mean of relu(x) or sigmoid(x) over its plane.
    const Shape& cs = g.values[g.outputs[0]].shape;
    std::vector<double> ref(static_cast<size_t>(cs[1]), 0.0);
    const int64_t plane = k.x[2] * k.x[3];
    for (int64_t ch = 0; ch < cs[1]; ++ch) {
      double sum = 0;
      if (k.axis == 1) {
        const int64_t src = ch % k.x[1];
        for (int64_t i = 0; i < plane; ++i) {
          const float v = x[src * plane + i];
          sum += ch < k.x[1] ? std::max(v, 0.f) : 1.0 / (1.0 + std::exp(-static_cast<double>(v)));
        }
        ref[ch] = sum / plane;
      } else {
        for (int64_t i = 0; i < plane; ++i) {
          const float v = x[ch * plane + i];
          sum += std::max(v, 0.f) + 1.0 / (1.0 + std::exp(-static_cast<double>(v)));
        }
        ref[ch] = sum / (2 * plane);
      }
    }
    ExpectClose(out[0].values, ref, 1e-6, 1e-6);
    if (k.arena) CHECK((*ex)->arena_bytes() == k.arena);
  }
  // The copied arena of the aligned case, for comparison: 16 KiB.
  const Graph g = ConcatGraph({1, 16, 8, 8}, 1);
  auto lower = Executor::Create(g, ExecutorOptions{});
  REQUIRE(lower.ok());
  CHECK((*lower)->arena_lower_bound() <= 12288);
}

}  // namespace
}  // namespace tessera
