// Evaluation of ONNX nodes whose inputs are all constants, so that shape
// arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters
// write it) and weight preprocessing (Transpose/Cast of an initializer)
// disappear at import (graph.h: "Constant and shape arithmetic are gone").
//
// Only the ops such chains use are covered; the rest stay in the graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "partition/import/onnx_tensor.h"
#include "util/status.h"

namespace tessera::onnx_import {

// True when EvaluateConstantNode knows `op_type` (default ONNX domain).
bool IsConstantEvaluable(const std::string& op_type);

// Evaluates `node` (of opset `opset`) on its inputs; inputs[i] is nullptr for
// an omitted optional input. Returns one tensor per node output.
// NotSupported when an attribute or input combination is not handled (the
// caller then leaves the node in the graph); InvalidArgument when the node is
// inconsistent (wrong ranks, out-of-range indices).
Result<std::vector<ConstTensor>> EvaluateConstantNode(const onnx::NodeProto& node,
                                                      const std::vector<const ConstTensor*>& inputs, int64_t opset);

// DequantizeLinear `node` of the int8 or uint8 initializer `x` straight into
// a float32 initializer named `out` (EvaluateConstantNode's arithmetic,
// bit for bit), holding 8 B a value at most instead of three tensors of
// doubles: a QDQ model's large weights at import. NotSupported for other
// element types (the caller evaluates those as usual).
Result<onnx::TensorProto> DequantizeWeight(const onnx::NodeProto& node, const onnx::TensorProto& x,
                                           const ConstTensor& scale, const ConstTensor* zp, const std::string& out);

// ONNX Reshape target resolution: 0 copies the input dim (unless allowzero),
// one -1 is inferred from the element count.
Result<Shape> ResolveReshape(const Shape& input, const std::vector<int64_t>& target, bool allowzero);

// Attribute lookup on a NodeProto (nullptr when absent).
const onnx::AttributeProto* FindAttribute(const onnx::NodeProto& node, const std::string& name);
int64_t AttrInt(const onnx::NodeProto& node, const std::string& name, int64_t def);
float AttrFloat(const onnx::NodeProto& node, const std::string& name, float def);
std::string AttrString(const onnx::NodeProto& node, const std::string& name, const std::string& def);
std::vector<int64_t> AttrInts(const onnx::NodeProto& node, const std::string& name, std::vector<int64_t> def = {});
std::vector<float> AttrFloats(const onnx::NodeProto& node, const std::string& name, std::vector<float> def = {});

}  // namespace tessera::onnx_import
