// Methods of str and dict values that chat templates call (`content.strip()`, `tool.items()`).
#include <algorithm>
#include <initializer_list>

#include "runtime/text/jinja_builtins.h"
#include "runtime/text/jinja_unicode.h"

namespace kiln::rt::jinja {

namespace {

bool nameIn(const std::string &name, std::initializer_list<const char *> names) {
  return std::any_of(names.begin(), names.end(), [&](const char *n) { return name == n; });
}

// Attributes Python's str/dict/list have that kiln does not implement; using one fails clearly
// instead of falling through to item lookup the way a missing attribute would.
bool isOtherStrAttribute(const std::string &name) {
  return nameIn(name, {"casefold", "center", "encode", "expandtabs", "format", "format_map",
                       "index", "isascii", "isdecimal", "isidentifier", "isnumeric",
                       "isprintable", "istitle", "ljust", "maketrans", "partition", "rindex",
                       "rjust", "rpartition", "swapcase", "translate", "zfill"});
}

bool isOtherDictAttribute(const std::string &name) {
  return nameIn(name,
                {"clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"});
}

bool isListAttribute(const std::string &name) {
  return nameIn(name, {"append", "clear", "copy", "count", "extend", "index", "insert", "pop",
                       "remove", "reverse", "sort"});
}

Result<std::optional<std::string>> optionalString(const Value &v, const std::string &what) {
  if (v.isNone() || v.isUndefined())
    return std::optional<std::string>();
  if (!v.isString())
    return invalidArgument(what + " must be a string or None");
  return std::optional<std::string>(v.asString());
}

Result<Value> stringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  for (auto &part : parts)
    items.push_back(Value::fromString(std::move(part)));
  return Value::array(std::move(items));
}

Result<Value> affixTest(const std::string &self, const std::string &method, CallArgs &args) {
  ArgReader reader("str." + method, args);
  KILN_ASSIGN_OR_RETURN(Value affix, reader.required(0, "prefix"));
  KILN_RETURN_IF_ERROR(reader.finish());
  std::vector<Value> options = affix.isArray() ? affix.asArray().items : std::vector<Value>{affix};
  for (const Value &option : options) {
    if (!option.isString())
      return invalidArgument("str." + method + "() argument must be str or a tuple of str");
    const std::string &s = option.asString();
    bool match = s.size() <= self.size() &&
                 (method == "startswith" ? self.compare(0, s.size(), s) == 0
                                         : self.compare(self.size() - s.size(), s.size(), s) == 0);
    if (match)
      return Value::fromBool(true);
  }
  return Value::fromBool(false);
}

Result<Value> splitMethod(const std::string &self, const std::string &method, CallArgs &args) {
  ArgReader reader("str." + method, args);
  KILN_ASSIGN_OR_RETURN(auto sep, optionalString(reader.get(0, "sep"), "str.split separator"));
  KILN_ASSIGN_OR_RETURN(int64_t maxSplit,
                        toInteger(reader.get(1, "maxsplit", Value::fromInt(-1)), "maxsplit"));
  KILN_RETURN_IF_ERROR(reader.finish());
  if (sep && sep->empty())
    return invalidArgument("str." + method + "(): empty separator");
  if (method == "rsplit" && maxSplit >= 0) {
    if (!sep)
      return unimplemented("str.rsplit() with maxsplit and no separator is not supported");
    std::vector<std::string> parts;
    size_t end = self.size();
    while (static_cast<int64_t>(parts.size()) < maxSplit) {
      size_t found = end >= sep->size() ? self.rfind(*sep, end - sep->size()) : std::string::npos;
      if (found == std::string::npos)
        break;
      parts.push_back(self.substr(found + sep->size(), end - found - sep->size()));
      end = found;
    }
    parts.push_back(self.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return stringList(std::move(parts));
  }
  return stringList(pySplit(self, sep, maxSplit));
}

Result<Value> findMethod(const std::string &self, const std::string &method, CallArgs &args) {
  ArgReader reader("str." + method, args);
  KILN_ASSIGN_OR_RETURN(Value sub, reader.required(0, "sub"));
  KILN_RETURN_IF_ERROR(reader.finish());
  if (!sub.isString())
    return invalidArgument("str." + method + "() argument must be str");
  const std::string &needle = sub.asString();
  if (method == "count") {
    if (needle.empty())
      return Value::fromInt(static_cast<int64_t>(codepointCount(self)) + 1);
    int64_t count = 0;
    for (size_t p = self.find(needle); p != std::string::npos;
         p = self.find(needle, p + needle.size()))
      ++count;
    return Value::fromInt(count);
  }
  size_t found = method == "find" ? self.find(needle) : self.rfind(needle);
  if (found == std::string::npos)
    return Value::fromInt(-1);
  return Value::fromInt(static_cast<int64_t>(codepointCount(self.substr(0, found))));
}

Result<Value> joinMethod(const std::string &self, CallArgs &args) {
  ArgReader reader("str.join", args);
  KILN_ASSIGN_OR_RETURN(Value iterable, reader.required(0, "iterable"));
  KILN_RETURN_IF_ERROR(reader.finish());
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(iterable));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].isString())
      return invalidArgument("str.join(): sequence item " + std::to_string(i) +
                             ": expected str instance");
    if (i > 0)
      out += self;
    out += items[i].asString();
  }
  return Value::fromString(std::move(out));
}

Result<Value> classify(const std::string &self, const std::string &method) {
  std::u32string cps = decodeUtf8(self);
  if (cps.empty())
    return Value::fromBool(false);
  auto isAlpha = [](char32_t c) { return toUpperCp(c) != toLowerCp(c) || c >= 0x3040; };
  auto isDigitCp = [](char32_t c) { return c >= '0' && c <= '9'; };
  bool all = true;
  bool anyCased = false;
  for (char32_t c : cps) {
    bool cased = toUpperCp(c) != toLowerCp(c);
    anyCased = anyCased || cased;
    if (method == "isdigit")
      all = all && isDigitCp(c);
    else if (method == "isalpha")
      all = all && isAlpha(c);
    else if (method == "isalnum")
      all = all && (isAlpha(c) || isDigitCp(c));
    else if (method == "isspace")
      all = all && isPySpace(c);
    else if (method == "isupper")
      all = all && (!cased || toUpperCp(c) == c);
    else if (method == "islower")
      all = all && (!cased || toLowerCp(c) == c);
  }
  if (method == "isupper" || method == "islower")
    all = all && anyCased;
  return Value::fromBool(all);
}

Result<Value> callStringMethod(const std::string &self, const std::string &method,
                               CallArgs &args) {
  if (method == "strip" || method == "lstrip" || method == "rstrip") {
    ArgReader reader("str." + method, args);
    KILN_ASSIGN_OR_RETURN(auto chars, optionalString(reader.get(0, "chars"), "strip chars"));
    KILN_RETURN_IF_ERROR(reader.finish());
    return Value::fromString(pyStrip(self, chars, method != "rstrip", method != "lstrip"));
  }
  if (method == "split" || method == "rsplit")
    return splitMethod(self, method, args);
  if (method == "startswith" || method == "endswith")
    return affixTest(self, method, args);
  if (method == "find" || method == "rfind" || method == "count")
    return findMethod(self, method, args);
  if (method == "join")
    return joinMethod(self, args);
  if (method == "replace") {
    ArgReader reader("str.replace", args);
    KILN_ASSIGN_OR_RETURN(Value from, reader.required(0, "old"));
    KILN_ASSIGN_OR_RETURN(Value to, reader.required(1, "new"));
    KILN_ASSIGN_OR_RETURN(int64_t count,
                          toInteger(reader.get(2, "count", Value::fromInt(-1)), "count"));
    KILN_RETURN_IF_ERROR(reader.finish());
    if (!from.isString() || !to.isString())
      return invalidArgument("str.replace() arguments must be str");
    return Value::fromString(pyReplace(self, from.asString(), to.asString(), count));
  }
  if (method == "removeprefix" || method == "removesuffix") {
    ArgReader reader("str." + method, args);
    KILN_ASSIGN_OR_RETURN(Value affix, reader.required(0, "affix"));
    KILN_RETURN_IF_ERROR(reader.finish());
    if (!affix.isString())
      return invalidArgument("str." + method + "() argument must be str");
    const std::string &a = affix.asString();
    bool prefix = method == "removeprefix";
    if (a.size() <= self.size() && (prefix ? self.compare(0, a.size(), a) == 0
                                           : self.compare(self.size() - a.size(), a.size(), a) == 0))
      return Value::fromString(prefix ? self.substr(a.size()) : self.substr(0, self.size() - a.size()));
    return Value::fromString(self);
  }
  ArgReader reader("str." + method, args);
  KILN_RETURN_IF_ERROR(reader.finish());
  if (method == "upper")
    return Value::fromString(pyUpper(self));
  if (method == "lower")
    return Value::fromString(pyLower(self));
  if (method == "title")
    return Value::fromString(pyTitle(self));
  if (method == "capitalize")
    return Value::fromString(pyCapitalize(self));
  if (method == "splitlines")
    return stringList(pySplitLines(self));
  return classify(self, method);
}

Result<Value> callDictMethod(const Value &self, const std::string &method, CallArgs &args) {
  ArgReader reader("dict." + method, args);
  const ObjectData &data = self.asObject();
  if (method == "get") {
    KILN_ASSIGN_OR_RETURN(Value key, reader.required(0, "key"));
    Value fallback = reader.get(1, "default", Value::none());
    KILN_RETURN_IF_ERROR(reader.finish());
    const Value *found = key.isString() ? data.find(key.asString()) : nullptr;
    return found ? *found : fallback;
  }
  KILN_RETURN_IF_ERROR(reader.finish());
  std::vector<Value> items;
  for (const auto &[key, value] : data.entries) {
    if (method == "items")
      items.push_back(Value::array({Value::fromString(key), value}, true));
    else if (method == "keys")
      items.push_back(Value::fromString(key));
    else
      items.push_back(value);
  }
  return Value::array(std::move(items));
}

} // namespace

Result<std::optional<Value>> lookupMethod(const Value &object, const std::string &name) {
  if (object.isString()) {
    if (nameIn(name, {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                      "find", "rfind", "count", "join", "replace", "removeprefix",
                      "removesuffix", "upper", "lower", "title", "capitalize", "splitlines",
                      "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower"})) {
      std::string self = object.asString();
      return std::optional<Value>(Value::callable(
          "str." + name, [self, name](CallArgs &args) { return callStringMethod(self, name, args); }));
    }
    if (isOtherStrAttribute(name))
      return unimplemented("str." + name + "() is not supported by kiln's Jinja subset");
  } else if (object.isObject()) {
    if (nameIn(name, {"get", "items", "keys", "values"})) {
      Value self = object;
      return std::optional<Value>(Value::callable(
          "dict." + name, [self, name](CallArgs &args) { return callDictMethod(self, name, args); }));
    }
    if (isOtherDictAttribute(name))
      return unimplemented("dict." + name + "() is not supported (chat templates are immutable)");
  } else if (object.isArray() && isListAttribute(name)) {
    return unimplemented("list." + name + "() is not supported (chat templates are immutable)");
  }
  return std::optional<Value>();
}

} // namespace kiln::rt::jinja
