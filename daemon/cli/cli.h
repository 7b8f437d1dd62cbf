// The `tessera` verbs. Each lives in daemon/cli_<verb>.cc and registers a
// CLI11 sub-command; main.cc calls every Register* below.
#pragma once

namespace CLI {
class App;
}

namespace tessera {

void RegisterInspectCommand(CLI::App& app);  // cli_inspect.cc
void RegisterRunCommand(CLI::App& app);      // cli_run.cc
void RegisterPlanCommand(CLI::App& app);     // cli_plan.cc
void RegisterDemoCommand(CLI::App& app);     // cli_demo.cc
void RegisterWorkerCommand(CLI::App& app);   // cli_worker.cc
void RegisterGatewayCommand(CLI::App& app);  // cli_gateway.cc
void RegisterDeployCommand(CLI::App& app);   // cli_deploy.cc
void RegisterInferCommand(CLI::App& app);    // cli_infer.cc
void RegisterCertsCommand(CLI::App& app);    // cli_certs.cc
void RegisterCalibrateCommand(CLI::App& app);       // cli_calibrate.cc
void RegisterOptimizeMemoryCommand(CLI::App& app);  // cli_optimize_memory.cc
void RegisterQuantizeCommand(CLI::App& app);        // cli_quantize.cc

}  // namespace tessera
