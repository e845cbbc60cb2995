#include "compiler/import/config_fields.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace kiln::compiler {

using Json = nlohmann::json;

ConfigFields::ConfigFields(std::shared_ptr<const Json> root, const Json *object, std::string source,
                           std::string prefix)
    : root_(std::move(root)), object_(object), source_(std::move(source)),
      prefix_(std::move(prefix)) {}

Result<ConfigFields> ConfigFields::parse(const std::string &text, const std::string &source) {
  auto json = std::make_shared<Json>(Json::parse(text, nullptr, /*allow_exceptions=*/false));
  if (json->is_discarded())
    return invalidArgument(source + ": not valid JSON");
  if (!json->is_object())
    return invalidArgument(source + ": expected a JSON object at the top level");
  const Json *object = json.get();
  return ConfigFields(std::move(json), object, source, "");
}

Status ConfigFields::error(const std::string &key, const std::string &what) const {
  return invalidArgument(source_ + ": field '" + field(key) + "' " + what);
}

const Json *ConfigFields::find(const std::string &key) const {
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null())
    return nullptr;
  return &*it;
}

bool ConfigFields::has(const std::string &key) const {
  return find(key) != nullptr;
}

std::string ConfigFields::dump(const std::string &key) const {
  const Json *value = find(key);
  return value ? value->dump() : "null";
}

Status ConfigFields::toInt(const std::string &key, const Json &value, int64_t &out) const {
  if (!value.is_number_integer())
    return error(key, "must be an integer, got " + value.dump());
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return error(key, "is out of range: " + value.dump());
  out = value.get<int64_t>();
  return okStatus();
}

Status ConfigFields::readInt(const std::string &key, int64_t &out, bool required) const {
  const Json *value = find(key);
  if (!value)
    return required ? error(key, "is required but missing") : okStatus();
  return toInt(key, *value, out);
}

Status ConfigFields::readPositiveInt(const std::string &key, int64_t &out, bool required) const {
  const Json *value = find(key);
  KILN_RETURN_IF_ERROR(readInt(key, out, required));
  if (value && out <= 0)
    return error(key, "must be positive, got " + std::to_string(out));
  return okStatus();
}

Status ConfigFields::readDouble(const std::string &key, double &out, bool required) const {
  const Json *value = find(key);
  if (!value)
    return required ? error(key, "is required but missing") : okStatus();
  if (!value->is_number())
    return error(key, "must be a number, got " + value->dump());
  out = value->get<double>();
  if (!std::isfinite(out))
    return error(key, "must be finite");
  return okStatus();
}

Status ConfigFields::readBool(const std::string &key, bool &out) const {
  const Json *value = find(key);
  if (!value)
    return okStatus();
  if (!value->is_boolean())
    return error(key, "must be true or false, got " + value->dump());
  out = value->get<bool>();
  return okStatus();
}

Status ConfigFields::readString(const std::string &key, std::string &out, bool required) const {
  const Json *value = find(key);
  if (!value)
    return required ? error(key, "is required but missing") : okStatus();
  if (!value->is_string())
    return error(key, "must be a string, got " + value->dump());
  out = value->get<std::string>();
  return okStatus();
}

Status ConfigFields::readDoubles(const std::string &key, std::vector<double> &out,
                                 bool required) const {
  const Json *value = find(key);
  if (!value)
    return required ? error(key, "is required but missing") : okStatus();
  if (!value->is_array())
    return error(key, "must be a list of numbers, got " + value->dump());
  std::vector<double> numbers;
  for (const Json &element : *value) {
    if (!element.is_number() || !std::isfinite(element.get<double>()))
      return error(key, "must be a list of finite numbers, got " + element.dump() + " in it");
    numbers.push_back(element.get<double>());
  }
  out = std::move(numbers);
  return okStatus();
}

Status ConfigFields::readStrings(const std::string &key, std::vector<std::string> &out) const {
  const Json *value = find(key);
  if (!value)
    return okStatus();
  if (!value->is_array())
    return error(key, "must be a list of strings, got " + value->dump());
  std::vector<std::string> strings;
  for (const Json &element : *value) {
    if (!element.is_string())
      return error(key, "must be a list of strings, got " + element.dump() + " in it");
    strings.push_back(element.get<std::string>());
  }
  out = std::move(strings);
  return okStatus();
}

Status ConfigFields::readTokenIds(const std::string &key, std::vector<int32_t> &out) const {
  const Json *value = find(key);
  if (!value)
    return okStatus();
  auto append = [&](const Json &element) -> Status {
    int64_t id = 0;
    KILN_RETURN_IF_ERROR(toInt(key, element, id));
    if (id < 0)
      return okStatus();
    if (id > std::numeric_limits<int32_t>::max())
      return error(key, "must hold token ids below 2^31, got " + std::to_string(id));
    out.push_back(static_cast<int32_t>(id));
    return okStatus();
  };
  if (!value->is_array())
    return append(*value);
  for (const Json &element : *value)
    KILN_RETURN_IF_ERROR(append(element));
  return okStatus();
}

Result<std::optional<ConfigFields>> ConfigFields::object(const std::string &key) const {
  const Json *value = find(key);
  if (!value)
    return std::optional<ConfigFields>();
  if (!value->is_object())
    return error(key, "must be an object or null, got " + value->dump());
  return std::optional<ConfigFields>(ConfigFields(root_, value, source_, prefix_ + key + "."));
}

std::vector<std::string> ConfigFields::keys() const {
  std::vector<std::string> out;
  for (auto it = object_->begin(); it != object_->end(); ++it)
    out.push_back(it.key());
  return out;
}

Status ConfigFields::readFirstString(const std::string &key, std::string &out) const {
  const Json *value = find(key);
  if (!value)
    return okStatus();
  if (!value->is_array() || value->empty() || !(*value)[0].is_string())
    return error(key, "must be a non-empty list of strings");
  out = (*value)[0].get<std::string>();
  return okStatus();
}

} // namespace kiln::compiler
