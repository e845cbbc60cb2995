// jinja2's builtin filters and tests (the subset chat templates use), with transformers' tojson.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "runtime/text/jinja_builtins.h"
#include "runtime/text/jinja_unicode.h"

namespace kiln::rt::jinja {

namespace {

bool nameIn(const std::string &name, std::initializer_list<const char *> names) {
  return std::any_of(names.begin(), names.end(), [&](const char *n) { return name == n; });
}

Value stringValue(std::string s) { return Value::fromString(std::move(s)); }

// json.dumps(ensure_ascii=True) escapes every non-ASCII code point; in JSON output those only
// occur inside strings, so escaping the whole text is equivalent.
std::string escapeNonAscii(const std::string &json) {
  std::string out;
  for (char32_t cp : decodeUtf8(json)) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
      continue;
    }
    auto unit = [&](unsigned u) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", u);
      out += buffer;
    };
    if (cp >= 0x10000) {
      unit(0xD800 + ((cp - 0x10000) >> 10));
      unit(0xDC00 + ((cp - 0x10000) & 0x3FF));
    } else {
      unit(cp);
    }
  }
  return out;
}

Result<Value> filterToJson(const Value &input, CallArgs &args) {
  ArgReader reader("tojson", args);
  Value ensureAscii = reader.get(0, "ensure_ascii", Value::fromBool(false));
  Value indent = reader.get(1, "indent", Value::none());
  Value separators = reader.get(2, "separators", Value::none());
  Value sortKeys = reader.get(3, "sort_keys", Value::fromBool(false));
  KILN_RETURN_IF_ERROR(reader.finish());
  JsonFormat format;
  format.sortKeys = isTruthy(sortKeys);
  if (indent.isString()) {
    format.indent = indent.asString();
  } else if (indent.isInt() || indent.isBool()) {
    KILN_ASSIGN_OR_RETURN(int64_t width, toInteger(indent, "tojson indent"));
    format.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(width, 0, 1024)), ' ');
  } else if (!indent.isNone() && !indent.isUndefined()) {
    return invalidArgument("tojson indent must be an integer, a string or None");
  }
  if (format.indent)
    format.itemSeparator = ",";
  if (separators.isArray()) {
    const auto &parts = separators.asArray().items;
    if (parts.size() != 2 || !parts[0].isString() || !parts[1].isString())
      return invalidArgument("tojson separators must be a pair of strings");
    format.itemSeparator = parts[0].asString();
    format.keySeparator = parts[1].asString();
  }
  KILN_ASSIGN_OR_RETURN(std::string json, toJson(input, format));
  return stringValue(isTruthy(ensureAscii) ? escapeNonAscii(json) : json);
}

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Result<Value> lookupPath(const Value &item, const Value &path) {
  if (!path.isString())
    return getItem(item, path);
  Value current = item;
  for (const std::string &part : pySplit(path.asString(), std::string("."), -1)) {
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    Value key = numeric ? Value::fromInt(std::strtoll(part.c_str(), nullptr, 10))
                        : stringValue(part);
    KILN_ASSIGN_OR_RETURN(current, getItem(current, key));
  }
  return current;
}

// select / reject / selectattr / rejectattr.
Result<Value> filterSelect(const std::string &name, const Value &input, CallArgs &args) {
  bool byAttribute = name == "selectattr" || name == "rejectattr";
  bool keep = name == "select" || name == "selectattr";
  ArgReader reader(name, args);
  Value attribute;
  if (byAttribute) {
    KILN_ASSIGN_OR_RETURN(attribute, reader.required(0, "attribute"));
  }
  std::vector<Value> rest = reader.rest(byAttribute ? 1 : 0);
  KILN_RETURN_IF_ERROR(reader.finish());
  std::string testName;
  CallArgs testArgs;
  if (!rest.empty()) {
    if (!rest[0].isString())
      return invalidArgument(name + "(): the test name must be a string");
    testName = rest[0].asString();
    testArgs.positional.assign(rest.begin() + 1, rest.end());
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(input));
  std::vector<Value> kept;
  for (const Value &item : items) {
    Value subject = item;
    if (byAttribute) {
      KILN_ASSIGN_OR_RETURN(subject, lookupPath(item, attribute));
    }
    bool passed = isTruthy(subject);
    if (!testName.empty()) {
      CallArgs copy = testArgs;
      KILN_ASSIGN_OR_RETURN(passed, applyTest(testName, subject, copy));
    }
    if (passed == keep)
      kept.push_back(item);
  }
  return Value::array(std::move(kept));
}

Result<Value> filterMap(const Value &input, CallArgs &args) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(input));
  std::vector<Value> mapped;
  const Value *attribute = nullptr;
  const Value *fallback = nullptr;
  for (const auto &[key, value] : args.named) {
    if (key == "attribute")
      attribute = &value;
    else if (key == "default")
      fallback = &value;
  }
  if (attribute) {
    if (!args.positional.empty() || args.named.size() != (fallback ? 2u : 1u))
      return invalidArgument("map(attribute=...) takes only 'attribute' and 'default'");
    for (const Value &item : items) {
      KILN_ASSIGN_OR_RETURN(Value v, lookupPath(item, *attribute));
      mapped.push_back(v.isUndefined() && fallback ? *fallback : v);
    }
    return Value::array(std::move(mapped));
  }
  if (args.positional.empty() || !args.positional[0].isString())
    return invalidArgument("map() needs a filter name or attribute=...");
  std::string filter = args.positional[0].asString();
  for (const Value &item : items) {
    CallArgs filterArgs{{args.positional.begin() + 1, args.positional.end()}, args.named};
    KILN_ASSIGN_OR_RETURN(Value v, applyFilter(filter, item, filterArgs));
    mapped.push_back(std::move(v));
  }
  return Value::array(std::move(mapped));
}

Value sortKey(const Value &item, bool caseSensitive) {
  return (item.isString() && !caseSensitive) ? stringValue(pyLower(item.asString())) : item;
}

Result<Value> filterSortUnique(const std::string &name, const Value &input, CallArgs &args) {
  ArgReader reader(name, args);
  bool reverse = name == "sort" && isTruthy(reader.get(0, "reverse", Value::fromBool(false)));
  bool caseSensitive =
      isTruthy(reader.get(name == "sort" ? 1 : 0, "case_sensitive", Value::fromBool(false)));
  Value attribute = reader.get(name == "sort" ? 2 : 1, "attribute", Value::none());
  KILN_RETURN_IF_ERROR(reader.finish());
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(input));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value &item : items) {
    Value key = item;
    if (!attribute.isNone()) {
      KILN_ASSIGN_OR_RETURN(key, lookupPath(item, attribute));
    }
    keyed.emplace_back(sortKey(key, caseSensitive), item);
  }
  std::vector<Value> out;
  if (name == "unique") {
    std::vector<Value> seen;
    // Not a structured binding: clang before 16 (scripts/fuzz.sh) cannot capture one.
    for (auto &keyedItem : keyed) {
      const Value &key = keyedItem.first;
      if (std::none_of(seen.begin(), seen.end(), [&](const Value &s) { return pyEquals(s, key); })) {
        seen.push_back(key);
        out.push_back(keyedItem.second);
      }
    }
    return Value::array(std::move(out));
  }
  Status failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto &a, const auto &b) {
    Result<bool> less = reverse ? pyLess(b.first, a.first) : pyLess(a.first, b.first);
    if (!less.isOk()) {
      failure = less.status();
      return false;
    }
    return *less;
  });
  KILN_RETURN_IF_ERROR(failure);
  for (auto &entry : keyed)
    out.push_back(entry.second);
  return Value::array(std::move(out));
}

Result<Value> filterIndent(const Value &input, CallArgs &args) {
  ArgReader reader("indent", args);
  Value width = reader.get(0, "width", Value::fromInt(4));
  bool first = isTruthy(reader.get(1, "first", Value::fromBool(false)));
  bool blank = isTruthy(reader.get(2, "blank", Value::fromBool(false)));
  KILN_RETURN_IF_ERROR(reader.finish());
  std::string indentation;
  if (width.isString()) {
    indentation = width.asString();
  } else {
    KILN_ASSIGN_OR_RETURN(int64_t n, toInteger(width, "indent width"));
    indentation = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 1024)), ' ');
  }
  // jinja2 appends "\n" so splitlines() keeps a trailing empty line's position.
  std::vector<std::string> lines = pySplitLines(toPyStr(input) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0)
      out += "\n";
    bool indentThis = i > 0 && (blank || !lines[i].empty());
    out += (indentThis ? indentation : "") + lines[i];
  }
  return stringValue(first ? indentation + out : out);
}

Result<Value> filterRound(const Value &input, CallArgs &args) {
  ArgReader reader("round", args);
  KILN_ASSIGN_OR_RETURN(int64_t precision,
                        toInteger(reader.get(0, "precision", Value::fromInt(0)), "precision"));
  Value method = reader.get(1, "method", stringValue("common"));
  KILN_RETURN_IF_ERROR(reader.finish());
  if (!input.isNumber())
    return invalidArgument("round: expected a number, got " + typeDescription(input));
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = input.asDouble() * scale;
  std::string how = method.isString() ? method.asString() : "";
  double r;
  if (how == "common")
    r = std::nearbyint(x); // Python's round() is round-half-even
  else if (how == "floor")
    r = std::floor(x);
  else if (how == "ceil")
    r = std::ceil(x);
  else
    return invalidArgument("round: method must be 'common', 'ceil' or 'floor'");
  if (how == "common" && input.isInt() && precision >= 0)
    return Value::fromInt(input.asInt());
  return Value::fromFloat(r / scale);
}

Result<Value> parseIntString(const std::string &text, const Value &fallback) {
  std::string clean = pyStrip(text, std::nullopt, true, true);
  clean.erase(std::remove(clean.begin(), clean.end(), '_'), clean.end());
  if (!clean.empty()) {
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(clean.c_str(), &end, 10);
    if (*end == '\0' && errno == 0)
      return Value::fromInt(v);
    double d = std::strtod(clean.c_str(), &end);
    if (*end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value::fromInt(static_cast<int64_t>(d));
  }
  return fallback;
}

Result<Value> filterNumber(const std::string &name, const Value &input, CallArgs &args) {
  ArgReader reader(name, args);
  Value fallback = reader.get(0, "default", name == "int" ? Value::fromInt(0)
                                                          : Value::fromFloat(0.0));
  KILN_RETURN_IF_ERROR(reader.finish());
  if (name == "int") {
    if (input.isInt() || input.isBool())
      return Value::fromInt(input.isBool() ? input.asBool() : input.asInt());
    if (input.isFloat())
      return std::isfinite(input.asDouble()) ? Value::fromInt(static_cast<int64_t>(input.asDouble()))
                                             : fallback;
    return input.isString() ? parseIntString(input.asString(), fallback) : fallback;
  }
  if (input.isNumber())
    return Value::fromFloat(input.asDouble());
  if (input.isString()) {
    std::string clean = pyStrip(input.asString(), std::nullopt, true, true);
    char *end = nullptr;
    double d = std::strtod(clean.c_str(), &end);
    if (!clean.empty() && *end == '\0')
      return Value::fromFloat(d);
  }
  return fallback;
}

Result<Value> filterItems(const Value &input) {
  if (input.isUndefined())
    return Value::array({});
  if (!input.isObject())
    return invalidArgument("items: can only get item pairs from a mapping, got " +
                           typeDescription(input));
  std::vector<Value> pairs;
  for (const auto &[key, value] : input.asObject().entries)
    pairs.push_back(Value::array({stringValue(key), value}, true));
  return Value::array(std::move(pairs));
}

Result<Value> filterJoin(const Value &input, CallArgs &args) {
  ArgReader reader("join", args);
  Value separator = reader.get(0, "d", stringValue(""));
  Value attribute = reader.get(1, "attribute", Value::none());
  KILN_RETURN_IF_ERROR(reader.finish());
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(input));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!attribute.isNone()) {
      KILN_ASSIGN_OR_RETURN(item, lookupPath(item, attribute));
    }
    if (i > 0)
      out += toPyStr(separator);
    out += toPyStr(item);
  }
  return stringValue(std::move(out));
}

Result<Value> filterEnds(const std::string &name, const Value &input) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(input));
  if (items.empty())
    return Value::undefined(std::string("No ") + (name == "first" ? "first" : "last") +
                            " item, sequence was empty.");
  return name == "first" ? items.front() : items.back();
}

std::string htmlEscape(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&#34;"; break;
    case '\'': out += "&#39;"; break;
    default: out.push_back(c);
    }
  }
  return out;
}

Result<Value> filterStringOp(const std::string &name, const Value &input, CallArgs &args) {
  ArgReader reader(name, args);
  std::string text = toPyStr(input);
  if (name == "trim") {
    Value chars = reader.get(0, "chars", Value::none());
    KILN_RETURN_IF_ERROR(reader.finish());
    std::optional<std::string> set;
    if (chars.isString())
      set = chars.asString();
    return stringValue(pyStrip(text, set, true, true));
  }
  if (name == "replace") {
    KILN_ASSIGN_OR_RETURN(Value from, reader.required(0, "old"));
    KILN_ASSIGN_OR_RETURN(Value to, reader.required(1, "new"));
    Value count = reader.get(2, "count", Value::none());
    KILN_RETURN_IF_ERROR(reader.finish());
    int64_t n = -1;
    if (!count.isNone()) {
      KILN_ASSIGN_OR_RETURN(n, toInteger(count, "replace count"));
    }
    return stringValue(pyReplace(text, toPyStr(from), toPyStr(to), n));
  }
  KILN_RETURN_IF_ERROR(reader.finish());
  if (name == "upper")
    return stringValue(pyUpper(text));
  if (name == "lower")
    return stringValue(pyLower(text));
  if (name == "title")
    return stringValue(jinjaTitle(text));
  if (name == "capitalize")
    return stringValue(pyCapitalize(text));
  if (name == "escape" || name == "e")
    return stringValue(htmlEscape(text));
  return stringValue(text); // string, safe
}

Result<Value> filterAggregate(const std::string &name, const Value &input, CallArgs &args) {
  ArgReader reader(name, args);
  KILN_RETURN_IF_ERROR(reader.finish());
  if (name == "reverse") {
    if (input.isString()) {
      std::u32string cps = decodeUtf8(input.asString());
      std::reverse(cps.begin(), cps.end());
      return stringValue(encodeUtf8(cps));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(input));
    std::reverse(items.begin(), items.end());
    return Value::array(std::move(items));
  }
  if (name == "abs") {
    if (input.isFloat())
      return Value::fromFloat(std::fabs(input.asDouble()));
    KILN_ASSIGN_OR_RETURN(int64_t v, toInteger(input, "abs argument"));
    return v < 0 ? unaryMinus(Value::fromInt(v)) : Result<Value>(Value::fromInt(v));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(input));
  if (name == "sum") {
    Value total = Value::fromInt(0);
    for (const Value &item : items) {
      KILN_ASSIGN_OR_RETURN(total, binaryOp("+", total, item));
    }
    return total;
  }
  if (items.empty())
    return Value::undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    const Value &candidate = name == "max" ? best : items[i];
    const Value &other = name == "max" ? items[i] : best;
    KILN_ASSIGN_OR_RETURN(bool less, pyLess(sortKey(candidate, false), sortKey(other, false)));
    if (less)
      best = items[i];
  }
  return best;
}

bool isKnownTest(const std::string &name) {
  return nameIn(name, {"defined", "undefined", "none", "boolean", "false", "true", "integer",
                       "float", "number", "string", "mapping", "iterable", "sequence", "callable",
                       "sameas", "equalto", "eq", "==", "ne", "!=", "lt", "<", "lessthan", "le",
                       "<=", "gt", ">", "greaterthan", "ge", ">=", "in", "odd", "even",
                       "divisibleby", "lower", "upper", "escaped"});
}

Result<bool> comparisonTest(const std::string &name, const Value &input, const Value &other) {
  if (nameIn(name, {"equalto", "eq", "=="}))
    return compareOp("==", input, other);
  if (nameIn(name, {"ne", "!="}))
    return compareOp("!=", input, other);
  if (nameIn(name, {"lt", "<", "lessthan"}))
    return compareOp("<", input, other);
  if (nameIn(name, {"le", "<="}))
    return compareOp("<=", input, other);
  if (nameIn(name, {"gt", ">", "greaterthan"}))
    return compareOp(">", input, other);
  if (nameIn(name, {"ge", ">="}))
    return compareOp(">=", input, other);
  if (name == "in")
    return containsValue(other, input);
  if (name == "divisibleby") {
    KILN_ASSIGN_OR_RETURN(Value rem, binaryOp("%", input, other));
    return !isTruthy(rem);
  }
  // sameas: Python identity, which is only predictable for None/True/False and shared containers.
  if (input.isNone() || other.isNone() || input.isBool() || other.isBool())
    return input.kind() == other.kind() && (!input.isBool() || input.asBool() == other.asBool());
  return (input.isArray() && other.isArray() && &input.asArray() == &other.asArray()) ||
         (input.isObject() && other.isObject() && &input.asObject() == &other.asObject());
}

} // namespace

Result<bool> applyTest(const std::string &name, const Value &input, CallArgs &args) {
  if (!isKnownTest(name))
    return unimplemented("the '" + name + "' test is not supported by kiln's Jinja subset");
  ArgReader reader(name, args);
  if (nameIn(name, {"sameas", "equalto", "eq", "==", "ne", "!=", "lt", "<", "lessthan", "le",
                    "<=", "gt", ">", "greaterthan", "ge", ">=", "in", "divisibleby"})) {
    KILN_ASSIGN_OR_RETURN(Value other, reader.required(0, "other"));
    KILN_RETURN_IF_ERROR(reader.finish());
    return comparisonTest(name, input, other);
  }
  KILN_RETURN_IF_ERROR(reader.finish());
  ValueKind k = input.kind();
  if (name == "defined" || name == "undefined")
    return (k == ValueKind::kUndefined) == (name == "undefined");
  if (name == "none")
    return k == ValueKind::kNone;
  if (name == "boolean")
    return k == ValueKind::kBool;
  if (name == "true" || name == "false")
    return k == ValueKind::kBool && input.asBool() == (name == "true");
  if (name == "integer")
    return k == ValueKind::kInt;
  if (name == "float")
    return k == ValueKind::kFloat;
  if (name == "number")
    return input.isNumber();
  if (name == "string")
    return k == ValueKind::kString;
  if (name == "mapping")
    return k == ValueKind::kObject;
  if (name == "iterable" || name == "sequence")
    return k == ValueKind::kUndefined || k == ValueKind::kString || k == ValueKind::kArray ||
           k == ValueKind::kObject;
  if (name == "callable")
    return k == ValueKind::kCallable || k == ValueKind::kUndefined;
  if (name == "odd" || name == "even") {
    KILN_ASSIGN_OR_RETURN(Value rem, binaryOp("%", input, Value::fromInt(2)));
    return isTruthy(rem) == (name == "odd");
  }
  if (name == "lower" || name == "upper") {
    std::string text = toPyStr(input);
    return (name == "lower" ? pyLower(text) : pyUpper(text)) == text &&
           pyUpper(text) != pyLower(text);
  }
  return false; // escaped: kiln never produces Markup
}

Result<Value> applyFilter(const std::string &name, const Value &input, CallArgs &args) {
  if (name == "tojson")
    return filterToJson(input, args);
  if (nameIn(name, {"length", "count"})) {
    KILN_RETURN_IF_ERROR(ArgReader(name, args).finish());
    KILN_ASSIGN_OR_RETURN(int64_t n, lengthOf(input));
    return Value::fromInt(n);
  }
  if (nameIn(name, {"trim", "replace", "upper", "lower", "title", "capitalize", "string", "safe",
                    "escape", "e"}))
    return filterStringOp(name, input, args);
  if (name == "default" || name == "d") {
    ArgReader reader(name, args);
    Value fallback = reader.get(0, "default_value", stringValue(""));
    bool boolean = isTruthy(reader.get(1, "boolean", Value::fromBool(false)));
    KILN_RETURN_IF_ERROR(reader.finish());
    return (input.isUndefined() || (boolean && !isTruthy(input))) ? fallback : input;
  }
  if (name == "first" || name == "last") {
    KILN_RETURN_IF_ERROR(ArgReader(name, args).finish());
    return filterEnds(name, input);
  }
  if (name == "join")
    return filterJoin(input, args);
  if (name == "list") {
    KILN_RETURN_IF_ERROR(ArgReader(name, args).finish());
    KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(input));
    return Value::array(std::move(items));
  }
  if (name == "items") {
    KILN_RETURN_IF_ERROR(ArgReader(name, args).finish());
    return filterItems(input);
  }
  if (name == "int" || name == "float")
    return filterNumber(name, input, args);
  if (nameIn(name, {"select", "reject", "selectattr", "rejectattr"}))
    return filterSelect(name, input, args);
  if (name == "map")
    return filterMap(input, args);
  if (name == "sort" || name == "unique")
    return filterSortUnique(name, input, args);
  if (name == "indent")
    return filterIndent(input, args);
  if (name == "round")
    return filterRound(input, args);
  if (nameIn(name, {"reverse", "abs", "sum", "min", "max"}))
    return filterAggregate(name, input, args);
  return unimplemented("the '" + name + "' filter is not supported by kiln's Jinja subset");
}

} // namespace kiln::rt::jinja
