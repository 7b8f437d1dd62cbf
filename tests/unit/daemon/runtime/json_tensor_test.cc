// JSON request bodies (daemon/runtime/json_tensor.h): the shapes people send,
// and the hostile ones of issue 14 refused with a clear error, never a crash.
#include <catch2/catch.hpp>
#include <chrono>

#include "daemon/runtime/json_tensor.h"
#include "util/limits.h"

using namespace tessera;

namespace {
const Shape kWant = {1, 2, 2};
Result<TensorData> Parse(const std::string& text, int64_t max_values = 4) {
  return ParseJsonTensor(text, kWant, max_values, "request body");
}
std::string ErrorOf(const std::string& text, int64_t max_values = 4) {
  auto r = Parse(text, max_values);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsInvalidArgument());
  CHECK(r.status().message().rfind("request body: ", 0) == 0);
  return r.status().message();
}
}  // namespace

TEST_CASE("json tensor: nested arrays, a flat array, and the inputs object") {
  auto nested = Parse("[[[1, 2], [3, 4.5]]]");
  REQUIRE(nested.ok());
  CHECK(nested->shape == Shape{1, 2, 2});
  CHECK(nested->values == std::vector<float>{1, 2, 3, 4.5f});
  auto flat = Parse("[1,2,3,4]");  // takes the model's shape
  REQUIRE(flat.ok());
  CHECK(flat->shape == kWant);
  auto wrapped = Parse(R"({"id": "x", "meta": {"a": [1, [2]], "b": null}, "inputs": [[5, 6], [7, 8]], "z": true})");
  REQUIRE(wrapped.ok());
  CHECK(wrapped->shape == Shape{2, 2});
  CHECK(wrapped->values == std::vector<float>{5, 6, 7, 8});
  auto scalar = Parse("3");
  REQUIRE(scalar.ok());
  CHECK(scalar->shape.empty());
  auto other = Parse("[1,2]");  // a wrong shape is the gateway's to refuse, naming both shapes
  REQUIRE(other.ok());
  CHECK(other->shape == Shape{2});
}

TEST_CASE("json tensor: malformed bodies name what is wrong") {
  CHECK_THAT(ErrorOf("not json"), Catch::Contains("neither JSON nor .npy"));
  CHECK_THAT(ErrorOf("[[1,2],[3]]"), Catch::Contains("ragged"));
  CHECK_THAT(ErrorOf("[[1,2],3]"), Catch::Contains("ragged"));
  CHECK_THAT(ErrorOf("[1,[2]]"), Catch::Contains("ragged"));
  CHECK_THAT(ErrorOf("[1,\"2\"]"), Catch::Contains("a string"));
  CHECK_THAT(ErrorOf("[1,{\"a\":1}]"), Catch::Contains("object"));
  CHECK_THAT(ErrorOf("{\"data\": [1,2,3,4]}"), Catch::Contains("\"inputs\""));
  CHECK_THAT(ErrorOf("\"hello\""), Catch::Contains("array of numbers"));
  CHECK_THAT(ErrorOf("{\"inputs\": [1], \"inputs\": [2]}"), Catch::Contains("twice"));
}

TEST_CASE("json tensor: JSON nested 60 000 deep is refused at the depth limit, without recursion (issue 14)") {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string deep = std::string(60000, '[') + "1" + std::string(60000, ']');
  CHECK_THAT(ErrorOf(deep), Catch::Contains("nested deeper than " + std::to_string(kMaxJsonDepth)));
  const std::string deep_objects = [] {
    std::string s;
    for (int i = 0; i < 60000; ++i) s += "{\"a\":";
    return s + "1" + std::string(60000, '}');
  }();
  CHECK_THAT(ErrorOf(deep_objects), Catch::Contains("nested deeper"));
  // Inside a member that is skipped, too.
  CHECK_THAT(ErrorOf("{\"meta\": " + deep + ", \"inputs\": [1,2,3,4]}"), Catch::Contains("nested deeper"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  // At the limit is fine.
  std::string ok = std::string(kMaxJsonDepth, '[') + "1" + std::string(kMaxJsonDepth, ']');
  CHECK(Parse(ok).ok());
}

TEST_CASE("json tensor: no more numbers are held than the model's input has (issue 14)") {
  // 1 000 000 numbers where the model takes 4: refused at the fifth.
  std::string many = "[0";
  for (int i = 1; i < 1000000; ++i) many += ",0";
  many += "]";
  CHECK_THAT(ErrorOf(many), Catch::Contains("more than 4 numbers"));
}
