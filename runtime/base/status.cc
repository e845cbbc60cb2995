#include "runtime/base/status.h"

namespace kiln {

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::kOk: return "OK";
  case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
  case StatusCode::kNotFound: return "NOT_FOUND";
  case StatusCode::kDataLoss: return "DATA_LOSS";
  case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
  case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
  case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
  case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
  case StatusCode::kInternal: return "INTERNAL";
  case StatusCode::kUnavailable: return "UNAVAILABLE";
  case StatusCode::kCancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

std::string Status::toString() const {
  if (isOk())
    return "OK";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

Status Status::withContext(const std::string &context) const {
  if (isOk())
    return *this;
  return Status(code_, context + ": " + message_);
}

} // namespace kiln
