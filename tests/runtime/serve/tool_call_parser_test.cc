// Tool-call parsing (runtime/serve/tool_call_parser.h) against vLLM 0.32's own parsers
// (tests/data/tool_calls/parser_goldens.json, from tools/goldens/make_tool_call_goldens.py), whole
// and fed in every split, plus the cases where kiln says more than vLLM does.
#include "runtime/serve/tool_call_parser.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace kiln::rt::serve {
namespace {

nlohmann::json loadGoldens() {
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/tool_calls/parser_goldens.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

ToolCallFormat formatOf(const std::string &parser) {
  Result<ToolCallFormat> format = toolCallFormatNamed(parser);
  EXPECT_TRUE(format.isOk()) << parser;
  return format.isOk() ? *format : ToolCallFormat::kNone;
}

// The calls as JSON: names and the arguments parsed (vLLM writes ", " and ": " between members,
// kiln compact JSON; the values must be equal).
nlohmann::json callsJson(const std::vector<ToolCall> &calls) {
  nlohmann::json out = nlohmann::json::array();
  for (const ToolCall &c : calls)
    out.push_back({{"name", c.name}, {"arguments", nlohmann::json::parse(c.arguments)}});
  return out;
}

// Adds a piece's content, calls and fragments to `all`.
void append(ToolCallDelta &all, const ToolCallDelta &d) {
  all.content += d.content;
  all.calls.insert(all.calls.end(), d.calls.begin(), d.calls.end());
  all.fragments.insert(all.fragments.end(), d.fragments.begin(), d.fragments.end());
}

// The parser fed in pieces of `step` bytes.
ToolCallDelta feedInPieces(ToolCallFormat format, const std::string &text, size_t step) {
  ToolCallParser parser(format);
  ToolCallDelta all;
  for (size_t at = 0; at < text.size(); at += step)
    append(all, parser.feed(std::string_view(text).substr(at, step)));
  append(all, parser.finish());
  return all;
}

// The calls the fragments stream, joined: each call opened once by its first fragment, which
// names it, then its arguments in order.
std::vector<ToolCall> joinFragments(const std::vector<ToolCallFragment> &fragments) {
  std::vector<ToolCall> calls;
  for (const ToolCallFragment &f : fragments) {
    EXPECT_EQ(f.opens, f.call == calls.size()) << "fragment of call " << f.call;
    if (f.opens)
      calls.push_back({f.name, {}});
    else
      EXPECT_TRUE(f.name.empty());
    if (f.call < calls.size())
      calls[f.call].arguments += f.arguments;
  }
  return calls;
}

// Each call is exactly its fragments joined (names and argument text, byte for byte).
void expectCallsAreTheirFragments(const ToolCallDelta &all) {
  std::vector<ToolCall> joined = joinFragments(all.fragments);
  ASSERT_EQ(joined.size(), all.calls.size());
  for (size_t i = 0; i < joined.size(); ++i) {
    EXPECT_EQ(joined[i].name, all.calls[i].name);
    EXPECT_EQ(joined[i].arguments, all.calls[i].arguments);
  }
}

TEST(ToolCallParserTest, MatchesVllmParsers) {
  nlohmann::json goldens = loadGoldens();
  ASSERT_GE(goldens["cases"].size(), 30u);
  for (const nlohmann::json &c : goldens["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string output = c["output"];
    ParsedToolOutput parsed = parseToolCalls(formatOf(c["parser"]), output);
    EXPECT_EQ(!parsed.calls.empty(), c["tools_called"].get<bool>());
    if (c["content"].is_null())
      EXPECT_FALSE(parsed.content.has_value()) << *parsed.content;
    else
      EXPECT_EQ(parsed.content.value_or("<none>"), c["content"].get<std::string>());
    EXPECT_EQ(callsJson(parsed.calls), c["calls"]);
  }
}

// Streaming says what the whole text says, however the output is cut.
TEST(ToolCallParserTest, EverySplitSaysTheSame) {
  nlohmann::json goldens = loadGoldens();
  for (const nlohmann::json &c : goldens["cases"]) {
    if (!c["tools_called"].get<bool>())
      continue; // a failed call is content in both, but streaming has already said the others
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string output = c["output"];
    ToolCallFormat format = formatOf(c["parser"]);
    for (size_t step : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, output.size()}) {
      SCOPED_TRACE("pieces of " + std::to_string(step));
      ToolCallDelta streamed = feedInPieces(format, output, step);
      EXPECT_EQ(streamed.content, c["content"].is_null() ? "" : c["content"].get<std::string>());
      EXPECT_EQ(callsJson(streamed.calls), c["calls"]);
      expectCallsAreTheirFragments(streamed);
    }
  }
}

// Outputs beyond the goldens, among them tool_call_fuzz's find (a misspelt closing marker, then
// blanks the whole text said and the pieces held).
TEST(ToolCallParserTest, EverySplitSaysTheSameBeyondTheGoldens) {
  const std::string call = R"({"name": "f", "arguments": {"city": "Z\u00fcrich"}})";
  const std::pair<ToolCallFormat, std::string> cases[] = {
      {ToolCallFormat::kHermes,
       "Sure.\n<tool_call>\n" + call + "\n</tool_fall>\n<tool_call>" + call + "</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>" + call + "</tool_call>\n \nthen text \n\t"},
      {ToolCallFormat::kLlama3Json, call + " ;\n" + call + "\n and after \n"},
      {ToolCallFormat::kMistral, "first [TOOL_CALLS] [" + call + " ,\n" + call + "] after "},
      {ToolCallFormat::kForcedArray, "[" + call + "]  \n"},
  };
  for (const auto &[format, text] : cases) {
    ToolCallDelta whole = feedInPieces(format, text, text.size());
    ASSERT_FALSE(whole.calls.empty()) << text;
    for (size_t step = 1; step < 9; ++step) {
      ToolCallDelta pieces = feedInPieces(format, text, step);
      EXPECT_EQ(pieces.content, whole.content) << text << " in pieces of " << step;
      EXPECT_EQ(callsJson(pieces.calls), callsJson(whole.calls)) << text;
      expectCallsAreTheirFragments(pieces);
    }
  }
}

// Content goes out before the call closes; a partial marker is held back, then said as content
// when it turns out not to be one.
TEST(ToolCallParserTest, ContentStreamsAheadOfCalls) {
  ToolCallParser parser(ToolCallFormat::kHermes);
  EXPECT_EQ(parser.feed("Checking <tool").content, "Checking ");
  EXPECT_EQ(parser.feed("box> now").content, "<toolbox> now");
  ToolCallDelta d =
      parser.feed(" <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]");
  EXPECT_EQ(d.content, " ");
  EXPECT_TRUE(d.calls.empty());
  d = parser.feed("}}\n</tool_call>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_EQ(d.calls[0].arguments, R"({"a":[1,"}"]})");
}

// Text after the last call is content (vLLM drops it); blanks between calls and at the end are not.
TEST(ToolCallParserTest, TextAfterCallsIsContent) {
  ParsedToolOutput p = parseToolCalls(
      ToolCallFormat::kHermes,
      "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nDone, anything else?\n");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.content.value_or("<none>"), "\n\nDone, anything else?"); // the last blanks dropped
  p = parseToolCalls(ToolCallFormat::kLlama3Json,
                     "{\"name\": \"f\", \"parameters\": {\"x\": 1}}\n\nThat is the call.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content.value_or("<none>"), "\n\nThat is the call.");
}

// The member order of the arguments is the model's, not sorted.
TEST(ToolCallParserTest, ArgumentsKeepTheModelsOrder) {
  ParsedToolOutput p =
      parseToolCalls(ToolCallFormat::kLlama3Json,
                     R"({"name": "f", "parameters": {"zeta": 1, "alpha": {"y": 2, "b": 3}}})");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"zeta":1,"alpha":{"y":2,"b":3}})");
}

// Arguments the model wrote as a JSON string are passed through as that string's text.
TEST(ToolCallParserTest, StringArgumentsAreTheirText) {
  ParsedToolOutput p =
      parseToolCalls(ToolCallFormat::kHermes,
                     R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"a": 1})");
}

// Leading blanks before llama3_json's object, the literal <|python_tag|>, and Mistral's array
// without its (skipped) marker.
TEST(ToolCallParserTest, MarkersThatMayBeMissing) {
  for (const char *text : {"\n {\"name\": \"f\", \"parameters\": {}}",
                           "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}"}) {
    ParsedToolOutput p = parseToolCalls(ToolCallFormat::kLlama3Json, text);
    ASSERT_EQ(p.calls.size(), 1u) << text;
    EXPECT_FALSE(p.content.has_value());
  }
  ParsedToolOutput p =
      parseToolCalls(ToolCallFormat::kMistral, R"( [{"name": "f", "arguments": {"q": "x"}}])");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"x"})");
  // A bracket that does not open calls is content.
  p = parseToolCalls(ToolCallFormat::kMistral, "[1] is the first source.");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content.value_or(""), "[1] is the first source.");
}

// Mistral tokenizers v11 and later name each call: [TOOL_CALLS]name[ARGS]{...}, repeated, with an
// optional [CALL_ID]id before [ARGS]; content may come before, blanks between calls are dropped,
// and every split of the output says the same.
TEST(ToolCallParserTest, MistralNamedCalls) {
  const std::string text = "Let me check. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", "
                           "\"unit\": \"c\"} \n[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS] "
                           "{\"zone\": {\"name\": \"CET\"}}";
  ParsedToolOutput p = parseToolCalls(ToolCallFormat::kMistral, text);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","unit":"c"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, R"({"zone":{"name":"CET"}})");
  EXPECT_EQ(p.content.value_or("<none>"), "Let me check. ");
  for (size_t step = 1; step < 12; ++step) {
    ToolCallDelta pieces = feedInPieces(ToolCallFormat::kMistral, text, step);
    EXPECT_EQ(pieces.content, "Let me check. ") << "pieces of " << step;
    EXPECT_EQ(callsJson(pieces.calls), callsJson(p.calls)) << "pieces of " << step;
  }
  p = parseToolCalls(ToolCallFormat::kMistral, R"([TOOL_CALLS]f[ARGS]{} Done.)");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.content.value_or("<none>"), " Done.");
  // Not a named call: a name broken by other text, arguments that are not an object, a cut-off
  // call. The whole output is then content, as any failed call makes it.
  for (const char *bad : {"[TOOL_CALLS]get weather[ARGS]{}", "[TOOL_CALLS]f[ARGS][1, 2]",
                          "[TOOL_CALLS]f[ARGS]{\"a\": 1", "[TOOL_CALLS]f[ARG", "[TOOL_CALLS]f"}) {
    p = parseToolCalls(ToolCallFormat::kMistral, bad);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content.value_or("<none>"), bad);
  }
}

// tool_choice "required": the constrained array of {"name", "parameters"}.
TEST(ToolCallParserTest, ForcedArray) {
  ParsedToolOutput p =
      parseToolCalls(ToolCallFormat::kForcedArray,
                     R"([{"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {}}])");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_FALSE(p.content.has_value());
}

// Cut off inside a call (max_tokens): the whole text is content, no call. A stream has sent the
// call as far as it went, and says none of it again as content (as vLLM's streams do); cut off
// before the name closed, nothing was sent and the text is content.
TEST(ToolCallParserTest, TruncatedCallIsContent) {
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Par";
  ParsedToolOutput p = parseToolCalls(ToolCallFormat::kHermes, text);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content.value_or(""), text);
  ToolCallDelta streamed = feedInPieces(ToolCallFormat::kHermes, text, 5);
  EXPECT_TRUE(streamed.calls.empty());
  EXPECT_EQ(streamed.content, "");
  std::vector<ToolCall> sent = joinFragments(streamed.fragments);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].name, "f");
  EXPECT_EQ(sent[0].arguments, R"({"city":"Par)");
  const std::string early = "Hm. <tool_call>\n{\"name\": \"get_wea";
  streamed = feedInPieces(ToolCallFormat::kHermes, early, 3);
  EXPECT_TRUE(streamed.fragments.empty());
  EXPECT_EQ(streamed.content, early);
}

// A call streams as the model writes it: its name once the string closes, then its arguments
// less the blanks outside strings, piece by piece; the call then completes with the same text.
// Arguments before the name wait for it; arguments given as a string go out whole at the end.
TEST(ToolCallParserTest, ArgumentsStreamAsTheyCome) {
  ToolCallParser parser(ToolCallFormat::kHermes);
  ToolCallDelta d = parser.feed("<tool_call>\n{\"name\": \"get_we");
  EXPECT_TRUE(d.fragments.empty());
  d = parser.feed("ather\", \"arguments\": {\"city\": \"Par");
  ASSERT_EQ(d.fragments.size(), 1u);
  EXPECT_TRUE(d.fragments[0].opens);
  EXPECT_EQ(d.fragments[0].name, "get_weather");
  EXPECT_EQ(d.fragments[0].arguments, R"({"city":"Par)");
  d = parser.feed("is, France\",\n  \"days\": [1, 2]");
  ASSERT_EQ(d.fragments.size(), 1u);
  EXPECT_FALSE(d.fragments[0].opens);
  EXPECT_EQ(d.fragments[0].arguments, R"(is, France","days":[1,2])");
  EXPECT_TRUE(d.calls.empty());
  d = parser.feed("}}\n</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {}");
  ASSERT_EQ(d.fragments.size(), 2u);
  EXPECT_EQ(d.fragments[0].call, 0u);
  EXPECT_EQ(d.fragments[0].arguments, "}");
  EXPECT_EQ(d.fragments[1].call, 1u);
  EXPECT_EQ(d.fragments[1].name, "g");
  EXPECT_EQ(d.fragments[1].arguments, "{}");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, R"({"city":"Paris, France","days":[1,2]})");

  ToolCallDelta late =
      feedInPieces(ToolCallFormat::kLlama3Json,
                   R"({"parameters": {"x": 1}, "name": "f", "type": "function"})", 4);
  ASSERT_EQ(late.fragments.size(), 1u);
  EXPECT_EQ(late.fragments[0].name, "f");
  EXPECT_EQ(late.fragments[0].arguments, R"({"x":1})");
  expectCallsAreTheirFragments(late);

  ToolCallDelta quoted =
      feedInPieces(ToolCallFormat::kHermes,
                   R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)", 2);
  ASSERT_EQ(joinFragments(quoted.fragments).size(), 1u);
  EXPECT_EQ(joinFragments(quoted.fragments)[0].arguments, R"({"a": 1})");
  EXPECT_EQ(quoted.fragments.back().arguments, R"({"a": 1})"); // in one piece, at the end

  // A character cut between pieces waits for its last byte: no fragment splits it.
  ToolCallParser cut(ToolCallFormat::kLlama3Json);
  d = cut.feed("{\"name\": \"f\", \"parameters\": {\"a\": \"caf\xC3");
  ASSERT_EQ(d.fragments.size(), 1u);
  EXPECT_EQ(d.fragments[0].arguments, R"({"a":"caf)");
  d = cut.feed("\xA9\xE2\x82");
  ASSERT_EQ(d.fragments.size(), 1u);
  EXPECT_EQ(d.fragments[0].arguments, "\xC3\xA9");
  d = cut.feed("\xAC\"}}");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.fragments[0].arguments, "\xE2\x82\xAC\"}");

  ToolCallParser named(ToolCallFormat::kMistral);
  d = named.feed("[TOOL_CALLS]get_time[ARGS]{\"zone\": \"CE");
  ASSERT_EQ(d.fragments.size(), 1u);
  EXPECT_EQ(d.fragments[0].name, "get_time");
  EXPECT_EQ(d.fragments[0].arguments, R"({"zone":"CE)");
}

TEST(ToolCallParserTest, FormatNamesAndTemplates) {
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kHermes,
                           ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    Result<ToolCallFormat> back = toolCallFormatNamed(toolCallFormatName(f));
    ASSERT_TRUE(back.isOk());
    EXPECT_EQ(*back, f);
  }
  Result<ToolCallFormat> bad = toolCallFormatNamed("pythonic");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("hermes, llama3_json, mistral, none"), std::string::npos);
  EXPECT_EQ(toolCallFormatOfTemplate("{{ '<tool_call>\\n' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(toolCallFormatOfTemplate("{{ '[TOOL_CALLS] ' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(toolCallFormatOfTemplate("<|python_tag|>"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(toolCallFormatOfTemplate("{{ bos_token }}{{ message.content }}"),
            ToolCallFormat::kNone);
}

} // namespace
} // namespace kiln::rt::serve
