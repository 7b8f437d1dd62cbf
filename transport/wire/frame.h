// Host-side conveniences over the shared frame codec (frame_codec.h):
// frames as values, byte-stream decoding into a vector, and the counters of
// dropped input that UartLink exposes for /metrics.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/wire/frame_codec.h"

namespace tessera {

struct Frame {
  wire::FrameHeader header;
  std::string payload;  // header.length bytes
};

// Encoded bytes of one frame, delimiter included. Sets header.length from the
// payload. REQUIRES: payload.size() <= wire::kMaxPayload.
std::string EncodeFrame(wire::FrameHeader header, const std::string& payload);
// Encoded bytes of a compact continuation frame (wire::kFrameMore) of the
// sender's `session`. REQUIRES: 1 <= payload.size() <= wire::kMaxPayload.
std::string EncodeCompactFrame(uint32_t session, uint32_t sequence, const std::string& payload);

// Counts of chunks dropped by a decoder, by reason (wire::FrameError).
struct FrameErrorCounts {
  std::array<uint64_t, wire::kNumFrameErrors> by_reason{};
  uint64_t total() const;
  std::string ToString() const;  // "crc=3 cobs=1" (non-zero reasons only)
};

// Decodes a byte stream that may hold garbage, partial and corrupted frames.
class FrameStreamDecoder {
 public:
  // Appends every complete valid frame in `bytes` to `out`; counts the rest.
  void Feed(const uint8_t* bytes, size_t n, std::vector<Frame>* out);
  void Feed(const std::string& bytes, std::vector<Frame>* out) {
    Feed(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), out);
  }
  const FrameErrorCounts& errors() const { return errors_; }

 private:
  wire::FrameDecoder decoder_;
  FrameErrorCounts errors_;
};

}  // namespace tessera
