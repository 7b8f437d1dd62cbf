#include "daemon/runtime/seeded_input.h"

namespace tessera {

TensorData SeededInput(const Shape& shape, uint64_t seed) {
  TensorData t;
  t.shape = shape;
  t.values.resize(static_cast<size_t>(NumElements(shape)));
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  for (float& v : t.values) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    v = static_cast<float>(static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
  }
  return t;
}

}  // namespace tessera
