#include "runtime/serve/json_fields.h"
#include "runtime/serve/tgi_request.h"

#include <gtest/gtest.h>

namespace kiln::rt::serve {
namespace {

std::optional<ApiError> parse(const std::string &text, GenerationRequest &out) {
  nlohmann::json body = nlohmann::json::parse(text);
  return parseTgiRequest(body, out);
}

TEST(TgiRequestTest, BadBodiesNameTheField) {
  struct Case {
    const char *body;
    const char *param;
  } cases[] = {
      {R"({})", "inputs"},
      {R"({"inputs": 3})", "inputs"},
      {R"({"inputs": ""})", "inputs"},
      {R"({"inputs": ["a", "b"]})", "inputs"},
      {R"({"inputs": "a", "parameters": 3})", "parameters"},
      {R"({"inputs": "a", "stream": 1})", "stream"},
      {R"({"inputs": "a", "parameters": {"max_new_tokens": 0}})", "parameters.max_new_tokens"},
      {R"({"inputs": "a", "parameters": {"temperature": 0}})", "parameters.temperature"},
      {R"({"inputs": "a", "parameters": {"top_p": 0}})", "parameters.top_p"},
      {R"({"inputs": "a", "parameters": {"top_k": 0}})", "parameters.top_k"},
      {R"({"inputs": "a", "parameters": {"seed": -1}})", "parameters.seed"},
      {R"({"inputs": "a", "parameters": {"stop": "x"}})", ""}, // a string is fine
      {R"({"inputs": "a", "parameters": {"stop": [1]}})", "parameters.stop"},
      {R"({"inputs": "a", "parameters": {"best_of": 2}})", "parameters.best_of"},
      {R"({"inputs": "a", "parameters": {"grammar": {"type": "json"}}})", "parameters.grammar"},
      {R"({"inputs": "a", "parameters": {"details": "yes"}})", "parameters.details"},
      {R"({"inputs": "a", "parameters": {"top_n_tokens": 50}})", "parameters.top_n_tokens"},
      {R"({"inputs": "a", "parameters": {"repetition_penalty": -1}})",
       "parameters.repetition_penalty"},
      // Found by tests/fuzz/serve_request_fuzz (as min_tokens of an OpenAI body): a minimum
      // above the maximum passed parsing and failed at engine submit.
      {R"({"inputs": "a", "parameters": {"max_new_tokens": 2, "min_new_tokens": 3}})",
       "parameters.min_new_tokens"},
  };
  for (const Case &c : cases) {
    GenerationRequest r;
    std::optional<ApiError> error = parse(c.body, r);
    if (std::string(c.param).empty()) {
      EXPECT_FALSE(error.has_value()) << c.body;
      continue;
    }
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->httpStatus, 400);
    EXPECT_EQ(error->param, c.param) << c.body << " -> " << error->message;
    EXPECT_NE(error->message.find(c.param), std::string::npos) << error->message;
  }
}

TEST(TgiRequestTest, GreedyUnlessSamplingIsAskedFor) {
  GenerationRequest greedy, sampled, warped;
  ASSERT_FALSE(parse(R"({"inputs": "a"})", greedy));
  EXPECT_FLOAT_EQ(greedy.sampling.temperature, 0.0f);
  EXPECT_EQ(greedy.defaultMaxTokens, kDefaultMaxNewTokens);
  EXPECT_FALSE(greedy.sampling.maxTokens.has_value());
  ASSERT_FALSE(parse(R"({"inputs": "a", "parameters": {"do_sample": true}})", sampled));
  EXPECT_FLOAT_EQ(sampled.sampling.temperature, 1.0f);
  ASSERT_FALSE(parse(R"({"inputs": "a", "parameters": {"temperature": 0.7, "top_k": 5}})", warped));
  EXPECT_FLOAT_EQ(warped.sampling.temperature, 0.7f);
  EXPECT_EQ(warped.sampling.topK, 5);
}

TEST(TgiRequestTest, ParametersReachTheEngineRequest) {
  GenerationRequest r;
  ASSERT_FALSE(parse(R"({"inputs": ["hi"], "stream": true, "parameters": {"max_new_tokens": 20,
      "seed": 9, "stop": ["\n\n"], "details": true, "return_full_text": true, "top_n_tokens": 2,
      "repetition_penalty": 1.1, "top_p": 0.8, "decoder_input_details": false}})",
                     r));
  EXPECT_EQ(r.prompt.text, "hi");
  EXPECT_EQ(r.prompt.field, "inputs");
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.sampling.maxTokens, 20);
  EXPECT_EQ(r.maxTokensField, "parameters.max_new_tokens");
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"\n\n"}));
  EXPECT_TRUE(r.details);
  EXPECT_TRUE(r.returnFullText);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_FLOAT_EQ(r.sampling.repetitionPenalty, 1.1f);
  EXPECT_FLOAT_EQ(r.sampling.topP, 0.8f);
}

TEST(TgiRequestTest, InvocationBodiesAreClassified) {
  InvocationKind kind;
  ASSERT_FALSE(classifyInvocation(nlohmann::json::parse(R"({"inputs": "a"})"), kind));
  EXPECT_EQ(kind, InvocationKind::kTgi);
  ASSERT_FALSE(classifyInvocation(nlohmann::json::parse(R"({"messages": []})"), kind));
  EXPECT_EQ(kind, InvocationKind::kChat);
  ASSERT_FALSE(classifyInvocation(nlohmann::json::parse(R"({"prompt": "x"})"), kind));
  EXPECT_EQ(kind, InvocationKind::kCompletion);
  auto error = classifyInvocation(nlohmann::json::parse(R"({"text": "x"})"), kind);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->param, "inputs");
}

} // namespace
} // namespace kiln::rt::serve
