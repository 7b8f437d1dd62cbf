// The Open Inference Protocol v2 (KServe / Triton "predict protocol v2",
// issue 14 item 3) apart from sockets and the gateway: the served model as
// a v2 client sees it, the REST routes, an inference request decoded from
// its JSON body (with the binary tensor data extension) and checked against
// the model, and the JSON answers. The HTTP routes (oip_http.h), the gRPC
// service (oip_grpc.h), the unit tests and the fuzzers share it.
//
// What is served: one model, one version ("1"), FP32 tensors only; a
// request with another datatype is refused naming the input and FP32.
//
// Untrusted input (issue 14): the JSON is read in one streaming pass
// (nlohmann's SAX parser, no document is built, no recursion), nested at
// most kMaxJsonDepth deep; it may hold no more numbers than the model's
// inputs have elements, no more inputs or outputs than the model has, and
// shapes of at most kMaxTensorRank dimensions whose product is checked
// without overflow (util/limits.h). Binary tensor data is a view into the
// request body, never copied before its size is checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

// The one element type served, as v2 names it.
inline constexpr const char* kOipFp32 = "FP32";
// The one model version served (the protocol's versions are strings).
inline constexpr const char* kOipModelVersion = "1";
// Model metadata: the model's platform (the protocol's "framework/backend").
inline constexpr const char* kOipPlatform = "tessera";
// Server metadata: the protocol extensions served.
inline constexpr const char* kOipBinaryDataExtension = "binary_tensor_data";

// The served model as v2 clients see it.
struct OipModel {
  std::string name;  // the model file's stem ("yolov2-tiny"): /v2/models/{name}
  std::vector<std::string> input_names, output_names;
  std::vector<Shape> input_shapes, output_shapes;
};

// ---- REST routes -------------------------------------------------------------

// What a request target under /v2 asks for (the query string is ignored).
struct OipRoute {
  enum class Kind {
    kServerLive,      // GET /v2/health/live
    kServerReady,     // GET /v2/health/ready
    kServerMetadata,  // GET /v2
    kModelMetadata,   // GET /v2/models/{name}[/versions/{v}]
    kModelReady,      // GET /v2/models/{name}[/versions/{v}]/ready
    kModelInfer,      // POST /v2/models/{name}[/versions/{v}]/infer
    kUnknown,         // under /v2 but none of these
  };
  Kind kind = Kind::kUnknown;
  std::string model, version;  // from the path ("" when absent)
};

// Whether `target` is /v2 or under it ("/v2", "/v2/...", "/v2?...").
bool IsOipTarget(std::string_view target);
// REQUIRES: IsOipTarget(target).
OipRoute ParseOipRoute(std::string_view target);

// NotFound naming what is served when `model` / `version` (""  = any) is
// not the served model; OK otherwise.
Status CheckOipModel(const OipModel& served, const std::string& model, const std::string& version);

// ---- inference requests ------------------------------------------------------

// One input tensor as a request states it, before it is checked.
struct OipTensor {
  std::string name, datatype;
  std::optional<std::vector<int64_t>> shape;
  // Its elements given as numbers (JSON "data", gRPC fp32_contents) ...
  std::optional<std::vector<float>> values;
  // ... whose nesting in JSON (empty: flat, or not JSON) ...
  std::vector<int64_t> nesting;
  // ... or as raw little-endian bytes (binary extension, raw_input_contents),
  // a view into the request, which must outlive this.
  std::optional<std::string_view> bytes;
  // The binary extension's "binary_data_size" parameter, until the bytes are cut.
  std::optional<int64_t> binary_data_size;
};

// An output the client asks for; `binary`: its "binary_data" parameter.
struct OipRequestedOutput {
  std::string name;
  std::optional<bool> binary;
};

struct OipInferRequest {
  std::string id;  // echoed in the answer
  std::vector<OipTensor> inputs;
  std::vector<OipRequestedOutput> outputs;  // empty = every output
  bool binary_data_output = false;          // the request's "binary_data_output" parameter
};

// Decodes the body of POST /v2/models/{name}/infer. `header_length` is the
// Inference-Header-Content-Length header (empty = absent): the JSON is the
// body's first that many bytes and the inputs with a "binary_data_size"
// take their bytes, in order, from the rest, which they must use up exactly.
// Structure only: names, datatypes and shapes are checked by OipModelInputs.
// InvalidArgument saying what is wrong (not JSON, nested too deep, a member
// of the wrong type, a ragged "data" array, more numbers / inputs / outputs
// than the model has, binary sizes that do not add up to the binary part).
// The result's byte views point into `body`.
Result<OipInferRequest> ParseOipInferRequest(std::string_view body, std::string_view header_length,
                                             const OipModel& model);

// The inputs of `request` in the model's input order, each checked: a
// model input named once and every model input present, datatype FP32, the
// model's shape, as many values (or bytes, 4 per element) as the shape holds,
// JSON nesting equal to the shape when nested. Values are moved out of
// `request`. InvalidArgument naming the input and what is expected.
Result<std::vector<TensorData>> OipModelInputs(OipInferRequest* request, const OipModel& model);

// The outputs to answer with, in the order asked (every model output in
// model order when none is asked for), and whether each goes as binary
// data. InvalidArgument for an output the model does not have or one
// asked for twice.
struct OipOutputChoice {
  int output = 0;  // index into OipModel::output_names
  bool binary = false;
};
Result<std::vector<OipOutputChoice>> OipChooseOutputs(const OipInferRequest& request, const OipModel& model);

// ---- answers -----------------------------------------------------------------

// The answer to an inference: a JSON object and, when any output goes as
// binary data, those outputs' bytes after it (little-endian float32, in the
// order of `choice`). `outputs` in the model's output order.
struct OipInferAnswer {
  std::string body;
  size_t json_bytes = 0;  // Inference-Header-Content-Length when binary
  bool binary = false;
};
OipInferAnswer RenderOipInferAnswer(const OipModel& model, const std::string& id,
                                    const std::vector<OipOutputChoice>& choice, const std::vector<TensorData>& outputs);

// Server metadata (GET /v2, gRPC ServerMetadata): "tessera", the
// project's version, and the extensions served (binary_tensor_data).
struct OipServerMetadata {
  std::string name, version;
  std::vector<std::string> extensions;
};
OipServerMetadata OipServer();
// GET /v2: OipServer() as JSON.
std::string OipServerMetadataJson();
// GET /v2/models/{name}: name, versions ["1"], platform "tessera", inputs
// and outputs (name, "FP32", shape).
std::string OipModelMetadataJson(const OipModel& model);
// {"error": message}, the protocol's error object.
std::string OipErrorJson(const std::string& message);

}  // namespace tessera
