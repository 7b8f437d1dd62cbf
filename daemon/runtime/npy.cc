#include "daemon/runtime/npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

namespace tessera {

namespace {

Status Bad(const std::string& origin, const std::string& what) {
  return Status::InvalidArgument(origin + ": not a readable .npy file: " + what);
}

// Converts `count` little-endian elements of numpy type `descr` to float32.
template <typename T>
void Convert(const char* src, size_t count, std::vector<float>* out) {
  out->resize(count);
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    (*out)[i] = static_cast<float>(v);
  }
}

}  // namespace

Result<TensorData> ParseNpy(const std::string& bytes, const std::string& origin) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0) return Bad(origin, "missing \\x93NUMPY magic");
  const unsigned major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad(origin, "truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    return Bad(origin, "format version " + std::to_string(major) + " is not 1, 2 or 3");
  }
  if (header_start + header_len > bytes.size()) return Bad(origin, "truncated header");
  const std::string header = bytes.substr(header_start, header_len);

  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']*)'"))) return Bad(origin, "no 'descr' in header");
  const std::string descr = m[1];
  if (!std::regex_search(header, m, std::regex("'fortran_order'\\s*:\\s*(True|False)")))
    return Bad(origin, "no 'fortran_order' in header");
  if (m[1] == "True") return Bad(origin, "Fortran-order arrays are not supported; save with np.ascontiguousarray");
  if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)"))) return Bad(origin, "no 'shape' in header");
  TensorData t;
  {
    std::string dims = m[1];
    std::stringstream ss(dims);
    std::string item;
    while (std::getline(ss, item, ',')) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \tL") + 1);
      if (item.empty()) continue;
      try {
        t.shape.push_back(std::stoll(item));
      } catch (...) {
        return Bad(origin, "bad dimension '" + item + "'");
      }
      if (t.shape.back() < 0) return Bad(origin, "negative dimension");
    }
  }
  const size_t count = static_cast<size_t>(NumElements(t.shape));
  size_t elem = 0;
  if (descr == "<f4" || descr == "<i4" || descr == "|i4") elem = 4;
  else if (descr == "<f8" || descr == "<i8") elem = 8;
  else if (descr == "|u1" || descr == "<u1" || descr == "|b1") elem = 1;
  else return Bad(origin, "dtype '" + descr + "' is not float32/float64/int32/int64/uint8 little-endian");
  const size_t data_start = header_start + header_len;
  if (bytes.size() - data_start < count * elem)
    return Bad(origin, "data is truncated: shape " + ShapeToString(t.shape) + " needs " + std::to_string(count * elem) +
                           " bytes, file has " + std::to_string(bytes.size() - data_start));
  const char* src = bytes.data() + data_start;
  if (descr == "<f4") Convert<float>(src, count, &t.values);
  else if (descr == "<f8") Convert<double>(src, count, &t.values);
  else if (elem == 4) Convert<int32_t>(src, count, &t.values);
  else if (elem == 8) Convert<int64_t>(src, count, &t.values);
  else Convert<uint8_t>(src, count, &t.values);
  return t;
}

Result<TensorData> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::FromErrno(errno, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseNpy(ss.str(), path);
}

std::string SerializeNpy(const TensorData& tensor) {
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape.size(); ++i) shape += std::to_string(tensor.shape[i]) + ", ";
  if (tensor.shape.size() > 1) shape.resize(shape.size() - 2);
  else if (tensor.shape.size() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so that the data starts on a 64-byte boundary (10-byte preamble).
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(tensor.values.data()), tensor.values.size() * sizeof(float));
  return out;
}

Status WriteNpy(const std::string& path, const TensorData& tensor) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return Status::FromErrno(errno, path);
  const std::string bytes = SerializeNpy(tensor);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return Status::FromErrno(errno, path);
  return Status::OK();
}

}  // namespace tessera
