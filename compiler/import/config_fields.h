// Typed reads of one JSON object of a model's config files (config.json, generation_config.json);
// every error names the file and the dotted field path, e.g.
//   m/config.json: field 'rope_scaling.factor' must be positive
// Absent and null are the same: transformers writes null for "use the default". Model families
// read their own keys through this (compiler/models/<family>.cc).
#pragma once

#include "runtime/base/status.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler {

class ConfigFields {
public:
  // Parses `text` (a JSON object); `source` names the file in messages.
  static Result<ConfigFields> parse(const std::string &text, const std::string &source);

  const std::string &source() const { return source_; }
  // The dotted path of `key` in this object ("rope_scaling.factor").
  std::string field(const std::string &key) const { return prefix_ + key; }
  Status error(const std::string &key, const std::string &what) const;
  bool has(const std::string &key) const;
  // The value as JSON text ("null" when absent), for messages.
  std::string dump(const std::string &key) const;

  // Each leaves `out` unchanged when the key is absent (or null) and not required.
  Status readInt(const std::string &key, int64_t &out, bool required = false) const;
  Status readPositiveInt(const std::string &key, int64_t &out, bool required = false) const;
  Status readDouble(const std::string &key, double &out, bool required = false) const;
  Status readBool(const std::string &key, bool &out) const;
  Status readString(const std::string &key, std::string &out, bool required = false) const;
  Status readDoubles(const std::string &key, std::vector<double> &out, bool required = false) const;
  Status readStrings(const std::string &key, std::vector<std::string> &out) const;
  // A token id field that may be one integer or a list of them (eos_token_id in Llama 3); negative
  // ids (early conversions' "none") are skipped.
  Status readTokenIds(const std::string &key, std::vector<int32_t> &out) const;
  // A nested object: nullopt when absent or null, an error when not an object.
  Result<std::optional<ConfigFields>> object(const std::string &key) const;
  // This object's keys, in the file's order.
  std::vector<std::string> keys() const;
  // The first element of a list of strings (architectures); "" when absent.
  Status readFirstString(const std::string &key, std::string &out) const;

private:
  ConfigFields(std::shared_ptr<const nlohmann::json> root, const nlohmann::json *object,
               std::string source, std::string prefix);
  const nlohmann::json *find(const std::string &key) const;
  Status toInt(const std::string &key, const nlohmann::json &value, int64_t &out) const;

  std::shared_ptr<const nlohmann::json> root_; // keeps object_ alive
  const nlohmann::json *object_;
  std::string source_;
  std::string prefix_;
};

} // namespace kiln::compiler
