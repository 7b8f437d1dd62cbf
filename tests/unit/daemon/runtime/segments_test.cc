// Segments (METHODS §6 "Segments", issue 17 item 5): a step writes its output
// over an input nothing reads later (pointwise and depthwise convs,
// elementwise ops). Arenas derived by hand, answers equal to the same graph
// run with separate buffers (ExecutorOptions::segments = false) and to a
// naive reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/kernel.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/graph/arena_layout.h"
#include "tests/unit/daemon/runtime/cfg_graph.h"

namespace tessera {
namespace {

std::vector<float> Random(int64_t n, std::mt19937& rng, float scale = 1.f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

struct Built {
  Graph graph;
  std::vector<std::vector<float>> weights;  // per conv, [O][C] (pointwise) or [C][k*k] (depthwise)
};

// x [1,C0,H,W] -> 1x1 convs with the given output channels (relu after
// the second) -> global average pool.
Built PointwiseChain(int64_t c0, int64_t h, int64_t w, const std::vector<int64_t>& outs, std::mt19937& rng) {
  Built b;
  Graph& g = b.graph;
  int x = g.AddValue("x", {1, c0, h, w});
  g.inputs = {x};
  int64_t c = c0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const int64_t o = outs[i];
    b.weights.push_back(Random(o * c, rng, 0.5f));
    const int wv = g.AddConstant("w" + std::to_string(i), TensorData{{o, c, 1, 1}, b.weights.back()});
    const int y = g.AddValue("y" + std::to_string(i), {1, o, h, w});
    Attributes a;
    a.Set("kernel_shape", std::vector<int64_t>{1, 1});
    g.AddNode(Node{"pw" + std::to_string(i), "Conv", {x, wv}, {y}, a});
    x = y;
    c = o;
    if (i == 1) {
      const int r = g.AddValue("relu", {1, c, h, w});
      g.AddNode(Node{"relu", "Relu", {x}, {r}, {}});
      x = r;
    }
  }
  const int pooled = g.AddValue("pooled", {1, c, 1, 1});
  g.AddNode(Node{"pool", "GlobalAveragePool", {x}, {pooled}, {}});
  g.outputs = {pooled};
  return b;
}

std::vector<double> PointwiseChainReference(const Built& b, const std::vector<float>& x, int64_t c0, int64_t plane,
                                            const std::vector<int64_t>& outs) {
  std::vector<double> cur(x.begin(), x.end());
  int64_t c = c0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const int64_t o = outs[i];
    std::vector<double> next(static_cast<size_t>(o * plane), 0.0);
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t ic = 0; ic < c; ++ic)
        for (int64_t p = 0; p < plane; ++p) next[oc * plane + p] += b.weights[i][oc * c + ic] * cur[ic * plane + p];
    if (i == 1)
      for (double& v : next) v = std::max(v, 0.0);
    cur.swap(next);
    c = o;
  }
  std::vector<double> pooled(static_cast<size_t>(c), 0.0);
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t p = 0; p < plane; ++p) pooled[k] += cur[k * plane + p];
    pooled[k] /= static_cast<double>(plane);
  }
  return pooled;
}

std::vector<float> RunGraph(const Graph& g, const std::vector<TensorData>& inputs, bool segments, int threads,
                            size_t* arena, int* in_place) {
  ExecutorOptions o;
  o.segments = segments;
  o.threads = threads;
  auto ex = Executor::Create(g, o);
  INFO(ex.status().ToString());
  REQUIRE(ex.ok());
  std::vector<TensorData> out;
  REQUIRE((*ex)->Run(inputs, &out).ok());
  *arena = (*ex)->arena_bytes();
  *in_place = (*ex)->in_place_steps();
  return out[0].values;
}

TEST_CASE("segments: a pointwise chain shares one buffer, hand-derived arena", "[segments][executor]") {
  // x [1,4,8,8] 1 KiB (graph input) -> pw 4->16 A 4 KiB -> pw 16->16 B
  // 4 KiB -> relu C 4 KiB -> pw 16->8 E 2 KiB -> pool D 32 B.
  // Separate buffers: A+B and B+C are alive together: 8 KiB.
  // Segments: pw 16->16 and relu write over A (equal sizes): one 4 KiB
  // buffer from step 1 to 4; pw 16->16 in place needs 16 rows x 32 columns
  // of scratch (2 KiB) at its step: 4 + 2 = 6 KiB at step 2, and at step 4
  // the 4 KiB buffer + E 2 KiB = 6 KiB. The x -> A conv reads a graph
  // input and E's merge would save nothing more: 6144 bytes.
  std::mt19937 rng(3);
  const std::vector<int64_t> outs = {16, 16, 8};
  const Built b = PointwiseChain(4, 8, 8, outs, rng);
  const std::vector<float> x = Random(4 * 64, rng);
  size_t with = 0, without = 0;
  int merged = 0, none = 0;
  const auto a = RunGraph(b.graph, {TensorData{{1, 4, 8, 8}, x}}, true, 1, &with, &merged);
  const auto c = RunGraph(b.graph, {TensorData{{1, 4, 8, 8}, x}}, false, 1, &without, &none);
  CHECK(without == 8192);
  CHECK(with == 6144);
  CHECK(merged == 2);
  CHECK(none == 0);
  const auto ref = PointwiseChainReference(b, x, 4, 64, outs);
  REQUIRE(a.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    CHECK(std::fabs(a[i] - ref[i]) <= 1e-5 * (1.0 + std::fabs(ref[i])));
    CHECK(a[i] == c[i]);  // the same microkernel on the same columns: bitwise equal
  }
}

// Runs one Conv kernel twice on the same input: into a separate output,
// and with its output over its input (one buffer of the larger size, the
// step's in-place scratch), as the executor binds a merged step.
void CompareInPlace(const Attributes& attrs, const Shape& x_shape, const Shape& w_shape, const Shape& y_shape,
                    int threads, std::mt19937& rng) {
  Graph graph;
  const std::vector<float> xv = Random(NumElements(x_shape), rng);
  const std::vector<float> wv = Random(NumElements(w_shape), rng, 0.5f);
  const int x = graph.AddValue("x", x_shape);
  const int w = graph.AddConstant("w", TensorData{w_shape, wv});
  const int y = graph.AddValue("y", y_shape);
  graph.inputs = {x};
  graph.outputs = {y};
  graph.AddNode(Node{"conv", "Conv", {x, w}, {y}, attrs});
  std::unique_ptr<Kernel> kernel = FindKernel("Conv")();
  KernelContext ctx{graph, graph.nodes.back(), {x_shape, w_shape}, {y_shape}, {nullptr, graph.ConstantData(w)}};
  ctx.threads = threads;
  REQUIRE(kernel->Prepare(ctx).ok());
  REQUIRE(kernel->InPlaceInput() == 0);
  auto aligned = [](std::vector<float>& v) {
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
  };
  std::vector<float> scratch(kernel->ScratchBytes() / 4 + 16), apart(NumElements(y_shape));
  EvalContext e;
  e.inputs = {xv.data(), wv.data()};
  e.outputs = {apart.data()};
  e.scratch = aligned(scratch);
  e.threads = threads;
  kernel->Eval(e);
  std::vector<float> buffer(std::max(NumElements(x_shape), NumElements(y_shape)), std::nanf(""));
  std::copy(xv.begin(), xv.end(), buffer.begin());
  std::vector<float> in_place_scratch(kernel->InPlaceScratchBytes() / 4 + 16);
  e.inputs = {buffer.data(), wv.data()};
  e.outputs = {buffer.data()};
  e.scratch = aligned(in_place_scratch);
  kernel->Eval(e);
  for (size_t i = 0; i < apart.size(); ++i) {
    INFO("element " << i);
    REQUIRE(buffer[i] == apart[i]);  // same microkernels on the same columns: bitwise equal
  }
}

TEST_CASE("segments: in-place pointwise convs widen, narrow and keep channels, any plane, 1 and 2 threads",
          "[segments][conv]") {
  // Plane 7x7 = 49: one 32-column block and a 17-column one. C < O: each
  // block's inputs go through scratch; C > O: its outputs do.
  std::mt19937 rng(11);
  Attributes pw;
  pw.Set("kernel_shape", std::vector<int64_t>{1, 1});
  for (int threads : {1, 2})
    for (const auto& [c, o] : {std::pair<int64_t, int64_t>{24, 40}, {40, 12}, {16, 16}, {3, 70}}) {
      CAPTURE(threads, c, o);
      CompareInPlace(pw, {1, c, 7, 7}, {o, c, 1, 1}, {1, o, 7, 7}, threads, rng);
    }
}

TEST_CASE("segments: in-place depthwise convs, stride 1 on any thread count, stride 2 on one", "[segments][conv]") {
  std::mt19937 rng(13);
  for (int stride : {1, 2})
    for (int threads : {1, 2}) {
      if (stride == 2 && threads == 2) continue;  // not offered (see the executor case below)
      CAPTURE(stride, threads);
      Attributes dw;
      dw.Set("kernel_shape", std::vector<int64_t>{3, 3});
      dw.Set("group", int64_t{12});
      dw.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
      dw.Set("strides", std::vector<int64_t>{stride, stride});
      const int64_t o = stride == 1 ? 9 : 5;
      CompareInPlace(dw, {1, 12, 9, 9}, {12, 1, 3, 3}, {1, 12, o, o}, threads, rng);
    }
}

// Planes large enough for the channels-in-lanes path to work in bands of
// output rows (microkernels.h kDepthwiseBandBytes), 40 channels (blocks of
// 16 and a partial one), 3x3 and 5x5: written over the input, bitwise equal
// to a separate output. Stride 1 with the same plane carries the rows two
// bands share; stride 2 and a smaller "valid" plane (one thread) take the
// plane path for the blocks whose outputs would land on unread input.
TEST_CASE("segments: in-place depthwise convs on planes split into bands", "[segments][conv]") {
  std::mt19937 rng(14);
  for (int64_t k : {3, 5})
    for (int64_t stride : {1, 2})
      for (bool valid : {false, true})
        for (int threads : {1, 2}) {
          if ((stride == 2 || valid) && threads == 2) continue;  // smaller output: one thread only
          CAPTURE(k, stride, valid, threads);
          Attributes dw;
          dw.Set("kernel_shape", std::vector<int64_t>{k, k});
          dw.Set("group", int64_t{40});
          const int64_t pad = valid ? 0 : k / 2;
          dw.Set("pads", std::vector<int64_t>{pad, pad, pad, pad});
          dw.Set("strides", std::vector<int64_t>{stride, stride});
          const int64_t side = 90, o = (side + 2 * pad - k) / stride + 1;
          CompareInPlace(dw, {1, 40, side, side}, {40, 1, k, k}, {1, 40, o, o}, threads, rng);
        }
}

// The keyword-spotting-sized CNN: 32x8x1 input, conv 3x3 (32) ->
// depthwise 3x3 -> pointwise (32) -> average pool -> dense (12).
const char* kKws =
    "[net]\nbatch=1\nheight=32\nwidth=8\nchannels=1\n\n"
    "[convolutional]\nfilters=32\nsize=3\nstride=1\npad=1\nactivation=relu\n\n"
    "[convolutional]\nfilters=32\nsize=3\nstride=1\npad=1\ngroups=32\nactivation=relu\n\n"
    "[convolutional]\nfilters=32\nsize=1\nstride=1\npad=0\nactivation=relu\n\n"
    "[avgpool]\n\n[connected]\noutput=12\nactivation=linear\n";

TEST_CASE("segments: the keyword-spotting CNN's arena drops from 68608 to 43008 bytes", "[segments][kws]") {
  // Separate buffers: the peak is the depthwise step: conv output 32 KiB +
  // depthwise output 32 KiB + its scratch = 68608. The scratch is the
  // channels-in-lanes block path's (microkernels.h DepthwiseChannelsShapeFor,
  // sized for 16 lanes; its budget, an eighth of the 32 KiB input, allows
  // bands of one output row): a padded 3-row image 10 pixels wide (480
  // floats), one 8-pixel output row (128) and 9 tap vectors + the bias
  // (160): 768 floats, 3072 B, more than the plane-at-a-time path's 672
  // floats (one 10-wide polyphase plane of 35 rows + a flat 32x10 output).
  // Segments: the depthwise conv writes over the conv's
  // output and the pointwise over the depthwise's (one 32 KiB buffer); the
  // peak moves to the first conv: input 1 KiB + 32 KiB + its im2col tile
  // (9 x 256 floats, 9216 B) = 43008.
  const Graph g = FromCfg("kws_segments", kKws);
  const TensorData x = SeededInput(g.values[g.inputs[0]].shape, 5);
  size_t with = 0, without = 0;
  int merged = 0, none = 0;
  const auto a = RunGraph(g, {x}, true, 1, &with, &merged);
  const auto c = RunGraph(g, {x}, false, 1, &without, &none);
  CHECK(without == 68608);
  CHECK(with == 43008);
  CHECK(merged == 2);
  REQUIRE(a.size() == c.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == c[i]);
}

TEST_CASE("segments: the executor merges a depthwise conv at stride 1, at stride 2 only on one thread",
          "[segments][executor]") {
  // x -> pw (16) -> depthwise 3x3 stride s -> pw (16) -> pool. Stride 2
  // writes plane c over planes <= c: only one worker taking planes in
  // order may, so with 2 threads the kernel does not offer it.
  for (int stride : {1, 2}) {
    for (int threads : {1, 2}) {
      CAPTURE(stride, threads);
      std::mt19937 rng(5);
      Graph g;
      const int x = g.AddValue("x", {1, 4, 12, 12});
      g.inputs = {x};
      Attributes pw;
      pw.Set("kernel_shape", std::vector<int64_t>{1, 1});
      const int w0 = g.AddConstant("w0", TensorData{{16, 4, 1, 1}, Random(64, rng, 0.5f)});
      const int a = g.AddValue("a", {1, 16, 12, 12});
      g.AddNode(Node{"pw0", "Conv", {x, w0}, {a}, pw});
      const int64_t oh = stride == 1 ? 12 : 6;
      Attributes dw;
      dw.Set("kernel_shape", std::vector<int64_t>{3, 3});
      dw.Set("group", int64_t{16});
      dw.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
      dw.Set("strides", std::vector<int64_t>{stride, stride});
      const int w1 = g.AddConstant("w1", TensorData{{16, 1, 3, 3}, Random(144, rng, 0.5f)});
      const int d = g.AddValue("d", {1, 16, oh, oh});
      g.AddNode(Node{"dw", "Conv", {a, w1}, {d}, dw});
      const int w2 = g.AddConstant("w2", TensorData{{16, 16, 1, 1}, Random(256, rng, 0.5f)});
      const int e = g.AddValue("e", {1, 16, oh, oh});
      g.AddNode(Node{"pw1", "Conv", {d, w2}, {e}, pw});
      const int p = g.AddValue("p", {1, 16, 1, 1});
      g.AddNode(Node{"pool", "GlobalAveragePool", {e}, {p}, {}});
      g.outputs = {p};
      const TensorData in{{1, 4, 12, 12}, Random(4 * 144, rng)};
      ExecutorOptions o;
      o.threads = threads;
      auto ex = Executor::Create(g, o);
      REQUIRE(ex.ok());
      // The depthwise step writes over `a` exactly when the layout merged it.
      std::vector<TensorData> out_with, out_without;
      REQUIRE((*ex)->Run({in}, &out_with).ok());
      o.segments = false;
      auto plain = Executor::Create(g, o);
      REQUIRE(plain.ok());
      REQUIRE((*plain)->Run({in}, &out_without).ok());
      if (stride == 1 || threads == 1) {
        CHECK((*ex)->arena_bytes() < (*plain)->arena_bytes());
        CHECK((*ex)->in_place_steps() >= 1);
      } else {  // the peak is the depthwise step, which may not merge here
        CHECK((*ex)->arena_bytes() == (*plain)->arena_bytes());
      }
      for (size_t i = 0; i < out_with[0].values.size(); ++i) CHECK(out_with[0].values[i] == out_without[0].values[i]);
    }
  }
}

TEST_CASE("segments: a residual add writes over its branch, the other operand is still read", "[segments][binary]") {
  // x -> relu -> a; a -> sigmoid -> b; add(b, a) -> c; pool. The add writes
  // over b, its first operand, last read there; each element reads both
  // operands before it is written.
  Graph g;
  const int x = g.AddValue("x", {1, 8, 16, 16});
  const int a = g.AddValue("a", {1, 8, 16, 16});
  const int b = g.AddValue("b", {1, 8, 16, 16});
  const int c = g.AddValue("c", {1, 8, 16, 16});
  const int p = g.AddValue("p", {1, 8, 1, 1});
  g.inputs = {x};
  g.AddNode(Node{"relu", "Relu", {x}, {a}, {}});
  g.AddNode(Node{"sigmoid", "Sigmoid", {a}, {b}, {}});
  g.AddNode(Node{"add", "Add", {b, a}, {c}, {}});
  g.AddNode(Node{"pool", "GlobalAveragePool", {c}, {p}, {}});
  g.outputs = {p};
  std::mt19937 rng(9);
  const std::vector<float> xv = Random(8 * 256, rng);
  size_t with = 0, without = 0;
  int merged = 0, none = 0;
  const auto out = RunGraph(g, {TensorData{{1, 8, 16, 16}, xv}}, true, 1, &with, &merged);
  RunGraph(g, {TensorData{{1, 8, 16, 16}, xv}}, false, 1, &without, &none);
  // Separate: x (8 KiB, input) + a + b at the sigmoid, a + b + c at the add: 24 KiB.
  // Merged: the add writes over b; a and b stay: 16 KiB at the sigmoid and the add.
  CHECK(without == 24576);
  CHECK(with == 16384);
  for (int64_t ch = 0; ch < 8; ++ch) {
    double sum = 0;
    for (int64_t i = 0; i < 256; ++i) {
      const double r = std::max(0.0, static_cast<double>(xv[ch * 256 + i]));
      sum += r + 1.0 / (1.0 + std::exp(-r));
    }
    CHECK(std::fabs(out[ch] - sum / 256) <= 1e-5);
  }
}

TEST_CASE("PlanWithSegments on hand-made lifetimes", "[segments][arena]") {
  // Requests (64-byte units): 0: A [0,1] 4; 1: B [1,2] 4; 2: C [2,3] 4;
  // 3, 4: scratch of steps 1 and 2 (0 and 1 unit in place). A chain A->B->C
  // merged is one 4-unit buffer + 1 unit of scratch at step 2: 5 units
  // instead of 8. A candidate whose merge would not pay (expanding D: 1
  // unit -> 8 units while another 8 are alive with D) stays off.
  const size_t u = 64;
  std::vector<BufferRequest> r = {{4 * u, 0, 1}, {4 * u, 1, 2}, {4 * u, 2, 3}, {0, 1, 1}, {0, 2, 2}};
  std::vector<SegmentCandidate> k = {{0, 1, 3, 0}, {1, 2, 4, u}};
  const BestOfGreedyLayout layout(u);
  SegmentPlan sp = PlanWithSegments(layout, r, k);
  CHECK(sp.plan.size == 5 * u);
  CHECK(sp.merges == 2);
  CHECK(sp.plan.offsets[1] == sp.plan.offsets[0]);
  CHECK(sp.plan.offsets[2] == sp.plan.offsets[0]);
  CHECK(CheckNoOverlap(sp.requests, sp.plan).ok());

  // 0: D [0,1] 1 unit; 1: E [1,2] 8 units (D's step writes it); 2: F [0,0]
  // 8 units; 3: scratch. Apart: D+F at step 0, D+E at step 1: 9 units.
  // Merged, the 8-unit buffer is alive at step 0 beside F: 16. Stays off.
  std::vector<BufferRequest> r2 = {{u, 0, 1}, {8 * u, 1, 2}, {8 * u, 0, 0}, {0, 1, 1}};
  SegmentPlan sp2 = PlanWithSegments(layout, r2, {{0, 1, 3, 0}});
  CHECK(sp2.merges == 0);
  CHECK(sp2.plan.size == 9 * u);
}

}  // namespace
}  // namespace tessera
