// The value model of kiln's Jinja subset: the Python values that chat templates see (None, bool,
// int, float, str, list/tuple, dict), plus jinja2's Undefined, namespace() objects and callables.
// Containers are shared and immutable once built, as in jinja2's ImmutableSandboxedEnvironment;
// only a namespace can change, through `{% set ns.attr = ... %}`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace kiln::rt::jinja {

class Value;

struct ArrayData {
  std::vector<Value> items;
  bool isTuple = false; // only changes how str() prints it: (a, b) instead of [a, b]
};

// A Python dict with string keys, in insertion order (chat messages and tool schemas print and
// serialize in the order the caller wrote them).
struct ObjectData {
  std::vector<std::pair<std::string, Value>> entries;

  const Value *find(std::string_view key) const;
  void set(std::string key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

using NativeFunction = std::function<Result<Value>(CallArgs &args)>;

struct CallableData {
  std::string name;
  NativeFunction fn;
};

enum class ValueKind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kArray,
  kObject,
  kNamespace,
  kCallable,
};

class Value {
public:
  // A default Value is jinja2's Undefined with no hint.
  Value() = default;

  static Value undefined(std::string hint);
  static Value none();
  static Value fromBool(bool value);
  static Value fromInt(int64_t value);
  static Value fromFloat(double value);
  static Value fromString(std::string value);
  static Value array(std::vector<Value> items, bool isTuple = false);
  static Value object(ObjectData data);
  static Value makeNamespace(ObjectData data);
  static Value callable(std::string name, NativeFunction fn);

  ValueKind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == ValueKind::kUndefined; }
  bool isNone() const { return kind_ == ValueKind::kNone; }
  bool isBool() const { return kind_ == ValueKind::kBool; }
  bool isInt() const { return kind_ == ValueKind::kInt; }
  bool isFloat() const { return kind_ == ValueKind::kFloat; }
  // Python's numbers.Number: bool counts, as True + 1 == 2 in Python.
  bool isNumber() const { return isBool() || isInt() || isFloat(); }
  bool isString() const { return kind_ == ValueKind::kString; }
  bool isArray() const { return kind_ == ValueKind::kArray; }
  bool isObject() const { return kind_ == ValueKind::kObject; }
  bool isNamespace() const { return kind_ == ValueKind::kNamespace; }
  bool isCallable() const { return kind_ == ValueKind::kCallable; }

  bool asBool() const { return bool_; }
  int64_t asInt() const { return int_; }
  // Any number as a double (bool and int promote).
  double asDouble() const;
  const std::string &asString() const { return string_; }
  const ArrayData &asArray() const { return *array_; }
  const ObjectData &asObject() const { return *object_; }
  // Namespaces are the one mutable value; every copy of a namespace Value shares its storage.
  ObjectData &namespaceData() const { return *object_; }
  const CallableData &asCallable() const { return *callable_; }
  // The jinja2 message an Undefined raises when it is used, e.g. "'foo' is undefined".
  const std::string &undefinedHint() const { return string_; }

private:
  ValueKind kind_ = ValueKind::kUndefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string string_;
  std::shared_ptr<ArrayData> array_;
  std::shared_ptr<ObjectData> object_;
  std::shared_ptr<CallableData> callable_;
};

// Python truthiness (Undefined is falsy).
bool isTruthy(const Value &value);

// Python str(): what `{{ value }}` prints. Undefined prints as "".
std::string toPyStr(const Value &value);
// Python repr(): how values print inside a printed list or dict.
std::string toPyRepr(const Value &value);
// repr(float): shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string formatPyFloat(double value);
// jinja2's object_type_repr for error messages: "dict object", "None", "str object".
std::string typeDescription(const Value &value);

// Python ==, deep for containers; 1 == 1.0 == True.
bool pyEquals(const Value &a, const Value &b);
// Python <: numbers with numbers, str with str, lists element-wise. Fails on other mixes like
// Python's TypeError does.
Result<bool> pyLess(const Value &a, const Value &b);

struct JsonFormat {
  std::optional<std::string> indent; // json.dumps indent, already turned into a string
  std::string itemSeparator = ", ";
  std::string keySeparator = ": ";
  bool sortKeys = false;
};

// json.dumps(value, ensure_ascii=False, ...) byte for byte.
Result<std::string> toJson(const Value &value, const JsonFormat &format);

} // namespace kiln::rt::jinja
