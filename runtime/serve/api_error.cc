#include "runtime/serve/api_error.h"

#include "runtime/serve/json_text.h"

#include <nlohmann/json.hpp>

namespace kiln::rt::serve {

ApiError badRequest(std::string param, std::string message) {
  ApiError error;
  error.httpStatus = 400;
  error.param = std::move(param);
  error.message = std::move(message);
  return error;
}

ApiError serviceUnavailable(std::string message) {
  ApiError error;
  error.httpStatus = 503;
  error.type = "service_unavailable_error";
  error.message = std::move(message);
  return error;
}

ApiError serverShuttingDown() {
  return serviceUnavailable("the server is shutting down and accepts no new requests");
}

ApiError modelNotFound(const std::string &requested, const std::string &served) {
  ApiError error;
  error.httpStatus = 404;
  error.param = "model";
  error.code = "model_not_found";
  error.type = "NotFoundError";
  error.message =
      "the model '" + requested + "' does not exist; this server serves '" + served + "'";
  return error;
}

ApiError unexpectedServerError() {
  ApiError error;
  error.httpStatus = 500;
  error.type = "internal_server_error";
  error.message = "internal server error; the server log has the details";
  return error;
}

ApiError errorFromStatus(const Status &status, std::string param) {
  ApiError error;
  switch (status.code()) {
  case StatusCode::kInvalidArgument:
  case StatusCode::kOutOfRange:
  case StatusCode::kNotFound:
  case StatusCode::kFailedPrecondition:
    error.httpStatus = 400;
    break;
  case StatusCode::kUnimplemented:
    error.httpStatus = 501;
    error.type = "not_implemented_error";
    break;
  case StatusCode::kUnavailable:
  case StatusCode::kResourceExhausted:
    error = serviceUnavailable("");
    break;
  default:
    error.httpStatus = 500;
    error.type = "internal_server_error";
    break;
  }
  error.message = status.message();
  error.param = std::move(param);
  return error;
}

std::string openAiErrorBody(const ApiError &error) {
  nlohmann::json body = {{"error",
                          {{"message", error.message},
                           {"type", error.type},
                           {"param", error.param.empty() ? nlohmann::json() : nlohmann::json(error.param)},
                           {"code", error.code.empty() ? nlohmann::json() : nlohmann::json(error.code)}}}};
  return dumpJson(body);
}

std::string tgiErrorBody(const ApiError &error) {
  const char *type = error.httpStatus == 503   ? "overloaded"
                     : error.httpStatus < 500 ? "validation"
                                              : "generation";
  return dumpJson(nlohmann::json{{"error", error.message}, {"error_type", type}});
}

} // namespace kiln::rt::serve
