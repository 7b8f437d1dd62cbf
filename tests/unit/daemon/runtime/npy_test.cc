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

TEST_CASE("seeded inputs are reproducible and in [-1, 1)") {
  auto a = SeededInput({1000}, 42), b = SeededInput({1000}, 42), c = SeededInput({1000}, 43);
  CHECK(a.values == b.values);
  CHECK(a.values != c.values);
  for (float v : a.values) {
    CHECK(v >= -1.f);
    CHECK(v < 1.f);
  }
}
