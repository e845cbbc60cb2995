// Operators, lookups, slicing and iteration with Python/jinja2 semantics.
#include <algorithm>
#include <cmath>

#include "runtime/text/jinja_builtins.h"
#include "runtime/text/jinja_unicode.h"

namespace kiln::rt::jinja {

namespace {

// Repetition (`'ab' * n`) is the one operator that can blow up memory from a tiny template.
constexpr int64_t kMaxRepeatBytes = 64 << 20;
// Lists built by + and * (a Value is tens of bytes, so this is the same order of memory).
constexpr int64_t kMaxListItems = 1 << 20;

std::string pyType(const Value &value) {
  std::string description = typeDescription(value);
  return description == "None" ? "NoneType" : description.substr(0, description.find(' '));
}

Status typeError(const std::string &op, const Value &a, const Value &b) {
  return invalidArgument("unsupported operand type(s) for " + op + ": '" + pyType(a) + "' and '" +
                         pyType(b) + "'");
}

bool isIntLike(const Value &v) { return v.isInt() || v.isBool(); }
int64_t intOf(const Value &v) { return v.isBool() ? (v.asBool() ? 1 : 0) : v.asInt(); }

Status overflow(const std::string &op) {
  return outOfRange("integer overflow in '" + op + "' (kiln integers are 64-bit)");
}

Result<Value> intArithmetic(const std::string &op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r))
      return overflow(op);
  } else if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r))
      return overflow(op);
  } else if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r))
      return overflow(op);
  } else if (op == "/") {
    if (y == 0)
      return invalidArgument("division by zero");
    return Value::fromFloat(static_cast<double>(x) / static_cast<double>(y));
  } else if (op == "//" || op == "%") {
    if (y == 0)
      return invalidArgument("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1)
      return overflow(op);
    int64_t q = x / y;
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    r = op == "//" ? q : m;
  } else if (op == "**") {
    if (y < 0)
      return Value::fromFloat(std::pow(static_cast<double>(x), static_cast<double>(y)));
    r = 1;
    for (int64_t i = 0; i < y; ++i) {
      if (__builtin_mul_overflow(r, x, &r))
        return overflow(op);
      if (r == 0 || r == 1)
        break;
    }
  }
  return Value::fromInt(r);
}

Result<Value> floatArithmetic(const std::string &op, double x, double y) {
  if (op == "+")
    return Value::fromFloat(x + y);
  if (op == "-")
    return Value::fromFloat(x - y);
  if (op == "*")
    return Value::fromFloat(x * y);
  if (op == "**")
    return Value::fromFloat(std::pow(x, y));
  if (y == 0.0)
    return invalidArgument("float division by zero");
  if (op == "/")
    return Value::fromFloat(x / y);
  double mod = std::fmod(x, y);
  if (mod != 0.0 && ((y < 0) != (mod < 0)))
    mod += y;
  if (op == "%")
    return Value::fromFloat(mod);
  // CPython's float_floor_div: exact quotient of the adjusted dividend, then floor.
  double div = (x - std::fmod(x, y)) / y;
  if (std::fmod(x, y) != 0.0 && ((y < 0) != (std::fmod(x, y) < 0)))
    div -= 1.0;
  double floorDiv = std::floor(div);
  if (div - floorDiv > 0.5)
    floorDiv += 1.0;
  return Value::fromFloat(div == 0.0 ? std::copysign(0.0, x / y) : floorDiv);
}

// Whether `count` copies of `size` units exceed `limit` (without overflowing: `times` may be any
// int64 the template computes).
bool exceeds(size_t size, int64_t count, int64_t limit) {
  return count > 0 && static_cast<int64_t>(size) > limit / count;
}

Result<Value> repeat(const Value &sequence, int64_t times) {
  times = std::max<int64_t>(times, 0);
  // An empty sequence stays empty however many times it is repeated: no loop of `times` (any int64
  // the template computes) appending nothing.
  const bool empty =
      sequence.isString() ? sequence.asString().empty() : sequence.asArray().items.empty();
  if (empty)
    times = 0;
  if (sequence.isString()) {
    if (exceeds(sequence.asString().size(), times, kMaxRepeatBytes))
      return outOfRange("string repetition result exceeds " + std::to_string(kMaxRepeatBytes) +
                        " bytes");
    std::string out;
    for (int64_t i = 0; i < times; ++i)
      out += sequence.asString();
    return Value::fromString(std::move(out));
  }
  const ArrayData &array = sequence.asArray();
  if (exceeds(array.items.size(), times, kMaxListItems))
    return outOfRange("list repetition result exceeds " + std::to_string(kMaxListItems) + " items");
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i)
    items.insert(items.end(), array.items.begin(), array.items.end());
  return Value::array(std::move(items), array.isTuple);
}

// Python's slice.indices(): clamps start/stop for `length` and the step's direction.
Result<std::vector<int64_t>> sliceIndices(int64_t length, const Value &start, const Value &stop,
                                          const Value &step) {
  auto bound = [](const Value &v) -> Result<std::optional<int64_t>> {
    if (v.isNone() || v.isUndefined())
      return std::optional<int64_t>();
    if (!isIntLike(v))
      return invalidArgument("slice indices must be integers or None, not " + pyType(v));
    return std::optional<int64_t>(intOf(v));
  };
  KILN_ASSIGN_OR_RETURN(auto stepValue, bound(step));
  int64_t s = stepValue.value_or(1);
  if (s == 0)
    return invalidArgument("slice step cannot be zero");
  KILN_ASSIGN_OR_RETURN(auto startValue, bound(start));
  KILN_ASSIGN_OR_RETURN(auto stopValue, bound(stop));
  auto clamp = [&](std::optional<int64_t> v, int64_t forward, int64_t backward) {
    if (!v)
      return s > 0 ? forward : backward;
    int64_t x = *v < 0 ? *v + length : *v;
    if (x < 0)
      return s > 0 ? int64_t{0} : int64_t{-1};
    if (x >= length)
      return s > 0 ? length : length - 1;
    return x;
  };
  int64_t first = clamp(startValue, 0, length - 1);
  int64_t last = clamp(stopValue, length, -1);
  std::vector<int64_t> indices;
  for (int64_t i = first; s > 0 ? i < last : i > last; i += s)
    indices.push_back(i);
  return indices;
}

Result<Value> indexSequence(const Value &object, const Value &key) {
  int64_t index = intOf(key);
  if (object.isString()) {
    std::u32string cps = decodeUtf8(object.asString());
    int64_t n = static_cast<int64_t>(cps.size());
    int64_t i = index < 0 ? index + n : index;
    if (i < 0 || i >= n)
      return Value::undefined("str object has no element " + std::to_string(index));
    std::string out;
    appendUtf8(out, cps[i]);
    return Value::fromString(std::move(out));
  }
  const auto &items = object.asArray().items;
  int64_t n = static_cast<int64_t>(items.size());
  int64_t i = index < 0 ? index + n : index;
  if (i < 0 || i >= n)
    return Value::undefined(typeDescription(object) + " has no element " + std::to_string(index));
  return items[i];
}

Value missingAttribute(const Value &object, const std::string &name) {
  return Value::undefined("'" + typeDescription(object) + "' has no attribute '" + name + "'");
}

} // namespace

Value ArgReader::get(size_t index, const char *name, Value fallback) {
  if (index < args_.positional.size()) {
    positionalUsed_ = std::max(positionalUsed_, index + 1);
    return args_.positional[index];
  }
  for (const auto &[key, value] : args_.named) {
    if (key == name) {
      namedUsed_.push_back(key);
      return value;
    }
  }
  return fallback;
}

Result<Value> ArgReader::required(size_t index, const char *name) {
  bool present = index < args_.positional.size();
  for (const auto &entry : args_.named)
    present = present || entry.first == name;
  if (!present)
    return invalidArgument(function_ + "() missing required argument '" + name + "'");
  return get(index, name);
}

std::vector<Value> ArgReader::rest(size_t index) {
  restTaken_ = true;
  if (index >= args_.positional.size())
    return {};
  return std::vector<Value>(args_.positional.begin() + index, args_.positional.end());
}

Status ArgReader::finish() const {
  if (!restTaken_ && positionalUsed_ < args_.positional.size())
    return invalidArgument(function_ + "() takes at most " + std::to_string(positionalUsed_) +
                           " positional argument(s) here, got " +
                           std::to_string(args_.positional.size()));
  for (const auto &entry : args_.named)
    if (std::find(namedUsed_.begin(), namedUsed_.end(), entry.first) == namedUsed_.end())
      return invalidArgument(function_ + "() got an unexpected keyword argument '" + entry.first +
                             "'");
  return okStatus();
}

Status requireDefined(const Value &value) {
  if (!value.isUndefined())
    return okStatus();
  return invalidArgument(value.undefinedHint().empty() ? std::string("value is undefined")
                                                       : value.undefinedHint());
}

Result<Value> getAttr(const Value &object, const std::string &name) {
  KILN_RETURN_IF_ERROR(requireDefined(object));
  if (object.isNamespace()) {
    const Value *found = object.namespaceData().find(name);
    return found ? *found : missingAttribute(object, name);
  }
  KILN_ASSIGN_OR_RETURN(std::optional<Value> method, lookupMethod(object, name));
  if (method)
    return *method;
  if (object.isObject()) {
    const Value *found = object.asObject().find(name);
    if (found)
      return *found;
  }
  return missingAttribute(object, name);
}

Result<Value> getItem(const Value &object, const Value &key) {
  KILN_RETURN_IF_ERROR(requireDefined(object));
  if ((object.isArray() || object.isString()) && isIntLike(key))
    return indexSequence(object, key);
  if (object.isObject() && key.isString()) {
    const Value *found = object.asObject().find(key.asString());
    if (found)
      return *found;
  }
  if (key.isString())
    return getAttr(object, key.asString());
  return Value::undefined(typeDescription(object) + " has no element " + toPyRepr(key));
}

Result<Value> sliceValue(const Value &object, const Value &start, const Value &stop,
                         const Value &step) {
  KILN_RETURN_IF_ERROR(requireDefined(object));
  if (object.isString()) {
    std::u32string cps = decodeUtf8(object.asString());
    KILN_ASSIGN_OR_RETURN(auto indices,
                          sliceIndices(static_cast<int64_t>(cps.size()), start, stop, step));
    std::string out;
    for (int64_t i : indices)
      appendUtf8(out, cps[i]);
    return Value::fromString(std::move(out));
  }
  if (!object.isArray())
    return invalidArgument("'" + pyType(object) + "' object is not subscriptable");
  const ArrayData &array = object.asArray();
  KILN_ASSIGN_OR_RETURN(auto indices,
                        sliceIndices(static_cast<int64_t>(array.items.size()), start, stop, step));
  std::vector<Value> items;
  items.reserve(indices.size());
  for (int64_t i : indices)
    items.push_back(array.items[i]);
  return Value::array(std::move(items), array.isTuple);
}

Result<std::vector<Value>> iterateValue(const Value &value) {
  switch (value.kind()) {
  case ValueKind::kUndefined:
    return std::vector<Value>();
  case ValueKind::kArray:
    return value.asArray().items;
  case ValueKind::kObject: {
    std::vector<Value> keys;
    for (const auto &entry : value.asObject().entries)
      keys.push_back(Value::fromString(entry.first));
    return keys;
  }
  case ValueKind::kString: {
    std::vector<Value> chars;
    for (char32_t cp : decodeUtf8(value.asString())) {
      std::string one;
      appendUtf8(one, cp);
      chars.push_back(Value::fromString(std::move(one)));
    }
    return chars;
  }
  default:
    return invalidArgument("'" + pyType(value) + "' object is not iterable");
  }
}

Result<int64_t> lengthOf(const Value &value) {
  switch (value.kind()) {
  case ValueKind::kUndefined:
    return int64_t{0};
  case ValueKind::kString:
    return static_cast<int64_t>(codepointCount(value.asString()));
  case ValueKind::kArray:
    return static_cast<int64_t>(value.asArray().items.size());
  case ValueKind::kObject:
    return static_cast<int64_t>(value.asObject().entries.size());
  default:
    return invalidArgument("object of type '" + pyType(value) + "' has no len()");
  }
}

// A string or list built by + or ~: a loop that doubles one would exhaust memory in ~30 steps.
Result<Value> concatenated(std::string text) {
  if (static_cast<int64_t>(text.size()) > kMaxRepeatBytes)
    return outOfRange("string concatenation result exceeds " + std::to_string(kMaxRepeatBytes) +
                      " bytes");
  return Value::fromString(std::move(text));
}

Result<Value> binaryOp(const std::string &op, const Value &a, const Value &b) {
  if (op == "~")
    return concatenated(toPyStr(a) + toPyStr(b));
  KILN_RETURN_IF_ERROR(requireDefined(a));
  KILN_RETURN_IF_ERROR(requireDefined(b));
  if (a.isNumber() && b.isNumber()) {
    if (isIntLike(a) && isIntLike(b))
      return intArithmetic(op, intOf(a), intOf(b));
    return floatArithmetic(op, a.asDouble(), b.asDouble());
  }
  if (op == "+") {
    if (a.isString() && b.isString())
      return concatenated(a.asString() + b.asString());
    if (a.isArray() && b.isArray() && a.asArray().isTuple == b.asArray().isTuple) {
      if (a.asArray().items.size() + b.asArray().items.size() > size_t(kMaxListItems))
        return outOfRange("list concatenation result exceeds " + std::to_string(kMaxListItems) +
                          " items");
      std::vector<Value> items = a.asArray().items;
      items.insert(items.end(), b.asArray().items.begin(), b.asArray().items.end());
      return Value::array(std::move(items), a.asArray().isTuple);
    }
  }
  if (op == "*") {
    if ((a.isString() || a.isArray()) && isIntLike(b))
      return repeat(a, intOf(b));
    if (isIntLike(a) && (b.isString() || b.isArray()))
      return repeat(b, intOf(a));
  }
  if (op == "%" && a.isString())
    return unimplemented("printf-style string formatting ('...' % value) is not supported");
  return typeError(op, a, b);
}

Result<Value> unaryMinus(const Value &value) {
  KILN_RETURN_IF_ERROR(requireDefined(value));
  if (isIntLike(value)) {
    if (intOf(value) == INT64_MIN)
      return overflow("-");
    return Value::fromInt(-intOf(value));
  }
  if (value.isFloat())
    return Value::fromFloat(-value.asDouble());
  return invalidArgument("bad operand type for unary -: '" + pyType(value) + "'");
}

Result<bool> containsValue(const Value &container, const Value &item) {
  switch (container.kind()) {
  case ValueKind::kUndefined:
    return false;
  case ValueKind::kString:
    if (!item.isString())
      return invalidArgument("'in <string>' requires string as left operand, not " + pyType(item));
    return container.asString().find(item.asString()) != std::string::npos;
  case ValueKind::kArray:
    for (const Value &element : container.asArray().items)
      if (pyEquals(element, item))
        return true;
    return false;
  case ValueKind::kObject:
    return item.isString() && container.asObject().find(item.asString()) != nullptr;
  default:
    return invalidArgument("argument of type '" + pyType(container) + "' is not iterable");
  }
}

Result<bool> compareOp(const std::string &op, const Value &a, const Value &b) {
  if (op == "==")
    return pyEquals(a, b);
  if (op == "!=")
    return !pyEquals(a, b);
  if (op == "in")
    return containsValue(b, a);
  if (op == "not in") {
    KILN_ASSIGN_OR_RETURN(bool found, containsValue(b, a));
    return !found;
  }
  KILN_RETURN_IF_ERROR(requireDefined(a));
  KILN_RETURN_IF_ERROR(requireDefined(b));
  if (op == "<")
    return pyLess(a, b);
  if (op == ">")
    return pyLess(b, a);
  if (op == "<=") {
    KILN_ASSIGN_OR_RETURN(bool greater, pyLess(b, a));
    return !greater;
  }
  if (op == ">=") {
    KILN_ASSIGN_OR_RETURN(bool less, pyLess(a, b));
    return !less;
  }
  return internalError("unknown comparison operator '" + op + "'");
}

Result<int64_t> toInteger(const Value &value, const std::string &what) {
  if (isIntLike(value))
    return intOf(value);
  return invalidArgument(what + " must be an integer, got " + pyType(value));
}

} // namespace kiln::rt::jinja
