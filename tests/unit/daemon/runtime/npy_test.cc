#include <catch2/catch.hpp>
#include <cstdio>

#include "daemon/runtime/npy.h"
#include "daemon/runtime/seeded_input.h"

using namespace tessera;

TEST_CASE("npy files round-trip float32 tensors of any rank") {
  for (Shape shape : {Shape{}, Shape{5}, Shape{2, 3}, Shape{1, 3, 4, 5}}) {
    TensorData t = SeededInput(shape, 3);
    auto back = ParseNpy(SerializeNpy(t), "mem");
    REQUIRE(back.ok());
    CHECK(back->shape == shape);
    CHECK(back->values == t.values);
  }
}

TEST_CASE("npy header is padded so data is 64-byte aligned") {
  std::string bytes = SerializeNpy(SeededInput({7}, 1));
  CHECK((bytes.size() - 7 * 4) % 64 == 0);
}

TEST_CASE("bad npy input gives an error naming the file, never a crash") {
  CHECK(ParseNpy("", "a.npy").status().message().find("a.npy") != std::string::npos);
  CHECK_FALSE(ParseNpy("\x93NUMPY\x01\x00\xff\xff", "b.npy").ok());
  std::string good = SerializeNpy(SeededInput({4, 4}, 1));
  auto truncated = ParseNpy(good.substr(0, good.size() - 5), "c.npy");
  REQUIRE_FALSE(truncated.ok());
  CHECK(truncated.status().message().find("truncated") != std::string::npos);
  std::string f16 = good;
  f16.replace(f16.find("<f4"), 3, "<f2");
  CHECK(ParseNpy(f16, "d.npy").status().message().find("dtype") != std::string::npos);
  CHECK(ReadNpy("/nonexistent/x.npy").status().IsNotFound());
}

TEST_CASE("seeded inputs are reproducible and lie from -1 up to 1 (excluded)") {
  auto a = SeededInput({1000}, 42), b = SeededInput({1000}, 42), c = SeededInput({1000}, 43);
  CHECK(a.values == b.values);
  CHECK(a.values != c.values);
  for (float v : a.values) {
    CHECK(v >= -1.f);
    CHECK(v < 1.f);
  }
}

namespace {
// An .npy file (format 1.0, or 2.0 when the header needs 4 length bytes)
// with `header` as its dictionary and `data_bytes` zero bytes of data.
std::string NpyWithHeader(const std::string& header, size_t data_bytes = 0) {
  std::string out("\x93NUMPY", 6);
  if (header.size() < 65536) {
    out += std::string("\x01\x00", 2);
    out += static_cast<char>(header.size() & 0xff);
    out += static_cast<char>(header.size() >> 8);
  } else {
    out += std::string("\x02\x00", 2);
    for (int i = 0; i < 4; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header + std::string(data_bytes, '\0');
}
}  // namespace

TEST_CASE("npy: a shape whose element count overflows is refused naming the limit (issue 14)") {
  // 86 bytes: 2^32 x 2^32 x 16 wraps a 64-bit product to 0.
  const std::string bytes =
      NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }");
  CHECK(bytes.size() < 100);
  auto r = ParseNpy(bytes, "request body");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsInvalidArgument());
  CHECK(r.status().message().find("request body") != std::string::npos);
  CHECK(r.status().message().find("elements") != std::string::npos);
  // Large but not overflowing: 3e10 elements, still over the limit.
  auto big = ParseNpy(NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 100000, 100000), }"),
                      "x.npy");
  REQUIRE_FALSE(big.ok());
  CHECK(big.status().message().find("elements") != std::string::npos);
}

TEST_CASE("npy: a 40 KB descr or a 60 000-deep header is refused quickly, without recursion (issue 14)") {
  const std::string descr(40000, 'f');
  auto r = ParseNpy(NpyWithHeader("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (1,), }", 4), "a.npy");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("'descr'") != std::string::npos);
  CHECK(r.status().message().size() < 300);  // the 40 KB are not echoed back
  auto deep = ParseNpy(NpyWithHeader("{'shape': " + std::string(60000, '(') + "}"), "b.npy");
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.status().message().find("b.npy") != std::string::npos);
  // A header length far beyond any real header is refused before it is read.
  std::string huge("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12);
  auto h = ParseNpy(huge, "c.npy");
  REQUIRE_FALSE(h.ok());
  CHECK(h.status().message().find("header") != std::string::npos);
  // Too many dimensions.
  auto rank = ParseNpy(NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1), }"),
                       "d.npy");
  REQUIRE_FALSE(rank.ok());
  CHECK(rank.status().message().find("dimensions") != std::string::npos);
}

TEST_CASE("npy: headers as numpy and other writers spell them still parse") {
  // Other key order, double quotes, Python 2 longs, a 1-tuple, no trailing comma.
  auto a = ParseNpy(NpyWithHeader("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f4\"}", 24), "a.npy");
  REQUIRE(a.ok());
  CHECK(a->shape == Shape{2, 3});
  auto b = ParseNpy(NpyWithHeader("{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }\n", 5), "b.npy");
  REQUIRE(b.ok());
  CHECK(b->shape == Shape{5});
  auto scalar = ParseNpy(NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 8), "c.npy");
  REQUIRE(scalar.ok());
  CHECK(scalar->values.size() == 1);
  auto fortran = ParseNpy(NpyWithHeader("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16), "d.npy");
  REQUIRE_FALSE(fortran.ok());
  CHECK(fortran.status().message().find("Fortran") != std::string::npos);
  auto missing = ParseNpy(NpyWithHeader("{'descr': '<f4', 'shape': (2, 2), }", 16), "e.npy");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("fortran_order") != std::string::npos);
}

// Found by tests/fuzz/fuzz_npy (tests/fuzz/regressions/npy/
// zero_dim_overflowing_shape.npy): a 0 dimension made the element count 0,
// so the huge other dimensions were accepted and overflowed NumElements of
// any slice of the shape. Now every non-zero dimension is within the limit.
TEST_CASE("npy: a 0 dimension beside huge ones is refused, not an empty tensor (fuzz_npy)") {
  auto r = ParseNpy(NpyWithHeader("{'descr': '<i4', 'fortran_order': False, 'shape': (444444444443, 43, 0, "
                                  "444444444444444443, 3), }"),
                    "fuzz.npy");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsInvalidArgument());
  CHECK(r.status().message().find("fuzz.npy") != std::string::npos);
  CHECK(r.status().message().find("non-zero dimensions") != std::string::npos);
  // A genuinely empty tensor of sane dimensions still parses.
  auto empty = ParseNpy(NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4), }"), "e.npy");
  REQUIRE(empty.ok());
  CHECK(empty->values.empty());
  CHECK(empty->shape == Shape{0, 4});
}
