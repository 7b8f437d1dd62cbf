// libFuzzer target: darknet .cfg text (partition/import, ImportDarknetText).
// Shapes only: the weights a cfg declares are not generated, so the fuzzer
// spends its time in the cfg reader and the layer arithmetic (the size
// limits are checked before any weight would be allocated either way).
#include <cstddef>
#include <cstdint>
#include <string>

#include "partition/import/model_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tessera::ImportOptions options;
  options.shapes_only = true;
  auto graph = tessera::ImportDarknetText(text, "fuzz.cfg", options);
  if (graph.ok()) (void)graph->Validate();
  return 0;
}
