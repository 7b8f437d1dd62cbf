// libFuzzer target: device program decoding (partition/compile/
// program_codec.h): the same bytes as a DeviceProgram and as a Graph. A
// program that parses must serialise and parse again, and the worker's
// streamed decode of the same bytes from a file (weights left in it) must
// accept exactly what the in-memory decode accepts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

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
  static const std::string path = "/tmp/tessera-fuzz-program-" + std::to_string(::getpid()) + ".pb";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    std::string streamed_id;
    auto streamed = tessera::ParseProgramFile(path, "fuzz.program", &streamed_id, true, /*stream_constants=*/true);
    // As a worker decodes in memory (constants shared by reference).
    std::string shared_id;
    auto shared = tessera::ParseProgram(std::string(bytes), "fuzz.program", &shared_id, /*share_constants=*/true);
    if (streamed.ok() != shared.ok() || (streamed.ok() && streamed_id != shared_id)) {
      std::fprintf(stderr, "the streamed decode %s what the in-memory one %s: %s / %s\n",
                   streamed.ok() ? "accepts" : "refuses", shared.ok() ? "accepts" : "refuses",
                   streamed.status().ToString().c_str(), shared.status().ToString().c_str());
      std::abort();
    }
    std::remove(path.c_str());
  }
  (void)tessera::ParseGraph(bytes, "fuzz.graph");
  return 0;
}
