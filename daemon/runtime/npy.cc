#include "daemon/runtime/npy.h"

#include "util/limits.h"

#include <cstdint>
#include <cstring>
#include <fstream>
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


// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 224, 224), }
// read by a small hand parser: one pass, no recursion, no backtracking, every
// string and the shape bounded, so that a hostile header costs at most its
// own length (issue 14: a 40 KB 'descr' overflowed the stack of std::regex).
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  bool has_descr = false, has_fortran_order = false, has_shape = false;
};

class NpyHeaderReader {
 public:
  NpyHeaderReader(const std::string& text, const std::string& origin) : s_(text), origin_(origin) {}

  Status Read(NpyHeader* h) {
    SkipSpace();
    if (!Eat('{')) return Error("the header is not a {...} dictionary");
    for (;;) {
      SkipSpace();
      if (Eat('}')) break;
      std::string key;
      TS_RETURN_IF_ERROR(QuotedString(&key, 32, "a key"));
      SkipSpace();
      if (!Eat(':')) return Error("expected ':' after '" + key + "'");
      SkipSpace();
      if (key == "descr") {
        TS_RETURN_IF_ERROR(QuotedString(&h->descr, 16, "'descr'"));
        h->has_descr = true;
      } else if (key == "fortran_order") {
        if (Word("True")) h->fortran_order = true;
        else if (Word("False")) h->fortran_order = false;
        else return Error("'fortran_order' is neither True nor False");
        h->has_fortran_order = true;
      } else if (key == "shape") {
        TS_RETURN_IF_ERROR(Tuple(&h->shape));
        h->has_shape = true;
      } else {
        return Error("unknown key '" + key + "' (expected descr, fortran_order, shape)");
      }
      SkipSpace();
      if (Eat(',')) continue;
      if (Eat('}')) break;
      return Error("expected ',' or '}' after '" + key + "'");
    }
    if (!h->has_descr) return Error("no 'descr' in header");
    if (!h->has_fortran_order) return Error("no 'fortran_order' in header");
    if (!h->has_shape) return Error("no 'shape' in header");
    return Status::OK();
  }

 private:
  Status Error(const std::string& what) const { return Bad(origin_, what); }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool Word(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    i_ += n;
    return true;
  }
  // 'text' or "text" (no escapes: numpy writes none), at most `max_len` characters.
  Status QuotedString(std::string* out, size_t max_len, const std::string& what) {
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return Error("expected a quoted string for " + what);
    const char quote = s_[i_++];
    const size_t end = s_.find(quote, i_);
    if (end == std::string::npos) return Error("unterminated string in " + what);
    if (end - i_ > max_len)
      return Error(what + " is " + std::to_string(end - i_) + " characters long; at most " + std::to_string(max_len) +
                   " are accepted");
    *out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return Status::OK();
  }
  // (d0, d1, ...) of non-negative integers, at most kMaxTensorRank of them.
  Status Tuple(Shape* shape) {
    if (!Eat('(')) return Error("'shape' is not a tuple");
    for (;;) {
      SkipSpace();
      if (Eat(')')) return Status::OK();
      if (shape->size() >= static_cast<size_t>(kMaxTensorRank))
        return Error("'shape' has more than " + std::to_string(kMaxTensorRank) + " dimensions");
      int64_t d = 0;
      size_t digits = 0;
      for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; ++i_, ++digits) {
        if (digits >= 18) return Error("a dimension of 'shape' has more than 18 digits");
        d = d * 10 + (s_[i_] - '0');
      }
      if (digits == 0) return Error("'shape' holds something that is not a non-negative integer");
      Eat('L');  // Python 2 longs
      shape->push_back(d);
      SkipSpace();
      if (Eat(',')) continue;
      if (Eat(')')) return Status::OK();
      return Error("expected ',' or ')' in 'shape'");
    }
  }

  const std::string& s_;
  const std::string& origin_;
  size_t i_ = 0;
};

Status ParseNpyHeader(const std::string& text, const std::string& origin, NpyHeader* h) {
  return NpyHeaderReader(text, origin).Read(h);
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
  if (static_cast<int64_t>(header_len) > kMaxNpyHeaderBytes)
    return Bad(origin, "the header is " + std::to_string(header_len) + " bytes; at most " +
                           std::to_string(kMaxNpyHeaderBytes) + " are accepted");
  if (header_start + header_len > bytes.size()) return Bad(origin, "truncated header");
  const std::string header = bytes.substr(header_start, header_len);

  NpyHeader h;
  TS_RETURN_IF_ERROR(ParseNpyHeader(header, origin, &h));
  if (h.fortran_order) return Bad(origin, "Fortran-order arrays are not supported; save with np.ascontiguousarray");
  const std::string& descr = h.descr;
  TensorData t;
  t.shape = std::move(h.shape);
  auto checked = CheckedElementCount(t.shape, origin);
  if (!checked.ok()) return checked.status();
  const size_t count = static_cast<size_t>(*checked);
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
