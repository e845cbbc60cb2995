// /v1/completions with several prompts (OpenAI's and vLLM's batch form) over real sockets: choice
// prompt * n + j equals choice j of the same request for that prompt alone (greedy and seeded),
// usage sums the prompts, streams interleave and reassemble to the same token ids, a bad prompt
// fails the whole request before anything runs, admission counts each prompt, a disconnect cancels
// all.
#include "tests/runtime/serve/server_fixture.h"

#include <gtest/gtest.h>

#include <map>

namespace kiln::rt::serve {
namespace {

using nlohmann::json;
using testing::engineIdle;
using testing::FakeModelOptions;
using testing::postThenHangUp;
using testing::ServerFixture;
using testing::sseJson;

const std::vector<std::string> kPrompts = {"abc", "hello", "xy"};

json completion(ServerFixture &f, json body) {
  auto res = f.post("/v1/completions", body.dump());
  EXPECT_TRUE(res);
  if (!res)
    return json();
  EXPECT_EQ(res->status, 200) << res->body;
  return json::parse(res->body);
}

// Runs `settings` once with all kPrompts and once per prompt; checks the batch's choices are the
// single requests' choices in order, and its usage their sum.
void expectBatchEqualsSingles(ServerFixture &f, const json &settings, int n) {
  json batchBody = settings;
  batchBody["prompt"] = kPrompts;
  json batch = completion(f, batchBody);
  ASSERT_EQ(batch["choices"].size(), kPrompts.size() * n);
  int64_t promptTokens = 0, completionTokens = 0;
  for (size_t p = 0; p < kPrompts.size(); ++p) {
    json singleBody = settings;
    singleBody["prompt"] = kPrompts[p];
    json single = completion(f, singleBody);
    ASSERT_EQ(single["choices"].size(), static_cast<size_t>(n));
    promptTokens += single["usage"]["prompt_tokens"].get<int64_t>();
    completionTokens += single["usage"]["completion_tokens"].get<int64_t>();
    for (int j = 0; j < n; ++j) {
      const json &got = batch["choices"][p * n + j];
      const json &want = single["choices"][j];
      EXPECT_EQ(got["index"], p * n + j);
      EXPECT_EQ(got["text"], want["text"]) << "prompt " << p << " choice " << j;
      EXPECT_EQ(got["token_ids"], want["token_ids"]) << "prompt " << p << " choice " << j;
      EXPECT_EQ(got["finish_reason"], want["finish_reason"]);
      EXPECT_EQ(got["logprobs"], want["logprobs"]);
      // Each choice says which prompt it answers (vLLM puts prompt_token_ids there too).
      EXPECT_EQ(got["prompt_token_ids"], single["prompt_token_ids"]);
    }
  }
  EXPECT_EQ(batch["usage"]["prompt_tokens"], promptTokens); // each prompt once, not n times
  EXPECT_EQ(batch["usage"]["completion_tokens"], completionTokens);
  EXPECT_EQ(batch["usage"]["total_tokens"], promptTokens + completionTokens);
  EXPECT_FALSE(batch.contains("prompt_token_ids")); // several prompts: per choice only
}

TEST(OpenAiRoutesTest, GreedyBatchEqualsSingleRequests) {
  ServerFixture f;
  expectBatchEqualsSingles(f,
                           {{"max_tokens", 6},
                            {"temperature", 0},
                            {"n", 2},
                            {"ignore_eos", true},
                            {"return_token_ids", true}},
                           2);
}

// Seeds as vLLM applies them: every prompt of a batch uses the request's seed, so choice
// prompt * n + j is what sample j of a single request for that prompt gives.
TEST(OpenAiRoutesTest, SeededBatchEqualsSingleRequests) {
  ServerFixture f;
  expectBatchEqualsSingles(f,
                           {{"max_tokens", 8},
                            {"temperature", 1.0},
                            {"seed", 11},
                            {"n", 3},
                            {"ignore_eos", true},
                            {"return_token_ids", true}},
                           3);
}

TEST(OpenAiRoutesTest, EchoAndLogprobsApplyPerChoice) {
  ServerFixture f;
  expectBatchEqualsSingles(f,
                           {{"max_tokens", 5},
                            {"temperature", 0},
                            {"echo", true},
                            {"ignore_eos", true},
                            {"return_token_ids", true}},
                           1);
  expectBatchEqualsSingles(f,
                           {{"max_tokens", 5},
                            {"temperature", 0},
                            {"logprobs", 2},
                            {"ignore_eos", true},
                            {"return_token_ids", true}},
                           1);
  json batch = completion(f, {{"prompt", kPrompts},
                              {"max_tokens", 5},
                              {"temperature", 0},
                              {"echo", true},
                              {"ignore_eos", true}});
  for (size_t p = 0; p < kPrompts.size(); ++p)
    EXPECT_EQ(batch["choices"][p]["text"].get<std::string>().rfind(kPrompts[p], 0), 0u)
        << "choice " << p << " echoes its own prompt";
}

TEST(OpenAiRoutesTest, TokenIdPromptsAndOneElementBatches) {
  ServerFixture f;
  json settings = {
      {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}, {"return_token_ids", true}};
  json ids = settings, texts = settings, one = settings;
  ids["prompt"] = json::parse("[[97, 98, 99], [104, 105]]");
  texts["prompt"] = json::parse(R"(["abc", "hi"])");
  one["prompt"] = json::parse("[[97, 98, 99]]");
  json byIds = completion(f, ids), byText = completion(f, texts), single = completion(f, one);
  EXPECT_EQ(byIds["choices"], byText["choices"]);            // the fake tokenizer maps bytes to ids
  EXPECT_EQ(single["prompt_token_ids"], json({97, 98, 99})); // one prompt keeps the top level
  EXPECT_EQ(single["choices"][0]["token_ids"], byIds["choices"][0]["token_ids"]);
}

TEST(OpenAiRoutesTest, StreamedBatchInterleavesAndReassembles) {
  ServerFixture f;
  json body = {
      {"prompt", kPrompts}, {"max_tokens", 7},         {"temperature", 0.8}, {"seed", 5}, {"n", 2},
      {"ignore_eos", true}, {"return_token_ids", true}};
  json whole = completion(f, body);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto res = f.post("/v1/completions", body.dump());
  ASSERT_EQ(res->status, 200) << res->body;
  std::vector<json> chunks = sseJson(res->body); // exactly one [DONE], last
  ASSERT_FALSE(chunks.empty());
  std::map<int, json> ids, promptIds;
  std::map<int, std::string> finish;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    ASSERT_EQ(chunks[i]["choices"].size(), 1u);
    const json &choice = chunks[i]["choices"][0];
    int index = choice["index"];
    ASSERT_GE(index, 0);
    ASSERT_LT(index, 6);
    EXPECT_FALSE(finish.count(index)) << "choice " << index << " continued after finishing";
    for (const json &id : choice["token_ids"])
      ids[index].push_back(id);
    if (choice.contains("prompt_token_ids"))
      promptIds[index] = choice["prompt_token_ids"];
    if (!choice["finish_reason"].is_null())
      finish[index] = choice["finish_reason"];
  }
  // Token ids rather than text: the fake detokenizer's bytes need not be UTF-8, and the
  // replacement characters of chunks and of the whole text may differ.
  ASSERT_EQ(ids.size(), 6u);
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(ids[k], whole["choices"][k]["token_ids"]) << "choice " << k;
    EXPECT_EQ(promptIds[k], whole["choices"][k]["prompt_token_ids"]) << "choice " << k;
    EXPECT_EQ(finish[k], "length");
  }
  EXPECT_EQ(chunks.back()["choices"].size(), 0u);
  for (const char *field : {"prompt_tokens", "completion_tokens", "total_tokens"})
    EXPECT_EQ(chunks.back()["usage"][field], whole["usage"][field]) << field;
}

// A bad prompt anywhere in a batch fails the request with its index named, and nothing ran.
TEST(OpenAiRoutesTest, BadPromptFailsTheWholeBatchBeforeSubmitting) {
  ServerFixture f; // maxSeqLen 128, vocabulary 260
  struct Case {
    json prompt;
    json extra;
    std::string param;
    std::string message;
  };
  const Case cases[] = {
      {json::array({"abc", std::string(200, 'a'), "x"}), json::object(), "prompt[1]",
       "prompt[1] has 200 tokens; the model's maximum sequence length is 128 (room for the "
       "prompt plus at least one generated token)"},
      {json::parse("[[1], [2], [300, 4]]"), json::object(), "prompt[2]",
       "field 'prompt[2]' holds token id 300, outside the vocabulary [0, 260)"},
      {json::array({"abc", std::string(100, 'b')}), json::parse(R"({"max_tokens": 40})"),
       "max_tokens",
       "field 'max_tokens' is 40 but prompt[1] has 100 tokens and the model's maximum sequence "
       "length is 128: at most 28 tokens can be generated"},
      {json::parse("[[299]]"), json::object(), "prompt",
       "field 'prompt' holds token id 299, outside the vocabulary [0, 260)"},
  };
  for (const Case &c : cases) {
    json body = c.extra;
    body["prompt"] = c.prompt;
    auto res = f.post("/v1/completions", body.dump());
    ASSERT_EQ(res->status, 400) << res->body;
    json error = json::parse(res->body)["error"];
    EXPECT_EQ(error["param"], c.param);
    EXPECT_EQ(error["message"], c.message);
  }
  MetricsSnapshot m = f.model.engine().metrics();
  EXPECT_EQ(m.promptTokens, 0u);
  EXPECT_EQ(m.requestsFinished + m.requestsFailed + m.requestsAborted, 0u);
}

// Each prompt takes one admission slot, as that many separate requests would.
TEST(OpenAiRoutesTest, AdmissionCountsEveryPrompt) {
  HttpServerConfig config;
  config.maxWaiting = 0;
  FakeModelOptions options;
  options.maxBatch = 2; // admission limit 2
  ServerFixture f(config, options);
  auto tooMany = f.post("/v1/completions", R"({"prompt": ["a", "b", "c"], "max_tokens": 1})");
  ASSERT_EQ(tooMany->status, 400);
  EXPECT_EQ(json::parse(tooMany->body)["error"]["message"],
            "field 'prompt' holds 3 prompts but the server admits at most 2 requests at once "
            "(--max-batch plus --max-waiting); send at most 2 prompts per request");
  f.slowSteps(std::chrono::milliseconds(5));
  std::thread slow([&] {
    auto res =
        f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 60, "ignore_eos": true})");
    EXPECT_EQ(res->status, 200);
  });
  for (int i = 0; i < 200 && f.model.engine().metrics().numRunning == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto full = f.post("/v1/completions", R"({"prompt": ["a", "b"], "max_tokens": 1})");
  EXPECT_EQ(full->status, 503);
  EXPECT_EQ(full->get_header_value("Retry-After"), "1");
  json error = json::parse(full->body)["error"];
  EXPECT_EQ(error["code"], "queue_full");
  EXPECT_EQ(error["message"], "this request's 2 prompts count as 2 requests and the server has 1 "
                              "in flight; its limit is 2 (--max-batch plus --max-waiting); retry "
                              "later");
  slow.join();
  EXPECT_EQ(f.post("/v1/completions", R"({"prompt": ["a", "b"], "max_tokens": 1})")->status, 200);
}

TEST(OpenAiRoutesTest, StreamDisconnectCancelsEveryChoice) {
  ServerFixture f;
  f.slowSteps(std::chrono::milliseconds(2));
  postThenHangUp(f.port, "/v1/completions", R"({"prompt": ["abc", "de", "fgh"], "n": 2,
      "max_tokens": 120, "ignore_eos": true, "stream": true})",
                 600);
  EXPECT_TRUE(engineIdle(f.model));
  EXPECT_EQ(f.model.engine().metrics().requestsAborted, 3u); // three engine requests, n=2 each
  std::string metrics = f.client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("kiln:requests_cancelled_total{model_name=\"fake-model\"} 3\n"),
            std::string::npos)
      << metrics;
}

} // namespace
} // namespace kiln::rt::serve
