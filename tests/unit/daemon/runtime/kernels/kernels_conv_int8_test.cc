// The Conv kernel's integer path (daemon/runtime/kernels/conv_int8.h, issue
// 16 item 1): on an 8-bit grid's codes with int8 weights, every output is
//   fma(float(Σ k · (q − z)), s_x · s_w, bias)
// with the sum exact, so the kernel must equal that formula bit for bit —
// at every ISA level (this test runs again under TESSERA_ISA=avx2 and
// baseline, and on emulated Haswell / Nehalem CPUs: tests/CMakeLists.txt),
// with any thread count, for pointwise, dense, grouped, depthwise, strided,
// dilated and padded convs.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "daemon/runtime/kernels/isa.h"
#include "daemon/runtime/kernels/microkernels.h"
#include "daemon/runtime/kernels/weight_forms.h"
#include "partition/graph/int8_weights.h"
#include "partition/graph/quantization.h"
#include "tests/unit/daemon/runtime/kernels/kernels_testing.h"

namespace tessera {
namespace {

using testing::Activation;
using testing::RunNode;
using testing::TestTensor;
using testing::Weights;

struct Case {
  int64_t n, c, o, h, w, kh, kw, stride, pad, dilation, group;
  bool relu = false;
};

int64_t OutSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

struct Problem {
  Case cs;
  QuantGrid grid;
  std::vector<int32_t> q;   // input codes
  std::vector<float> x;     // their values
  std::vector<float> w, b;  // int8-grid weights, bias
  Shape y_shape;
  Attributes attrs;
};

Problem MakeProblem(const Case& cs, const QuantGrid& grid, std::mt19937& rng) {
  Problem p{cs, grid};
  std::uniform_int_distribution<int32_t> code(grid.qmin, grid.qmax), wk(-127, 127);
  p.q.resize(static_cast<size_t>(cs.n * cs.c * cs.h * cs.w));
  for (auto& v : p.q) v = code(rng);
  for (int32_t v : p.q) p.x.push_back(DequantizeCode(v, grid));
  const int64_t per = cs.c / cs.group * cs.kh * cs.kw;
  for (int64_t o = 0; o < cs.o; ++o) {
    const float s = 0.0007f * static_cast<float>(1 + o % 7);
    for (int64_t i = 0; i < per; ++i) p.w.push_back(static_cast<float>(wk(rng)) * s);
  }
  std::uniform_real_distribution<float> bias(-2.f, 2.f);
  for (int64_t o = 0; o < cs.o; ++o) p.b.push_back(bias(rng));
  p.y_shape = {cs.n, cs.o, OutSize(cs.h, cs.kh, cs.stride, cs.pad, cs.dilation),
               OutSize(cs.w, cs.kw, cs.stride, cs.pad, cs.dilation)};
  p.attrs.Set("group", cs.group);
  p.attrs.Set("strides", std::vector<int64_t>{cs.stride, cs.stride});
  p.attrs.Set("pads", std::vector<int64_t>{cs.pad, cs.pad, cs.pad, cs.pad});
  p.attrs.Set("dilations", std::vector<int64_t>{cs.dilation, cs.dilation});
  if (cs.relu) p.attrs.Set("activation", std::string("relu"));
  Node marked;
  marked.op = "Conv";
  SetConvInputGrid(grid, &marked);
  for (const auto& [name, value] : marked.attrs.all()) p.attrs.Set(name, value);
  return p;
}

// The formula, with the weights' int8 form as RecoverInt8Rows finds it
// (the scales the MCU builder stores too).
std::vector<float> Expected(const Problem& p) {
  const Case& cs = p.cs;
  const int64_t cg = cs.c / cs.group, og = cs.o / cs.group, per = cg * cs.kh * cs.kw;
  const auto rows = RecoverInt8Rows(p.w.data(), cs.o, per);
  REQUIRE(rows.has_value());
  const int64_t oh = p.y_shape[2], ow = p.y_shape[3];
  std::vector<float> y;
  for (int64_t n = 0; n < cs.n; ++n)
    for (int64_t o = 0; o < cs.o; ++o) {
      const int64_t grp = o / og;
      const float mult = p.grid.scale * rows->scales[static_cast<size_t>(o)];
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          int64_t acc = 0;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t ky = 0; ky < cs.kh; ++ky)
              for (int64_t kx = 0; kx < cs.kw; ++kx) {
                const int64_t iy = oy * cs.stride - cs.pad + ky * cs.dilation;
                const int64_t ix = ox * cs.stride - cs.pad + kx * cs.dilation;
                if (iy < 0 || iy >= cs.h || ix < 0 || ix >= cs.w) continue;
                const int64_t c = grp * cg + ic;
                const int32_t q = p.q[static_cast<size_t>(((n * cs.c + c) * cs.h + iy) * cs.w + ix)];
                acc += int64_t{rows->codes[static_cast<size_t>(o * per + (ic * cs.kh + ky) * cs.kw + kx)]} *
                       (q - p.grid.zero_point);
              }
          REQUIRE(std::llabs(acc) < (int64_t{1} << 31));
          float v = std::fma(static_cast<float>(acc), mult, p.b[static_cast<size_t>(o)]);
          if (cs.relu && v < 0) v = 0;
          y.push_back(v);
        }
    }
  return y;
}

testing::NodeRun Run(const Problem& p, int threads, bool integer = true) {
  Attributes attrs = p.attrs;
  if (!integer) attrs.Set("integer_conv", int64_t{0});
  const Case& cs = p.cs;
  return RunNode("Conv", attrs,
                 {Activation({cs.n, cs.c, cs.h, cs.w}, p.x), Weights({cs.o, cs.c / cs.group, cs.kh, cs.kw}, p.w),
                  Weights({cs.o}, p.b)},
                 {p.y_shape}, threads);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {1, 8, 12, 9, 11, 3, 3, 1, 1, 1, 1},        // dense 3x3, 99 columns
      {1, 16, 5, 7, 7, 1, 1, 1, 0, 1, 1},         // pointwise, 5 output channels (one partial row block)
      {2, 6, 6, 10, 10, 3, 3, 2, 1, 1, 6, true},  // depthwise, stride 2, batch 2, relu
      {1, 12, 8, 8, 9, 3, 3, 1, 2, 2, 4},         // grouped, dilated
      {1, 3, 17, 13, 13, 5, 5, 2, 2, 1, 1},       // odd K = 75
      {1, 6, 12, 6, 6, 3, 3, 1, 1, 1, 3, true},   // grouped with a channel multiplier
      {1, 64, 9, 40, 40, 1, 1, 1, 0, 1, 1},       // 1600 columns: several column blocks
      // The direct path (one input channel per output):
      {1, 4, 8, 7, 9, 3, 3, 1, 1, 1, 4},          // depthwise with a channel multiplier of 2
      {1, 3, 3, 30, 40, 3, 3, 2, 1, 1, 3, true},  // stride 2 over rows of 20 outputs (the vector loop)
      {1, 5, 5, 17, 19, 5, 5, 1, 2, 2, 5},        // dilated 5x5
      {1, 1, 6, 12, 7, 4, 4, 2, 1, 1, 1},         // one input channel (DS-CNN's first conv)
      {1, 2, 2, 9, 1, 3, 1, 2, 0, 1, 2},          // one column, stride 2: a column phase with no input
      {1, 16, 16, 6, 6, 3, 3, 1, 1, 1, 16},       // small planes, many channels (VWW's 6x6 depthwise)
      // The dense path (one pixel in and out):
      {2, 21, 7, 1, 1, 1, 1, 1, 0, 1, 1},
  };
  return cases;
}

TEST_CASE("integer conv equals fma(float(sum of codes x weights), scales, bias) bit for bit", "[kernels][conv][int8]") {
  std::mt19937 rng(29);
  const QuantGrid int8_grid{0.037f, 3, -128, 127}, uint8_grid{0.0125f, 128, 0, 255};
  for (const Case& cs : Cases())
    for (const QuantGrid& grid : {int8_grid, uint8_grid}) {
      const Problem p = MakeProblem(cs, grid, rng);
      const std::vector<float> want = Expected(p);
      for (int threads : {1, 2, 3}) {
        INFO("c " << cs.c << " o " << cs.o << " " << cs.kh << "x" << cs.kw << " stride " << cs.stride << " group "
                  << cs.group << " zero point " << grid.zero_point << " threads " << threads);
        auto run = Run(p, threads);
        REQUIRE(run.status.ok());
        CHECK(SameBits(run.outputs[0], want));
        // The float path computes the same values up to its own roundings.
        auto f = Run(p, threads, false);
        REQUIRE(f.status.ok());
        testing::ExpectClose(f.outputs[0], testing::ToDouble(want), 1e-4, 1e-4);
      }
    }
}

TEST_CASE("integer conv: a deep sum is exact where float32 sums round", "[kernels][conv][int8]") {
  // 256 channels × 3x3 = 2304 terms of up to 255 · 127: sums past 2^24,
  // which float32 accumulation cannot hold exactly. The test can tell the
  // two paths apart: the float path differs from the formula somewhere.
  std::mt19937 rng(31);
  const Problem p = MakeProblem({1, 256, 8, 6, 6, 3, 3, 1, 1, 1, 1}, QuantGrid{0.05f, -128, -128, 127}, rng);
  const std::vector<float> want = Expected(p);
  auto run = Run(p, 2);
  REQUIRE(run.status.ok());
  CHECK(SameBits(run.outputs[0], want));
  auto f = Run(p, 2, false);
  REQUIRE(f.status.ok());
  CHECK_FALSE(SameBits(f.outputs[0], want));
  testing::ExpectClose(f.outputs[0], testing::ToDouble(want), 1e-4, 1e-3);
}

TEST_CASE("integer conv: weights without an int8 form take the float path", "[kernels][conv][int8]") {
  std::mt19937 rng(37);
  Problem p = MakeProblem({1, 8, 4, 6, 6, 3, 3, 1, 1, 1, 1}, QuantGrid{0.02f, 0, -128, 127}, rng);
  std::uniform_real_distribution<float> any(-1.f, 1.f);
  for (float& v : p.w) v = any(rng);  // float weights
  REQUIRE_FALSE(RecoverInt8Rows(p.w.data(), 4, 72).has_value());
  auto integer = Run(p, 1), floats = Run(p, 1, false);
  REQUIRE(integer.status.ok());
  REQUIRE(floats.status.ok());
  CHECK(SameBits(integer.outputs[0], floats.outputs[0]));
}

TEST_CASE("integer conv: a shapes-only prepare sizes what a real one allocates", "[kernels][conv][int8]") {
  std::mt19937 rng(41);
  for (const Case& cs : Cases()) {
    const Problem p = MakeProblem(cs, QuantGrid{0.03f, 0, -128, 127}, rng);
    size_t sizes[2][3] = {};
    for (int shapes_only = 0; shapes_only < 2; ++shapes_only) {
      Graph graph;
      Node node;
      node.name = "conv";
      node.op = "Conv";
      node.attrs = p.attrs;
      const int x = graph.AddValue("x", {cs.n, cs.c, cs.h, cs.w});
      graph.inputs.push_back(x);
      const Shape ws{cs.o, cs.c / cs.group, cs.kh, cs.kw};
      const int w = graph.AddConstant("w", TensorData{ws, shapes_only ? std::vector<float>{} : p.w});
      const int b = graph.AddConstant("b", TensorData{{cs.o}, shapes_only ? std::vector<float>{} : p.b});
      const int y = graph.AddValue("y", p.y_shape);
      node.inputs = {x, w, b};
      node.outputs = {y};
      graph.outputs.push_back(y);
      graph.AddNode(node);
      auto kernel = FindKernel("Conv")();
      WeightForms forms;
      KernelContext ctx{graph, graph.nodes.back(), {{cs.n, cs.c, cs.h, cs.w}, ws, {cs.o}}, {p.y_shape}, {}, 2};
      ctx.constant_inputs = {nullptr, graph.ConstantData(w), graph.ConstantData(b)};
      ctx.shapes_only = shapes_only != 0;
      ctx.weight_forms = &forms;
      REQUIRE(kernel->Prepare(ctx).ok());
      sizes[shapes_only][0] = kernel->ScratchBytes();
      sizes[shapes_only][1] = kernel->OwnedWeightBytes();
      sizes[shapes_only][2] = kernel->PrepareTransientBytes();
      CHECK_FALSE(kernel->ReadsConstantInEval(1));
      CHECK(kernel->InPlaceInput() == -1);
    }
    INFO("c " << cs.c << " o " << cs.o << " group " << cs.group);
    CHECK(sizes[0][0] == sizes[1][0]);
    CHECK(sizes[0][1] == sizes[1][1]);
    CHECK(sizes[0][2] == sizes[1][2]);
    CHECK(sizes[1][1] > 0);
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST_CASE("integer dense layer: a Gemm on codes equals the formula bit for bit", "[kernels][gemm][int8]") {
  // A dense layer is a 1x1 conv of one pixel per input row: the same sums.
  std::mt19937 rng(43);
  const QuantGrid grid{0.021f, -7, -128, 127};
  for (int64_t rows : {1, 3})
    for (int64_t in : {5, 300}) {
      const int64_t out = 10;
      Problem p = MakeProblem({rows, in, out, 1, 1, 1, 1, 1, 0, 1, 1, true}, grid, rng);
      Attributes attrs;
      attrs.Set("activation", std::string("relu"));
      Node marked;
      marked.op = "Gemm";
      SetConvInputGrid(grid, &marked);
      for (const auto& [name, value] : marked.attrs.all()) attrs.Set(name, value);
      const std::vector<float> want = Expected(p);  // [rows, out, 1, 1] = [rows, out]
      for (int threads : {1, 2}) {
        INFO("rows " << rows << " in " << in << " threads " << threads);
        auto run = RunNode("Gemm", attrs, {Activation({rows, in}, p.x), Weights({out, in}, p.w), Weights({out}, p.b)},
                           {{rows, out}}, threads);
        REQUIRE(run.status.ok());
        CHECK(SameBits(run.outputs[0], want));
        attrs.Set("integer_conv", int64_t{0});
        auto f = RunNode("Gemm", attrs, {Activation({rows, in}, p.x), Weights({out, in}, p.w), Weights({out}, p.b)},
                         {{rows, out}}, threads);
        attrs.Erase("integer_conv");
        REQUIRE(f.status.ok());
        testing::ExpectClose(f.outputs[0], testing::ToDouble(want), 1e-4, 1e-4);
      }
    }
}

// The QuantizeDequantize microkernel (a QDQ model's every activation step,
// vectorised) is quantization.h's QuantizeDequantize bit for bit at the
// active ISA level (this test also runs with TESSERA_ISA=baseline/avx2, on
// emulated Haswell and Nehalem, and on arm64): ties both ways, saturation,
// NaN, infinities and values that round to -0 steps (stored as +0, as the
// scalar code's int32 detour does).
TEST_CASE("QuantizeDequantize microkernel equals quantization.h bit for bit", "[kernels][int8]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-200.f, 200.f);
  for (const QuantGrid g :
       {QuantGrid{0.25f, -5, -128, 127}, QuantGrid{0.0123f, 0, 0, 255}, QuantGrid{3.5f, 127, -128, 127}}) {
    std::vector<float> x;
    for (int k = -300; k <= 300; ++k) x.push_back((static_cast<float>(k) + 0.5f) * g.scale);  // ties
    for (float v : {0.f, -0.f, -0.3f * g.scale, 0.3f * g.scale, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 1e30f, -1e30f})
      x.push_back(v);
    for (int k = 0; k < 1000; ++k) x.push_back(u(rng) * g.scale);
    for (const size_t n : {x.size(), size_t{7}, size_t{37}}) {  // vector body and scalar tails
      std::vector<float> got(n, 1.f);
      MicrokernelsFor(ActiveIsa())
          .quantize_dequantize(x.data(), static_cast<int64_t>(n), g.scale, static_cast<float>(g.qmin - g.zero_point),
                               static_cast<float>(g.qmax - g.zero_point), got.data());
      int differ = 0;
      for (size_t i = 0; i < n; ++i) {
        const float want = QuantizeDequantize(x[i], g);
        if (std::memcmp(&want, &got[i], sizeof(float)) != 0 && ++differ <= 3)
          UNSCOPED_INFO("x " << x[i] << ": want " << want << ", got " << got[i]);
      }
      INFO(IsaName(ActiveIsa()) << ", scale " << g.scale << ", n " << n);
      CHECK(differ == 0);
    }
  }
}

}  // namespace
}  // namespace tessera
