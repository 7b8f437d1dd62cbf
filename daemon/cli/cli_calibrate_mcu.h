// `tessera calibrate MODEL --mcu PORT`: cycles per MAC per op kind measured
// on a microcontroller worker (cli_calibrate_mcu.cc).
#pragma once

#include <cstdint>
#include <string>

#include "daemon/cli/cli_model_options.h"

namespace tessera {

struct McuCalibrateOptions {
  std::string port;  // the MCU's UART (a QEMU `-serial pty` slave, /dev/ttyUSB0)
  uint32_t baud = 115200;
  double cpu_hz = 0;       // the MCU's clock for the device file (0: the firmware's tick clock)
  int icount_shift = -1;   // QEMU -icount shift: ticks are then instructions (-1: a real board)
  std::string ram, flash;  // copied into the device file when given (e.g. 64KiB)
  std::string out, name;
  bool json = false;
};

// Runs `model` on the MCU, checks its answer against the host executor and
// prints (and with `out` writes) the cycles per MAC per op kind. Returns the
// process exit code.
int RunCalibrateMcu(const McuCalibrateOptions& options, const ModelOptions& model);

}  // namespace tessera
