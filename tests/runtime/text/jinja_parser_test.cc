// Bad and unsupported templates fail with an error that names the construct and the line, and
// hostile input (deep nesting, runaway recursion, huge ranges, broken UTF-8) fails cleanly.
#include <regex>
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

// Found by tests/fuzz/chat_template_fuzz: nested ranges (10^10 iterations) and a macro calling
// itself twice per level ran for hours; doubling a string or list in a loop exhausted memory; and
// 'ab' * 2^63-1 overflowed int64 in the size check (undefined behaviour) before refusing.
TEST(JinjaParserTest, RunawayWorkAndGrowthAreBounded) {
  auto withLimit = [](const std::string &source, int64_t steps) -> Result<std::string> {
    KILN_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
    tmpl.setStepLimit(steps);
    return tmpl.render(Json::object());
  };
  const std::string nested =
      "{% for a in range(100) %}{% for b in range(100) %}{% endfor %}{% endfor %}";
  auto loops = withLimit(nested, 10000);
  ASSERT_FALSE(loops.isOk());
  EXPECT_EQ(loops.status().code(), StatusCode::kOutOfRange);
  expectMessageHas(loops.status(), "more than 10000 loop iterations and macro calls", "line 1");
  EXPECT_TRUE(withLimit(nested, 10100).isOk()) << "100 + 100 x 100 steps fit";

  auto calls = withLimit("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                         "{% endmacro %}{{ f(40) }}",
                         5000);
  ASSERT_FALSE(calls.isOk());
  expectMessageHas(calls.status(), "more than 5000 loop iterations and macro calls", "line 1");

  auto strings = renderSource("{% set ns = namespace(s='a') %}{% for i in range(40) %}"
                              "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}");
  ASSERT_FALSE(strings.isOk());
  EXPECT_EQ(strings.status().code(), StatusCode::kOutOfRange);
  expectMessageHas(strings.status(), "string concatenation result exceeds", "line 1");
  auto lists = renderSource("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
                            "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}");
  ASSERT_FALSE(lists.isOk());
  expectMessageHas(lists.status(), "list concatenation result exceeds 1048576 items", "line 1");

  for (const char *huge : {"{{ 'ab' * 9223372036854775807 }}", "{{ [1, 2] * 9223372036854775807 }}",
                           "{{ 9223372036854775807 * 'ab' }}"}) {
    auto repeated = renderSource(huge);
    ASSERT_FALSE(repeated.isOk()) << huge;
    EXPECT_EQ(repeated.status().code(), StatusCode::kOutOfRange) << huge;
  }
  auto fits = renderSource("{{ ('ab' * 3) ~ ([0] * 2) | length }}");
  ASSERT_TRUE(fits.isOk()) << fits.status().toString();
  EXPECT_EQ(*fits, "ababab2");
  // An empty sequence repeated any number of times is empty, at once (jinja2 3.1.6 renders this
  // "[][0][]"; a loop of 2^63 - 1 appends of nothing was found by tests/fuzz/chat_template_fuzz).
  auto empty = renderSource("[{{ '' * 9223372036854775807 }}][{{ ([] * 9223372036854775807) | "
                            "length }}][{{ 9223372036854775807 * '' }}]");
  ASSERT_TRUE(empty.isOk()) << empty.status().toString();
  EXPECT_EQ(*empty, "[][0][]");

  // Every output stays under maxOutputBytes and few steps are taken, yet the render copies a
  // gigabyte: the bytes written over the whole render, macro outputs included, stop it (found by
  // tests/fuzz/chat_template_fuzz as a macro printing a tuple of its own results).
  const std::string discard = "{% macro big() %}{{ 'a' * 1048576 }}{% endmacro %}"
                              "{% for i in range(N) %}{% set x = big() %}{% endfor %}done";
  auto copies = renderSource(std::regex_replace(discard, std::regex("N"), "1000"));
  ASSERT_FALSE(copies.isOk());
  EXPECT_EQ(copies.status().code(), StatusCode::kOutOfRange);
  expectMessageHas(copies.status(), "wrote more than 268435456 bytes in all", "line 1");
  auto fewer = renderSource(std::regex_replace(discard, std::regex("N"), "100"));
  ASSERT_TRUE(fewer.isOk()) << fewer.status().toString();
  EXPECT_EQ(*fewer, "done");
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
