// libFuzzer target: ONNX model import from bytes (partition/import,
// ImportOnnxBytes). Any input must end as a Graph or a refusal, never a
// crash, a sanitizer report or an allocation beyond the stated limits.
#include <cstddef>
#include <cstdint>
#include <string>

#include "partition/import/model_import.h"
#include "tests/fuzz/quiet_protobuf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tessera::ImportOptions options;
  auto graph = tessera::ImportOnnxBytes(bytes, "fuzz.onnx", options);
  if (graph.ok()) (void)graph->Validate();
  return 0;
}
