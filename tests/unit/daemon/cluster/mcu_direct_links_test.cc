// Direct MCU<->MCU UART links (issue 16 item 4): the cluster file's pairs of
// MCUs mark the plan's transfers between them, the MCU programs send and
// receive those on the named UART, and nothing else changes.
#include <catch2/catch.hpp>

#include <set>

#include "daemon/cluster/gateway.h"
#include "daemon/cluster/mcu_direct_links.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/mcu_program_builder.h"
#include "partition/compile/program_compiler.h"
#include "planner/cluster.h"
#include "transport/wire/mcu_program.h"

namespace tessera {
namespace {

Cluster ChainCluster() {
  auto c = ParseCluster(R"(devices:
  - { name: pi1, ram: 1GiB, flash: 1GiB, macs_per_s: 1e9, address: 127.0.0.1:7070 }
  - { name: mcu1, preset: STM32H743ZI, serial: /dev/null, baud: 115200, via: pi1 }
  - { name: mcu2, preset: STM32H743ZI, serial: /dev/null, baud: 115200, via: pi1 }
links:
  default: { bandwidth: 1Gbit/s }
  pairs:
    - { between: [mcu1, mcu2], bandwidth: 115200baud, ports: [1, 2] }
)",
                        "chain.yaml", PresetDirectories());
  REQUIRE(c.ok());
  return *c;
}

}  // namespace

TEST_CASE("direct MCU links: transfers between joined MCUs go on their UARTs", "[mcu][cluster]") {
  const Cluster cluster = ChainCluster();
  const McuPortMap ports = DirectMcuPorts(cluster, {0, 1, 2});
  REQUIRE(ports.size() == 2);
  CHECK(ports.at({1, 2}) == 1);
  CHECK(ports.at({2, 1}) == 2);

  // FDTO over the three: each conv's output channels are gathered, so
  // mcu1 and mcu2 exchange their slices (besides talking to pi1).
  const Graph g = MakeKeywordSpottingGraph();
  ForcedPlanOptions fo;
  fo.devices = 3;
  auto plan = MakeForcedPlan(g, ForcedScheme::kFdto, fo);
  REQUIRE(plan.ok());
  auto compiled = CompilePlan(g, *plan);
  REQUIRE(compiled.ok());
  const auto before = PlannedLinkBytes(compiled->programs);
  REQUIRE(before.count({1, 2}));
  int marked = 0;
  for (DeviceProgram& p : compiled->programs) marked += MarkDirectMcuTransfers(ports, &p);
  CHECK(marked > 0);
  REQUIRE(ValidatePrograms(compiled->programs).ok());
  // Only the mcu1 <-> mcu2 steps, on both ends, with each end's own UART.
  std::set<int64_t> direct_messages;
  for (const DeviceProgram& p : compiled->programs)
    for (const ProgramStep& s : p.steps) {
      if (s.kind != StepKind::kSend && s.kind != StepKind::kRecv) continue;
      const bool joined = (p.device == 1 && s.peer == 2) || (p.device == 2 && s.peer == 1);
      CHECK(s.uart_port == (joined ? (p.device == 1 ? 1 : 2) : 0));
      if (joined) direct_messages.insert(s.message);
    }
  // They cross no worker's gRPC link any more; the others are unchanged.
  const auto after = PlannedLinkBytes(compiled->programs);
  CHECK_FALSE(after.count({1, 2}));
  CHECK_FALSE(after.count({2, 1}));
  CHECK(after.at({0, 1}) == before.at({0, 1}));

  // The MCU programs name the UART of every input and output.
  for (int d : {1, 2}) {
    auto image = BuildMcuProgram(compiled->programs[d], McuProgramOptions{});
    REQUIRE(image.ok());
    mcu::ProgramView view;
    std::string bytes = image->bytes;
    REQUIRE(mcu::ValidateProgram(bytes.data(), static_cast<uint32_t>(bytes.size()), image->ram_bytes(), &view) ==
            mcu::kErrNone);
    int on_direct = 0;
    const uint32_t n = view.header->num_inputs + view.header->num_outputs;
    for (uint32_t i = 0; i < n; ++i) {
      const mcu::IoEntry& e = view.inputs[i];
      CHECK(e.port == (direct_messages.count(e.message) ? static_cast<uint32_t>(d) : 0u));
      on_direct += e.port > 0;
    }
    CHECK(on_direct > 0);
    // A port the board does not have is refused as a corrupt program.
    auto* entry = reinterpret_cast<mcu::IoEntry*>(bytes.data() + sizeof(mcu::ProgramHeader));
    entry->port = mcu::kMaxPorts;
    CHECK(mcu::ValidateProgram(bytes.data(), static_cast<uint32_t>(bytes.size()), image->ram_bytes(), &view) ==
          mcu::kErrProgramLayer);
  }

  // Both ends must agree: a Send over the direct UART with its Recv not.
  for (ProgramStep& s : compiled->programs[2].steps)
    if (s.kind == StepKind::kRecv && s.peer == 1) {
      s.uart_port = 0;
      break;
    }
  const Status mismatch = ValidatePrograms(compiled->programs);
  CHECK_THAT(mismatch.message(), Catch::Matchers::Contains("uses a direct MCU UART for it, device 2 does not"));
}

}  // namespace tessera
