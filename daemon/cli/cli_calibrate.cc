// `tessera calibrate MODEL [--threads N] [--repeat N] [--out device.yaml]
// [--name NAME] [--json]`: measures how fast this machine runs each kind of
// layer (OpKind, partition/graph/metrics.h) with the real kernels, and
// writes a device preset file whose macs_per_s_by_kind the planner divides
// each layer's MACs by (issue 12 item 5; METHODS §5 L_ij), so a cluster file
// predicts latency from measurement instead of a guessed cycles_per_mac.
//
// How: the model runs on one Executor with per-node timing (the same kernels
// and thread count a worker uses); after one warm-up run, every timed run
// gives per kind Σ MACs / Σ seconds of its nodes; the figure written is the
// median over the runs. Nodes that count no MACs (reshape, concat, pad, ...)
// are not charged by the planner; their time and the executor's own overhead
// are reported as "not charged" so the gap between prediction and a
// measured run is visible.
#include <sys/statvfs.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_calibrate_mcu.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/kernels/isa.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/graph/metrics.h"
#include "util/quantity.h"

namespace tessera {

namespace {

struct CalibrateOptions {
  ModelOptions model;
  int threads = 1;
  int repeat = 5;
  std::string out;
  std::string name;
  bool json = false;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "this-machine";
  return buf;
}

// The machine's RAM and the size of the file system holding `/` (where a
// worker keeps its weights), for the preset's ram and flash.
int64_t PhysicalRamBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}
int64_t RootFileSystemBytes() {
  struct statvfs s {};
  if (statvfs("/", &s) != 0) return 0;
  return static_cast<int64_t>(s.f_blocks) * static_cast<int64_t>(s.f_frsize);
}

// One op kind's figures: MACs per run and the median rate over the runs.
struct KindFigures {
  int layers = 0;
  int64_t macs = 0;
  std::vector<double> seconds;  // per timed run
  double MedianSeconds() const { return Median(seconds); }
  double MacsPerSecond() const {
    const double s = MedianSeconds();
    return s > 0 ? static_cast<double>(macs) / s : 0;
  }
};

struct Calibration {
  std::array<KindFigures, kOpKinds> kinds;  // kOther: nodes without MACs
  std::vector<double> charged_s, wall_s;    // per run: kernels of MAC-counting nodes; whole Run()
  int64_t total_macs = 0;
  double MacsPerSecond() const {
    const double s = Median(charged_s);
    return s > 0 ? static_cast<double>(total_macs) / s : 0;
  }
};

Status WriteDeviceFile(const CalibrateOptions& co, const Calibration& cal, const std::string& isa) {
  YAML::Emitter y;
  char when[32] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  y << YAML::Comment("Measured by `tessera calibrate " + co.model.model_path + " --threads " +
                     std::to_string(co.threads) + " --repeat " + std::to_string(co.repeat) + "` on " + HostName() +
                     " (kernels " + isa + "), " + when +
                     ".\nmacs_per_s_by_kind: per op kind, the median over the runs of its layers' MACs / their "
                     "kernels' time;\nmacs_per_s: the same over every layer (for kinds this model lacks). A worker "
                     "runs at these rates with --threads " +
                     std::to_string(co.threads) + ".");
  y << YAML::BeginSeq << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << co.name;
  y << YAML::Key << "kind" << YAML::Value << "linux";
  if (const int64_t ram = PhysicalRamBytes(); ram > 0) y << YAML::Key << "ram" << YAML::Value << ram;
  if (const int64_t flash = RootFileSystemBytes(); flash > 0) y << YAML::Key << "flash" << YAML::Value << flash;
  y << YAML::Key << "macs_per_s" << YAML::Value << YAML::Precision(4) << cal.MacsPerSecond();
  y << YAML::Key << "macs_per_s_by_kind" << YAML::Value << YAML::Flow << YAML::BeginMap;
  for (int k = 1; k < kOpKinds; ++k)
    if (cal.kinds[k].macs > 0 && cal.kinds[k].MacsPerSecond() > 0)
      y << YAML::Key << OpKindName(static_cast<OpKind>(k)) << YAML::Value << YAML::Precision(4)
        << cal.kinds[k].MacsPerSecond();
  y << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
  if (!y.good()) return Status::Internal("writing the device file: " + y.GetLastError());
  std::ofstream out(co.out, std::ios::trunc);
  if (!out) return Status::NotFound("--out " + co.out + " cannot be written; check that its directory exists");
  out << y.c_str() << "\n";
  if (!out.flush()) return Status::Internal("--out " + co.out + ": write failed (disk full?)");
  return Status::OK();
}

int RunCalibrate(CalibrateOptions co) {
  if (co.name.empty()) co.name = HostName();
  // Refuse an --out that cannot be written before measuring, not after.
  if (!co.out.empty()) {
    const std::string dir = co.out.find('/') == std::string::npos ? "." : co.out.substr(0, co.out.rfind('/') + 1);
    if (access(dir.c_str(), W_OK) != 0)
      return ReportError("calibrate",
                         Status::NotFound("--out " + co.out + " cannot be written; check that its directory exists"));
  }
  auto graph = LoadModel(co.model);
  if (!graph.ok()) return ReportError("calibrate", graph.status());
  const std::vector<LayerFigures> layers = ComputeLayerFigures(*graph);
  std::vector<TensorData> inputs;
  for (size_t i = 0; i < graph->inputs.size(); ++i)
    inputs.push_back(SeededInput(graph->values[graph->inputs[i]].shape, co.model.seed + i));

  ExecutorOptions eo;
  eo.threads = co.threads;
  eo.profile = true;
  auto ex = Executor::CreateReleasingWeights(&*graph, eo);
  if (!ex.ok()) return ReportError("calibrate", ex.status());

  Calibration cal;
  for (const auto& f : layers) {
    KindFigures& k = cal.kinds[static_cast<int>(f.kind)];
    k.layers += 1;
    k.macs += f.R;
    cal.total_macs += f.R;
  }
  std::vector<TensorData> outputs;
  std::fprintf(stderr, "calibrate: %s, %zu layers, %.3g MACs; %d thread(s), kernels %s; 1 warm-up + %d timed runs\n",
               co.model.model_path.c_str(), layers.size(), static_cast<double>(cal.total_macs), co.threads,
               IsaName(ActiveIsa()), co.repeat);
  if (Status st = (*ex)->Run(inputs, &outputs); !st.ok()) return ReportError("calibrate", st);
  std::vector<double> before = (*ex)->StepSeconds();
  for (int r = 0; r < co.repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (Status st = (*ex)->Run(inputs, &outputs); !st.ok()) return ReportError("calibrate", st);
    cal.wall_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const std::vector<double>& now = (*ex)->StepSeconds();
    std::array<double, kOpKinds> run_s{};
    for (const auto& f : layers) run_s[static_cast<int>(f.kind)] += now[f.node] - before[f.node];
    before = now;
    double charged = 0;
    for (int k = 0; k < kOpKinds; ++k) {
      cal.kinds[k].seconds.push_back(run_s[k]);
      if (k != static_cast<int>(OpKind::kOther)) charged += run_s[k];
    }
    cal.charged_s.push_back(charged);
    std::fprintf(stderr, "calibrate: run %d/%d: %.3f ms\n", r + 1, co.repeat, cal.wall_s.back() * 1e3);
  }

  const std::string isa = IsaName(ActiveIsa());
  for (int k = 1; k < kOpKinds; ++k)
    if (cal.kinds[k].macs > 0 && !(cal.kinds[k].MacsPerSecond() > 0 && std::isfinite(cal.kinds[k].MacsPerSecond())))
      return ReportError(
          "calibrate", Status::Internal(std::string("no time measured for the ") + OpKindName(static_cast<OpKind>(k)) +
                                        " layers (clock resolution?); use a larger model or input"));
  if (!co.out.empty()) {
    if (Status st = WriteDeviceFile(co, cal, isa); !st.ok()) return ReportError("calibrate", st);
    std::fprintf(stderr, "calibrate: wrote device '%s' to %s\n", co.name.c_str(), co.out.c_str());
  }

  const double wall = Median(cal.wall_s), charged = Median(cal.charged_s);
  nlohmann::ordered_json j;
  j["model"] = co.model.model_path;
  j["device"] = co.name;
  j["threads"] = co.threads;
  j["isa"] = isa;
  j["runs"] = co.repeat;
  j["macs"] = cal.total_macs;
  j["macs_per_s"] = cal.MacsPerSecond();
  j["median_run_s"] = wall;
  j["median_charged_s"] = charged;  // the kernels of layers the planner charges
  j["kinds"] = nlohmann::ordered_json::object();
  for (int k = 1; k < kOpKinds; ++k) {
    const KindFigures& f = cal.kinds[k];
    if (f.layers == 0) continue;
    j["kinds"][OpKindName(static_cast<OpKind>(k))] = {
        {"layers", f.layers}, {"macs", f.macs}, {"median_s", f.MedianSeconds()}, {"macs_per_s", f.MacsPerSecond()}};
  }
  j["not_charged"] = {{"layers", cal.kinds[0].layers}, {"median_s", std::max(0.0, wall - charged)}};
  if (!co.out.empty()) j["out"] = co.out;
  if (co.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("%-14s %6s %12s %10s %10s\n", "op kind", "layers", "MACs", "ms", "GMAC/s");
  for (const auto& [name, f] : j["kinds"].items())
    std::printf("%-14s %6d %12.4g %10.3f %10.3f\n", name.c_str(), f["layers"].get<int>(), f["macs"].get<double>(),
                f["median_s"].get<double>() * 1e3, f["macs_per_s"].get<double>() / 1e9);
  std::printf("%-14s %6d %12s %10.3f %10s   (layers without MACs and executor overhead)\n", "not charged",
              cal.kinds[0].layers, "-", std::max(0.0, wall - charged) * 1e3, "-");
  std::printf("all layers: %.3f GMAC/s; run %.3f ms median of %d, %d thread(s), kernels %s\n",
              cal.MacsPerSecond() / 1e9, wall * 1e3, co.repeat, co.threads, isa.c_str());
  return 0;
}

}  // namespace

void RegisterCalibrateCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate", "Measure this machine's MAC rate per op kind on a model and write a device file for the planner");
  auto co = std::make_shared<CalibrateOptions>();
  co->model.AddTo(*cmd);
  cmd->add_option("--threads", co->threads, "Intra-op threads (as the worker will run: tessera worker --threads)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--repeat", co->repeat, "Timed runs; each figure is the median over them")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--out", co->out, "Write a device preset file (YAML list, as in configs/devices/) here");
  cmd->add_option("--name", co->name, "Preset name in --out (default: this host's name)");
  cmd->add_flag("--json", co->json, "Print the figures as JSON");
  // --mcu: the same for a microcontroller worker on a UART (issue 16 item 5).
  auto mo = std::make_shared<McuCalibrateOptions>();
  cmd->add_option("--mcu", mo->port,
                  "Calibrate the microcontroller worker on this UART instead (a QEMU -serial pty, /dev/ttyUSB0): "
                  "cycles per MAC per op kind from its per-layer SysTick counts");
  cmd->add_option("--baud", mo->baud, "--mcu: the UART's baud rate")->capture_default_str();
  cmd->add_option("--cpu-hz", mo->cpu_hz, "--mcu: the MCU's clock for the device file (default: its tick clock)");
  cmd->add_option("--icount-shift", mo->icount_shift,
                  "--mcu under QEMU -icount shift=S: turns ticks into guest instructions (not Cortex-M4 cycles)")
      ->check(CLI::Range(0, 10));
  cmd->add_option("--ram", mo->ram, "--mcu: the MCU's RAM for the device file (e.g. 64KiB)");
  cmd->add_option("--flash", mo->flash, "--mcu: the MCU's flash for the device file (e.g. 128KiB)");
  cmd->callback([co, mo] {
    if (!mo->port.empty()) {
      mo->out = co->out;
      mo->name = co->name;
      mo->json = co->json;
      if (int rc = RunCalibrateMcu(*mo, co->model)) throw CLI::RuntimeError(rc);
      return;
    }
    if (int rc = RunCalibrate(*co)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace tessera
