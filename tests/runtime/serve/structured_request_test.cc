// The structured-output fields of a request (runtime/serve/structured_request.h) through the
// OpenAI and TGI parsers: each field gives a grammar whose language is the one asked for (checked
// with the real matcher), the client's member order is kept whenever the raw body is given, the
// same schema compiles once (the shared cache), and bad constraints are 400s naming the field.
#include "runtime/serve/json_fields.h"
#include "runtime/serve/openai_request.h"
#include "runtime/serve/tgi_request.h"
#include "runtime/structured/grammar_matcher.h"

#include <gtest/gtest.h>

namespace kiln::rt::serve {
namespace {

std::optional<ApiError> parseCompletion(const std::string &text, GenerationRequest &out) {
  nlohmann::json body;
  if (auto error = parseJsonObject(text, body))
    return error;
  return parseCompletionRequest(body, out, &text);
}

std::optional<ApiError> parseTgi(const std::string &text, GenerationRequest &out) {
  nlohmann::json body;
  if (auto error = parseJsonObject(text, body))
    return error;
  return parseTgiRequest(body, out, &text);
}

bool matches(const GenerationRequest &request, std::string_view text) {
  if (!request.grammar)
    return false;
  structured::GrammarMatcher matcher(request.grammar);
  return matcher.acceptBytes(text) && matcher.canEnd();
}

TEST(StructuredRequestTest, EachFieldConstrainsToItsLanguage) {
  struct Case {
    std::string fields;
    std::vector<std::string> accepted, rejected;
  };
  const Case cases[] = {
      {R"("guided_regex": "[a-c]{2}\\d")", {"ab1", "cc9"}, {"ab", "ad1", "ab12"}},
      {R"("guided_choice": ["yes", "no"])", {"yes", "no"}, {"y", "yesno", "maybe"}},
      {R"("guided_grammar": "root ::= \"x\"+")", {"x", "xxx"}, {"", "xy"}},
      {R"("structured_outputs": {"choice": ["a b"]})", {"a b"}, {"a", "ab"}},
      {R"("guided_json": {"type": "integer", "minimum": 3, "maximum": 12})",
       {"3", "12"},
       {"2", "13", "03"}},
      {R"("guided_json": "{\"type\": \"boolean\"}")", {"true", "false"}, {"null"}},
      {R"("response_format": {"type": "json_object"})",
       {R"({"a": [1, {"b": null}]})", "{}"},
       {"[]", "1"}},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "p",
          "schema": {"type": "object", "properties": {"z": {"type": "integer"},
                     "a": {"type": "boolean"}}, "required": ["z", "a"],
                     "additionalProperties": false}}})",
       {R"({"z": 1, "a": true})"},
       {R"({"a": true, "z": 1})", R"({"z": 1})"}},
  };
  for (const Case &c : cases) {
    GenerationRequest request;
    const std::string body = R"({"prompt": "p", )" + c.fields + "}";
    std::optional<ApiError> error = parseCompletion(body, request);
    ASSERT_FALSE(error) << body << ": " << error->message;
    for (const std::string &s : c.accepted)
      EXPECT_TRUE(matches(request, s)) << c.fields << " should accept " << s;
    for (const std::string &s : c.rejected)
      EXPECT_FALSE(matches(request, s)) << c.fields << " should reject " << s;
  }
  GenerationRequest text;
  ASSERT_FALSE(parseCompletion(R"({"prompt": "p", "response_format": {"type": "text"}})", text));
  EXPECT_EQ(text.grammar, nullptr);
}

TEST(StructuredRequestTest, TgiGrammarKeepsTheMemberOrderAndTheCacheCompilesOnce) {
  const std::string body = R"({"inputs": "p", "parameters": {"grammar": {"type": "json",
      "value": {"type": "object", "properties": {"z": {"type": "null"}, "a": {"type": "null"}},
                "required": ["z", "a"], "additionalProperties": false}}}})";
  GenerationRequest first, second;
  ASSERT_FALSE(parseTgi(body, first));
  ASSERT_FALSE(parseTgi(body, second));
  EXPECT_TRUE(matches(first, R"({"z": null, "a": null})"));
  EXPECT_FALSE(matches(first, R"({"a": null, "z": null})"));
  EXPECT_EQ(first.grammar, second.grammar); // one compiled grammar
  GenerationRequest regex;
  ASSERT_FALSE(parseTgi(R"({"inputs": "p", "parameters": {"grammar": {"type": "regex",
      "value": "[0-9]+"}}})",
                        regex));
  EXPECT_TRUE(matches(regex, "123"));
}

TEST(StructuredRequestTest, BadConstraintsNameTheField) {
  struct Case {
    std::string fields, param, message;
  };
  const Case cases[] = {
      {R"("guided_regex": "(a)\\1")", "guided_regex", "backreference"},
      {R"("guided_regex": 5)", "guided_regex", "a regex must be a string"},
      {R"("guided_choice": [])", "guided_choice", "non-empty array of strings"},
      {R"("guided_json": "{not json")", "guided_json", "not valid JSON"},
      {R"j("guided_json": {"type": "string", "pattern": "a(?=b)"})j", "guided_json", "'pattern'"},
      {R"("guided_grammar": "root ::= missing")", "guided_grammar", "rule 'missing'"},
      {R"("structured_outputs": {"yaml": "x"})", "structured_outputs", "'structured_outputs.yaml'"},
      {R"("response_format": {"type": "json_schema"})", "response_format", "needs 'json_schema'"},
      {R"("guided_regex": "a", "guided_choice": ["a"])", "guided_choice",
       "fields 'guided_regex' and 'guided_choice' cannot be used together"},
  };
  for (const Case &c : cases) {
    GenerationRequest request;
    const std::string body = R"({"prompt": "p", )" + c.fields + "}";
    std::optional<ApiError> error = parseCompletion(body, request);
    ASSERT_TRUE(error) << body;
    EXPECT_EQ(error->httpStatus, 400);
    EXPECT_EQ(error->param, c.param) << body;
    EXPECT_NE(error->message.find(c.message), std::string::npos) << body << ": " << error->message;
  }
  GenerationRequest tgi;
  std::optional<ApiError> error = parseTgi(
      R"({"inputs": "p", "parameters": {"grammar": {"type": "ebnf", "value": "x"}}})", tgi);
  ASSERT_TRUE(error);
  EXPECT_NE(error->message.find("parameters.grammar"), std::string::npos) << error->message;
}

} // namespace
} // namespace kiln::rt::serve
