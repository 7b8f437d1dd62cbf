#include "transport/wire/frame.h"

#include <memory>

namespace tessera {

std::string EncodeFrame(wire::FrameHeader header, const std::string& payload) {
  header.length = static_cast<uint16_t>(payload.size());
  uint8_t scratch[wire::kMaxRawFrame];
  uint8_t out[wire::kMaxEncodedFrame];
  size_t n = wire::EncodeFrame(header, reinterpret_cast<const uint8_t*>(payload.data()), scratch, out);
  return std::string(reinterpret_cast<const char*>(out), n);
}

std::string EncodeCompactFrame(uint32_t session, uint32_t sequence, const std::string& payload) {
  uint8_t scratch[wire::kMaxRawFrame];
  uint8_t out[wire::kMaxEncodedFrame];
  size_t n = wire::EncodeCompactFrame(session, sequence, reinterpret_cast<const uint8_t*>(payload.data()),
                                      payload.size(), scratch, out);
  return std::string(reinterpret_cast<const char*>(out), n);
}

uint64_t FrameErrorCounts::total() const {
  uint64_t t = 0;
  for (uint64_t v : by_reason) t += v;
  return t;
}

std::string FrameErrorCounts::ToString() const {
  std::string s;
  for (int i = 1; i < wire::kNumFrameErrors; ++i) {
    if (by_reason[i] == 0) continue;
    if (!s.empty()) s += ' ';
    s += wire::FrameErrorName(static_cast<wire::FrameError>(i));
    s += '=' + std::to_string(by_reason[i]);
  }
  return s.empty() ? "none" : s;
}

void FrameStreamDecoder::Feed(const uint8_t* bytes, size_t n, std::vector<Frame>* out) {
  for (size_t i = 0; i < n; ++i) {
    switch (decoder_.Feed(bytes[i])) {
      case wire::FrameDecoder::Event::kNone:
        break;
      case wire::FrameDecoder::Event::kError:
        ++errors_.by_reason[static_cast<int>(decoder_.error())];
        break;
      case wire::FrameDecoder::Event::kFrame: {
        Frame f;
        f.header = decoder_.header();
        f.payload.assign(reinterpret_cast<const char*>(decoder_.payload()), f.header.length);
        out->push_back(std::move(f));
        break;
      }
    }
  }
}

}  // namespace tessera
