// Constant tensors of an ONNX model as the importer sees them: initializers,
// Constant nodes and the results of folding shape arithmetic (onnx_import.cc).
//
// A ConstTensor keeps its ONNX element type (so Cast/Shape/Gather chains keep
// int64 semantics) and its values as doubles, which is exact for every int64
// a shape can hold (< 2^53) and for every float32. Large float weights never
// go through ConstTensor: they are read straight into float32 (ReadFloats).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera::onnx_import {

struct ConstTensor {
  int32_t elem_type = onnx::TensorProto::FLOAT;  // onnx::TensorProto::DataType
  Shape dims;
  std::vector<double> data;  // row-major, NumElements(dims) values

  bool IsFloat() const;  // FLOAT, DOUBLE, FLOAT16, BFLOAT16
  // Values as int64 (truncating floats), e.g. for a Reshape target.
  std::vector<int64_t> Ints() const;
};

// Bytes per element of `elem_type` in raw_data; 0 for types not read.
size_t RawElementSize(int32_t elem_type);

// Name of an ONNX element type ("float", "int64", ...), for messages.
std::string ElemTypeName(int32_t elem_type);

// Element count of `t` from its dims; InvalidArgument for negative dims or an
// overflowing product (a malformed file must not make us allocate petabytes).
Result<int64_t> TensorElementCount(const onnx::TensorProto& t);

// Reads any numeric tensor into doubles. External data and string tensors
// are NotSupported; a size that does not match the dims is DataLoss.
Result<ConstTensor> ReadConstTensor(const onnx::TensorProto& t);
// Reads a numeric tensor as float32 (float64/float16/ints convert).
Result<std::vector<float>> ReadFloats(const onnx::TensorProto& t);

// Writes `c` as a TensorProto named `name` (typed fields, not raw_data).
onnx::TensorProto WriteTensorProto(const std::string& name, const ConstTensor& c);

}  // namespace tessera::onnx_import
