// Syntax tree of the Jinja subset. Nodes are plain structs owned through unique_ptr; the parser
// builds them once per template and the renderer only reads them, so one parsed template can
// render concurrently.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/text/jinja_value.h"

namespace kiln::rt::jinja {

enum class ExprKind {
  kConst,    // constant
  kName,     // name
  kList,     // children = items
  kTuple,    // children = items
  kDict,     // children = key0, value0, key1, value1, ...
  kGetAttr,  // children[0].name
  kGetItem,  // children[0][children[1]]
  kSlice,    // children[0][children[1]:children[2]:children[3]], missing parts are null
  kCall,     // children[0](children[1..], kwargs)
  kFilter,   // children[0] | name(children[1..], kwargs)
  kTest,     // children[0] is [not] name(children[1..], kwargs)
  kUnary,    // name in {"not", "-", "+"}, children[0]
  kBinary,   // children[0] name children[1]; name is an operator, "and", "or", "in", "not in"
  kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ...
  kCondExpr, // children[0] if children[1] else children[2] (else part may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  Value constant;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false; // `is not`
};

enum class StmtKind {
  kText,       // text
  kEmit,       // {{ expr }}
  kIf,         // if expr: body, else: elseBody (elif nests an If in elseBody)
  kFor,        // for targets in expr [if filter]: body, else: elseBody
  kSet,        // set targets = expr
  kSetAttr,    // set targets[0].targets[1] = expr
  kSetBlock,   // set targets[0] %} body {% endset
  kMacro,      // macro name(params): body
  kBreak,
  kContinue,
  kGeneration, // transformers' {% generation %} block: renders its body
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  bool unpack = false; // targets came as a tuple: `for k, v in ...`
  std::vector<StmtPtr> body;
  std::vector<StmtPtr> elseBody;
  std::vector<std::pair<std::string, ExprPtr>> params; // macro parameters, default may be null
};

} // namespace kiln::rt::jinja
