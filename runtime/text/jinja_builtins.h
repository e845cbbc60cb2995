// Python and jinja2 semantics that expressions need: operators, attribute/item lookup with jinja2's
// fallback between them, slicing, iteration, the str/dict methods templates call, and the filters
// and tests. Everything here is stateless; the renderer supplies globals and scopes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/text/jinja_value.h"

namespace kiln::rt::jinja {

// Reads a Python-style call's arguments by position or keyword, and rejects leftovers so a typo in
// a template fails instead of being ignored.
class ArgReader {
public:
  ArgReader(std::string function, CallArgs &args) : function_(std::move(function)), args_(args) {}

  // Argument `index` (0-based) or keyword `name`, else `fallback`.
  Value get(size_t index, const char *name, Value fallback = Value());
  Result<Value> required(size_t index, const char *name);
  // Positional arguments from `index` on (for select/map's *args).
  std::vector<Value> rest(size_t index);
  Status finish() const;

private:
  std::string function_;
  CallArgs &args_;
  size_t positionalUsed_ = 0;
  std::vector<std::string> namedUsed_;
  bool restTaken_ = false;
};

// Fails with jinja2's UndefinedError message when `value` is Undefined.
Status requireDefined(const Value &value);

// `obj.name`: Python attribute first (methods), then item; missing gives an Undefined.
Result<Value> getAttr(const Value &object, const std::string &name);
// `obj[key]`: item first, then attribute for string keys.
Result<Value> getItem(const Value &object, const Value &key);
Result<Value> sliceValue(const Value &object, const Value &start, const Value &stop,
                         const Value &step);

// Python iteration: list items, dict keys, str code points; Undefined iterates as empty.
Result<std::vector<Value>> iterateValue(const Value &value);
Result<int64_t> lengthOf(const Value &value);

// Arithmetic and string operators: + - * / // % ** ~.
Result<Value> binaryOp(const std::string &op, const Value &a, const Value &b);
Result<Value> unaryMinus(const Value &value);
// `item in container`.
Result<bool> containsValue(const Value &container, const Value &item);
// ==, !=, <, >, <=, >=, in, not in.
Result<bool> compareOp(const std::string &op, const Value &a, const Value &b);

Result<Value> applyFilter(const std::string &name, const Value &input, CallArgs &args);
Result<bool> applyTest(const std::string &name, const Value &input, CallArgs &args);

// The bound method `object.name` for str and dict values (strip, split, items, get, ...); nullopt
// when Python's type has no such attribute, an error when it has one kiln does not support.
Result<std::optional<Value>> lookupMethod(const Value &object, const std::string &name);

// Python int() / float() conversions, shared by filters and methods.
Result<int64_t> toInteger(const Value &value, const std::string &what);

} // namespace kiln::rt::jinja
