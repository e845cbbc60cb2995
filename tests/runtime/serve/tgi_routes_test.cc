// TGI's routes as huggingface_hub's InferenceClient uses them (POST /, GET /info) and TGI's texts:
// each token's own text in stream events and details.tokens alike, a stop token's text ("</s>"),
// and a stop sequence kept in generated_text.
#include "runtime/serve/json_text.h"
#include "runtime/serve/tgi_response.h"
#include "runtime/serve/tgi_stream.h"
#include "runtime/serve/tgi_token_text.h"
#include "tests/runtime/serve/server_fixture.h"

#include <gtest/gtest.h>

namespace kiln::rt::serve {
namespace {

using nlohmann::json;
using testing::FakeModelOptions;
using testing::FakeServeModel;
using testing::kEos;
using testing::ServerFixture;
using testing::sseJson;

std::vector<int32_t> bytesOf(const std::string &text) {
  return std::vector<int32_t>(text.begin(), text.end());
}

TEST(TgiRoutesTest, CompatPostAnswersAOneElementArrayWithTheFullTextByDefault) {
  ServerFixture f;
  const std::string params = R"("parameters": {"max_new_tokens": 5, "ignore_eos": true)";
  auto generate = f.post("/generate", R"({"inputs": "abc", )" + params + "}}");
  ASSERT_EQ(generate->status, 200) << generate->body;
  std::string text = json::parse(generate->body)["generated_text"];
  ASSERT_FALSE(text.empty());

  auto compat = f.post("/", R"({"inputs": "abc", )" + params + "}}");
  ASSERT_EQ(compat->status, 200) << compat->body;
  EXPECT_EQ(compat->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(compat->body, dumpJson(json::array({{{"generated_text", "abc" + text}}})));

  auto bare = f.post("/", R"({"inputs": "abc", "stream": false, )" + params +
                              R"(, "return_full_text": false}})");
  ASSERT_EQ(bare->status, 200) << bare->body;
  EXPECT_EQ(bare->body, dumpJson(json::array({{{"generated_text", text}}})));
}

TEST(TgiRoutesTest, CompatPostWithDetailsWrapsGeneratesAnswer) {
  ServerFixture f;
  const std::string body = R"({"inputs": "abc", "parameters": {"max_new_tokens": 3,
      "ignore_eos": true, "details": true, "return_full_text": false}})";
  auto generate = f.post("/generate", body);
  auto compat = f.post("/", body);
  ASSERT_EQ(compat->status, 200) << compat->body;
  EXPECT_EQ(compat->body, "[" + generate->body + "]");
}

TEST(TgiRoutesTest, CompatPostStreamsExactlyAsGenerateStream) {
  ServerFixture f;
  const std::string params =
      R"("parameters": {"max_new_tokens": 6, "ignore_eos": true, "details": true}})";
  auto reference = f.post("/generate_stream", R"({"inputs": "abc", )" + params);
  ASSERT_EQ(reference->status, 200);
  auto compat = f.post("/", R"({"inputs": "abc", "stream": true, )" + params);
  ASSERT_EQ(compat->status, 200) << compat->body;
  EXPECT_EQ(compat->get_header_value("Content-Type"), "text/event-stream");
  // return_full_text defaults to true on POST /, so only the last event's generated_text differs.
  std::vector<json> events = sseJson(compat->body, /*expectDone=*/false);
  std::vector<json> expected = sseJson(reference->body, /*expectDone=*/false);
  ASSERT_EQ(events.size(), 6u);
  expected.back()["generated_text"] = "abc" + expected.back()["generated_text"].get<std::string>();
  EXPECT_EQ(events, expected);

  auto bare = f.post("/", R"({"inputs": "abc", "stream": true, "parameters": {"max_new_tokens": 6,
      "ignore_eos": true, "details": true, "return_full_text": false}})");
  EXPECT_EQ(bare->body, reference->body);
}

TEST(TgiRoutesTest, CompatPostErrorsAreTgiErrors) {
  ServerFixture f;
  auto res = f.post("/", R"({"inputs": 5})");
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(res->body, R"({"error":"field 'inputs' must be a string, got an integer",)"
                       R"("error_type":"validation"})");
}

TEST(TgiRoutesTest, InfoDescribesTheServedModel) {
  ServerFixture f;
  auto res = f.client().Get("/info");
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  // FakeServeModel: max batch 8, max sequence 128, 512 blocks of 4; admission 8 + 512 waiting.
  EXPECT_EQ(res->body,
            R"({"docker_label":null,"max_batch_size":8,"max_batch_total_tokens":2048,)"
            R"("max_best_of":1,"max_client_batch_size":1,"max_concurrent_requests":520,)"
            R"("max_input_length":127,"max_input_tokens":127,"max_stop_sequences":16,)"
            R"("max_total_tokens":128,"model_id":"fake-model","model_pipeline_tag":)"
            R"("text-generation","model_sha":null,"router":"kiln","sha":null,)"
            R"("validation_workers":1,"version":"0.1.0"})");
}

TEST(TgiRoutesTest, InfoIs503WhileLoading) {
  ServerFixture f({}, {}, /*setModel=*/false);
  auto res = f.client().Get("/info");
  EXPECT_EQ(res->status, 503);
  EXPECT_NE(res->body.find("\"error_type\":\"overloaded\""), std::string::npos) << res->body;
}

// TGI reports the eos token that ended a sample with its own text ("</s>", special) in the
// stream's last event as in details.tokens.
TEST(TgiRoutesTest, AStopTokensTextIsTheSameInStreamAndDetails) {
  FakeModelOptions options;
  options.eosBoost = 1000.0f; // eos first
  ServerFixture f({}, options);
  auto whole = f.post("/generate", R"({"inputs": "abc", "parameters": {"details": true}})");
  ASSERT_EQ(whole->status, 200) << whole->body;
  json body = json::parse(whole->body);
  json logprob = body["details"]["tokens"][0]["logprob"];
  json eosToken = {{"id", kEos}, {"text", "</s>"}, {"logprob", logprob}, {"special", true}};
  json details = {{"finish_reason", "eos_token"}, {"generated_tokens", 1}, {"seed", nullptr}};
  json expected = {{"generated_text", ""}, {"details", details}};
  expected["details"]["prefill"] = json::array();
  expected["details"]["tokens"] = json::array({eosToken});
  EXPECT_EQ(whole->body, dumpJson(expected));

  auto stream = f.post("/generate_stream", R"({"inputs": "abc"})");
  ASSERT_EQ(stream->status, 200);
  json event = {{"index", 1},         {"token", eosToken}, {"top_tokens", nullptr},
                {"generated_text", ""}, {"details", details}};
  EXPECT_EQ(stream->body, "data:" + dumpJson(event) + "\n\n");
}

// The engine ends its text before a stop sequence; TGI keeps the stop sequence (and the rest of
// the token that completed it) in generated_text and in the tokens' texts.
struct StopSequenceCase {
  FakeServeModel model;
  GenerationRequest request;
  TgiContext context;
  GenerationResult result;

  StopSequenceCase() {
    request.prompt.text = "say";
    request.sampling.stop = {"lo"};
    request.details = true;
    context = TgiContext{&request, &model, model.eosTokenIds()};
    result.promptIds = bytesOf("say");
    result.samples.resize(1);
    result.samples[0].text = "hel"; // what the engine's stop-string filter lets out
    result.samples[0].tokenIds = bytesOf("hello");
    result.samples[0].finishReason = FinishReason::kStop;
    result.finished = true;
  }
};

json tokenJson(char c) {
  return {{"id", static_cast<int>(c)},
          {"text", std::string(1, c)},
          {"logprob", nullptr},
          {"special", false}};
}

TEST(TgiRoutesTest, GenerateKeepsTheStopSequence) {
  StopSequenceCase c;
  json tokens = json::array();
  for (char ch : std::string("hello"))
    tokens.push_back(tokenJson(ch));
  json expected = {{"generated_text", "hello"},
                   {"details",
                    {{"finish_reason", "stop_sequence"},
                     {"generated_tokens", 5},
                     {"seed", nullptr},
                     {"prefill", json::array()},
                     {"tokens", tokens}}}};
  EXPECT_EQ(dumpJson(tgiGenerateResponse(c.context, c.result)), dumpJson(expected));

  c.request.details = false;
  c.request.returnFullText = true;
  EXPECT_EQ(dumpJson(tgiGenerateResponse(c.context, c.result)),
            R"({"generated_text":"sayhello"})");
}

// The stream as the engine delivers it: text held back while it could start "lo", then cut.
TEST(TgiRoutesTest, StreamKeepsTheStopSequence) {
  StopSequenceCase c;
  c.request.stream = true;
  std::unique_ptr<StreamFormatter> stream = makeTgiStream(c.context, TgiStreamStyle::kTgiSse);
  const std::vector<std::string> engineTexts = {"h", "e", "", "l", ""};
  GenerationResult soFar;
  soFar.promptIds = c.result.promptIds;
  std::string body;
  for (size_t i = 0; i < 5; ++i) {
    RequestOutput out;
    out.tokenIds = {static_cast<int32_t>("hello"[i])};
    out.text = engineTexts[i];
    if (i == 4) {
      out.finishReason = FinishReason::kStop;
      out.requestFinished = true;
    }
    applyOutput(soFar, out);
    body += stream->output(0, out, soFar);
  }
  std::string expected;
  for (size_t i = 0; i < 5; ++i) {
    json event = {{"index", i + 1},
                  {"token", tokenJson("hello"[i])},
                  {"top_tokens", nullptr},
                  {"generated_text", nullptr},
                  {"details", nullptr}};
    if (i == 4) {
      event["generated_text"] = "hello";
      event["details"] = {
          {"finish_reason", "stop_sequence"}, {"generated_tokens", 5}, {"seed", nullptr}};
    }
    expected += "data:" + dumpJson(event) + "\n\n";
  }
  EXPECT_EQ(body, expected);
}

TEST(TgiRoutesTest, TokenTextsWaitForWholeCharactersAndNameSpecialTokens) {
  FakeServeModel model;
  TgiTokenTexts texts(model, bytesOf("abcdefgh"));
  EXPECT_EQ(texts.push('x'), "x");
  EXPECT_EQ(texts.push(0xC3), ""); // the first byte of "é"
  EXPECT_EQ(texts.push(0xA9), "\xC3\xA9");
  EXPECT_EQ(texts.push(kEos), "</s>");
  EXPECT_EQ(texts.joined(), "x\xC3\xA9");
  // The sample's last token takes a character it leaves unfinished.
  EXPECT_EQ(texts.push(0xE2), "");
  EXPECT_EQ(texts.push(0x82, /*last=*/true), "\xE2\x82");
  EXPECT_EQ(texts.joined(), "x\xC3\xA9\xE2\x82");
  EXPECT_TRUE(endsInsideCharacter("a\xE2\x82"));
  EXPECT_TRUE(endsInsideCharacter("a\xEF\xBF\xBD"));
  EXPECT_FALSE(endsInsideCharacter("a\xE2\x82\xAC"));
  EXPECT_FALSE(endsInsideCharacter(""));
}

} // namespace
} // namespace kiln::rt::serve
