// Tensors on the wire (proto/services.proto TensorMsg): (dtype, shape, bytes).
#pragma once

#include <string>

#include "partition/graph/graph.h"
#include "util/status.h"
#include "proto/services.pb.h"

namespace tessera {

proto::TensorMsg ToTensorMsg(const TensorData& tensor);
// InvalidArgument naming `what` for a dtype other than float32, a bad
// dimension, or data whose size does not match the shape (worker.cc).
Result<TensorData> FromTensorMsg(const proto::TensorMsg& msg, const std::string& what);

}  // namespace tessera
