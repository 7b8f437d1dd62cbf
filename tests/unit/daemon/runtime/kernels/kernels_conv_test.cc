// Conv kernel against a naive direct convolution (double accumulation), over
// random shapes covering every evaluation strategy: im2col (general and
// grouped), pointwise 1x1, and depthwise (with channel multiplier).
#include <algorithm>
#include <cstring>
#include <limits>

#include "daemon/runtime/kernels/isa.h"
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

using testing::ExpectClose;
using testing::RandomValues;
using testing::RunNode;

struct ConvCase {
  int64_t n = 1, c = 3, h = 8, w = 8, o = 4, group = 1, kh = 3, kw = 3;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
  bool bias = true;
  std::string activation;
  int64_t OutH() const { return (h + pt + pb - dh * (kh - 1) - 1) / sh + 1; }
  int64_t OutW() const { return (w + pl + pr - dw * (kw - 1) - 1) / sw + 1; }
  std::string Describe() const {
    std::ostringstream os;
    os << "N" << n << " C" << c << " " << h << "x" << w << " O" << o << " g" << group << " k" << kh << "x" << kw
       << " s" << sh << "," << sw << " d" << dh << "," << dw << " pads " << pt << "," << pl << "," << pb << ","
       << pr << " bias " << bias << " act '" << activation << "'";
    return os.str();
  }
};

double ReferenceActivation(const std::string& act, double v) {
  if (act == "relu") return std::max(v, 0.0);
  if (act == "leaky_relu") return v < 0 ? 0.1 * v : v;
  if (act == "clip") return std::min(std::max(v, 0.0), 6.0);
  if (act == "sigmoid") return 1.0 / (1.0 + std::exp(-v));
  if (act == "tanh") return std::tanh(v);
  if (act == "silu") return v / (1.0 + std::exp(-v));
  if (act == "hard_sigmoid") return std::clamp(0.2 * v + 0.5, 0.0, 1.0);
  if (act == "hard_swish") return v * std::clamp(v / 6.0 + 0.5, 0.0, 1.0);
  return v;
}

std::vector<double> ReferenceConv(const ConvCase& k, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b) {
  const int64_t oh_n = k.OutH(), ow_n = k.OutW(), cg = k.c / k.group, og = k.o / k.group;
  std::vector<double> y(k.n * k.o * oh_n * ow_n);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          double s = k.bias ? b[o] : 0.0;
          const int64_t g = o / og;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t ih = oh * k.sh - k.pt + i * k.dh, iw = ow * k.sw - k.pl + j * k.dw;
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                s += double(x[((n * k.c + g * cg + c) * k.h + ih) * k.w + iw]) *
                     w[((o * cg + c) * k.kh + i) * k.kw + j];
              }
          y[((n * k.o + o) * oh_n + oh) * ow_n + ow] = ReferenceActivation(k.activation, s);
        }
  return y;
}

Attributes ConvAttributes(const ConvCase& k) {
  Attributes a;
  a.Set("kernel_shape", std::vector<int64_t>{k.kh, k.kw});
  a.Set("strides", std::vector<int64_t>{k.sh, k.sw});
  a.Set("dilations", std::vector<int64_t>{k.dh, k.dw});
  a.Set("pads", std::vector<int64_t>{k.pt, k.pl, k.pb, k.pr});
  a.Set("group", k.group);
  if (!k.activation.empty()) a.Set("activation", k.activation);
  if (k.activation == "leaky_relu") a.Set("act_alpha", 0.1);
  if (k.activation == "clip") {
    a.Set("act_alpha", 0.0);
    a.Set("act_beta", 6.0);
  }
  return a;
}

// indirect = false forbids the implicit im2col (conv.cc, attribute
// "indirect_im2col"), so both general paths are checked on the same shapes.
void CheckConv(const ConvCase& k, std::mt19937& rng, int threads = 1, int64_t winograd_min_channels = 96,
               bool indirect = true) {
  INFO(k.Describe() << " threads " << threads << " indirect " << indirect);
  auto x = RandomValues(k.n * k.c * k.h * k.w, rng);
  auto w = RandomValues(k.o * (k.c / k.group) * k.kh * k.kw, rng);
  auto b = RandomValues(k.o, rng);
  std::vector<testing::TestTensor> inputs = {testing::Activation({k.n, k.c, k.h, k.w}, x),
                                             testing::Weights({k.o, k.c / k.group, k.kh, k.kw}, w)};
  if (k.bias) inputs.push_back(testing::Weights({k.o}, b));
  Attributes attrs = ConvAttributes(k);
  attrs.Set("winograd_min_channels", winograd_min_channels);
  if (!indirect) attrs.Set("indirect_im2col", int64_t{0});
  auto run = RunNode("Conv", attrs, inputs, {{k.n, k.o, k.OutH(), k.OutW()}}, threads);
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], ReferenceConv(k, x, w, b), 1e-5, 2e-5);
}

ConvCase RandomCase(std::mt19937& rng, int kind) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  static const char* kActs[] = {"", "relu", "leaky_relu", "clip", "sigmoid", "tanh"};
  ConvCase k;
  k.n = pick(1, 2);
  k.h = pick(5, 14);
  k.w = pick(5, 14);
  k.kh = pick(1, 5);
  k.kw = pick(1, 5);
  k.sh = pick(1, 3);
  k.sw = pick(1, 3);
  k.dh = pick(1, 2);
  k.dw = pick(1, 2);
  k.pt = pick(0, 2);
  k.pl = pick(0, 2);
  k.pb = pick(0, 2);
  k.pr = pick(0, 2);
  k.bias = pick(0, 1) == 1;
  k.activation = kActs[pick(0, 5)];
  switch (kind) {
    case 0:  // dense
      k.group = 1;
      k.c = pick(1, 9);
      k.o = pick(1, 9);
      break;
    case 1:  // grouped
      k.group = pick(2, 3);
      k.c = k.group * pick(1, 4);
      k.o = k.group * pick(1, 4);
      break;
    case 2:  // depthwise, channel multiplier 1 or 2
      k.c = pick(2, 9);
      k.group = k.c;
      k.o = k.c * pick(1, 2);
      break;
    default:  // pointwise
      k.group = pick(1, 2);
      k.c = k.group * pick(1, 8);
      k.o = k.group * pick(1, 8);
      k.kh = k.kw = 1;
      k.sh = k.sw = 1;
      k.pt = k.pl = k.pb = k.pr = 0;
      break;
  }
  // Keep the dilated kernel inside the padded input.
  k.h = std::max(k.h, k.dh * (k.kh - 1) + 1);
  k.w = std::max(k.w, k.dw * (k.kw - 1) + 1);
  return k;
}

TEST_CASE("dense convolution matches the direct reference over random shapes", "[kernels][conv]") {
  std::mt19937 rng(11);
  for (int i = 0; i < 60; ++i) CheckConv(RandomCase(rng, 0), rng, 1, 96, i % 2 == 0);
}

TEST_CASE("grouped convolution matches the direct reference", "[kernels][conv]") {
  std::mt19937 rng(12);
  for (int i = 0; i < 40; ++i) CheckConv(RandomCase(rng, 1), rng, 1, 96, i % 2 == 0);
}

TEST_CASE("depthwise convolution matches the direct reference, with channel multiplier", "[kernels][conv]") {
  std::mt19937 rng(13);
  for (int i = 0; i < 60; ++i) CheckConv(RandomCase(rng, 2), rng);
}

// 3x3 and 5x5 at stride 1 and 2 take the row-blocked microkernel
// (microkernels.h depthwise_rows): on every ISA level the CPU has, planes
// narrower and wider than each level's vector, odd heights, asymmetric pads,
// a channel multiplier, serial and threaded.
TEST_CASE("row-blocked depthwise convolutions match the reference on every ISA", "[kernels][conv]") {
  std::mt19937 rng(18);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  static const char* kActs[] = {"", "relu", "clip", "silu", "hard_swish"};
  const Isa initial = ActiveIsa();
  for (Isa isa : SupportedIsas()) {
    REQUIRE(SetActiveIsa(isa).ok());
    for (int trial = 0; trial < 24; ++trial) {
      ConvCase k;
      k.n = pick(1, 2);
      k.c = pick(2, 6);
      k.group = k.c;
      k.o = k.c * (trial % 5 == 4 ? 2 : 1);
      k.kh = k.kw = trial % 2 == 0 ? 3 : 5;
      k.sh = k.sw = 1 + (trial / 2) % 2;
      k.pt = pick(0, k.kh / 2), k.pl = pick(0, k.kw / 2), k.pb = pick(0, k.kh / 2), k.pr = pick(0, k.kw / 2);
      k.h = pick(k.kh, 23);
      k.w = trial < 8 ? pick(k.kw, 12) : pick(13, 45);
      k.bias = trial % 3 != 0;
      k.activation = kActs[trial % 5];
      INFO("ISA " << IsaName(isa));
      CheckConv(k, rng, 1 + trial % 2);
    }
  }
  REQUIRE(SetActiveIsa(initial).ok());
}

// Runs conv k on random data with its default path and with `attr` = 0
// (that path turned off): both match the reference, and each other bit for
// bit (the two paths sum the same products in the same order).
void CheckBitwiseWithPathOff(const ConvCase& k, const char* attr, int threads, std::mt19937& rng) {
  const int64_t cg = k.c / k.group;
  auto x = RandomValues(k.n * k.c * k.h * k.w, rng);
  auto w = RandomValues(k.o * cg * k.kh * k.kw, rng);
  auto b = RandomValues(k.o, rng);
  std::vector<testing::TestTensor> inputs = {testing::Activation({k.n, k.c, k.h, k.w}, x),
                                             testing::Weights({k.o, cg, k.kh, k.kw}, w)};
  if (k.bias) inputs.push_back(testing::Weights({k.o}, b));
  const std::vector<std::vector<int64_t>> shape = {{k.n, k.o, k.OutH(), k.OutW()}};
  Attributes off = ConvAttributes(k);
  off.Set(attr, int64_t{0});
  auto fast = RunNode("Conv", ConvAttributes(k), inputs, shape, threads);
  auto plain = RunNode("Conv", off, inputs, shape, threads);
  REQUIRE(fast.status.ok());
  REQUIRE(plain.status.ok());
  ExpectClose(fast.outputs[0], ReferenceConv(k, x, w, b), 1e-5, 2e-5);
  REQUIRE(fast.outputs[0].size() == plain.outputs[0].size());
  for (size_t i = 0; i < plain.outputs[0].size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::memcmp(&fast.outputs[0][i], &plain.outputs[0][i], sizeof(float)) == 0);
  }
}

// Depthwise convs without a channel multiplier take the channels-in-lanes
// microkernel (microkernels.h depthwise_channels): the same sums as the
// row-blocked path (bias, then the taps in order, one FMA each), so equal
// to it bit for bit on every ISA level; channel counts around each level's
// lanes, planes from 1x1 to taller than one band (kDepthwiseBandBytes),
// asymmetric pads, batch 2, serial and threaded.
TEST_CASE("channels-in-lanes depthwise convs equal the row-blocked path bit for bit on every ISA", "[kernels][conv]") {
  std::mt19937 rng(28);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  static const char* kActs[] = {"", "relu", "clip", "silu", "hard_swish", "leaky_relu"};
  const Isa initial = ActiveIsa();
  for (Isa isa : SupportedIsas()) {
    REQUIRE(SetActiveIsa(isa).ok());
    for (int trial = 0; trial < 20; ++trial) {
      ConvCase k;
      k.n = trial % 7 == 3 ? 2 : 1;
      k.c = k.o = k.group = trial % 4 == 0 ? pick(1, 5) * 2 : pick(7, 40);
      k.kh = k.kw = trial % 2 == 0 ? 3 : 5;
      k.sh = k.sw = 1 + (trial / 2) % 2;
      k.pt = pick(0, k.kh / 2), k.pl = pick(0, k.kw / 2), k.pb = pick(0, k.kh / 2), k.pr = pick(0, k.kw / 2);
      k.h = trial == 5 ? 150 : pick(k.kh, 30);  // 150 rows: several bands
      k.w = trial == 5 ? 97 : pick(k.kw, 30);
      k.bias = trial % 3 != 0;
      k.activation = kActs[trial % 6];
      INFO("ISA " << IsaName(isa) << " " << k.Describe());
      CheckBitwiseWithPathOff(k, "depthwise_channels", 1 + trial % 2, rng);
    }
  }
  REQUIRE(SetActiveIsa(initial).ok());
}

// Grouped convs whose groups have 16 or 32 output channels on small planes
// take the output-channels-in-lanes microkernel where the level has one
// (microkernels.h grouped_lanes): the GEMM path's sums, so equal to it
// (attribute grouped_lanes 0) bit for bit on every ISA level; planes of
// fewer pixels than a tile, tiles with a short last one, strides 1 and 2,
// 1x1 to 5x3 kernels, batch 2, an activation outside the epilogue (tanh),
// serial and threaded.
TEST_CASE("output-channels-in-lanes grouped convs equal the GEMM path bit for bit on every ISA", "[kernels][conv]") {
  std::mt19937 rng(29);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  static const char* kActs[] = {"", "relu", "silu", "tanh", "leaky_relu"};
  const Isa initial = ActiveIsa();
  for (Isa isa : SupportedIsas()) {
    REQUIRE(SetActiveIsa(isa).ok());
    for (int trial = 0; trial < 16; ++trial) {
      ConvCase k;
      k.n = trial % 5 == 2 ? 2 : 1;
      k.group = pick(2, 3);
      const int64_t og = trial % 2 == 0 ? 16 : 32, cg = trial % 3 == 0 ? pick(2, 5) : pick(8, 32);
      k.c = k.group * cg;
      k.o = k.group * og;
      k.kh = trial % 4 == 3 ? 1 : trial % 4 == 1 ? 5 : 3;
      k.kw = trial % 4 == 1 ? 3 : k.kh;
      k.sh = k.sw = 1 + (trial / 4) % 2;
      k.pt = pick(0, k.kh / 2), k.pl = pick(0, k.kw / 2), k.pb = pick(0, k.kh / 2), k.pr = pick(0, k.kw / 2);
      k.h = trial == 6 ? k.kh : pick(k.kh, 16);
      k.w = trial == 6 ? k.kw : pick(k.kw, 16);
      k.bias = trial % 3 != 1;
      k.activation = kActs[trial % 5];
      INFO("ISA " << IsaName(isa) << " " << k.Describe());
      CheckBitwiseWithPathOff(k, "grouped_lanes", 1 + trial % 2, rng);
    }
  }
  REQUIRE(SetActiveIsa(initial).ok());
}

TEST_CASE("pointwise 1x1 convolution matches the direct reference", "[kernels][conv]") {
  std::mt19937 rng(14);
  for (int i = 0; i < 30; ++i) CheckConv(RandomCase(rng, 3), rng);
}

TEST_CASE("convolution gives the same result with two threads", "[kernels][conv]") {
  std::mt19937 rng(15);
  for (int kind = 0; kind < 4; ++kind)
    for (int i = 0; i < 5; ++i) CheckConv(RandomCase(rng, kind), rng, 2, 96, i % 2 == 0);
}

// SiLU, hard sigmoid and hard swish run in the microkernels' epilogues
// (microkernels.h): every strategy, serial and threaded, odd planes.
TEST_CASE("convolutions with a fused silu, hard sigmoid or hard swish match the reference", "[kernels][conv]") {
  std::mt19937 rng(17);
  for (const char* act : {"silu", "hard_sigmoid", "hard_swish"})
    for (int kind = 0; kind < 4; ++kind)
      for (int i = 0; i < 6; ++i) {
        ConvCase k = RandomCase(rng, kind);
        k.activation = act;
        CheckConv(k, rng, 1 + i % 2);
      }
}

TEST_CASE("typical CNN layer shapes match the reference", "[kernels][conv]") {
  std::mt19937 rng(16);
  ConvCase stem;  // resnet stem: 7x7 stride 2 pad 3
  stem.c = 3, stem.h = stem.w = 32, stem.o = 16, stem.kh = stem.kw = 7, stem.sh = stem.sw = 2;
  stem.pt = stem.pl = stem.pb = stem.pr = 3;
  stem.activation = "relu";
  CheckConv(stem, rng);
  ConvCase dw;  // mobilenet depthwise 3x3 stride 2 with relu6
  dw.c = dw.o = dw.group = 32, dw.h = dw.w = 28, dw.sh = dw.sw = 2, dw.pt = dw.pl = dw.pb = dw.pr = 1;
  dw.activation = "clip";
  CheckConv(dw, rng);
  ConvCase pw;  // large pointwise
  pw.c = 64, pw.o = 96, pw.h = pw.w = 20, pw.kh = pw.kw = 1;
  CheckConv(pw, rng);
}

TEST_CASE("large planes split into GEMM tiles give the same result, serial and threaded", "[kernels][conv]") {
  std::mt19937 rng(20);
  ConvCase wide;  // K = 64·9 = 576 -> tiles of 256 output columns over a 30x30 plane
  wide.n = 2, wide.c = 64, wide.o = 8, wide.h = wide.w = 30, wide.pt = wide.pl = wide.pb = wide.pr = 1;
  wide.activation = "relu";
  ConvCase deep_pointwise;  // K = 600, pointwise path with strided output tiles
  deep_pointwise.c = 600, deep_pointwise.o = 5, deep_pointwise.h = deep_pointwise.w = 23;
  deep_pointwise.kh = deep_pointwise.kw = 1;
  for (int threads : {1, 2}) {
    CheckConv(wide, rng, threads);
    CheckConv(wide, rng, threads, 96, false);
    CheckConv(deep_pointwise, rng, threads);
  }
}

TEST_CASE("3x3 stride-1 convolutions on the Winograd path match the reference", "[kernels][conv]") {
  std::mt19937 rng(25);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  static const char* kActs[] = {"", "relu", "clip"};
  for (int trial = 0; trial < 16; ++trial) {
    ConvCase k;
    k.n = pick(1, 2);
    k.c = pick(16, 40);
    k.o = pick(16, 40);
    k.h = pick(8, 21);
    k.w = pick(8, 21);
    k.pt = pick(0, 2), k.pl = pick(0, 2), k.pb = pick(0, 2), k.pr = pick(0, 2);
    k.bias = trial % 3 != 0;
    k.activation = kActs[trial % 3];
    CheckConv(k, rng, trial % 2 + 1, /*winograd_min_channels=*/16);
  }
  ConvCase many_tiles;  // more tiles than one chunk holds
  many_tiles.c = 64, many_tiles.o = 64, many_tiles.h = many_tiles.w = 56;
  many_tiles.pt = many_tiles.pl = many_tiles.pb = many_tiles.pr = 1;
  many_tiles.activation = "relu";
  CheckConv(many_tiles, rng, 1, 16);
  ConvCase wide;  // the default threshold picks Winograd for >= 96 channels
  wide.c = wide.o = 128, wide.h = wide.w = 12, wide.pt = wide.pl = wide.pb = wide.pr = 1;
  CheckConv(wide, rng);
}

// With two threads, a Winograd conv whose tiles outweigh its weights runs
// each thread's band of tile rows through all three stages (conv.cc
// WinogradGeometry); the activation is applied in the output transform.
// Every activation, odd output sizes, batch 2, a conv that keeps the
// stage-by-stage split, and a 7x7 plane (not Winograd) whose one im2col
// tile the threads build by channels: equal to the reference, and to one
// thread exactly (the same sums in the same order). Tag [sweep]: left out
// of the runs on emulated CPUs (tests/CMakeLists.txt cpu_*), where the
// single-band Winograd cases run the same ISA's code.
TEST_CASE("Winograd in bands of tile rows on two threads matches one thread and the reference",
          "[kernels][conv][sweep]") {
  std::mt19937 rng(26);
  std::vector<ConvCase> cases;
  for (const char* act : {"", "relu", "clip", "leaky_relu", "sigmoid"}) {
    ConvCase k;  // 29x29 output: an odd last tile row and column
    k.c = 16, k.o = 16, k.h = k.w = 29, k.pt = k.pl = k.pb = k.pr = 1;
    k.activation = act;
    cases.push_back(k);
  }
  ConvCase batch;  // resnet18's layer1 shape, two images
  batch.n = 2, batch.c = batch.o = 64, batch.h = batch.w = 56, batch.pt = batch.pl = batch.pb = batch.pr = 1;
  batch.activation = "relu";
  cases.push_back(batch);
  ConvCase deep;  // weights outweigh the tiles (0.05 of them): stage by stage
  deep.c = deep.o = 128, deep.h = deep.w = 14, deep.pt = deep.pl = deep.pb = deep.pr = 1;
  deep.activation = "clip";
  cases.push_back(deep);
  ConvCase single_tile;  // a 7x7 plane, no Winograd: one im2col tile built by both threads
  single_tile.c = 96, single_tile.o = 40, single_tile.h = single_tile.w = 7;
  single_tile.pt = single_tile.pl = single_tile.pb = single_tile.pr = 1;
  single_tile.activation = "relu";
  cases.push_back(single_tile);
  for (const ConvCase& k : cases) {
    INFO(k.Describe());
    auto x = RandomValues(k.n * k.c * k.h * k.w, rng);
    auto w = RandomValues(k.o * k.c * k.kh * k.kw, rng);
    auto b = RandomValues(k.o, rng);
    std::vector<testing::TestTensor> inputs = {testing::Activation({k.n, k.c, k.h, k.w}, x),
                                               testing::Weights({k.o, k.c, k.kh, k.kw}, w), testing::Weights({k.o}, b)};
    Attributes attrs = ConvAttributes(k);
    attrs.Set("winograd_min_channels", int64_t{16});
    auto one = RunNode("Conv", attrs, inputs, {{k.n, k.o, k.OutH(), k.OutW()}}, 1);
    auto two = RunNode("Conv", attrs, inputs, {{k.n, k.o, k.OutH(), k.OutW()}}, 2);
    REQUIRE(one.status.ok());
    REQUIRE(two.status.ok());
    ExpectClose(two.outputs[0], ReferenceConv(k, x, w, b), 1e-5, 2e-5);
    REQUIRE(two.outputs[0].size() == one.outputs[0].size());
    for (size_t i = 0; i < one.outputs[0].size(); ++i) {
      INFO("element " << i);
      REQUIRE(std::memcmp(&two.outputs[0][i], &one.outputs[0][i], sizeof(float)) == 0);
    }
  }
}

// Pointwise convs with few output channels on a large plane: with two
// threads each takes whole column tiles (conv.cc ThreadTileColumns).
TEST_CASE("pointwise convs in column tiles per thread match one thread and the reference", "[kernels][conv]") {
  std::mt19937 rng(27);
  for (int64_t side : {23, 28, 56}) {
    ConvCase k;  // mobilenet_v2's projection: 144 or 192 channels down to 24-32
    k.c = side == 56 ? 144 : 192, k.o = side == 56 ? 24 : 32, k.h = k.w = side, k.kh = k.kw = 1;
    k.activation = side == 23 ? "clip" : "";
    INFO(k.Describe());
    auto x = RandomValues(k.c * k.h * k.w, rng);
    auto w = RandomValues(k.o * k.c, rng);
    auto b = RandomValues(k.o, rng);
    std::vector<testing::TestTensor> inputs = {testing::Activation({1, k.c, k.h, k.w}, x),
                                               testing::Weights({k.o, k.c, 1, 1}, w), testing::Weights({k.o}, b)};
    auto one = RunNode("Conv", ConvAttributes(k), inputs, {{1, k.o, k.h, k.w}}, 1);
    auto two = RunNode("Conv", ConvAttributes(k), inputs, {{1, k.o, k.h, k.w}}, 2);
    REQUIRE(one.status.ok());
    REQUIRE(two.status.ok());
    ExpectClose(two.outputs[0], ReferenceConv(k, x, w, b), 1e-5, 2e-5);
    for (size_t i = 0; i < one.outputs[0].size(); ++i) {
      INFO("element " << i);
      REQUIRE(std::memcmp(&two.outputs[0][i], &one.outputs[0][i], sizeof(float)) == 0);
    }
  }
}

TEST_CASE("SAME_UPPER auto_pad pads the end more than the beginning", "[kernels][conv]") {
  std::mt19937 rng(17);
  ConvCase k;
  k.c = 2, k.o = 3, k.h = 7, k.w = 8, k.kh = 4, k.kw = 4, k.sh = 2, k.sw = 2;
  // out = ceil(7/2)=4 → total 4·... : total_h = (4-1)*2+4-7 = 3 (1 top, 2 bottom); total_w = (4-1)*2+4-8 = 2.
  k.pt = 1, k.pb = 2, k.pl = 1, k.pr = 1;
  auto x = RandomValues(2 * 7 * 8, rng), w = RandomValues(3 * 2 * 16, rng), b = RandomValues(3, rng);
  Attributes a;
  a.Set("auto_pad", std::string("SAME_UPPER"));
  a.Set("strides", std::vector<int64_t>{2, 2});
  auto run = RunNode("Conv", a,
                     {testing::Activation({1, 2, 7, 8}, x), testing::Weights({3, 2, 4, 4}, w),
                      testing::Weights({3}, b)},
                     {{1, 3, 4, 4}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], ReferenceConv(k, x, w, b), 1e-5, 2e-5);
}

TEST_CASE("non-constant convolution weights are read at eval time", "[kernels][conv]") {
  std::mt19937 rng(18);
  ConvCase k;
  k.bias = false;
  auto x = RandomValues(3 * 8 * 8, rng), w = RandomValues(4 * 3 * 9, rng);
  auto run = RunNode("Conv", ConvAttributes(k),
                     {testing::Activation({1, 3, 8, 8}, x), testing::Activation({4, 3, 3, 3}, w)}, {{1, 4, 6, 6}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], ReferenceConv(k, x, w, {}), 1e-5, 2e-5);
}

TEST_CASE("an omitted optional bias is accepted", "[kernels][conv]") {
  std::mt19937 rng(19);
  ConvCase k;
  k.bias = false;
  auto x = RandomValues(3 * 8 * 8, rng), w = RandomValues(4 * 3 * 9, rng);
  auto run = RunNode("Conv", ConvAttributes(k),
                     {testing::Activation({1, 3, 8, 8}, x), testing::Weights({4, 3, 3, 3}, w), testing::Omitted()},
                     {{1, 4, 6, 6}});
  REQUIRE(run.status.ok());
  ExpectClose(run.outputs[0], ReferenceConv(k, x, w, {}), 1e-5, 2e-5);
}

TEST_CASE("convolution rejects a wrong output shape naming the node", "[kernels][conv][errors]") {
  ConvCase k;
  auto run = RunNode("Conv", ConvAttributes(k),
                     {testing::Activation({1, 3, 8, 8}, std::vector<float>(192)),
                      testing::Weights({4, 3, 3, 3}, std::vector<float>(108))},
                     {{1, 4, 8, 8}}, 1, "layer7_conv");
  REQUIRE(run.status.IsInvalidArgument());
  CHECK_THAT(run.status.message(), Catch::Contains("layer7_conv") && Catch::Contains("Conv") &&
                                       Catch::Contains("[1,4,6,6]"));
}

TEST_CASE("convolution rejects weights whose channels do not fit the groups", "[kernels][conv][errors]") {
  Attributes a;
  a.Set("group", int64_t{2});
  auto run = RunNode("Conv", a,
                     {testing::Activation({1, 4, 8, 8}, std::vector<float>(256)),
                      testing::Weights({4, 4, 3, 3}, std::vector<float>(144))},
                     {{1, 4, 6, 6}}, 1, "conv_g");
  REQUIRE(run.status.IsInvalidArgument());
  CHECK_THAT(run.status.message(), Catch::Contains("conv_g"));
  auto bad_group = RunNode("Conv", a,
                           {testing::Activation({1, 3, 8, 8}, std::vector<float>(192)),
                            testing::Weights({4, 1, 3, 3}, std::vector<float>(36))},
                           {{1, 4, 6, 6}}, 1, "conv_g3");
  REQUIRE(bad_group.status.IsInvalidArgument());
  CHECK_THAT(bad_group.status.message(), Catch::Contains("group"));
}

TEST_CASE("convolution rejects a bias of the wrong length and a non-4-D input", "[kernels][conv][errors]") {
  auto run = RunNode("Conv", {},
                     {testing::Activation({1, 3, 8, 8}, std::vector<float>(192)),
                      testing::Weights({4, 3, 3, 3}, std::vector<float>(108)),
                      testing::Weights({3}, std::vector<float>(3))},
                     {{1, 4, 6, 6}}, 1, "conv_b");
  REQUIRE(run.status.IsInvalidArgument());
  CHECK_THAT(run.status.message(), Catch::Contains("bias"));
  auto rank = RunNode("Conv", {},
                      {testing::Activation({3, 8, 8}, std::vector<float>(192)),
                       testing::Weights({4, 3, 3, 3}, std::vector<float>(108))},
                      {{4, 6, 6}}, 1, "conv_r");
  REQUIRE(rank.status.IsInvalidArgument());
  CHECK_THAT(rank.status.message(), Catch::Contains("conv_r"));
}

TEST_CASE("convolution reports an unknown fused activation as not supported", "[kernels][conv][errors]") {
  Attributes a;
  a.Set("activation", std::string("swishy"));
  auto run = RunNode("Conv", a,
                     {testing::Activation({1, 3, 8, 8}, std::vector<float>(192)),
                      testing::Weights({4, 3, 3, 3}, std::vector<float>(108))},
                     {{1, 4, 6, 6}}, 1, "conv_act");
  REQUIRE(run.status.IsNotSupported());
  CHECK_THAT(run.status.message(), Catch::Contains("conv_act") && Catch::Contains("swishy"));
}

TEST_CASE("convolution rejects a kernel larger than the padded input", "[kernels][conv][errors]") {
  auto run = RunNode("Conv", {},
                     {testing::Activation({1, 1, 2, 2}, std::vector<float>(4)),
                      testing::Weights({1, 1, 3, 3}, std::vector<float>(9))},
                     {{1, 1, 1, 1}}, 1, "conv_big");
  REQUIRE(run.status.IsInvalidArgument());
}

}  // namespace
}  // namespace tessera
