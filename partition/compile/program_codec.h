// DeviceProgram <-> bytes (proto/program.proto). Used by `tessera deploy`
// (push), workers (load, keep on disk) and tests (programs are serialisable).
#pragma once

#include <string>

#include "partition/compile/device_program.h"
#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

std::string SerializeProgram(const DeviceProgram& program, const std::string& plan_id);
// The same, consuming `program`: each subgraph (with its weights) is freed
// as soon as it is encoded, so the peak is about one copy of the weights
// instead of three (the gateway builds and sends one program at a time,
// issue 11). The bytes parse to the same program (field order differs).
std::string SerializeProgram(DeviceProgram&& program, const std::string& plan_id);
// A constant with the same identity as an earlier one of the program
// (ConstantIdentity, graph.h: the tiles of an FFMT stack each hold the
// stack's weights) is written once; later ones refer to it.
//
// Errors (DataLoss / InvalidArgument) name `origin` and what is wrong; the
// parsed program is also checked for internal consistency (buffer ids,
// subgraph arity), so a corrupted program never reaches a kernel.
Result<DeviceProgram> ParseProgram(const std::string& bytes, const std::string& origin, std::string* plan_id);
// The same, consuming `bytes`: they are freed as soon as the message is
// parsed, and each subgraph's message right after it is decoded, so the
// peak is about one copy of the program instead of three (issue 11).
// share_constants: a constant written as a reference keeps no values of its
// own (DeviceProgram::shared_constants; the runner reads the one referred
// to); otherwise it gets a copy, as every constant had before encoding.
Result<DeviceProgram> ParseProgram(std::string&& bytes, const std::string& origin, std::string* plan_id,
                                   bool share_constants = false);
// The same from a file (a worker's --data-dir copy): the serialized bytes
// are never held in memory beside the parsed message.
// stream_constants: the file is read field by field and no constant's
// values are read: each stays in the file (DeviceProgram::streamed_constants,
// constant_file), for the runner to read as its kernels prepare (issue 11
// item 2: a load holds the program as it will run plus one chunk). A
// reference to such a constant (same_as) reads it from the file too: with
// share_constants it stays a reference; without, it is read into a copy.
Result<DeviceProgram> ParseProgramFile(const std::string& path, const std::string& origin, std::string* plan_id,
                                       bool share_constants = false, bool stream_constants = false);

std::string SerializeGraph(const Graph& graph);
Result<Graph> ParseGraph(const std::string& bytes, const std::string& origin);

}  // namespace tessera
