// JSON Schema -> grammar text (runtime/structured/json_schema_grammar.h): the exact text for a few
// small schemas, the errors for what is not supported, and, so that the tests can fail on what the
// text means and not only on how it is spelled, documents accepted and rejected by the text as
// compiled by runtime/structured/grammar.h and run by grammar_matcher.h (grammar_test_util.h).
#include "runtime/structured/json_schema_grammar.h"
#include "tests/runtime/structured/grammar_test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kiln::structured {
namespace {

// ---- Helpers

std::string grammarFor(const std::string &schemaText) {
  Result<std::string> grammar = jsonSchemaToGrammar(nlohmann::ordered_json::parse(schemaText));
  EXPECT_TRUE(grammar.isOk()) << grammar.status().toString();
  return grammar.isOk() ? *grammar : std::string();
}

Status errorFor(const std::string &schemaText) {
  Result<std::string> grammar = jsonSchemaToGrammar(nlohmann::ordered_json::parse(schemaText));
  EXPECT_FALSE(grammar.isOk()) << *grammar;
  return grammar.status();
}

// Checks that the grammar for `schemaText` accepts each of `accepted` and rejects each of
// `rejected` (whole documents).
void expectMatches(const std::string &schemaText, const std::vector<std::string> &accepted,
                   const std::vector<std::string> &rejected) {
  const std::string text = grammarFor(schemaText);
  const CompiledTestGrammar grammar(text);
  ASSERT_TRUE(grammar.parsed()) << schemaText;
  for (const std::string &document : accepted)
    EXPECT_TRUE(grammar.accepts(document)) << schemaText << " should accept " << document << "\n"
                                           << text;
  for (const std::string &document : rejected)
    EXPECT_TRUE(grammar.rejects(document)) << schemaText << " should reject " << document << "\n"
                                           << text;
}

constexpr const char *kPerson =
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer",
        "minimum":0}},"required":["name"],"additionalProperties":false})";

// ---- Exact text

TEST(JsonSchemaGrammarTest, PersonObjectTextIsPinned) {
  EXPECT_EQ(grammarFor(kPerson),
            R"(root ::= "{" "\"name\":" ws string ( "," ws "\"age\":" ws nonneg-integer )? "}"
string ::= "\"" char* "\""
char ::= plain-char | "\\" ( [\"\\/bfnrt] | "u" hex{4} )
plain-char ::= [^\"\\\x00-\x1F]
hex ::= [0-9a-fA-F]
nonneg-integer ::= "0" | [1-9] [0-9]{0,14}
ws ::= " "?
)");
}

TEST(JsonSchemaGrammarTest, EnumAndBoundedArrayTextIsPinned) {
  EXPECT_EQ(grammarFor(R"({"enum":["red","gr\"een",1,null,{"a":[1,2]}]})"),
            R"(root ::= "\"red\"" | "\"gr\\\"een\"" | "1" | "null" | "{\"a\":[1,2]}")"
            "\n");
  EXPECT_EQ(grammarFor(R"({"type":"array","items":{"type":"string","maxLength":3},"minItems":1,
                          "maxItems":3})"),
            R"(root ::= "[" root-item ( "," ws root-item ){0,2} "]"
root-item ::= "\"" char{0,3} "\""
char ::= plain-char | "\\" ( [\"\\/bfnrt] | "u" hex{4} )
plain-char ::= [^\"\\\x00-\x1F]
hex ::= [0-9a-fA-F]
ws ::= " "?
)");
}

TEST(JsonSchemaGrammarTest, RecursiveDefinitionIsARuleTextIsPinned) {
  EXPECT_EQ(grammarFor(R"({"$ref":"#/$defs/Node","$defs":{"Node":{"type":"object",
      "properties":{"value":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/Node"},
      {"type":"null"}]}},"required":["value","next"],"additionalProperties":false}}})"),
            R"(root ::= def-Node
def-Node ::= "{" "\"value\":" ws integer "," ws "\"next\":" ws def-Node-next "}"
def-Node-next ::= def-Node | null
integer ::= "-"? nonneg-integer
nonneg-integer ::= "0" | [1-9] [0-9]{0,14}
null ::= "null"
ws ::= " "?
)");
}

TEST(JsonSchemaGrammarTest, JsonObjectGrammarIsAnyObject) {
  const std::string text = jsonObjectGrammar();
  EXPECT_NE(text.find("root ::= object\n"), std::string::npos) << text;
  const CompiledTestGrammar grammar(text);
  ASSERT_TRUE(grammar.parsed());
  EXPECT_TRUE(grammar.accepts(R"({})"));
  EXPECT_TRUE(grammar.accepts(R"({"a": [1, {"b": null}], "c": -2.5e3, "d": "x\"y"})"));
  EXPECT_TRUE(grammar.rejects(R"([1])"));
  EXPECT_TRUE(grammar.rejects(R"("x")"));
  EXPECT_TRUE(grammar.rejects(R"({"a":1,})"));
  EXPECT_TRUE(grammar.rejects(R"({"a":  1})")); // whitespace is bounded: one space at most
  EXPECT_TRUE(grammar.rejects(R"({"a":1} )"));
}

// ---- Errors

TEST(JsonSchemaGrammarTest, ErrorsNameThePointerAndTheKeyword) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"object","properties":{"age":{"type":"integer","foo":1}}})",
       "json schema at '#/properties/age': keyword 'foo' is not supported"},
      {R"({"type":"object","propertyNames":{"maxLength":3}})",
       "json schema at '#': keyword 'propertyNames' is not supported yet"},
      {R"({"properties":{"age":{"type":"number","multipleOf":0.5}}})",
       "json schema at '#/properties/age': keyword 'multipleOf' on numbers is not supported yet"},
      {R"({"$defs":{"A":{"type":"integer","multipleOf":2}},"$ref":"#/$defs/A"})",
       "json schema at '#/$defs/A': keyword 'multipleOf' is not supported yet"},
      {R"({"items":{"anyOf":[{"type":"string"},{"not":{}}]}})",
       "json schema at '#/items/anyOf/1': keyword 'not' is not supported yet"},
      {R"({"allOf":[{"type":"string"},{"maxLength":2}]})",
       "json schema at '#': 'allOf' with more than one schema is not supported yet"},
      {R"({"$ref":"#/$defs/Missing"})", "json schema at '#': $ref '#/$defs/Missing' names no"},
      {R"({"$ref":"other.json#/a"})", "json schema at '#': $ref 'other.json#/a' is not supported"},
      {R"({"type":"string","format":"hostname"})", "format 'hostname' is not supported yet"},
      {R"({"type":"array","maxItems":5000})", "'maxItems' is 5000, over the limit of 1000"},
      {R"({"type":"object","properties":{"a":false},"required":["a"]})",
       "json schema at '#/properties/a': schema 'false' matches nothing"},
      {R"(false)", "json schema at '#': schema 'false' matches nothing"},
      {R"({"properties":{"a/b~":{"foo":1}}})",
       "json schema at '#/properties/a~1b~0': keyword 'foo' is not supported"},
      {R"({"type":"strin"})", "'type' \"strin\" is not a JSON Schema type"},
      {R"({"type":"string","enum":[1,2]})", "'enum' lists no value of the schema's type"},
      {R"({"anyOf":[{"type":"string"}],"maxLength":3})",
       "json schema at '#': keyword 'maxLength' beside 'anyOf' is not supported yet"},
  };
  for (const auto &[schema, message] : cases) {
    const Status status = errorFor(schema);
    EXPECT_NE(status.message().find(message), std::string::npos)
        << schema << "\n got: " << status.toString() << "\n want: " << message;
  }
  EXPECT_EQ(errorFor(R"({"patternProperties":{}})").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(errorFor(R"(false)").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(errorFor(R"({"minLength":1001})").code(), StatusCode::kOutOfRange);
}

TEST(JsonSchemaGrammarTest, IntegerBoundErrorsNameTheKeywords) {
  const std::vector<std::tuple<std::string, StatusCode, std::string>> cases = {
      {R"({"type":"integer","minimum":10,"maximum":5})", StatusCode::kInvalidArgument,
       "json schema at '#': 'minimum' 10 and 'maximum' 5 leave no integer between them"},
      {R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":6})",
       StatusCode::kInvalidArgument, "'exclusiveMinimum' 5 and 'exclusiveMaximum' 6 leave no"},
      {R"({"type":"integer","minimum":1.2,"maximum":1.8})", StatusCode::kInvalidArgument,
       "'minimum' 1.2 and 'maximum' 1.8 leave no integer"},
      {R"({"type":"integer","minimum":3,"exclusiveMinimum":7,"maximum":7})",
       StatusCode::kInvalidArgument, "'exclusiveMinimum' 7 and 'maximum' 7 leave no integer"},
      {R"({"type":"integer","minimum":1e16})", StatusCode::kOutOfRange,
       "'minimum' 1e+16 leaves no integer of at most 15 digits"},
      {R"({"type":"integer","maximum":-1000000000000000})", StatusCode::kOutOfRange,
       "'maximum' -1000000000000000 leaves no integer of at most 15 digits"},
      {R"({"properties":{"n":{"type":"integer","minimum":"5"}}})", StatusCode::kInvalidArgument,
       "json schema at '#/properties/n': 'minimum' must be a number"},
      {R"({"type":"integer","exclusiveMinimum":true,"minimum":0})", StatusCode::kUnimplemented,
       "'exclusiveMinimum' as a boolean is not supported yet"},
      {R"({"type":"integer","minimum":0,"multipleOf":2})", StatusCode::kUnimplemented,
       "keyword 'multipleOf' is not supported yet"},
      {R"({"type":"number","multipleOf":0.5})", StatusCode::kUnimplemented,
       "keyword 'multipleOf' on numbers is not supported yet"},
      {R"({"type":"number","minimum":0.5,"maximum":0.25})", StatusCode::kInvalidArgument,
       "'minimum' 0.5 and 'maximum' 0.25 leave no number between them"},
      {R"({"type":"number","exclusiveMinimum":0.5,"maximum":0.5})", StatusCode::kInvalidArgument,
       "'exclusiveMinimum' 0.5 and 'maximum' 0.5 leave no number between them"},
      {R"({"type":"number","minimum":1e16})", StatusCode::kOutOfRange,
       "'minimum' 1e+16 leaves no number of at most 15 integer digits"},
      {R"({"type":"number","maximum":0.1234567890123456})", StatusCode::kUnimplemented,
       "'maximum' 0.1234567890123456 with more than 15 fraction digits is not supported yet"},
      {R"({"type":"number","exclusiveMaximum":"1"})", StatusCode::kInvalidArgument,
       "'exclusiveMaximum' must be a number"},
  };
  for (const auto &[schema, code, message] : cases) {
    const Status status = errorFor(schema);
    EXPECT_EQ(status.code(), code) << schema << "\n got: " << status.toString();
    EXPECT_NE(status.message().find(message), std::string::npos)
        << schema << "\n got: " << status.toString() << "\n want: " << message;
  }
}

TEST(JsonSchemaGrammarTest, PatternErrorsNameThePattern) {
  const std::vector<std::tuple<std::string, StatusCode, std::string>> cases = {
      {R"({"properties":{"id":{"pattern":"(a"}}})", StatusCode::kInvalidArgument,
       "json schema at '#/properties/id': 'pattern' \"(a\": regex: unbalanced '('"},
      {R"j({"pattern":"a(?=b)"})j", StatusCode::kUnimplemented,
       "'pattern' \"a(?=b)\": regex: lookaround '(?=' at offset 1 is not supported"},
      {R"({"type":"string","pattern":5})", StatusCode::kInvalidArgument,
       "'pattern' must be a string"},
      {R"({"type":"string","pattern":"a+","maxLength":3})", StatusCode::kUnimplemented,
       "keyword 'maxLength' beside 'pattern' is not supported yet"},
      {R"({"pattern":"a+","minLength":1})", StatusCode::kUnimplemented,
       "keyword 'minLength' beside 'pattern' is not supported yet"},
      {R"({"pattern":"[0-9-]+","format":"date"})", StatusCode::kUnimplemented,
       "keyword 'format' beside 'pattern' is not supported yet"},
  };
  for (const auto &[schema, code, message] : cases) {
    const Status status = errorFor(schema);
    EXPECT_EQ(status.code(), code) << schema << "\n got: " << status.toString();
    EXPECT_NE(status.message().find(message), std::string::npos)
        << schema << "\n got: " << status.toString() << "\n want: " << message;
  }
}

// Patterns whose strings hold characters a JSON string must escape ('"', '\\', U+0000..U+001F):
// the grammar spells those as their escapes (\" \\ \b \f \n \r \t, else \u00XX), so every ASCII
// character a one-character pattern matches is accepted as its JSON spelling and no other, and
// the raw characters never are.
TEST(JsonSchemaGrammarTest, PatternsSpellEscapedCharactersAsTheirEscapes) {
  const auto spelled = [](int c) -> std::string {
    switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    }
    if (c >= 0x20)
      return std::string(1, static_cast<char>(c));
    char escape[8];
    std::snprintf(escape, sizeof(escape), "\\u%04X", c);
    return escape;
  };
  const std::vector<std::pair<std::string, std::function<bool(int)>>> patterns = {
      {".", [](int c) { return c != '\n'; }},
      {"[^x]", [](int c) { return c != 'x'; }},
      {"\\D", [](int c) { return c < '0' || c > '9'; }},
      {"\\s", [](int c) { return c == ' ' || (c >= '\t' && c <= '\r'); }},
      {"[ -~]", [](int c) { return c >= ' ' && c <= '~'; }},
      {"[\"\\\\a]", [](int c) { return c == '"' || c == '\\' || c == 'a'; }},
      {"[\\x00-\\x1F]", [](int c) { return c < 0x20; }},
  };
  for (const auto &[pattern, matches] : patterns) {
    const std::string schema = nlohmann::ordered_json{{"pattern", pattern}}.dump();
    const std::string text = grammarFor(schema);
    const CompiledTestGrammar grammar(text);
    ASSERT_TRUE(grammar.parsed()) << schema << "\n" << text;
    for (int c = 0; c < 0x80; ++c)
      EXPECT_EQ(grammar.matches("\"" + spelled(c) + "\""), matches(c))
          << schema << " on character " << c << "\n"
          << text;
    for (const char *raw : {"\"\"\"", "\"\\\"", "\"\n\"", "\"\x01\""})
      EXPECT_TRUE(grammar.rejects(raw)) << schema << " on " << raw << "\n" << text;
  }
  expectMatches(R"({"type":"string","pattern":"^a.c$"})",
                {R"("a\"c")", R"("a\\c")", R"("a\u0001c")", R"("abc")", R"("a\tc")"},
                {R"("a\nc")", R"("a\u0001")", R"("a"c")", R"("a\c")"});
  EXPECT_EQ(grammarFor(R"({"pattern":"a\"b\\\\c"})"), R"(root ::= "\"" "a\\\"b\\\\c" "\"")"
                                                      "\n");
}

TEST(JsonSchemaGrammarTest, TypeErrorsInTheSchemaValueAreStatuses) {
  nlohmann::json schema = {{"enum", {std::string("\xff")}}}; // not UTF-8: dump() throws
  Result<std::string> grammar = jsonSchemaToGrammar(schema);
  ASSERT_FALSE(grammar.isOk());
  EXPECT_EQ(grammar.status().code(), StatusCode::kInvalidArgument);
}

// ---- Meaning

TEST(JsonSchemaGrammarTest, ObjectWithRequiredAndOptionalMembers) {
  expectMatches(kPerson,
                {R"({"name":"a"})", R"({"name": "a", "age": 3})", R"({"name":"","age":0})"},
                {R"({"age":3})", R"({"name":1})", R"({"name":"a","x":1})", R"({"name":"a",})",
                 R"({"name":"a","age":-1})", R"({"age":3,"name":"a"})", R"({"name":"a"}  )",
                 R"({"name":  "a"})", R"({ "name":"a"})"});
}

TEST(JsonSchemaGrammarTest, AllOptionalMembersKeepCommasBetweenPresentOnes) {
  expectMatches(R"({"properties":{"a":{"type":"integer"},"b":{"type":"boolean"},
                   "c":{"type":"null"}},"additionalProperties":false})",
                {"{}", R"({"a":1})", R"({"b":true})", R"({"c":null})", R"({"a":1, "c":null})",
                 R"({"b":false,"c":null})", R"({"a":1,"b":true,"c":null})"},
                {R"({,"a":1})", R"({"a":1,})", R"({"a":1"b":true})", R"({"b":true,"a":1})",
                 R"({"a":1,"a":1})", R"({"d":1})"});
}

TEST(JsonSchemaGrammarTest, OptionalMembersBeforeTheFirstRequiredOne) {
  expectMatches(R"({"properties":{"a":{"type":"integer"},"b":{"type":"integer"},
                   "c":{"type":"integer"}},"required":["b"],"additionalProperties":false})",
                {R"({"b":2})", R"({"a":1,"b":2})", R"({"a":1, "b":2, "c":3})", R"({"b":2,"c":3})"},
                {R"({"a":1})", R"({"a":1,})", R"({"a":1,"c":3})", "{}", R"({"a":1,"a":1,"b":2})"});
}

TEST(JsonSchemaGrammarTest, AdditionalPropertiesExcludeListedNames) {
  expectMatches(R"({"type":"object","properties":{"name":{"type":"string"}},
                   "additionalProperties":{"type":"integer"}})",
                {"{}", R"({"name":"a"})", R"({"x":1})", R"({"name":"a", "x":1, "y":2})",
                 R"({"na":1})", R"({"names":1})", R"({"":1})", R"({"é":1})"},
                {R"({"name":1})", R"({"x":"s"})", R"({"name":"a","name":2})", R"({"x":1,})",
                 "{\"\x01\":1}", "{\"n\x01\":1}"});
  expectMatches(R"({"type":"object"})", {"{}", R"({"a":{"b":[true]}})"}, {"[]", "null"});
}

TEST(JsonSchemaGrammarTest, EnumConstAndTypeLists) {
  expectMatches(R"({"enum":["red","green",1,null,{"a":[1,2]}]})",
                {R"("red")", "1", "null", R"({"a":[1,2]})"},
                {R"("blue")", "2", R"("Red")", R"({"a":[1, 2]})"});
  expectMatches(R"({"type":"string","enum":["a",1]})", {R"("a")"}, {"1"});
  expectMatches(R"({"const":"café"})", {R"("café")"}, {R"("cafe")"});
  expectMatches(R"({"type":["integer","null"]})", {"3", "-12", "null"}, {"1.5", "true"});
}

TEST(JsonSchemaGrammarTest, AnyOfAndOneOf) {
  expectMatches(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer"}]})",
                {R"("ab")", "42"}, {R"("abc")", "true"});
  expectMatches(R"({"oneOf":[{"type":"boolean"},{"type":"array","items":{"type":"null"}}]})",
                {"true", "[]", "[null, null]"}, {"[1]", "null"});
}

TEST(JsonSchemaGrammarTest, RecursiveLinkedList) {
  expectMatches(R"({"$ref":"#/definitions/Node","definitions":{"Node":{"type":"object",
      "properties":{"value":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/definitions/Node"},
      {"type":"null"}]}},"required":["value","next"],"additionalProperties":false}}})",
                {R"({"value":1,"next":null})", R"({"value":1, "next":{"value":2, "next":null}})"},
                {R"({"value":1})", R"({"value":1,"next":{"value":2}})", "null"});
}

TEST(JsonSchemaGrammarTest, ArrayBounds) {
  expectMatches(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
                {"[1]", "[1, 2, 3]", "[1,2]"}, {"[]", "[1,2,3,4]", "[1,]", "[,1]", "[1 ,2]"});
  expectMatches(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"boolean"}],
                   "items":false,"minItems":1})",
                {"[1]", "[1, true]"}, {"[]", "[true]", "[1,true,2]"});
  expectMatches(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"boolean"}],
                   "minItems":2,"maxItems":3})",
                {"[1,true]", R"([1,false,"x"])"}, {"[1]", "[1,true,2,3]"});
  expectMatches(R"({"type":"array","prefixItems":[{"type":"integer"}],"items":{"type":"string"}})",
                {"[]", "[1]", R"([1,"a","b"])"}, {R"(["a"])", "[1,2]"});
}

TEST(JsonSchemaGrammarTest, StringLengthCountsCharactersAndEscapes) {
  expectMatches(R"({"type":"string","minLength":1,"maxLength":3})",
                {R"("abc")", R"("é日😀")", R"("a\nb")", R"("\u00e9")"},
                {R"("")", R"("abcd")", R"("éééé")"});
}

TEST(JsonSchemaGrammarTest, StringCharactersAndEscapes) {
  expectMatches(R"({"type":"string"})",
                {R"("")", R"("é日本😀")", R"("\"\\\/\b\f\n\r\t")", R"("\u00E9")"},
                {"\"a\nb\"", R"("\q")", R"("\u00G9")", R"("a)", R"("a"")", "\"\xff\""});
}

TEST(JsonSchemaGrammarTest, Numbers) {
  expectMatches(R"({"type":"number"})",
                {"0", "-0.5", "1e10", "3.25E-2", "123456789012345", "1.000000000000001"},
                {"01", "1.", ".5", "+1", "1234567890123456", "1e", "--1", "NaN"});
  expectMatches(R"({"type":"integer","minimum":1})", {"1", "42"}, {"0", "-1", "1.0"});
  expectMatches(R"({"type":"number","minimum":0})", {"0", "0.5", "2e-3"}, {"-0.5", "-1"});
}

TEST(JsonSchemaGrammarTest, IntegerRanges) {
  expectMatches(R"({"type":"integer","minimum":0,"maximum":9})", {"0", "5", "9"},
                {"-0", "-1", "10", "00", "01", "1.0", "+1", ""});
  expectMatches(R"({"type":"integer","minimum":5,"maximum":123})", {"5", "9", "10", "99", "123"},
                {"4", "0", "124", "130", "199", "1000", "05", "-5"});
  expectMatches(R"({"type":"integer","minimum":-20,"maximum":15})",
                {"-20", "-19", "-10", "-9", "-1", "0", "9", "10", "15"},
                {"-21", "-30", "-0", "-05", "16", "20", "--1"});
  expectMatches(R"({"type":"integer","minimum":-1000,"maximum":-7})",
                {"-1000", "-999", "-100", "-10", "-7"}, {"-1001", "-6", "-0", "0", "7", "-0007"});
  expectMatches(R"({"type":"integer","minimum":100,"maximum":100})", {"100"},
                {"99", "101", "1000", "10"});
  expectMatches(R"({"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":12})",
                {"-2", "0", "11"}, {"-3", "12"});
  expectMatches(R"({"type":"integer","minimum":-2.5,"maximum":7.9})", {"-2", "7"}, {"-3", "8"});
  expectMatches(R"({"type":"integer","exclusiveMinimum":-2.5,"exclusiveMaximum":7.5})", {"-2", "7"},
                {"-3", "8"});
  // The tighter of two bounds on one side wins.
  expectMatches(R"({"type":"integer","minimum":3,"exclusiveMinimum":4,"maximum":9,
                   "exclusiveMaximum":20})",
                {"5", "9"}, {"4", "10"});
  expectMatches(R"({"type":"integer","minimum":0,"maximum":1000000000000})",
                {"0", "7", "999999999999", "1000000000000", "123456789012"},
                {"1000000000001", "9999999999999", "-1", "0123"});
  // An unbounded side keeps the 15-digit limit of every integer.
  expectMatches(R"({"type":"integer","minimum":-5})", {"-5", "0", "999999999999999"},
                {"-6", "1000000000000000", "-0"});
  expectMatches(R"({"type":"integer","maximum":-5})", {"-5", "-999999999999999"},
                {"-4", "0", "-1000000000000000"});
  expectMatches(R"({"type":["integer","null"],"minimum":1,"maximum":3})", {"1", "3", "null"},
                {"0", "4"});
}

TEST(JsonSchemaGrammarTest, IntegerRangeTextIsPinned) {
  EXPECT_EQ(
      grammarFor(R"({"type":"integer","minimum":-20,"maximum":123})"),
      R"(root ::= "-" ( [1-9] | "1" [0-9] | "20" ) | "0" | [1-9] [0-9]? | "1" ( [0-1] [0-9] | "2" [0-3] ))"
      "\n");
  EXPECT_EQ(grammarFor(R"({"type":"integer","exclusiveMinimum":-1})"),
            "root ::= nonneg-integer\nnonneg-integer ::= \"0\" | [1-9] [0-9]{0,14}\n");
  EXPECT_EQ(grammarFor(R"({"type":"integer","minimum":-1e20,"maximum":1e20})"),
            "root ::= integer\ninteger ::= \"-\"? nonneg-integer\n"
            "nonneg-integer ::= \"0\" | [1-9] [0-9]{0,14}\n");
}

// Every integer in [-300, 300] (and a few spellings that are not canonical) against ranges given
// by inclusive, exclusive and fractional bounds.
TEST(JsonSchemaGrammarTest, IntegerRangesExhaustively) {
  const std::vector<std::pair<int, int>> ranges = {
      {0, 9},     {5, 123},   {-20, 15}, {-1000, -7},  {100, 100}, {-300, 300}, {-99, -10},
      {1, 299},   {-1, 0},    {10, 99},  {-250, -250}, {0, 0},     {37, 201},   {-109, 190},
      {-5, 1000}, {-200, 19}, {11, 11},  {-10, -10},   {9, 10},    {-10, -9}};
  for (const auto &[lo, hi] : ranges) {
    const std::string bounds[] = {
        "\"minimum\":" + std::to_string(lo) + ",\"maximum\":" + std::to_string(hi),
        "\"exclusiveMinimum\":" + std::to_string(lo - 1) +
            ",\"exclusiveMaximum\":" + std::to_string(hi + 1),
        "\"minimum\":" + std::to_string(lo - 0.75) + ",\"maximum\":" + std::to_string(hi + 0.75),
    };
    for (const std::string &bound : bounds) {
      const std::string schema = "{\"type\":\"integer\"," + bound + "}";
      const std::string text = grammarFor(schema);
      const CompiledTestGrammar grammar(text);
      ASSERT_TRUE(grammar.parsed()) << schema;
      for (int value = -300; value <= 300; ++value)
        EXPECT_EQ(grammar.matches(std::to_string(value)), lo <= value && value <= hi)
            << schema << " on " << value << "\n"
            << text;
      for (const char *other : {"-0", "00", "01", "-01", "+1", "1.0", "1e2", ""})
        EXPECT_TRUE(grammar.rejects(other)) << schema << "\n" << text;
    }
  }
}

// Wide ranges: the values near each bound, and random values near and between them.
TEST(JsonSchemaGrammarTest, WideIntegerRangesAtRandom) {
  constexpr int64_t kMax = 999'999'999'999'999;
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 1'000'000'000'000},
                                                           {123'456'789, 987'654'321'012},
                                                           {-kMax, 5},
                                                           {-999'999'999'993, -3},
                                                           {-42, kMax},
                                                           {70'000, 70'999},
                                                           {-1'234'567, 89'012'345},
                                                           {1'000'000, 9'999'999},
                                                           {-kMax, kMax - 1}};
  std::mt19937_64 random(7);
  for (const auto &[lo, hi] : ranges) {
    const std::string schema = "{\"type\":\"integer\",\"minimum\":" + std::to_string(lo) +
                               ",\"maximum\":" + std::to_string(hi) + "}";
    const std::string text = grammarFor(schema);
    const CompiledTestGrammar grammar(text);
    ASSERT_TRUE(grammar.parsed()) << schema;
    std::vector<int64_t> values;
    for (const int64_t bound : {lo, hi})
      for (int64_t delta = -3; delta <= 3; ++delta)
        values.push_back(bound + delta);
    const int64_t span = hi / 2 - lo / 2 + 1;
    for (int i = 0; i < 300; ++i) {
      values.push_back(lo + static_cast<int64_t>(random() % static_cast<uint64_t>(span)) * 2);
      values.push_back(lo + static_cast<int64_t>(random() % 2000) - 1000);
      values.push_back(hi + static_cast<int64_t>(random() % 2000) - 1000);
    }
    for (const int64_t value : values) {
      const bool digitsFit = value >= -kMax && value <= kMax;
      EXPECT_EQ(grammar.matches(std::to_string(value)), lo <= value && value <= hi && digitsFit)
          << schema << " on " << value << "\n"
          << text;
    }
  }
}

// Number bounds with fractions: every multiple of 0.05 in [-4, 4], spelled with one, two and
// three fraction digits (and as an integer where it is one), against ranges of inclusive and
// exclusive bounds on both sides of 0, one side only, and equal bounds. Values are compared in
// hundredths, exactly.
TEST(JsonSchemaGrammarTest, DecimalRangesExhaustively) {
  const std::vector<int> bounds = {-250, -100, -25, -5, 0, 10, 50, 100, 105, 275};
  const auto decimal = [](int hundredths) {
    std::ostringstream out;
    out << (hundredths < 0 ? "-" : "") << std::abs(hundredths) / 100 << "." << std::setw(2)
        << std::setfill('0') << std::abs(hundredths) % 100;
    return out.str();
  };
  std::vector<std::pair<std::string, int>> candidates;
  for (int v = -400; v <= 400; v += 5) {
    const std::string two = decimal(v);
    candidates.push_back({two, v});
    candidates.push_back({two + "0", v});
    if (v % 10 == 0)
      candidates.push_back({two.substr(0, two.size() - 1), v});
    if (v % 100 == 0 && v != 0)
      candidates.push_back({std::to_string(v / 100), v});
  }
  candidates.push_back({"0", 0});
  std::vector<std::tuple<std::optional<int>, bool, std::optional<int>, bool>> ranges;
  for (size_t i = 0; i < bounds.size(); ++i) {
    for (size_t j = i; j < bounds.size(); ++j)
      for (int exclusive = 0; exclusive < (i == j ? 1 : 4); ++exclusive)
        ranges.push_back({bounds[i], (exclusive & 1) != 0, bounds[j], (exclusive & 2) != 0});
    ranges.push_back({bounds[i], false, std::nullopt, false});
    ranges.push_back({std::nullopt, false, bounds[i], true});
  }
  for (const auto &[lo, loExclusive, hi, hiExclusive] : ranges) {
    std::string schema = R"({"type":"number")";
    if (lo)
      schema +=
          std::string(loExclusive ? R"(,"exclusiveMinimum":)" : R"(,"minimum":)") + decimal(*lo);
    if (hi)
      schema +=
          std::string(hiExclusive ? R"(,"exclusiveMaximum":)" : R"(,"maximum":)") + decimal(*hi);
    schema += "}";
    if (lo && !hi && *lo == 0 && !loExclusive)
      continue; // nonneg-number, with exponents: Numbers covers it
    const std::string text = grammarFor(schema);
    const CompiledTestGrammar grammar(text);
    ASSERT_TRUE(grammar.parsed()) << schema << "\n" << text;
    for (const auto &[spelling, value] : candidates) {
      const bool above = !lo || (loExclusive ? value > *lo : value >= *lo);
      const bool below = !hi || (hiExclusive ? value < *hi : value <= *hi);
      EXPECT_EQ(grammar.matches(spelling), above && below) << schema << " on " << spelling << "\n"
                                                           << text;
    }
    for (const char *other : {"-0", "-0.0", "-0.00", "1.", ".5", "01.5", "+1", "1e0", ""})
      EXPECT_TRUE(grammar.rejects(other)) << schema << " on " << other << "\n" << text;
  }
}

// Long fractions on both sides of a bound's last digit, and bounds written with exponents.
TEST(JsonSchemaGrammarTest, DecimalRangesWithLongFractions) {
  expectMatches(R"({"type":"number","minimum":0.333,"exclusiveMaximum":0.3334})",
                {"0.333", "0.3330", "0.33300000000001", "0.3333999999", "0.33339"},
                {"0.3329999999999", "0.3334", "0.33340", "0.33340000001", "0.4", "0", "1"});
  expectMatches(R"({"type":"number","exclusiveMinimum":-1e-3,"maximum":2.5e2})",
                {"-0.000999", "0", "0.0", "250", "250.000", "249.999999999999999"},
                {"-0.001", "-0.0010", "-1", "250.000000000001", "251", "-0"});
  expectMatches(R"({"type":"number","minimum":-1e20,"maximum":1e20})",
                {"0", "-999999999999999.5", "999999999999999.999999999999999"},
                {"1000000000000000", "-1000000000000000", "1e3"});
  expectMatches(R"({"type":"number","minimum":0,"maximum":1})",
                {"0", "0.5", "1", "1.0", "0.999999999999999"},
                {"1.000000000000001", "-0.1", "2", "1e-3"});
  // 16 fraction digits are more than any number here has.
  expectMatches(R"({"type":"number","exclusiveMinimum":0})", {"0.000000000000001", "3"},
                {"0", "0.000000000000000", "0.0000000000000001", "-1"});
}

TEST(JsonSchemaGrammarTest, PatternsMatchTheWholeString) {
  expectMatches(R"({"type":"string","pattern":"^[A-Z]{3}-\\d{4}$"})",
                {R"("ABC-1234")", R"("XYZ-0000")"},
                {R"("AB-1234")", R"("ABC-12345")", R"("abc-1234")", "ABC-1234", R"("ABC-123")",
                 R"(" ABC-1234")", R"("ABC-1234\n")"});
  expectMatches(R"({"pattern":"[a-z]+@[a-z]+\\.com"})", {R"("bob@example.com")"},
                {R"("bob@examplecom")", R"("x bob@example.com")", R"("bob@example.com.")",
                 R"("@example.com")", "null"});
  expectMatches(R"({"pattern":"(cat|dog)s?"})", {R"("cat")", R"("dogs")", R"("cats")"},
                {R"("cats!")", R"("bird")", R"("")", R"("catdog")"});
  expectMatches(R"j({"pattern":"(?P<year>\\d{4})-(?P<month>0[1-9]|1[0-2])"})j",
                {R"("2024-01")", R"("1999-12")"}, {R"("2024-13")", R"("2024-00")"});
  expectMatches(R"({"pattern":"[α-ω]+/[\\w.-]*"})", {R"("αβ/a_b.c-d")", R"("ω/")"},
                {R"("a/")", R"("αβ")", R"("αβ/a b")"});
  expectMatches(R"({"pattern":""})", {R"("")"}, {R"("a")"});
}

TEST(JsonSchemaGrammarTest, PatternsBesideOtherSchemas) {
  // Each property keeps its own pattern, though both regexes have a rule "group-1".
  expectMatches(R"({"type":"object","properties":{"a":{"pattern":"(x|y)+"},
                   "b":{"type":"string","pattern":"(1|2)+"}},"required":["a","b"],
                   "additionalProperties":false})",
                {R"({"a":"xy","b":"12"})", R"({"a":"y", "b":"2"})"},
                {R"({"a":"12","b":"xy"})", R"({"a":"x","b":"x"})"});
  // The pattern constrains strings only; the other types of a type list are as they are.
  expectMatches(R"({"type":["string","null","integer"],"pattern":"[a-c]{2}"})",
                {R"("ab")", "null", "42"}, {R"("abc")", R"("zz")", "true"});
  expectMatches(R"({"type":"integer","pattern":"[^x]"})", {"1"}, {R"("a")"});
  expectMatches(R"({"type":"array","items":{"pattern":"[0-9]+"},"maxItems":2})",
                {R"([])", R"(["1", "23"])"}, {R"(["a"])", R"([1])", R"(["1","2","3"])"});
  // Group names that are rule names elsewhere ("root", "value") stay the pattern's own.
  expectMatches(R"j({"$defs":{"root":{"pattern":"(?P<root>a|b)(c|d)"}},
                     "properties":{"x":{"$ref":"#/$defs/root"},
                     "y":{"pattern":"(?P<value>v|w)"}},"additionalProperties":false})j",
                {R"({"x":"ac","y":"w"})", R"({"y":"v"})", "{}"},
                {R"({"x":"a"})", R"({"y":"vw"})", R"({"x":"ac","y":{}})", R"({"x":1})"});
}

TEST(JsonSchemaGrammarTest, PatternTextIsPinned) {
  EXPECT_EQ(grammarFor(R"({"type":"object","properties":{"code":{"pattern":"^(AB|C)-\\d{2}$"}},
                          "required":["code"],"additionalProperties":false})"),
            R"(root ::= "{" "\"code\":" ws root-code "}"
root-code ::= "\"" root-code-group-1 "-" [0-9]{2} "\""
root-code-group-1 ::= "AB" | "C"
ws ::= " "?
)");
  // A pattern with alternatives at its top keeps them in a rule of its own.
  EXPECT_EQ(grammarFor(R"({"pattern":"cat|dog"})"), R"(root ::= "\"" root-pattern "\""
root-pattern ::= "cat" | "dog"
)");
}

TEST(JsonSchemaGrammarTest, PatternsTogetherHaveAnElementBudget) {
  nlohmann::ordered_json schema = {{"type", "object"},
                                   {"required", nlohmann::ordered_json::array()}};
  for (int i = 0; i < 100; ++i) {
    const std::string name = "p" + std::to_string(i);
    schema["properties"][name] = {{"pattern", "a{1000}b{1000}c{1000}d{1000}"}};
    schema["required"].push_back(name);
  }
  Result<std::string> grammar = jsonSchemaToGrammar(schema);
  ASSERT_FALSE(grammar.isOk());
  EXPECT_EQ(grammar.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(grammar.status().message().find("the schema's patterns compile to more than"),
            std::string::npos)
      << grammar.status().toString();
  schema["properties"].erase("p0"); // fewer patterns fit, and the text compiles
  schema["required"] = {"p1"};
  for (int i = 40; i < 100; ++i)
    schema["properties"].erase("p" + std::to_string(i));
  grammar = jsonSchemaToGrammar(schema);
  ASSERT_TRUE(grammar.isOk()) << grammar.status().toString();
  EXPECT_TRUE(CompiledTestGrammar(*grammar).parsed());
}

TEST(JsonSchemaGrammarTest, Formats) {
  // Only dates and times valid whatever the year and offset: no February 29, no leap second.
  expectMatches(R"({"type":"string","format":"date"})", {R"("2024-02-28")", R"("1999-12-31")"},
                {R"("2024-13-01")", R"("2024-04-31")", R"("2024-01-32")", R"("2024-11-31")",
                 R"("2024-00-10")", R"("2024-1-01")", R"("2024-02-30")", R"("2024-02-29")"});
  expectMatches(R"({"format":"date-time"})",
                {R"("2024-05-06T07:08:09Z")", R"("2024-05-06T23:59:59.123+02:00")"},
                {R"("2024-05-06T07:08:09")", R"("2024-05-06 07:08:09Z")",
                 R"("2024-05-06T24:00:00Z")", R"("2024-05-06T23:59:60Z")"});
  expectMatches(R"({"format":"time"})", {R"("07:08:09-05:30")"}, {R"("7:08:09Z")"});
  expectMatches(R"({"format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
                {R"("123e4567e89b12d3a456426614174000")"});
  expectMatches(R"({"format":"email"})", {R"("a.b+c@example.co.uk")"},
                {R"("a@b")", R"("@example.com")"});
  expectMatches(R"({"format":"ipv4"})", {R"("192.168.0.1")", R"("255.255.255.0")"},
                {R"("256.1.1.1")", R"("1.2.3")", R"("01.2.3.4")"});
}

TEST(JsonSchemaGrammarTest, AnyValueSchemas) {
  for (const char *schema : {"{}", "true", R"({"description":"anything","title":"x"})"})
    expectMatches(schema, {"1", R"("s")", R"({"a":[null]})", "false"}, {"", "nul", "[1,]"});
}

TEST(JsonSchemaGrammarTest, MembersFollowTheKeyOrderOfTheJsonValue) {
  const std::string schema = R"({"type":"object","properties":{"b":{"type":"integer"},
      "a":{"type":"integer"}},"required":["a","b"],"additionalProperties":false})";
  Result<std::string> ordered = jsonSchemaToGrammar(nlohmann::ordered_json::parse(schema));
  Result<std::string> sorted = jsonSchemaToGrammar(nlohmann::json::parse(schema));
  ASSERT_TRUE(ordered.isOk() && sorted.isOk());
  const CompiledTestGrammar orderedGrammar(*ordered), sortedGrammar(*sorted);
  EXPECT_TRUE(orderedGrammar.accepts(R"({"b":1,"a":2})"));
  EXPECT_TRUE(orderedGrammar.rejects(R"({"a":2,"b":1})"));
  EXPECT_TRUE(sortedGrammar.accepts(R"({"a":2,"b":1})"));
}

TEST(JsonSchemaGrammarTest, RuleNamesAreValid) {
  const std::string text = grammarFor(R"({"type":"object","properties":{"my field/é":{
      "type":"object","properties":{"x y":{"type":"array","items":{"enum":[1,2]}}}}}})");
  for (size_t line = 0; line < text.size(); line = text.find('\n', line) + 1) {
    const std::string name = text.substr(line, text.find(" ::= ", line) - line);
    EXPECT_FALSE(name.empty());
    for (char c : name)
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') << name;
  }
  EXPECT_TRUE(CompiledTestGrammar(text).parsed());
}

} // namespace
} // namespace kiln::structured
