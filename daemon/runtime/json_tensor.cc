#include "daemon/runtime/json_tensor.h"

#include <nlohmann/json.hpp>

#include "util/limits.h"

namespace tessera {

namespace {

// SAX handler that flattens nested arrays of numbers as they stream by.
// State instead of recursion: `shape_` is fixed by the first path down to a
// number (`leaf_depth_` arrays deep) and every later array must agree.
class TensorSax {
 public:
  using json = nlohmann::json;

  TensorSax(int64_t max_values, const std::string& origin) : max_values_(max_values), origin_(origin) {}

  // ---- nlohmann::json_sax interface (false stops the parse) ----
  bool null() { return Scalar("null"); }
  bool boolean(bool) { return Scalar("a boolean"); }
  bool string(std::string&) { return Scalar("a string"); }
  bool binary(json::binary_t&) { return Scalar("binary data"); }
  bool number_integer(json::number_integer_t v) { return Number(static_cast<float>(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Number(static_cast<float>(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return Number(static_cast<float>(v)); }

  bool start_object(std::size_t) {
    const Role role = RoleOfNextValue();
    if (!Enter()) return false;
    switch (role) {
      case Role::kSkip: ++skip_; return true;
      case Role::kTopObject: top_object_ = true; return true;
      case Role::kTensor: break;
    }
    return Fail("the tensor holds an object where numbers belong");
  }
  bool key(std::string& k) {
    if (skip_ == 0 && depth_ == 1) {  // a member of the top-level object
      member_is_inputs_ = k == "inputs";
      if (member_is_inputs_ && found_inputs_) return Fail("\"inputs\" appears twice");
      found_inputs_ = found_inputs_ || member_is_inputs_;
    }
    return true;
  }
  bool end_object() {
    --depth_;
    if (skip_ > 0) --skip_;
    return true;
  }
  bool start_array(std::size_t) {
    const Role role = RoleOfNextValue();
    if (!Enter()) return false;
    if (role == Role::kSkip) return ++skip_, true;
    in_tensor_ = true;
    const size_t level = open_.size();
    if (leaf_depth_ >= 0 && static_cast<int>(level) >= leaf_depth_) return Ragged();
    if (level == shape_.size()) shape_.push_back(-1);  // known when this array closes
    if (!open_.empty()) ++open_.back();
    open_.push_back(0);
    return true;
  }
  bool end_array() {
    --depth_;
    if (skip_ > 0) return --skip_, true;
    const size_t level = open_.size() - 1;
    const int64_t count = open_.back();
    open_.pop_back();
    if (shape_[level] < 0) shape_[level] = count;
    else if (shape_[level] != count) return Ragged();
    if (open_.empty()) in_tensor_ = false, tensor_done_ = true;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    if (error_.ok())
      error_ = Status::InvalidArgument(origin_ + ": the body is neither JSON nor .npy (JSON syntax error at byte " +
                                       std::to_string(position) + ")");
    return false;
  }

  // ---- results ----
  Status Finish() {
    if (!error_.ok()) return error_;
    if (top_object_ && !found_inputs_)
      return Status::InvalidArgument(origin_ + ": the JSON object has no \"inputs\" member (the tensor)");
    if (!tensor_done_) return Status::InvalidArgument(origin_ + ": the JSON body must be an array of numbers");
    return Status::OK();
  }
  Shape& shape() { return shape_; }
  std::vector<float>& values() { return values_; }

 private:
  // What the value about to start is: part of the tensor, the top-level
  // {"inputs": ...} object, or something to skip (inside a member of that
  // object other than "inputs").
  enum class Role { kTensor, kTopObject, kSkip };
  Role RoleOfNextValue() const {
    if (skip_ > 0) return Role::kSkip;
    if (in_tensor_) return Role::kTensor;
    if (depth_ == 0) return Role::kTopObject;  // an array here is the tensor itself
    return member_is_inputs_ ? Role::kTensor : Role::kSkip;
  }
  // Counts one level of nesting; false beyond kMaxJsonDepth.
  bool Enter() {
    if (++depth_ > kMaxJsonDepth)
      return Fail("the JSON is nested deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels (a tensor needs one per dimension)");
    return true;
  }
  bool Scalar(const char* what) {
    if (depth_ == 0) return Fail(std::string("the JSON body must be an array of numbers, not ") + what);
    if (RoleOfNextValue() == Role::kSkip) return true;  // a value of a member other than "inputs"
    return Fail(std::string("the tensor holds ") + what + " where numbers belong");
  }
  bool Number(float v) {
    if (depth_ > 0 && RoleOfNextValue() == Role::kSkip) return true;
    const int level = static_cast<int>(open_.size());
    if (leaf_depth_ < 0) {
      if (static_cast<size_t>(level) != shape_.size()) return Ragged();
      leaf_depth_ = level;
    } else if (level != leaf_depth_) {
      return Ragged();
    }
    if (static_cast<int64_t>(values_.size()) >= max_values_)
      return Fail("the JSON body holds more than " + std::to_string(max_values_) +
                  " numbers, more than the model's input shape has");
    values_.push_back(v);
    if (open_.empty()) tensor_done_ = true;  // a scalar tensor
    else ++open_.back();
    return true;
  }
  bool Ragged() { return Fail("ragged JSON array (its rows differ in length or depth)"); }
  bool Fail(const std::string& what) {
    if (error_.ok()) error_ = Status::InvalidArgument(origin_ + ": " + what);
    return false;
  }

  const int64_t max_values_;
  const std::string& origin_;
  Status error_;
  int depth_ = 0;  // open arrays and objects, all of them
  int skip_ = 0;   // > 0: inside a skipped value, this many levels deep
  bool top_object_ = false, found_inputs_ = false, member_is_inputs_ = false;
  bool in_tensor_ = false, tensor_done_ = false;
  Shape shape_;
  std::vector<int64_t> open_;  // elements seen so far in each open array of the tensor
  int leaf_depth_ = -1;
  std::vector<float> values_;
};

}  // namespace

Result<TensorData> ParseJsonTensor(const std::string& text, const Shape& want, int64_t max_values,
                                   const std::string& origin) {
  TensorSax sax(max_values, origin);
  nlohmann::json::sax_parse(text, &sax);
  TS_RETURN_IF_ERROR(sax.Finish());
  TensorData t;
  t.shape = std::move(sax.shape());
  t.values = std::move(sax.values());
  // A flat array of the right length takes the model's shape.
  if (t.shape.size() == 1 && static_cast<int64_t>(t.values.size()) == NumElements(want)) t.shape = want;
  return t;
}

}  // namespace tessera
