// Open Inference Protocol v2 messages (daemon/cluster/oip_codec.h): the
// requests v2 clients send (JSON flat and nested, the binary tensor data
// extension), checked against the model, and the hostile or wrong ones
// refused with one clear error naming what is wrong, never a crash.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>

#include "daemon/cluster/oip_codec.h"
#include "util/limits.h"

using namespace tessera;

namespace {

// A model with two inputs and two outputs, small enough to write by hand.
OipModel TwoByTwo() {
  OipModel m;
  m.name = "tiny";
  m.input_names = {"x", "y"};
  m.input_shapes = {{1, 2, 2}, {3}};
  m.output_names = {"out", "aux"};
  m.output_shapes = {{1, 4}, {2}};
  return m;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Parse + check: the inputs in model order, or the error.
Result<std::vector<TensorData>> Inputs(const std::string& body, const std::string& header_length = "") {
  const OipModel m = TwoByTwo();
  TS_ASSIGN_OR_RETURN(OipInferRequest r, ParseOipInferRequest(body, header_length, m));
  return OipModelInputs(&r, m);
}

std::string ErrorOf(const std::string& body, const std::string& header_length = "") {
  auto r = Inputs(body, header_length);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().IsInvalidArgument());
  return r.status().message();
}

const char* kY = R"({"name": "y", "shape": [3], "datatype": "FP32", "data": [7, 8, 9]})";

std::string WithX(const std::string& x) { return std::string(R"({"inputs": [)") + x + ", " + kY + "]}"; }

}  // namespace

TEST_CASE("oip request: flat and nested data, any input order, unknown members ignored") {
  const std::string flat = R"({"id": "42", "model_name": "tiny", "parameters": {"custom": {"a": [1]}, "n": 3},
      "inputs": [)" + std::string(kY) +
                           R"(, {"name": "x", "shape": [1, 2, 2], "datatype": "FP32",
      "parameters": {"note": "hi"}, "data": [1, 2.5, -3, 4e2]}]})";
  const OipModel m = TwoByTwo();
  auto r = ParseOipInferRequest(flat, "", m);
  REQUIRE(r.ok());
  CHECK(r->id == "42");
  auto in = OipModelInputs(&*r, m);
  REQUIRE(in.ok());
  REQUIRE(in->size() == 2);
  CHECK((*in)[0].shape == Shape{1, 2, 2});  // model order: x first
  CHECK((*in)[0].values == std::vector<float>{1, 2.5f, -3, 400});
  CHECK((*in)[1].values == std::vector<float>{7, 8, 9});

  auto nested = Inputs(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [[[1, 2], [3, 4]]]})"));
  REQUIRE(nested.ok());
  CHECK((*nested)[0].values == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("oip request: malformed JSON, wrong member types and ragged data are refused") {
  CHECK_THAT(ErrorOf("{\"inputs\": [ {"), Catch::Contains("not valid JSON"));
  CHECK_THAT(ErrorOf("[1, 2, 3]"), Catch::Contains("must be a JSON object"));
  CHECK_THAT(ErrorOf("{}"), Catch::Contains("no \"inputs\""));
  CHECK_THAT(ErrorOf(R"({"inputs": {"name": "x"}})"), Catch::Contains("\"inputs\" must be an array"));
  CHECK_THAT(ErrorOf(R"({"id": 5, "inputs": []})"), Catch::Contains("\"id\" must be a string"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2.5, 2], "datatype": "FP32", "data": [1, 2, 3, 4]})")),
             Catch::Contains("inputs[0].shape must be an array of non-negative integers"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, "2", 3, 4]})")),
             Catch::Contains("inputs[0].data must hold FP32 numbers"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [[1, 2], [3]]})")),
             Catch::Contains("inputs[0].data is ragged"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [[1, 2], 3, 4]})")),
             Catch::Contains("ragged"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 2, 3, 4],
      "data": [1, 2, 3, 4]})")),
             Catch::Contains("\"data\" twice"));
  CHECK_THAT(ErrorOf(R"({"inputs": [], "parameters": {"binary_data_output": "yes"}})"),
             Catch::Contains("\"binary_data_output\" must be a boolean"));
}

TEST_CASE("oip request: names, datatypes, shapes and sizes are checked against the model") {
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "INT64", "data": [1, 2, 3, 4]})")),
             Catch::Contains("input 'x' has datatype 'INT64'; tessera serves FP32 tensors only"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "data": [1, 2, 3, 4]})")),
             Catch::Contains("datatype (none)"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]})")),
             Catch::Contains("input 'x' has shape [2,2], the model expects [1,2,2]"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "datatype": "FP32", "data": [1, 2, 3, 4]})")),
             Catch::Contains("input 'x' has no shape"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 2, 3]})")),
             Catch::Contains("input 'x' has 3 values, its shape [1,2,2] holds 4"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [[1, 2, 3, 4]]})")),
             Catch::Contains("nested as [1,4], not as its shape [1,2,2]"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32"})")),
             Catch::Contains("input 'x' has no data"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "z", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]})")),
             Catch::Contains("the model 'tiny' has no input 'z' (its inputs: 'x', 'y')"));
  CHECK_THAT(ErrorOf(R"({"inputs": [)" + std::string(kY) + "]}"), Catch::Contains("the request has no input 'x'"));
  CHECK_THAT(ErrorOf(std::string(R"({"inputs": [)") + kY + ", " + kY + "]}"),
             Catch::Contains("input 'y' appears twice"));
  CHECK_THAT(ErrorOf(std::string(R"({"inputs": [)") + kY + ", " + kY + ", " + kY + "]}"),
             Catch::Contains("more inputs than the model's 2"));
}

TEST_CASE("oip request: overflowing and oversized shapes, and more numbers than the model holds") {
  // 2^40 x 2^40 overflows int64 when multiplied: refused naming the limit.
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1099511627776, 1099511627776], "datatype": "FP32",
      "data": [1]})")),
             Catch::Contains("elements"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [18446744073709551615], "datatype": "FP32", "data": [1]})")),
             Catch::Contains("non-negative integers, not a negative or oversized number"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [-1, 4], "datatype": "FP32", "data": [1]})")),
             Catch::Contains("non-negative integers"));
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 1, 1, 1, 1, 1, 1, 1, 1], "datatype": "FP32",
      "data": [1]})")),
             Catch::Contains("more than 8 dimensions"));
  // The model's inputs hold 4 + 3 numbers: the eighth stops the parse.
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 2, 3, 4, 5]})")),
             Catch::Contains("more than 7 numbers"));
  // 200 000 nested arrays: refused at the depth limit at once, no recursion.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string deep = R"({"inputs": [{"name": "x", "data": )" + std::string(200000, '[') + "]}]}";
  CHECK_THAT(ErrorOf(deep), Catch::Contains("nested deeper than " + std::to_string(kMaxJsonDepth)));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

TEST_CASE("oip request: binary tensor data after the JSON") {
  const std::vector<float> x = {1.5f, -2, 3, 4}, y = {7, 8, 9};
  const std::string json = R"({"inputs": [{"name": "y", "shape": [3], "datatype": "FP32",
      "parameters": {"binary_data_size": 12}}, {"name": "x", "shape": [1, 2, 2], "datatype": "FP32",
      "parameters": {"binary_data_size": 16}}]})";
  const std::string body = json + Floats(y) + Floats(x);  // in the order of "inputs"
  const std::string length = std::to_string(json.size());
  auto in = Inputs(body, length);
  REQUIRE(in.ok());
  CHECK((*in)[0].values == x);
  CHECK((*in)[1].values == y);

  // Binary for one input, JSON for the other.
  const std::string mixed = R"({"inputs": [{"name": "x", "shape": [1, 2, 2], "datatype": "FP32",
      "parameters": {"binary_data_size": 16}}, )" +
                            std::string(kY) + "]}";
  auto m = Inputs(mixed + Floats(x), std::to_string(mixed.size()));
  REQUIRE(m.ok());
  CHECK((*m)[0].values == x);

  CHECK_THAT(ErrorOf(body), Catch::Contains("needs an Inference-Header-Content-Length header"));
  // A NUL byte ends nlohmann's input: what follows it must not go unread.
  CHECK_THAT(ErrorOf(WithX(R"({"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]})") +
                     std::string("\0garbage", 8)),
             Catch::Contains("a NUL byte at byte"));
  CHECK_THAT(ErrorOf(body + "z", length), Catch::Contains("1 bytes after the JSON belong to no input"));
  CHECK_THAT(ErrorOf(body.substr(0, body.size() - 1), length), Catch::Contains("announces 16 bytes"));
  CHECK_THAT(ErrorOf(body, "12abc"), Catch::Contains("is not a byte count"));
  CHECK_THAT(ErrorOf(body, std::to_string(body.size() + 1)), Catch::Contains("exceeds the body's"));
  CHECK_THAT(ErrorOf(json, ""), Catch::Contains("has a binary_data_size, but the request has no"));
  // Sizes that add up but do not match the shape.
  const std::string short_x = R"({"inputs": [{"name": "x", "shape": [1, 2, 2], "datatype": "FP32",
      "parameters": {"binary_data_size": 12}}, )" +
                              std::string(kY) + "]}";
  CHECK_THAT(ErrorOf(short_x + Floats({1, 2, 3}), std::to_string(short_x.size())),
             Catch::Contains("input 'x' has 12 bytes of binary data, its shape [1,2,2] of FP32 needs 16"));
  const std::string both = R"({"inputs": [{"name": "x", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 2, 3, 4],
      "parameters": {"binary_data_size": 16}}, )" +
                           std::string(kY) + "]}";
  CHECK_THAT(ErrorOf(both + Floats(x), std::to_string(both.size())),
             Catch::Contains("has both \"data\" and a binary_data_size"));
  CHECK_THAT(ErrorOf(R"({"inputs": [{"name": "x", "parameters": {"binary_data_size": -4}}]})"),
             Catch::Contains("binary_data_size must be a non-negative integer"));
}

TEST_CASE("oip outputs: all by default, by name, binary per output or for all") {
  const OipModel m = TwoByTwo();
  OipInferRequest r;
  auto all = OipChooseOutputs(r, m);
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK(((*all)[0].output == 0 && !(*all)[0].binary && (*all)[1].output == 1));

  auto parsed = ParseOipInferRequest(R"({"inputs": [], "parameters": {"binary_data_output": true},
      "outputs": [{"name": "aux", "parameters": {"binary_data": false}}, {"name": "out"}]})",
                                     "", m);
  REQUIRE(parsed.ok());
  auto some = OipChooseOutputs(*parsed, m);
  REQUIRE(some.ok());
  REQUIRE(some->size() == 2);
  CHECK(((*some)[0].output == 1 && !(*some)[0].binary));  // its own parameter wins
  CHECK(((*some)[1].output == 0 && (*some)[1].binary));   // the request's

  auto unknown = ParseOipInferRequest(R"({"inputs": [], "outputs": [{"name": "nope"}]})", "", m);
  REQUIRE(unknown.ok());
  auto bad = OipChooseOutputs(*unknown, m);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("has no output 'nope' (its outputs: 'out', 'aux')"));
  auto twice = ParseOipInferRequest(R"({"inputs": [], "outputs": [{"name": "out"}, {"name": "out"}]})", "", m);
  REQUIRE(twice.ok());
  CHECK_FALSE(OipChooseOutputs(*twice, m).ok());
  auto many =
      ParseOipInferRequest(R"({"inputs": [], "outputs": [{"name": "a"}, {"name": "b"}, {"name": "c"}]})", "", m);
  REQUIRE_FALSE(many.ok());
  CHECK_THAT(many.status().message(), Catch::Contains("more outputs than the model's 2"));
}

TEST_CASE("oip answers: JSON outputs, binary outputs after the JSON with its length") {
  const OipModel m = TwoByTwo();
  const std::vector<TensorData> outputs = {{{1, 4}, {1, 2, 3, 0.1f}}, {{2}, {5, 6}}};
  const OipInferAnswer json = RenderOipInferAnswer(m, "req-7", {{0, false}, {1, false}}, outputs);
  CHECK_FALSE(json.binary);
  CHECK(json.json_bytes == json.body.size());
  CHECK_THAT(json.body, Catch::Contains(R"("model_name":"tiny")") && Catch::Contains(R"("id":"req-7")") &&
                            Catch::Contains(R"("datatype":"FP32")") && Catch::Contains(R"("shape":[1,4])") &&
                            Catch::Contains(R"("data":[5.0,6.0])"));

  const OipInferAnswer bin = RenderOipInferAnswer(m, "", {{1, true}, {0, false}}, outputs);
  CHECK(bin.binary);
  REQUIRE(bin.body.size() == bin.json_bytes + 8);
  const std::string head = bin.body.substr(0, bin.json_bytes);
  CHECK_THAT(head, Catch::Contains(R"("parameters":{"binary_data_size":8})") && !Catch::Contains("\"id\""));
  float tail[2];
  std::memcpy(tail, bin.body.data() + bin.json_bytes, 8);
  CHECK((tail[0] == 5 && tail[1] == 6));
}

TEST_CASE("oip routes: health, metadata, versions, infer, and another model is NotFound") {
  using K = OipRoute::Kind;
  CHECK(IsOipTarget("/v2"));
  CHECK(IsOipTarget("/v2/health/live"));
  CHECK(IsOipTarget("/v2?x=1"));
  CHECK_FALSE(IsOipTarget("/v1/infer"));
  CHECK_FALSE(IsOipTarget("/v20"));
  CHECK(ParseOipRoute("/v2").kind == K::kServerMetadata);
  CHECK(ParseOipRoute("/v2/health/live").kind == K::kServerLive);
  CHECK(ParseOipRoute("/v2/health/ready?verbose=1").kind == K::kServerReady);
  auto meta = ParseOipRoute("/v2/models/tiny");
  CHECK((meta.kind == K::kModelMetadata && meta.model == "tiny" && meta.version.empty()));
  auto ready = ParseOipRoute("/v2/models/tiny/versions/1/ready");
  CHECK((ready.kind == K::kModelReady && ready.model == "tiny" && ready.version == "1"));
  auto infer = ParseOipRoute("/v2/models/tiny/infer");
  CHECK((infer.kind == K::kModelInfer && infer.model == "tiny"));
  CHECK(ParseOipRoute("/v2/models/tiny/versions/3/infer").version == "3");
  CHECK(ParseOipRoute("/v2/models/versions").kind == K::kModelMetadata);  // a model called "versions"
  for (const char* bad : {"/v2/models/", "/v2/models/tiny/explain", "/v2/health", "/v2/models/tiny/versions//infer",
                          "/v2/models/tiny/ready/x", "/v2/repository/index"})
    CHECK(ParseOipRoute(bad).kind == K::kUnknown);

  const OipModel m = TwoByTwo();
  CHECK(CheckOipModel(m, "tiny", "").ok());
  CHECK(CheckOipModel(m, "tiny", "1").ok());
  const Status other = CheckOipModel(m, "resnet", "");
  CHECK(other.code() == StatusCode::kNotFound);
  CHECK_THAT(other.message(), Catch::Contains("unknown model 'resnet': this gateway serves 'tiny'"));
  CHECK(CheckOipModel(m, "tiny", "2").code() == StatusCode::kNotFound);
}

TEST_CASE("oip metadata: server extensions and the model's FP32 tensors") {
  CHECK_THAT(OipServerMetadataJson(),
             Catch::Contains(R"("extensions":["binary_tensor_data"])") && Catch::Contains(R"("name":"tessera")"));
  CHECK_THAT(OipModelMetadataJson(TwoByTwo()), Catch::Contains(R"({"datatype":"FP32","name":"x","shape":[1,2,2]})") &&
                                                   Catch::Contains(R"({"datatype":"FP32","name":"aux","shape":[2]})") &&
                                                   Catch::Contains(R"("versions":["1"])"));
  CHECK(OipErrorJson("bad \"thing\"") == R"({"error":"bad \"thing\""})");
}
