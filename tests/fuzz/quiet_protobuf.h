// For the fuzz targets whose parsers are protobuf messages (fuzz_onnx,
// fuzz_program): protobuf logs every invalid UTF-8 string field it meets;
// the refusal through Status is what counts, and the log would drown the
// fuzzer's. Include in exactly one .cc per target (it defines libFuzzer's
// optional LLVMFuzzerInitialize).
#pragma once

#include <google/protobuf/stubs/logging.h>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}
