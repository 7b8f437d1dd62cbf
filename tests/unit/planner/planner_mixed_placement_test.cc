// planner/mixed_placement.h: whole-layer placements that give every MCU of a
// Linux + MCU cluster a layer (what `tessera demo --mcu 2` deploys).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "partition/compile/mcu_program_builder.h"
#include "partition/graph/int8_weights.h"
#include "partition/graph/metrics.h"
#include "planner/mixed_placement.h"
#include "transport/wire/mcu_program.h"

using namespace tessera;

namespace {

Cluster MixedCluster() {
  const std::string yaml =
      "devices:\n"
      "  - { name: w1, kind: linux, address: 127.0.0.1:1, ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }\n"
      "  - { name: w2, kind: linux, address: 127.0.0.1:2, ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 }\n"
      "  - { name: mcu1, kind: mcu, preset: STM32H743ZI, serial: /dev/null, baud: 115200, via: w1 }\n"
      "  - { name: mcu2, kind: mcu, preset: STM32F446RE, serial: /dev/null, baud: 115200, via: w2 }\n"
      "links:\n"
      "  default: { bandwidth: 10Gbit/s, latency: 20us }\n";
  auto c = ParseCluster(yaml, "test cluster", PresetDirectories());
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *c;
}

// A Linux worker and one MCU of the given ram: and flash: behind it.
Result<Cluster> OneMcuCluster(const std::string& ram, const std::string& flash) {
  auto c = ParseCluster(
      "devices:\n"
      "  - { name: w1, kind: linux, address: 127.0.0.1:1, ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 "
      "}\n"
      "  - { name: mcu1, kind: mcu, ram: " +
          ram + ", flash: " + flash +
          ", cpu_hz: 84e6, cycles_per_mac: 9, serial: /dev/null, baud: 115200, via: w1 }\n"
          "links:\n"
          "  default: { bandwidth: 10Gbit/s, latency: 20us }\n",
      "one mcu", PresetDirectories());
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return c;
}

// A Linux worker and `mcus` MCUs behind it, each leaving `ram` bytes of
// RAM beside the firmware and 1 MiB of flash.
Cluster McusOfRam(int mcus, int64_t ram) {
  std::string yaml =
      "devices:\n"
      "  - { name: w1, kind: linux, address: 127.0.0.1:1, ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 "
      "}\n";
  for (int m = 1; m <= mcus; ++m)
    yaml += "  - { name: mcu" + std::to_string(m) +
            ", kind: mcu, ram: " + std::to_string(ram + mcu::kFirmwareRamBytes) +
            ", flash: 1MiB, cpu_hz: 84e6, cycles_per_mac: 9, serial: /dev/null, baud: 115200, via: w1 }\n";
  yaml += "links:\n  default: { bandwidth: 10Gbit/s, latency: 20us }\n";
  auto c = ParseCluster(yaml, "mcus", PresetDirectories());
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *c;
}

}  // namespace

TEST_CASE("mixed placement: every MCU gets a layer, each device's layers are contiguous and fit") {
  const Graph g = MakeKeywordSpottingGraph();
  const Cluster c = MixedCluster();
  auto p = PlaceMixed(g, c);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  REQUIRE(p->device_of_layer.size() == g.nodes.size());
  for (int mcu : {2, 3}) CHECK(std::count(p->device_of_layer.begin(), p->device_of_layer.end(), mcu) > 0);
  for (int d = 0; d < c.size(); ++d) {
    auto first = std::find(p->device_of_layer.begin(), p->device_of_layer.end(), d);
    auto last = std::find(p->device_of_layer.rbegin(), p->device_of_layer.rend(), d);
    if (first == p->device_of_layer.end()) continue;
    const auto span = (p->device_of_layer.rend() - last) - (first - p->device_of_layer.begin());
    CHECK(std::count(p->device_of_layer.begin(), p->device_of_layer.end(), d) == span);
  }
  CHECK(p->cost.feasible);
  CHECK(p->cost.latency_s > 0);
  CHECK_FALSE(p->note.empty());
  // No other contiguous placement that uses both MCUs is faster.
  PlacementProblem problem = MakePlacementProblem(g, ComputeLayerFigures(g), c);
  problem.source = 0;
  auto best = FastestPipelineUsing(problem, {2, 3}, static_cast<int>(g.nodes.size()), c.size());
  REQUIRE(best.ok());
  CHECK(p->cost.latency_s <= best->cost.latency_s * (1 + 1e-12));
}

TEST_CASE("mixed placement: refusals name the reason") {
  const Graph g = MakeKeywordSpottingGraph();
  const Cluster c = MixedCluster();
  PlacementProblem problem = MakePlacementProblem(g, ComputeLayerFigures(g), c);
  // 200 layers on 4 devices: 24·C(199, 3) + ... ≈ 3.1e7 contiguous pipelines.
  auto too_long = FastestPipelineUsing(problem, {2, 3}, 200, c.size());
  REQUIRE_FALSE(too_long.ok());
  CHECK(too_long.status().message().find("over its limit of 2000000") != std::string::npos);
  // A device list that cannot all hold a layer of a 1-layer chain: nothing fits.
  auto impossible = FastestPipelineUsing(problem, {2, 3}, 1, c.size());
  REQUIRE_FALSE(impossible.ok());
  CHECK(impossible.status().message().find("no contiguous pipeline") != std::string::npos);
}

TEST_CASE("mixed placement: the contiguous pipelines are counted and searched exactly") {
  // P(D, k) · C(L − 1, k − 1) summed over k: by hand for small cases.
  CHECK(ContiguousPipelines(1, 4) == 4);
  CHECK(ContiguousPipelines(3, 2) == 2 + 2 * 2);          // k=1: 2; k=2: 2·C(2,1)
  CHECK(ContiguousPipelines(4, 3) == 3 + 6 * 3 + 6 * 3);  // C(3,1) = 3, C(3,2) = 3
  CHECK(ContiguousPipelines(27, 4) == 4 + 12 * 26 + 24 * 325 + 24 * 2600);
  // The search finds what trying every assignment of every layer finds.
  const Graph g = MakeKeywordSpottingGraph();
  const Cluster c = MixedCluster();
  PlacementProblem problem = MakePlacementProblem(g, ComputeLayerFigures(g), c);
  problem.source = 0;
  const int layers = static_cast<int>(g.nodes.size()), devices = c.size();
  double best = std::numeric_limits<double>::infinity();
  int64_t contiguous = 0;
  std::vector<int> dev(layers);
  for (int64_t code = 0, total = static_cast<int64_t>(std::pow(devices, layers)); code < total; ++code) {
    int64_t r = code;
    for (int j = 0; j < layers; ++j, r /= devices) dev[j] = static_cast<int>(r % devices);
    bool ok = true;
    for (int d = 0; d < devices && ok; ++d) {
      auto first = std::find(dev.begin(), dev.end(), d);
      auto last = std::find(dev.rbegin(), dev.rend(), d);
      if (first != dev.end()) ok = std::count(dev.begin(), dev.end(), d) == (dev.rend() - last) - (first - dev.begin());
    }
    if (!ok) continue;
    ++contiguous;
    if (std::count(dev.begin(), dev.end(), 2) == 0 || std::count(dev.begin(), dev.end(), 3) == 0) continue;
    const PlacementCost cost = EvaluatePlacement(problem, dev);
    if (cost.feasible) best = std::min(best, cost.latency_s);
  }
  CHECK(contiguous == static_cast<int64_t>(ContiguousPipelines(layers, devices)));
  auto found = FastestPipelineUsing(problem, {2, 3}, layers, devices);
  REQUIRE(found.ok());
  CHECK(found->cost.latency_s == best);
}

TEST_CASE("mixed placement: --mcu-only puts every layer on the MCUs, neighbours joined UART-to-UART first") {
  const Graph g = MakeKeywordSpottingGraph();
  const std::string yaml =
      "devices:\n"
      "  - { name: w1, kind: linux, address: 127.0.0.1:1, ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 "
      "}\n"
      "  - { name: mcu1, kind: mcu, preset: STM32H743ZI, serial: /dev/null, baud: 115200, via: w1 }\n"
      "  - { name: mcu2, kind: mcu, preset: STM32H743ZI, serial: /dev/null, baud: 115200, via: w1 }\n"
      "links:\n"
      "  default: { bandwidth: 10Gbit/s, latency: 20us }\n";
  auto plain = ParseCluster(yaml, "two mcus", PresetDirectories());
  auto chain = ParseCluster(yaml + "  pairs:\n    - { between: [mcu1, mcu2], bandwidth: 115200baud }\n", "chain",
                            PresetDirectories());
  REQUIRE(plain.ok());
  REQUIRE(chain.ok());
  auto through_board = PlaceMixed(g, *plain, true);
  auto direct = PlaceMixed(g, *chain, true);
  REQUIRE(through_board.ok());
  REQUIRE(direct.ok());
  for (const auto* p : {&*through_board, &*direct}) {
    CHECK(std::count(p->device_of_layer.begin(), p->device_of_layer.end(), 0) == 0);  // nothing on w1
    for (int mcu : {1, 2}) CHECK(std::count(p->device_of_layer.begin(), p->device_of_layer.end(), mcu) > 0);
    CHECK(p->cost.feasible);
  }
  // The same cut costs one UART hop between the MCUs instead of two.
  CHECK(direct->cost.latency_s < through_board->cost.latency_s);
  // One MCU with 32 KiB of flash cannot hold the CNN's weights alone: refused by name.
  auto small = ParseCluster(
      "devices:\n"
      "  - { name: w1, kind: linux, address: 127.0.0.1:1, ram: 1GiB, flash: 4GiB, cpu_hz: 1.5e9, cycles_per_mac: 0.4 "
      "}\n"
      "  - { name: mcu1, kind: mcu, ram: 64KiB, flash: 32KiB, cpu_hz: 84e6, cycles_per_mac: 9, serial: /dev/null, "
      "baud: 115200, via: w1 }\n"
      "links:\n"
      "  default: { bandwidth: 10Gbit/s, latency: 20us }\n",
      "one small mcu", PresetDirectories());
  REQUIRE(small.ok());
  REQUIRE(4 * ComputeTotals(ComputeLayerFigures(g)).weights > small->devices[1].flash_bytes);
  auto refused = PlaceMixed(g, *small, true);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  CHECK(refused.status().message().find("over the 1 MCUs alone fits") != std::string::npos);
}

TEST_CASE("mixed placement: an MCU holds a QDQ model's weights as int8, as its program stores them") {
  const Graph f32 = MakeKeywordSpottingGraph();
  const Graph q = WithInt8GridWeights(f32);
  auto program = BuildMcuProgram(q, {});
  REQUIRE(program.ok());
  REQUIRE(program->int8_weight_layers == 4);
  mcu::ProgramHeader h;
  std::memcpy(&h, program->bytes.data(), sizeof h);
  const int64_t int8_weights = 4 * int64_t{h.weight_floats},
                float_weights = 4 * ComputeTotals(ComputeLayerFigures(q)).weights;
  REQUIRE(int8_weights < float_weights / 3);
  // An MCU whose flash, less the firmware's, holds the int8 weights and not
  // the float ones.
  const int64_t flash = mcu::kFirmwareFlashBytes + (int8_weights + float_weights) / 2;
  auto c = OneMcuCluster("256KiB", std::to_string(flash));
  auto placed = PlaceMixed(q, *c, true);
  INFO(placed.status().ToString());
  REQUIRE(placed.ok());
  // What the planner counts on the MCU is the program's weight block, byte for byte.
  CHECK(placed->cost.weight_bytes[1] == int8_weights);
  auto refused = PlaceMixed(f32, *c, true);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("the layers' weights are " + std::to_string(float_weights) + " B") !=
        std::string::npos);
  // A Linux device keeps float32 weights: the same model counts 4 B per value there.
  PlacementProblem problem = MakePlacementProblem(q, ComputeLayerFigures(q), *c);
  int64_t linux_bytes = 0, mcu_bytes = 0;
  for (int j = 0; j < problem.layers(); ++j)
    linux_bytes += problem.WeightBytes(0, j), mcu_bytes += problem.WeightBytes(1, j);
  CHECK(linux_bytes == float_weights);
  CHECK(mcu_bytes == int8_weights);
}

// int8 activations (issue 16 item 1, mcu_program.h version 5): a QDQ
// model's tensors on 8-bit grids take 1 B a value in an MCU's RAM, and the
// planner counts them so. KWS whole on one MCU: its program needs 11 732 B
// with codes and 41 048 B with float activations.
TEST_CASE("mixed placement: an MCU holds a QDQ model's activations as int8, as its program does") {
  const Graph float_activations = WithInt8GridWeights(MakeKeywordSpottingGraph());
  const Graph q = WithInt8GridWeights(WithQdqActivations(MakeKeywordSpottingGraph()));
  auto fp = BuildMcuProgram(float_activations, {}), qp = BuildMcuProgram(q, {});
  REQUIRE(fp.ok());
  REQUIRE(qp.ok());
  CHECK(qp->ram_bytes() == 11732);
  CHECK(fp->ram_bytes() == 41048);
  const int64_t ram = mcu::kFirmwareRamBytes + 16 * 1024;  // holds the codes, not the floats
  auto c = OneMcuCluster(std::to_string(ram), "1MiB");
  auto placed = PlaceMixed(q, *c, true);
  INFO(placed.status().ToString());
  REQUIRE(placed.ok());
  CHECK(std::count(placed->device_of_layer.begin(), placed->device_of_layer.end(), 1) ==
        static_cast<long>(placed->device_of_layer.size()));
  // Refused, naming the layer whose input and output outgrow every MCU's RAM.
  auto refused = PlaceMixed(float_activations, *c, true);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  CHECK(refused.status().message().find("'pool1' (MaxPool) takes 39040 B of RAM for its input and output, more than "
                                        "the largest MCU's " +
                                        std::to_string(c->devices[1].ram_bytes) + " B") != std::string::npos);
  // Per layer on the MCU: 1 B a value of a QuantizeDequantize's output, and
  // of a layer's output that a QuantizeDequantize alone reads (fused into
  // it); a Linux device counts 4. conv1: input codes 490 + output 7840.
  PlacementProblem problem = MakePlacementProblem(q, ComputeLayerFigures(q), *c);
  int conv1 = -1;
  for (int j = 0; j < problem.layers(); ++j)
    if (problem.names[j].find("'conv1' (Conv)") != std::string::npos) conv1 = j;
  REQUIRE(conv1 >= 0);
  CHECK(problem.BufferBytes(1, conv1) == 490 + 7840);
  CHECK(problem.BufferBytes(0, conv1) == 4 * (490 + 7840));
  // The input's QuantizeDequantize: its codes only (the bridge encodes the
  // model's input as it relays it); conv1's: its codes only (fused).
  CHECK(problem.BufferBytes(1, 0) == 490);
  CHECK(problem.BufferBytes(1, conv1 + 1) == 7840);
  // Every layer's figure is a lower bound of what its program holds.
  for (int j = 0; j < problem.layers(); ++j) CHECK(problem.BufferBytes(1, j) <= static_cast<int64_t>(qp->ram_bytes()));
  // On a link to or from an MCU a QuantizeDequantize's output is codes (the
  // bridge and the MCU move 1 B a value); conv1's own output is float.
  REQUIRE(conv1 + 1 < problem.layers());
  CHECK(problem.OutputBytes(0, 1, conv1 + 1) == 7840);
  CHECK(problem.OutputBytes(1, 0, conv1 + 1) == 7840);
  CHECK(problem.OutputBytes(0, 1, conv1) == 4 * 7840);
  std::vector<int> cut(problem.layers(), 1);
  for (int j = 0; j <= conv1 + 1; ++j) cut[j] = 0;  // conv1 and its QuantizeDequantize on w1, the rest on the MCU
  const PlacementCost cost = EvaluatePlacement(problem, cut);
  CHECK(cost.received_bytes[1] == 7840);
}

TEST_CASE("mixed placement: a layer an MCU cannot run goes to a Linux device, or is refused by name") {
  // The KWS CNN with a Sigmoid after its dense layer: the firmware has no Sigmoid.
  Graph g = MakeKeywordSpottingGraph();
  const int logits = g.outputs[0];
  const int probs = g.AddValue("probs", g.values[logits].shape);
  g.AddNode(Node{"sigmoid", "Sigmoid", {logits}, {probs}, {}});
  g.outputs = {probs};
  REQUIRE(g.Validate().ok());
  const int last = static_cast<int>(g.nodes.size()) - 1;
  REQUIRE_FALSE(McuCanRun(g, g.nodes[last]).ok());

  const Cluster c = MixedCluster();
  auto p = PlaceMixed(g, c);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  CHECK(c.devices[p->device_of_layer[last]].kind == DeviceKind::kLinux);
  for (int mcu : {2, 3}) CHECK(std::count(p->device_of_layer.begin(), p->device_of_layer.end(), mcu) > 0);
  CHECK(p->cost.feasible);

  // Each MCU computes something: a Flatten alone (an alias) is no use of it.
  PlacementProblem problem = MakePlacementProblem(g, ComputeLayerFigures(g), c);
  for (int mcu : {2, 3}) {
    bool computes = false;
    for (int j = 0; j <= last; ++j) computes = computes || (p->device_of_layer[j] == mcu && problem.macs[j] > 0);
    INFO("mcu device " << mcu);
    CHECK(computes);
  }

  // Forced onto an MCU, the placement is infeasible and says why.
  std::vector<int> dev = p->device_of_layer;
  dev[last] = 3;
  const PlacementCost forced = EvaluatePlacement(problem, dev);
  CHECK_FALSE(forced.feasible);
  CHECK(forced.infeasible_reason.find("mcu2: node 'sigmoid' (Sigmoid)") != std::string::npos);

  // --mcu-only cannot place it at all: refused before any search, naming the node.
  auto only = PlaceMixed(g, c, true);
  REQUIRE_FALSE(only.ok());
  CHECK(only.status().code() == StatusCode::kNotSupported);
  CHECK(only.status().message().find("'sigmoid' (Sigmoid): the op is not supported on an MCU") != std::string::npos);
}

TEST_CASE("mixed placement: an MCU's program is built before its placement is chosen, RAM by liveness") {
  // KWS whole on one MCU: the largest layer's input and output (39 040 B by
  // the layer figures) fit 40 KiB, but its program keeps the model's input
  // and output alive beside them (41 048 B) and needs more.
  const Graph g = MakeKeywordSpottingGraph();
  auto whole = BuildMcuProgram(g, {});
  REQUIRE(whole.ok());
  const int64_t ram = 40 * 1024;
  int64_t largest_layer = 0;
  for (const auto& f : ComputeLayerFigures(g)) largest_layer = std::max<int64_t>(largest_layer, 4 * (f.M + f.K));
  REQUIRE(largest_layer <= ram);
  REQUIRE(static_cast<int64_t>(whole->ram_bytes()) > ram);
  auto cluster = [&](int mcus) { return McusOfRam(mcus, ram); };
  // Two such MCUs do not do either: whoever takes conv1's output must hold
  // it (31 360 B) beside its own output. Three do: conv1, pool1, the rest.
  const Cluster one = cluster(1), two = cluster(2), three = cluster(3);
  std::vector<int> all_on_mcu(g.nodes.size(), 1);
  PlacementProblem problem = MakePlacementProblem(g, ComputeLayerFigures(g), one);
  REQUIRE(EvaluatePlacement(problem, all_on_mcu).feasible);  // the layers' figures alone would take it
  const Status built = McuProgramsFit(g, one, all_on_mcu);
  CHECK(built.code() == StatusCode::kResourceExhausted);
  CHECK(built.message().find("mcu1 needs " + std::to_string(whole->ram_bytes()) + " bytes of RAM") !=
        std::string::npos);

  auto refused = PlaceMixed(g, one, true);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("not once their MCU programs were built") != std::string::npos);
  CHECK_FALSE(PlaceMixed(g, two, true).ok());
  auto split = PlaceMixed(g, three, true);
  INFO(split.status().ToString());
  REQUIRE(split.ok());
  CHECK(McuProgramsFit(g, three, split->device_of_layer).ok());
  for (int m = 1; m <= 3; ++m) CHECK(std::count(split->device_of_layer.begin(), split->device_of_layer.end(), m) > 0);
}

// --mcu-only when no MCU holds some early layer whole (VWW's 48x48 maps on
// STM32F401RB-class boards): the stem up to the last such layer goes in
// FFMT row tiles over the first k MCUs, the rest is a pipeline of whole
// layers, and every MCU's program, built, fits. One MCU cannot take tiles
// and is refused naming both attempts.
TEST_CASE("mixed placement: --mcu-only cuts a stem no MCU holds whole into row tiles over the MCUs") {
  const Graph g = WithInt8GridWeights(WithQdqActivations(MakeVwwStemGraph()));
  auto cluster = [](int mcus, int64_t ram) { return McusOfRam(mcus, ram); };
  // RAM for every layer but the largest, as the MCU holds it (codes).
  const Cluster probe = cluster(1, 1 << 20);
  const PlacementProblem problem = MakePlacementProblem(g, ComputeLayerFigures(g), probe);
  int64_t largest = 0;
  int widest = 0;
  for (int j = 0; j < problem.layers(); ++j)
    if (problem.BufferBytes(1, j) > largest) largest = problem.BufferBytes(1, j), widest = j;
  REQUIRE(widest < problem.layers() / 2);  // an early layer
  const int64_t ram = largest - 1;

  const Cluster three = cluster(3, ram);
  auto placed = PlaceMixed(g, three, true);
  INFO(placed.status().ToString());
  REQUIRE(placed.ok());
  REQUIRE(placed->assignments.size() == g.nodes.size());
  // Layers 0..s tiled over k >= 2 MCUs (s reaches the layer no MCU holds), the rest whole on MCUs.
  int tiled = 0;
  while (tiled < static_cast<int>(g.nodes.size()) && placed->assignments[tiled].scheme == LayerScheme::kFfmt) ++tiled;
  CHECK(tiled > widest);
  const LayerAssignment& stem = placed->assignments[0];
  CHECK(stem.devices.size() >= 2);
  CHECK(stem.grid_rows == static_cast<int64_t>(stem.devices.size()));
  for (int j = 0; j < tiled; ++j) CHECK(placed->assignments[j].devices == stem.devices);
  for (size_t j = tiled; j < g.nodes.size(); ++j) {
    CHECK(placed->assignments[j].scheme == LayerScheme::kWhole);
    REQUIRE(placed->assignments[j].devices.size() == 1);
    CHECK(placed->assignments[j].devices[0] != 0);  // nothing on w1
  }
  CHECK(placed->note.find("row tiles on mcu1+mcu2") != std::string::npos);
  CHECK(placed->cost.latency_s == 0);  // no prediction for tiles
  // Its programs, built as the bridges will, fit every MCU; every MCU computes.
  auto compiled = CompilePlan(g, MixedPartitionPlan(*placed, three.size()), McuCompileOptions(three));
  REQUIRE(compiled.ok());
  auto images = BuildMcuPrograms(three, *compiled);
  INFO(images.status().ToString());
  REQUIRE(images.ok());
  REQUIRE(images->size() == 3);
  for (const auto& [device, image] : *images) {
    CHECK(static_cast<int64_t>(image.ram_bytes()) <= ram);
    CHECK(image.macs > 0);
  }
  // One MCU: no pipeline and no tiles.
  auto refused = PlaceMixed(g, cluster(1, ram), true);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kResourceExhausted);
  INFO(refused.status().message());
  CHECK(refused.status().message().find("no stem in row tiles either: tiles need 2 or more MCUs, the cluster has 1") !=
        std::string::npos);
}
