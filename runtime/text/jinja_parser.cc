#include "runtime/text/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "runtime/text/jinja_lexer.h"

namespace kiln::rt::jinja {

namespace {

// Deeply nested input must fail cleanly instead of exhausting the stack.
constexpr int kMaxDepth = 200;

bool isOneOf(const std::string &s, std::initializer_list<const char *> options) {
  return std::any_of(options.begin(), options.end(), [&](const char *o) { return s == o; });
}

ExprPtr makeExpr(ExprKind kind, int line) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  return expr;
}

ExprPtr makeBinary(std::string op, ExprPtr left, ExprPtr right) {
  ExprPtr expr = makeExpr(ExprKind::kBinary, left->line);
  expr->name = std::move(op);
  expr->children.push_back(std::move(left));
  expr->children.push_back(std::move(right));
  return expr;
}

class Parser {
public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Result<std::vector<StmtPtr>> parseAll() {
    std::string endedWith;
    return parseBody({}, &endedWith);
  }

private:
  const Token &cur() const { return toks_[i_]; }
  const Token &peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size())
      ++i_;
  }
  bool isOp(const char *op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool isName(const char *name) const {
    return cur().kind == TokenKind::kName && cur().text == name;
  }

  Status error(const std::string &message) const {
    return invalidArgument("chat template syntax error, line " + std::to_string(cur().line) +
                           ": " + message);
  }
  Status unsupported(const std::string &what) const {
    return unimplemented("chat template line " + std::to_string(cur().line) + ": " + what +
                         " is not supported by kiln's Jinja subset");
  }

  std::string describe(const Token &t) const {
    switch (t.kind) {
    case TokenKind::kEof:
      return "end of template";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kVariableEnd:
      return "'}}'";
    case TokenKind::kString:
      return "string literal";
    default:
      return "'" + t.text + "'";
    }
  }

  Status expectOp(const char *op) {
    if (!isOp(op))
      return error(std::string("expected '") + op + "', got " + describe(cur()));
    advance();
    return okStatus();
  }
  Status expectKind(TokenKind kind, const char *what) {
    if (cur().kind != kind)
      return error(std::string("expected ") + what + ", got " + describe(cur()));
    advance();
    return okStatus();
  }
  Result<std::string> expectName() {
    if (cur().kind != TokenKind::kName)
      return error("expected a name, got " + describe(cur()));
    std::string name = cur().text;
    advance();
    return name;
  }

  Result<std::vector<StmtPtr>> parseBody(std::initializer_list<const char *> endTags,
                                         std::string *endedWith) {
    std::vector<StmtPtr> body;
    while (true) {
      const Token &t = cur();
      if (t.kind == TokenKind::kEof) {
        if (endTags.size() == 0)
          return body;
        return error(std::string("unexpected end of template, expected '") +
                     *(endTags.end() - 1) + "'");
      }
      if (t.kind == TokenKind::kData) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = StmtKind::kText;
        stmt->line = t.line;
        stmt->text = t.text;
        body.push_back(std::move(stmt));
        advance();
      } else if (t.kind == TokenKind::kVariableBegin) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = StmtKind::kEmit;
        stmt->line = t.line;
        advance();
        KILN_ASSIGN_OR_RETURN(stmt->expr, parseTuple(true, false));
        KILN_RETURN_IF_ERROR(expectKind(TokenKind::kVariableEnd, "'}}'"));
        body.push_back(std::move(stmt));
      } else if (t.kind == TokenKind::kBlockBegin) {
        advance();
        if (cur().kind != TokenKind::kName)
          return error("expected a tag name after '{%', got " + describe(cur()));
        std::string tag = cur().text;
        for (const char *end : endTags) {
          if (tag == end) {
            advance();
            *endedWith = tag;
            return body;
          }
        }
        KILN_ASSIGN_OR_RETURN(StmtPtr stmt, parseStatement());
        body.push_back(std::move(stmt));
      } else {
        return error("unexpected " + describe(t));
      }
    }
  }

  Result<StmtPtr> parseStatement() {
    if (++depth_ > kMaxDepth)
      return error("blocks nested deeper than " + std::to_string(kMaxDepth));
    Result<StmtPtr> result = parseStatementInner();
    --depth_;
    return result;
  }

  Result<StmtPtr> parseStatementInner() {
    const std::string tag = cur().text;
    auto stmt = std::make_unique<Stmt>();
    stmt->line = cur().line;
    advance();
    if (tag == "if") {
      KILN_RETURN_IF_ERROR(parseIfRest(*stmt));
    } else if (tag == "for") {
      KILN_RETURN_IF_ERROR(parseFor(*stmt));
    } else if (tag == "set") {
      KILN_RETURN_IF_ERROR(parseSet(*stmt));
    } else if (tag == "macro") {
      KILN_RETURN_IF_ERROR(parseMacro(*stmt));
    } else if (tag == "break" || tag == "continue") {
      if (loopDepth_ == 0)
        return error("'" + tag + "' outside of a loop");
      stmt->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
    } else if (tag == "generation") {
      stmt->kind = StmtKind::kGeneration;
      KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
      std::string ended;
      KILN_ASSIGN_OR_RETURN(stmt->body, parseBody({"endgeneration"}, &ended));
      KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
    } else if (isOneOf(tag, {"extends", "block", "include", "import", "from", "call", "filter",
                             "with", "autoescape", "do", "trans"})) {
      --i_;
      return unsupported("the '{% " + tag + " %}' tag");
    } else if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") {
      --i_;
      return error("unexpected '" + tag + "' tag");
    } else {
      --i_;
      return error("unknown tag '" + tag + "'");
    }
    return stmt;
  }

  // `if`, `elif`: the condition and body; nested If nodes for elif chains.
  Status parseIfRest(Stmt &stmt) {
    stmt.kind = StmtKind::kIf;
    KILN_ASSIGN_OR_RETURN(stmt.expr, parseTuple(false, false));
    KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
    std::string ended;
    KILN_ASSIGN_OR_RETURN(stmt.body, parseBody({"elif", "else", "endif"}, &ended));
    if (ended == "elif") {
      auto nested = std::make_unique<Stmt>();
      nested->line = cur().line;
      KILN_RETURN_IF_ERROR(parseIfRest(*nested));
      stmt.elseBody.push_back(std::move(nested));
      return okStatus();
    }
    if (ended == "else") {
      KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
      KILN_ASSIGN_OR_RETURN(stmt.elseBody, parseBody({"endif"}, &ended));
    }
    return expectKind(TokenKind::kBlockEnd, "'%}'");
  }

  // A loop or assignment target: `name` or `a, b` or `(a, b)`.
  Status parseTargets(Stmt &stmt) {
    bool parens = isOp("(");
    if (parens)
      advance();
    KILN_ASSIGN_OR_RETURN(std::string first, expectName());
    stmt.targets.push_back(first);
    while (isOp(",")) {
      advance();
      stmt.unpack = true;
      if (cur().kind != TokenKind::kName)
        break;
      KILN_ASSIGN_OR_RETURN(std::string next, expectName());
      stmt.targets.push_back(next);
    }
    if (parens) {
      stmt.unpack = true;
      KILN_RETURN_IF_ERROR(expectOp(")"));
    }
    return okStatus();
  }

  Status parseFor(Stmt &stmt) {
    stmt.kind = StmtKind::kFor;
    KILN_RETURN_IF_ERROR(parseTargets(stmt));
    if (!isName("in"))
      return error("expected 'in' in for loop, got " + describe(cur()));
    advance();
    KILN_ASSIGN_OR_RETURN(stmt.expr, parseTuple(false, false));
    if (isName("if")) {
      advance();
      KILN_ASSIGN_OR_RETURN(stmt.filter, parseExpression(true));
    }
    if (isName("recursive"))
      return unsupported("'recursive' for loops");
    KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
    ++loopDepth_;
    std::string ended;
    auto body = parseBody({"else", "endfor"}, &ended);
    --loopDepth_;
    if (!body.isOk())
      return body.status();
    stmt.body = std::move(body).value();
    if (ended == "else") {
      KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
      KILN_ASSIGN_OR_RETURN(stmt.elseBody, parseBody({"endfor"}, &ended));
    }
    return expectKind(TokenKind::kBlockEnd, "'%}'");
  }

  Status parseSet(Stmt &stmt) {
    if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
        peek().text == ".") {
      stmt.kind = StmtKind::kSetAttr;
      stmt.targets.push_back(cur().text);
      advance();
      advance();
      KILN_ASSIGN_OR_RETURN(std::string attr, expectName());
      stmt.targets.push_back(attr);
    } else {
      stmt.kind = StmtKind::kSet;
      KILN_RETURN_IF_ERROR(parseTargets(stmt));
    }
    if (isOp("=")) {
      advance();
      KILN_ASSIGN_OR_RETURN(stmt.expr, parseTuple(true, false));
      return expectKind(TokenKind::kBlockEnd, "'%}'");
    }
    if (stmt.kind != StmtKind::kSet || stmt.unpack)
      return error("expected '=' in set tag, got " + describe(cur()));
    if (isOp("|"))
      return unsupported("a filtered block set ('{% set x | filter %}')");
    stmt.kind = StmtKind::kSetBlock;
    KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
    std::string ended;
    KILN_ASSIGN_OR_RETURN(stmt.body, parseBody({"endset"}, &ended));
    return expectKind(TokenKind::kBlockEnd, "'%}'");
  }

  Status parseMacro(Stmt &stmt) {
    stmt.kind = StmtKind::kMacro;
    KILN_ASSIGN_OR_RETURN(std::string name, expectName());
    stmt.targets.push_back(name);
    KILN_RETURN_IF_ERROR(expectOp("("));
    while (!isOp(")")) {
      if (!stmt.params.empty())
        KILN_RETURN_IF_ERROR(expectOp(","));
      if (isOp(")"))
        break;
      KILN_ASSIGN_OR_RETURN(std::string param, expectName());
      ExprPtr defaultValue;
      if (isOp("=")) {
        advance();
        KILN_ASSIGN_OR_RETURN(defaultValue, parseExpression(true));
      }
      stmt.params.emplace_back(param, std::move(defaultValue));
    }
    advance();
    KILN_RETURN_IF_ERROR(expectKind(TokenKind::kBlockEnd, "'%}'"));
    std::string ended;
    int savedLoopDepth = loopDepth_;
    loopDepth_ = 0;
    auto body = parseBody({"endmacro"}, &ended);
    loopDepth_ = savedLoopDepth;
    if (!body.isOk())
      return body.status();
    stmt.body = std::move(body).value();
    if (cur().kind == TokenKind::kName)
      advance(); // `{% endmacro name %}`
    return expectKind(TokenKind::kBlockEnd, "'%}'");
  }

  bool atTupleEnd() const {
    return cur().kind == TokenKind::kVariableEnd || cur().kind == TokenKind::kBlockEnd ||
           cur().kind == TokenKind::kEof || isOp(")");
  }

  Result<ExprPtr> parseTuple(bool withCondExpr, bool explicitParens) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool isTuple = false;
    while (true) {
      if (!items.empty())
        KILN_RETURN_IF_ERROR(expectOp(","));
      if (atTupleEnd())
        break;
      KILN_ASSIGN_OR_RETURN(ExprPtr item, parseExpression(withCondExpr));
      items.push_back(std::move(item));
      if (!isOp(","))
        break;
      isTuple = true;
    }
    if (!isTuple) {
      if (!items.empty())
        return std::move(items[0]);
      if (!explicitParens)
        return error("expected an expression, got " + describe(cur()));
    }
    ExprPtr tuple = makeExpr(ExprKind::kTuple, line);
    tuple->children = std::move(items);
    return tuple;
  }

  Result<ExprPtr> parseExpression(bool withCondExpr) {
    if (++depth_ > kMaxDepth)
      return error("expression nested deeper than " + std::to_string(kMaxDepth));
    Result<ExprPtr> result = withCondExpr ? parseCondExpr() : parseOr();
    --depth_;
    return result;
  }

  Result<ExprPtr> parseCondExpr() {
    KILN_ASSIGN_OR_RETURN(ExprPtr expr, parseOr());
    while (isName("if")) {
      int line = cur().line;
      advance();
      KILN_ASSIGN_OR_RETURN(ExprPtr test, parseOr());
      ExprPtr otherwise;
      if (isName("else")) {
        advance();
        KILN_ASSIGN_OR_RETURN(otherwise, parseCondExpr());
      }
      ExprPtr cond = makeExpr(ExprKind::kCondExpr, line);
      cond->children.push_back(std::move(expr));
      cond->children.push_back(std::move(test));
      cond->children.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  Result<ExprPtr> parseOr() {
    KILN_ASSIGN_OR_RETURN(ExprPtr left, parseAnd());
    while (isName("or")) {
      advance();
      KILN_ASSIGN_OR_RETURN(ExprPtr right, parseAnd());
      left = makeBinary("or", std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> parseAnd() {
    KILN_ASSIGN_OR_RETURN(ExprPtr left, parseNot());
    while (isName("and")) {
      advance();
      KILN_ASSIGN_OR_RETURN(ExprPtr right, parseNot());
      left = makeBinary("and", std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> parseNot() {
    if (isName("not")) {
      int line = cur().line;
      advance();
      if (++depth_ > kMaxDepth)
        return error("expression nested deeper than " + std::to_string(kMaxDepth));
      KILN_ASSIGN_OR_RETURN(ExprPtr operand, parseNot());
      --depth_;
      ExprPtr expr = makeExpr(ExprKind::kUnary, line);
      expr->name = "not";
      expr->children.push_back(std::move(operand));
      return expr;
    }
    return parseCompare();
  }

  Result<ExprPtr> parseCompare() {
    KILN_ASSIGN_OR_RETURN(ExprPtr first, parseMath1());
    ExprPtr compare;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOperator &&
          isOneOf(cur().text, {"==", "!=", "<", ">", "<=", ">="})) {
        op = cur().text;
        advance();
      } else if (isName("in")) {
        op = "in";
        advance();
      } else if (isName("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!compare) {
        compare = makeExpr(ExprKind::kCompare, first->line);
        compare->children.push_back(std::move(first));
      }
      KILN_ASSIGN_OR_RETURN(ExprPtr operand, parseMath1());
      compare->ops.push_back(op);
      compare->children.push_back(std::move(operand));
    }
    return compare ? std::move(compare) : std::move(first);
  }

  Result<ExprPtr> parseMath1() {
    KILN_ASSIGN_OR_RETURN(ExprPtr left, parseConcat());
    while (isOp("+") || isOp("-")) {
      std::string op = cur().text;
      advance();
      KILN_ASSIGN_OR_RETURN(ExprPtr right, parseConcat());
      left = makeBinary(op, std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> parseConcat() {
    KILN_ASSIGN_OR_RETURN(ExprPtr left, parseMath2());
    while (isOp("~")) {
      advance();
      KILN_ASSIGN_OR_RETURN(ExprPtr right, parseMath2());
      left = makeBinary("~", std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> parseMath2() {
    KILN_ASSIGN_OR_RETURN(ExprPtr left, parsePow());
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      std::string op = cur().text;
      advance();
      KILN_ASSIGN_OR_RETURN(ExprPtr right, parsePow());
      left = makeBinary(op, std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> parsePow() {
    KILN_ASSIGN_OR_RETURN(ExprPtr left, parseUnary(true));
    while (isOp("**")) {
      advance();
      KILN_ASSIGN_OR_RETURN(ExprPtr right, parseUnary(true));
      left = makeBinary("**", std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> parseUnary(bool withFilter) {
    if (++depth_ > kMaxDepth)
      return error("expression nested deeper than " + std::to_string(kMaxDepth));
    ExprPtr node;
    if (isOp("-") || isOp("+")) {
      node = makeExpr(ExprKind::kUnary, cur().line);
      node->name = cur().text;
      advance();
      KILN_ASSIGN_OR_RETURN(ExprPtr operand, parseUnary(false));
      node->children.push_back(std::move(operand));
    } else {
      KILN_ASSIGN_OR_RETURN(node, parsePrimary());
    }
    KILN_ASSIGN_OR_RETURN(node, parsePostfix(std::move(node)));
    if (withFilter) {
      KILN_ASSIGN_OR_RETURN(node, parseFilterExpr(std::move(node)));
    }
    --depth_;
    return node;
  }

  Result<ExprPtr> parsePrimary() {
    const Token &t = cur();
    ExprPtr node = makeExpr(ExprKind::kConst, t.line);
    switch (t.kind) {
    case TokenKind::kName:
      if (isOneOf(t.text, {"true", "True"}))
        node->constant = Value::fromBool(true);
      else if (isOneOf(t.text, {"false", "False"}))
        node->constant = Value::fromBool(false);
      else if (isOneOf(t.text, {"none", "None"}))
        node->constant = Value::none();
      else {
        node->kind = ExprKind::kName;
        node->name = t.text;
      }
      advance();
      return node;
    case TokenKind::kString: {
      std::string text;
      while (cur().kind == TokenKind::kString) {
        text += cur().text;
        advance();
      }
      node->constant = Value::fromString(std::move(text));
      return node;
    }
    case TokenKind::kInteger:
      node->constant = Value::fromInt(t.intValue);
      advance();
      return node;
    case TokenKind::kFloat:
      node->constant = Value::fromFloat(t.floatValue);
      advance();
      return node;
    default:
      break;
    }
    if (isOp("(")) {
      advance();
      KILN_ASSIGN_OR_RETURN(node, parseTuple(true, true));
      KILN_RETURN_IF_ERROR(expectOp(")"));
      return node;
    }
    if (isOp("["))
      return parseList();
    if (isOp("{"))
      return parseDict();
    return error("unexpected " + describe(t));
  }

  Result<ExprPtr> parseList() {
    ExprPtr node = makeExpr(ExprKind::kList, cur().line);
    advance();
    while (!isOp("]")) {
      if (!node->children.empty())
        KILN_RETURN_IF_ERROR(expectOp(","));
      if (isOp("]"))
        break;
      KILN_ASSIGN_OR_RETURN(ExprPtr item, parseExpression(true));
      node->children.push_back(std::move(item));
    }
    advance();
    return node;
  }

  Result<ExprPtr> parseDict() {
    ExprPtr node = makeExpr(ExprKind::kDict, cur().line);
    advance();
    while (!isOp("}")) {
      if (!node->children.empty())
        KILN_RETURN_IF_ERROR(expectOp(","));
      if (isOp("}"))
        break;
      KILN_ASSIGN_OR_RETURN(ExprPtr key, parseExpression(true));
      KILN_RETURN_IF_ERROR(expectOp(":"));
      KILN_ASSIGN_OR_RETURN(ExprPtr value, parseExpression(true));
      node->children.push_back(std::move(key));
      node->children.push_back(std::move(value));
    }
    advance();
    return node;
  }

  Result<ExprPtr> parsePostfix(ExprPtr node) {
    while (true) {
      if (isOp(".") || isOp("[")) {
        KILN_ASSIGN_OR_RETURN(node, parseSubscript(std::move(node)));
      } else if (isOp("(")) {
        KILN_ASSIGN_OR_RETURN(node, parseCall(std::move(node), ExprKind::kCall, ""));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parseFilterExpr(ExprPtr node) {
    while (true) {
      if (isOp("|")) {
        advance();
        KILN_ASSIGN_OR_RETURN(std::string name, parseDottedName());
        if (isOp("(")) {
          KILN_ASSIGN_OR_RETURN(node, parseCall(std::move(node), ExprKind::kFilter, name));
        } else {
          ExprPtr filter = makeExpr(ExprKind::kFilter, node->line);
          filter->name = name;
          filter->children.push_back(std::move(node));
          node = std::move(filter);
        }
      } else if (isName("is")) {
        KILN_ASSIGN_OR_RETURN(node, parseTest(std::move(node)));
      } else if (isOp("(")) {
        KILN_ASSIGN_OR_RETURN(node, parseCall(std::move(node), ExprKind::kCall, ""));
      } else {
        return node;
      }
    }
  }

  Result<std::string> parseDottedName() {
    KILN_ASSIGN_OR_RETURN(std::string name, expectName());
    while (isOp(".")) {
      advance();
      KILN_ASSIGN_OR_RETURN(std::string part, expectName());
      name += "." + part;
    }
    return name;
  }

  Result<ExprPtr> parseTest(ExprPtr node) {
    advance();
    bool negated = false;
    if (isName("not")) {
      negated = true;
      advance();
    }
    KILN_ASSIGN_OR_RETURN(std::string name, parseDottedName());
    ExprPtr test;
    if (isOp("(")) {
      KILN_ASSIGN_OR_RETURN(test, parseCall(std::move(node), ExprKind::kTest, name));
    } else {
      test = makeExpr(ExprKind::kTest, node->line);
      test->name = name;
      test->children.push_back(std::move(node));
      TokenKind k = cur().kind;
      bool startsArg = k == TokenKind::kName || k == TokenKind::kString ||
                       k == TokenKind::kInteger || k == TokenKind::kFloat || isOp("(") ||
                       isOp("[") || isOp("{");
      if (startsArg && !isName("else") && !isName("or") && !isName("and")) {
        if (isName("is"))
          return error("cannot chain multiple tests with 'is'");
        KILN_ASSIGN_OR_RETURN(ExprPtr arg, parsePrimary());
        KILN_ASSIGN_OR_RETURN(arg, parsePostfix(std::move(arg)));
        test->children.push_back(std::move(arg));
      }
    }
    test->negated = negated;
    return test;
  }

  // `(args, name=value)` after a callee, filter or test; children[0] is the callee or operand.
  Result<ExprPtr> parseCall(ExprPtr target, ExprKind kind, const std::string &name) {
    ExprPtr call = makeExpr(kind, cur().line);
    call->name = name;
    call->children.push_back(std::move(target));
    advance();
    bool first = true;
    while (!isOp(")")) {
      if (!first)
        KILN_RETURN_IF_ERROR(expectOp(","));
      first = false;
      if (isOp(")"))
        break;
      if (isOp("*") || isOp("**"))
        return unsupported("'*args' / '**kwargs' in calls");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
          peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        KILN_ASSIGN_OR_RETURN(ExprPtr value, parseExpression(true));
        call->kwargs.emplace_back(key, std::move(value));
        continue;
      }
      if (!call->kwargs.empty())
        return error("positional argument after keyword argument");
      KILN_ASSIGN_OR_RETURN(ExprPtr arg, parseExpression(true));
      call->children.push_back(std::move(arg));
    }
    advance();
    return call;
  }

  Result<ExprPtr> parseSubscript(ExprPtr node) {
    int line = cur().line;
    if (isOp(".")) {
      advance();
      if (cur().kind == TokenKind::kName) {
        ExprPtr attr = makeExpr(ExprKind::kGetAttr, line);
        attr->name = cur().text;
        attr->children.push_back(std::move(node));
        advance();
        return attr;
      }
      if (cur().kind != TokenKind::kInteger)
        return error("expected an attribute name after '.', got " + describe(cur()));
      ExprPtr item = makeExpr(ExprKind::kGetItem, line);
      item->children.push_back(std::move(node));
      ExprPtr index = makeExpr(ExprKind::kConst, line);
      index->constant = Value::fromInt(cur().intValue);
      item->children.push_back(std::move(index));
      advance();
      return item;
    }
    advance();
    ExprPtr start;
    if (!isOp(":")) {
      KILN_ASSIGN_OR_RETURN(start, parseExpression(true));
      if (!isOp(":")) {
        if (isOp(","))
          return unsupported("tuple subscripts ('x[a, b]')");
        KILN_RETURN_IF_ERROR(expectOp("]"));
        ExprPtr item = makeExpr(ExprKind::kGetItem, line);
        item->children.push_back(std::move(node));
        item->children.push_back(std::move(start));
        return item;
      }
    }
    advance(); // ':'
    ExprPtr slice = makeExpr(ExprKind::kSlice, line);
    slice->children.push_back(std::move(node));
    slice->children.push_back(std::move(start));
    ExprPtr stop;
    ExprPtr step;
    if (!isOp("]") && !isOp(":")) {
      KILN_ASSIGN_OR_RETURN(stop, parseExpression(true));
    }
    if (isOp(":")) {
      advance();
      if (!isOp("]")) {
        KILN_ASSIGN_OR_RETURN(step, parseExpression(true));
      }
    }
    KILN_RETURN_IF_ERROR(expectOp("]"));
    slice->children.push_back(std::move(stop));
    slice->children.push_back(std::move(step));
    return slice;
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loopDepth_ = 0;
};

} // namespace

Result<std::vector<StmtPtr>> parseTemplate(std::string_view source) {
  KILN_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenizeTemplate(source));
  return Parser(std::move(tokens)).parseAll();
}

} // namespace kiln::rt::jinja
