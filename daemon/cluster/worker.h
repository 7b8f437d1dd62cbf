// The worker daemon (`tessera worker`, ARCHITECTURE.md "Processes"): the gRPC
// Worker service of one device. It holds one DeviceProgram (kept on disk in
// its data dir, so a restart resumes without a redeploy) — two for a moment
// while a gateway swaps plans (ProgramChunk.keep_plan_id: the old plan keeps
// answering until Worker.Retire) — exchanges tiles and
// partial sums directly with its peers over long-lived Exchange streams
// (transport/grpc/grpc_link.h), and runs several requests at once — one
// ProgramRunner per in-flight request, from a pool.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/runtime/executor.h"
#include "daemon/runtime/program_runner.h"
#include "daemon/cluster/worker_tensor.h"
#include "partition/compile/device_program.h"
#include "proto/services.grpc.pb.h"
#include "transport/grpc/grpc_channel.h"
#include "transport/grpc/grpc_link.h"

namespace tessera {
class McuBridge;  // daemon/cluster/worker_mcu_bridge.h
}

namespace tessera {

// An MCU this worker owns (`via:` it in the cluster file): its device name
// and UART.
struct McuPort {
  std::string name, serial;
  uint32_t baud = 115200;
  // Where this worker serves the MCU's Worker service; "" = a free port on
  // the worker's host (reported in the port file). The cluster file gives
  // the same address to the mcu device so gateways and peers reach it.
  std::string listen;
};
// Parses "NAME=PORT[@BAUD][,listen=HOST:PORT]" (`tessera worker --mcu`).
Result<McuPort> ParseMcuPort(const std::string& text);

struct WorkerOptions {
  std::string name = "worker";
  std::string data_dir;          // "" = keep nothing on disk
  int threads = 1;               // intra-op threads per request
  int max_in_flight = 32;        // runners; more concurrent requests -> RESOURCE_EXHAUSTED
  // Working memories the requests in flight take turns in (RunnerOptions::
  // compute_slots; issue 18 item 2): each request keeps only its pipeline
  // buffers while it waits for a peer.
  int compute_slots = 1;
  // Whether a request's messages leave before each of its compute runs
  // (RunnerOptions::flush_sends). kAuto: when the compute threads take every
  // CPU the worker may use (util/cpu_share.h: its affinity, capped by its
  // cgroup's CPU quota), so the transport has no CPU of its own: a one-core
  // board, --threads = the cores, a CPU quota (bench/cluster-emulated).
  enum class FlushSends { kAuto, kOn, kOff } flush_sends = FlushSends::kAuto;
  TransportSecurity security;
  // Non-empty serial: this service is the bridge of that MCU (its programs
  // run on the MCU, its tensors are relayed over the UART; issue 6).
  McuPort mcu;
};

class WorkerService final : public proto::Worker::Service {
 public:
  explicit WorkerService(WorkerOptions options);
  ~WorkerService() override;

  // Opens the MCU's UART when options.mcu names one (else OK).
  Status OpenMcu();

  // Loads the program kept in data_dir, if any (restart without redeploy).
  Status ResumeFromDisk();

  // One line for humans (systemd STATUS=): "serving plan P as device D"
  // or "no program". Thread-safe.
  std::string Describe() const;

  grpc::Status LoadProgram(grpc::ServerContext* context, grpc::ServerReader<proto::ProgramChunk>* reader,
                           proto::LoadProgramReply* reply) override;
  grpc::Status Health(grpc::ServerContext* context, const proto::HealthRequest* request,
                      proto::HealthReply* reply) override;
  grpc::Status GetStatus(grpc::ServerContext* context, const proto::StatusRequest* request,
                      proto::WorkerStatusReply* reply) override;
  grpc::Status Run(grpc::ServerContext* context, const proto::RunRequest* request, proto::RunReply* reply) override;
  grpc::Status Exchange(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<proto::ExchangeAck, proto::TensorFrame>* stream) override;
  grpc::Status Retire(grpc::ServerContext* context, const proto::RetireRequest* request,
                      proto::RetireReply* reply) override;

 private:
  struct Loaded;
  // Lets go of every program but keep_plan_id's (ProgramChunk.release_current),
  // before the program of next_plan_id is decoded.
  void Release(const std::string& keep_plan_id, const std::string& next_plan_id);
  // Installs a parsed program (from a LoadProgram or the data dir) whose
  // encoded bytes have SHA-256 `program_sha256`. A program is identified by
  // that hash: under the plan id of the loaded program, only the same
  // program (and the same devices) is accepted — as a no-op — and anything
  // else is refused with AlreadyExists before the data dir is touched.
  // `program_file`: the encoded program is this file (program_chunks is
  // empty), decoded from there with its weights left in it until they
  // prepare (issue 11 item 2): the data dir's program.pb on a resume, the
  // scratch file of a worker without --data-dir.
  Status Install(std::vector<std::string> program_chunks, const proto::ProgramChunk& header,
                 const std::string& program_sha256, bool persist, proto::LoadProgramReply* reply,
                 const std::string& program_file = "");
  // The checks of issue 14 "Bounded by construction" with TLS: OK when the
  // caller (names from its certificate) may Run this request of `loaded`;
  // PermissionDenied naming who may otherwise.
  Status CheckRunCaller(const Loaded& loaded, const std::vector<std::string>& caller, bool fan_out) const;
  std::shared_ptr<Loaded> current() const;
  // The program of `plan_id`: the current one or the one kept beside it;
  // null when neither is.
  std::shared_ptr<Loaded> Find(const std::string& plan_id) const;
  // Makes `next` the current program. The program of `keep_plan_id` (the
  // current or the kept one, another plan than next's) stays loaded beside
  // it; any other is released (its requests still waiting are woken).
  void Adopt(std::shared_ptr<Loaded> next, const std::string& keep_plan_id);
  // Takes every held program but keep_plan_id's (none when empty) and
  // `except` out of loaded_/kept_. REQUIRES: mu_ held.
  std::vector<std::shared_ptr<Loaded>> TakeAllBut(const std::string& keep_plan_id, const Loaded* except);
  // Wakes the requests still running released programs (their inboxes close).
  static void Retire(const std::vector<std::shared_ptr<Loaded>>& programs);
  Status RunRequest(Loaded& loaded, const proto::RunRequest& request, proto::RunReply* reply);
  // Bridge mode: one request relayed between the peers and the MCU.
  Status RelayToMcu(Loaded& loaded, const proto::RunRequest& request,
                             std::chrono::steady_clock::time_point deadline, proto::RunReply* reply);

  const WorkerOptions options_;
  bool flush_sends_ = false;  // options_.flush_sends, resolved (kAuto: from the CPU share)
  std::string cpu_share_;     // ReadCpuShare().Describe() when the worker started (not for a bridge)
  // Without --data-dir, where a program arrives (a private directory under
  // the temporary directory, removed with the service): it is decoded from
  // the file like a data dir's, never held whole in memory. Empty when it
  // could not be made (then programs arrive in memory).
  std::string scratch_dir_;
  std::unique_ptr<McuBridge> bridge_;  // set by OpenMcu; then every program runs on the MCU
  std::mutex install_mu_;  // one Install at a time (the plan-id check and the swap are one step)
  mutable std::mutex mu_;
  std::shared_ptr<Loaded> loaded_;  // GUARDED_BY(mu_)
  // The plan a gateway still serves while it deploys loaded_'s (rejoin,
  // issue 14); never on disk, released by Retire or the next Adopt.
  std::shared_ptr<Loaded> kept_;  // GUARDED_BY(mu_)
  std::atomic<int64_t> requests_ok_{0}, requests_failed_{0};
  std::atomic<int64_t> requests_refused_{0}, loads_refused_{0};
  // Exchange frames for a plan this worker does not hold (no program to count them in).
  std::atomic<int64_t> foreign_plan_frames_{0}, foreign_plan_bytes_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int> peak_in_flight_{0};  // pipelined plans: several inferences at once
};

// Runs a worker until SIGINT/SIGTERM. `listen` may end in ":0" (any free
// port); the chosen address is written to `port_file` when given. Each of
// `mcus` gets its own Worker service (an McuBridge) on another port of the
// same host, written to `port_file` as further lines "NAME=ADDRESS".
Status ServeWorker(const std::string& listen, const WorkerOptions& options, const std::string& port_file,
                   const std::vector<McuPort>& mcus = {});

}  // namespace tessera
