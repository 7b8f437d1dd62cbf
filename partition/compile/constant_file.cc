#include "partition/compile/constant_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera {

Result<std::shared_ptr<const ConstantFile>> ConstantFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  return std::shared_ptr<const ConstantFile>(new ConstantFile(fd, path));
}

ConstantFile::~ConstantFile() { ::close(fd_); }

Status ConstantFile::Read(int64_t offset, int64_t count, float* dst) const {
  static_assert(sizeof(float) == 4, "constants are float32");
  char* out = reinterpret_cast<char*>(dst);
  int64_t left = count * 4, at = offset;
  while (left > 0) {
    const ssize_t n = ::pread(fd_, out, static_cast<size_t>(left), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Status::IOError("cannot read " + path_ + " at byte " + std::to_string(at) + ": " + std::strerror(errno));
    if (n == 0)
      return Status::IOError(path_ + " ends at byte " + std::to_string(at) +
                             ", before the constant it holds (changed on disk?)");
    out += n, at += n, left -= n;
  }
  return Status::OK();
}

}  // namespace tessera
