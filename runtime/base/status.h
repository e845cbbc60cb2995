// Errors as values (docs/conventions.md rule 4). Status carries a code and a message that names
// what failed; Result<T> holds either a value or a non-OK Status. No exception crosses a module
// boundary.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument, // bad input from a user: flag, config field, request body
  kNotFound,        // a file or tensor that should exist does not
  kDataLoss,        // corrupted artifact: bad hash, truncated file, failed verifier
  kUnimplemented,   // a valid input kiln does not support (yet)
  kFailedPrecondition,
  kOutOfRange, // a limit was exceeded (names the limit)
  kResourceExhausted,
  kInternal,
  kUnavailable,
  kCancelled,
};

const char *statusCodeName(StatusCode code);

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string &message() const { return message_; }
  // "INVALID_ARGUMENT: config.json: field 'rope_scaling.rope_type' ..."
  std::string toString() const;

  // Prefixes context, e.g. status.withContext("loading weights.rank0.bin").
  Status withContext(const std::string &context) const;

private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status okStatus() {
  return Status();
}
inline Status invalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status notFound(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status dataLoss(std::string m) {
  return {StatusCode::kDataLoss, std::move(m)};
}
inline Status unimplemented(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status failedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status outOfRange(std::string m) {
  return {StatusCode::kOutOfRange, std::move(m)};
}
inline Status resourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status internalError(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}
inline Status unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}
inline Status cancelled(std::string m) {
  return {StatusCode::kCancelled, std::move(m)};
}

template <typename T> class [[nodiscard]] Result {
public:
  Result(T value) : state_(std::move(value)) {}
  Result(Status status) : state_(std::move(status)) {
    assert(!std::get<Status>(state_).isOk() && "Result constructed from an OK status");
  }

  bool isOk() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return isOk(); }

  const Status &status() const {
    static const Status kOkStatus;
    return isOk() ? kOkStatus : std::get<Status>(state_);
  }
  T &value() & { return std::get<T>(state_); }
  const T &value() const & { return std::get<T>(state_); }
  T &&value() && { return std::get<T>(std::move(state_)); }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }
  T &operator*() & { return value(); }
  const T &operator*() const & { return value(); }

private:
  std::variant<T, Status> state_;
};

} // namespace kiln

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not OK.
#define KILN_RETURN_IF_ERROR(expr)                                                                 \
  do {                                                                                             \
    ::kiln::Status kiln_status_ = (expr);                                                          \
    if (!kiln_status_.isOk())                                                                      \
      return kiln_status_;                                                                         \
  } while (0)

// `KILN_ASSIGN_OR_RETURN(auto x, makeX());` unwraps a Result or returns its Status.
#define KILN_ASSIGN_OR_RETURN(lhs, expr)                                                           \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_result_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                                                \
  auto tmp = (expr);                                                                               \
  if (!tmp.isOk())                                                                                 \
    return tmp.status();                                                                           \
  lhs = std::move(tmp).value()
