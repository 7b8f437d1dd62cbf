// planner/mixed_placement.h: whole-layer placements that give every MCU of a
// Linux + MCU cluster a layer (what `tessera demo --mcu 2` deploys).
#include <catch2/catch.hpp>

#include <algorithm>

#include "partition/compile/mcu_program_builder.h"
#include "partition/graph/metrics.h"
#include "planner/mixed_placement.h"

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
  auto too_long = FastestPipelineUsing(problem, {2, 3}, kMaxMixedChainLayers + 1, c.size());
  REQUIRE_FALSE(too_long.ok());
  CHECK(too_long.status().message().find("small chains") != std::string::npos);
  // A device list that cannot all hold a layer of a 1-layer chain: nothing fits.
  auto impossible = FastestPipelineUsing(problem, {2, 3}, 1, c.size());
  REQUIRE_FALSE(impossible.ok());
  CHECK(impossible.status().message().find("no contiguous pipeline") != std::string::npos);
}
