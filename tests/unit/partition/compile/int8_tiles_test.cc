// int8 tiles between devices (issue 16 item 1): a tensor a QuantizeDequantize
// of an 8-bit grid produces crosses every link as one byte a value
// (partition/compile/device_program.h WireGrid), and the receiver gets back
// exactly the floats the sender held.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/program_runner.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/mcu_program_builder.h"
#include "partition/compile/program_compiler.h"
#include "partition/graph/int8_weights.h"
#include "partition/graph/metrics.h"
#include "partition/graph/quantization.h"
#include "planner/cluster.h"
#include "planner/placement.h"
#include "planner/plan.h"

namespace tessera {
namespace {

std::vector<float> Seeded(const Shape& shape, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(NumElements(shape));
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<float> Reference(const Graph& g, const std::vector<float>& input) {
  auto ex = Executor::Create(g, ExecutorOptions{});
  REQUIRE(ex.ok());
  std::vector<TensorData> out;
  REQUIRE((*ex)->Run({TensorData{g.values[g.inputs[0]].shape, input}}, &out).ok());
  return out[0].values;
}

Graph Quantized(Graph g) { return WithInt8GridWeights(WithQdqActivations(g)); }

// The same programs with every buffer's grid dropped: every message float32.
std::vector<DeviceProgram> FloatWire(std::vector<DeviceProgram> programs) {
  for (DeviceProgram& p : programs)
    for (ProgramBuffer& b : p.buffers) b.grid.reset();
  return programs;
}

// `g` with a Pad of its input in front (by one row and column at the end,
// zeros), as `tessera quantize` leaves a model whose first conv pads:
// input -> Pad -> QuantizeDequantize -> ...
Graph WithPaddedInput(const Graph& src) {
  Graph g;
  g.name = src.name + "_padded";
  Shape shape = src.values[src.inputs[0]].shape;
  const int x = g.AddValue("x", shape);
  g.inputs = {x};
  shape[2] -= 1, shape[3] -= 1;
  // Rebuild: the new input has one row and column fewer; Pad restores them.
  g.values[x].shape = shape;
  std::vector<int> map(src.values.size(), -1);
  const int padded = g.AddValue("x_padded", src.values[src.inputs[0]].shape);
  Node pad{"pad", "Pad", {x}, {padded}, {}};
  pad.attrs.Set("pads", std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 1});
  g.AddNode(std::move(pad));
  map[src.inputs[0]] = padded;
  for (size_t v = 0; v < src.values.size(); ++v) {
    if (map[v] >= 0) continue;
    const TensorData* c = src.ConstantData(static_cast<int>(v));
    map[v] = c ? g.AddConstant(src.values[v].name, *c) : g.AddValue(src.values[v].name, src.values[v].shape);
  }
  for (Node n : src.nodes) {
    for (int& i : n.inputs) i = map[i];
    for (int& o : n.outputs) o = map[o];
    g.AddNode(std::move(n));
  }
  for (int v : src.outputs) g.outputs.push_back(map[v]);
  return g;
}

}  // namespace

TEST_CASE("int8 tiles: every code of a grid crosses as one byte and comes back as the same float", "[int8][wire]") {
  const QuantGrid grids[] = {{0.0173f, 0, -128, 127},  {0.25f, 128, 0, 255}, {3.1e-5f, -128, -128, 127},
                             {917.5f, 127, -128, 127}, {0.0039f, 0, 0, 255}, {0.5f, 255, 0, 255}};
  for (const QuantGrid& g : grids) {
    INFO("scale " << g.scale << " zero point " << g.zero_point);
    REQUIRE(ByteGrid(g));
    // A 2x3x5x7 tensor of every code in turn; a box of it extracted as
    // bytes and inserted into a zeroed tensor gives back the same floats.
    const Shape shape{2, 3, 5, 7};
    std::vector<float> x(NumElements(shape));
    for (size_t i = 0; i < x.size(); ++i) x[i] = DequantizeCode(g.qmin + static_cast<int32_t>(i % 256), g);
    Box box;
    box.dims = {{0, 2}, {1, 3}, {1, 4}, {2, 7}};
    std::vector<uint8_t> codes(box.volume());
    ExtractBoxCodes(x.data(), shape, box, g, codes.data());
    std::vector<float> floats(box.volume());
    ExtractBox(x.data(), shape, box, floats.data());
    for (size_t i = 0; i < codes.size(); ++i) CHECK(ByteValue(codes[i], g) == floats[i]);
    // The MCU's encoding (what its bridge and firmware use) is the same
    // byte: codes pass from a Linux peer to an MCU's UART unchanged.
    auto mcu = McuEncode(g, std::string(reinterpret_cast<const char*>(floats.data()), floats.size() * 4),
                         static_cast<int64_t>(floats.size()));
    REQUIRE(mcu.ok());
    CHECK(std::string(codes.begin(), codes.end()) == *mcu);
    std::vector<float> back(x.size(), 0.f), want(x.size(), 0.f);
    InsertBoxCodes(codes.data(), g, back.data(), shape, box);
    InsertBox(floats.data(), want.data(), shape, box);
    CHECK(back == want);
    // Every one of the 256 codes round-trips.
    for (int c = 0; c <= g.qmax - g.qmin; ++c) CHECK(ByteCode(ByteValue(static_cast<uint8_t>(c), g), g) == c);
  }
  // Grids whose codes do not fit a byte, or are not grids, stay float32.
  CHECK_FALSE(ByteGrid(QuantGrid{0.1f, 0, -32768, 32767}));
  CHECK_FALSE(ByteGrid(QuantGrid{0.f, 0, -128, 127}));
  CHECK_FALSE(ByteGrid(QuantGrid{NAN, 0, -128, 127}));
  CHECK_FALSE(ByteGrid(QuantGrid{0.1f, 200, 0, 255 - 256}));
  CHECK_FALSE(ByteGrid(std::nullopt));
}

// Every scheme of a QDQ model, compiled and run over in-process links twice:
// with int8 tiles, and with the same programs sending float32. The answers
// are identical bit for bit (the codes stand for exactly the floats), equal
// to the unsplit run bit for bit (FDTI and pairs: int32 partial sums; with
// float partial sums (CompileOptions::integer_partial_sums = false) within one step of the output's
// grid), and every message on an 8-bit grid takes a quarter of its float
// bytes.
TEST_CASE("int8 tiles: QDQ splits send a quarter of the bytes, answers bit for bit", "[int8][wire]") {
  const Graph graphs[] = {Quantized(MakeKeywordSpottingGraph()), Quantized(MakeDsCnnGraph()),
                          Quantized(MakeMlperfDsCnnGraph())};
  const ForcedScheme schemes[] = {ForcedScheme::kFfmt, ForcedScheme::kFdto, ForcedScheme::kFdti, ForcedScheme::kPairs,
                                  ForcedScheme::kPipeline};
  for (const Graph& g : graphs) {
    const Node& last = g.nodes[g.values[g.outputs[0]].producer];
    REQUIRE(last.op == "QuantizeDequantize");
    const double step = last.attrs.Float("scale", 0.0);
    // Scaled past the input grid: saturating codes cross too.
    const std::vector<float> input = Seeded(g.values[g.inputs[0]].shape, 11, 3.f);
    const std::vector<float> want = Reference(g, input);
    for (const ForcedScheme scheme : schemes) {
      for (int devices : {2, 3}) {
        INFO(g.name << ", scheme " << static_cast<int>(scheme) << ", " << devices << " devices");
        ForcedPlanOptions fo;
        fo.devices = devices;
        fo.grid_rows = devices;
        auto plan = MakeForcedPlan(g, scheme, fo);
        REQUIRE(plan.ok());
        auto compiled = CompilePlan(g, *plan);
        INFO(compiled.status().ToString());
        REQUIRE(compiled.ok());
        REQUIRE(ValidatePrograms(compiled->programs).ok());
        int64_t coded_values = 0, float_values = 0, expected = 0;
        for (const DeviceProgram& p : compiled->programs)
          for (const ProgramStep& s : p.steps) {
            if (s.kind != StepKind::kSend) continue;
            (WireGrid(p, s) ? coded_values : float_values) += s.values();
            expected += WireBytes(p, s);
          }
        CHECK(expected == coded_values + 4 * float_values);
        const TensorData in{g.values[g.inputs[0]].shape, input};
        auto coded = RunProgramsInProcess(g, compiled->programs, {in}, {});
        INFO(coded.status().ToString());
        REQUIRE(coded.ok());
        auto floats = RunProgramsInProcess(g, FloatWire(compiled->programs), {in}, {});
        REQUIRE(floats.ok());
        // What the links measured is what the programs say.
        CHECK(coded->total_bytes == expected);
        CHECK(floats->total_bytes == 4 * (coded_values + float_values));
        CHECK(coded->outputs[0].values == floats->outputs[0].values);
        // Every scheme equals the unsplit run bit for bit, FDTI and the
        // pairs too: their convs' partial sums stay int32 and are rounded
        // once (CompileOptions::integer_partial_sums).
        CHECK(coded->outputs[0].values == want);
        if (scheme == ForcedScheme::kFdti || scheme == ForcedScheme::kPairs) {
          int partial_convs = 0, requantized = 0;
          for (const DeviceProgram& p : compiled->programs)
            for (const Graph& sub : p.subgraphs)
              for (const Node& n : sub.nodes) {
                partial_convs += n.attrs.Int("integer_partial", 0) != 0;
                requantized += n.attrs.Int("integer_requant", 0) != 0;
              }
          CHECK(partial_convs > 0);
          CHECK(requantized > 0);
          // Float partial sums (integer_partial_sums = false): another order of the
          // sum, within one step of the output's grid.
          CompileOptions float_sums;
          float_sums.integer_partial_sums = false;
          auto f = CompilePlan(g, *plan, float_sums);
          REQUIRE(f.ok());
          auto fr = RunProgramsInProcess(g, f->programs, {in}, {});
          REQUIRE(fr.ok());
          REQUIRE(fr->outputs[0].values.size() == want.size());
          double worst = 0;
          for (size_t i = 0; i < want.size(); ++i)
            worst = std::max(worst, double(std::fabs(fr->outputs[0].values[i] - want[i])));
          INFO("float partial sums: max diff " << worst / step << " output steps");
          CHECK(worst <= step * 1.0001);
        }
        // Tiles, slices and stage boundaries are QuantizeDequantize outputs
        // (the model's input is quantized on the source before its tiles
        // leave): everything FFMT, FDTO and a pipeline send is codes, a
        // quarter of the float bytes. FDTI and the pairs' second layers send
        // float32 partial sums besides.
        UNSCOPED_INFO("coded " << coded->total_bytes << " bytes, float32 " << floats->total_bytes);
        if (scheme == ForcedScheme::kFfmt || scheme == ForcedScheme::kFdto || scheme == ForcedScheme::kPipeline) {
          CHECK(float_values == 0);
          CHECK(4 * coded->total_bytes == floats->total_bytes);
        } else {
          CHECK(coded_values > 0);
          CHECK(coded->total_bytes < floats->total_bytes);
        }
      }
    }
  }
}

// The model's input quantization (here behind a Pad, as in the VWW model
// `tessera quantize` makes) runs whole on the source; the FFMT tiles that
// leave it are codes.
TEST_CASE("int8 tiles: a QDQ model's input is quantized before its tiles leave", "[int8][wire]") {
  const Graph g = WithPaddedInput(Quantized(MakeDsCnnGraph()));
  REQUIRE(g.nodes[0].op == "Pad");
  REQUIRE(g.nodes[1].op == "QuantizeDequantize");
  CHECK(QuantizesModelInput(g, 0));
  CHECK(QuantizesModelInput(g, 1));
  for (size_t n = 2; n < g.nodes.size(); ++n) CHECK_FALSE(QuantizesModelInput(g, static_cast<int>(n)));
  // Two model inputs, each quantized (the second behind an Identity): every
  // node of either chain is found, the Add reading both is not.
  {
    Graph two;
    const int a = two.AddValue("a", {1, 2, 4, 4}), b = two.AddValue("b", {1, 2, 4, 4});
    two.inputs = {a, b};
    auto qdq = [&](int x, const std::string& name) {
      const int y = two.AddValue(name, {1, 2, 4, 4});
      Node q{name, "QuantizeDequantize", {x}, {y}, {}};
      q.attrs.Set("scale", 0.05);
      two.AddNode(std::move(q));
      return y;
    };
    const int qa = qdq(a, "qa");
    const int ib = two.AddValue("ib", {1, 2, 4, 4});
    two.AddNode(Node{"id", "Identity", {b}, {ib}, {}});
    const int qb = qdq(ib, "qb");
    const int y = two.AddValue("y", {1, 2, 4, 4});
    two.AddNode(Node{"add", "Add", {qa, qb}, {y}, {}});
    two.outputs = {y};
    REQUIRE(two.Validate().ok());
    for (int n = 0; n < 3; ++n) CHECK(QuantizesModelInput(two, n));  // qa, id, qb
    CHECK_FALSE(QuantizesModelInput(two, 3));
  }
  // The float model has no input quantization.
  const Graph f = WithPaddedInput(MakeDsCnnGraph());
  for (size_t n = 0; n < f.nodes.size(); ++n) CHECK_FALSE(QuantizesModelInput(f, static_cast<int>(n)));
  ForcedPlanOptions fo;
  fo.devices = 3;
  fo.grid_rows = 3;
  auto plan = MakeForcedPlan(g, ForcedScheme::kFfmt, fo);
  REQUIRE(plan.ok());
  CHECK(plan->layers[0].scheme == LayerScheme::kWhole);
  CHECK(plan->layers[1].scheme == LayerScheme::kWhole);
  CHECK(plan->layers[2].scheme == LayerScheme::kFfmt);
  auto compiled = CompilePlan(g, *plan);
  INFO(compiled.status().ToString());
  REQUIRE(compiled.ok());
  for (const DeviceProgram& p : compiled->programs)
    for (const ProgramStep& s : p.steps)
      if (s.kind == StepKind::kSend) CHECK(WireGrid(p, s));
  const std::vector<float> input = Seeded(g.values[g.inputs[0]].shape, 5, 2.f);
  auto run = RunProgramsInProcess(g, compiled->programs, {TensorData{g.values[g.inputs[0]].shape, input}}, {});
  REQUIRE(run.ok());
  CHECK(run->outputs[0].values == Reference(g, input));
  // The planner's FFMT stacks start after it too.
  PlanOptions po;
  po.objective = Objective::kMemory;
  auto planned = BuildPlan(g, ComputeLayerFigures(g), UniformCluster(3), po);
  REQUIRE(planned.ok());
  CHECK(planned->layers[0].scheme == "whole");
  CHECK(planned->layers[1].scheme == "whole");
}

TEST_CASE("int8 tiles: both ends of a message must agree on its form", "[int8][wire]") {
  const Graph g = Quantized(MakeDsCnnGraph());
  ForcedPlanOptions fo;
  fo.devices = 2;
  auto plan = MakeForcedPlan(g, ForcedScheme::kFdto, fo);
  REQUIRE(plan.ok());
  auto compiled = CompilePlan(g, *plan);
  REQUIRE(compiled.ok());
  std::vector<DeviceProgram> programs = compiled->programs;
  bool broken = false;
  for (DeviceProgram& p : programs)
    for (const ProgramStep& s : p.steps)
      if (!broken && s.kind == StepKind::kRecv && WireGrid(p, s)) {
        p.buffers[s.dst_buffer].grid.reset();
        broken = true;
      }
  REQUIRE(broken);
  const Status st = ValidatePrograms(programs);
  CHECK_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("as int8 codes") && Catch::Contains("expects float32"));
}

// The planner prices a QuantizeDequantize's output at 1 B a value on every
// link, as the programs send it: a layer-assignment plan's link bytes are
// the compiled programs' (METHODS §5), and a split plan's traffic shrinks.
TEST_CASE("int8 tiles: the planner counts 1 B a value of a QuantizeDequantize's output", "[int8][wire][planner]") {
  const Graph g = Quantized(MakeDsCnnGraph());
  const std::vector<LayerFigures> layers = ComputeLayerFigures(g);
  const Cluster cluster = UniformCluster(2);
  const PlacementProblem problem = MakePlacementProblem(g, layers, cluster);
  for (size_t j = 0; j < layers.size(); ++j) {
    const Node& node = g.nodes[layers[j].node];
    INFO(node.name);
    CHECK(problem.OutputBytes(0, 1, static_cast<int>(j)) == layers[j].K * (node.op == "QuantizeDequantize" ? 1 : 4));
  }
  for (const Objective objective : {Objective::kLatency, Objective::kThroughput}) {
    PlanOptions po;
    po.objective = objective;
    po.solver = objective == Objective::kLatency ? "dp" : "bnb";  // layer assignment (METHODS §5)
    auto plan = BuildPlan(g, layers, cluster, po);
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    auto compiled = CompilePlan(g, ToPartitionPlan(*plan));
    REQUIRE(compiled.ok());
    int64_t predicted = 0, sent = 0;
    for (const DeviceLoad& d : plan->loads) predicted += d.sent_bytes;
    for (const DeviceProgram& p : compiled->programs)
      for (const ProgramStep& s : p.steps)
        if (s.kind == StepKind::kSend) sent += WireBytes(p, s);
    INFO("objective " << ObjectiveName(objective));
    CHECK(predicted == sent);
  }
  // A split plan of the QDQ model sends less than of the float one.
  PlanOptions po;
  po.objective = Objective::kMemory;
  auto qdq = BuildPlan(g, layers, UniformCluster(3), po);
  const Graph f = MakeDsCnnGraph();
  auto flt = BuildPlan(f, ComputeLayerFigures(f), UniformCluster(3), po);
  REQUIRE(qdq.ok());
  REQUIRE(flt.ok());
  int64_t q = 0, x = 0;
  for (const DeviceLoad& d : qdq->loads) q += d.sent_bytes;
  for (const DeviceLoad& d : flt->loads) x += d.sent_bytes;
  INFO("QDQ " << q << " bytes, float " << x);
  CHECK(q < x);
}

}  // namespace tessera
