// The darknet-only kernels (Reorg, Region, DarknetCrop, DarknetShortcut)
// against naive transcriptions of darknet's index formulas, and seeded
// darknet models run end to end through the Executor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/darknet_registry.h"
#include "kernels_testing.h"
#include "partition/import/model_import.h"
#include "planner/arena_milp.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// darknet blas.c reorg_cpu, transcribed loop by loop; `forward` as darknet
// names it (forward_reorg_layer passes 0 for reverse=0, 1 for reverse=1).
std::vector<double> NaiveReorg(const std::vector<float>& x, int w, int h, int c, int batch, int stride, int forward) {
  std::vector<double> out(x.size(), 0.0);
  const int out_c = c / (stride * stride);
  for (int b = 0; b < batch; ++b)
    for (int k = 0; k < c; ++k)
      for (int j = 0; j < h; ++j)
        for (int i = 0; i < w; ++i) {
          const int in_index = i + w * (j + h * (k + c * b));
          const int c2 = k % out_c;
          const int offset = k / out_c;
          const int w2 = i * stride + offset % stride;
          const int h2 = j * stride + offset / stride;
          const int out_index = w2 + w * stride * (h2 + h * stride * (c2 + out_c * b));
          if (forward)
            out[out_index] = x[in_index];
          else
            out[in_index] = x[out_index];
        }
  return out;
}

Attributes ReorgAttrs(int64_t stride, int64_t reverse) {
  Attributes a;
  a.Set("stride", stride);
  a.Set("reverse", reverse);
  return a;
}

}  // namespace

TEST_CASE("darknet ops are registered in the darknet kernel table") {
  for (const char* op : {"Reorg", "Region", "DarknetCrop", "DarknetShortcut"}) {
    INFO(op);
    CHECK(FindDarknetKernel(op) != nullptr);
    CHECK(FindKernel(op) != nullptr);
  }
  CHECK(FindDarknetKernel("Conv") == nullptr);
}

TEST_CASE("reorg on a 4x2x2 map gathers as darknet's reorg_cpu does") {
  // Worked by hand from reorg_cpu with forward=0: out[i + 2(j + 2k)] =
  // in[(2i + k%2) + 4(2j + k/2)], i.e. the input read as one 4x4 plane.
  std::vector<float> in(16);
  for (int i = 0; i < 16; ++i) in[i] = static_cast<float>(i);
  auto run = RunNode("Reorg", ReorgAttrs(2, 0), {Activation({1, 4, 2, 2}, in)}, {{1, 16, 1, 1}});
  REQUIRE(run.status.ok());
  const std::vector<float> expected = {0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15};
  CHECK(run.outputs[0] == expected);
}

TEST_CASE("reorg matches darknet's reorg_cpu formula, forward and reverse") {
  std::mt19937 rng(11);
  SECTION("reverse=0, yolov2's passthrough") {
    const int n = 2, c = 8, h = 4, w = 6, s = 2;
    auto x = RandomValues(n * c * h * w, rng);
    auto run = RunNode("Reorg", ReorgAttrs(s, 0), {Activation({n, c, h, w}, x)}, {{n, c * 4, h / 2, w / 2}});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], NaiveReorg(x, w, h, c, n, s, 0), 0, 0);
  }
  SECTION("reverse=0, stride 3") {
    const int n = 1, c = 18, h = 6, w = 3, s = 3;
    auto x = RandomValues(n * c * h * w, rng);
    auto run = RunNode("Reorg", ReorgAttrs(s, 0), {Activation({n, c, h, w}, x)}, {{n, c * 9, h / 3, w / 3}});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], NaiveReorg(x, w, h, c, n, s, 0), 0, 0);
  }
  SECTION("reverse=1") {
    const int n = 2, c = 8, h = 2, w = 3, s = 2;
    auto x = RandomValues(n * c * h * w, rng);
    auto run = RunNode("Reorg", ReorgAttrs(s, 1), {Activation({n, c, h, w}, x)}, {{n, c / 4, h * 2, w * 2}});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], NaiveReorg(x, w, h, c, n, s, 1), 0, 0);
  }
  SECTION("bad shapes are rejected in Prepare, naming the node") {
    auto odd = RunNode("Reorg", ReorgAttrs(2, 0), {Activation({1, 4, 3, 2}, std::vector<float>(24))}, {{1, 16, 1, 1}},
                       1, "28 reorg");
    REQUIRE_FALSE(odd.status.ok());
    CHECK(odd.status.message().find("28 reorg") != std::string::npos);
    auto chan = RunNode("Reorg", ReorgAttrs(2, 0), {Activation({1, 6, 2, 2}, std::vector<float>(24))}, {{1, 24, 1, 1}});
    CHECK_FALSE(chan.status.ok());
    auto shape = RunNode("Reorg", ReorgAttrs(2, 0), {Activation({1, 4, 2, 2}, std::vector<float>(16))}, {{1, 4, 2, 2}});
    CHECK_FALSE(shape.status.ok());
  }
}

namespace {

// darknet region_layer.c entry_index and forward_region_layer (CPU path),
// transcribed with the layer fields as plain arguments.
std::vector<double> NaiveRegion(const std::vector<float>& input, int batch, int n_anchors, int classes, int coords,
                                int w, int h, bool softmax, bool background) {
  const int outputs = h * w * n_anchors * (classes + coords + 1);
  auto entry_index = [&](int b, int location, int entry) {
    const int n = location / (w * h);
    const int loc = location % (w * h);
    return b * outputs + n * w * h * (coords + classes + 1) + entry * w * h + loc;
  };
  auto logistic = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  std::vector<double> out(input.begin(), input.end());
  for (int b = 0; b < batch; ++b)
    for (int n = 0; n < n_anchors; ++n) {
      int index = entry_index(b, n * w * h, 0);
      for (int i = 0; i < 2 * w * h; ++i) out[index + i] = logistic(out[index + i]);
      index = entry_index(b, n * w * h, coords);
      if (!background)
        for (int i = 0; i < w * h; ++i) out[index + i] = logistic(out[index + i]);
      index = entry_index(b, n * w * h, coords + 1);
      if (!softmax)
        for (int i = 0; i < classes * w * h; ++i) out[index + i] = logistic(out[index + i]);
    }
  if (softmax) {
    // softmax_cpu(input + index, classes + background, batch·n, inputs/n, w·h, 1, w·h, 1, output + index)
    const int index = entry_index(0, 0, coords + !background);
    const int count = classes + background, groups = w * h, stride = w * h;
    const int batch_offset = outputs / n_anchors;
    for (int b = 0; b < batch * n_anchors; ++b)
      for (int g = 0; g < groups; ++g) {
        const int base = index + b * batch_offset + g;
        double largest = -FLT_MAX, sum = 0;
        for (int i = 0; i < count; ++i) largest = std::max<double>(largest, input[base + i * stride]);
        for (int i = 0; i < count; ++i) sum += std::exp(input[base + i * stride] - largest);
        for (int i = 0; i < count; ++i) out[base + i * stride] = std::exp(input[base + i * stride] - largest) / sum;
      }
  }
  return out;
}

Attributes RegionAttrs(int64_t num, int64_t classes, int64_t coords, int64_t softmax, int64_t background) {
  Attributes a;
  a.Set("num", num);
  a.Set("classes", classes);
  a.Set("coords", coords);
  a.Set("softmax", softmax);
  a.Set("background", background);
  return a;
}

}  // namespace

TEST_CASE("region applies darknet's logistic and class softmax per anchor entry") {
  std::mt19937 rng(5);
  struct Case {
    int batch, num, classes, coords, h, w;
    bool softmax, background;
  };
  for (const Case& k : {Case{2, 2, 3, 4, 2, 3, true, false}, Case{1, 3, 5, 4, 3, 3, false, false},
                        Case{2, 2, 3, 4, 2, 2, true, true}, Case{1, 1, 2, 6, 2, 3, true, false}}) {
    INFO("softmax " << k.softmax << " background " << k.background << " coords " << k.coords);
    const int c = k.num * (k.coords + k.classes + 1);
    auto x = RandomValues(static_cast<size_t>(k.batch * c * k.h * k.w), rng, -4.f, 4.f);
    auto run = RunNode("Region", RegionAttrs(k.num, k.classes, k.coords, k.softmax, k.background),
                       {Activation({k.batch, c, k.h, k.w}, x)}, {{k.batch, c, k.h, k.w}});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], NaiveRegion(x, k.batch, k.num, k.classes, k.coords, k.w, k.h, k.softmax, k.background),
                1e-5, 1e-6);
  }
  auto bad = RunNode("Region", RegionAttrs(5, 20, 4, 1, 0), {Activation({1, 100, 2, 2}, std::vector<float>(400))},
                     {{1, 100, 2, 2}});
  CHECK_FALSE(bad.status.ok());
}

TEST_CASE("darknet crop takes the centred window and maps x to 2x - 1") {
  std::mt19937 rng(9);
  const int n = 2, c = 3, h = 7, w = 6, ch = 4, cw = 3;
  auto x = RandomValues(n * c * h * w, rng, 0.f, 1.f);
  for (bool noadjust : {false, true}) {
    Attributes a;
    a.Set("crop_height", int64_t{ch});
    a.Set("crop_width", int64_t{cw});
    a.Set("offset_h", int64_t{(h - ch) / 2});
    a.Set("offset_w", int64_t{(w - cw) / 2});
    a.Set("scale", noadjust ? 1.0 : 2.0);
    a.Set("shift", noadjust ? 0.0 : -1.0);
    auto run = RunNode("DarknetCrop", a, {Activation({n, c, h, w}, x)}, {{n, c, ch, cw}});
    REQUIRE(run.status.ok());
    // darknet forward_crop_layer, net.train = 0.
    std::vector<double> expected;
    const int dh = (h - ch) / 2, dw = (w - cw) / 2;
    const double scale = noadjust ? 1 : 2, trans = noadjust ? 0 : -1;
    for (int b = 0; b < n; ++b)
      for (int k = 0; k < c; ++k)
        for (int i = 0; i < ch; ++i)
          for (int j = 0; j < cw; ++j)
            expected.push_back(x[(j + dw) + w * ((i + dh) + h * (k + c * b))] * scale + trans);
    ExpectClose(run.outputs[0], expected, 1e-6, 1e-6);
  }
}

namespace {

// darknet blas.c shortcut_cpu (s1 = s2 = 1) after copying X, then leaky.
std::vector<double> NaiveShortcut(const std::vector<float>& x, int c2, int h2, int w2, const std::vector<float>& add,
                                  int c1, int h1, int w1, int batch, bool leaky) {
  std::vector<double> out(x.begin(), x.end());
  int stride = w1 / w2, sample = w2 / w1;
  if (stride < 1) stride = 1;
  if (sample < 1) sample = 1;
  const int minw = std::min(w1, w2), minh = std::min(h1, h2), minc = std::min(c1, c2);
  for (int b = 0; b < batch; ++b)
    for (int k = 0; k < minc; ++k)
      for (int j = 0; j < minh; ++j)
        for (int i = 0; i < minw; ++i) {
          const int out_index = i * sample + w2 * (j * sample + h2 * (k + c2 * b));
          const int add_index = i * stride + w1 * (j * stride + h1 * (k + c1 * b));
          out[out_index] = out[out_index] + add[add_index];
        }
  if (leaky)
    for (double& v : out) v = v < 0 ? 0.1 * v : v;
  return out;
}

}  // namespace

TEST_CASE("darknet shortcut between different shapes follows shortcut_cpu") {
  std::mt19937 rng(13);
  struct Case {
    int c2, h2, w2, c1, h1, w1;
    bool leaky;
  };
  for (const Case& k : {Case{6, 4, 4, 4, 8, 8, true}, Case{3, 4, 4, 5, 2, 2, false}, Case{4, 3, 3, 4, 3, 3, true},
                        Case{2, 5, 5, 3, 5, 5, false}}) {
    INFO("x " << k.c2 << "x" << k.h2 << "x" << k.w2 << " from " << k.c1 << "x" << k.h1 << "x" << k.w1);
    const int batch = 2;
    auto x = RandomValues(batch * k.c2 * k.h2 * k.w2, rng);
    auto f = RandomValues(batch * k.c1 * k.h1 * k.w1, rng);
    Attributes a;
    if (k.leaky) {
      a.Set("activation", std::string("leaky_relu"));
      a.Set("act_alpha", 0.1);
    }
    auto run = RunNode("DarknetShortcut", a,
                       {Activation({batch, k.c2, k.h2, k.w2}, x), Activation({batch, k.c1, k.h1, k.w1}, f)},
                       {{batch, k.c2, k.h2, k.w2}});
    REQUIRE(run.status.ok());
    ExpectClose(run.outputs[0], NaiveShortcut(x, k.c2, k.h2, k.w2, f, k.c1, k.h1, k.w1, batch, k.leaky), 1e-6, 1e-6);
  }
}

namespace {

const char* const kCfgDir = "/usr/share/darknet/cfg/";

// Imports a shipped cfg with seeded weights and runs it; every graph output
// is returned.
std::vector<TensorData> RunSeeded(const std::string& cfg, const Shape& input_shape) {
  ImportOptions o;
  o.input_shapes[""] = input_shape;
  auto g = ImportDarknet(std::string(kCfgDir) + cfg, o);
  REQUIRE(g.ok());
  auto ex = Executor::Create(*g, ExecutorOptions{});
  INFO(ex.status().ToString());
  REQUIRE(ex.ok());
  std::mt19937 rng(1);
  TensorData input{input_shape, RandomValues(static_cast<size_t>(NumElements(input_shape)), rng, 0.f, 1.f)};
  std::vector<TensorData> outputs;
  const Status st = (*ex)->Run({input}, &outputs);
  INFO(st.ToString());
  REQUIRE(st.ok());
  for (const TensorData& t : outputs) {
    double sum_sq = 0;
    for (float v : t.values) {
      REQUIRE(std::isfinite(v));
      sum_sq += double(v) * v;
    }
    // Seeded weights keep activations O(1): neither blown up nor vanished.
    const double rms = std::sqrt(sum_sq / t.values.size());
    CHECK(rms > 1e-4);
    CHECK(rms < 100);
  }
  return outputs;
}

// Region output: x, y, objectness in (0, 1), class scores a distribution.
void CheckRegionOutput(const TensorData& t, int num, int classes) {
  const int64_t hw = t.shape[2] * t.shape[3], entries = classes + 5;
  for (int a = 0; a < num; ++a)
    for (int64_t loc = 0; loc < hw; ++loc) {
      const float* p = t.values.data() + a * entries * hw + loc;
      CHECK((p[0] > 0 && p[0] < 1 && p[hw] > 0 && p[hw] < 1 && p[4 * hw] > 0 && p[4 * hw] < 1));
      double sum = 0;
      for (int k = 0; k < classes; ++k) sum += p[(5 + k) * hw];
      CHECK(sum == Approx(1.0).epsilon(1e-4));
    }
}

}  // namespace

TEST_CASE("seeded darknet detectors run end to end through the executor") {
  if (!std::filesystem::exists(std::string(kCfgDir) + "yolov2.cfg")) {
    FAIL("darknet cfgs are missing; deploy/install-deps.sh installs Debian's darknet");
  }
  SECTION("yolov2-tiny-voc at 416x416") {
    auto out = RunSeeded("yolov2-tiny-voc.cfg", {1, 3, 416, 416});
    REQUIRE(out.size() == 1);
    CHECK(out[0].shape == Shape{1, 125, 13, 13});
    CheckRegionOutput(out[0], 5, 20);
  }
  SECTION("yolov2 at 320x320 (reorg, route)") {
    auto out = RunSeeded("yolov2.cfg", {1, 3, 320, 320});
    REQUIRE(out.size() == 1);
    CHECK(out[0].shape == Shape{1, 425, 10, 10});
    CheckRegionOutput(out[0], 5, 80);
  }
  SECTION("yolov3-tiny at 320x320 (upsample, two yolo heads)") {
    auto out = RunSeeded("yolov3-tiny.cfg", {1, 3, 320, 320});
    REQUIRE(out.size() == 2);
    CHECK(out[0].shape == Shape{1, 255, 10, 10});
    CHECK(out[1].shape == Shape{1, 255, 20, 20});
  }
}

namespace {
void CheckSoftmaxSum(const TensorData& t) {
  double sum = 0;
  for (float v : t.values) sum += v;
  CHECK(sum == Approx(1.0).epsilon(1e-4));  // the softmax at the end
}
}  // namespace

TEST_CASE("seeded darknet classifiers run end to end through the executor") {
  if (!std::filesystem::exists(std::string(kCfgDir) + "extraction.cfg")) return;
  for (auto [cfg, size] : {std::pair{"extraction.cfg", 224},
                           {"darknet19.cfg", 224},
                           {"resnet18.cfg", 128},
                           {"darknet53.cfg", 128},
                           {"densenet201.cfg", 128}}) {
    INFO(cfg);
    auto out = RunSeeded(cfg, {1, 3, size, size});
    REQUIRE(out.size() == 1);
    CheckSoftmaxSum(out[0]);
  }
}

// [connected] on a feature map: Gemm with attr flatten_input=1.
TEST_CASE("seeded darknet classifiers with fully connected heads run end to end") {
  if (!std::filesystem::exists(std::string(kCfgDir) + "alexnet.cfg")) return;
  for (auto [cfg, size] : {std::pair{"alexnet.cfg", 227}, {"vgg-16.cfg", 256}}) {
    INFO(cfg);
    auto out = RunSeeded(cfg, {1, 3, size, size});
    REQUIRE(out.size() == 1);
    CHECK(out[0].shape == Shape{1, 1000});
    CheckSoftmaxSum(out[0]);
  }
}

// Issue 17 item 2: the arena layout changes offsets only: yolov3-tiny (routes
// and an upsample, so buffers outlive their neighbours) gives bit-identical
// answers under greedy-by-size, the default best-of-greedy and the MILP, and
// the arenas never grow in that order.
TEST_CASE("yolov3-tiny answers are bit-identical under every arena layout") {
  ImportOptions o;
  const Shape shape{1, 3, 64, 64};
  o.input_shapes[""] = shape;
  auto g = ImportDarknet(std::string(kCfgDir) + "yolov3-tiny.cfg", o);
  REQUIRE(g.ok());
  std::mt19937 rng(3);
  TensorData input{shape, RandomValues(static_cast<size_t>(NumElements(shape)), rng, 0.f, 1.f)};
  const GreedyBySizeLayout by_size(64);
  const MilpArenaLayout milp(10.0, 64);
  std::vector<std::vector<TensorData>> answers;
  std::vector<size_t> arenas;
  for (const ArenaLayout* layout : {static_cast<const ArenaLayout*>(&by_size), static_cast<const ArenaLayout*>(nullptr),
                                    static_cast<const ArenaLayout*>(&milp)}) {
    ExecutorOptions eo;
    eo.arena_layout = layout;
    auto ex = Executor::Create(*g, eo);
    REQUIRE(ex.ok());
    CHECK((*ex)->arena_bytes() >= (*ex)->arena_lower_bound());
    std::vector<TensorData> out;
    REQUIRE((*ex)->Run({input}, &out).ok());
    answers.push_back(std::move(out));
    arenas.push_back((*ex)->arena_bytes());
  }
  CHECK(arenas[1] <= arenas[0]);
  CHECK(arenas[2] <= arenas[1]);
  for (size_t k = 1; k < answers.size(); ++k) {
    REQUIRE(answers[k].size() == answers[0].size());
    for (size_t i = 0; i < answers[0].size(); ++i) CHECK(answers[k][i].values == answers[0][i].values);
  }
}
