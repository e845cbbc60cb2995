// Request parsing, table-driven: each bad body names the offending field in "param" with the
// right status; good bodies fill exactly the engine fields they name.
#include "runtime/serve/json_fields.h"
#include "runtime/serve/openai_request.h"
#include "runtime/text/chat_template.h"

#include <gtest/gtest.h>

namespace kiln::rt::serve {
namespace {

struct BadCase {
  const char *body;
  const char *param;
  const char *messagePart;
};

std::optional<ApiError> parseCompletion(const std::string &text, GenerationRequest &out) {
  nlohmann::json body;
  if (auto error = parseJsonObject(text, body))
    return error;
  return parseCompletionRequest(body, out);
}

std::optional<ApiError> parseChat(const std::string &text, GenerationRequest &out) {
  nlohmann::json body;
  if (auto error = parseJsonObject(text, body))
    return error;
  return parseChatRequest(body, text, out);
}

TEST(OpenAiRequestTest, BadCompletionBodiesNameTheField) {
  const BadCase cases[] = {
      {R"({})", "prompt", "required"},
      {R"({"prompt": 5})", "prompt", "must be a string or an array of token ids"},
      {R"({"prompt": ""})", "prompt", "empty"},
      {R"({"prompt": [1, "x"]})", "prompt", "array of integers"},
      {R"({"prompt": [1, -4]})", "prompt", "items must be in"},
      {R"({"prompt": "a", "max_tokens": "x"})", "max_tokens", "must be an integer, got a string"},
      {R"({"prompt": "a", "max_tokens": 0})", "max_tokens", "[1, 2147483647], got 0"},
      {R"({"prompt": "a", "max_tokens": 2.5})", "max_tokens", "an integer"},
      {R"({"prompt": "a", "temperature": 2.5})", "temperature", "[0, 2], got 2.5"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature", "a number"},
      {R"({"prompt": "a", "top_p": 0})", "top_p", "(0, 1]"},
      {R"({"prompt": "a", "top_p": 1.5})", "top_p", "[0, 1]"},
      {R"({"prompt": "a", "n": 0})", "n", "[1, 128]"},
      {R"({"prompt": "a", "n": true})", "n", "an integer, got a boolean"},
      {R"({"prompt": "a", "stop": 3})", "stop", "a string or an array of strings"},
      {R"({"prompt": "a", "stop": [""]})", "stop", "empty string"},
      {R"({"prompt": "a", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
       "stop", "at most 16"},
      {R"({"prompt": "a", "seed": "s"})", "seed", "an integer"},
      {R"({"prompt": "a", "presence_penalty": 3})", "presence_penalty", "[-2, 2]"},
      {R"({"prompt": "a", "frequency_penalty": -2.5})", "frequency_penalty", "[-2, 2]"},
      {R"({"prompt": "a", "logprobs": 21})", "logprobs", "[0, 20]"},
      {R"({"prompt": "a", "logprobs": true})", "logprobs", "an integer"},
      {R"({"prompt": "a", "stream": "yes"})", "stream", "a boolean"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options",
       "only allowed when 'stream' is true"},
      {R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage", "a boolean"},
      {R"({"prompt": "a", "stream": true, "stream_options": 3})", "stream_options", "an object"},
      {R"({"prompt": "a", "logit_bias": {"5": 1}})", "logit_bias", "not supported"},
      {R"({"prompt": "a", "best_of": 3})", "best_of", "must equal 'n'"},
      {R"({"prompt": "a", "suffix": "x"})", "suffix", "not supported"},
      {R"({"prompt": "a", "top_k": -2})", "top_k", "[-1, "},
      {R"({"prompt": "a", "min_p": 2})", "min_p", "[0, 1]"},
      {R"({"prompt": "a", "repetition_penalty": 0})", "repetition_penalty", "> 0"},
      {R"({"prompt": "a", "stop_token_ids": [1, "x"]})", "stop_token_ids", "array of integers"},
      {R"({"prompt": "a", "ignore_eos": 1})", "ignore_eos", "a boolean"},
      {R"({"prompt": "a", "model": 7})", "model", "a string"},
      {R"({"prompt": "a", "echo": "no"})", "echo", "a boolean"},
      // Found by tests/fuzz/serve_request_fuzz: accepted here, then refused by the engine's
      // validateSamplingParams at submit without naming the field.
      {R"({"prompt": "a", "max_tokens": 4, "min_tokens": 5})", "min_tokens",
       "field 'min_tokens' (5) must be <= 'max_tokens' (4)"},
      // No prompt logprobs in the engine: refused rather than answered without prompt entries.
      {R"({"prompt": "a", "echo": true, "logprobs": 0})", "echo",
       "fields 'echo' and 'logprobs' cannot be used together: kiln does not compute the prompt's "
       "logprobs; send one of them"},
      {R"({"prompt": "a", "n": 129})", "n", "[1, 128]"},
  };
  for (const BadCase &c : cases) {
    GenerationRequest request;
    std::optional<ApiError> error = parseCompletion(c.body, request);
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->httpStatus, 400) << c.body;
    EXPECT_EQ(error->param, c.param) << c.body;
    EXPECT_EQ(error->type, "invalid_request_error") << c.body;
    EXPECT_NE(error->message.find(c.messagePart), std::string::npos)
        << c.body << " -> " << error->message;
  }
}

TEST(OpenAiRequestTest, BadChatBodiesNameTheField) {
  const BadCase cases[] = {
      {R"({})", "messages", "required"},
      {R"({"messages": []})", "messages", "non-empty array"},
      {R"({"messages": "hi"})", "messages", "non-empty array"},
      {R"({"messages": [3]})", "messages[0]", "must be an object"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role", "must be a string"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": 5}]})",
       "messages[1].content", "a string, an array of content parts or null"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1})",
       "max_completion_tokens", "[1, "},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs",
       "needs 'logprobs'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 30})",
       "top_logprobs", "[0, 20]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", "logprobs",
       "a boolean"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})",
       "response_format", "'type' is 'xml'; use \"text\", \"json_object\" or \"json_schema\""},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"},
          "guided_regex": "a+"})",
       "response_format", "fields 'guided_regex' and 'response_format' cannot be used together"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools", "an array"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})",
       "chat_template_kwargs", "an object"},
      // A text-only model: image, audio and file parts are refused, not dropped.
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
          {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}]})",
       "messages[0].content[1].type",
       "field 'messages[0].content[1].type' is 'image_url': this server serves a text-only model; "
       "the supported content part type is 'text'"},
      {R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content":
          [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]})",
       "messages[1].content[0].type", "'input_audio': this server serves a text-only model"},
      {R"({"messages": [{"role": "user", "content": [{"text": "x"}]}]})", "messages[0].content[0]",
       "must be an object with a string 'type'"},
      {R"({"messages": [{"role": "user", "content": ["x"]}]})", "messages[0].content[0]",
       "must be an object with a string 'type'"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]})",
       "messages[0].content[0].text", "must be a string"},
      // A forced call needs tools to call (tests/runtime/serve/tool_routes_test.cc has the rest).
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "tool_choice", "field 'tool_choice' asks for a tool call but the request has no 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}],
          "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})",
       "tool_choice", "asks for a tool call but the request has no 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": 1})", "tool_choice",
       "must be \"none\", \"auto\", \"required\" or"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 9,
          "max_completion_tokens": 3, "min_tokens": 4})",
       "min_tokens", "field 'min_tokens' (4) must be <= 'max_completion_tokens' (3)"},
  };
  for (const BadCase &c : cases) {
    GenerationRequest request;
    std::optional<ApiError> error = parseChat(c.body, request);
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->httpStatus, 400) << c.body;
    EXPECT_EQ(error->param, c.param) << c.body;
    EXPECT_NE(error->message.find(c.messagePart), std::string::npos)
        << c.body << " -> " << error->message;
  }
}

TEST(OpenAiRequestTest, BodyLevelErrors) {
  const BadCase cases[] = {
      {"", "", "empty"},
      {"{\"prompt\": \"a\"", "", "not valid JSON"},
      {"[1, 2]", "", "must be a JSON object, got an array"},
      {"{\"prompt\": \"\xff\"}", "", "not valid UTF-8 (byte offset 12)"},
      {"{\"prompt\": \"\xc0\xaf\"}", "", "not valid UTF-8"},
      {"{\"prompt\": \"\xed\xa0\x80\"}", "", "not valid UTF-8"},
  };
  for (const BadCase &c : cases) {
    GenerationRequest request;
    std::optional<ApiError> error = parseCompletion(c.body, request);
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->httpStatus, 400);
    EXPECT_EQ(error->param, c.param);
    EXPECT_NE(error->message.find(c.messagePart), std::string::npos) << error->message;
  }
}

// A number that overflows a double (1e309, even in a field kiln ignores) used to escape the parser
// as an exception: now a 400 naming the field it sits in.
TEST(OpenAiRequestTest, NumbersThatOverflowADoubleNameTheirField) {
  const std::string huge = "1" + std::string(400, '0');
  const BadCase cases[] = {
      {R"({"prompt": "a", "unknown_field": 1e309})", "unknown_field", ""},
      {R"({"prompt": "a", "temperature": -1e400})", "temperature", ""},
      {R"({"messages": [{"role": "user", "content": "x", "extra": [1, 2, 1e309]}]})",
       "messages[0].extra[2]", ""},
      {R"({"a": {"b": [[0], [1e999]]}, "prompt": "x"})", "a.b[1][0]", ""},
  };
  for (const BadCase &c : cases) {
    GenerationRequest request;
    std::optional<ApiError> error;
    ASSERT_NO_THROW(error = parseCompletion(c.body, request)) << c.body;
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->httpStatus, 400) << c.body;
    EXPECT_EQ(error->param, c.param) << c.body;
    EXPECT_EQ(error->message, "field '" + std::string(c.param) +
                                  "' holds a number out of range (JSON numbers must fit a double)");
  }
  GenerationRequest request;
  std::optional<ApiError> error;
  ASSERT_NO_THROW(error = parseCompletion("{\"prompt\": \"a\", \"n\": " + huge + "}", request));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "n");
  ASSERT_NO_THROW(error = parseCompletion("[1e309]", request));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "");
  EXPECT_EQ(error->message, "request body: number out of range (JSON numbers must fit a double)");
  // Syntax errors still say where.
  ASSERT_NO_THROW(error = parseCompletion("{\"prompt\": 1e}", request));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("the request body is not valid JSON: "), std::string::npos);
  EXPECT_NE(error->message.find("column"), std::string::npos) << error->message;
}

TEST(OpenAiRequestTest, SupportedToolChoicesAndTextPartsAreAccepted) {
  for (const char *body :
       {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto", "tools": []})",
        R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none"})",
        R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": null})",
        R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
            {"type": "text", "text": "b"}]}]})"}) {
    GenerationRequest request;
    EXPECT_FALSE(parseChat(body, request).has_value()) << body;
  }
}

TEST(OpenAiRequestTest, CompletionFieldsReachTheEngineRequest) {
  GenerationRequest r;
  ASSERT_FALSE(parseCompletion(R"({"model": "m", "prompt": [5, 6, 7], "max_tokens": 9,
      "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "n": 3, "seed": 42,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2,
      "stop": "END", "stop_token_ids": [3], "ignore_eos": true, "min_tokens": 2, "logprobs": 4,
      "stream": true, "stream_options": {"include_usage": true},
      "return_token_ids": true, "best_of": 3, "user": "u"})",
                               r));
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt.kind, PromptInput::Kind::kIds);
  EXPECT_EQ(r.prompt.ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(r.sampling.maxTokens, 9);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.topP, 0.9f);
  EXPECT_EQ(r.sampling.topK, 40);
  EXPECT_FLOAT_EQ(r.sampling.minP, 0.1f);
  EXPECT_EQ(r.sampling.n, 3);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(r.sampling.presencePenalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequencyPenalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repetitionPenalty, 1.2f);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(r.sampling.stopTokenIds, (std::vector<int32_t>{3}));
  EXPECT_TRUE(r.sampling.ignoreEos);
  EXPECT_EQ(r.sampling.minTokens, 2);
  EXPECT_EQ(r.sampling.logprobs, 4);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.topLogprobs, 4);
  EXPECT_FALSE(r.echo);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.includeUsage);
  EXPECT_TRUE(r.returnTokenIds);
}

TEST(OpenAiRequestTest, EchoWithoutLogprobs) {
  GenerationRequest r;
  ASSERT_FALSE(parseCompletion(R"({"prompt": "a", "echo": true, "logprobs": null})", r));
  EXPECT_TRUE(r.echo);
  EXPECT_FALSE(r.logprobs);
}

TEST(OpenAiRequestTest, CompletionDefaults) {
  GenerationRequest r;
  ASSERT_FALSE(parseCompletion(R"({"prompt": ["hello"]})", r));
  EXPECT_EQ(r.prompt.kind, PromptInput::Kind::kText);
  EXPECT_EQ(r.prompt.text, "hello");
  EXPECT_FALSE(r.sampling.maxTokens.has_value());
  EXPECT_EQ(r.defaultMaxTokens, kDefaultCompletionMaxTokens);
  EXPECT_EQ(r.sampling.n, 1);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_FALSE(r.sampling.logprobs.has_value());
  EXPECT_FALSE(r.stream);
}

// Every shape "prompt" takes: one prompt (bare or as a one-element array) keeps the field name
// "prompt"; a batch names each item by its index.
TEST(OpenAiRequestTest, PromptShapes) {
  struct Shape {
    const char *prompt;
    std::vector<PromptInput::Kind> kinds;
    std::vector<std::string> texts;
    std::vector<std::vector<int32_t>> ids;
    std::vector<std::string> fields;
  };
  using K = PromptInput::Kind;
  const Shape shapes[] = {
      {R"("abc")", {K::kText}, {"abc"}, {{}}, {"prompt"}},
      {R"([1, 2, 3])", {K::kIds}, {""}, {{1, 2, 3}}, {"prompt"}},
      {R"(["abc"])", {K::kText}, {"abc"}, {{}}, {"prompt"}},
      {R"([[7, 8]])", {K::kIds}, {""}, {{7, 8}}, {"prompt"}},
      {R"(["a", "bc", "d"])",
       {K::kText, K::kText, K::kText},
       {"a", "bc", "d"},
       {{}, {}, {}},
       {"prompt[0]", "prompt[1]", "prompt[2]"}},
      {R"([[1], [2, 3]])", {K::kIds, K::kIds}, {"", ""}, {{1}, {2, 3}}, {"prompt[0]", "prompt[1]"}},
  };
  for (const Shape &shape : shapes) {
    GenerationRequest r;
    std::string body = std::string(R"({"prompt": )") + shape.prompt + "}";
    ASSERT_FALSE(parseCompletion(body, r)) << body;
    ASSERT_EQ(r.promptCount(), shape.kinds.size()) << body;
    for (size_t i = 0; i < r.promptCount(); ++i) {
      const PromptInput &p = r.promptAt(i);
      EXPECT_EQ(p.kind, shape.kinds[i]) << body << " prompt " << i;
      EXPECT_EQ(p.text, shape.texts[i]) << body << " prompt " << i;
      EXPECT_EQ(p.ids, shape.ids[i]) << body << " prompt " << i;
      EXPECT_EQ(p.field, shape.fields[i]) << body << " prompt " << i;
    }
  }
}

TEST(OpenAiRequestTest, BatchOfTheMostPromptsAndSharedSettings) {
  nlohmann::json body = {{"prompt", std::vector<std::string>(kMaxPrompts, "x")},
                         {"n", 2},
                         {"seed", 9},
                         {"max_tokens", 4}};
  GenerationRequest r;
  ASSERT_FALSE(parseCompletionRequest(body, r));
  EXPECT_EQ(r.promptCount(), kMaxPrompts);
  EXPECT_EQ(r.promptAt(kMaxPrompts - 1).field, "prompt[255]");
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_EQ(r.sampling.maxTokens, 4);
}

// Each bad batch fails as a whole with the exact message, naming the item where there is one.
TEST(OpenAiRequestTest, BadBatchesFailWithExactMessages) {
  struct Case {
    std::string prompt;
    std::string param;
    std::string message;
  };
  std::string tooMany = "[";
  for (size_t i = 0; i <= kMaxPrompts; ++i)
    tooMany += i ? ", \"x\"" : "\"x\"";
  tooMany += "]";
  const Case cases[] = {
      {"[]", "prompt",
       "field 'prompt' is an empty array; send a string, an array of token ids, or a non-empty "
       "array of either"},
      {R"(["a", [1]])", "prompt",
       "field 'prompt' mixes kinds of prompts: prompt[0] is a string but prompt[1] is an array; "
       "send only strings or only arrays of token ids"},
      {R"([[1], "a"])", "prompt",
       "field 'prompt' mixes kinds of prompts: prompt[0] is an array but prompt[1] is a string; "
       "send only strings or only arrays of token ids"},
      {R"(["a", "b", 5])", "prompt",
       "field 'prompt' mixes kinds of prompts: prompt[0] is a string but prompt[2] is an "
       "integer; send only strings or only arrays of token ids"},
      {R"(["a", null])", "prompt",
       "field 'prompt' mixes kinds of prompts: prompt[0] is a string but prompt[1] is null; "
       "send only strings or only arrays of token ids"},
      {R"(["a", ""])", "prompt[1]", "field 'prompt[1]' is empty"},
      {R"([[1], []])", "prompt[1]", "field 'prompt[1]' is empty"},
      {R"([[1], [2, -1]])", "prompt[1]",
       "field 'prompt[1]' has -1; items must be in [0, 2147483647]"},
      {R"([[1], [2, "x"]])", "prompt[1]",
       "field 'prompt[1]' must be an array of integers, got an array"},
      {R"([[1], [[2]]])", "prompt[1]",
       "field 'prompt[1]' must be an array of integers, got an array"},
      {R"([""])", "prompt", "field 'prompt' is empty"},
      {R"([[]])", "prompt", "field 'prompt' is empty"},
      {tooMany, "prompt",
       "field 'prompt' holds 257 prompts; at most 256 are allowed in one request"},
      {"5", "prompt", "field 'prompt' must be a string or an array of token ids, got an integer"},
      {"{}", "prompt", "field 'prompt' must be a string or an array of token ids, got an object"},
  };
  for (const Case &c : cases) {
    GenerationRequest r;
    std::string body = R"({"prompt": )" + c.prompt + "}";
    std::optional<ApiError> error = parseCompletion(body, r);
    ASSERT_TRUE(error.has_value()) << body;
    EXPECT_EQ(error->httpStatus, 400) << body;
    EXPECT_EQ(error->param, c.param) << body;
    EXPECT_EQ(error->message, c.message) << body;
  }
}

TEST(OpenAiRequestTest, ChatFieldsAndKeyOrder) {
  GenerationRequest r;
  ASSERT_FALSE(parseChat(R"({"messages": [{"role": "user", "content": "hi", "name": "z"}],
      "max_tokens": 5, "max_completion_tokens": 7, "logprobs": true, "top_logprobs": 3,
      "add_generation_prompt": false, "chat_template_kwargs": {"enable_thinking": false},
      "seed": -1})",
                         r));
  EXPECT_EQ(r.prompt.kind, PromptInput::Kind::kChat);
  EXPECT_EQ(r.prompt.messages.dump(), R"([{"role":"user","content":"hi","name":"z"}])");
  EXPECT_EQ(r.sampling.maxTokens, 7); // max_completion_tokens wins
  EXPECT_EQ(r.maxTokensField, "max_completion_tokens");
  EXPECT_EQ(r.sampling.logprobs, 3);
  EXPECT_FALSE(r.prompt.addGenerationPrompt);
  EXPECT_EQ(r.prompt.chatExtra.dump(), R"({"enable_thinking":false})");
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(-1));
  EXPECT_FALSE(r.defaultMaxTokens.has_value());
}

// Templates print the tools (Qwen2.5: `tool | tojson`; Mistral v0.3: `tool.items()`) and the
// chat_template_kwargs in the order they hold their keys, and transformers keeps the client's
// order, so the parsed request must too, at every depth. Every object below has its keys out of
// sorted order.
TEST(OpenAiRequestTest, ToolsAndTemplateKwargsKeepTheClientsKeyOrder) {
  const std::string tool =
      R"({"type":"function","function":{"name":"get_weather","description":"Weather.",)"
      R"("parameters":{"type":"object","properties":{"location":{"type":"string",)"
      R"("description":"City"},"unit":{"type":"string","enum":["c","f"]}},)"
      R"("required":["location"]}}})";
  const std::string kwargs = R"({"zone":"UTC","style":{"tone":"brief","length":2}})";
  GenerationRequest r;
  ASSERT_FALSE(parseChat(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)" + tool +
                             R"(], "chat_template_kwargs": )" + kwargs + "}",
                         r));
  EXPECT_EQ(r.prompt.chatExtra["tools"].dump(), "[" + tool + "]");
  EXPECT_EQ(r.prompt.chatExtra["style"].dump(), R"({"tone":"brief","length":2})");
  const std::string extra = R"({"zone":"UTC","style":{"tone":"brief","length":2},"tools":[)";
  EXPECT_EQ(r.prompt.chatExtra.dump(), extra + tool + "]}");

  // The prompt a tools template renders from it, as transformers renders it.
  auto tmpl =
      ChatTemplate::parse("{%- for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
                          "{%- for key, val in tools[0].function.items() %}{{ key }} {% endfor %}"
                          "{{ style | tojson }} {{ messages[0].content }}");
  ASSERT_TRUE(tmpl.isOk()) << tmpl.status().toString();
  auto prompt =
      tmpl->renderChat(r.prompt.messages, r.prompt.addGenerationPrompt, {}, r.prompt.chatExtra);
  ASSERT_TRUE(prompt.isOk()) << prompt.status().toString();
  EXPECT_EQ(*prompt,
            R"({"type": "function", "function": {"name": "get_weather", "description": )"
            R"("Weather.", "parameters": {"type": "object", "properties": {"location": )"
            R"({"type": "string", "description": "City"}, "unit": {"type": "string", "enum": )"
            R"(["c", "f"]}}, "required": ["location"]}}})"
            "\nname description parameters "
            R"({"tone": "brief", "length": 2} hi)");
}

TEST(OpenAiRequestTest, ErrorBodiesHaveOpenAiAndTgiShapes) {
  ApiError e = badRequest("top_p", "field 'top_p' must be in (0, 1]");
  EXPECT_EQ(
      openAiErrorBody(e),
      R"({"error":{"code":null,"message":"field 'top_p' must be in (0, 1]","param":"top_p","type":"invalid_request_error"}})");
  EXPECT_EQ(tgiErrorBody(e),
            R"({"error":"field 'top_p' must be in (0, 1]","error_type":"validation"})");
  e.httpStatus = 503;
  EXPECT_EQ(tgiErrorBody(e),
            R"({"error":"field 'top_p' must be in (0, 1]","error_type":"overloaded"})");
}

} // namespace
} // namespace kiln::rt::serve
