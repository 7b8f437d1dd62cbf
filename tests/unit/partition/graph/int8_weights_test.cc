// partition/graph/int8_weights.h: the int8 form of a QDQ model's weights is
// found again in their float values, bit for bit, and only there.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "partition/graph/int8_weights.h"
#include "partition/graph/quantization.h"

namespace tessera {
namespace {

// rows × per weights put on a per-row int8 grid the way `tessera quantize`
// does (symmetric, scale = max |w| / 127) or with the given zero point and
// scale factor, as an importer holds them: dequantized float32.
std::vector<float> Quantized(int64_t rows, int64_t per, uint32_t seed, int32_t zero_point = 0, float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.05f * spread);
  std::vector<float> w(rows * per);
  for (float& x : w) x = n(rng);
  for (int64_t r = 0; r < rows; ++r) {
    float m = 0;
    for (int64_t i = 0; i < per; ++i) m = std::max(m, std::fabs(w[r * per + i]));
    QuantGrid g{m / 127.0f * (zero_point ? 2.0f : 1.0f), zero_point, zero_point ? 0 : -127, zero_point ? 255 : 127};
    for (int64_t i = 0; i < per; ++i) w[r * per + i] = QuantizeDequantize(w[r * per + i], g);
  }
  return w;
}

bool Reproduced(const std::vector<float>& w, const Int8Rows& q, int64_t per) {
  for (size_t i = 0; i < w.size(); ++i) {
    const float v = float(q.codes[i]) * q.scales[i / per];
    if (std::memcmp(&v, &w[i], 4) != 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("int8 weights: a QDQ model's per-channel weights are found again bit for bit", "[int8]") {
  struct Case {
    int64_t rows, per;
    int32_t zero_point;
    float spread;
  };
  // A 3x3 conv, a depthwise conv (9 per channel), a dense layer, tiny and
  // huge scales, uint8 weights with zero point 128 (codes -128..127).
  for (Case c : {Case{16, 3 * 9, 0, 1.0f}, Case{64, 9, 0, 1.0f}, Case{12, 640, 0, 1.0f}, Case{8, 50, 0, 1e-6f},
                 Case{8, 50, 0, 1e6f}, Case{8, 50, 128, 1.0f}}) {
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      const std::vector<float> w = Quantized(c.rows, c.per, seed, c.zero_point, c.spread);
      auto q = RecoverInt8Rows(w.data(), c.rows, c.per);
      INFO("rows " << c.rows << " per " << c.per << " zero point " << c.zero_point << " seed " << seed);
      REQUIRE(q.has_value());
      CHECK(Reproduced(w, *q, c.per));
      CHECK(q->bytes() == 4 * c.rows + (c.rows * c.per + 3) / 4 * 4);
      CHECK(CompactWeightBytes(w.data(), c.rows, c.per) == q->bytes());
    }
  }
}

TEST_CASE("int8 weights: a slice of a channel (an FDT fan-in part) has its own exact scale", "[int8]") {
  // The input-channel half of each row: its largest code need not be 127.
  const int64_t rows = 8, per = 72, half = 36;
  const std::vector<float> w = Quantized(rows, per, 7);
  std::vector<float> part;
  for (int64_t r = 0; r < rows; ++r) part.insert(part.end(), w.begin() + r * per, w.begin() + r * per + half);
  auto q = RecoverInt8Rows(part.data(), rows, half);
  REQUIRE(q.has_value());
  CHECK(Reproduced(part, *q, half));
}

TEST_CASE("int8 weights: float weights, NaN, infinity and -0.0 stay float32", "[int8]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 0.1f);
  std::vector<float> w(16 * 27);
  for (float& x : w) x = n(rng);
  CHECK_FALSE(RecoverInt8Rows(w.data(), 16, 27).has_value());
  CHECK(CompactWeightBytes(w.data(), 16, 27) == 4 * 16 * 27);

  std::vector<float> q = Quantized(4, 9, 2);
  REQUIRE(RecoverInt8Rows(q.data(), 4, 9).has_value());
  for (float bad : {NAN, INFINITY, -0.0f}) {
    std::vector<float> b = q;
    b[20] = bad;
    INFO("value " << bad);
    CHECK_FALSE(RecoverInt8Rows(b.data(), 4, 9).has_value());
  }
  // One value off the grid by an ulp spoils its row, and so the tensor.
  std::vector<float> off = q;
  size_t k = 0;
  while (off[k] == 0.0f) ++k;
  off[k] = std::nextafter(off[k], INFINITY);
  CHECK_FALSE(RecoverInt8Rows(off.data(), 4, 9).has_value());
  // A row of zeros is exact (all codes 0).
  std::vector<float> zeros = q;
  std::fill(zeros.begin(), zeros.begin() + 9, 0.0f);
  auto z = RecoverInt8Rows(zeros.data(), 4, 9);
  REQUIRE(z.has_value());
  CHECK(Reproduced(zeros, *z, 9));
  // One value per channel: the int8 form (4 + 1 B) exists but is not smaller
  // than float, so an MCU program keeps float32 (and the planner says so).
  CHECK(RecoverInt8Rows(q.data(), 36, 1).has_value());
  CHECK_FALSE(SmallerAsInt8(q.data(), 36, 1).has_value());
  CHECK(CompactWeightBytes(q.data(), 36, 1) == 4 * 36);
  CHECK(SmallerAsInt8(q.data(), 4, 9).has_value());
}

}  // namespace tessera
