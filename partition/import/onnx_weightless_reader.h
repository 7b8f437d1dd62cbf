// Reads an ONNX model without the values of its large float initializers
// (ImportOptions::shapes_only, issue 11 item 3: "no weights where none are
// needed").
//
// The file is read as a protobuf wire stream, field by field, and re-encoded
// without the payload (raw_data, float_data, double_data, or float16 in
// int32_data) of every initializer whose element type is a float type and
// whose payload is larger than kKeptPayloadBytes: that payload is skipped in
// the input stream (a file is seeked past, never read), so neither the file
// nor any one weight is ever held whole. What stays is small: the graph, and
// every integer tensor and small float tensor (shape targets, Slice indices,
// Clip bounds, Resize scales, BN statistics...) with its values, so constant
// folding and shape inference work as with the whole model.
//
// A dropped payload is replaced by a one-byte placeholder raw_data (the
// tensor keeps its name, dims and element type, and the ONNX checker still
// sees one value field; nothing reads the byte) and reported in `dropped` with its size, so that the importer can
// check it against the dims as it would the values.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>

#include "onnx/onnx_pb.h"
#include "util/status.h"

namespace google::protobuf::io {
class ZeroCopyInputStream;
}

namespace tessera::onnx_import {

// Float payloads up to this size keep their values (16 Ki float32 values:
// every bias and BN statistic of the torchvision CNNs, no conv kernel of them).
constexpr int64_t kKeptPayloadBytes = 64 * 1024;

// A payload left out of an initializer.
struct DroppedPayload {
  int64_t bytes = 0;         // its size in the file
  int64_t element_size = 0;  // bytes per element in the field it was stored in
};

// Parses a ModelProto from `in` into `model` without large float payloads.
// `dropped`: initializer name -> what was left out. `keep` (optional): the
// initializers whose payloads are read whatever their size (a payload that
// comes before its tensor's name is kept too: exporters write the name
// first). Errors: DataLoss for a stream that is not a well-formed protobuf
// (truncated, corrupted, or not an ONNX file), naming `origin`.
Status ParseModelWithoutLargeWeights(google::protobuf::io::ZeroCopyInputStream* in, const std::string& origin,
                                     onnx::ModelProto* model, std::unordered_map<std::string, DroppedPayload>* dropped,
                                     const std::set<std::string>* keep = nullptr);

}  // namespace tessera::onnx_import
