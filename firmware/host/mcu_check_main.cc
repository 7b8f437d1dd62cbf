// tessera_mcu_check: proves the MCU path end to end (issue 6).
//
//  1. builds a model (the keyword-spotting CNN, its depthwise-separable
//     variant whose convs run in place (segments), or a graph of the other MCU
//     ops) with seeded weights and input, runs it with the host executor
//     (daemon/runtime/executor.h: the oracle);
//  2. compiles it to the compact MCU program and runs the firmware's own
//     interpreter and kernels (firmware/mcu_kernels.h) on the host: kernel
//     parity on the same inputs;
//  3. with --serial: talks to the firmware (e.g. QEMU's `-serial pty`)
//     through the real UartLink serial-port path — STATUS, PROGRAM upload,
//     input tensor, output tensor — and compares the MCU's answer with the
//     oracle. --faults puts a SerialRelay with byte faults between the link
//     and the port.
// Prints one `key: value` line per figure; exit 0 when every check passes.
#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/runtime/executor.h"
#include "firmware/mcu_kernels.h"
#include "partition/compile/mcu_program_builder.h"
#include "partition/graph/int8_weights.h"
#include "transport/fault_relay.h"
#include "transport/uart/uart_link.h"
#include "transport/wire/mcu_program.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Args {
  std::string model = "kws";
  std::string serial;
  uint32_t baud = 115200;
  double faults = 0;
  double tolerance = 1e-5;
  int runs = 2;
  int icount_shift = -1;  // QEMU's -icount shift, to turn ticks into instructions (-1: not under -icount)
};

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// max |a - b| / max |b|: relative to the output's scale (single outputs near
// zero make element-wise relative error meaningless).
double MaxRelError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, double(std::fabs(got[i] - want[i])));
    scale = std::max(scale, double(std::fabs(want[i])));
  }
  return diff / scale;
}

Result<std::vector<float>> RunOnHostInterpreter(const McuProgramImage& image, const std::vector<float>& input) {
  // The program (the firmware's flash region), then its activations (its RAM arena), 8-byte aligned.
  size_t program_aligned = (image.bytes.size() + 7) & ~size_t{7};
  std::vector<uint64_t> arena((program_aligned + 4 * size_t{image.activation_words}) / 8 + 1);
  std::memcpy(arena.data(), image.bytes.data(), image.bytes.size());
  mcu::ProgramView view;
  uint32_t err =
      mcu::ValidateProgram(arena.data(), static_cast<uint32_t>(image.bytes.size()), image.ram_bytes(), &view);
  if (err != mcu::kErrNone) return Status::Internal("host interpreter rejected the program: error " + std::to_string(err));
  float* act = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(arena.data()) + program_aligned);
  const mcu::IoEntry& in = view.inputs[0];
  mcu::EncodeTensor(view.weights, in.grid, input.data(), in.count, mcu::BytesAt(act, in.offset));
  mcu::RunProgram(view, act);
  const mcu::IoEntry& out = view.outputs[0];
  std::vector<float> got(out.count);
  mcu::DecodeTensor(view.weights, out.grid, mcu::BytesAt(act, out.offset), out.count, got.data());
  return got;
}

Result<mcu::McuStatus> QueryStatus(UartLink& link, uint32_t id, std::vector<uint32_t>* layer_ticks = nullptr) {
  return QueryMcuStatus(link, id, 10s, layer_ticks);
}

// What layer k of a program computes: its kind and MACs (as the builder counts them).
std::pair<std::string, int64_t> LayerKindAndMacs(const mcu::Layer& l) {
  switch (l.op) {
    case mcu::kOpConv: {
      const int64_t macs = int64_t(l.oc) * l.oh * l.ow * (l.c / l.group) * l.kh * l.kw;
      if (l.group == l.c && l.c == l.oc && l.group > 1) return {"depthwise", macs};
      return {l.kh == 1 && l.kw == 1 ? "pointwise" : "conv", macs};
    }
    case mcu::kOpDense:
      return {"dense", int64_t(l.oc) * l.c * l.h * l.w};
    case mcu::kOpMaxPool:
      return {"maxpool", 0};
    case mcu::kOpAvgPool:
      return {"avgpool", 0};
    case mcu::kOpGlobalAvgPool:
      return {"global_avgpool", 0};
    case mcu::kOpRelu:
      return {"relu", 0};
    case mcu::kOpAdd:
      return {"add", 0};
    case mcu::kOpCopy:
      return {"copy", 0};
    case mcu::kOpQuantize:
      return {l.out_grid != mcu::kNoWeights ? "quantize_to_codes" : "quantize", 0};
    case mcu::kOpSoftmax:
      return {"softmax", 0};
    default:
      return {"?", 0};
  }
}

void PrintStatus(const char* when, const mcu::McuStatus& s) {
  std::printf(
      "mcu_status_%s: state=%u plan=%08x ram=%u free=%u flash=%u flash_free=%u error=%u runs=%u last_run_ms=%u "
      "bad_frames=%u refused=%u held=%u firmware_ram=%u stack_peak=%u\n",
      when, s.state, s.plan_id, s.arena_bytes, s.free_bytes, s.flash_bytes, s.flash_free_bytes, s.last_error, s.runs,
      s.last_run_ms, s.bad_frames, s.refused_frames, s.held_frames, s.firmware_ram_bytes, s.stack_peak_bytes);
}

Status Check(bool ok, const std::string& what) { return ok ? Status::OK() : Status::Internal(what); }

// The last run's ticks per layer (issue 16 item 5). Under QEMU with
// -icount shift=S (--icount-shift S) a tick is (1e9 / tick_hz) / 2^S
// instructions: QEMU counts guest instructions, not Cortex-M4 cycles (no
// pipeline, flash wait states or FPU latencies are modelled).
Status PrintTicks(const Args& args, const McuProgramImage& image, const mcu::McuStatus& s,
                  const std::vector<uint32_t>& layer_ticks) {
  TS_RETURN_IF_ERROR(Check(s.tick_hz > 0 && s.last_run_ticks > 0, "the MCU reports no run time in ticks"));
  const uint32_t num_layers = reinterpret_cast<const mcu::ProgramHeader*>(image.bytes.data())->num_layers;
  TS_RETURN_IF_ERROR(Check(
      layer_ticks.size() == std::min(num_layers, mcu::kMaxTimedLayers),
      "the MCU reports " + std::to_string(layer_ticks.size()) + " timed layers for " + std::to_string(num_layers)));
  const double per_tick = args.icount_shift >= 0 ? 1e9 / s.tick_hz / std::ldexp(1.0, args.icount_shift) : 0;
  const auto* layers = reinterpret_cast<const mcu::Layer*>(
      image.bytes.data() + sizeof(mcu::ProgramHeader) +
      sizeof(mcu::IoEntry) * (reinterpret_cast<const mcu::ProgramHeader*>(image.bytes.data())->num_inputs +
                              reinterpret_cast<const mcu::ProgramHeader*>(image.bytes.data())->num_outputs));
  uint64_t sum = 0;
  for (size_t k = 0; k < layer_ticks.size(); ++k) {
    const auto [kind, macs] = LayerKindAndMacs(layers[k]);
    sum += layer_ticks[k];
    std::printf("mcu_layer_%zu: kind=%s macs=%lld ticks=%u", k, kind.c_str(), (long long)macs, layer_ticks[k]);
    if (per_tick > 0) {
      const double instructions = layer_ticks[k] * per_tick;
      std::printf(" instructions=%.0f", instructions);
      if (macs > 0) std::printf(" instructions_per_mac=%.2f", instructions / macs);
    }
    std::printf("\n");
  }
  std::printf("mcu_run: ticks=%u tick_hz=%u layers_sum=%llu macs=%lld", s.last_run_ticks, s.tick_hz,
              (unsigned long long)sum, (long long)image.macs);
  if (per_tick > 0)
    std::printf(
        " instructions=%.0f instructions_per_mac=%.2f (QEMU -icount shift=%d: guest instructions, not "
        "Cortex-M4 cycles)",
        s.last_run_ticks * per_tick, s.last_run_ticks * per_tick / std::max<int64_t>(1, image.macs), args.icount_shift);
  std::printf("\n");
  // The layers are sub-intervals of the run, so their ticks never exceed the
  // run's. Under -icount the clock is the guest's instruction count, and the
  // layers must cover the run up to the clock reads between them (>= 95 %).
  // Without -icount QEMU's clock is the host's: a host pause (a loaded CI
  // machine) or a UART interrupt on a noisy line that falls between two
  // layers is counted by the run only, so the cover is printed, not checked.
  TS_RETURN_IF_ERROR(Check(sum <= s.last_run_ticks, "the per-layer ticks add up to more than the run's"));
  const double cover = double(sum) / double(s.last_run_ticks);
  std::printf("mcu_layers_cover: %.3f of the run's ticks%s\n", cover, per_tick > 0 ? "" : " (host clock: not checked)");
  if (per_tick > 0)
    TS_RETURN_IF_ERROR(Check(cover >= 0.95, "the per-layer ticks cover less than 95 % of the run's under -icount"));
  return Status::OK();
}

Status RunOverSerial(const Args& args, const McuProgramImage& image, uint32_t plan_id, const std::vector<float>& input,
                     const std::vector<float>& want, uint32_t input_message, uint32_t output_message) {
  // Optional noisy cable: link <-> pty <-> relay(faults) <-> the port.
  RawPty pty;
  int port_fd = -1;
  std::unique_ptr<SerialRelay> relay;
  UartLinkOptions options;
  options.device = args.serial;
  options.baud = args.baud;
  options.window = static_cast<int>(mcu::kRxSlots) + 1;  // what the firmware can hold past a gap
  if (args.faults > 0) {
    TS_ASSIGN_OR_RETURN(pty, OpenRawPty());
    port_fd = open(args.serial.c_str(), O_RDWR | O_NOCTTY);
    if (port_fd < 0) return Status::FromErrno(errno, args.serial);
    termios tio{};
    tcgetattr(port_fd, &tio);
    cfmakeraw(&tio);
    tcsetattr(port_fd, TCSANOW, &tio);
    ByteFaults f{args.faults, args.faults, args.faults, 5};
    relay = std::make_unique<SerialRelay>(pty.master, port_fd, f, ByteFaults{args.faults, args.faults, args.faults, 6});
    options.device = pty.slave_path;
  }
  TS_ASSIGN_OR_RETURN(auto link, UartLink::Open(options));

  auto t0 = Clock::now();
  TS_ASSIGN_OR_RETURN(mcu::McuStatus before, QueryStatus(*link, 1));
  PrintStatus("boot", before);
  std::printf("status_round_trip_s: %.3f\n", Seconds(t0));

  t0 = Clock::now();
  TS_RETURN_IF_ERROR(link->SendTyped(wire::kFrameProgram, 1, image.bytes));
  TS_RETURN_IF_ERROR(link->Flush(120s));
  double upload = Seconds(t0);
  std::printf("program_upload_s: %.3f (%zu bytes, %.0f%% of the %u-baud line)\n", upload, image.bytes.size(),
              100.0 * image.bytes.size() * 10 / args.baud / upload, args.baud);
  TS_ASSIGN_OR_RETURN(mcu::McuStatus loaded, QueryStatus(*link, 2));
  PrintStatus("loaded", loaded);
  TS_RETURN_IF_ERROR(Check(loaded.state == mcu::kStateLoaded && loaded.plan_id == plan_id,
                           "the MCU did not load the program (state " + std::to_string(loaded.state) + ", error " +
                               std::to_string(loaded.last_error) + ")"));
  TS_RETURN_IF_ERROR(Check(loaded.free_bytes == loaded.arena_bytes - image.ram_bytes(),
                           "the MCU reports free RAM that disagrees with the program's activations"));
  TS_RETURN_IF_ERROR(Check(loaded.flash_free_bytes == loaded.flash_bytes - image.flash_bytes(),
                           "the MCU reports free flash that disagrees with the program's size"));

  // A tensor for another plan is refused, counted, and never computed on.
  link->set_plan_id(plan_id ^ 0x5A5A5A5A);
  // The tensors in their wire form (mcu_program.h version 5: int8 codes
  // where the program keeps them so).
  std::vector<uint64_t> aligned(image.bytes.size() / 8 + 1);
  std::memcpy(aligned.data(), image.bytes.data(), image.bytes.size());
  mcu::ProgramView view;
  if (mcu::ValidateProgram(aligned.data(), static_cast<uint32_t>(image.bytes.size()), image.ram_bytes(), &view) !=
      mcu::kErrNone)
    return Status::Internal("the program does not validate on the host");
  std::string in_bytes(mcu::IoBytes(view.inputs[0]), '\0');
  mcu::EncodeTensor(view.weights, view.inputs[0].grid, input.data(), view.inputs[0].count, in_bytes.data());
  TS_RETURN_IF_ERROR(link->Send(input_message, in_bytes));
  TS_RETURN_IF_ERROR(link->Flush(30s));
  link->set_plan_id(plan_id);

  double worst = 0;
  for (int run = 0; run < args.runs; ++run) {
    t0 = Clock::now();
    TS_RETURN_IF_ERROR(link->Send(input_message, in_bytes));
    TS_ASSIGN_OR_RETURN(std::string out, link->Recv(output_message, 60s));
    double latency = Seconds(t0);
    const mcu::IoEntry& oe = view.outputs[0];
    TS_RETURN_IF_ERROR(Check(oe.count == want.size() && out.size() == mcu::IoBytes(oe),
                             "output of " + std::to_string(out.size()) + " bytes"));
    std::vector<float> got(want.size());
    mcu::DecodeTensor(view.weights, oe.grid, out.data(), oe.count, got.data());
    double rel = MaxRelError(got, want);
    worst = std::max(worst, rel);
    std::printf("mcu_inference_%d: latency_s=%.3f max_rel=%.3g\n", run, latency, rel);
  }
  std::vector<uint32_t> layer_ticks;
  TS_ASSIGN_OR_RETURN(mcu::McuStatus after, QueryStatus(*link, 3, &layer_ticks));
  PrintStatus("after", after);
  TS_RETURN_IF_ERROR(PrintTicks(args, image, after, layer_ticks));
  UartLinkCounters c = link->counters();
  std::printf("host_link: frames_sent=%llu retransmissions=%llu (fast %llu) bad_frames=%llu (%s) duplicates=%llu\n",
              (unsigned long long)c.frames_sent, (unsigned long long)c.retransmissions,
              (unsigned long long)c.fast_retransmissions, (unsigned long long)c.bad_frames.total(),
              c.bad_frames.ToString().c_str(), (unsigned long long)c.duplicates);
  if (relay) {
    auto ab = relay->a_to_b(), ba = relay->b_to_a();
    std::printf("injected_faults: corrupted=%llu dropped=%llu duplicated=%llu\n",
                (unsigned long long)(ab.corrupted + ba.corrupted), (unsigned long long)(ab.dropped + ba.dropped),
                (unsigned long long)(ab.duplicated + ba.duplicated));
  }
  TS_RETURN_IF_ERROR(Check(after.runs == loaded.runs + uint32_t(args.runs), "the MCU ran the wrong number of times"));
  TS_RETURN_IF_ERROR(Check(after.refused_frames > loaded.refused_frames, "the tensor of another plan was not refused"));
  // On a noisy line the firmware's selective-repeat receiver must have kept
  // frames past a gap (and the answers above are still exact).
  if (args.faults > 0)
    TS_RETURN_IF_ERROR(Check(after.held_frames > 0, "the MCU kept no frame past a gap on a noisy line"));
  TS_RETURN_IF_ERROR(Check(worst <= args.tolerance, "MCU output differs from the host executor: max rel " +
                                                         std::to_string(worst)));
  // The firmware's own RAM, measured by the firmware after the runs, within
  // the budget the planner reserves on every MCU (mcu_program.h).
  std::printf("firmware_ram: static=%u of %u budgeted, stack_peak=%u of %u budgeted; flash_budget=%u\n",
              after.firmware_ram_bytes, mcu::kFirmwareStaticRamBytes, after.stack_peak_bytes, mcu::kFirmwareStackBytes,
              mcu::kFirmwareFlashBytes);
  TS_RETURN_IF_ERROR(Check(after.firmware_ram_bytes > 0 && after.firmware_ram_bytes <= mcu::kFirmwareStaticRamBytes,
                           "the firmware's static RAM " + std::to_string(after.firmware_ram_bytes) +
                               " B exceeds the planner's budget kFirmwareStaticRamBytes"));
  TS_RETURN_IF_ERROR(Check(after.stack_peak_bytes > 0 && after.stack_peak_bytes <= mcu::kFirmwareStackBytes,
                           "the firmware's stack reached " + std::to_string(after.stack_peak_bytes) +
                               " B, above the planner's budget kFirmwareStackBytes"));
  link.reset();
  relay.reset();
  if (port_fd >= 0) close(port_fd);
  ClosePty(&pty);
  return Status::OK();
}

Status Main(const Args& args) {
  // NAME-int8w: the model with its conv and dense weights on an int8 grid
  // per output channel (partition/graph/int8_weights.h): its program keeps
  // them as int8 codes in flash. NAME-int8: a QDQ model's form besides —
  // a QuantizeDequantize after the input and every layer — whose
  // activations its program keeps as int8 codes in RAM (mcu_program.h
  // version 5).
  auto ends_with = [&](const std::string& suffix) {
    return args.model.size() > suffix.size() &&
           args.model.compare(args.model.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const bool int8w = ends_with("-int8w"), int8 = ends_with("-int8");
  const std::string base = args.model.substr(0, args.model.size() - (int8w ? 6 : int8 ? 5 : 0));
  if (base != "kws" && base != "ops" && base != "dscnn" && base != "mlperf-dscnn")
    return Status::InvalidArgument(
        "--model must be kws, ops, dscnn or mlperf-dscnn, each optionally with -int8w or "
        "-int8 (got '" +
        args.model + "')");
  Graph graph = base == "ops"            ? MakeMcuOpsGraph()
                : base == "dscnn"        ? MakeDsCnnGraph()
                : base == "mlperf-dscnn" ? MakeMlperfDsCnnGraph()
                                         : MakeKeywordSpottingGraph();
  if (int8) graph = WithQdqActivations(graph);
  if (int8w || int8) graph = WithInt8GridWeights(std::move(graph));
  TS_RETURN_IF_ERROR(graph.Validate());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  TensorData input;
  input.shape = graph.values[graph.inputs[0]].shape;
  input.values.resize(NumElements(input.shape));
  for (float& v : input.values) v = u(rng);

  TS_ASSIGN_OR_RETURN(auto executor, Executor::Create(graph, ExecutorOptions{}));
  std::vector<TensorData> want;
  TS_RETURN_IF_ERROR(executor->Run({input}, &want));

  const uint32_t plan_id = PlanIdHash(graph.name + "/seed1");
  McuProgramOptions options;
  options.plan_id = plan_id;
  const uint32_t input_message = 100, output_message = 200;
  options.input_messages[graph.inputs[0]] = input_message;
  options.output_messages[graph.outputs[0]] = output_message;
  TS_ASSIGN_OR_RETURN(McuProgramImage image, BuildMcuProgram(graph, options));
  std::printf(
      "model: %s macs=%lld flash_bytes=%zu (program and weights) ram_bytes=%zu (activations) "
      "in_place_layers=%d int8_weight_layers=%d int8_activation_tensors=%d\n",
      graph.name.c_str(), (long long)image.macs, image.flash_bytes(), image.ram_bytes(), image.in_place_layers,
      image.int8_weight_layers, image.int8_activation_tensors);
  TS_RETURN_IF_ERROR(
      Check(!(int8w || int8) || image.int8_weight_layers > 0, "the -int8w model's program holds no int8 weights"));
  TS_RETURN_IF_ERROR(
      Check(!int8 || image.int8_activation_tensors > 0, "the -int8 model's program holds no int8 activations"));

  TS_ASSIGN_OR_RETURN(std::vector<float> host_mcu, RunOnHostInterpreter(image, input.values));
  double rel = MaxRelError(host_mcu, want[0].values);
  std::printf("host_mcu_kernels_max_rel: %.3g\n", rel);
  TS_RETURN_IF_ERROR(Check(rel <= args.tolerance, "MCU kernels on the host differ from the host executor"));

  if (!args.serial.empty())
    TS_RETURN_IF_ERROR(RunOverSerial(args, image, plan_id, input.values, want[0].values, input_message, output_message));
  return Status::OK();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") args.model = next();
    else if (a == "--serial") args.serial = next();
    else if (a == "--baud") args.baud = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--faults") args.faults = std::stod(next());
    else if (a == "--tolerance") args.tolerance = std::stod(next());
    else if (a == "--runs") args.runs = std::stoi(next());
    else if (a == "--icount-shift")
      args.icount_shift = std::stoi(next());
    else {
      std::fprintf(
          stderr,
          "usage: tessera_mcu_check [--model kws|ops|dscnn|mlperf-dscnn[-int8w|-int8]] [--serial PTY] [--baud N] "
          "[--faults P] "
          "[--tolerance T] [--runs N] [--icount-shift S]\n");
      return 2;
    }
  }
  tessera::Status st = tessera::Main(args);
  if (!st.ok()) {
    std::fprintf(stderr, "tessera_mcu_check: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("result: OK\n");
  return 0;
}
