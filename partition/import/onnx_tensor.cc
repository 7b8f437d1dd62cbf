#include "partition/import/onnx_tensor.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

namespace tessera::onnx_import {
namespace {

// A folded value written back as an integer type: NaN becomes 0 and values
// outside the type saturate (a plain cast of an out-of-range double is
// undefined behaviour; found by tests/fuzz/fuzz_onnx).
template <typename T>
T Saturate(double v) {
  if (std::isnan(v)) return T{0};
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

using onnx::TensorProto;

// IEEE half -> float (exact; subnormals, inf and NaN included).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, frac = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(frac), -24);
  else if (exp == 31)
    v = frac ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(static_cast<float>(frac | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

float Bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace

size_t RawElementSize(int32_t t) {
  switch (t) {
    case TensorProto::FLOAT:
    case TensorProto::INT32:
    case TensorProto::UINT32:
      return 4;
    case TensorProto::DOUBLE:
    case TensorProto::INT64:
    case TensorProto::UINT64:
      return 8;
    case TensorProto::INT16:
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      return 2;
    case TensorProto::INT8:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

namespace {

template <typename T>
T LoadLittleEndian(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // x86/ARM hosts are little-endian, like the format
  return v;
}

// Element i of raw bytes of type `t`, as double.
double RawElement(const char* base, int32_t t, size_t i) {
  switch (t) {
    case TensorProto::FLOAT:
      return LoadLittleEndian<float>(base + 4 * i);
    case TensorProto::INT32:
      return LoadLittleEndian<int32_t>(base + 4 * i);
    case TensorProto::UINT32:
      return LoadLittleEndian<uint32_t>(base + 4 * i);
    case TensorProto::DOUBLE:
      return LoadLittleEndian<double>(base + 8 * i);
    case TensorProto::INT64:
      return static_cast<double>(LoadLittleEndian<int64_t>(base + 8 * i));
    case TensorProto::UINT64:
      return static_cast<double>(LoadLittleEndian<uint64_t>(base + 8 * i));
    case TensorProto::INT16:
      return LoadLittleEndian<int16_t>(base + 2 * i);
    case TensorProto::UINT16:
      return LoadLittleEndian<uint16_t>(base + 2 * i);
    case TensorProto::FLOAT16:
      return HalfToFloat(LoadLittleEndian<uint16_t>(base + 2 * i));
    case TensorProto::BFLOAT16:
      return Bfloat16ToFloat(LoadLittleEndian<uint16_t>(base + 2 * i));
    case TensorProto::INT8:
      return static_cast<int8_t>(base[i]);
    case TensorProto::UINT8:
      return static_cast<uint8_t>(base[i]);
    case TensorProto::BOOL:
      return base[i] != 0 ? 1.0 : 0.0;
    default:
      return 0.0;
  }
}

std::string TensorLabel(const TensorProto& t) {
  return "tensor '" + t.name() + "' (" + ElemTypeName(t.data_type()) + ")";
}

// Calls emit(i, value) for each of the n elements; checks the stored count.
template <typename Emit>
Status ForEachElement(const TensorProto& t, int64_t n, Emit emit) {
  if (t.data_location() == TensorProto::EXTERNAL)
    return Status::NotSupported(TensorLabel(t) +
                                " keeps its data in an external file; save the model with "
                                "the weights embedded");
  const int32_t type = t.data_type();
  const size_t count = static_cast<size_t>(n);
  if (t.has_raw_data()) {
    const size_t elem = RawElementSize(type);
    if (elem == 0) return Status::NotSupported(TensorLabel(t) + ": element type not supported");
    if (t.raw_data().size() != count * elem)
      return Status::DataLoss(TensorLabel(t) + " holds " + std::to_string(t.raw_data().size()) + " bytes, its dims " +
                              "need " + std::to_string(count * elem) + " (truncated or corrupted file)");
    const char* base = t.raw_data().data();
    for (size_t i = 0; i < count; ++i) emit(i, RawElement(base, type, i));
    return Status::OK();
  }
  auto check = [&](int stored) -> Status {
    if (static_cast<size_t>(stored) != count)
      return Status::DataLoss(TensorLabel(t) + " holds " + std::to_string(stored) + " values, its dims need " +
                              std::to_string(count) + " (truncated or corrupted file)");
    return Status::OK();
  };
  switch (type) {
    case TensorProto::FLOAT:
      TS_RETURN_IF_ERROR(check(t.float_data_size()));
      for (size_t i = 0; i < count; ++i) emit(i, t.float_data(static_cast<int>(i)));
      return Status::OK();
    case TensorProto::DOUBLE:
      TS_RETURN_IF_ERROR(check(t.double_data_size()));
      for (size_t i = 0; i < count; ++i) emit(i, t.double_data(static_cast<int>(i)));
      return Status::OK();
    case TensorProto::INT64:
      TS_RETURN_IF_ERROR(check(t.int64_data_size()));
      for (size_t i = 0; i < count; ++i) emit(i, static_cast<double>(t.int64_data(static_cast<int>(i))));
      return Status::OK();
    case TensorProto::UINT32:
    case TensorProto::UINT64:
      TS_RETURN_IF_ERROR(check(t.uint64_data_size()));
      for (size_t i = 0; i < count; ++i) emit(i, static_cast<double>(t.uint64_data(static_cast<int>(i))));
      return Status::OK();
    case TensorProto::INT32:
    case TensorProto::INT16:
    case TensorProto::INT8:
    case TensorProto::UINT16:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      TS_RETURN_IF_ERROR(check(t.int32_data_size()));
      for (size_t i = 0; i < count; ++i) emit(i, static_cast<double>(t.int32_data(static_cast<int>(i))));
      return Status::OK();
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      TS_RETURN_IF_ERROR(check(t.int32_data_size()));
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
        emit(i, type == TensorProto::FLOAT16 ? HalfToFloat(bits) : Bfloat16ToFloat(bits));
      }
      return Status::OK();
    default:
      return Status::NotSupported(TensorLabel(t) + ": element type not supported");
  }
}

// Elements the tensor actually stores, so that dims are checked against the
// data before anything is allocated from them.
int64_t StoredElementCount(const TensorProto& t) {
  if (t.has_raw_data()) {
    const size_t elem = RawElementSize(t.data_type());
    return elem == 0 ? -1 : static_cast<int64_t>(t.raw_data().size() / elem);
  }
  switch (t.data_type()) {
    case TensorProto::FLOAT:
      return t.float_data_size();
    case TensorProto::DOUBLE:
      return t.double_data_size();
    case TensorProto::INT64:
      return t.int64_data_size();
    case TensorProto::UINT32:
    case TensorProto::UINT64:
      return t.uint64_data_size();
    default:
      return t.int32_data_size();
  }
}

Status CheckStoredCount(const TensorProto& t, int64_t n) {
  if (t.data_location() == TensorProto::EXTERNAL) return Status::OK();  // ForEachElement reports it
  const int64_t stored = StoredElementCount(t);
  if (stored >= 0 && stored != n)
    return Status::DataLoss(TensorLabel(t) + " holds " + std::to_string(stored) + " values, its dims need " +
                            std::to_string(n) + " (truncated or corrupted file)");
  return Status::OK();
}

}  // namespace

bool ConstTensor::IsFloat() const {
  return elem_type == TensorProto::FLOAT || elem_type == TensorProto::DOUBLE || elem_type == TensorProto::FLOAT16 ||
         elem_type == TensorProto::BFLOAT16;
}

std::vector<int64_t> ConstTensor::Ints() const {
  std::vector<int64_t> out(data.size());
  for (size_t i = 0; i < data.size(); ++i) out[i] = Saturate<int64_t>(data[i]);
  return out;
}

std::string ElemTypeName(int32_t elem_type) {
  if (onnx::TensorProto_DataType_IsValid(elem_type)) {
    std::string name = onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(elem_type));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name;
  }
  return "type " + std::to_string(elem_type);
}

Result<int64_t> TensorElementCount(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return Status::InvalidArgument("tensor '" + t.name() + "' has a negative dimension");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 16 / d)
      return Status::InvalidArgument("tensor '" + t.name() + "' has an impossibly large element count");
    n *= d;
  }
  return n;
}

Result<ConstTensor> ReadConstTensor(const onnx::TensorProto& t) {
  TS_ASSIGN_OR_RETURN(int64_t n, TensorElementCount(t));
  ConstTensor c;
  c.elem_type = t.data_type();
  c.dims.assign(t.dims().begin(), t.dims().end());
  TS_RETURN_IF_ERROR(CheckStoredCount(t, n));
  c.data.resize(static_cast<size_t>(n));
  TS_RETURN_IF_ERROR(ForEachElement(t, n, [&](size_t i, double v) { c.data[i] = v; }));
  return c;
}

Result<std::vector<float>> ReadFloats(const onnx::TensorProto& t) {
  TS_ASSIGN_OR_RETURN(int64_t n, TensorElementCount(t));
  TS_RETURN_IF_ERROR(CheckStoredCount(t, n));
  std::vector<float> out;
  if (t.data_type() == TensorProto::FLOAT && t.has_raw_data() && t.data_location() != TensorProto::EXTERNAL) {
    // Fast path for the common case: float32 weights stored raw.
    if (t.raw_data().size() != static_cast<size_t>(n) * 4)
      return Status::DataLoss(TensorLabel(t) + " holds " + std::to_string(t.raw_data().size()) +
                              " bytes, its dims need " + std::to_string(n * 4) + " (truncated or corrupted file)");
    out.resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(out.data(), t.raw_data().data(), static_cast<size_t>(n) * 4);
    return out;
  }
  out.resize(static_cast<size_t>(n));
  TS_RETURN_IF_ERROR(ForEachElement(t, n, [&](size_t i, double v) { out[i] = static_cast<float>(v); }));
  return out;
}

onnx::TensorProto WriteTensorProto(const std::string& name, const ConstTensor& c) {
  TensorProto t;
  t.set_name(name);
  for (int64_t d : c.dims) t.add_dims(d);
  // Float16/bfloat16 results are widened: the importer converts them anyway.
  int32_t type = c.elem_type;
  if (type == TensorProto::FLOAT16 || type == TensorProto::BFLOAT16) type = TensorProto::FLOAT;
  t.set_data_type(type);
  // Reserved up front: growing by doubling held up to twice a folded
  // weight's bytes (a QDQ model's dequantized weights are all folded).
  const int n = static_cast<int>(c.data.size());
  switch (type) {
    case TensorProto::FLOAT:
      t.mutable_float_data()->Reserve(n);
      for (double v : c.data) t.add_float_data(static_cast<float>(v));
      break;
    case TensorProto::DOUBLE:
      t.mutable_double_data()->Reserve(n);
      for (double v : c.data) t.add_double_data(v);
      break;
    case TensorProto::INT64:
      t.mutable_int64_data()->Reserve(n);
      for (double v : c.data) t.add_int64_data(Saturate<int64_t>(v));
      break;
    case TensorProto::UINT32:
    case TensorProto::UINT64:
      t.mutable_uint64_data()->Reserve(n);
      for (double v : c.data) t.add_uint64_data(Saturate<uint64_t>(v));
      break;
    default:  // int32 and narrower, bool
      t.mutable_int32_data()->Reserve(n);
      for (double v : c.data) t.add_int32_data(Saturate<int32_t>(v));
      break;
  }
  return t;
}

}  // namespace tessera::onnx_import
