// ConstantFile: a device program's file on a worker (--data-dir), read at
// the offsets of its constants' values while the program prepares (issue 11
// item 2: "the worker loads it once: peak memory during LoadProgram ≤
// program size + one chunk"). ParseProgramFile with stream_constants
// records where each constant's values are (DeviceProgram::
// streamed_constants) instead of reading them; kernels read them from here
// a block at a time as they pack them (kernel.h, ReadConstantRows), or
// whole when they keep them as they are.
//
// The file stays open for the object's life: renaming it into place (the
// worker renames program.pb.tmp to program.pb once loaded) does not disturb
// the reads. Thread-safe (pread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "util/status.h"

namespace tessera {

class ConstantFile {
 public:
  static Result<std::shared_ptr<const ConstantFile>> Open(const std::string& path);
  ~ConstantFile();
  ConstantFile(const ConstantFile&) = delete;
  ConstantFile& operator=(const ConstantFile&) = delete;

  // Reads `count` float32 little-endian values at byte `offset` into dst.
  // IOError naming the file when it is shorter than that (changed on disk).
  Status Read(int64_t offset, int64_t count, float* dst) const;
  const std::string& path() const { return path_; }

 private:
  ConstantFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace tessera
