// Frame codec (transport/wire/frame_codec.h): CRC and COBS known answers, round
// trips, and fuzzed streams — random bytes, truncations, bit flips, dropped
// and duplicated bytes never crash the decoder and never yield a frame that
// was not sent.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "transport/wire/frame.h"

namespace tessera {
namespace {

std::string Bytes(std::mt19937& rng, size_t n, bool many_zeros = false) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(many_zeros && rng() % 3 == 0 ? 0 : rng() & 0xFF);
  return s;
}

wire::FrameHeader RandomHeader(std::mt19937& rng, size_t payload) {
  wire::FrameHeader h;
  // ACKs carry at most a kMaxSackBytes bitmap; longer payloads need another type.
  static const uint8_t kWithPayload[] = {wire::kFrameData, wire::kFrameProgram, wire::kFrameStatus};
  h.type = payload > wire::kMaxSackBytes ? kWithPayload[rng() % 3] : static_cast<uint8_t>(1 + rng() % 4);
  h.plan_id = rng();
  h.session = rng();
  h.sequence = rng();
  h.message = rng();
  h.total = static_cast<uint32_t>(payload + rng() % 5000);
  h.offset = static_cast<uint32_t>(h.total - payload);
  return h;
}

bool SameFrame(const Frame& a, const Frame& b) {
  const auto &x = a.header, &y = b.header;
  return x.type == y.type && x.length == y.length && x.plan_id == y.plan_id && x.session == y.session &&
         x.sequence == y.sequence && x.message == y.message && x.offset == y.offset && x.total == y.total &&
         a.payload == b.payload;
}

}  // namespace

TEST_CASE("CRC-32 matches the IEEE check value and is incremental", "[frame]") {
  const char* s = "123456789";
  auto p = reinterpret_cast<const uint8_t*>(s);
  CHECK(wire::Crc32(p, 9) == 0xCBF43926u);
  CHECK(wire::Crc32(p + 4, 5, wire::Crc32(p, 4)) == 0xCBF43926u);
  CHECK(wire::Crc32(p, 0) == 0u);
}

TEST_CASE("COBS round-trips and removes every zero", "[frame]") {
  std::mt19937 rng(1);
  for (size_t n : {0, 1, 2, 253, 254, 255, 256, 508, 509, 1000, 1060}) {
    for (int zeros = 0; zeros < 3; ++zeros) {
      std::string in = zeros == 2 ? std::string(n, '\0') : Bytes(rng, n, zeros == 1);
      std::vector<uint8_t> enc(n + n / 254 + 2), dec(n + 1);
      size_t e = wire::CobsEncode(reinterpret_cast<const uint8_t*>(in.data()), n, enc.data());
      CHECK(e <= n + n / 254 + 1);
      for (size_t i = 0; i < e; ++i) REQUIRE(enc[i] != 0);
      long d = wire::CobsDecode(enc.data(), e, dec.data(), dec.size());
      REQUIRE(d == static_cast<long>(n));
      CHECK(std::string(dec.begin(), dec.begin() + d) == in);
    }
  }
  // Known answer: 11 22 00 33 -> 03 11 22 02 33.
  const uint8_t in[] = {0x11, 0x22, 0x00, 0x33};
  uint8_t out[8];
  REQUIRE(wire::CobsEncode(in, 4, out) == 5);
  CHECK((out[0] == 3 && out[1] == 0x11 && out[2] == 0x22 && out[3] == 2 && out[4] == 0x33));
}

TEST_CASE("frames round-trip through the stream decoder", "[frame]") {
  std::mt19937 rng(2);
  std::vector<Frame> sent;
  std::string stream;
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{254}, wire::kMaxPayload}) {
    for (int k = 0; k < 3; ++k) {
      Frame f{RandomHeader(rng, n), Bytes(rng, n, k == 1)};
      f.header.length = static_cast<uint16_t>(n);
      stream += EncodeFrame(f.header, f.payload);
      sent.push_back(f);
    }
  }
  FrameStreamDecoder decoder;
  std::vector<Frame> got;
  // Feed in odd-sized pieces: frames span reads.
  for (size_t i = 0; i < stream.size(); i += 7) decoder.Feed(stream.substr(i, 7), &got);
  REQUIRE(got.size() == sent.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(SameFrame(got[i], sent[i]));
  CHECK(decoder.errors().total() == 0);
}

TEST_CASE("header checks: length, range and type are enforced", "[frame]") {
  wire::FrameHeader h;
  h.total = 4;
  h.offset = 2;  // 2 + 4 > 4
  FrameStreamDecoder decoder;
  std::vector<Frame> got;
  decoder.Feed(EncodeFrame(h, "abcd"), &got);
  CHECK(got.empty());
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kRange)] == 1);
  h.offset = 0;
  h.type = 9;
  decoder.Feed(EncodeFrame(h, "abcd"), &got);
  CHECK(got.empty());
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kType)] == 1);
  // A run of non-zero bytes longer than any frame overflows and resyncs.
  decoder.Feed(std::string(wire::kMaxEncodedFrame + 10, 'x') + '\0', &got);
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kOverflow)] == 1);
  h.type = wire::kFrameData;
  decoder.Feed(EncodeFrame(h, "abcd"), &got);
  REQUIRE(got.size() == 1);
  CHECK(got[0].payload == "abcd");
}

TEST_CASE("selective-ack bitmap: bits map to frames past the cumulative ack, long bitmaps are refused", "[frame]") {
  uint8_t bitmap[wire::kMaxSackBytes];
  size_t bytes = 0;
  wire::SackSet(bitmap, &bytes, 0);
  wire::SackSet(bitmap, &bytes, 9);
  CHECK(bytes == 2);  // only as long as the highest frame held needs
  CHECK(bitmap[0] == 0x01);
  CHECK(bitmap[1] == 0x02);
  CHECK(wire::SackHas(bitmap, bytes, 0));
  CHECK(!wire::SackHas(bitmap, bytes, 1));
  CHECK(wire::SackHas(bitmap, bytes, 9));
  CHECK(!wire::SackHas(bitmap, bytes, 63));  // past the bytes sent: not held
  wire::SackSet(bitmap, &bytes, 63);
  CHECK(bytes == wire::kMaxSackBytes);

  wire::FrameHeader ack;
  ack.type = wire::kFrameAck;
  ack.sequence = 17;
  FrameStreamDecoder decoder;
  std::vector<Frame> got;
  decoder.Feed(EncodeFrame(ack, std::string(reinterpret_cast<char*>(bitmap), bytes)), &got);
  REQUIRE(got.size() == 1);
  CHECK(got[0].payload.size() == wire::kMaxSackBytes);
  // One byte more than any bitmap: CRC-valid but not an ACK we accept.
  decoder.Feed(EncodeFrame(ack, std::string(wire::kMaxSackBytes + 1, '\xff')), &got);
  CHECK(got.size() == 1);
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kLength)] == 1);
}

// What a decoder reports for a compact frame: type, length, the low 16 bits
// of the sequence, the session it was checked against; the rest zero.
static Frame CompactAsDecoded(uint32_t session, uint32_t sequence, const std::string& payload) {
  Frame f;
  f.header = wire::FrameHeader{};
  f.header.type = wire::kFrameMore;
  f.header.length = static_cast<uint16_t>(payload.size());
  f.header.session = session;
  f.header.sequence = sequence & 0xFFFFu;
  f.payload = payload;
  return f;
}

TEST_CASE("compact continuation frames: 3-byte header, checked against the session the decoder learnt",
          "[frame][compact]") {
  std::mt19937 rng(11);
  const uint32_t session = 0x5e551011u;
  wire::FrameHeader first;
  first.type = wire::kFrameProgram;
  first.session = session;
  first.sequence = 0;
  first.total = 3000;
  const std::string more = Bytes(rng, 700, true);
  const std::string compact = EncodeCompactFrame(session, 0x12345, more);
  // Header 3 + payload + CRC 4, COBS (at most one code per 254 bytes + 1) and the delimiter.
  CHECK(compact.size() <= 3 + more.size() + 4 + (3 + more.size() + 4) / 254 + 2);
  CHECK(compact.size() + 25 <= EncodeFrame(first, more).size());

  FrameStreamDecoder decoder;
  std::vector<Frame> got;
  // Before any frame of sequence 0 the decoder knows no session: refused.
  decoder.Feed(compact, &got);
  CHECK(got.empty());
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kCrc)] == 1);
  // An ACK of sequence 0 names the *receiver's* session: not learnt from it.
  wire::FrameHeader ack;
  ack.type = wire::kFrameAck;
  ack.session = session;
  ack.sequence = 0;
  decoder.Feed(EncodeFrame(ack, ""), &got);
  decoder.Feed(compact, &got);
  REQUIRE(got.size() == 1);
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kCrc)] == 2);
  // The peer's first reliable frame teaches it; then the compact frame decodes.
  decoder.Feed(EncodeFrame(first, Bytes(rng, 100)) + compact, &got);
  REQUIRE(got.size() == 3);
  CHECK(SameFrame(got[2], CompactAsDecoded(session, 0x12345, more)));
  // Another session's compact frame (a restarted peer's stale one) fails the CRC.
  decoder.Feed(EncodeCompactFrame(session ^ 1u, 1, more), &got);
  CHECK(got.size() == 3);
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kCrc)] == 3);
  // No payload is no continuation; more than kMaxPayload does not fit.
  decoder.Feed(EncodeCompactFrame(session, 1, ""), &got);
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kTooShort)] == 1);
  std::string raw(3 + wire::kMaxPayload + 1 + 4, '\x01');  // hand-built: the encoder does not make it
  raw[0] = wire::kFrameMore;
  std::string enc(raw.size() + raw.size() / 254 + 2, '\0');
  enc.resize(wire::CobsEncode(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(),
                              reinterpret_cast<uint8_t*>(enc.data())));
  decoder.Feed(enc + '\0', &got);
  CHECK(decoder.errors().by_reason[static_cast<int>(wire::FrameError::kLength)] == 1);
  CHECK(got.size() == 3);
  // A new session at sequence 0 replaces the old one, as the receiver does.
  first.session = session + 2;
  decoder.Feed(EncodeFrame(first, "x") + EncodeCompactFrame(session + 2, 1, "y") + EncodeCompactFrame(session, 2, "z"),
               &got);
  REQUIRE(got.size() == 5);
  CHECK(got[4].payload == "y");
}

TEST_CASE("compact frames: the sequence is recovered near the expected one, the header from the frame before",
          "[frame][compact]") {
  CHECK(wire::ExpandSequence(5, 3) == 5u);
  CHECK(wire::ExpandSequence(0x0002, 0x1FFFEu) == 0x20002u);        // the low half wrapped
  CHECK(wire::ExpandSequence(0xFFFE, 0x20001u) == 0x1FFFEu);        // a duplicate just behind
  CHECK(wire::ExpandSequence(0x0001, 0xFFFFFFF0u) == 0x00000001u);  // 32-bit wrap
  CHECK(wire::ExpandSequence(uint16_t(0xFFF0u + wire::kMaxWindow), 0xFFFFFFF0u) ==
        uint32_t(0xFFFFFFF0u + wire::kMaxWindow));

  wire::FrameHeader prev;
  prev.type = wire::kFrameData;
  prev.plan_id = 42;
  prev.message = 7;
  prev.offset = 1000;
  prev.length = 500;
  prev.total = 2000;
  wire::FrameHeader h;
  h.type = wire::kFrameMore;
  h.length = 500;
  REQUIRE(wire::ContinueFrame(prev, &h));
  CHECK(h.type == wire::kFrameData);
  CHECK(h.plan_id == 42u);
  CHECK(h.message == 7u);
  CHECK(h.offset == 1500u);
  CHECK(h.total == 2000u);
  // The frame that ended its message is continued by nothing; nor may a
  // continuation pass the total, nor continue an ACK or nothing at all.
  wire::FrameHeader last = h, more;
  more.type = wire::kFrameMore;
  more.length = 1;
  CHECK(!wire::ContinueFrame(last, &more));
  prev.length = 999;  // ends 1 byte before the total
  more.length = 2;
  CHECK(!wire::ContinueFrame(prev, &more));
  more.length = 1;
  CHECK(wire::ContinueFrame(prev, &more));
  wire::FrameHeader ack;
  ack.type = wire::kFrameAck;
  ack.total = 100;
  more.length = 1;
  CHECK(!wire::ContinueFrame(ack, &more));
  wire::FrameHeader none{};
  none.type = 0;
  none.total = 100;
  CHECK(!wire::ContinueFrame(none, &more));
}

TEST_CASE("fuzz: damaged streams never yield a frame that was not sent", "[frame][fuzz]") {
  std::mt19937 rng(3);
  for (int round = 0; round < 300; ++round) {
    std::vector<Frame> sent;
    std::string stream;
    int frames = 1 + rng() % 6;
    // Odd rounds: a session's first frame, then compact continuations.
    const bool with_compact = round % 2 == 1;
    uint32_t session = 0;
    for (int i = 0; i < frames; ++i) {
      size_t n = rng() % 300;
      if (with_compact && i > 0 && n > 0 && rng() % 3 != 0) {
        Frame f = CompactAsDecoded(session, rng(), Bytes(rng, n, rng() % 2));
        stream += EncodeCompactFrame(session, f.header.sequence, f.payload);
        sent.push_back(f);
        continue;
      }
      Frame f{RandomHeader(rng, n), Bytes(rng, n, rng() % 2)};
      f.header.length = static_cast<uint16_t>(n);
      if (with_compact && i == 0) {
        f.header.type = n > wire::kMaxSackBytes || rng() % 2 ? wire::kFrameData : wire::kFrameStatus;
        f.header.sequence = 0;
        session = f.header.session;
      }
      stream += EncodeFrame(f.header, f.payload);
      sent.push_back(f);
    }
    std::string damaged = stream;
    switch (round % 5) {
      case 0:  // bit flips
        for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
          damaged[rng() % damaged.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // truncation
        damaged.resize(rng() % damaged.size());
        break;
      case 2:  // dropped bytes
        for (int k = 0; k < 3 && !damaged.empty(); ++k) damaged.erase(rng() % damaged.size(), 1);
        break;
      case 3:  // duplicated bytes
        for (int k = 0; k < 3; ++k) {
          size_t at = rng() % damaged.size();
          damaged.insert(at, 1, damaged[at]);
        }
        break;
      case 4:  // random garbage spliced in
        damaged.insert(rng() % damaged.size(), Bytes(rng, 1 + rng() % 100, true));
        break;
    }
    FrameStreamDecoder decoder;
    std::vector<Frame> got;
    decoder.Feed(damaged, &got);
    for (const Frame& g : got) {
      bool known = false;
      for (const Frame& s : sent) known = known || SameFrame(g, s);
      REQUIRE(known);
    }
  }
  // Pure noise: nothing decodes (a random 32-byte+ chunk passing CRC-32 is ~2^-32).
  FrameStreamDecoder noise;
  std::vector<Frame> got;
  for (int i = 0; i < 200; ++i) noise.Feed(Bytes(rng, 1 + rng() % 2000, i % 2), &got);
  CHECK(got.empty());
  CHECK(noise.errors().total() > 0);
}

}  // namespace tessera
