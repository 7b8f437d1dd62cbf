#include "daemon/cluster/oip_codec.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "util/limits.h"

namespace tessera {

// Binary tensor data and raw contents are little-endian float32: copied as is.
static_assert(std::endian::native == std::endian::little, "OIP binary tensor data is read by memcpy");

namespace {

using json = nlohmann::json;

std::string Quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string NameList(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + Quoted(names[i]);
  return s;
}

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

// The parts of `path` between slashes ("/a/b" -> {"a", "b"}).
std::vector<std::string_view> PathParts(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    parts.push_back(path.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

// Where the next JSON value of an inference request belongs, by its path.
enum class Slot {
  kRoot,           // the request object
  kId,             // "id"
  kRequestParams,  // "parameters"
  kRequestParam,   // "parameters".X
  kInputs,         // "inputs"
  kInput,          // "inputs"[i]
  kInputName,
  kInputShape,
  kInputDim,
  kInputDatatype,
  kInputParams,
  kInputParam,
  kInputData,
  kOutputs,  // "outputs"
  kOutput,   // "outputs"[i]
  kOutputName,
  kOutputParams,
  kOutputParam,
  kIgnored,  // a member the protocol does not define here, and everything inside it
};

// SAX handler filling an OipInferRequest as the JSON streams by. State
// instead of recursion: a stack of the open objects and arrays with the
// slot each fills (and, for objects, the member being read).
class InferRequestSax {
 public:
  InferRequestSax(const OipModel& model, int64_t max_values, OipInferRequest* out)
      : model_(model), max_values_(max_values), out_(*out) {}

  // ---- nlohmann::json_sax interface (false stops the parse) ----
  bool null() { return Scalar("null"); }
  bool boolean(bool v) {
    const Slot slot = Next();
    if (slot == Slot::kRequestParam && Key() == "binary_data_output") return out_.binary_data_output = v, true;
    if (slot == Slot::kOutputParam && Key() == "binary_data") return out_.outputs.back().binary = v, true;
    return Scalar("a boolean");
  }
  bool number_integer(json::number_integer_t v) { return Integer(v, v < 0, static_cast<double>(v)); }
  bool number_unsigned(json::number_unsigned_t v) {
    const bool fits = v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    return Integer(fits ? static_cast<int64_t>(v) : -1, !fits, static_cast<double>(v));
  }
  bool number_float(json::number_float_t v, const std::string&) {
    if (Next() == Slot::kInputData) return Value(static_cast<float>(v));
    return Scalar("a fractional number");
  }
  bool string(std::string& v) {
    switch (Next()) {
      case Slot::kId:
        out_.id = std::move(v);
        return true;
      case Slot::kInputName:
        Input().name = std::move(v);
        return true;
      case Slot::kInputDatatype:
        Input().datatype = std::move(v);
        return true;
      case Slot::kOutputName:
        out_.outputs.back().name = std::move(v);
        return true;
      default:
        return Scalar("a string");
    }
  }
  bool binary(json::binary_t&) { return Scalar("binary data"); }

  bool start_object(std::size_t) {
    const Slot slot = Next();
    switch (slot) {
      case Slot::kRoot:
      case Slot::kRequestParams:
      case Slot::kInputParams:
      case Slot::kOutputParams:
        return Push(slot);
      case Slot::kInput:
        if (out_.inputs.size() >= model_.input_names.size())
          return Fail("the request has more inputs than the model's " + std::to_string(model_.input_names.size()) +
                      " (" + NameList(model_.input_names) + ")");
        out_.inputs.emplace_back();
        return Push(slot);
      case Slot::kOutput:
        if (out_.outputs.size() >= model_.output_names.size())
          return Fail("the request asks for more outputs than the model's " +
                      std::to_string(model_.output_names.size()) + " (" + NameList(model_.output_names) + ")");
        out_.outputs.emplace_back();
        return Push(slot);
      default:
        if (Ignorable(slot)) return Push(Slot::kIgnored);
        return Wrong(slot, "an object");
    }
  }
  bool start_array(std::size_t) {
    const Slot slot = Next();
    switch (slot) {
      case Slot::kInputs:
        saw_inputs_ = true;
        return Push(slot);
      case Slot::kOutputs:
        return Push(slot);
      case Slot::kInputShape:
        if (Input().shape) return Fail(Where() + " has \"shape\" twice");
        Input().shape.emplace();
        return Push(slot);
      case Slot::kInputData:
        return DataArray() && Push(slot);
      default:
        if (Ignorable(slot)) return Push(Slot::kIgnored);
        return Wrong(slot, "an array");
    }
  }
  bool key(std::string& k) {
    if (!stack_.empty()) stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return Pop(); }
  bool end_array() {
    if (stack_.back().slot == Slot::kInputData) {
      OipTensor& t = Input();
      const size_t level = open_.size() - 1;
      const int64_t count = open_.back();
      open_.pop_back();
      if (t.nesting[level] < 0)
        t.nesting[level] = count;
      else if (t.nesting[level] != count)
        return Ragged();
    }
    return Pop();
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    return Fail("the request is not valid JSON (syntax error at byte " + std::to_string(position) + ")");
  }

  // ---- results ----
  Status Finish() const {
    if (!error_.ok()) return error_;
    if (!saw_inputs_) return Status::InvalidArgument("the request has no \"inputs\" array");
    return Status::OK();
  }

 private:
  struct Frame {
    Slot slot;
    std::string key;  // objects: the member being read
  };

  const std::string& Key() const { return stack_.back().key; }
  OipTensor& Input() { return out_.inputs.back(); }

  // The slot of the value about to start.
  Slot Next() const {
    if (stack_.empty()) return Slot::kRoot;
    const Frame& f = stack_.back();
    const std::string& k = f.key;
    switch (f.slot) {
      case Slot::kRoot:
        if (k == "id") return Slot::kId;
        if (k == "parameters") return Slot::kRequestParams;
        if (k == "inputs") return Slot::kInputs;
        if (k == "outputs") return Slot::kOutputs;
        return Slot::kIgnored;  // e.g. "model_name"
      case Slot::kRequestParams:
        return Slot::kRequestParam;
      case Slot::kInputs:
        return Slot::kInput;
      case Slot::kInput:
        if (k == "name") return Slot::kInputName;
        if (k == "shape") return Slot::kInputShape;
        if (k == "datatype") return Slot::kInputDatatype;
        if (k == "parameters") return Slot::kInputParams;
        if (k == "data") return Slot::kInputData;
        return Slot::kIgnored;
      case Slot::kInputShape:
        return Slot::kInputDim;
      case Slot::kInputParams:
        return Slot::kInputParam;
      case Slot::kInputData:
        return Slot::kInputData;
      case Slot::kOutputs:
        return Slot::kOutput;
      case Slot::kOutput:
        if (k == "name") return Slot::kOutputName;
        if (k == "parameters") return Slot::kOutputParams;
        return Slot::kIgnored;
      case Slot::kOutputParams:
        return Slot::kOutputParam;
      default:
        return Slot::kIgnored;
    }
  }

  // Parameters other than the binary extension's are any client's own:
  // accepted and ignored, whatever their value.
  bool KnownParam(Slot slot) const {
    return (slot == Slot::kRequestParam && Key() == "binary_data_output") ||
           (slot == Slot::kInputParam && Key() == "binary_data_size") ||
           (slot == Slot::kOutputParam && Key() == "binary_data");
  }
  bool Ignorable(Slot slot) const {
    return slot == Slot::kIgnored ||
           ((slot == Slot::kRequestParam || slot == Slot::kInputParam || slot == Slot::kOutputParam) &&
            !KnownParam(slot));
  }

  // A string, boolean, null or fraction where nothing special is expected.
  bool Scalar(const char* what) {
    const Slot slot = Next();
    if (Ignorable(slot)) return true;
    return Wrong(slot, what);
  }

  // An integer JSON number (`negative_or_huge`: below 0 or beyond int64).
  bool Integer(int64_t v, bool negative_or_huge, double as_double) {
    const Slot slot = Next();
    if (slot == Slot::kInputData) return Value(static_cast<float>(as_double));
    if (slot == Slot::kInputDim) {
      if (negative_or_huge) return Wrong(slot, "a negative or oversized number");
      auto& shape = *Input().shape;
      if (static_cast<int>(shape.size()) >= kMaxTensorRank)
        return Fail(Where() + ".shape has more than " + std::to_string(kMaxTensorRank) +
                    " dimensions (tessera's limit, util/limits.h)");
      shape.push_back(v);
      return true;
    }
    if (slot == Slot::kInputParam && Key() == "binary_data_size") {
      if (negative_or_huge) return Wrong(slot, "a negative or oversized number");
      if (Input().binary_data_size) return Fail(Where() + " has \"binary_data_size\" twice");
      Input().binary_data_size = v;
      return true;
    }
    return Scalar("a number");
  }

  // One number of an input's "data".
  bool Value(float v) {
    OipTensor& t = Input();
    if (stack_.back().slot != Slot::kInputData) {  // "data": 5, a scalar
      if (t.values) return Fail(Where() + " has \"data\" twice");
      t.values.emplace();
      t.nesting.clear();
      open_.clear();
      leaf_depth_ = 0;
    } else {
      const int level = static_cast<int>(open_.size());
      if (leaf_depth_ < 0) {
        if (static_cast<size_t>(level) != t.nesting.size()) return Ragged();
        leaf_depth_ = level;
      } else if (level != leaf_depth_) {
        return Ragged();
      }
      ++open_.back();
    }
    if (values_ >= max_values_)
      return Fail("the request holds more than " + std::to_string(max_values_) +
                  " numbers, more than the model's inputs have elements");
    ++values_;
    t.values->push_back(v);
    return true;
  }

  // An array opening inside (or as) an input's "data".
  bool DataArray() {
    OipTensor& t = Input();
    if (stack_.back().slot != Slot::kInputData) {  // the "data" member itself
      if (t.values) return Fail(Where() + " has \"data\" twice");
      t.values.emplace();
      t.nesting.clear();
      open_.clear();
      leaf_depth_ = -1;
    }
    const size_t level = open_.size();
    if (leaf_depth_ >= 0 && static_cast<int>(level) >= leaf_depth_) return Ragged();
    if (level == t.nesting.size()) t.nesting.push_back(-1);  // known when this array closes
    if (!open_.empty()) ++open_.back();
    open_.push_back(0);
    return true;
  }

  bool Push(Slot slot) {
    if (static_cast<int>(stack_.size()) >= kMaxJsonDepth)
      return Fail("the request is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    stack_.push_back({slot, {}});
    return true;
  }
  bool Pop() {
    stack_.pop_back();
    return true;
  }

  // "inputs[2]" / "outputs[0]": the tensor being read, for messages.
  std::string Where() const {
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      if (it->slot == Slot::kInput) return "inputs[" + std::to_string(out_.inputs.size() - 1) + "]";
      if (it->slot == Slot::kOutput) return "outputs[" + std::to_string(out_.outputs.size() - 1) + "]";
    }
    return "the request";
  }

  // `slot` got a value of the wrong kind (`what`).
  bool Wrong(Slot slot, const std::string& what) {
    std::string want;
    switch (slot) {
      case Slot::kRoot:
        return Fail("the body must be a JSON object (a v2 inference request), not " + what);
      case Slot::kId:
        want = "\"id\" must be a string";
        break;
      case Slot::kRequestParams:
        want = "\"parameters\" must be an object";
        break;
      case Slot::kRequestParam:
        want = "parameter \"binary_data_output\" must be a boolean";
        break;
      case Slot::kInputs:
        want = "\"inputs\" must be an array of objects";
        break;
      case Slot::kInput:
        want = "inputs[" + std::to_string(out_.inputs.size()) + "] must be an object";
        break;
      case Slot::kInputName:
        want = Where() + ".name must be a string";
        break;
      case Slot::kInputShape:
      case Slot::kInputDim:
        want = Where() + ".shape must be an array of non-negative integers";
        break;
      case Slot::kInputDatatype:
        want = Where() + ".datatype must be a string";
        break;
      case Slot::kInputParams:
        want = Where() + ".parameters must be an object";
        break;
      case Slot::kInputParam:
        want = Where() + ".parameters.binary_data_size must be a non-negative integer";
        break;
      case Slot::kInputData:
        want = Where() + ".data must hold FP32 numbers (nested arrays or flat)";
        break;
      case Slot::kOutputs:
        want = "\"outputs\" must be an array of objects";
        break;
      case Slot::kOutput:
        want = "outputs[" + std::to_string(out_.outputs.size()) + "] must be an object";
        break;
      case Slot::kOutputName:
        want = Where() + ".name must be a string";
        break;
      case Slot::kOutputParams:
        want = Where() + ".parameters must be an object";
        break;
      case Slot::kOutputParam:
        want = Where() + ".parameters.binary_data must be a boolean";
        break;
      case Slot::kIgnored:
        return true;
    }
    return Fail(want + ", not " + what);
  }
  bool Ragged() { return Fail(Where() + ".data is ragged (its rows differ in length or depth)"); }
  bool Fail(const std::string& what) {
    if (error_.ok()) error_ = Status::InvalidArgument(what);
    return false;
  }

  const OipModel& model_;
  const int64_t max_values_;
  OipInferRequest& out_;
  Status error_;
  std::vector<Frame> stack_;
  bool saw_inputs_ = false;
  int64_t values_ = 0;         // numbers in every input's "data" so far
  std::vector<int64_t> open_;  // elements so far in each open array of the current "data"
  int leaf_depth_ = -1;        // arrays around the current "data"'s numbers (-1: none seen yet)
};

Result<size_t> ParseHeaderLength(std::string_view text, size_t body_bytes) {
  const std::string shown(text.substr(0, 40));
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string_view::npos)
    return Status::InvalidArgument("Inference-Header-Content-Length '" + shown + "' is not a byte count");
  const uint64_t n = std::stoull(std::string(text));
  if (n > body_bytes)
    return Status::InvalidArgument("Inference-Header-Content-Length " + shown + " exceeds the body's " +
                                   std::to_string(body_bytes) + " bytes");
  return static_cast<size_t>(n);
}

json TensorMetadata(const std::string& name, const Shape& shape) {
  return {{"name", name}, {"datatype", kOipFp32}, {"shape", shape}};
}

}  // namespace

bool IsOipTarget(std::string_view target) {
  const std::string_view path = PathOf(target);
  return path == "/v2" || path.rfind("/v2/", 0) == 0;
}

OipRoute ParseOipRoute(std::string_view target) {
  OipRoute r;
  std::string_view path = PathOf(target);
  if (path == "/v2" || path == "/v2/") return r.kind = OipRoute::Kind::kServerMetadata, r;
  if (path == "/v2/health/live") return r.kind = OipRoute::Kind::kServerLive, r;
  if (path == "/v2/health/ready") return r.kind = OipRoute::Kind::kServerReady, r;
  constexpr std::string_view kModels = "/v2/models/";
  if (path.rfind(kModels, 0) != 0) return r;
  const auto parts = PathParts(path.substr(kModels.size()));
  if (parts.empty() || parts[0].empty()) return r;
  size_t i = 1;
  if (parts.size() >= 3 && parts[1] == "versions") {
    if (parts[2].empty()) return r;
    r.version = parts[2];
    i = 3;
  }
  if (i == parts.size())
    r.kind = OipRoute::Kind::kModelMetadata;
  else if (i + 1 == parts.size() && parts[i] == "ready")
    r.kind = OipRoute::Kind::kModelReady;
  else if (i + 1 == parts.size() && parts[i] == "infer")
    r.kind = OipRoute::Kind::kModelInfer;
  else
    return r;
  r.model = parts[0];
  return r;
}

Status CheckOipModel(const OipModel& served, const std::string& model, const std::string& version) {
  if (model != served.name)
    return Status::NotFound("unknown model " + Quoted(model) + ": this gateway serves " + Quoted(served.name));
  if (!version.empty() && version != kOipModelVersion)
    return Status::NotFound("model " + Quoted(model) + " has no version " + Quoted(version) + " (it has version " +
                            kOipModelVersion + ")");
  return Status::OK();
}

Result<OipInferRequest> ParseOipInferRequest(std::string_view body, std::string_view header_length,
                                             const OipModel& model) {
  size_t json_bytes = body.size();
  const bool has_binary = !header_length.empty();
  if (has_binary) {
    TS_ASSIGN_OR_RETURN(json_bytes, ParseHeaderLength(header_length, body.size()));
  }
  int64_t max_values = 0;
  for (const Shape& s : model.input_shapes) max_values += NumElements(s);
  OipInferRequest request;
  InferRequestSax sax(model, max_values, &request);
  const std::string_view text = body.substr(0, json_bytes);
  // nlohmann's lexer takes a NUL byte for the end of its input, so whatever
  // followed one would go unread: refused instead.
  Status st;
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    st = Status::InvalidArgument("the request is not valid JSON (a NUL byte at byte " + std::to_string(nul) + ")");
  } else {
    json::sax_parse(text.begin(), text.end(), &sax);
    st = sax.Finish();
  }
  if (!st.ok()) {
    if (!has_binary && st.message().find("not valid JSON") != std::string::npos)
      return Status::InvalidArgument(st.message() +
                                     "; binary tensor data after the JSON needs an Inference-Header-Content-Length "
                                     "header giving the JSON's length");
    return st;
  }
  // The binary part: each input with a binary_data_size takes the next so many bytes.
  size_t offset = json_bytes;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    OipTensor& t = request.inputs[i];
    if (!t.binary_data_size) continue;
    const std::string what = "inputs[" + std::to_string(i) + "] (" + Quoted(t.name) + ")";
    if (t.values) return Status::InvalidArgument(what + " has both \"data\" and a binary_data_size");
    if (!has_binary)
      return Status::InvalidArgument(what +
                                     " has a binary_data_size, but the request has no "
                                     "Inference-Header-Content-Length header saying where the JSON ends");
    const uint64_t size = static_cast<uint64_t>(*t.binary_data_size);
    if (size > body.size() - offset)
      return Status::InvalidArgument(what + " announces " + std::to_string(size) + " bytes of binary data, but only " +
                                     std::to_string(body.size() - offset) + " bytes follow");
    t.bytes = body.substr(offset, size);
    offset += size;
  }
  if (offset != body.size())
    return Status::InvalidArgument(std::to_string(body.size() - offset) +
                                   " bytes after the JSON belong to no input (the inputs' binary_data_size add up "
                                   "to " +
                                   std::to_string(offset - json_bytes) + ")");
  return request;
}

Result<std::vector<TensorData>> OipModelInputs(OipInferRequest* request, const OipModel& model) {
  const size_t n = model.input_names.size();
  std::vector<int> from(n, -1);  // model input -> request input
  for (size_t i = 0; i < request->inputs.size(); ++i) {
    const std::string& name = request->inputs[i].name;
    size_t j = 0;
    while (j < n && model.input_names[j] != name) ++j;
    if (j == n)
      return Status::InvalidArgument("the model " + Quoted(model.name) + " has no input " + Quoted(name) +
                                     " (its inputs: " + NameList(model.input_names) + ")");
    if (from[j] >= 0) return Status::InvalidArgument("input " + Quoted(name) + " appears twice");
    from[j] = static_cast<int>(i);
  }
  for (size_t j = 0; j < n; ++j)
    if (from[j] < 0)
      return Status::InvalidArgument("the request has no input " + Quoted(model.input_names[j]) + " (the model " +
                                     Quoted(model.name) + " takes " + NameList(model.input_names) + ")");
  std::vector<TensorData> inputs(n);
  for (size_t j = 0; j < n; ++j) {
    OipTensor& t = request->inputs[from[j]];
    const std::string what = "input " + Quoted(t.name);
    const Shape& want = model.input_shapes[j];
    if (t.datatype != kOipFp32)
      return Status::InvalidArgument(what + " has datatype " +
                                     (t.datatype.empty() ? std::string("(none)") : Quoted(t.datatype)) +
                                     "; tessera serves FP32 tensors only");
    if (!t.shape)
      return Status::InvalidArgument(what + " has no shape (the model expects " + ShapeToString(want) + ")");
    TS_ASSIGN_OR_RETURN(const int64_t elements, CheckedElementCount(*t.shape, what));
    if (*t.shape != want)
      return Status::InvalidArgument(what + " has shape " + ShapeToString(*t.shape) + ", the model expects " +
                                     ShapeToString(want));
    TensorData& d = inputs[j];
    d.shape = want;
    if (t.values) {
      if (static_cast<int64_t>(t.values->size()) != elements)
        return Status::InvalidArgument(what + " has " + std::to_string(t.values->size()) + " values, its shape " +
                                       ShapeToString(want) + " holds " + std::to_string(elements));
      if (t.nesting.size() > 1 && t.nesting != want)
        return Status::InvalidArgument(what + ": \"data\" is nested as " + ShapeToString(t.nesting) +
                                       ", not as its shape " + ShapeToString(want) + " (or give it flat)");
      d.values = std::move(*t.values);
    } else if (t.bytes) {
      const int64_t need = elements * static_cast<int64_t>(sizeof(float));
      if (static_cast<int64_t>(t.bytes->size()) != need)
        return Status::InvalidArgument(what + " has " + std::to_string(t.bytes->size()) +
                                       " bytes of binary data, its shape " + ShapeToString(want) + " of FP32 needs " +
                                       std::to_string(need));
      d.values.resize(static_cast<size_t>(elements));
      if (elements > 0) std::memcpy(d.values.data(), t.bytes->data(), static_cast<size_t>(need));
    } else {
      return Status::InvalidArgument(what + " has no data (neither \"data\" nor binary data)");
    }
  }
  return inputs;
}

Result<std::vector<OipOutputChoice>> OipChooseOutputs(const OipInferRequest& request, const OipModel& model) {
  std::vector<OipOutputChoice> choice;
  if (request.outputs.empty()) {
    for (size_t o = 0; o < model.output_names.size(); ++o)
      choice.push_back({static_cast<int>(o), request.binary_data_output});
    return choice;
  }
  std::vector<bool> taken(model.output_names.size(), false);
  for (const OipRequestedOutput& r : request.outputs) {
    size_t o = 0;
    while (o < model.output_names.size() && model.output_names[o] != r.name) ++o;
    if (o == model.output_names.size())
      return Status::InvalidArgument("the model " + Quoted(model.name) + " has no output " + Quoted(r.name) +
                                     " (its outputs: " + NameList(model.output_names) + ")");
    if (taken[o]) return Status::InvalidArgument("output " + Quoted(r.name) + " is asked for twice");
    taken[o] = true;
    choice.push_back({static_cast<int>(o), r.binary.value_or(request.binary_data_output)});
  }
  return choice;
}

OipInferAnswer RenderOipInferAnswer(const OipModel& model, const std::string& id,
                                    const std::vector<OipOutputChoice>& choice,
                                    const std::vector<TensorData>& outputs) {
  json j = {{"model_name", model.name}, {"model_version", kOipModelVersion}};
  if (!id.empty()) j["id"] = id;
  json list = json::array();
  std::string binary;
  for (const OipOutputChoice& c : choice) {
    const TensorData& t = outputs[c.output];
    json o = TensorMetadata(model.output_names[c.output], t.shape);
    if (c.binary) {
      const size_t bytes = t.values.size() * sizeof(float);
      o["parameters"] = {{"binary_data_size", bytes}};
      binary.append(reinterpret_cast<const char*>(t.values.data()), bytes);
    } else {
      o["data"] = t.values;
    }
    list.push_back(std::move(o));
  }
  j["outputs"] = std::move(list);
  OipInferAnswer a;
  a.body = j.dump();
  a.json_bytes = a.body.size();
  a.binary = std::any_of(choice.begin(), choice.end(), [](const OipOutputChoice& c) { return c.binary; });
  a.body += binary;
  return a;
}

OipServerMetadata OipServer() { return {"tessera", TESSERA_VERSION, {kOipBinaryDataExtension}}; }

std::string OipServerMetadataJson() {
  const OipServerMetadata m = OipServer();
  return json{{"name", m.name}, {"version", m.version}, {"extensions", m.extensions}}.dump();
}

std::string OipModelMetadataJson(const OipModel& model) {
  json inputs = json::array(), outputs = json::array();
  for (size_t i = 0; i < model.input_names.size(); ++i)
    inputs.push_back(TensorMetadata(model.input_names[i], model.input_shapes[i]));
  for (size_t o = 0; o < model.output_names.size(); ++o)
    outputs.push_back(TensorMetadata(model.output_names[o], model.output_shapes[o]));
  return json{{"name", model.name},
              {"versions", json::array({kOipModelVersion})},
              {"platform", kOipPlatform},
              {"inputs", std::move(inputs)},
              {"outputs", std::move(outputs)}}
      .dump();
}

std::string OipErrorJson(const std::string& message) { return json{{"error", message}}.dump(); }

}  // namespace tessera
