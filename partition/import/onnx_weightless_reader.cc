#include "partition/import/onnx_weightless_reader.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

namespace tessera::onnx_import {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;
using Wire = google::protobuf::internal::WireFormatLite;
using onnx::TensorProto;

// Field numbers of onnx.proto the reader looks into; every other field is
// copied through unchanged.
constexpr int kModelGraph = 7;         // ModelProto.graph
constexpr int kGraphInitializer = 5;   // GraphProto.initializer
constexpr int kTensorDataType = 2;     // TensorProto.data_type
constexpr int kTensorFloatData = 4;    // TensorProto.float_data (packed)
constexpr int kTensorName = 8;         // TensorProto.name
constexpr int kTensorRawData = 9;      // TensorProto.raw_data
constexpr int kTensorDoubleData = 10;  // TensorProto.double_data (packed)

// Bytes per element of a float type's payload in `field`; 0 where the
// payload is kept whatever its size (integer types, unknown layouts, or a
// data_type not read yet: exporters write it before the payload).
int64_t DroppableElementSize(int field, uint64_t data_type) {
  if (field == kTensorRawData) {
    switch (data_type) {
      case TensorProto::FLOAT:
        return 4;
      case TensorProto::DOUBLE:
        return 8;
      case TensorProto::FLOAT16:
      case TensorProto::BFLOAT16:
        return 2;
      default:
        return 0;
    }
  }
  if (field == kTensorFloatData && data_type == TensorProto::FLOAT) return 4;
  if (field == kTensorDoubleData && data_type == TensorProto::DOUBLE) return 8;
  return 0;
}

// Copies the field whose `tag` was just read from `in` to `out`. false: the
// stream is malformed (or uses groups, which onnx.proto has none of).
bool CopyField(uint32_t tag, CodedInputStream* in, CodedOutputStream* out) {
  switch (Wire::GetTagWireType(tag)) {
    case Wire::WIRETYPE_VARINT: {
      uint64_t v = 0;
      if (!in->ReadVarint64(&v)) return false;
      out->WriteTag(tag);
      out->WriteVarint64(v);
      return true;
    }
    case Wire::WIRETYPE_FIXED64: {
      uint64_t v = 0;
      if (!in->ReadLittleEndian64(&v)) return false;
      out->WriteTag(tag);
      out->WriteLittleEndian64(v);
      return true;
    }
    case Wire::WIRETYPE_FIXED32: {
      uint32_t v = 0;
      if (!in->ReadLittleEndian32(&v)) return false;
      out->WriteTag(tag);
      out->WriteLittleEndian32(v);
      return true;
    }
    case Wire::WIRETYPE_LENGTH_DELIMITED: {
      uint32_t length = 0;
      std::string bytes;
      if (!in->ReadVarint32(&length) || !in->ReadString(&bytes, static_cast<int>(length))) return false;
      out->WriteTag(tag);
      out->WriteVarint32(length);
      out->WriteString(bytes);
      return true;
    }
    default:
      return false;
  }
}

void WriteMessageField(int field, const std::string& bytes, CodedOutputStream* out) {
  out->WriteTag(Wire::MakeTag(field, Wire::WIRETYPE_LENGTH_DELIMITED));
  out->WriteVarint32(static_cast<uint32_t>(bytes.size()));
  out->WriteString(bytes);
}

// Reads the length of a message field and confines `in` to it; false when
// the length cannot be read.
bool EnterMessage(CodedInputStream* in, CodedInputStream::Limit* limit) {
  uint32_t length = 0;
  if (!in->ReadVarint32(&length)) return false;
  *limit = in->PushLimit(static_cast<int>(length));
  return true;
}

// One TensorProto (up to the current limit) into `bytes`, its large float
// payload left out. `name` and `dropped` describe it.
bool FilterTensor(CodedInputStream* in, const std::set<std::string>* keep, std::string* bytes, std::string* name,
                  DroppedPayload* dropped) {
  StringOutputStream sink(bytes);
  CodedOutputStream out(&sink);
  uint64_t data_type = TensorProto::UNDEFINED;
  for (uint32_t tag = in->ReadTag(); tag != 0; tag = in->ReadTag()) {
    const int field = static_cast<int>(Wire::GetTagFieldNumber(tag));
    const bool delimited = Wire::GetTagWireType(tag) == Wire::WIRETYPE_LENGTH_DELIMITED;
    if (field == kTensorDataType && Wire::GetTagWireType(tag) == Wire::WIRETYPE_VARINT) {
      if (!in->ReadVarint64(&data_type)) return false;
      out.WriteTag(tag);
      out.WriteVarint64(data_type);
      continue;
    }
    if (field == kTensorName && delimited) {
      uint32_t length = 0;
      if (!in->ReadVarint32(&length) || !in->ReadString(name, static_cast<int>(length))) return false;
      WriteMessageField(field, *name, &out);
      continue;
    }
    const int64_t element_size = delimited ? DroppableElementSize(field, data_type) : 0;
    if (element_size == 0) {
      if (!CopyField(tag, in, &out)) return false;
      continue;
    }
    uint32_t length = 0;
    if (!in->ReadVarint32(&length)) return false;
    const bool wanted = keep != nullptr && (name->empty() || keep->count(*name) != 0);
    if (length > kKeptPayloadBytes && !wanted) {
      if (!in->Skip(static_cast<int>(length))) return false;  // seeks past it in a file
      *dropped = {static_cast<int64_t>(length), element_size};
      // One placeholder byte: the ONNX checker counts a value field only
      // when it is non-empty. The importer never reads it (IsShapeOnly).
      WriteMessageField(kTensorRawData, std::string(1, '\0'), &out);
      continue;
    }
    std::string payload;
    if (!in->ReadString(&payload, static_cast<int>(length))) return false;
    WriteMessageField(field, payload, &out);
  }
  return in->ConsumedEntireMessage();
}

bool FilterGraph(CodedInputStream* in, const std::set<std::string>* keep, std::string* bytes,
                 std::unordered_map<std::string, DroppedPayload>* dropped) {
  StringOutputStream sink(bytes);
  CodedOutputStream out(&sink);
  for (uint32_t tag = in->ReadTag(); tag != 0; tag = in->ReadTag()) {
    if (Wire::GetTagFieldNumber(tag) != kGraphInitializer ||
        Wire::GetTagWireType(tag) != Wire::WIRETYPE_LENGTH_DELIMITED) {
      if (!CopyField(tag, in, &out)) return false;
      continue;
    }
    CodedInputStream::Limit limit;
    if (!EnterMessage(in, &limit)) return false;
    std::string tensor, name;
    DroppedPayload payload;
    if (!FilterTensor(in, keep, &tensor, &name, &payload)) return false;
    in->PopLimit(limit);
    if (payload.bytes > 0) (*dropped)[name] = payload;
    WriteMessageField(kGraphInitializer, tensor, &out);
  }
  return in->ConsumedEntireMessage();
}

bool FilterModel(CodedInputStream* in, const std::set<std::string>* keep, std::string* bytes,
                 std::unordered_map<std::string, DroppedPayload>* dropped) {
  StringOutputStream sink(bytes);
  CodedOutputStream out(&sink);
  for (uint32_t tag = in->ReadTag(); tag != 0; tag = in->ReadTag()) {
    if (Wire::GetTagFieldNumber(tag) != kModelGraph || Wire::GetTagWireType(tag) != Wire::WIRETYPE_LENGTH_DELIMITED) {
      if (!CopyField(tag, in, &out)) return false;
      continue;
    }
    CodedInputStream::Limit limit;
    if (!EnterMessage(in, &limit)) return false;
    std::string graph;
    if (!FilterGraph(in, keep, &graph, dropped)) return false;
    in->PopLimit(limit);
    WriteMessageField(kModelGraph, graph, &out);
  }
  return in->ConsumedEntireMessage();
}

}  // namespace

Status ParseModelWithoutLargeWeights(google::protobuf::io::ZeroCopyInputStream* in, const std::string& origin,
                                     onnx::ModelProto* model, std::unordered_map<std::string, DroppedPayload>* dropped,
                                     const std::set<std::string>* keep) {
  std::string kept;
  bool ok = false;
  {
    CodedInputStream coded(in);
    ok = FilterModel(&coded, keep, &kept, dropped);
  }
  if (!ok || !model->ParseFromString(kept))
    return Status::DataLoss(origin +
                            ": not a valid ONNX model (protobuf parsing failed: truncated, corrupted "
                            "or not an .onnx file)");
  return Status::OK();
}

}  // namespace tessera::onnx_import
