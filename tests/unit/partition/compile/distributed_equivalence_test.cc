// Issue 4 proof on hand-built graphs: every scheme, compiled to device
// programs and run in one process over in-process links, equals the unsplit
// run (max |a−b| / max |b| ≤ 1e-5).
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <random>

#include "daemon/runtime/device_memory.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/program_runner.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/metrics.h"
#include "planner/plan.h"

using namespace tessera;

namespace {

class GraphMaker {
 public:
  explicit GraphMaker(Shape input) : rng_(5) {
    x_ = g_.AddValue("input", input);
    g_.inputs = {x_};
  }
  int Conv(int in, int64_t out_ch, int64_t k, int64_t stride, int64_t pad, int64_t dil = 1, int64_t group = 1,
           const std::string& act = "") {
    const Shape s = g_.values[in].shape;
    const int64_t h = (s[2] + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    const int64_t w = (s[3] + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    int wt = g_.AddConstant(Name("w"), Random({out_ch, s[1] / group, k, k}));
    int b = g_.AddConstant(Name("b"), Random({out_ch}));
    int y = g_.AddValue(Name("y"), {s[0], out_ch, h, w});
    Node n{Name("conv"), "Conv", {in, wt, b}, {y}, {}};
    n.attrs.Set("kernel_shape", std::vector<int64_t>{k, k});
    n.attrs.Set("strides", std::vector<int64_t>{stride, stride});
    n.attrs.Set("pads", std::vector<int64_t>{pad, pad, pad, pad});
    n.attrs.Set("dilations", std::vector<int64_t>{dil, dil});
    n.attrs.Set("group", group);
    if (!act.empty()) n.attrs.Set("activation", act), n.attrs.Set("act_alpha", 0.1);
    g_.AddNode(n);
    return y;
  }
  int Pool(int in, const std::string& op, int64_t k, int64_t stride, int64_t pad = 0) {
    const Shape s = g_.values[in].shape;
    int y = g_.AddValue(Name("p"), {s[0], s[1], (s[2] + 2 * pad - k) / stride + 1, (s[3] + 2 * pad - k) / stride + 1});
    Node n{Name("pool"), op, {in}, {y}, {}};
    n.attrs.Set("kernel_shape", std::vector<int64_t>{k, k});
    n.attrs.Set("strides", std::vector<int64_t>{stride, stride});
    n.attrs.Set("pads", std::vector<int64_t>{pad, pad, pad, pad});
    g_.AddNode(n);
    return y;
  }
  int Unary(int in, const std::string& op) {
    int y = g_.AddValue(Name("u"), g_.values[in].shape);
    g_.AddNode(Node{Name(op), op, {in}, {y}, {}});
    return y;
  }
  int Add(int a, int b) {
    int y = g_.AddValue(Name("sum"), g_.values[a].shape);
    g_.AddNode(Node{Name("add"), "Add", {a, b}, {y}, {}});
    return y;
  }
  // Element-wise product; `b` may broadcast (an SE gate [N, C, 1, 1]).
  int Mul(int a, int b) {
    int y = g_.AddValue(Name("prod"), g_.values[a].shape);
    g_.AddNode(Node{Name("mul"), "Mul", {a, b}, {y}, {}});
    return y;
  }
  int Pad(int in, int64_t top, int64_t left, int64_t bottom, int64_t right) {
    const Shape s = g_.values[in].shape;
    int y = g_.AddValue(Name("padded"), {s[0], s[1], s[2] + top + bottom, s[3] + left + right});
    Node n{Name("pad"), "Pad", {in}, {y}, {}};
    n.attrs.Set("pads", std::vector<int64_t>{0, 0, top, left, 0, 0, bottom, right});
    n.attrs.Set("value", 0.25);
    g_.AddNode(n);
    return y;
  }
  // Resize of H and W to out_h × out_w; `scales` empty: the sizes form.
  int Resize(int in, const std::string& mode, const std::string& transform, const std::string& rounding, int64_t out_h,
             int64_t out_w, std::vector<double> scales = {}) {
    const Shape s = g_.values[in].shape;
    int y = g_.AddValue(Name("r"), {s[0], s[1], out_h, out_w});
    Node n{Name("resize"), "Resize", {in}, {y}, {}};
    n.attrs.Set("mode", mode);
    n.attrs.Set("coordinate_transformation_mode", transform);
    if (mode == "nearest") n.attrs.Set("nearest_mode", rounding);
    if (!scales.empty()) n.attrs.Set("scales", scales);
    g_.AddNode(n);
    return y;
  }
  // 2-D ConvTranspose with per-axis stride, pads (begin, end), dilation and output_padding.
  int ConvTranspose(int in, int64_t out_ch, std::vector<int64_t> k, std::vector<int64_t> stride,
                    std::vector<int64_t> pads, std::vector<int64_t> dil, std::vector<int64_t> out_pad, int64_t group) {
    const Shape s = g_.values[in].shape;
    int64_t o[2];
    for (int a = 0; a < 2; ++a)
      o[a] = stride[a] * (s[2 + a] - 1) + out_pad[a] + (k[a] - 1) * dil[a] + 1 - pads[a] - pads[2 + a];
    int wt = g_.AddConstant(Name("w"), Random({s[1], out_ch / group, k[0], k[1]}));
    int b = g_.AddConstant(Name("b"), Random({out_ch}));
    int y = g_.AddValue(Name("t"), {s[0], out_ch, o[0], o[1]});
    Node n{Name("convT"), "ConvTranspose", {in, wt, b}, {y}, {}};
    n.attrs.Set("kernel_shape", k);
    n.attrs.Set("strides", stride);
    n.attrs.Set("pads", pads);
    n.attrs.Set("dilations", dil);
    n.attrs.Set("output_padding", out_pad);
    n.attrs.Set("group", group);
    g_.AddNode(n);
    return y;
  }
  // LayerNorm over the channels at each position (graph.h: axis 1, span 1).
  int ChannelLayerNorm(int in) {
    const Shape s = g_.values[in].shape;
    int y = g_.AddValue(Name("ln"), s);
    Node n{Name("norm"),
           "LayerNormalization",
           {in, g_.AddConstant(Name("gamma"), Random({s[1]})), g_.AddConstant(Name("beta"), Random({s[1]}))},
           {y},
           {}};
    n.attrs.Set("axis", int64_t{1});
    n.attrs.Set("span", int64_t{1});
    g_.AddNode(n);
    return y;
  }
  int Gap(int in) {
    const Shape s = g_.values[in].shape;
    int y = g_.AddValue(Name("gap"), {s[0], s[1], 1, 1});
    g_.AddNode(Node{Name("gap"), "GlobalAveragePool", {in}, {y}, {}});
    return y;
  }
  int Flatten(int in) {
    const Shape s = g_.values[in].shape;
    Shape o = {s[0], NumElements(s) / s[0]};
    int y = g_.AddValue(Name("flat"), o);
    Node n{Name("flatten"), "Reshape", {in}, {y}, {}};
    n.attrs.Set("shape", o);
    g_.AddNode(n);
    return y;
  }
  int Dense(int in, int64_t out, const std::string& act = "") {
    const Shape s = g_.values[in].shape;
    int wt = g_.AddConstant(Name("w"), Random({out, NumElements(s) / s[0]}));
    int b = g_.AddConstant(Name("b"), Random({out}));
    int y = g_.AddValue(Name("d"), {s[0], out});
    Node n{Name("gemm"), "Gemm", {in, wt, b}, {y}, {}};
    if (!act.empty()) n.attrs.Set("activation", act);
    g_.AddNode(n);
    return y;
  }
  int input() const { return x_; }
  Graph Finish(int out) {
    g_.outputs = {out};
    return g_;
  }

 private:
  std::string Name(const std::string& p) { return p + std::to_string(counter_++); }
  TensorData Random(Shape s) {
    TensorData t{s, std::vector<float>(NumElements(s))};
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (float& v : t.values) v = u(rng_);
    return t;
  }
  Graph g_;
  int x_;
  int counter_ = 0;
  std::mt19937 rng_;
};

double MaxRelDiff(const TensorData& a, const TensorData& b) {
  double max_abs = 0, max_ref = 1e-30;
  for (size_t i = 0; i < a.values.size(); ++i) {
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(a.values[i] - b.values[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(b.values[i])));
  }
  return max_abs / max_ref;
}

// Runs `plan` distributed and unsplit; returns the in-process run.
InProcessRun CheckEquivalent(const Graph& g, const PartitionPlan& plan, double tol = 1e-5) {
  std::vector<TensorData> inputs;
  for (int v : g.inputs) inputs.push_back(SeededInput(g.values[v].shape, 9));
  auto ex = Executor::Create(g, {});
  INFO(ex.status().ToString());
  REQUIRE(ex.ok());
  std::vector<TensorData> ref;
  REQUIRE((*ex)->Run(inputs, &ref).ok());
  auto compiled = CompilePlan(g, plan);
  INFO(compiled.status().ToString());
  REQUIRE(compiled.ok());
  auto run = RunProgramsInProcess(g, compiled->programs, inputs, {});
  INFO(run.status().ToString());
  REQUIRE(run.ok());
  REQUIRE(run->outputs.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    REQUIRE(run->outputs[i].shape == ref[i].shape);
    CHECK(MaxRelDiff(run->outputs[i], ref[i]) <= tol);
  }
  return std::move(*run);
}

LayerAssignment Whole(int d) { return {LayerScheme::kWhole, {d}, {}, 1, 1, {}, {}}; }
LayerAssignment Ffmt(std::vector<int> devices, int64_t rows, int64_t cols, std::vector<double> rw = {},
                     std::vector<double> cw = {}) {
  return {LayerScheme::kFfmt, devices, {}, rows, cols, rw, cw};
}
LayerAssignment Split(LayerScheme s, std::vector<int> devices, std::vector<int64_t> split = {}) {
  return {s, devices, split, 1, 1, {}, {}};
}
std::vector<int> Range(int n) {
  std::vector<int> d(n);
  for (int i = 0; i < n; ++i) d[i] = i;
  return d;
}

// conv3 relu -> conv3 s2 leaky -> maxpool2 -> depthwise3 -> conv1x1 -> gap -> flatten -> dense relu -> dense
Graph SmallCnn() {
  GraphMaker m({1, 3, 20, 20});
  int y = m.Conv(m.input(), 8, 3, 1, 1, 1, 1, "relu");
  y = m.Conv(y, 16, 3, 2, 1, 1, 1, "leaky_relu");
  y = m.Pool(y, "MaxPool", 2, 2);
  y = m.Conv(y, 16, 3, 1, 1, 1, 16, "relu");  // depthwise
  y = m.Conv(y, 12, 1, 1, 0);
  y = m.Gap(y);
  y = m.Flatten(y);
  y = m.Dense(y, 10, "relu");
  y = m.Dense(y, 6);
  return m.Finish(y);
}

}  // namespace

TEST_CASE("ffmt tiles reassemble to the unsplit output (2x2, 3x3, uneven)") {
  Graph g = SmallCnn();
  for (auto [n, rows, cols] : {std::tuple{4, 2, 2}, std::tuple{3, 3, 3}, std::tuple{2, 2, 1}, std::tuple{6, 3, 2}}) {
    PartitionPlan plan;
    plan.num_devices = n;
    for (int l = 0; l < 5; ++l) plan.layers.push_back(Ffmt(Range(n), rows, cols));
    for (int l = 5; l < 9; ++l) plan.layers.push_back(Whole(0));
    auto run = CheckEquivalent(g, plan);
    CHECK(run.total_bytes > 0);
  }
  PartitionPlan uneven;
  uneven.num_devices = 3;
  for (int l = 0; l < 5; ++l) uneven.layers.push_back(Ffmt({0, 1, 2}, 3, 1, {2, 1, 1}, {1}));
  for (int l = 5; l < 9; ++l) uneven.layers.push_back(Whole(1));
  CheckEquivalent(g, uneven);
}

TEST_CASE("halo exchange: each FFMT layer a stack of its own recomputes nothing and moves only halo rows") {
  // LayerAssignment::stack_start (issue 15): the input tile of every layer is
  // the device's own rows plus its neighbours' halo rows, sent device to device.
  Graph g = SmallCnn();
  for (auto [n, rows, cols] : {std::tuple{2, 2, 1}, std::tuple{3, 3, 1}, std::tuple{4, 2, 2}, std::tuple{4, 4, 1}}) {
    INFO("N=" << n << " grid " << rows << "x" << cols);
    PartitionPlan fused, halo;
    fused.num_devices = halo.num_devices = n;
    for (int l = 0; l < 5; ++l) {
      fused.layers.push_back(Ffmt(Range(n), rows, cols));
      halo.layers.push_back(Ffmt(Range(n), rows, cols));
      halo.layers.back().stack_start = true;
    }
    for (int l = 5; l < 9; ++l) fused.layers.push_back(Whole(0)), halo.layers.push_back(Whole(0));
    auto compiled_fused = CompilePlan(g, fused);
    auto compiled_halo = CompilePlan(g, halo);
    REQUIRE(compiled_fused.ok());
    REQUIRE(compiled_halo.ok());
    CHECK(compiled_fused->halo_mac_overhead > 0);
    CHECK(compiled_halo->halo_mac_overhead == 0);
    // One compute step per layer and tile: the stacks are single layers.
    int computes = 0;
    for (const auto& p : compiled_halo->programs)
      for (const auto& step : p.steps) computes += step.kind == StepKind::kCompute && step.layer <= 5;
    CHECK(computes == 5 * rows * cols);
    // After the first layer a tile's input comes from its neighbours: with
    // three devices or more, pairs other than (0, i) exchange rows.
    int peer_sends = 0;
    for (const auto& p : compiled_halo->programs)
      for (const auto& step : p.steps) peer_sends += step.kind == StepKind::kSend && p.device != 0 && step.peer != 0;
    CHECK((peer_sends > 0) == (n > 2));
    CheckEquivalent(g, halo);
  }
}

TEST_CASE("the latency objective tiles conv-heavy layers with halo exchange and predicts its bytes exactly") {
  GraphMaker m({1, 8, 48, 48});
  int y = m.Conv(m.input(), 16, 3, 1, 1, 1, 1, "relu");
  y = m.Conv(y, 16, 3, 1, 1, 1, 1, "relu");
  y = m.Pool(y, "MaxPool", 2, 2);
  y = m.Conv(y, 32, 3, 1, 1, 1, 1, "leaky_relu");
  y = m.Conv(y, 32, 3, 2, 1, 1, 1, "relu");
  y = m.Conv(y, 8, 1, 1, 0);
  Graph g = m.Finish(y);
  for (int n : {2, 3, 4}) {
    INFO("N=" << n);
    PlanOptions po;
    po.objective = Objective::kLatency;
    auto plan = BuildPlan(g, ComputeLayerFigures(g), UniformCluster(n), po);
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    INFO(plan->choice);
    CHECK(plan->choice.rfind("tiled plan", 0) == 0);
    for (const PlannedLayer& a : plan->layers) {
      CHECK(a.scheme == "ffmt");
      CHECK(a.stack_start);
    }
    const PartitionPlan pp = ToPartitionPlan(*plan);
    auto compiled = CompilePlan(g, pp);
    REQUIRE(compiled.ok());
    CHECK(compiled->halo_mac_overhead == 0);
    auto run = CheckEquivalent(g, pp);
    CHECK(run.total_bytes == static_cast<int64_t>(std::llround(plan->communication_plan_values * 4)));
    int64_t sent = 0;
    for (const DeviceLoad& d : plan->loads) sent += d.sent_bytes;
    CHECK(sent == run.total_bytes);
  }
}

TEST_CASE("compact weights (no Winograd) on a device give the same answers and store raw-size weights") {
  // PartitionPlan::compact_weights: the compiler marks the device's convs;
  // the kernel then packs 3x3 weights for im2col instead of transforming
  // them (F(2x2,3x3): 16 values per 9). 128 channels each: Winograd otherwise.
  Graph g;
  const int x = g.AddValue("x", {1, 128, 16, 16});
  g.inputs = {x};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 0.05f);
  TensorData w;
  w.shape = {256, 128, 3, 3};
  w.values.resize(256 * 128 * 9);
  for (float& v : w.values) v = nd(rng);
  const int wv = g.AddConstant("w", std::move(w));
  const int y = g.AddValue("y", {1, 256, 16, 16});
  Node conv;
  conv.name = "conv";
  conv.op = "Conv";
  conv.inputs = {x, wv};
  conv.outputs = {y};
  conv.attrs.Set("kernel_shape", std::vector<int64_t>{3, 3});
  conv.attrs.Set("strides", std::vector<int64_t>{1, 1});
  conv.attrs.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  conv.attrs.Set("dilations", std::vector<int64_t>{1, 1});
  conv.attrs.Set("group", int64_t{1});
  g.AddNode(conv);
  g.outputs = {y};
  REQUIRE(g.Validate().ok());
  PartitionPlan plan;
  plan.num_devices = 2;
  plan.layers.push_back(Split(LayerScheme::kFdto, {0, 1}));
  plan.compact_weights = {1};
  // Winograd on device 0, raw-size weights on device 1: both equal the unsplit run.
  CheckEquivalent(g, plan, 1e-5);
  auto compiled = CompilePlan(g, plan);
  REQUIRE(compiled.ok());
  auto wino = SizeDeviceProgram(compiled->programs[0], {});
  auto compact = SizeDeviceProgram(compiled->programs[1], {});
  REQUIRE(wino.ok());
  REQUIRE(compact.ok());
  // Each holds 128 output channels: raw 128·128·9 floats; Winograd 128·128·16.
  CHECK(compact->weight_bytes < wino->weight_bytes);
  CHECK(compact->weight_bytes <= 128 * 128 * 9 * 4 + 4096);
  CHECK(wino->weight_bytes >= 128 * 128 * 16 * 4);
  plan.compact_weights = {2};
  CHECK_FALSE(CompilePlan(g, plan).ok());  // no such device: refused, not ignored
}

TEST_CASE("ffmt halo overhead is counted and zero for a single tile") {
  Graph g = SmallCnn();
  PartitionPlan plan;
  plan.num_devices = 4;
  for (int l = 0; l < 5; ++l) plan.layers.push_back(Ffmt(Range(4), 2, 2));
  for (int l = 5; l < 9; ++l) plan.layers.push_back(Whole(0));
  auto c = CompilePlan(g, plan);
  REQUIRE(c.ok());
  CHECK(c->halo_mac_overhead > 0);
  PartitionPlan one = plan;
  for (int l = 0; l < 5; ++l) one.layers[l] = Ffmt({0}, 1, 1);
  auto c1 = CompilePlan(g, one);
  REQUIRE(c1.ok());
  CHECK(c1->halo_mac_overhead == 0);
}

TEST_CASE("all-fdto, all-fdti, fused pairs and part layers equal the unsplit run") {
  Graph g = SmallCnn();
  const LayerScheme kO = LayerScheme::kFdto, kI = LayerScheme::kFdti, kP = LayerScheme::kPart;
  for (int n : {2, 3, 4}) {
    auto all = Range(n);
    PartitionPlan fdto{n,
                       0,
                       {Split(kO, all), Split(kO, all), Split(kP, all), Split(kP, all), Split(kO, all), Split(kP, all),
                        Split(kP, all), Split(kO, all), Split(kO, all)}};
    CheckEquivalent(g, fdto);
    PartitionPlan fdti{n,
                       0,
                       {Split(kI, all), Split(kI, all), Whole(0), Whole(0), Split(kI, all), Whole(0), Whole(0),
                        Split(kI, all), Split(kI, all)}};
    CheckEquivalent(g, fdti);
    // conv1x1 (FDT1) -> gap, flatten (PART) -> dense (FDT2); dense (FDTO) at the end.
    PartitionPlan pair{n,
                       0,
                       {Whole(0), Split(LayerScheme::kFdt1, all), Split(kP, all), Split(kP, all),
                        Split(LayerScheme::kFdt2, all), Whole(0), Whole(0), Split(kO, all), Split(kO, all)}};
    CheckEquivalent(g, pair);
    PartitionPlan pair2{n,
                        0,
                        {Whole(0), Whole(0), Whole(0), Whole(0), Split(LayerScheme::kFdt1, all), Split(kP, all),
                         Split(kP, all), Split(LayerScheme::kFdt2, all), Whole(1 % n)}};
    CheckEquivalent(g, pair2);
  }
  // Uneven split: 12 output channels as 6, 4, 2.
  PartitionPlan uneven{
      3,
      0,
      {Whole(0), Whole(0), Whole(0), Whole(0), Split(kO, {0, 1, 2}, {6, 4, 2}), Split(kP, {0, 1, 2}, {6, 4, 2}),
       Split(kP, {0, 1, 2}, {6, 4, 2}), Split(kI, {0, 1, 2}, {2, 4, 6}), Whole(2)}};
  CheckEquivalent(g, uneven);
}

TEST_CASE("pipeline ranges place whole layers on different devices") {
  Graph g = SmallCnn();
  PartitionPlan plan{3, 0, {Whole(0), Whole(0), Whole(1), Whole(1), Whole(1), Whole(2), Whole(2), Whole(2), Whole(0)}};
  auto run = CheckEquivalent(g, plan);
  CHECK(run.links.size() >= 3);
}

TEST_CASE("a residual block tiles as one fused stack") {
  GraphMaker m({1, 4, 12, 12});
  int a = m.Conv(m.input(), 4, 3, 1, 1, 1, 1, "relu");
  int b = m.Conv(a, 4, 3, 1, 1);
  int s = m.Add(b, m.input());
  int r = m.Unary(s, "Relu");
  int p = m.Pool(r, "AveragePool", 3, 1, 1);
  Graph g = m.Finish(p);
  PartitionPlan plan{4, 0, {}};
  for (int l = 0; l < 5; ++l) plan.layers.push_back(Ffmt(Range(4), 2, 2));
  CheckEquivalent(g, plan);
}

TEST_CASE("random conv stacks reassemble exactly under random grids") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 25; ++trial) {
    int64_t size = 12 + rng() % 20;
    GraphMaker m({1, 2, size, size});
    int y = m.input();
    int depth = 1 + rng() % 4;
    int layers = 0;
    for (int l = 0; l < depth; ++l) {
      int64_t k = 1 + rng() % 3, s = 1 + rng() % 2, d = 1 + rng() % 2, p = rng() % (k * d);
      int64_t cur = m.Finish(y).values[y].shape[2];
      if ((cur + 2 * p - d * (k - 1) - 1) / s + 1 < 3) break;
      if (rng() % 4 == 0 && cur >= 4)
        y = m.Pool(y, rng() % 2 ? "MaxPool" : "AveragePool", 2, 2);
      else
        y = m.Conv(y, 2 + rng() % 3, k, s, p, d, 1, rng() % 2 ? "relu" : "");
      ++layers;
    }
    Graph g = m.Finish(y);
    const int64_t out = g.values[y].shape[2];
    int rows = 1 + rng() % std::min<int64_t>(3, out), cols = 1 + rng() % std::min<int64_t>(3, out);
    int n = 1 + rng() % 4;
    PartitionPlan plan{n, 0, {}};
    for (int l = 0; l < layers; ++l) plan.layers.push_back(Ffmt(Range(n), rows, cols));
    INFO("trial " << trial << " layers " << layers << " grid " << rows << "x" << cols << " devices " << n);
    CheckEquivalent(g, plan);
  }
}

TEST_CASE("impossible schemes are refused naming the layer") {
  Graph g = SmallCnn();
  PartitionPlan bad{2,
                    0,
                    {Whole(0), Whole(0), Split(LayerScheme::kFdti, {0, 1}), Whole(0), Whole(0), Whole(0), Whole(0),
                     Whole(0), Whole(0)}};
  auto c = CompilePlan(g, bad);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("layer 3") != std::string::npos);
  PartitionPlan wrong_split{2,
                            0,
                            {Split(LayerScheme::kFdto, {0, 1}, {3, 3}), Whole(0), Whole(0), Whole(0), Whole(0),
                             Whole(0), Whole(0), Whole(0), Whole(0)}};
  auto c2 = CompilePlan(g, wrong_split);
  REQUIRE_FALSE(c2.ok());
  CHECK(c2.status().message().find("add up to 6") != std::string::npos);
  PartitionPlan short_plan{1, 0, {Whole(0)}};
  CHECK_FALSE(CompilePlan(g, short_plan).ok());
}

namespace {
// METHODS §4 communication in values for one choice per layer over a dense
// chain with input sizes M and output sizes K (written out here, separately
// from the planner, as the test's oracle).
double Methods4Communication(const std::vector<LayerScheme>& c, const std::vector<int64_t>& M,
                             const std::vector<int64_t>& K, int N) {
  const size_t L = c.size();
  auto is = [&](size_t l, LayerScheme s) { return l < L && c[l] == s; };
  auto r = [&](size_t l) {  // r_l = o_l·(o_{l+1} + f_{l+1}), r_L = 0
    return is(l, LayerScheme::kFdto) && (is(l + 1, LayerScheme::kFdto) || is(l + 1, LayerScheme::kFdt1)) ? 1.0 : 0.0;
  };
  double total = 0;
  for (size_t l = 0; l < L; ++l) {
    const double r_prev = l == 0 ? 0.0 : r(l - 1);
    switch (c[l]) {
      case LayerScheme::kFdto:
        total += (1 - r_prev) * M[l] * (N - 1) + r(l) * K[l] * (N - 1) + (1 - r(l)) * K[l] * (N - 1.0) / N;
        break;
      case LayerScheme::kFdti:
        total += M[l] * (N - 1.0) / N + K[l] * (N - 1);
        break;
      case LayerScheme::kFdt1:
        total += (1 - r_prev) * M[l] * (N - 1);
        break;
      case LayerScheme::kFdt2:
        total += K[l] * (N - 1);
        break;
      default:
        break;
    }
  }
  return total;
}
}  // namespace

TEST_CASE("measured values sent equal METHODS §4's predicted communication for every valid choice") {
  // The METHODS §4 sanity chain: dense 4→8→16→4→4, no biases.
  const std::vector<int64_t> M = {4, 8, 16, 4}, K = {8, 16, 4, 4};
  GraphMaker m({1, 4});
  int y = m.input();
  for (int64_t k : K) y = m.Dense(y, k);
  Graph g = m.Finish(y);
  const LayerScheme choices[] = {LayerScheme::kFdto, LayerScheme::kFdti, LayerScheme::kFdt1, LayerScheme::kFdt2};
  for (int N : {2, 4}) {
    int valid = 0;
    for (int code = 0; code < 256; ++code) {
      std::vector<LayerScheme> c;
      for (int l = 0, x = code; l < 4; ++l, x /= 4) c.push_back(choices[x % 4]);
      bool ok = c[0] != LayerScheme::kFdt2 && c[3] != LayerScheme::kFdt1;  // s_1 = 0, f_L = 0
      for (int l = 0; l + 1 < 4; ++l)                                      // s_{l+1} = f_l
        ok &= (c[l] == LayerScheme::kFdt1) == (c[l + 1] == LayerScheme::kFdt2);
      if (!ok) continue;
      ++valid;
      PartitionPlan plan{N, 0, {}};
      for (auto s : c) plan.layers.push_back(Split(s, Range(N)));
      auto run = CheckEquivalent(g, plan);
      INFO("N=" << N << " plan code " << code);
      CHECK(run.total_bytes == static_cast<int64_t>(Methods4Communication(c, M, K, N) * 4));
    }
    CHECK(valid == 29);  // sequences of {o, i, (f s)} covering 4 layers: a(n) = 2a(n−1) + a(n−2)
  }
  // The hand-derived figures for N = 2: all-FDTO 34, all-FDTI 48, two pairs 40 values.
  CHECK(Methods4Communication({LayerScheme::kFdto, LayerScheme::kFdto, LayerScheme::kFdto, LayerScheme::kFdto}, M, K,
                              2) == 34);
  CHECK(Methods4Communication({LayerScheme::kFdti, LayerScheme::kFdti, LayerScheme::kFdti, LayerScheme::kFdti}, M, K,
                              2) == 48);
  CHECK(Methods4Communication({LayerScheme::kFdt1, LayerScheme::kFdt2, LayerScheme::kFdt1, LayerScheme::kFdt2}, M, K,
                              2) == 40);
}

TEST_CASE("the planner's predicted communication equals the bytes the compiled plan sends") {
  // METHODS §4 sanity chain; the planner picks the OWP optimum (objective
  // communication); compiled and run, the measured values must equal its prediction.
  GraphMaker m({1, 4});
  int y = m.input();
  for (int64_t k : {8, 16, 4, 4}) y = m.Dense(y, k);
  Graph g = m.Finish(y);
  for (int n : {2, 4}) {
    PlanOptions po;
    po.objective = Objective::kCommunication;
    auto plan = BuildPlan(g, ComputeLayerFigures(g), UniformCluster(n), po);
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    auto run = CheckEquivalent(g, ToPartitionPlan(*plan));
    INFO("N=" << n << " predicted " << plan->communication_plan_values << " values");
    CHECK(run.total_bytes == static_cast<int64_t>(plan->communication_plan_values * 4));
  }
}

// ---- Issue 13: the patterns of modern CNNs, planned and compiled by the one
// op-traits table (partition/graph/op_traits.h).
namespace {

// conv -> depthwise -> SE [gap -> conv1x1 relu -> conv1x1 sigmoid] -> x * gate -> conv1x1
Graph SqueezeExcite() {
  GraphMaker m({1, 4, 16, 16});
  int x = m.Conv(m.input(), 8, 3, 1, 1, 1, 1, "relu");
  x = m.Conv(x, 8, 3, 1, 1, 1, 8, "relu");  // depthwise
  int gate = m.Gap(x);
  gate = m.Conv(gate, 4, 1, 1, 0, 1, 1, "relu");
  gate = m.Conv(gate, 8, 1, 1, 0);
  gate = m.Unary(gate, "Sigmoid");
  int y = m.Mul(x, gate);
  y = m.Conv(y, 6, 1, 1, 0);
  return m.Finish(y);
}

// conv 8->16 -> grouped conv 16->16 (4 groups) relu -> grouped conv 16->8 (2 groups) -> conv 8->4
Graph GroupedChain() {
  GraphMaker m({1, 8, 10, 10});
  int y = m.Conv(m.input(), 16, 1, 1, 0);
  y = m.Conv(y, 16, 3, 1, 1, 1, 4, "relu");
  y = m.Conv(y, 8, 3, 1, 1, 1, 2);
  y = m.Conv(y, 4, 1, 1, 0);
  return m.Finish(y);
}

int LayerOf(const Graph& g, const std::string& op, int nth = 0) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == op && nth-- == 0) return static_cast<int>(i);
  return -1;
}

}  // namespace

TEST_CASE("an SE gate's multiply runs inside an FFMT stack and every tile reads the whole gate") {
  const Graph g = SqueezeExcite();
  const int mul = LayerOf(g, "Mul");
  REQUIRE(CheckTileable(g, mul).ok());
  auto rule = TileRuleOf(g, mul);
  REQUIRE(rule.ok());
  CHECK(rule->whole_input == std::vector<bool>{false, true});
  CHECK_FALSE(CheckTileable(g, LayerOf(g, "GlobalAveragePool")).ok());
  for (auto [n, rows, cols] : {std::tuple{2, 2, 1}, std::tuple{4, 2, 2}, std::tuple{3, 3, 3}}) {
    ForcedPlanOptions fo;
    fo.devices = n, fo.grid_rows = rows, fo.grid_cols = cols;
    auto plan = MakeForcedPlan(g, ForcedScheme::kFfmt, fo);
    REQUIRE(plan.ok());
    CHECK(plan->layers[mul].scheme == LayerScheme::kFfmt);
    CHECK(plan->layers[LayerOf(g, "Conv", 2)].scheme == LayerScheme::kWhole);  // the 1x1 SE branch
    INFO("N=" << n << " grid " << rows << "x" << cols);
    auto run = CheckEquivalent(g, *plan);
    // Every device that runs tiles of the multiply holds the whole gate (8 values).
    auto compiled = CompilePlan(g, *plan);
    REQUIRE(compiled.ok());
    const int gate = g.nodes[LayerOf(g, "Sigmoid")].outputs[0];
    int tile_devices = 0;
    for (const auto& prog : compiled->programs) {
      bool runs_mul = false, has_gate = false;
      for (const auto& step : prog.steps) runs_mul |= step.kind == StepKind::kCompute && step.layer == mul + 1;
      for (const auto& buf : prog.buffers) has_gate |= buf.value == gate && buf.box.volume() == 8;
      tile_devices += runs_mul;
      CHECK(has_gate >= runs_mul);
    }
    CHECK(tile_devices == std::min(n, static_cast<int>(rows * cols)));
  }
  // SE blocks under the channel schemes: PART carries the gate's slices.
  ForcedPlanOptions fo;
  fo.devices = 3;
  for (ForcedScheme s : {ForcedScheme::kFdto, ForcedScheme::kFdti, ForcedScheme::kPairs}) {
    auto plan = MakeForcedPlan(g, s, fo);
    REQUIRE(plan.ok());
    CheckEquivalent(g, *plan);
  }
}

TEST_CASE("grouped convs split by whole groups under FDTO, FDTI and fused pairs") {
  const Graph g = GroupedChain();
  const LayerScheme kO = LayerScheme::kFdto, kI = LayerScheme::kFdti;
  CHECK(OutputSplitGranule(g, g.nodes[1]) == 4);
  CHECK(InputSplitGranule(g, g.nodes[1]) == 4);
  CHECK(InputSplitGranule(g, g.nodes[2]) == 8);
  CHECK(OutputSplitGranule(g, g.nodes[2]) == 4);
  for (int n : {2, 3, 4}) {
    INFO("N=" << n);
    auto all = Range(n);
    CheckEquivalent(g, PartitionPlan{n, 0, {Split(kO, all), Split(kO, all), Split(kO, all), Split(kO, all)}});
    auto fdti = CheckEquivalent(g, PartitionPlan{n, 0, {Split(kI, all), Split(kI, all), Split(kI, all), Whole(0)}});
    CheckEquivalent(
        g, PartitionPlan{n, 0, {Whole(0), Split(LayerScheme::kFdt1, all), Split(LayerScheme::kFdt2, all), Whole(0)}});
    CheckEquivalent(g, PartitionPlan{n,
                                     0,
                                     {Split(LayerScheme::kFdt1, all), Split(LayerScheme::kFdt2, all),
                                      Split(LayerScheme::kFdt1, all), Split(LayerScheme::kFdt2, all)}});
  }
  // A grouped FDTI sends its outputs' slices, not full-size partial sums.
  // Layer 2 alone (16 channels in, 4 groups of 4) on 2 devices: input slices
  // out (8·100 values) and the other device's output slice back (8·100).
  PartitionPlan one{2, 0, {Whole(0), Split(kI, {0, 1}), Whole(0), Whole(0)}};
  auto run = CheckEquivalent(g, one);
  CHECK(run.total_bytes == (8 * 100 + 8 * 100) * 4);
  // A slice that cuts a group is refused, naming the layer and the granule.
  PartitionPlan cut{2, 0, {Whole(0), Split(kI, {0, 1}, {6, 10}), Whole(0), Whole(0)}};
  auto c = CompilePlan(g, cut);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("layer 2") != std::string::npos);
  CHECK(c.status().message().find("whole groups") != std::string::npos);
}

TEST_CASE("a constant Pad tiles with the padding only border tiles see") {
  GraphMaker m({1, 3, 13, 11});
  int y = m.Conv(m.input(), 6, 3, 1, 1, 1, 1, "relu");
  y = m.Pad(y, 2, 1, 1, 3);
  y = m.Conv(y, 5, 3, 1, 0);
  y = m.Pool(y, "MaxPool", 2, 2);
  const Graph g = m.Finish(y);
  REQUIRE(CheckTileable(g, 1).ok());
  for (auto [n, rows, cols] : {std::tuple{2, 2, 1}, std::tuple{4, 2, 2}, std::tuple{6, 3, 2}}) {
    PartitionPlan plan;
    plan.num_devices = n;
    for (size_t l = 0; l < g.nodes.size(); ++l) plan.layers.push_back(Ffmt(Range(n), rows, cols));
    INFO("N=" << n << " grid " << rows << "x" << cols);
    CheckEquivalent(g, plan);
  }
  // Reflect padding reads across the tile border: refused, naming the layer.
  Graph reflect = g;
  reflect.nodes[1].attrs.Set("mode", std::string("reflect"));
  CHECK(CheckTileable(reflect, 1).message().find("layer 2") != std::string::npos);
}

// Calls `check` with the plan of every objective on 2, 3, 4 and 6 uniform
// devices, each of which must plan.
void ForEveryUniformPlan(const Graph& g, const std::function<void(const PartitionPlan&)>& check) {
  for (Objective obj : {Objective::kMemory, Objective::kCommunication, Objective::kLatency, Objective::kThroughput})
    for (int n : {2, 3, 4, 6}) {
      PlanOptions po;
      po.objective = obj;
      auto plan = BuildPlan(g, ComputeLayerFigures(g), UniformCluster(n), po);
      INFO("objective " << ObjectiveName(obj) << " N=" << n << ": " << plan.status().ToString());
      REQUIRE(plan.ok());
      check(ToPartitionPlan(*plan));
    }
}

TEST_CASE("every plan the planner emits for SE and grouped blocks compiles and equals the unsplit run") {
  for (const Graph& g : {SqueezeExcite(), GroupedChain(), SmallCnn()})
    ForEveryUniformPlan(g, [&](const PartitionPlan& pp) { CheckEquivalent(g, pp); });
}

// A conv -> layer -> conv graph as one FFMT stack over each grid (N,
// rows, cols, row weights): every tiling equals the unsplit run.
void CheckThreeLayerStackOnGrids(const Graph& g,
                                 const std::vector<std::tuple<int, int64_t, int64_t, std::vector<double>>>& grids) {
  for (const auto& [n, rows, cols, rw] : grids) {
    PartitionPlan plan;
    plan.num_devices = n;
    for (int l = 0; l < 3; ++l) plan.layers.push_back(Ffmt(Range(n), rows, cols, rw));
    INFO("N=" << n << " grid " << rows << "x" << cols);
    CheckEquivalent(g, plan, 1e-6);  // measured here: 0 (bit-identical)
  }
}

TEST_CASE("a Resize runs inside an FFMT stack and the tiles equal the unsplit run in every mode") {
  // conv3 -> Resize -> conv3 as one fused stack over uneven grids. The
  // Resize tiles are bit-identical to the whole Resize (kernels_resize_tile_test)
  // and the whole stack measures 0 difference; 1e-6 leaves room for a conv
  // path that sums in another order on a tile-sized map.
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, std::vector<double>>> sizes = {
      {7, 9, 14, 18, {1, 1, 2, 2}},
      {6, 10, 9, 15, {1, 1, 1.5, 1.5}},
      {11, 13, 5, 6, {1, 1, 0.5, 0.5}},
      {7, 5, 11, 13, {}}};
  const std::vector<std::tuple<int, int64_t, int64_t, std::vector<double>>> grids = {
      {4, 2, 2, {}}, {3, 3, 1, {3, 1, 2}}, {6, 2, 3, {}}, {2, 1, 2, {}}};
  for (const char* transform : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                "tf_half_pixel_for_nn", "half_pixel_symmetric"})
    for (const auto& [mode, rounding] :
         {std::pair{"linear", ""}, std::pair{"nearest", "round_prefer_floor"},
          std::pair{"nearest", "round_prefer_ceil"}, std::pair{"nearest", "floor"}, std::pair{"nearest", "ceil"}})
      for (const auto& [ih, iw, oh, ow, scales] : sizes) {
        GraphMaker m({1, 3, ih, iw});
        int y = m.Conv(m.input(), 6, 3, 1, 1, 1, 1, "relu");
        y = m.Resize(y, mode, transform, rounding, oh, ow, scales);
        y = m.Conv(y, 4, 3, 1, 1);
        const Graph g = m.Finish(y);
        REQUIRE(CheckTileable(g, 1).ok());
        INFO(mode << " " << transform << " " << rounding << " " << ih << "x" << iw << " -> " << oh << "x" << ow);
        CheckThreeLayerStackOnGrids(g, grids);
      }
}

TEST_CASE("the planner puts a bilinear Resize inside an FFMT stack and its plans equal the unsplit run") {
  // A decoder tail: conv s2 -> bilinear 2x Resize -> conv, as LR-ASPP ends.
  GraphMaker m({1, 3, 32, 32});
  int y = m.Conv(m.input(), 8, 3, 2, 1, 1, 1, "relu");
  y = m.Resize(y, "linear", "half_pixel", "", 32, 32, {1, 1, 2, 2});
  y = m.Conv(y, 4, 3, 1, 1);
  const Graph g = m.Finish(y);
  int resize_tiled = 0;
  ForEveryUniformPlan(g, [&](const PartitionPlan& pp) {
    CheckEquivalent(g, pp);
    if (pp.layers.at(1).scheme != LayerScheme::kFfmt) return;
    // Compiled: some tile's subgraph runs a conv and the tiled Resize together.
    auto compiled = CompilePlan(g, pp);
    REQUIRE(compiled.ok());
    bool fused = false;
    for (const DeviceProgram& prog : compiled->programs)
      for (const Graph& sub : prog.subgraphs) {
        bool conv = false, resize = false;
        for (const Node& node : sub.nodes) {
          conv |= node.op == "Conv";
          resize |= node.op == "Resize" && node.attrs.Has(kResizeTileOutputOrigin);
        }
        fused |= conv && resize;
      }
    CHECK(fused);
    ++resize_tiled;
  });
  CHECK(resize_tiled > 0);
}

TEST_CASE("a ConvTranspose runs inside an FFMT stack and the tiles equal the unsplit run") {
  struct Case {
    std::vector<int64_t> k, stride, pads, dil, out_pad;
    int64_t group;
  };
  // ops_decoder's two (stride 2 pad 1 output_padding 1; 3x2 stride (2,3)
  // dilation (1,2) output_padding (1,2) groups 2), and stride > kernel
  // (outputs no input reaches), asymmetric pads, stride 1.
  const std::vector<Case> cases = {{{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 1},
                                   {{3, 2}, {2, 3}, {1, 0, 1, 0}, {1, 2}, {1, 2}, 2},
                                   {{2, 1}, {3, 4}, {0, 0, 0, 0}, {1, 1}, {2, 3}, 1},
                                   {{4, 3}, {2, 1}, {2, 0, 1, 1}, {1, 1}, {0, 0}, 2},
                                   {{3, 3}, {1, 1}, {1, 1, 1, 1}, {2, 2}, {0, 0}, 1}};
  const std::vector<std::tuple<int, int64_t, int64_t, std::vector<double>>> grids = {
      {4, 2, 2, {}}, {3, 3, 1, {3, 1, 2}}, {6, 3, 2, {}}, {2, 1, 2, {}}, {6, 6, 1, {}}};
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& t = cases[c];
    GraphMaker m({1, 4, 7, 6});
    int y = m.Conv(m.input(), 4, 3, 1, 1, 1, 1, "relu");
    y = m.ConvTranspose(y, 6, t.k, t.stride, t.pads, t.dil, t.out_pad, t.group);
    y = m.Conv(y, 3, 3, 1, 1);
    const Graph g = m.Finish(y);
    REQUIRE(CheckTileable(g, 1).ok());
    INFO("case " << c);
    CheckThreeLayerStackOnGrids(g, grids);
  }
}

TEST_CASE("a channel LayerNorm runs inside an FFMT stack and the planner tiles it") {
  GraphMaker m({1, 3, 13, 11});
  int y = m.Conv(m.input(), 6, 3, 1, 1, 1, 1, "relu");
  y = m.ChannelLayerNorm(y);
  y = m.Conv(y, 4, 3, 1, 1);
  const Graph g = m.Finish(y);
  REQUIRE(CheckTileable(g, 1).ok());
  for (auto [n, rows, cols] : {std::tuple{2, 2, 1}, std::tuple{4, 2, 2}, std::tuple{6, 3, 2}}) {
    PartitionPlan plan;
    plan.num_devices = n;
    for (int l = 0; l < 3; ++l) plan.layers.push_back(Ffmt(Range(n), rows, cols));
    INFO("N=" << n << " grid " << rows << "x" << cols);
    CheckEquivalent(g, plan, 1e-6);  // measured here: 0 (each position normalises alone)
  }
  int tiled = 0;
  for (Objective obj : {Objective::kMemory, Objective::kCommunication})
    for (int n : {2, 3, 4}) {
      PlanOptions po;
      po.objective = obj;
      auto plan = BuildPlan(g, ComputeLayerFigures(g), UniformCluster(n), po);
      REQUIRE(plan.ok());
      const PartitionPlan pp = ToPartitionPlan(*plan);
      tiled += pp.layers.at(1).scheme == LayerScheme::kFfmt ? 1 : 0;
      CheckEquivalent(g, pp);
    }
  CHECK(tiled > 0);
}
