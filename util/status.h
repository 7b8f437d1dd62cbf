// tessera::Status and Result<T>: the one error type of the project
// (STYLE.md, after LevelDB's Status). OK costs one null pointer; an error
// carries a named code and one human-readable line naming what is wrong
// (file, node, device) and, where possible, what to do about it.
#pragma once

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tessera {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,    // the caller's input is wrong (model, cluster file, request)
  kNotSupported,       // valid input we do not handle (an op, an attribute)
  kNotFound,           // a named thing (file, tensor, device) does not exist
  kFailedPrecondition, // the system is not in a state for this (plan not loaded)
  kResourceExhausted,  // out of memory / queue full / arena too small
  kUnavailable,        // a peer or device cannot be reached
  kDeadlineExceeded,   // a deadline passed
  kDataLoss,           // corrupted bytes (bad CRC, truncated file)
  kInternal,           // a bug in tessera
  kIOError,            // the operating system said no
  kPermissionDenied,   // the caller is known and not allowed this (a peer that is not the plan's sender)
  kAlreadyExists,      // the name is taken by something else (another program under a loaded plan id)
  kUnauthenticated,    // the caller did not prove who it is (no or a wrong bearer token)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotSupported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }
  // errno becomes a Status here and nowhere else. `context` names the file or call.
  static Status FromErrno(int err, const std::string& context);

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "InvalidArgument: <message>" or "OK".
  std::string ToString() const;
  // Prefixes the message with more context ("model.onnx: " + message).
  Status WithContext(const std::string& prefix) const;

  bool IsInvalidArgument() const { return code() == StatusCode::kInvalidArgument; }
  bool IsNotSupported() const { return code() == StatusCode::kNotSupported; }
  bool IsNotFound() const { return code() == StatusCode::kNotFound; }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;
};

// Result<T>: a T or a non-OK Status. Factories that can fail return this
// instead of constructors that throw.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                    // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {              // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tessera

#define TESSERA_CONCAT_INNER(a, b) a##b
#define TESSERA_CONCAT(a, b) TESSERA_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when it is not OK.
#define TS_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::tessera::Status _ts_st = (expr);          \
    if (!_ts_st.ok()) return _ts_st;            \
  } while (0)

// `TS_ASSIGN_OR_RETURN(auto x, MakeX());` — unwraps a Result or returns its error.
#define TS_ASSIGN_OR_RETURN(lhs, expr) \
  TS_ASSIGN_OR_RETURN_IMPL(TESSERA_CONCAT(_ts_res_, __LINE__), lhs, expr)
#define TS_ASSIGN_OR_RETURN_IMPL(res, lhs, expr) \
  auto res = (expr);                             \
  if (!res.ok()) return res.status();            \
  lhs = std::move(res).value()
