// libFuzzer target: device program decoding (partition/compile/
// program_codec.h): the same bytes as a DeviceProgram and as a Graph. A
// program that parses must serialise and parse again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "partition/compile/program_codec.h"
#include "tests/fuzz/quiet_protobuf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::string plan_id;
  auto program = tessera::ParseProgram(bytes, "fuzz.program", &plan_id);
  if (program.ok()) {
    std::string again_id;
    auto again = tessera::ParseProgram(tessera::SerializeProgram(*program, plan_id), "fuzz (written back)", &again_id);
    if (!again.ok() || again_id != plan_id) {
      std::fprintf(stderr, "ParseProgram(SerializeProgram(p)) failed: %s\n", again.status().ToString().c_str());
      std::abort();
    }
  }
  (void)tessera::ParseGraph(bytes, "fuzz.graph");
  return 0;
}
