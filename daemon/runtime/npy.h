// NumPy .npy files (format versions 1.0-3.0): what `tessera run`, `infer` and
// the tests exchange with PyTorch/onnxruntime. Reads little-endian C-order
// float32, float64, int32, int64 and uint8 arrays and converts them to
// float32; writes float32.
#pragma once

#include <string>

#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

// Errors name the file and what is wrong (bad magic, fortran order, dtype).
Result<TensorData> ReadNpy(const std::string& path);
Result<TensorData> ParseNpy(const std::string& bytes, const std::string& origin);
Status WriteNpy(const std::string& path, const TensorData& tensor);
std::string SerializeNpy(const TensorData& tensor);

}  // namespace tessera
