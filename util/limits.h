// The limits on what untrusted input may make tessera allocate or recurse
// into (issue 14, "Bounded by construction"): model files, request bodies,
// .npy headers, JSON, and every size, count or shape a peer sends over the
// wire. They are stated here, in one place, and README.md ("Limits") lists
// them. A number from outside is checked against its limit *before* memory
// is reserved for it; going over is one clear error naming the input and
// the limit, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace tessera {

// ---- tensors and models ----------------------------------------------------

// Elements of any one tensor: a model value, a weight, a request input
// (2^28 float32 = 1 GiB; YOLOv2 at 608² peaks at 1.2e7, VGG-16's largest
// weight has 1.0e8).
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 28;
// Dimensions of a tensor (model values are at most 4-D, .npy inputs too).
inline constexpr int kMaxTensorRank = 8;
// Size of a model we read, from a file or from memory: protobuf's largest
// message (2 GiB - 1), which an ONNX model cannot exceed.
inline constexpr int64_t kMaxModelBytes = (int64_t{2} << 30) - 1;

// ---- requests ---------------------------------------------------------------

// Default cap on one request's body (HTTP, answered 413 beyond) and on its
// inputs over gRPC; `tessera gateway --max-body-bytes` changes it.
inline constexpr int64_t kMaxRequestBytes = int64_t{64} << 20;
// Nesting depth of a JSON request body (a tensor of rank 8 inside an
// {"inputs": ...} object needs 9). Deeper is refused before it is parsed
// further, so no parser recursion depends on the sender.
inline constexpr int kMaxJsonDepth = 32;
// Bytes of an .npy header (numpy writes < 200; the format allows 4 GiB).
inline constexpr int64_t kMaxNpyHeaderBytes = 64 << 10;

// ---- worker wire -----------------------------------------------------------

// Size a LoadProgram may announce for one device's program (weights
// included). Memory is taken only as chunks arrive, never for the
// announced number up front.
inline constexpr int64_t kMaxProgramBytes = int64_t{1} << 30;
// Arena of one request on a worker (its program's buffers and the
// executors' scratch, laid out by the program's own sizes): refused beyond
// this before it is allocated (every tensor is within kMaxTensorElements,
// but a program may declare many).
inline constexpr int64_t kMaxDeviceArenaBytes = int64_t{4} << 30;
// Exchange frames for a request this worker has not started yet (a peer may
// begin sending before the source's Run reaches this worker) are held for
// at most this many such requests per sending device, each at most what the
// program receives from that device per request, and for at most
// kEarlyExchangeHoldMs; frames beyond that, for finished requests, or for
// messages the program does not receive are dropped and counted.
inline constexpr int kMaxEarlyRequestsPerPeer = 8;
inline constexpr int64_t kEarlyExchangeHoldMs = 10000;
// How many finished request ids a worker remembers, so that late frames for
// them are dropped at once instead of being held as early ones.
inline constexpr int kRememberedFinishedRequests = 4096;

// ---- HTTP listener -----------------------------------------------------------

// Connections the gateway's HTTP endpoint serves at once; more are answered
// 503 and closed.
inline constexpr int kMaxHttpConnections = 256;
// A connection that sends no complete request header within this time
// (idle keep-alive included) is closed.
inline constexpr int64_t kHttpIdleTimeoutMs = 10000;

// A gRPC connection (worker or gateway port) that does not finish its
// handshake within this time is closed (gRPC's default is 120 s, long
// enough for idle connections to use up the process's descriptors).
inline constexpr int kGrpcHandshakeTimeoutMs = 10000;

// ---- checks -------------------------------------------------------------------

// The element count of `dims` when every dimension is >= 0, the rank is at
// most kMaxTensorRank and the product (computed without overflow) is at most
// kMaxTensorElements; otherwise InvalidArgument "<what> has shape [..]: ..."
// naming the limit.
Result<int64_t> CheckedElementCount(const std::vector<int64_t>& dims, const std::string& what);

}  // namespace tessera
