// libFuzzer target: the UART frame decoder (transport/wire/frame.h,
// FrameStreamDecoder over wire::FrameDecoder). Bytes are fed in two pieces
// (split by the first byte) to cover frames across Feed calls. Every frame
// it accepts must encode back to bytes that decode to the same frame. A
// compact continuation frame (kFrameMore) decodes only once the decoder has
// learnt its session from a frame of sequence 0, so a fuzzer has to find
// such a frame first; its round trip re-teaches a fresh decoder the session.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transport/wire/frame.h"

namespace {

bool SameHeader(const tessera::wire::FrameHeader& a, const tessera::wire::FrameHeader& b) {
  return a.type == b.type && a.flags == b.flags && a.length == b.length && a.plan_id == b.plan_id &&
         a.session == b.session && a.sequence == b.sequence && a.message == b.message && a.offset == b.offset &&
         a.total == b.total;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t split = std::min<size_t>(data[0], size - 1);
  const uint8_t* rest = data + 1;
  const size_t n = size - 1;
  tessera::FrameStreamDecoder decoder;
  std::vector<tessera::Frame> frames;
  decoder.Feed(rest, split, &frames);
  decoder.Feed(rest + split, n - split, &frames);
  for (const tessera::Frame& f : frames) {
    if (f.payload.size() != f.header.length || f.payload.size() > tessera::wire::kMaxPayload) {
      std::fprintf(stderr, "frame with length %u holds %zu payload bytes\n", f.header.length, f.payload.size());
      std::abort();
    }
    tessera::FrameStreamDecoder again;
    std::vector<tessera::Frame> back;
    if (f.header.type == tessera::wire::kFrameMore) {
      if (f.payload.empty()) {
        std::fprintf(stderr, "a compact frame without payload\n");
        std::abort();
      }
      tessera::wire::FrameHeader teach;
      teach.session = f.header.session;
      teach.sequence = 0;
      again.Feed(
          tessera::EncodeFrame(teach, "") + tessera::EncodeCompactFrame(f.header.session, f.header.sequence, f.payload),
          &back);
      if (!back.empty()) back.erase(back.begin());
    } else {
      again.Feed(tessera::EncodeFrame(f.header, f.payload), &back);
    }
    if (back.size() != 1 || !SameHeader(back[0].header, f.header) || back[0].payload != f.payload) {
      std::fprintf(stderr, "a decoded frame does not survive EncodeFrame + decode (%zu frames back)\n", back.size());
      std::abort();
    }
  }
  return 0;
}
