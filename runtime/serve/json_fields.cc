#include "runtime/serve/json_fields.h"

#include "runtime/serve/json_text.h"

#include <cmath>

namespace kiln::rt::serve {
namespace {

std::string numberText(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15)
    return std::to_string(static_cast<int64_t>(v));
  std::string s = std::to_string(v);
  while (!s.empty() && s.back() == '0')
    s.pop_back();
  return s;
}

} // namespace

const char *jsonTypeName(const nlohmann::json &value) {
  switch (value.type()) {
  case nlohmann::json::value_t::null:
    return "null";
  case nlohmann::json::value_t::object:
    return "an object";
  case nlohmann::json::value_t::array:
    return "an array";
  case nlohmann::json::value_t::string:
    return "a string";
  case nlohmann::json::value_t::boolean:
    return "a boolean";
  case nlohmann::json::value_t::number_float:
    return "a number";
  case nlohmann::json::value_t::number_integer:
  case nlohmann::json::value_t::number_unsigned:
    return "an integer";
  default:
    return "an unsupported value";
  }
}

JsonFields::JsonFields(const nlohmann::json &object, std::string prefix)
    : object_(object), prefix_(std::move(prefix)) {}

const nlohmann::json *JsonFields::get(const char *name) const {
  if (!object_.is_object())
    return nullptr;
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null())
    return nullptr;
  return &*it;
}

bool JsonFields::has(const char *name) const { return get(name) != nullptr; }

void JsonFields::fail(const std::string &name, const std::string &message) {
  if (!error_)
    error_ = badRequest(path(name), message);
}

bool JsonFields::typeError(const char *name, const char *expected) {
  fail(name, "field '" + path(name) + "' must be " + expected + ", got " +
                 jsonTypeName(*get(name)));
  return false;
}

bool JsonFields::readInt(const char *name, int64_t min, int64_t max,
                         std::optional<int64_t> &out) {
  const nlohmann::json *v = get(name);
  if (!v)
    return true;
  // JSON has one number type: accept 3.0 as 3, as OpenAI's servers do, but never 3.5.
  double value = 0;
  if (v->is_number_integer() || v->is_number_unsigned()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      value = 1e19;
    else
      value = static_cast<double>(v->get<int64_t>());
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
    value = v->get<double>();
  } else {
    return typeError(name, "an integer");
  }
  if (value < static_cast<double>(min) || value > static_cast<double>(max)) {
    fail(name, "field '" + path(name) + "' must be in [" + std::to_string(min) + ", " +
                   std::to_string(max) + "], got " + numberText(value));
    return false;
  }
  out = v->is_number_float() ? static_cast<int64_t>(value) : v->get<int64_t>();
  return true;
}

bool JsonFields::readFloat(const char *name, double min, double max,
                           std::optional<double> &out) {
  const nlohmann::json *v = get(name);
  if (!v)
    return true;
  if (!v->is_number())
    return typeError(name, "a number");
  double value = v->get<double>();
  if (!std::isfinite(value) || value < min || value > max) {
    fail(name, "field '" + path(name) + "' must be in [" + numberText(min) + ", " +
                   numberText(max) + "], got " + numberText(value));
    return false;
  }
  out = value;
  return true;
}

bool JsonFields::readBool(const char *name, std::optional<bool> &out) {
  const nlohmann::json *v = get(name);
  if (!v)
    return true;
  if (!v->is_boolean())
    return typeError(name, "a boolean");
  out = v->get<bool>();
  return true;
}

bool JsonFields::readString(const char *name, std::optional<std::string> &out) {
  const nlohmann::json *v = get(name);
  if (!v)
    return true;
  if (!v->is_string())
    return typeError(name, "a string");
  out = v->get<std::string>();
  return true;
}

bool JsonFields::readStringList(const char *name, size_t maxItems,
                                std::vector<std::string> &out) {
  const nlohmann::json *v = get(name);
  if (!v)
    return true;
  if (v->is_string()) {
    out = {v->get<std::string>()};
  } else if (v->is_array()) {
    std::vector<std::string> items;
    for (const nlohmann::json &item : *v) {
      if (!item.is_string())
        return typeError(name, "a string or an array of strings");
      items.push_back(item.get<std::string>());
    }
    out = std::move(items);
  } else {
    return typeError(name, "a string or an array of strings");
  }
  if (out.size() > maxItems) {
    fail(name, "field '" + path(name) + "' has " + std::to_string(out.size()) +
                   " items; at most " + std::to_string(maxItems) + " are allowed");
    return false;
  }
  for (const std::string &s : out) {
    if (s.empty()) {
      fail(name, "field '" + path(name) + "' has an empty string");
      return false;
    }
  }
  return true;
}

bool JsonFields::readIntList(const char *name, int64_t min, int64_t max,
                             std::vector<int32_t> &out) {
  const nlohmann::json *v = get(name);
  if (!v)
    return true;
  if (!v->is_array())
    return typeError(name, "an array of integers");
  std::vector<int32_t> items;
  for (const nlohmann::json &item : *v) {
    if (!item.is_number_integer() && !item.is_number_unsigned())
      return typeError(name, "an array of integers");
    if (item.is_number_unsigned() ? item.get<uint64_t>() > static_cast<uint64_t>(max)
                                  : (item.get<int64_t>() < min || item.get<int64_t>() > max)) {
      fail(name, "field '" + path(name) + "' has " + item.dump() + "; items must be in [" +
                     std::to_string(min) + ", " + std::to_string(max) + "]");
      return false;
    }
    items.push_back(static_cast<int32_t>(item.get<int64_t>()));
  }
  out = std::move(items);
  return true;
}

namespace {

// Replays a body nlohmann::json rejected through its SAX interface to learn where it failed: the
// path of the value being read ("messages[0].content"), the parser's message, and whether it
// failed on a number that does not fit a double (1e309, which the lexer reads but cannot hold).
class JsonErrorLocator : public nlohmann::json::json_sax_t {
public:
  bool null() override { return enterValue(); }
  bool boolean(bool) override { return enterValue(); }
  bool number_integer(number_integer_t) override { return enterValue(); }
  bool number_unsigned(number_unsigned_t) override { return enterValue(); }
  bool number_float(number_float_t, const string_t &) override { return enterValue(); }
  bool string(string_t &) override { return enterValue(); }
  bool binary(binary_t &) override { return enterValue(); }
  bool start_object(std::size_t) override { return enterContainer(false); }
  bool start_array(std::size_t) override { return enterContainer(true); }
  bool end_object() override { return leaveContainer(); }
  bool end_array() override { return leaveContainer(); }
  bool key(string_t &name) override {
    frames_.back().key = name;
    return true;
  }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::json::exception &error) override {
    numberOverflow_ = error.id == kNumberOverflowId;
    message_ = error.what();
    path_ = currentPath();
    return false;
  }

  bool numberOverflow() const { return numberOverflow_; }
  const std::string &message() const { return message_; }
  const std::string &path() const { return path_; }

private:
  // nlohmann's out_of_range.406: "number overflow parsing '1e309'".
  static constexpr int kNumberOverflowId = 406;
  struct Frame {
    bool isArray = false;
    std::string key;  // an object's current member
    size_t index = 0; // an array's current element
    size_t next = 0;  // an array's elements begun so far
  };

  bool enterValue() {
    if (!frames_.empty() && frames_.back().isArray)
      frames_.back().index = frames_.back().next++;
    return true;
  }
  bool enterContainer(bool isArray) {
    enterValue();
    frames_.push_back(Frame{isArray, "", 0, 0});
    return true;
  }
  bool leaveContainer() {
    frames_.pop_back();
    return true;
  }
  // The value being read when the parser failed; in an array that is the element after the last
  // one begun.
  std::string currentPath() const {
    std::string path;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame &frame = frames_[i];
      bool last = i + 1 == frames_.size();
      if (frame.isArray)
        path += "[" + std::to_string(last ? frame.next : frame.index) + "]";
      else if (!frame.key.empty() || !last)
        path += (path.empty() ? "" : ".") + frame.key;
    }
    return path;
  }

  std::vector<Frame> frames_;
  bool numberOverflow_ = false;
  std::string message_;
  std::string path_;
};

ApiError invalidJson(const std::string &body) {
  JsonErrorLocator locator;
  (void)nlohmann::json::sax_parse(body, &locator);
  if (!locator.numberOverflow())
    return badRequest("", "the request body is not valid JSON: " + locator.message());
  if (locator.path().empty() || locator.path()[0] == '[')
    return badRequest("", "request body: number out of range (JSON numbers must fit a double)");
  return badRequest(locator.path(), "field '" + locator.path() +
                                        "' holds a number out of range (JSON numbers must fit "
                                        "a double)");
}

} // namespace

std::optional<ApiError> parseJsonObject(const std::string &body, nlohmann::json &out) {
  if (body.empty())
    return badRequest("", "the request body is empty; expected a JSON object");
  size_t bad = firstInvalidUtf8(body);
  if (bad != std::string::npos)
    return badRequest("", "the request body is not valid UTF-8 (byte offset " +
                              std::to_string(bad) + ")");
  out = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded())
    return invalidJson(body);
  if (!out.is_object())
    return badRequest("", std::string("the request body must be a JSON object, got ") +
                              jsonTypeName(out));
  return std::nullopt;
}

} // namespace kiln::rt::serve
