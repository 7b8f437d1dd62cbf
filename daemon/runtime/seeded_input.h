// Reproducible inputs for runs without --input: the same seed and shape give
// the same values on every machine (splitmix64, no std:: distributions, whose
// output differs between standard libraries).
#pragma once

#include <cstdint>

#include "partition/graph/graph.h"

namespace tessera {

// Values uniform in [-1, 1).
TensorData SeededInput(const Shape& shape, uint64_t seed);

}  // namespace tessera
