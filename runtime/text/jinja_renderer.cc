#include "runtime/text/jinja_renderer.h"

#include <chrono>
#include <memory>

#include "runtime/text/jinja_builtins.h"

namespace kiln::rt::jinja {

namespace {

// Macros may recurse; Python stops at ~1000 frames, kiln earlier so the C++ stack stays small.
constexpr int kMaxCallDepth = 64;
// jinja2's sandbox MAX_RANGE.
constexpr int64_t kMaxRange = 100000;

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

struct Scope {
  ScopePtr parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value *lookup(const std::string &name) const {
    for (const Scope *s = this; s != nullptr; s = s->parent.get())
      for (const auto &entry : s->vars)
        if (entry.first == name)
          return &entry.second;
    return nullptr;
  }

  void set(const std::string &name, Value value) {
    for (auto &entry : vars) {
      if (entry.first == name) {
        entry.second = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};

ScopePtr childOf(const ScopePtr &parent) {
  auto scope = std::make_shared<Scope>();
  scope->parent = parent;
  return scope;
}

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
public:
  explicit Renderer(const RenderOptions &options) : options_(options) {}

  Result<std::string> run(const std::vector<StmtPtr> &program, const ObjectData &context) {
    auto root = std::make_shared<Scope>();
    addGlobals(*root);
    for (const auto &[key, value] : context.entries)
      root->set(key, value);
    std::string out;
    KILN_ASSIGN_OR_RETURN(Flow flow, execBlock(program, root, out));
    (void)flow;
    return out;
  }

private:
  // The first (innermost) failure names its line; raise_exception messages stay verbatim.
  Status locate(Status status, int line) {
    if (status.isOk() || raised_ || located_)
      return status;
    located_ = true;
    return Status(status.code(), "chat template line " + std::to_string(line) + ": " +
                                     status.message());
  }

  void addGlobals(Scope &root) {
    root.set("raise_exception", Value::callable("raise_exception", [this](CallArgs &args) {
      ArgReader reader("raise_exception", args);
      Value message = reader.get(0, "message", Value::fromString(""));
      raised_ = true;
      return Result<Value>(invalidArgument(toPyStr(message)));
    }));
    root.set("strftime_now", Value::callable("strftime_now", [this](CallArgs &args) {
      return strftimeNow(args);
    }));
    root.set("range", Value::callable("range", rangeFunction));
    root.set("dict", Value::callable("dict", [](CallArgs &args) { return buildObject(args, false); }));
    root.set("namespace",
             Value::callable("namespace", [](CallArgs &args) { return buildObject(args, true); }));
  }

  Result<Value> strftimeNow(CallArgs &args) {
    ArgReader reader("strftime_now", args);
    KILN_ASSIGN_OR_RETURN(Value format, reader.required(0, "format"));
    KILN_RETURN_IF_ERROR(reader.finish());
    if (!format.isString())
      return invalidArgument("strftime_now() format must be a string");
    std::tm now{};
    if (options_.now) {
      now = options_.now();
    } else {
      std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      localtime_r(&t, &now);
    }
    std::string buffer(format.asString().size() * 8 + 64, '\0');
    size_t n = std::strftime(buffer.data(), buffer.size(), format.asString().c_str(), &now);
    buffer.resize(n);
    return Value::fromString(buffer);
  }

  static Result<Value> rangeFunction(CallArgs &args) {
    if (!args.named.empty() || args.positional.empty() || args.positional.size() > 3)
      return invalidArgument("range() takes 1 to 3 positional arguments");
    std::vector<int64_t> bounds;
    for (const Value &v : args.positional) {
      KILN_ASSIGN_OR_RETURN(int64_t x, toInteger(v, "range() argument"));
      bounds.push_back(x);
    }
    int64_t start = bounds.size() > 1 ? bounds[0] : 0;
    int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
    int64_t step = bounds.size() > 2 ? bounds[2] : 1;
    if (step == 0)
      return invalidArgument("range() arg 3 must not be zero");
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(items.size()) >= kMaxRange)
        return outOfRange("range() is limited to " + std::to_string(kMaxRange) + " items");
      items.push_back(Value::fromInt(i));
    }
    return Value::array(std::move(items));
  }

  // dict(...) and namespace(...): an optional mapping, then keyword arguments.
  static Result<Value> buildObject(CallArgs &args, bool isNamespace) {
    const char *what = isNamespace ? "namespace" : "dict";
    if (args.positional.size() > 1)
      return invalidArgument(std::string(what) + "() takes at most one positional argument");
    ObjectData data;
    if (!args.positional.empty()) {
      const Value &source = args.positional[0];
      if (!source.isObject())
        return invalidArgument(std::string(what) + "() positional argument must be a mapping");
      data = source.asObject();
    }
    for (auto &[key, value] : args.named) {
      if (isNamespace && !key.empty() && key[0] == '_')
        return invalidArgument("Chat templates cannot store underscore-prefixed attributes on a "
                               "namespace, but got '" + key + "'. Please rename the attribute.");
      data.set(key, value);
    }
    return isNamespace ? Value::makeNamespace(std::move(data)) : Value::object(std::move(data));
  }

  Status step() {
    if (++steps_ > options_.maxSteps)
      return outOfRange("the chat template ran more than " + std::to_string(options_.maxSteps) +
                        " loop iterations and macro calls");
    return okStatus();
  }

  Status append(std::string &out, const std::string &text) {
    if (out.size() + text.size() > options_.maxOutputBytes)
      return outOfRange("rendered chat template exceeds " +
                        std::to_string(options_.maxOutputBytes) + " bytes");
    written_ += text.size();
    if (written_ > options_.maxWrittenBytes)
      return outOfRange("the chat template wrote more than " +
                        std::to_string(options_.maxWrittenBytes) +
                        " bytes in all (macro outputs included)");
    out += text;
    return okStatus();
  }

  Result<Flow> execBlock(const std::vector<StmtPtr> &body, const ScopePtr &scope,
                         std::string &out) {
    for (const StmtPtr &stmt : body) {
      Result<Flow> flow = exec(*stmt, scope, out);
      if (!flow.isOk())
        return locate(flow.status(), stmt->line);
      if (*flow != Flow::kNormal)
        return *flow;
    }
    return Flow::kNormal;
  }

  Result<Flow> exec(const Stmt &stmt, const ScopePtr &scope, std::string &out) {
    switch (stmt.kind) {
    case StmtKind::kText:
      KILN_RETURN_IF_ERROR(append(out, stmt.text));
      return Flow::kNormal;
    case StmtKind::kEmit: {
      KILN_ASSIGN_OR_RETURN(Value value, eval(*stmt.expr, scope));
      KILN_RETURN_IF_ERROR(append(out, toPyStr(value)));
      return Flow::kNormal;
    }
    case StmtKind::kIf: {
      KILN_ASSIGN_OR_RETURN(Value test, eval(*stmt.expr, scope));
      return execBlock(isTruthy(test) ? stmt.body : stmt.elseBody, scope, out);
    }
    case StmtKind::kFor:
      KILN_RETURN_IF_ERROR(execFor(stmt, scope, out));
      return Flow::kNormal;
    case StmtKind::kSet: {
      KILN_ASSIGN_OR_RETURN(Value value, eval(*stmt.expr, scope));
      KILN_RETURN_IF_ERROR(bindTargets(stmt, value, *scope));
      return Flow::kNormal;
    }
    case StmtKind::kSetAttr:
      KILN_RETURN_IF_ERROR(execSetAttr(stmt, scope));
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string captured;
      KILN_ASSIGN_OR_RETURN(Flow flow, execBlock(stmt.body, scope, captured));
      (void)flow;
      scope->set(stmt.targets[0], Value::fromString(std::move(captured)));
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->set(stmt.targets[0], makeMacro(stmt, scope));
      return Flow::kNormal;
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kGeneration:
      return execBlock(stmt.body, scope, out);
    }
    return internalError("unknown statement kind");
  }

  Status bindTargets(const Stmt &stmt, const Value &value, Scope &scope) {
    if (!stmt.unpack) {
      scope.set(stmt.targets[0], value);
      return okStatus();
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Value> parts, iterateValue(value));
    if (parts.size() != stmt.targets.size())
      return invalidArgument(parts.size() < stmt.targets.size()
                                 ? "not enough values to unpack (expected " +
                                       std::to_string(stmt.targets.size()) + ", got " +
                                       std::to_string(parts.size()) + ")"
                                 : "too many values to unpack (expected " +
                                       std::to_string(stmt.targets.size()) + ")");
    for (size_t i = 0; i < parts.size(); ++i)
      scope.set(stmt.targets[i], parts[i]);
    return okStatus();
  }

  Status execSetAttr(const Stmt &stmt, const ScopePtr &scope) {
    const Value *target = scope->lookup(stmt.targets[0]);
    if (target == nullptr || !target->isNamespace())
      return invalidArgument("cannot assign attribute '" + stmt.targets[1] +
                             "' on non-namespace object '" + stmt.targets[0] + "'");
    if (stmt.targets[1][0] == '_')
      return invalidArgument("Chat templates cannot store underscore-prefixed attributes on a "
                             "namespace, but got '" + stmt.targets[1] + "'. Please rename the "
                             "attribute.");
    Value ns = *target;
    KILN_ASSIGN_OR_RETURN(Value value, eval(*stmt.expr, scope));
    ns.namespaceData().set(stmt.targets[1], std::move(value));
    return okStatus();
  }

  static Value makeLoop(const std::vector<Value> &items, size_t i, const Value &cycle) {
    int64_t n = static_cast<int64_t>(items.size());
    int64_t index = static_cast<int64_t>(i);
    ObjectData loop;
    loop.set("index", Value::fromInt(index + 1));
    loop.set("index0", Value::fromInt(index));
    loop.set("revindex", Value::fromInt(n - index));
    loop.set("revindex0", Value::fromInt(n - index - 1));
    loop.set("first", Value::fromBool(index == 0));
    loop.set("last", Value::fromBool(index == n - 1));
    loop.set("length", Value::fromInt(n));
    loop.set("depth", Value::fromInt(1));
    loop.set("depth0", Value::fromInt(0));
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop.set("nextitem",
             index + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    loop.set("cycle", cycle);
    return Value::object(std::move(loop));
  }

  Status execFor(const Stmt &stmt, const ScopePtr &scope, std::string &out) {
    KILN_ASSIGN_OR_RETURN(Value iterable, eval(*stmt.expr, scope));
    KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterateValue(iterable));
    if (stmt.filter) {
      std::vector<Value> kept;
      for (const Value &item : items) {
        KILN_RETURN_IF_ERROR(step());
        ScopePtr probe = childOf(scope);
        KILN_RETURN_IF_ERROR(bindTargets(stmt, item, *probe));
        KILN_ASSIGN_OR_RETURN(Value keep, eval(*stmt.filter, probe));
        if (isTruthy(keep))
          kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      KILN_ASSIGN_OR_RETURN(Flow flow, execBlock(stmt.elseBody, childOf(scope), out));
      (void)flow;
      return okStatus();
    }
    for (size_t i = 0; i < items.size(); ++i) {
      KILN_RETURN_IF_ERROR(step());
      // jinja2 gives every iteration a fresh frame: a `set` inside the body does not survive
      // into the next iteration or past the loop.
      ScopePtr iteration = childOf(scope);
      KILN_RETURN_IF_ERROR(bindTargets(stmt, items[i], *iteration));
      Value cycle = Value::callable("loop.cycle", [i](CallArgs &args) -> Result<Value> {
        if (args.positional.empty())
          return invalidArgument("loop.cycle() needs at least one argument");
        return args.positional[i % args.positional.size()];
      });
      iteration->set("loop", makeLoop(items, i, cycle));
      KILN_ASSIGN_OR_RETURN(Flow flow, execBlock(stmt.body, iteration, out));
      if (flow == Flow::kBreak)
        break;
    }
    return okStatus();
  }

  Value makeMacro(const Stmt &stmt, const ScopePtr &scope) {
    // A weak reference: the macro lives in the scope it captures, and a strong one would leak the
    // cycle after rendering.
    std::weak_ptr<Scope> defining = scope;
    const Stmt *macro = &stmt;
    return Value::callable(stmt.targets[0], [this, defining, macro](CallArgs &args) {
      return callMacro(*macro, defining.lock(), args);
    });
  }

  Result<Value> callMacro(const Stmt &macro, const ScopePtr &defining, CallArgs &args) {
    const std::string &name = macro.targets[0];
    if (!defining)
      return failedPrecondition("macro '" + name + "' called after its scope ended");
    if (args.positional.size() > macro.params.size())
      return invalidArgument("macro '" + name + "' takes not more than " +
                             std::to_string(macro.params.size()) + " argument(s)");
    if (callDepth_ >= kMaxCallDepth)
      return outOfRange("macro calls nested deeper than " + std::to_string(kMaxCallDepth));
    KILN_RETURN_IF_ERROR(step());
    ScopePtr local = childOf(defining);
    for (const auto &[key, value] : args.named) {
      bool known = false;
      for (const auto &param : macro.params)
        known = known || param.first == key;
      if (!known)
        return invalidArgument("macro '" + name + "' takes no keyword argument '" + key + "'");
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto &[param, fallback] = macro.params[i];
      Value value = Value::undefined("parameter '" + param + "' was not provided");
      if (i < args.positional.size()) {
        value = args.positional[i];
      } else {
        bool named = false;
        for (const auto &[key, v] : args.named) {
          if (key == param) {
            value = v;
            named = true;
          }
        }
        if (!named && fallback) {
          KILN_ASSIGN_OR_RETURN(value, eval(*fallback, local));
        }
      }
      local->set(param, value);
    }
    std::string out;
    ++callDepth_;
    Result<Flow> flow = execBlock(macro.body, local, out);
    --callDepth_;
    if (!flow.isOk())
      return flow.status();
    return Value::fromString(std::move(out));
  }

  Result<Value> eval(const Expr &expr, const ScopePtr &scope) {
    Result<Value> value = evalInner(expr, scope);
    if (!value.isOk())
      return locate(value.status(), expr.line);
    return value;
  }

  Result<CallArgs> evalArgs(const Expr &expr, size_t firstArg, const ScopePtr &scope) {
    CallArgs args;
    for (size_t i = firstArg; i < expr.children.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(Value v, eval(*expr.children[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto &[key, valueExpr] : expr.kwargs) {
      KILN_ASSIGN_OR_RETURN(Value v, eval(*valueExpr, scope));
      args.named.emplace_back(key, std::move(v));
    }
    return args;
  }

  Result<Value> evalCall(const Expr &expr, const ScopePtr &scope) {
    KILN_ASSIGN_OR_RETURN(Value callee, eval(*expr.children[0], scope));
    KILN_RETURN_IF_ERROR(requireDefined(callee));
    if (!callee.isCallable())
      return invalidArgument("'" + typeDescription(callee) + "' is not callable");
    KILN_ASSIGN_OR_RETURN(CallArgs args, evalArgs(expr, 1, scope));
    return callee.asCallable().fn(args);
  }

  Result<Value> evalCompare(const Expr &expr, const ScopePtr &scope) {
    KILN_ASSIGN_OR_RETURN(Value left, eval(*expr.children[0], scope));
    for (size_t i = 0; i < expr.ops.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(Value right, eval(*expr.children[i + 1], scope));
      KILN_ASSIGN_OR_RETURN(bool result, compareOp(expr.ops[i], left, right));
      if (!result)
        return Value::fromBool(false);
      left = std::move(right);
    }
    return Value::fromBool(true);
  }

  Result<Value> evalLiteral(const Expr &expr, const ScopePtr &scope) {
    if (expr.kind == ExprKind::kDict) {
      ObjectData data;
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        KILN_ASSIGN_OR_RETURN(Value key, eval(*expr.children[i], scope));
        if (!key.isString())
          return unimplemented("dict literal keys other than strings are not supported");
        KILN_ASSIGN_OR_RETURN(Value value, eval(*expr.children[i + 1], scope));
        data.set(key.asString(), std::move(value));
      }
      return Value::object(std::move(data));
    }
    std::vector<Value> items;
    for (const ExprPtr &child : expr.children) {
      KILN_ASSIGN_OR_RETURN(Value v, eval(*child, scope));
      items.push_back(std::move(v));
    }
    return Value::array(std::move(items), expr.kind == ExprKind::kTuple);
  }

  Result<Value> evalOperator(const Expr &expr, const ScopePtr &scope) {
    if (expr.kind == ExprKind::kUnary) {
      KILN_ASSIGN_OR_RETURN(Value operand, eval(*expr.children[0], scope));
      if (expr.name == "not")
        return Value::fromBool(!isTruthy(operand));
      if (expr.name == "-")
        return unaryMinus(operand);
      if (!operand.isNumber())
        return invalidArgument("bad operand type for unary +: '" + typeDescription(operand) + "'");
      return operand;
    }
    KILN_ASSIGN_OR_RETURN(Value left, eval(*expr.children[0], scope));
    if (expr.name == "and" || expr.name == "or") {
      if (isTruthy(left) == (expr.name == "or"))
        return left;
      return eval(*expr.children[1], scope);
    }
    KILN_ASSIGN_OR_RETURN(Value right, eval(*expr.children[1], scope));
    return binaryOp(expr.name, left, right);
  }

  Result<Value> evalInner(const Expr &expr, const ScopePtr &scope) {
    switch (expr.kind) {
    case ExprKind::kConst:
      return expr.constant;
    case ExprKind::kName: {
      const Value *found = scope->lookup(expr.name);
      return found ? *found : Value::undefined("'" + expr.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return evalLiteral(expr, scope);
    case ExprKind::kGetAttr: {
      KILN_ASSIGN_OR_RETURN(Value object, eval(*expr.children[0], scope));
      return getAttr(object, expr.name);
    }
    case ExprKind::kGetItem: {
      KILN_ASSIGN_OR_RETURN(Value object, eval(*expr.children[0], scope));
      KILN_ASSIGN_OR_RETURN(Value key, eval(*expr.children[1], scope));
      return getItem(object, key);
    }
    case ExprKind::kSlice: {
      Value parts[4];
      for (size_t i = 0; i < 4; ++i)
        if (expr.children[i]) {
          KILN_ASSIGN_OR_RETURN(parts[i], eval(*expr.children[i], scope));
        }
      return sliceValue(parts[0], parts[1], parts[2], parts[3]);
    }
    case ExprKind::kCall:
      return evalCall(expr, scope);
    case ExprKind::kFilter: {
      KILN_ASSIGN_OR_RETURN(Value input, eval(*expr.children[0], scope));
      KILN_ASSIGN_OR_RETURN(CallArgs args, evalArgs(expr, 1, scope));
      return applyFilter(expr.name, input, args);
    }
    case ExprKind::kTest: {
      KILN_ASSIGN_OR_RETURN(Value input, eval(*expr.children[0], scope));
      KILN_ASSIGN_OR_RETURN(CallArgs args, evalArgs(expr, 1, scope));
      KILN_ASSIGN_OR_RETURN(bool passed, applyTest(expr.name, input, args));
      return Value::fromBool(passed != expr.negated);
    }
    case ExprKind::kUnary:
    case ExprKind::kBinary:
      return evalOperator(expr, scope);
    case ExprKind::kCompare:
      return evalCompare(expr, scope);
    case ExprKind::kCondExpr: {
      KILN_ASSIGN_OR_RETURN(Value test, eval(*expr.children[1], scope));
      if (isTruthy(test))
        return eval(*expr.children[0], scope);
      if (expr.children[2])
        return eval(*expr.children[2], scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(expr.line) +
                              " evaluated to false and no else section was defined.");
    }
    }
    return internalError("unknown expression kind");
  }

  const RenderOptions &options_;
  bool raised_ = false;
  bool located_ = false;
  int callDepth_ = 0;
  int64_t steps_ = 0;
  size_t written_ = 0; // bytes appended to any output in this render
};

} // namespace

Result<std::string> renderProgram(const std::vector<StmtPtr> &program, const ObjectData &context,
                                  const RenderOptions &options) {
  return Renderer(options).run(program, context);
}

} // namespace kiln::rt::jinja
