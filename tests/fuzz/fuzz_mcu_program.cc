// libFuzzer target: the MCU program (transport/wire/mcu_program.h) as the
// firmware receives it over the UART: ValidateProgram, then, when it is
// accepted, the firmware's own interpreter (firmware/mcu_kernels.h) runs it
// over an activation region of exactly the size the program declares. ASan
// sees every read or write outside the program bytes or that region: a
// validated program must never leave them (issue 16; a corrupted program
// with dilation 0 once divided by zero in the conv kernel).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "firmware/mcu_kernels.h"
#include "transport/wire/mcu_program.h"

namespace {

// The RAM arena of the smallest MCU preset the demo uses (STM32F401RB: 64 KiB).
constexpr uint64_t kArenaBytes = 64 * 1024;
// Work a program may ask for before the run is skipped (spatial fields go up
// to 2^14 each: a valid conv can take hours, which is not what this checks).
constexpr double kMaxWork = 2e7;

double Work(const tessera::mcu::Layer& l) {
  const double out = double(l.oc) * l.oh * l.ow, in = double(l.c) * l.h * l.w;
  switch (l.op) {
    case tessera::mcu::kOpConv:
      return out * (double(l.c) / (l.group ? l.group : 1)) * l.kh * l.kw;
    case tessera::mcu::kOpDense:
      return out * in;
    case tessera::mcu::kOpMaxPool:
    case tessera::mcu::kOpAvgPool:
      return out * l.kh * l.kw;
    default:
      return out + in;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::mcu;
  if (size < sizeof(ProgramHeader) || size > (1u << 20)) return 0;
  // The firmware keeps the program 8-byte aligned in its flash region.
  std::vector<uint64_t> words((size + 7) / 8);
  std::memcpy(words.data(), data, size);
  ProgramView view;
  if (ValidateProgram(words.data(), static_cast<uint32_t>(size), kArenaBytes, &view) != kErrNone) return 0;
  double work = 0;
  for (uint32_t i = 0; i < view.header->num_layers; ++i) work += Work(view.layers[i]);
  if (work > kMaxWork) return 0;
  // Exactly the declared region (ASan: one float past it is caught), NaN-free
  // input so the kernels see ordinary values.
  std::vector<float> act(view.header->activation_words);
  for (size_t i = 0; i < act.size(); ++i) act[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
  RunProgram(view, act.data());
  return 0;
}
