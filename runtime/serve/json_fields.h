// Typed reads of a JSON request object. Each read checks the type and range and records the first
// error as an ApiError naming the field (with its path, e.g. "stream_options.include_usage"), so a
// parser is a flat list of reads followed by one error check.
#pragma once

#include "runtime/serve/api_error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::rt::serve {

class JsonFields {
public:
  // `object` must outlive the reader. `prefix` is prepended to field names in errors ("parameters.").
  JsonFields(const nlohmann::json &object, std::string prefix = "");

  bool has(const char *name) const; // present and not null
  const nlohmann::json *get(const char *name) const; // null when absent or JSON null

  // Each returns false (and records the error) when the field is present with a wrong type or out
  // of range; `out` is left untouched when the field is absent or null.
  bool readInt(const char *name, int64_t min, int64_t max, std::optional<int64_t> &out);
  bool readFloat(const char *name, double min, double max, std::optional<double> &out);
  bool readBool(const char *name, std::optional<bool> &out);
  bool readString(const char *name, std::optional<std::string> &out);
  // A string or an array of strings (OpenAI "stop"); at most `maxItems`.
  bool readStringList(const char *name, size_t maxItems, std::vector<std::string> &out);
  // An array of integers within [min, max].
  bool readIntList(const char *name, int64_t min, int64_t max, std::vector<int32_t> &out);
  // Records an error for `name` (used by callers for cross-field checks).
  void fail(const std::string &name, const std::string &message);

  std::string path(const std::string &name) const { return prefix_ + name; }
  bool ok() const { return !error_; }
  const std::optional<ApiError> &error() const { return error_; }

private:
  bool typeError(const char *name, const char *expected);

  const nlohmann::json &object_;
  std::string prefix_;
  std::optional<ApiError> error_;
};

// "a string", "an integer", ... for messages.
const char *jsonTypeName(const nlohmann::json &value);

// Parses a request body: checks UTF-8 and JSON syntax and that the top level is an object.
// Errors are 400s with a message giving the byte offset.
std::optional<ApiError> parseJsonObject(const std::string &body, nlohmann::json &out);

} // namespace kiln::rt::serve
