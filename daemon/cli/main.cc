// The `tessera` binary: one executable, a handful of verbs (STYLE.md,
// "distributed-llama, exo").
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <thread>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/cli/cli.h"
#include "daemon/cli/version.h"  // generated: TESSERA_VERSION_LINE

namespace {
// glibc raises its mmap threshold each time a large block is freed, after
// which tensors and weight blocks come from heap arenas that never shrink:
// a daemon's RSS then stays at its high-water mark for good (issue 11:
// measured +10-25 MiB per yolov2-tiny worker after a few requests). A fixed
// threshold keeps every block >= 256 KiB in its own mapping, returned to the
// OS when freed; fewer arenas bound the per-thread fragmentation of gRPC.
void BoundMallocRetention() {
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_ARENA_MAX, static_cast<int>(std::max(2u, std::thread::hardware_concurrency())));
}
}  // namespace

int main(int argc, char** argv) {
  BoundMallocRetention();
  CLI::App app{"tessera: run one CNN across a cluster of small devices"};
  app.require_subcommand(1);
  app.set_version_flag("--version", TESSERA_VERSION_LINE);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")->capture_default_str();
  app.parse_complete_callback([&] {
    auto logger = spdlog::stderr_color_mt("tessera");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::from_str(log_level));
  });

  tessera::RegisterInspectCommand(app);
  tessera::RegisterRunCommand(app);
  tessera::RegisterPlanCommand(app);
  tessera::RegisterDemoCommand(app);
  tessera::RegisterWorkerCommand(app);
  tessera::RegisterGatewayCommand(app);
  tessera::RegisterDeployCommand(app);
  tessera::RegisterInferCommand(app);
  tessera::RegisterCertsCommand(app);
  tessera::RegisterCalibrateCommand(app);
  tessera::RegisterOptimizeMemoryCommand(app);
  tessera::RegisterQuantizeCommand(app);

  // A verb that fails throws CLI::RuntimeError(exit_code) after printing its
  // one-line error; app.exit() returns that code without printing more.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
