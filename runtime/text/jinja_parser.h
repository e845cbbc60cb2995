// Parser for the Jinja subset that Hugging Face chat templates use. Grammar and operator precedence
// follow jinja2's parser.py; constructs outside the subset (extends, include, call blocks, ...)
// fail with an error that names the construct and its line instead of rendering something else.
#pragma once

#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/text/jinja_ast.h"

namespace kiln::rt::jinja {

Result<std::vector<StmtPtr>> parseTemplate(std::string_view source);

} // namespace kiln::rt::jinja
