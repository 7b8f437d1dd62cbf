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

TEST_CASE("fuzz: damaged streams never yield a frame that was not sent", "[frame][fuzz]") {
  std::mt19937 rng(3);
  for (int round = 0; round < 300; ++round) {
    std::vector<Frame> sent;
    std::string stream;
    int frames = 1 + rng() % 6;
    for (int i = 0; i < frames; ++i) {
      size_t n = rng() % 300;
      Frame f{RandomHeader(rng, n), Bytes(rng, n, rng() % 2)};
      f.header.length = static_cast<uint16_t>(n);
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
