// Renders a parsed Jinja program against a context, with the globals transformers gives chat
// templates: raise_exception, strftime_now, namespace, dict, range.
#pragma once

#include <cstddef>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/text/jinja_ast.h"
#include "runtime/text/jinja_value.h"

namespace kiln::rt::jinja {

struct RenderOptions {
  // Local wall-clock time for strftime_now(); null uses the system clock. Tests inject a fixed
  // time so templates that print today's date render deterministically.
  std::function<std::tm()> now;
  // A template loop can repeat text without bound; a prompt past this size is a template bug.
  size_t maxOutputBytes = size_t{64} << 20;
  // Loop iterations plus macro calls in one render. Nested range() loops or a macro that calls
  // itself twice per level would otherwise run for hours; real chat templates take a few steps
  // per message.
  int64_t maxSteps = 1'000'000;
  // Bytes written over the whole render, every macro's own output included. Each output is
  // bounded by maxOutputBytes, but a macro printing a tuple of its own results doubles (and, with
  // repr's escaping, more than doubles) its text per level: ~20,000 such calls copied gigabytes
  // (found by tests/fuzz/chat_template_fuzz, docs/reliability.md).
  size_t maxWrittenBytes = size_t{256} << 20;
};

// Errors raised by the template's own raise_exception() carry exactly the template's message;
// other errors name the line.
Result<std::string> renderProgram(const std::vector<StmtPtr> &program, const ObjectData &context,
                                  const RenderOptions &options);

} // namespace kiln::rt::jinja
