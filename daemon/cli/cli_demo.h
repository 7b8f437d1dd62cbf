// `tessera demo` (cli_demo.cc) and `tessera demo --mcu 2` (cli_demo_mixed.cc).
#pragma once

#include <string>
#include <vector>

namespace tessera {

inline constexpr const char* kDefaultDemoModel = "/usr/share/darknet/cfg/yolov2-tiny.cfg";

struct DemoOptions {
  std::string model = kDefaultDemoModel;
  std::vector<std::string> input_shapes;
  std::vector<std::string> with_models;  // --with-model: merged with `model` (merge_models.h)
  int devices = 4;
  int threads = 1;
  int requests = 8;
  int clients = 1;
  std::string objective = "memory";
  std::string force;  // a forced scheme instead of the planner
  bool json = false;
  bool keep = false;
  int mcu = 0;             // > 0: the mixed Linux + MCU cluster under QEMU (issue 6), this many MCUs
  std::string mcu_preset;  // every MCU's preset ("" = STM32H743ZI and STM32F446RE in turn)
  bool mcu_chain = false;  // join the MCUs UART-to-UART in a chain (direct MCU<->MCU links)
  bool mcu_only = false;   // every layer on the MCUs; the Linux source only feeds and takes the answer
  bool unplug = false;  // SIGKILL the last worker half-way; the gateway fails over
  // ram: of every worker ("" = unlimited): the planner fits the plan into it
  // (compact weights, layers as tiles in turn, less work; plan_fit.h).
  std::string ram;
};

// Exit codes: 0 every answer matched, 2 some did not, 77 QEMU or the
// firmware missing (--mcu), 1 an error (printed).
int RunDemo(const DemoOptions& d);
int RunMixedDemo(const DemoOptions& d);

}  // namespace tessera
