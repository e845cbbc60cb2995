// OpenAI tool calling on /v1/chat/completions over real sockets (runtime/serve/tool_request.h):
// "required" and a named function constrain the fake model's random bytes into calls of the given
// tools whose arguments follow their schemas, whole and streamed alike; "auto" reads calls in the
// model's format (forced here with a regex, as a model would write them); "none" leaves the text
// alone; bad tools and choices are 400s naming the field.
#include "tests/runtime/serve/server_fixture.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace kiln::rt::serve {
namespace {

using nlohmann::json;
using testing::FakeModelOptions;
using testing::ServerFixture;
using testing::sseJson;

FakeModelOptions bigModel(ToolCallFormat format = ToolCallFormat::kNone) {
  FakeModelOptions options;
  options.maxSeqLen = 1024;
  options.numKvBlocks = 4096;
  options.toolCallFormat = format;
  return options;
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
   "parameters": {"type": "object", "properties": {
       "location": {"type": "string", "maxLength": 8},
       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
     "required": ["location"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time",
   "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
     "required": ["zone"], "additionalProperties": false}}}
])");

json chatBody(json extra) {
  json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
               {"tools", kTools},
               {"max_tokens", 400},
               {"temperature", 1.0},
               {"seed", 11}};
  for (auto &[key, value] : extra.items())
    body[key] = value;
  return body;
}

json post(ServerFixture &f, const json &body, int status = 200) {
  auto res = f.post("/v1/chat/completions", body.dump());
  EXPECT_TRUE(res);
  if (!res)
    return json();
  EXPECT_EQ(res->status, status) << res->body;
  return res->body.empty() || body.value("stream", false) ? json(res->body)
                                                          : json::parse(res->body);
}

// JSON Schema's maxLength counts characters.
size_t codePoints(const std::string &utf8) {
  size_t n = 0;
  for (unsigned char c : utf8)
    n += (c & 0xC0) != 0x80;
  return n;
}

// The arguments of a call of `name` follow kTools' schema for it.
void expectValidArguments(const std::string &name, const std::string &arguments) {
  json args = json::parse(arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << arguments;
  if (name == "get_weather") {
    ASSERT_TRUE(args.contains("location")) << arguments;
    EXPECT_LE(codePoints(args["location"].get<std::string>()), 8u) << arguments;
    for (auto &[key, value] : args.items()) {
      EXPECT_TRUE(key == "location" || key == "unit") << arguments;
      if (key == "unit")
        EXPECT_TRUE(value == "celsius" || value == "fahrenheit") << arguments;
    }
  } else {
    ASSERT_EQ(name, "get_time");
    EXPECT_EQ(args.size(), 1u) << arguments;
    EXPECT_TRUE(args["zone"] == "UTC" || args["zone"] == "CET") << arguments;
  }
}

void expectCallShape(const json &call, size_t idLength) {
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().size(), idLength) << call;
  expectValidArguments(call["function"]["name"], call["function"]["arguments"]);
}

TEST(ToolRoutesTest, RequiredGivesCallsOfTheTools) {
  ServerFixture f({}, bigModel());
  json r = post(f, chatBody({{"tool_choice", "required"}, {"n", 6}}));
  ASSERT_EQ(r["choices"].size(), 6u);
  std::set<std::string> names;
  for (const json &choice : r["choices"]) {
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice;
    EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
    ASSERT_GE(choice["message"]["tool_calls"].size(), 1u) << choice;
    for (const json &call : choice["message"]["tool_calls"]) {
      expectCallShape(call, 29); // "call_" and 24
      names.insert(call["function"]["name"]);
    }
  }
  EXPECT_EQ(names.size(), 2u); // random bytes pick both tools over six samples
}

TEST(ToolRoutesTest, NotParallelGivesOneCall) {
  ServerFixture f({}, bigModel());
  json r =
      post(f, chatBody({{"tool_choice", "required"}, {"n", 4}, {"parallel_tool_calls", false}}));
  for (const json &choice : r["choices"])
    EXPECT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
}

TEST(ToolRoutesTest, NamedFunctionIsTheWholeOutput) {
  ServerFixture f({}, bigModel());
  json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  json r = post(f, chatBody({{"tool_choice", named}, {"n", 3}}));
  for (const json &choice : r["choices"]) {
    EXPECT_EQ(choice["finish_reason"], "stop"); // as OpenAI answers a forced function
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
    const json &call = choice["message"]["tool_calls"][0];
    EXPECT_EQ(call["function"]["name"], "get_weather");
    expectCallShape(call, 29);
  }
}

// The calls and content of a stream, reassembled per choice.
struct Streamed {
  std::string content;
  std::map<int, json> calls; // by tool call index: id, name, arguments, pieces (chunks with it)
  std::string finishReason;
};

std::map<int, Streamed> reassemble(const std::vector<json> &chunks) {
  std::map<int, Streamed> out;
  for (const json &chunk : chunks) {
    const json &choice = chunk["choices"][0];
    Streamed &s = out[choice["index"].get<int>()];
    EXPECT_TRUE(s.finishReason.empty()) << "a choice went on after finishing";
    const json &delta = choice["delta"];
    if (delta.contains("content"))
      s.content += delta["content"].get<std::string>();
    for (const json &call : delta.value("tool_calls", json::array())) {
      json &whole = s.calls[call["index"].get<int>()];
      if (call.contains("id")) {
        EXPECT_FALSE(whole.contains("id")) << "a call's id is sent once";
        whole["id"] = call["id"];
        whole["name"] = call["function"]["name"];
        EXPECT_EQ(call["type"], "function");
      }
      whole["arguments"] =
          whole.value("arguments", "") + call["function"]["arguments"].get<std::string>();
      whole["pieces"] = whole.value("pieces", 0) + 1;
    }
    if (!choice["finish_reason"].is_null())
      s.finishReason = choice["finish_reason"];
  }
  return out;
}

// Streamed calls are the whole response's, chunk by chunk (ids differ: each response draws its
// own); each call comes in at least `minPieces` chunks.
void expectStreamMatches(ServerFixture &f, json body, int minPieces) {
  json whole = post(f, body);
  body["stream"] = true;
  auto res = f.post("/v1/chat/completions", body.dump());
  ASSERT_EQ(res->status, 200) << res->body;
  std::map<int, Streamed> streamed = reassemble(sseJson(res->body));
  ASSERT_EQ(streamed.size(), whole["choices"].size());
  for (const json &choice : whole["choices"]) {
    const Streamed &s = streamed[choice["index"].get<int>()];
    const json &message = choice["message"];
    EXPECT_EQ(s.content, message["content"].is_null() ? "" : message["content"].get<std::string>());
    EXPECT_EQ(s.finishReason, choice["finish_reason"]);
    const json calls = message.value("tool_calls", json::array());
    ASSERT_EQ(s.calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      const json &got = s.calls.at(static_cast<int>(i));
      EXPECT_EQ(got["name"], calls[i]["function"]["name"]);
      EXPECT_EQ(got["arguments"], calls[i]["function"]["arguments"]);
      EXPECT_GE(got["pieces"].get<int>(), minPieces) << got["arguments"];
    }
  }
}

TEST(ToolRoutesTest, StreamedCallsMatchTheWholeResponse) {
  ServerFixture f({}, bigModel());
  // The calls' arguments stream as the model writes them (tool_call_parser.h), token by token:
  // arguments of several members come in several chunks, not whole when the call closes.
  expectStreamMatches(f, chatBody({{"tool_choice", "required"}, {"n", 3}}), 4);
  json named = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  expectStreamMatches(f, chatBody({{"tool_choice", named}, {"n", 2}}), 4);
}

// A model that writes a Hermes call after some text (the regex stands in for a trained model).
const char *kHermesOutput = R"(Sure\.\n<tool_call>\n\{"name": "get_weather", "arguments": )"
                            R"(\{"location": "Paris", "unit": "celsius"\}\}\n</tool_call>)";

TEST(ToolRoutesTest, AutoReadsCallsInTheModelsFormat) {
  ServerFixture f({}, bigModel(ToolCallFormat::kHermes));
  json r = post(f, chatBody({{"guided_regex", kHermesOutput}}));
  const json &choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Sure.\n");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json &call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"location":"Paris","unit":"celsius"})");
  expectStreamMatches(f, chatBody({{"guided_regex", kHermesOutput}, {"n", 2}}), 4);
  // "none": the text as written.
  r = post(f, chatBody({{"guided_regex", kHermesOutput}, {"tool_choice", "none"}}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(r["choices"][0]["message"]["content"].get<std::string>().substr(0, 18),
            "Sure.\n<tool_call>\n");
}

// Without a format (no --tool-call-parser, a template that writes no calls) "auto" is plain text.
TEST(ToolRoutesTest, AutoWithoutAFormatIsText) {
  ServerFixture f({}, bigModel());
  json r = post(f, chatBody({{"guided_regex", kHermesOutput}}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
}

TEST(ToolRoutesTest, BadToolsAndChoicesNameTheField) {
  ServerFixture f({}, bigModel());
  json named = {{"type", "function"}, {"function", {{"name", "get_stock"}}}};
  struct Case {
    json fields;
    std::string param, says;
  };
  const Case cases[] = {
      {{{"tool_choice", "required"}, {"tools", nullptr}}, "tool_choice", "no 'tools'"},
      {{{"tool_choice", named}}, "tool_choice.function.name", "get_weather, get_time"},
      {{{"tool_choice", "always"}}, "tool_choice", "\"required\""},
      {{{"tools", {{{"type", "retrieval"}}}}}, "tools[0].type", "\"function\""},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", ""}}}}}}},
       "tools[0].function.name",
       "non-empty"},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", 3}}}}}}},
       "tools[0].function.parameters",
       "JSON schema"},
      {{{"tools", "get_weather"}}, "tools", "array"},
      {{{"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}},
       "tool_choice",
       "cannot be used together"},
      {{{"tool_choice", "required"},
        {"tools",
         {{{"type", "function"},
           {"function", {{"name", "f"}, {"parameters", {{"type", "object"}, {"not", {}}}}}}}}}},
       "tools",
       "not"},
      {{{"tool_choice", "required"}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls", ""},
  };
  for (const Case &c : cases) {
    json r = post(f, chatBody(c.fields), 400);
    EXPECT_EQ(r["error"]["param"], c.param) << c.fields;
    EXPECT_NE(r["error"]["message"].get<std::string>().find(c.says), std::string::npos)
        << r["error"]["message"];
  }
}

} // namespace
} // namespace kiln::rt::serve
