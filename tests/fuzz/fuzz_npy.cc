// libFuzzer target: .npy bytes (daemon/runtime/npy.h, ParseNpy). A parsed
// tensor must hold exactly as many values as its shape says, and write back
// to an .npy that parses to the same tensor.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "daemon/runtime/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto tensor = tessera::ParseNpy(bytes, "fuzz.npy");
  if (!tensor.ok()) return 0;
  if (static_cast<int64_t>(tensor->values.size()) != tessera::NumElements(tensor->shape)) {
    std::fprintf(stderr, "ParseNpy: %zu values for %lld elements\n", tensor->values.size(),
                 static_cast<long long>(tessera::NumElements(tensor->shape)));
    std::abort();
  }
  auto again = tessera::ParseNpy(tessera::SerializeNpy(*tensor), "fuzz.npy (written back)");
  if (!again.ok() || again->shape != tensor->shape) {
    std::fprintf(stderr, "ParseNpy(SerializeNpy(t)) differs: %s\n", again.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
