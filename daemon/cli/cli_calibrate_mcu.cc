// `tessera calibrate MODEL --mcu PORT [--baud N] [--cpu-hz HZ]
// [--icount-shift S] [--out device.yaml] [--name NAME] [--json]` (issue 16
// item 5): runs MODEL on a microcontroller worker over its UART, reads the
// per-layer tick counts its STATUS reply carries (firmware/main.cc: SysTick
// on the processor clock around each layer), and turns them into cycles per
// MAC per op kind for the planner's device file (cycles_per_mac and
// macs_per_s_by_kind = cpu_hz / cycles per MAC of the kind).
//
// On a board, a SysTick tick on the processor clock is one CPU cycle (times
// cpu_hz / tick_hz when they differ). Under QEMU, the firmware's clock is
// QEMU's virtual time: with `-icount shift=S` one guest instruction is 2^S
// ns, so --icount-shift S converts ticks into instructions, and what the
// file calls cycles are then instructions (QEMU models no pipeline, wait
// states or FPU latencies); the file's comment says which it is.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_calibrate_mcu.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/compile/mcu_program_builder.h"
#include "partition/graph/metrics.h"
#include "transport/uart/uart_link.h"
#include "transport/wire/frame_codec.h"
#include "transport/wire/mcu_program.h"

namespace tessera {

namespace {

using namespace std::chrono_literals;

}  // namespace

int RunCalibrateMcu(const McuCalibrateOptions& co, const ModelOptions& model) {
  auto graph = LoadModel(model);
  if (!graph.ok()) return ReportError("calibrate", graph.status());
  if (graph->inputs.size() != 1 || graph->outputs.size() != 1)
    return ReportError("calibrate", Status::NotSupported("--mcu calibrates a model with one input and one output"));
  // The MCU program's layers are the graph's nodes in order, without the
  // aliases the builder folds away (mcu_program_builder.h).
  std::vector<int> layer_node;
  for (size_t n = 0; n < graph->nodes.size(); ++n) {
    const std::string& op = graph->nodes[n].op;
    if (op != "Reshape" && op != "Flatten" && op != "Identity") layer_node.push_back(static_cast<int>(n));
  }
  const std::vector<LayerFigures> figures = ComputeLayerFigures(*graph);
  const TensorData input = SeededInput(graph->values[graph->inputs[0]].shape, model.seed);
  auto ex = Executor::Create(*graph, ExecutorOptions{});
  if (!ex.ok()) return ReportError("calibrate", ex.status());
  std::vector<TensorData> want;
  if (auto st = (*ex)->Run({input}, &want); !st.ok()) return ReportError("calibrate", st);

  McuProgramOptions po;
  po.plan_id = PlanIdHash(graph->name + "/calibrate");
  po.input_messages[graph->inputs[0]] = 1;
  po.output_messages[graph->outputs[0]] = 2;
  auto image = BuildMcuProgram(*graph, po);
  if (!image.ok()) return ReportError("calibrate", image.status());
  const auto* header = reinterpret_cast<const mcu::ProgramHeader*>(image->bytes.data());
  if (header->num_layers != layer_node.size())
    return ReportError("calibrate", Status::Internal("the MCU program has " + std::to_string(header->num_layers) +
                                                     " layers for " + std::to_string(layer_node.size()) + " nodes"));

  UartLinkOptions lo;
  lo.device = co.port;
  lo.baud = co.baud;
  lo.window = static_cast<int>(mcu::kRxSlots) + 1;
  auto link = UartLink::Open(lo);
  if (!link.ok()) return ReportError("calibrate", link.status());
  std::fprintf(stderr, "calibrate: %s on the MCU at %s: %zu layers, %lld MACs; uploading %zu bytes\n",
               model.model_path.c_str(), co.port.c_str(), layer_node.size(), static_cast<long long>(image->macs),
               image->bytes.size());
  (*link)->set_plan_id(po.plan_id);
  if (auto st = (*link)->SendTyped(wire::kFrameProgram, 1, image->bytes); !st.ok()) return ReportError("calibrate", st);
  if (auto st = (*link)->Flush(300s); !st.ok()) return ReportError("calibrate", st);
  std::vector<uint32_t> ticks;
  auto loaded = QueryMcuStatus(**link, 1, 10s, &ticks);
  if (!loaded.ok()) return ReportError("calibrate", loaded.status());
  if (loaded->state != mcu::kStateLoaded || loaded->plan_id != po.plan_id)
    return ReportError("calibrate", Status::FailedPrecondition("the MCU did not load the program (state " +
                                                               std::to_string(loaded->state) + ", error " +
                                                               std::to_string(loaded->last_error) +
                                                               "; error 1: it does not fit the MCU's arena)"));
  const std::string in_bytes(reinterpret_cast<const char*>(input.values.data()), input.values.size() * 4);
  if (auto st = (*link)->Send(1, in_bytes); !st.ok()) return ReportError("calibrate", st);
  auto out = (*link)->Recv(2, 600s);
  if (!out.ok()) return ReportError("calibrate", out.status());
  const std::vector<float>& w = want[0].values;
  if (out->size() != w.size() * 4)
    return ReportError("calibrate", Status::DataLoss("the MCU answered " + std::to_string(out->size()) + " bytes"));
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < w.size(); ++i) {
    float g;
    std::memcpy(&g, out->data() + 4 * i, 4);
    diff = std::max(diff, std::fabs(double(g) - w[i]));
    scale = std::max(scale, std::fabs(double(w[i])));
  }
  auto after = QueryMcuStatus(**link, 2, 10s, &ticks);
  if (!after.ok()) return ReportError("calibrate", after.status());
  if (after->tick_hz == 0 || ticks.size() != std::min<size_t>(layer_node.size(), mcu::kMaxTimedLayers))
    return ReportError("calibrate", Status::DataLoss("the MCU reports no per-layer ticks (firmware too old?)"));

  // Cycles (or QEMU instructions) per tick.
  const bool qemu = co.icount_shift >= 0;
  const double cpu_hz = co.cpu_hz > 0 ? co.cpu_hz : after->tick_hz;
  const double per_tick = qemu ? 1e9 / after->tick_hz / std::ldexp(1.0, co.icount_shift) : cpu_hz / after->tick_hz;
  std::map<std::string, std::pair<int64_t, double>> kinds;  // kind -> MACs, cycles
  int64_t macs = 0;
  double cycles = 0;
  for (size_t k = 0; k < ticks.size(); ++k) {
    // Layers past kMaxTimedLayers share the last word: charge them to it together.
    int64_t m = 0;
    const size_t last = k + 1 == ticks.size() ? layer_node.size() : k + 1;
    for (size_t j = k; j < last; ++j) m += figures[layer_node[j]].R;
    const std::string kind = OpKindName(figures[layer_node[k]].kind);
    kinds[kind].first += m;
    kinds[kind].second += ticks[k] * per_tick;
    macs += m;
    cycles += ticks[k] * per_tick;
  }
  const char* unit = qemu ? "instructions" : "cycles";
  nlohmann::ordered_json j;
  j["model"] = model.model_path;
  j["port"] = co.port;
  j["unit"] = unit;
  j["tick_hz"] = after->tick_hz;
  j["cpu_hz"] = cpu_hz;
  j["macs"] = macs;
  j[std::string(unit)] = cycles;
  j["per_mac"] = macs > 0 ? cycles / macs : 0.0;
  j["max_rel_diff"] = diff / scale;
  j["kinds"] = nlohmann::ordered_json::object();
  for (const auto& [kind, f] : kinds)
    if (f.first > 0) j["kinds"][kind] = {{"macs", f.first}, {unit, f.second}, {"per_mac", f.second / f.first}};
  if (diff / scale > 1e-5)
    return ReportError("calibrate", Status::DataLoss("the MCU's answer differs from the host run: max rel " +
                                                     std::to_string(diff / scale)));
  if (!co.out.empty()) {
    YAML::Emitter y;
    char when[32] = {};
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    y << YAML::Comment("Measured by `tessera calibrate " + model.model_path + " --mcu " + co.port + "`, " + when +
                       ".\n" +
                       (qemu ? "Under QEMU -icount shift=" + std::to_string(co.icount_shift) +
                                   ": cycles_per_mac counts guest INSTRUCTIONS per MAC, not Cortex-M4 cycles;\n"
                             : std::string("cycles_per_mac: SysTick cycles per MAC over the model's layers;\n")) +
                       "macs_per_s_by_kind: cpu_hz / that figure per op kind.");
    y << YAML::BeginSeq << YAML::BeginMap;
    y << YAML::Key << "name" << YAML::Value << (co.name.empty() ? std::string("mcu-calibrated") : co.name);
    y << YAML::Key << "kind" << YAML::Value << "mcu";
    if (!co.ram.empty()) y << YAML::Key << "ram" << YAML::Value << co.ram;
    if (!co.flash.empty()) y << YAML::Key << "flash" << YAML::Value << co.flash;
    y << YAML::Key << "cpu_hz" << YAML::Value << YAML::Precision(6) << cpu_hz;
    y << YAML::Key << "cycles_per_mac" << YAML::Value << YAML::Precision(4) << cycles / std::max<int64_t>(1, macs);
    y << YAML::Key << "macs_per_s_by_kind" << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [kind, f] : kinds)
      if (f.first > 0 && f.second > 0)
        y << YAML::Key << kind << YAML::Value << YAML::Precision(4) << cpu_hz * f.first / f.second;
    y << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
    std::ofstream f(co.out, std::ios::trunc);
    if (!f || !(f << y.c_str() << "\n") || !f.flush())
      return ReportError("calibrate", Status::NotFound("--out " + co.out + " cannot be written"));
    j["out"] = co.out;
  }
  if (co.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("%-14s %12s %14s %10s\n", "op kind", "MACs", unit, "per MAC");
  for (const auto& [kind, f] : kinds)
    if (f.first > 0)
      std::printf("%-14s %12lld %14.0f %10.2f\n", kind.c_str(), (long long)f.first, f.second, f.second / f.first);
  std::printf("all layers: %.0f %s for %lld MACs = %.2f per MAC; answer max rel diff %.2g%s\n", cycles, unit,
              static_cast<long long>(macs), macs > 0 ? cycles / macs : 0.0, diff / scale,
              qemu ? " (QEMU instructions, not Cortex-M4 cycles)" : "");
  return 0;
}

}  // namespace tessera
