#include "util/status.h"

#include <cerrno>
#include <cstring>

namespace tessera {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kUnauthenticated: return "Unauthenticated";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) rep_ = std::make_shared<Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(rep_->code)) + ": " + rep_->message;
}

Status Status::WithContext(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(rep_->code, prefix + ": " + rep_->message);
}

Status Status::FromErrno(int err, const std::string& context) {
  std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ENOENT: return NotFound(msg);
    case EACCES:
    case EPERM:
    case EINVAL: return InvalidArgument(msg);
    case ENOMEM:
    case ENOSPC: return ResourceExhausted(msg);
    case ETIMEDOUT: return DeadlineExceeded(msg);
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH: return Unavailable(msg);
    default: return IOError(msg);
  }
}

}  // namespace tessera
