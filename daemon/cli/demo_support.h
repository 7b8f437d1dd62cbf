// What `tessera demo` and `tessera demo --mcu` share: the child processes
// (workers, QEMU MCUs) that always stop with the demo, its temporary
// directory, a gateway in this process reached through its gRPC API, and the
// tally of answers against the single-device run.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/cluster/gateway.h"
#include "partition/graph/graph.h"
#include "proto/services.grpc.pb.h"
#include "util/status.h"

namespace tessera::demo {

inline constexpr int kMaxChildren = 64;  // worker and QEMU processes of one demo

// Stops and reaps every child process of the demo when it leaves, however it
// leaves (also on SIGINT/SIGTERM: InstallSignalHandlers).
struct ChildProcesses {
  ~ChildProcesses();
};
// SIGINT/SIGTERM kill the children (SIGKILL) and exit 128 + signal.
void InstallSignalHandlers();
// Starts a child process that dies with the demo (PR_SET_PDEATHSIG):
// `program` is a path ("/proc/self/exe") or a name looked up on PATH; stdout
// and stderr go to `log_path` when given. Returns its slot.
Result<int> SpawnChild(const std::string& program, std::vector<std::string> args, const std::string& log_path);
// Sends `sig` to the child in `slot` (the demo's --unplug).
void KillChild(int slot, int sig);
// Starts n worker processes w1..wn on loopback ports; returns their
// addresses, and their slots in *slots when given.
Result<std::vector<std::string>> StartWorkers(int n, const std::string& dir, int threads,
                                              const std::vector<std::vector<std::string>>& extra_args = {},
                                              std::vector<int>* slots = nullptr);

// The demo's temporary directory (worker data, port files, QEMU logs);
// removed when the demo leaves unless --keep.
class DemoDirectory {
 public:
  static Result<std::unique_ptr<DemoDirectory>> Create(const std::string& prefix, bool keep) {
    std::string path = "/tmp/" + prefix + "-XXXXXX";
    if (!mkdtemp(path.data())) return Status::FromErrno(errno, "mkdtemp " + path);
    return std::unique_ptr<DemoDirectory>(new DemoDirectory(path, keep));
  }
  ~DemoDirectory() {
    std::error_code ec;
    if (!keep_) std::filesystem::remove_all(path_, ec);
  }
  DemoDirectory(const DemoDirectory&) = delete;
  DemoDirectory& operator=(const DemoDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  DemoDirectory(std::string path, bool keep) : path_(std::move(path)), keep_(keep) {}
  const std::string path_;
  const bool keep_;
};


// A gateway in this process, served on a loopback port and reached through
// its own gRPC API like any client would.
struct LocalGateway {
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<GatewayService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<proto::Gateway::Stub> stub;
  ~LocalGateway() {
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
};

Result<std::unique_ptr<LocalGateway>> StartLocalGateway(GatewayOptions options);
// One Gateway.Infer call; *ms gets its wall time.
Status InferThroughGateway(proto::Gateway::Stub& stub, const std::vector<TensorData>& inputs, uint64_t request_id,
                           int64_t timeout_ms, std::vector<TensorData>* outputs, double* ms);
// A worker's Status (in-flight counts, current and peak RSS); nullopt if it
// does not answer.
std::optional<proto::WorkerStatusReply> WorkerStatus(const std::string& address);

// (max |a−b|, max |a−b| / max |b|) over every output; infinity on a shape mismatch.
std::pair<double, double> Differences(const std::vector<TensorData>& got, const std::vector<TensorData>& want);
double Median(std::vector<double> v);

// What the demo's requests came back with, compared with the single-device
// run (a match is max|a-b|/max|b| <= 1e-5, issue 5).
struct RequestTally {
  std::vector<double> latencies_ms;
  double max_rel = 0;
  int answered = 0, matched = 0;
  std::string first_error;
  // Per model output: the step of its int8 grid when a QuantizeDequantize
  // makes it (a QDQ model), else 0 (QuantizedOutputSteps). With them the
  // largest difference is also counted in steps of that grid.
  std::vector<double> output_steps;
  double max_steps = 0;

  void Record(const Status& st, const std::vector<TensorData>& outputs, const std::vector<TensorData>& reference,
              double ms) {
    if (!st.ok()) {
      if (first_error.empty()) first_error = st.ToString();
      return;
    }
    ++answered;
    latencies_ms.push_back(ms);
    const double rel = Differences(outputs, reference).second;
    max_rel = std::max(max_rel, rel);
    // A QDQ model's outputs lie on their int8 grid: there a device that sums
    // in another float order (an MCU, another kernel) may round a value
    // that sits at a tie between two steps the other way. One step is the
    // tolerance for such outputs (as against onnxruntime's int8 kernels,
    // issue 16 item 1); every other output must be within 1e-5 relative.
    bool quantized = !output_steps.empty() && output_steps.size() == outputs.size();
    double steps = 0;
    for (size_t k = 0; k < outputs.size() && k < reference.size() && k < output_steps.size(); ++k) {
      if (output_steps[k] <= 0) {
        quantized = false;
        continue;
      }
      for (size_t i = 0; i < outputs[k].values.size() && i < reference[k].values.size(); ++i)
        steps = std::max(steps, std::abs(double(outputs[k].values[i]) - reference[k].values[i]) / output_steps[k]);
    }
    max_steps = std::max(max_steps, steps);
    if (rel <= 1e-5 || (quantized && steps <= 1.0 + 1e-6)) ++matched;
  }
  bool AllMatch(int requests) const { return answered == requests && matched == requests; }
};

// Per graph output: the scale of the QuantizeDequantize node that makes it, or 0.
std::vector<double> QuantizedOutputSteps(const Graph& graph);

// The single-device oracle: `kinds` distinct seeded inputs and the whole
// model's outputs for them (Executor in this process), timed.
struct Reference {
  std::vector<std::vector<TensorData>> inputs, outputs;
  std::vector<double> ms;  // one per run; the first input runs `first_repeats` times
};
Result<Reference> RunReference(const Graph& graph, int threads, int kinds, int first_repeats);

// The MCU firmware ELF: $TESSERA_MCU_FIRMWARE, else <dir of this binary>/firmware/.
std::string FindMcuFirmware();
bool QemuInstalled();
// Boots one QEMU mps2-an386 running `firmware`; returns the pty of its UART0.
// `more_serials`: QEMU -serial specs of UART1, UART2, ... (a direct
// MCU<->MCU link: "unix:PATH,server=on,wait=off" on one board, "unix:PATH"
// on the other; "null" for a UART joined to nothing).
// The process stops with the other children.
Result<std::string> BootQemuMcu(const std::string& firmware, const std::string& log_path,
                                const std::vector<std::string>& more_serials = {});

}  // namespace tessera::demo
