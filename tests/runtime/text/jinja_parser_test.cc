// Bad and unsupported templates fail with an error that names the construct and the line, and
// hostile input (deep nesting, runaway recursion, huge ranges, broken UTF-8) fails cleanly.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/text/chat_template.h"

namespace kiln::rt {
namespace {

using Json = nlohmann::ordered_json;

Status parseStatus(const std::string &source) {
  auto parsed = ChatTemplate::parse(source);
  return parsed.isOk() ? okStatus() : parsed.status();
}

Result<std::string> renderSource(const std::string &source, const Json &context = Json::object()) {
  KILN_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
  return tmpl.render(context);
}

void expectMessageHas(const Status &status, const std::string &a, const std::string &b) {
  EXPECT_NE(status.message().find(a), std::string::npos) << status.toString();
  EXPECT_NE(status.message().find(b), std::string::npos) << status.toString();
}

TEST(JinjaParserTest, UnsupportedTagsNameTheTagAndLine) {
  for (const char *tag : {"extends", "include", "import", "call", "filter", "with", "block"}) {
    Status status = parseStatus(std::string("line one\n\n{% ") + tag + " 'x' %}");
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << tag;
    expectMessageHas(status, std::string("'{% ") + tag + " %}'", "line 3");
  }
}

TEST(JinjaParserTest, RecursiveLoopsAreUnsupported) {
  Status status = parseStatus("{% for x in xs recursive %}{% endfor %}");
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  expectMessageHas(status, "recursive", "line 1");
}

TEST(JinjaParserTest, UnknownFilterFailsAtRenderWithItsName) {
  auto rendered = renderSource("ok\n{{ 'x' | wordwrap }}");
  ASSERT_FALSE(rendered.isOk());
  EXPECT_EQ(rendered.status().code(), StatusCode::kUnimplemented);
  expectMessageHas(rendered.status(), "'wordwrap' filter", "line 2");
}

TEST(JinjaParserTest, UnknownTestFailsWithItsName) {
  auto rendered = renderSource("{{ 1 is prime }}");
  ASSERT_FALSE(rendered.isOk());
  expectMessageHas(rendered.status(), "'prime' test", "line 1");
}

TEST(JinjaParserTest, SyntaxErrorsNameTheProblem) {
  expectMessageHas(parseStatus("{% if x %}\nno end"), "expected 'endif'", "line 2");
  expectMessageHas(parseStatus("{% for x in xs %}"), "expected 'endfor'", "line 1");
  expectMessageHas(parseStatus("{{ 'open }}"), "unterminated string", "line 1");
  expectMessageHas(parseStatus("{{ (1 }}"), "unexpected '}'", "line 1");
  expectMessageHas(parseStatus("{# never closed"), "missing end of comment", "line 1");
  expectMessageHas(parseStatus("{% endif %}"), "unexpected 'endif'", "line 1");
  expectMessageHas(parseStatus("{% frobnicate %}"), "unknown tag 'frobnicate'", "line 1");
  expectMessageHas(parseStatus("{% break %}"), "'break' outside of a loop", "line 1");
  expectMessageHas(parseStatus("{{ x is defined is defined }}"), "chain", "line 1");
  expectMessageHas(parseStatus("{{ 1 $ 2 }}"), "unexpected character '$'", "line 1");
}

TEST(JinjaParserTest, DeepNestingFailsInsteadOfOverflowingTheStack) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  expectMessageHas(parseStatus(deep), "nested deeper than", "line 1");
  std::string nots;
  for (int i = 0; i < 5000; ++i)
    nots += "not ";
  expectMessageHas(parseStatus("{{ " + nots + "x }}"), "nested deeper than", "line 1");
  std::string ifs;
  for (int i = 0; i < 5000; ++i)
    ifs += "{% if true %}";
  expectMessageHas(parseStatus(ifs), "nested deeper than", "line 1");
}

TEST(JinjaParserTest, RunawayRecursionAndRangesAreBounded) {
  auto recursion = renderSource("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  ASSERT_FALSE(recursion.isOk());
  EXPECT_EQ(recursion.status().code(), StatusCode::kOutOfRange);
  expectMessageHas(recursion.status(), "nested deeper than 64", "line 1");

  auto range = renderSource("{% for i in range(1000000) %}{% endfor %}");
  ASSERT_FALSE(range.isOk());
  expectMessageHas(range.status(), "range() is limited to 100000", "line 1");

  auto repeat = renderSource("{{ 'x' * 1000000000 }}");
  ASSERT_FALSE(repeat.isOk());
  EXPECT_EQ(repeat.status().code(), StatusCode::kOutOfRange);
}

TEST(JinjaParserTest, BrokenUtf8RendersWithoutCrashing) {
  std::string bad = "\xff\xfe\xc3";
  auto rendered = renderSource("{{ s[::-1] }}|{{ s | length }}|{{ s | upper }}|" + bad,
                               Json{{"s", "a\xe2\x82"}});
  ASSERT_TRUE(rendered.isOk()) << rendered.status().toString();
  // Each undecodable byte becomes U+FFFD once the text is treated as code points.
  const std::string replacement = "\xef\xbf\xbd";
  EXPECT_EQ(*rendered, replacement + replacement + "a|2|A" + replacement + replacement + "|" + bad);
}

TEST(JinjaParserTest, RaiseExceptionKeepsTheTemplatesMessageVerbatim) {
  auto rendered = renderSource("line\n{{ raise_exception('Only user and assistant roles!') }}");
  ASSERT_FALSE(rendered.isOk());
  EXPECT_EQ(rendered.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rendered.status().message(), "Only user and assistant roles!");
}

TEST(JinjaParserTest, RuntimeErrorsNameTheLine) {
  auto rendered = renderSource("a\nb\n{{ missing.attr }}");
  ASSERT_FALSE(rendered.isOk());
  EXPECT_EQ(rendered.status().message(), "chat template line 3: 'missing' is undefined");
}

} // namespace
} // namespace kiln::rt
