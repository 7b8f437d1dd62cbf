// libFuzzer target: ONNX model import from bytes (partition/import,
// ImportOnnxBytes). Any input must end as a Graph or a refusal, never a
// crash, a sanitizer report or an allocation beyond the stated limits.
#include <cstddef>
#include <cstdint>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "partition/import/model_import.h"

// protobuf logs every invalid UTF-8 string field it meets; the refusal
// through Status is what counts, and the log would drown the fuzzer's.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tessera::ImportOptions options;
  auto graph = tessera::ImportOnnxBytes(bytes, "fuzz.onnx", options);
  if (graph.ok()) (void)graph->Validate();
  return 0;
}
