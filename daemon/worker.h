// The worker daemon (`tessera worker`, ARCHITECTURE.md "Processes"): the gRPC
// Worker service of one device. It holds one DeviceProgram (kept on disk in
// its data dir, so a restart resumes without a redeploy), exchanges tiles and
// partial sums directly with its peers over long-lived Exchange streams
// (transport/grpc/grpc_link.h), and runs several requests at once — one
// ProgramRunner per in-flight request, from a pool.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "daemon/executor.h"
#include "daemon/program_runner.h"
#include "daemon/worker_tensor.h"
#include "partition/device_program.h"
#include "proto/services.grpc.pb.h"
#include "transport/grpc/grpc_channel.h"
#include "transport/grpc/grpc_link.h"

namespace tessera {

struct WorkerOptions {
  std::string name = "worker";
  std::string data_dir;          // "" = keep nothing on disk
  int threads = 1;               // intra-op threads per request
  int max_in_flight = 32;        // runners; more concurrent requests -> RESOURCE_EXHAUSTED
  TransportSecurity security;
};

class WorkerService final : public proto::Worker::Service {
 public:
  explicit WorkerService(WorkerOptions options);
  ~WorkerService() override;

  // Loads the program kept in data_dir, if any (restart without redeploy).
  tessera::Status ResumeFromDisk();

  grpc::Status LoadProgram(grpc::ServerContext* context, grpc::ServerReader<proto::ProgramChunk>* reader,
                           proto::LoadProgramReply* reply) override;
  grpc::Status Health(grpc::ServerContext* context, const proto::HealthRequest* request,
                      proto::HealthReply* reply) override;
  grpc::Status Status(grpc::ServerContext* context, const proto::StatusRequest* request,
                      proto::WorkerStatusReply* reply) override;
  grpc::Status Run(grpc::ServerContext* context, const proto::RunRequest* request, proto::RunReply* reply) override;
  grpc::Status Exchange(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<proto::ExchangeAck, proto::TensorFrame>* stream) override;

 private:
  struct Loaded;
  // Installs a parsed program (from a LoadProgram or the data dir).
  tessera::Status Install(const std::string& program_bytes, const proto::ProgramChunk& header, bool persist,
                          proto::LoadProgramReply* reply);
  std::shared_ptr<Loaded> current() const;
  tessera::Status RunRequest(Loaded& loaded, const proto::RunRequest& request, proto::RunReply* reply);

  const WorkerOptions options_;
  mutable std::mutex mu_;
  std::shared_ptr<Loaded> loaded_;  // GUARDED_BY(mu_)
  std::atomic<int64_t> requests_ok_{0}, requests_failed_{0};
  std::atomic<int> in_flight_{0};
};

// Runs a worker until SIGINT/SIGTERM. `listen` may end in ":0" (any free
// port); the chosen address is written to `port_file` when given.
Status ServeWorker(const std::string& listen, const WorkerOptions& options, const std::string& port_file);

}  // namespace tessera
