#include "runtime/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/text/jinja_unicode.h"

namespace kiln::rt::jinja {

namespace {

// A namespace can be made to contain itself (`set ns.self = ns`); Python prints "..." for such
// cycles and json.dumps refuses them. A depth bound gives the same guarantee without identity sets.
constexpr int kMaxNesting = 256;

bool isPrintableCp(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD)
    return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF)
    return false;
  return !(cp >= 0xE000 && cp <= 0xF8FF) && cp != 0xFFFE && cp != 0xFFFF;
}

void appendHexEscape(std::string &out, char32_t cp) {
  char buffer[16];
  if (cp <= 0xFF)
    std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(cp));
  else if (cp <= 0xFFFF)
    std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(cp));
  else
    std::snprintf(buffer, sizeof(buffer), "\\U%08x", static_cast<unsigned>(cp));
  out += buffer;
}

std::string reprString(const std::string &text) {
  bool hasSingle = text.find('\'') != std::string::npos;
  bool hasDouble = text.find('"') != std::string::npos;
  char quote = (hasSingle && !hasDouble) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : decodeUtf8(text)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (!isPrintableCp(cp)) {
      appendHexEscape(out, cp);
    } else {
      appendUtf8(out, cp);
    }
  }
  out.push_back(quote);
  return out;
}

std::string reprAt(const Value &value, int depth);

std::string reprEntries(const ObjectData &data, int depth) {
  std::string out = "{";
  bool first = true;
  for (const auto &[key, item] : data.entries) {
    if (!first)
      out += ", ";
    first = false;
    out += reprString(key) + ": " + reprAt(item, depth + 1);
  }
  return out + "}";
}

std::string reprAt(const Value &value, int depth) {
  if (depth > kMaxNesting)
    return "...";
  switch (value.kind()) {
  case ValueKind::kString:
    return reprString(value.asString());
  case ValueKind::kUndefined:
    return "Undefined";
  case ValueKind::kArray: {
    const ArrayData &array = value.asArray();
    std::string out = array.isTuple ? "(" : "[";
    for (size_t i = 0; i < array.items.size(); ++i) {
      if (i > 0)
        out += ", ";
      out += reprAt(array.items[i], depth + 1);
    }
    if (array.isTuple && array.items.size() == 1)
      out += ",";
    return out + (array.isTuple ? ")" : "]");
  }
  case ValueKind::kObject:
    return reprEntries(value.asObject(), depth);
  case ValueKind::kNamespace:
    return "<Namespace " + reprEntries(value.namespaceData(), depth) + ">";
  default:
    return toPyStr(value);
  }
}

void appendJsonString(std::string &out, const std::string &text) {
  out.push_back('"');
  for (char c : text) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buffer[8];
        std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(c));
        out += buffer;
      } else {
        out.push_back(c);
      }
    }
  }
  out.push_back('"');
}

struct JsonWriter {
  const JsonFormat &format;
  std::string out;

  void newline(int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i)
      out += *format.indent;
  }

  // Python's item separator is followed by the newline and indent when indenting.
  void separator(bool first, int level) {
    if (!first)
      out += format.itemSeparator;
    if (format.indent)
      newline(level);
  }

  Status write(const Value &value, int level) {
    if (level > kMaxNesting)
      return invalidArgument("tojson: value nested deeper than " + std::to_string(kMaxNesting) +
                             " levels (circular reference?)");
    switch (value.kind()) {
    case ValueKind::kNone:
      out += "null";
      return okStatus();
    case ValueKind::kBool:
      out += value.asBool() ? "true" : "false";
      return okStatus();
    case ValueKind::kInt:
      out += std::to_string(value.asInt());
      return okStatus();
    case ValueKind::kFloat: {
      double f = value.asDouble();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                                                     : formatPyFloat(f);
      return okStatus();
    }
    case ValueKind::kString:
      appendJsonString(out, value.asString());
      return okStatus();
    case ValueKind::kArray:
      return writeArray(value.asArray(), level);
    case ValueKind::kObject:
      return writeObject(value.asObject(), level);
    case ValueKind::kUndefined:
      return invalidArgument("tojson: Object of type Undefined is not JSON serializable");
    case ValueKind::kNamespace:
      return invalidArgument("tojson: Object of type Namespace is not JSON serializable");
    case ValueKind::kCallable:
      return invalidArgument("tojson: Object of type function is not JSON serializable");
    }
    return internalError("tojson: unknown value kind");
  }

  Status writeArray(const ArrayData &array, int level) {
    if (array.items.empty()) {
      out += "[]";
      return okStatus();
    }
    out.push_back('[');
    for (size_t i = 0; i < array.items.size(); ++i) {
      separator(i == 0, level + 1);
      KILN_RETURN_IF_ERROR(write(array.items[i], level + 1));
    }
    if (format.indent)
      newline(level);
    out.push_back(']');
    return okStatus();
  }

  Status writeObject(const ObjectData &object, int level) {
    if (object.entries.empty()) {
      out += "{}";
      return okStatus();
    }
    std::vector<const std::pair<std::string, Value> *> entries;
    for (const auto &entry : object.entries)
      entries.push_back(&entry);
    if (format.sortKeys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](auto *a, auto *b) { return a->first < b->first; });
    out.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      separator(i == 0, level + 1);
      appendJsonString(out, entries[i]->first);
      out += format.keySeparator;
      KILN_RETURN_IF_ERROR(write(entries[i]->second, level + 1));
    }
    if (format.indent)
      newline(level);
    out.push_back('}');
    return okStatus();
  }
};

bool equalsAt(const Value &a, const Value &b, int depth);

bool objectsEqual(const ObjectData &a, const ObjectData &b, int depth) {
  if (a.entries.size() != b.entries.size())
    return false;
  for (const auto &[key, item] : a.entries) {
    const Value *other = b.find(key);
    if (other == nullptr || !equalsAt(item, *other, depth + 1))
      return false;
  }
  return true;
}

bool equalsAt(const Value &a, const Value &b, int depth) {
  if (depth > kMaxNesting)
    return false;
  if (a.isNumber() && b.isNumber()) {
    if (!a.isFloat() && !b.isFloat())
      return (a.isBool() ? a.asBool() : a.asInt()) == (b.isBool() ? b.asBool() : b.asInt());
    return a.asDouble() == b.asDouble();
  }
  if (a.kind() != b.kind())
    return false;
  switch (a.kind()) {
  case ValueKind::kUndefined:
  case ValueKind::kNone:
    return true;
  case ValueKind::kString:
    return a.asString() == b.asString();
  case ValueKind::kArray: {
    const ArrayData &x = a.asArray();
    const ArrayData &y = b.asArray();
    if (x.isTuple != y.isTuple || x.items.size() != y.items.size())
      return false;
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!equalsAt(x.items[i], y.items[i], depth + 1))
        return false;
    return true;
  }
  case ValueKind::kObject:
    return objectsEqual(a.asObject(), b.asObject(), depth);
  case ValueKind::kNamespace:
    return &a.namespaceData() == &b.namespaceData();
  case ValueKind::kCallable:
    return &a.asCallable() == &b.asCallable();
  default:
    return false;
  }
}

std::string pyTypeName(const Value &value) {
  switch (value.kind()) {
  case ValueKind::kUndefined:
    return "Undefined";
  case ValueKind::kNone:
    return "NoneType";
  case ValueKind::kBool:
    return "bool";
  case ValueKind::kInt:
    return "int";
  case ValueKind::kFloat:
    return "float";
  case ValueKind::kString:
    return "str";
  case ValueKind::kArray:
    return value.asArray().isTuple ? "tuple" : "list";
  case ValueKind::kObject:
    return "dict";
  case ValueKind::kNamespace:
    return "Namespace";
  case ValueKind::kCallable:
    return "function";
  }
  return "object";
}

} // namespace

const Value *ObjectData::find(std::string_view key) const {
  for (const auto &entry : entries)
    if (entry.first == key)
      return &entry.second;
  return nullptr;
}

void ObjectData::set(std::string key, Value value) {
  for (auto &entry : entries) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.string_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}

Value Value::fromBool(bool value) {
  Value v;
  v.kind_ = ValueKind::kBool;
  v.bool_ = value;
  return v;
}

Value Value::fromInt(int64_t value) {
  Value v;
  v.kind_ = ValueKind::kInt;
  v.int_ = value;
  return v;
}

Value Value::fromFloat(double value) {
  Value v;
  v.kind_ = ValueKind::kFloat;
  v.float_ = value;
  return v;
}

Value Value::fromString(std::string value) {
  Value v;
  v.kind_ = ValueKind::kString;
  v.string_ = std::move(value);
  return v;
}

Value Value::array(std::vector<Value> items, bool isTuple) {
  Value v;
  v.kind_ = ValueKind::kArray;
  v.array_ = std::make_shared<ArrayData>(ArrayData{std::move(items), isTuple});
  return v;
}

Value Value::object(ObjectData data) {
  Value v;
  v.kind_ = ValueKind::kObject;
  v.object_ = std::make_shared<ObjectData>(std::move(data));
  return v;
}

Value Value::makeNamespace(ObjectData data) {
  Value v = object(std::move(data));
  v.kind_ = ValueKind::kNamespace;
  return v;
}

Value Value::callable(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = ValueKind::kCallable;
  v.callable_ = std::make_shared<CallableData>(CallableData{std::move(name), std::move(fn)});
  return v;
}

double Value::asDouble() const {
  if (kind_ == ValueKind::kFloat)
    return float_;
  if (kind_ == ValueKind::kBool)
    return bool_ ? 1.0 : 0.0;
  return static_cast<double>(int_);
}

bool isTruthy(const Value &value) {
  switch (value.kind()) {
  case ValueKind::kUndefined:
  case ValueKind::kNone:
    return false;
  case ValueKind::kBool:
    return value.asBool();
  case ValueKind::kInt:
    return value.asInt() != 0;
  case ValueKind::kFloat:
    return value.asDouble() != 0.0;
  case ValueKind::kString:
    return !value.asString().empty();
  case ValueKind::kArray:
    return !value.asArray().items.empty();
  case ValueKind::kObject:
    return !value.asObject().entries.empty();
  default:
    return true;
  }
}

std::string formatPyFloat(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value,
                                 std::chars_format::scientific);
  std::string sci(buffer, end);
  bool negative = sci[0] == '-';
  if (negative)
    sci.erase(0, 1);
  size_t ePos = sci.find('e');
  int exponent = std::stoi(sci.substr(ePos + 1));
  std::string digits = sci.substr(0, ePos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  // Python's repr switches to exponent form when the decimal point would sit more than 16 digits
  // right of the first digit, or 4+ zeros after the point.
  int decimalPoint = exponent + 1;
  std::string out = negative ? "-" : "";
  if (decimalPoint > 16 || decimalPoint < -3) {
    out += digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char expBuffer[16];
    std::snprintf(expBuffer, sizeof(expBuffer), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + expBuffer;
  }
  if (decimalPoint <= 0)
    return out + "0." + std::string(-decimalPoint, '0') + digits;
  if (static_cast<size_t>(decimalPoint) >= digits.size())
    return out + digits + std::string(decimalPoint - digits.size(), '0') + ".0";
  return out + digits.substr(0, decimalPoint) + "." + digits.substr(decimalPoint);
}

std::string toPyStr(const Value &value) {
  switch (value.kind()) {
  case ValueKind::kUndefined:
    return "";
  case ValueKind::kNone:
    return "None";
  case ValueKind::kBool:
    return value.asBool() ? "True" : "False";
  case ValueKind::kInt:
    return std::to_string(value.asInt());
  case ValueKind::kFloat:
    return formatPyFloat(value.asDouble());
  case ValueKind::kString:
    return value.asString();
  case ValueKind::kCallable:
    return "<function " + value.asCallable().name + ">";
  default:
    return reprAt(value, 0);
  }
}

std::string toPyRepr(const Value &value) { return reprAt(value, 0); }

std::string typeDescription(const Value &value) {
  if (value.isNone())
    return "None";
  return pyTypeName(value) + " object";
}

bool pyEquals(const Value &a, const Value &b) { return equalsAt(a, b, 0); }

Result<bool> pyLess(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber()) {
    if (!a.isFloat() && !b.isFloat())
      return (a.isBool() ? a.asBool() : a.asInt()) < (b.isBool() ? b.asBool() : b.asInt());
    return a.asDouble() < b.asDouble();
  }
  if (a.isString() && b.isString())
    return a.asString() < b.asString();
  if (a.isArray() && b.isArray() && a.asArray().isTuple == b.asArray().isTuple) {
    const auto &x = a.asArray().items;
    const auto &y = b.asArray().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (pyEquals(x[i], y[i]))
        continue;
      return pyLess(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return invalidArgument("'<' not supported between instances of '" + pyTypeName(a) + "' and '" +
                         pyTypeName(b) + "'");
}

Result<std::string> toJson(const Value &value, const JsonFormat &format) {
  JsonWriter writer{format, {}};
  KILN_RETURN_IF_ERROR(writer.write(value, 0));
  return std::move(writer.out);
}

} // namespace kiln::rt::jinja
