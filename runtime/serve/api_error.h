// An HTTP-level error: status code plus the fields OpenAI's and TGI's error bodies carry. Every
// rejection the server makes is one of these, so the two wire shapes never drift apart.
#pragma once

#include "runtime/base/status.h"

#include <string>

namespace kiln::rt::serve {

struct ApiError {
  int httpStatus = 400;
  std::string message;
  std::string type = "invalid_request_error"; // OpenAI "type"
  std::string param;                          // the offending request field; "" when none
  std::string code;                           // OpenAI "code"; "" for null
};

// 400 naming the field.
ApiError badRequest(std::string param, std::string message);
// 503 `service_unavailable_error` (sendError adds Retry-After): the server cannot take the
// request now, and a retry may succeed.
ApiError serviceUnavailable(std::string message);
// The 503 of a request that arrives while the server drains (SIGTERM): route handlers and the
// connection layer (connection_server.cc) give the same answer.
ApiError serverShuttingDown();
// 404 `model_not_found`: the client named a model other than the served one.
ApiError modelNotFound(const std::string &requested, const std::string &served);
// An error for a request that reached a handler and threw: a generic 500 that says nothing of
// what was thrown (the text goes to the server's log only).
ApiError unexpectedServerError();
// Maps an engine/model Status to an HTTP error: invalid argument / out of range / not found /
// failed precondition -> 400 (what the request asked of this model cannot be done: gRPC's
// mapping), unavailable -> 503, unimplemented -> 501, anything else -> 500.
ApiError errorFromStatus(const Status &status, std::string param = "");

// {"error":{"message","type","param","code"}} (OpenAI).
std::string openAiErrorBody(const ApiError &error);
// {"error","error_type"} (TGI); error_type is "validation" for 4xx, "overloaded" for 503,
// "generation" otherwise, as TGI names them.
std::string tgiErrorBody(const ApiError &error);

} // namespace kiln::rt::serve
