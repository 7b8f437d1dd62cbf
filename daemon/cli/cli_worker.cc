// `tessera worker --listen ADDR [--name NAME] [--data-dir DIR] [--tls-dir DIR]`: the daemon
// on every Linux device (daemon/cluster/worker.h).
#include <CLI/CLI.hpp>

#include "daemon/cli/cli.h"
#include "daemon/cli/cli_model_options.h"
#include "daemon/cli/cli_tls_options.h"
#include "daemon/cluster/worker.h"
#include "daemon/runtime/program_runner.h"

namespace tessera {

void RegisterWorkerCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("worker", "Run the worker daemon of one device (gRPC Worker service)");
  struct Args {
    std::string listen = "127.0.0.1:7070", port_file, step_trace, flush_sends = "auto";
    WorkerOptions options;
    std::vector<std::string> mcus;
    TlsOptions tls;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--listen", a->listen, "gRPC address to listen on (port 0: any free port)")->capture_default_str();
  cmd->add_option("--name", a->options.name, "Name in logs and health replies")->capture_default_str();
  cmd->add_option("--data-dir", a->options.data_dir, "Directory keeping the loaded program (restart resumes)");
  cmd->add_option("--threads", a->options.threads, "Intra-op threads per request")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--max-in-flight", a->options.max_in_flight, "Requests run at once")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--compute-slots", a->options.compute_slots,
                  "Requests that compute at once, each in a working memory of its own (the others keep only their "
                  "pipeline buffers meanwhile); plan with the same --compute-slots")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--flush-sends", a->flush_sends,
                  "Whether a request's messages leave before each of its compute runs: auto (when the compute "
                  "threads take every CPU the worker may use, its affinity capped by its cgroup's CPU quota, so "
                  "the transport would get the CPU only in turns with the compute and a peer would wait), on, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--port-file", a->port_file, "Write the bound address here once listening");
  cmd->add_option("--step-trace", a->step_trace,
                  "Append one JSON line per program step of every request to this file: kind, layer, peer, "
                  "message, bytes, start and end (CLOCK_MONOTONIC us: the workers of one host share it) and CPU "
                  "us; where a request's time goes");
  cmd->add_option("--mcu", a->mcus,
                  "An MCU this worker owns and bridges: NAME=PORT[@BAUD][,listen=HOST:PORT] (its UART, and where "
                  "its Worker service listens: the mcu device's address in the cluster file; repeatable)");
  a->tls.AddTo(*cmd, "the worker's --name", "Allow plaintext gRPC on non-loopback addresses (trusted network only)");
  cmd->callback([a] {
    if (!a->step_trace.empty())
      if (Status st = OpenStepTrace(a->step_trace); !st.ok()) throw CLI::RuntimeError(ReportError("worker", st));
    auto security = a->tls.Resolve(a->options.name);
    if (!security.ok()) throw CLI::RuntimeError(ReportError("worker", security.status()));
    a->options.security = *security;
    a->options.flush_sends = a->flush_sends == "on"    ? WorkerOptions::FlushSends::kOn
                             : a->flush_sends == "off" ? WorkerOptions::FlushSends::kOff
                                                       : WorkerOptions::FlushSends::kAuto;
    std::vector<McuPort> mcus;
    for (const auto& text : a->mcus) {
      auto port = ParseMcuPort(text);
      if (!port.ok()) throw CLI::RuntimeError(ReportError("worker", port.status()));
      mcus.push_back(*port);
    }
    if (Status st = ServeWorker(a->listen, a->options, a->port_file, mcus); !st.ok())
      throw CLI::RuntimeError(ReportError("worker", st));
  });
}

}  // namespace tessera
