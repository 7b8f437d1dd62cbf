// The planner's per-device RAM is sized by the worker's own code (issue 11
// item 4, daemon/runtime/device_memory.h). A shapes-only model (no weight
// values) must size to exactly what the worker's PreparedProgram holds for the
// same program with its weights: same packed forms, same device arena.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "daemon/runtime/device_memory.h"
#include "daemon/runtime/kernels/kernel.h"
#include "daemon/runtime/program_runner.h"
#include "partition/compile/forced_plan.h"
#include "partition/compile/program_codec.h"
#include "partition/compile/program_compiler.h"
#include "partition/import/model_import.h"

namespace tessera {
namespace {

Graph Darknet(const std::string& name, int64_t side, bool shapes_only) {
  ImportOptions io;
  io.input_shapes[""] = {1, 3, side, side};
  io.shapes_only = shapes_only;
  auto g = ImportModel("/usr/share/darknet/cfg/" + name + ".cfg", io);
  REQUIRE(g.ok());  // deploy/install-deps.sh installs Debian's darknet (cfg files)
  return std::move(*g);
}

// devices == 1: the whole model on one device (SingleDevicePlan).
std::vector<DeviceProgram> Programs(const Graph& g, ForcedScheme scheme, int devices) {
  if (devices == 1) {
    auto compiled = CompilePlan(g, SingleDevicePlan(g.nodes.size()));
    REQUIRE(compiled.ok());
    return std::move(compiled->programs);
  }
  ForcedPlanOptions o;
  o.devices = devices;
  o.grid_rows = o.grid_cols = scheme == ForcedScheme::kFfmt ? 2 : 1;
  auto plan = MakeForcedPlan(g, scheme, o);
  REQUIRE(plan.ok());
  auto compiled = CompilePlan(g, *plan);
  REQUIRE(compiled.ok());
  return std::move(compiled->programs);
}

// The program as a Linux worker loads it: written to a file, decoded with
// its weights left there (ParseProgramFile with stream_constants).
DeviceProgram StreamedFromFile(const DeviceProgram& program) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tessera-streamed-" + std::to_string(::getpid()) + ".pb")).string();
  {
    std::ofstream out(path, std::ios::binary);
    out << SerializeProgram(program, "p");
  }
  auto parsed = ParseProgramFile(path, "test", nullptr, /*share_constants=*/true, /*stream_constants=*/true);
  std::filesystem::remove(path);  // the open file stays readable
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  return std::move(*parsed);
}

TEST_CASE("a shapes-only program sizes exactly like the loaded one", "[runtime][memory]") {
  // yolov2-tiny at 416: Winograd (3x3, >=96 channels, >=64 outputs), packed
  // im2col and pointwise convs, pooling; resnext50 at 64: grouped convs and
  // residual adds; the whole model on one device, FFMT tiles, FDT slices.
  struct Case {
    std::string model;
    int64_t side;
    ForcedScheme scheme;
    int devices;
  };
  const std::vector<Case> cases = {{"yolov2-tiny", 416, ForcedScheme::kPipeline, 1},
                                   {"yolov2-tiny", 416, ForcedScheme::kFfmt, 4},
                                   {"yolov2-tiny", 416, ForcedScheme::kFdto, 3},
                                   {"resnext50", 64, ForcedScheme::kPipeline, 1}};
  for (const Case& c : cases) {
    for (int threads : {1, 3}) {
      CAPTURE(c.model, c.side, c.devices, threads);
      const Graph full = Darknet(c.model, c.side, false);
      const Graph shapes = Darknet(c.model, c.side, true);
      CHECK(shapes.WeightCount() == full.WeightCount());
      const auto real = Programs(full, c.scheme, c.devices);
      const auto sized = Programs(shapes, c.scheme, c.devices);
      REQUIRE(real.size() == sized.size());
      for (size_t d = 0; d < real.size(); ++d) {
        RunnerOptions ro;
        ro.threads = threads;
        auto prepared = PreparedProgram::Prepare(real[d], ro);
        REQUIRE(prepared.ok());
        DeviceMemoryOptions mo;
        mo.threads = threads;
        auto m = SizeDeviceProgram(sized[d], mo);
        REQUIRE(m.ok());
        CHECK(m->weight_bytes == static_cast<int64_t>((*prepared)->weight_bytes()));
        CHECK(m->arena_bytes == static_cast<int64_t>((*prepared)->memory_bytes()));
        CHECK(m->baseline_bytes == kWorkerBaselineBytes);
        // The load a worker does (issue 11 item 2): from its file, each
        // weight read as its kernel prepares, a block at a time when packed.
        DeviceProgram streamed = StreamedFromFile(real[d]);
        CHECK_FALSE(streamed.streamed_constants.empty());
        auto loaded = PreparedProgram::PrepareReleasingWeights(&streamed, ro);
        REQUIRE(loaded.ok());
        CHECK((*loaded)->weight_bytes() == (*prepared)->weight_bytes());
        CHECK((*loaded)->memory_bytes() == (*prepared)->memory_bytes());
        CHECK(m->load_peak_bytes == static_cast<int64_t>((*loaded)->load_peak_bytes()));
        // Held at most while loading: the weights as they will run, plus
        // one block (a chunk: raw weights with their Winograd transform, kernel.h).
        CHECK(m->load_peak_bytes <= m->weight_bytes + kConstantBlockBytes);
        CHECK(m->load_peak_bytes < static_cast<int64_t>((*prepared)->load_peak_bytes()));
        // The links: every device named by a Send or Recv step, none on one device.
        std::set<int> peers;
        for (const ProgramStep& step : sized[d].steps)
          if (step.kind == StepKind::kSend || step.kind == StepKind::kRecv) peers.insert(step.peer);
        CHECK(m->link_bytes == static_cast<int64_t>(peers.size()) * kLinkBytesPerPeer);
        if (c.devices == 1) CHECK(m->link_bytes == 0);
        if (c.devices > 1) CHECK(m->link_bytes >= kLinkBytesPerPeer);
        CHECK(m->total_bytes() ==
              kWorkerBaselineBytes +
                  std::max(m->weight_bytes + m->arena_bytes + m->io_bytes + m->link_bytes, m->load_peak_bytes));
      }
    }
  }
}

TEST_CASE("packed weights count as the kernels store them, not as raw floats", "[runtime][memory]") {
  // yolov2-tiny at 416 has Winograd layers: U = G g Gᵀ holds 16 values per 9.
  const Graph shapes = Darknet("yolov2-tiny", 416, true);
  auto m = SizeDeviceProgram(Programs(shapes, ForcedScheme::kPipeline, 1)[0], {});
  REQUIRE(m.ok());
  const int64_t raw = shapes.WeightCount() * 4;
  CHECK(m->weight_bytes > raw);
  CHECK(m->weight_bytes < raw * 16 / 9 + (1 << 20));
}

TEST_CASE("a program prepared for sizes only refuses to run", "[runtime][memory]") {
  const Graph shapes = Darknet("yolov2-tiny", 96, true);
  const auto programs = Programs(shapes, ForcedScheme::kPipeline, 1);
  RunnerOptions ro;
  ro.shapes_only = true;
  auto prepared = PreparedProgram::Prepare(programs[0], ro);
  REQUIRE(prepared.ok());
  auto runner = (*prepared)->NewRunner();
  REQUIRE_FALSE(runner.ok());
  CHECK(runner.status().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("requests in flight multiply their pipeline buffers, not the weights or the working memory",
          "[runtime][memory]") {
  // RAM = baseline + max(weights + slots x working + in_flight x (buffers +
  // I/O), load peak) (device_memory.h; issue 18 item 2).
  DeviceMemory m;
  m.weight_bytes = 100;
  m.working_bytes = 6;
  m.buffer_bytes = 4;
  m.arena_bytes = 10;
  m.baseline_bytes = 5;
  m.in_flight = 3;
  CHECK(m.total_bytes() == 5 + 100 + 6 + 3 * 4);
  m.load_peak_bytes = 140;  // repacking held more than serving does
  CHECK(m.total_bytes() == 145);
  CHECK(InFlightThatFits(m, 144) == 0);
  m.load_peak_bytes = 0;
  CHECK(InFlightThatFits(m, 114) == 0);  // 5 + 100 + 6 + 4 = 115 for one
  CHECK(InFlightThatFits(m, 115) == 1);
  CHECK(InFlightThatFits(m, 122) == 2);
  CHECK(InFlightThatFits(m, 123) == 3);
  CHECK(DescribeDeviceMemory(m).find("working memory") != std::string::npos);
  CHECK(DescribeDeviceMemory(m).find("3 x pipeline buffers") != std::string::npos);
  m.io_bytes = 2;  // the source device also holds request inputs and outputs
  CHECK(m.total_bytes() == 5 + 100 + 6 + 3 * (4 + 2));
  CHECK(InFlightThatFits(m, 128) == 2);
  m.compute_slots = 2;  // two requests compute at once, each in its own working memory
  CHECK(m.total_bytes() == 5 + 100 + 2 * 6 + 3 * (4 + 2));
  CHECK(DescribeDeviceMemory(m).find("2 x working memory") != std::string::npos);
}

}  // namespace
}  // namespace tessera
