// libFuzzer target: cluster YAML (planner/cluster.h, ParseCluster), with the
// repository's preset directory so `preset:` lookups are exercised too.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> presets = {TESSERA_SOURCE_DIR "/configs/devices"};
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto cluster = tessera::ParseCluster(text, "fuzz.yaml", presets);
  if (cluster.ok() && cluster->size() > 1) {
    (void)cluster->TransferSeconds(0, cluster->size() - 1, 1000);
    (void)cluster->Homogeneous();
  }
  return 0;
}
