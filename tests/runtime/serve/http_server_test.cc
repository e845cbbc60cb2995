// The HTTP server over a FakeRunner engine, through real sockets: routes, streaming framing,
// limits (413, 503 + Retry-After, prompt too long), auth, disconnect -> cancel, drain, and slow
// or hostile clients (408 deadlines, 431, 405, drain closing idle and slow connections).
#include "runtime/serve/generation.h"
#include "runtime/serve/http_server.h"
#include "runtime/serve/json_text.h"
#include "runtime/serve/sse.h"
#include "tests/runtime/serve/raw_client.h"
#include "tests/runtime/serve/server_fixture.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

namespace kiln::rt::serve {
namespace {

using nlohmann::json;
using testing::Dripper;
using testing::engineIdle;
using testing::FakeModelOptions;
using testing::FakeServeModel;
using testing::kDrippedHeaders;
using testing::kFailureGuard;
using testing::kPing;
using testing::postThenHangUp;
using testing::RawClient;
using testing::ServerFixture;
using testing::sseJson;

// Holds the fake engine's steps from the (holdAfter + 1)-th on until release() or destruction:
// a test that needs a request in flight waits for held() instead of a time window. Declare it
// after the ServerFixture, so it releases before the server and engine shut down.
class HeldSteps {
public:
  HeldSteps(FakeServeModel &model, int holdAfter) : gate_(std::make_shared<Gate>()) {
    gate_->holdAfter = holdAfter;
    model.runner().setFailureHook([gate = gate_](const StepBatch &) {
      std::unique_lock<std::mutex> lock(gate->mutex);
      if (++gate->steps > gate->holdAfter && !gate->released) {
        gate->held = true;
        gate->changed.notify_all();
        gate->changed.wait(lock, [&] { return gate->released; });
      }
      return okStatus();
    });
  }
  ~HeldSteps() { release(); }
  // True once a step is held (false after the failure guard).
  bool waitHeld() {
    std::unique_lock<std::mutex> lock(gate_->mutex);
    return gate_->changed.wait_for(lock, kFailureGuard, [&] { return gate_->held; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(gate_->mutex);
    gate_->released = true;
    gate_->changed.notify_all();
  }

private:
  struct Gate {
    std::mutex mutex;
    std::condition_variable changed;
    int holdAfter = 0, steps = 0;
    bool held = false, released = false;
  };
  std::shared_ptr<Gate> gate_;
};

// Polls /metrics until it shows `sample` (a whole line), within the failure guard.
bool waitForMetric(ServerFixture &f, const std::string &sample) {
  auto end = std::chrono::steady_clock::now() + kFailureGuard;
  while (std::chrono::steady_clock::now() < end) {
    auto res = f.client().Get("/metrics");
    if (res && res->body.find("\n" + sample + "\n") != std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(HttpServerTest, PingIs503UntilTheModelIsSet) {
  ServerFixture f({}, {}, /*setModel=*/false);
  EXPECT_EQ(f.client().Get("/ping")->status, 503);
  auto gen = f.post("/v1/completions", R"({"prompt": "hi"})");
  EXPECT_EQ(gen->status, 503);
  EXPECT_NE(gen->body.find("loading"), std::string::npos);
  f.server.setModel(&f.model);
  EXPECT_EQ(f.client().Get("/ping")->status, 200);
  EXPECT_EQ(f.client().Get("/health")->status, 200);
}

TEST(HttpServerTest, CompletionUsageIdsAndText) {
  ServerFixture f;
  auto res = f.post("/v1/completions", R"({"prompt": "hello", "max_tokens": 7, "temperature": 0,
      "ignore_eos": true, "return_token_ids": true})");
  ASSERT_EQ(res->status, 200) << res->body;
  json body = json::parse(res->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 7);
  EXPECT_EQ(body["usage"]["total_tokens"], 12);
  EXPECT_EQ(body["prompt_token_ids"], json({104, 101, 108, 108, 111}));
  const json &choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  ASSERT_EQ(choice["token_ids"].size(), 7u);
  std::string expected;
  for (int id : choice["token_ids"])
    if (id < 256)
      expected += static_cast<char>(id);
  // The fake detokenizer maps ids to bytes; the server sends invalid UTF-8 as U+FFFD.
  EXPECT_EQ(choice["text"], sanitizeUtf8(expected));
  // Greedy is deterministic: the same request gives the same ids.
  auto again = f.post("/v1/completions", R"({"prompt": "hello", "max_tokens": 7, "temperature": 0,
      "ignore_eos": true, "return_token_ids": true})");
  EXPECT_EQ(json::parse(again->body)["choices"][0]["token_ids"], choice["token_ids"]);
}

TEST(HttpServerTest, StreamEqualsNonStreamAndEndsWithUsageAndDone) {
  ServerFixture f;
  std::string request = R"({"prompt": [1, 2, 3], "max_tokens": 12, "seed": 5, "n": 2,
      "ignore_eos": true, "return_token_ids": true, "logprobs": 2)";
  auto whole = f.post("/v1/completions", request + "}");
  ASSERT_EQ(whole->status, 200) << whole->body;
  json wholeBody = json::parse(whole->body);
  auto streamed = f.post("/v1/completions",
                         request + R"(, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  std::vector<json> chunks = sseJson(streamed->body);
  ASSERT_FALSE(chunks.empty());
  std::vector<json> ids(2, json::array());
  std::vector<std::string> finish(2);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    const json &choice = chunks[i]["choices"][0];
    int index = choice["index"];
    for (const json &id : choice["token_ids"])
      ids[index].push_back(id);
    EXPECT_EQ(choice["logprobs"]["tokens"].size(), choice["token_ids"].size());
    if (!choice["finish_reason"].is_null())
      finish[index] = choice["finish_reason"];
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ids[i], wholeBody["choices"][i]["token_ids"]) << "sample " << i;
    EXPECT_EQ(finish[i], "length");
  }
  EXPECT_EQ(chunks.back()["choices"].size(), 0u);
  EXPECT_EQ(chunks.back()["usage"], wholeBody["usage"]);
  EXPECT_EQ(wholeBody["usage"]["completion_tokens"], 24);
}

TEST(HttpServerTest, ChatStreamStartsWithTheRole) {
  ServerFixture f;
  auto res = f.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
      "max_tokens": 4, "temperature": 0, "ignore_eos": true, "stream": true})");
  ASSERT_EQ(res->status, 200);
  std::vector<json> chunks = sseJson(res->body);
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");
  auto whole = f.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
      "max_tokens": 4, "temperature": 0, "ignore_eos": true})");
  json body = json::parse(whole->body);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3); // "hi\n"
}

TEST(HttpServerTest, TgiGenerateAndStream) {
  ServerFixture f;
  auto whole = f.post("/generate", R"({"inputs": "abc", "parameters": {"max_new_tokens": 6,
      "details": true, "ignore_eos": true}})");
  ASSERT_EQ(whole->status, 200) << whole->body;
  json body = json::parse(whole->body);
  EXPECT_EQ(body["details"]["finish_reason"], "length");
  EXPECT_EQ(body["details"]["generated_tokens"], 6);
  ASSERT_EQ(body["details"]["tokens"].size(), 6u);
  auto stream = f.post("/generate_stream", R"({"inputs": "abc", "parameters": {"max_new_tokens": 6,
      "ignore_eos": true}})");
  ASSERT_EQ(stream->status, 200);
  std::vector<json> events = sseJson(stream->body, /*expectDone=*/false);
  ASSERT_EQ(events.size(), 6u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["index"], i + 1);
    EXPECT_EQ(events[i]["token"]["id"], body["details"]["tokens"][i]["id"]);
    EXPECT_EQ(events[i]["generated_text"].is_null(), i + 1 < events.size());
  }
  EXPECT_EQ(events.back()["generated_text"], body["generated_text"]);
  EXPECT_EQ(events.back()["details"]["finish_reason"], "length");
}

TEST(HttpServerTest, InvocationsStreamJsonLines) {
  ServerFixture f;
  auto res = f.post("/invocations", R"({"inputs": "abc", "stream": true,
      "parameters": {"max_new_tokens": 5, "ignore_eos": true}})");
  ASSERT_EQ(res->status, 200);
  std::vector<std::string> lines;
  std::string error;
  ASSERT_TRUE(parseJsonLines(res->body, lines, error)) << error;
  ASSERT_EQ(lines.size(), 5u);
  for (size_t i = 0; i < lines.size(); ++i) {
    json line = json::parse(lines[i]);
    EXPECT_TRUE(line["token"].contains("id"));
    EXPECT_TRUE(line["token"].contains("log_prob"));
    EXPECT_EQ(line.contains("generated_text"), i + 1 == lines.size());
  }
  auto chat = f.post("/invocations", R"({"messages": [{"role": "user", "content": "x"}],
      "max_tokens": 3, "ignore_eos": true})");
  ASSERT_EQ(chat->status, 200);
  EXPECT_EQ(json::parse(chat->body)["object"], "chat.completion");
}

// Both routes that take chat bodies hand the template the client's tools and
// chat_template_kwargs with their keys in the client's order (the fake template prints them).
TEST(HttpServerTest, ChatTemplateVariablesKeepTheClientsKeyOrder) {
  ServerFixture f;
  const std::string extra = R"({"zone":1,"alpha":2,"tools":[{"type":"function","function":)"
                            R"({"name":"f","parameters":{"type":"object"}}}]})";
  const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
      "return_token_ids": true, "chat_template_kwargs": {"zone": 1, "alpha": 2}, "tools": [
      {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})";
  for (const char *route : {"/v1/chat/completions", "/invocations"}) {
    auto res = f.post(route, body);
    ASSERT_EQ(res->status, 200) << route << ": " << res->body;
    json answer = json::parse(res->body);
    std::string prompt;
    for (int id : answer["prompt_token_ids"])
      prompt += static_cast<char>(id);
    EXPECT_EQ(prompt, "x\n" + extra) << route;
  }
}

TEST(HttpServerTest, ApiKeyGuardsEverythingButHealth) {
  HttpServerConfig config;
  config.apiKey = "sk-test";
  ServerFixture f(config);
  EXPECT_EQ(f.client().Get("/ping")->status, 200);
  EXPECT_EQ(f.client().Get("/health")->status, 200);
  auto denied = f.post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})");
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(json::parse(denied->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(f.client().Get("/v1/models")->status, 401);
  EXPECT_EQ(f.post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})",
                   {{"Authorization", "Bearer wrong"}})
                ->status,
            401);
  EXPECT_EQ(f.post("/v1/completions", R"({"prompt": "a", "max_tokens": 1})",
                   {{"Authorization", "Bearer sk-test"}})
                ->status,
            200);
}

TEST(HttpServerTest, LimitsAnswerWithClearErrors) {
  HttpServerConfig config;
  config.maxBodyBytes = 1000;
  ServerFixture f(config);
  auto big = f.post("/v1/completions", R"({"prompt": ")" + std::string(2000, 'a') + R"("})");
  EXPECT_EQ(big->status, 413);
  EXPECT_NE(big->body.find("size limit"), std::string::npos);
  auto longPrompt = f.post("/v1/completions", R"({"prompt": ")" + std::string(200, 'a') + R"("})");
  ASSERT_EQ(longPrompt->status, 400);
  json error = json::parse(longPrompt->body)["error"];
  EXPECT_EQ(error["param"], "prompt");
  EXPECT_NE(error["message"].get<std::string>().find("200 tokens"), std::string::npos);
  EXPECT_NE(error["message"].get<std::string>().find("128"), std::string::npos);
  auto tooMany = f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 126})");
  ASSERT_EQ(tooMany->status, 400);
  EXPECT_EQ(json::parse(tooMany->body)["error"]["param"], "max_tokens");
  auto wrongModel = f.post("/v1/completions", R"({"prompt": "abc", "model": "gpt-4"})");
  EXPECT_EQ(wrongModel->status, 404);
  auto tgiBad = f.post("/generate", R"({"inputs": 5})");
  ASSERT_EQ(tgiBad->status, 400);
  EXPECT_EQ(json::parse(tgiBad->body)["error_type"], "validation");
  EXPECT_EQ(f.client().Get("/nope")->status, 404);
  // The server still answers a normal request afterwards.
  EXPECT_EQ(f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2})")->status, 200);
}

// A model without a chat template: chat is the client's to fix (400 naming --chat-template, as
// vLLM answers), not a 500 the openai client would retry.
TEST(HttpServerTest, ChatWithoutATemplateIs400NamingTheFlag) {
  FakeModelOptions options;
  options.hasChatTemplate = false;
  ServerFixture f({}, options);
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}]})";
  auto res = f.post("/v1/chat/completions", chat);
  ASSERT_EQ(res->status, 400);
  EXPECT_EQ(json::parse(res->body),
            json::parse(R"({"error": {"message": "this model has no chat template; start kiln )"
                        R"(serve with --chat-template FILE", "type": "invalid_request_error",)"
                        R"( "param": "messages", "code": null}})"));
  auto invocations = f.post("/invocations", chat);
  ASSERT_EQ(invocations->status, 400);
  EXPECT_EQ(json::parse(invocations->body)["error"]["message"], kNoChatTemplateMessage);
  // Completions do not need the template.
  EXPECT_EQ(f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2})")->status, 200);
}

// `n` runs side by side in the batch, so the max batch bounds it; the error names `n` and the
// limit.
TEST(HttpServerTest, SamplesAboveTheMaxBatchAre400NamingN) {
  ServerFixture f; // max batch 8
  auto res = f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2, "n": 9})");
  ASSERT_EQ(res->status, 400);
  json error = json::parse(res->body)["error"];
  EXPECT_EQ(error["param"], "n");
  EXPECT_EQ(error["message"], "field 'n' is 9; this server runs at most 8 samples per request "
                              "(its max batch: kiln serve --max-batch, kiln compile --max-batch)");
  EXPECT_EQ(f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2, "n": 8})")->status,
            200);
}

TEST(HttpServerTest, ModelsRetrieveServesTheModelAnd404sOthers) {
  ServerFixture f;
  auto res = f.client().Get("/v1/models/fake-model");
  ASSERT_EQ(res->status, 200) << res->body;
  json model = json::parse(res->body);
  EXPECT_EQ(model["id"], "fake-model");
  EXPECT_EQ(model["object"], "model");
  EXPECT_EQ(model["owned_by"], "kiln");
  EXPECT_EQ(model["max_model_len"], 128);
  json listed = json::parse(f.client().Get("/v1/models")->body)["data"][0];
  listed.erase("created");
  model.erase("created");
  EXPECT_EQ(model, listed);
  for (const char *other : {"/v1/models/gpt-4", "/v1/models/org/fake-model"}) {
    auto missing = f.client().Get(other);
    ASSERT_EQ(missing->status, 404) << other;
    json error = json::parse(missing->body)["error"];
    EXPECT_EQ(error["code"], "model_not_found");
    EXPECT_EQ(error["param"], "model");
    EXPECT_EQ(error["type"], "NotFoundError");
    std::string id = std::string(other).substr(11);
    EXPECT_EQ(error["message"],
              "the model '" + id + "' does not exist; this server serves 'fake-model'");
  }
}

// No response carries internal text: httplib's EXCEPTION_WHAT header never appears.
void expectNoInternalText(const httplib::Result &res) {
  ASSERT_TRUE(res);
  EXPECT_FALSE(res->has_header("EXCEPTION_WHAT"));
  for (const auto &[name, value] : res->headers)
    EXPECT_EQ(value.find("json.exception"), std::string::npos) << name << ": " << value;
  EXPECT_EQ(res->body.find("json.exception"), std::string::npos) << res->body;
  EXPECT_EQ(res->body.find(testing::kThrownText), std::string::npos) << res->body;
}

TEST(HttpServerTest, NumbersThatOverflowADoubleAre400NamingTheField) {
  ServerFixture f;
  struct Case {
    const char *path, *body, *param;
  };
  const Case cases[] = {
      {"/v1/completions", R"({"prompt": "abc", "unknown": 1e309})", "unknown"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}],
          "temperature": 1e309})", "temperature"},
      {"/invocations", R"({"inputs": "abc", "parameters": {"top_p": -1e999}})",
       "parameters.top_p"},
  };
  for (const Case &c : cases) {
    auto res = f.post(c.path, c.body);
    expectNoInternalText(res);
    ASSERT_EQ(res->status, 400) << c.path << " " << res->body;
    json body = json::parse(res->body);
    std::string message = "field '" + std::string(c.param) +
                          "' holds a number out of range (JSON numbers must fit a double)";
    if (body["error"].is_object()) {
      EXPECT_EQ(body["error"]["param"], c.param);
      EXPECT_EQ(body["error"]["message"], message);
    } else {
      EXPECT_EQ(body["error"], message);
      EXPECT_EQ(body["error_type"], "validation");
    }
  }
}

// A handler that throws answers a generic 500 in the route's shape; the exception's text goes to
// the server's log only.
TEST(HttpServerTest, AHandlerThatThrowsAnswersAGeneric500) {
  auto lines = std::make_shared<std::vector<std::string>>();
  auto mutex = std::make_shared<std::mutex>();
  HttpServerConfig config;
  config.log = [lines, mutex](const std::string &line) {
    std::lock_guard<std::mutex> lock(*mutex);
    lines->push_back(line);
  };
  ServerFixture f(config);
  const std::string prompt = testing::kThrowingPrompt;
  auto openAi = f.post("/v1/completions", R"({"prompt": ")" + prompt + R"("})");
  expectNoInternalText(openAi);
  ASSERT_EQ(openAi->status, 500);
  EXPECT_EQ(openAi->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(json::parse(openAi->body),
            json::parse(R"({"error": {"message": "internal server error; the server log has the )"
                        R"(details", "type": "internal_server_error", "param": null,)"
                        R"( "code": null}})"));
  auto tgi = f.post("/generate", R"({"inputs": ")" + prompt + R"("})");
  expectNoInternalText(tgi);
  ASSERT_EQ(tgi->status, 500);
  EXPECT_EQ(json::parse(tgi->body),
            json({{"error", "internal server error; the server log has the details"},
                  {"error_type", "generation"}}));
  {
    std::lock_guard<std::mutex> lock(*mutex);
    ASSERT_EQ(lines->size(), 2u);
    EXPECT_EQ((*lines)[0], "internal error answering POST /v1/completions: " +
                               std::string(testing::kThrownText));
  }
  EXPECT_EQ(f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2})")->status, 200);
}

// The engine holds after 20 steps (plenty of stream for the client's 600 bytes) until the
// server has seen the hang-up and cancelled, so the cancel cannot lose a race with the last token.
TEST(HttpServerTest, ClientDisconnectCancelsAndFreesBlocks) {
  ServerFixture f;
  HeldSteps held(f.model, 20);
  postThenHangUp(f.port, "/v1/completions", R"({"prompt": "abc", "max_tokens": 120,
      "ignore_eos": true, "stream": true})",
                 600);
  EXPECT_TRUE(waitForMetric(f, R"(kiln:requests_cancelled_total{model_name="fake-model"} 1)"));
  held.release();
  EXPECT_TRUE(engineIdle(f.model, 30));
  EXPECT_EQ(f.model.engine().metrics().requestsAborted, 1u);
}

// The first request holds the only admission slot (its engine step is held) while the second
// arrives.
TEST(HttpServerTest, QueueFullIs503WithRetryAfter) {
  HttpServerConfig config;
  config.maxWaiting = 0;
  FakeModelOptions options;
  options.maxBatch = 1;
  ServerFixture f(config, options);
  HeldSteps held(f.model, 0);
  std::thread slow([&] {
    auto res =
        f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 60, "ignore_eos": true})");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  });
  EXPECT_TRUE(held.waitHeld());
  auto rejected = f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2})");
  held.release();
  slow.join();
  ASSERT_TRUE(rejected);
  EXPECT_EQ(rejected->status, 503);
  EXPECT_EQ(rejected->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(rejected->body)["error"]["code"], "queue_full");
  EXPECT_EQ(f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2})")->status, 200);
}

// Drain begins while the stream's engine steps are held; the stream then finishes with exactly
// the tokens the same greedy request gets undisturbed.
TEST(HttpServerTest, DrainFinishesStreamsInFlightAndRefusesNewConnections) {
  auto f = std::make_unique<ServerFixture>();
  const std::string request = R"({"prompt": "abc", "max_tokens": 80, "temperature": 0,
      "ignore_eos": true, "return_token_ids": true)";
  auto undisturbed = f->post("/v1/completions", request + "}");
  ASSERT_EQ(undisturbed->status, 200) << undisturbed->body;
  json expected = json::parse(undisturbed->body)["choices"][0]["token_ids"];
  ASSERT_EQ(expected.size(), 80u);
  auto held = std::make_unique<HeldSteps>(f->model, 5);
  std::string body;
  std::thread streaming([&] {
    auto res = f->post("/v1/completions", request + R"(, "stream": true})");
    ASSERT_TRUE(res);
    body = res->body;
  });
  EXPECT_TRUE(held->waitHeld());
  f->server.drain();
  EXPECT_TRUE(f->server.draining());
  auto refused = f->client().Get("/ping");
  EXPECT_FALSE(refused); // connection refused: no longer accepting
  held->release();
  streaming.join();
  std::vector<json> chunks = sseJson(body);
  ASSERT_FALSE(chunks.empty());
  json streamed = json::array();
  for (const json &c : chunks)
    for (const json &id : c["choices"][0]["token_ids"])
      streamed.push_back(id);
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");
  held.reset();
  f.reset(); // serve() returns and joins
}

// --- Slow and hostile clients -------------------------------------------------------------

HttpServerConfig shortDeadlines() {
  HttpServerConfig config;
  config.headerTimeout = std::chrono::milliseconds(200);
  config.bodyTimeout = std::chrono::milliseconds(200);
  return config;
}

std::string errorMessage(const std::string &response) {
  return json::parse(response.substr(response.find("\r\n\r\n") + 4))["error"]["message"]
      .get<std::string>();
}

// A drip resets httplib's per-recv timeout; the whole-request deadlines do not reset. Dripped
// from the request line (kiln answers: httplib has no request yet), also as the second request
// of a keep-alive connection (whose first response must not stop kiln answering), inside the
// headers and inside the body (httplib answers, its 400 turned into 408).
TEST(HttpServerTest, DrippingClientsGet408AndTheConnectionCloses) {
  ServerFixture f(shortDeadlines());
  struct Case {
    std::string preamble, start, message;
  };
  const std::string lineMessage =
      "the request line and headers did not arrive within 200 ms; the connection is closed";
  const Case cases[] = {
      {"", "GET /", lineMessage},
      {kPing, "GET /", lineMessage},
      {"", kDrippedHeaders, lineMessage},
      {"", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
       "the request body did not arrive within 200 ms of the headers; the connection is closed"},
  };
  for (const Case &c : cases) {
    Dripper dripper(f.port, c.preamble, c.start);
    bool closed = false;
    std::string answer = dripper.answer(closed);
    EXPECT_TRUE(closed) << c.start;
    ASSERT_EQ(answer.rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u)
        << c.preamble << c.start << answer;
    EXPECT_NE(answer.find("Connection: close\r\n"), std::string::npos) << answer;
    EXPECT_EQ(answer.find("Keep-Alive"), std::string::npos) << answer;
    EXPECT_EQ(errorMessage(answer), c.message);
  }
  EXPECT_TRUE(
      waitForMetric(f, R"(kiln:http_responses_total{model_name="fake-model",status="408"} 4)"));
  EXPECT_EQ(f.client().Get("/ping")->status, 200);
}

TEST(HttpServerTest, HeadersOverTheCapGet431) {
  HttpServerConfig config;
  config.maxHeaderBytes = 4096;
  ServerFixture f(config);
  std::string manyHeaders = "GET /ping HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 8; ++i)
    manyHeaders += "X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'f') + "\r\n";
  // One line over httplib's per-line limit (8192), under the total cap of a second server.
  std::string longLine = "GET /ping HTTP/1.1\r\nHost: x\r\nX-Long: " + std::string(9000, 'l') +
                         "\r\n\r\n";
  HttpServerConfig roomy;
  roomy.maxHeaderBytes = 64u << 10;
  ServerFixture g(roomy);
  for (auto [port, request] :
       {std::pair{f.port, manyHeaders + "\r\n"}, std::pair{g.port, longLine}}) {
    RawClient client(port);
    ASSERT_TRUE(client.send(request));
    bool closed = false;
    std::string answer = client.readToClose(closed);
    EXPECT_TRUE(closed);
    ASSERT_EQ(answer.rfind("HTTP/1.1 431 Request Header Fields Too Large\r\n", 0), 0u) << answer;
  }
  EXPECT_EQ(f.client().Get("/ping")->status, 200); // headers under the cap are fine
}

TEST(HttpServerTest, AWrongMethodOnAKnownRouteIs405WithAllow) {
  ServerFixture f;
  auto chatGet = f.client().Get("/v1/chat/completions");
  ASSERT_EQ(chatGet->status, 405);
  EXPECT_EQ(chatGet->get_header_value("Allow"), "POST");
  EXPECT_EQ(json::parse(chatGet->body)["error"]["message"],
            "/v1/chat/completions does not take GET; it takes POST");
  auto pingDelete = f.client().Delete("/ping");
  ASSERT_EQ(pingDelete->status, 405);
  EXPECT_EQ(pingDelete->get_header_value("Allow"), "GET, HEAD");
  auto modelPost = f.post("/v1/models/fake-model", "{}");
  ASSERT_EQ(modelPost->status, 405);
  EXPECT_EQ(modelPost->get_header_value("Allow"), "GET, HEAD");
  EXPECT_EQ(f.client().Get("/nope")->status, 404); // unknown paths stay 404
}

// A client that hangs up halfway through its request (headers, then body) is answered nothing,
// so nothing is counted: httplib used to "answer" it 400, and /metrics showed a bad request for
// every client that went away. One HTTP thread serves the connections in order, so once the 404
// after them is answered the server is done with both.
TEST(HttpServerTest, AClientThatHangsUpMidRequestIsNotCountedAsA400) {
  HttpServerConfig config;
  config.httpThreads = 1;
  ServerFixture f(config);
  for (const std::string partial :
       {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Half: ",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro"}) {
    RawClient client(f.port); // closed at the end of the iteration
    ASSERT_TRUE(client.send(partial));
  }
  RawClient after(f.port);
  ASSERT_TRUE(after.send("GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(after.readResponse().rfind("HTTP/1.1 404 ", 0), 0u);
  auto metrics = f.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(
      metrics->body.find(R"(kiln:http_responses_total{model_name="fake-model",status="404"} 1)"),
      std::string::npos)
      << metrics->body;
  EXPECT_EQ(metrics->body.find(R"(status="400")"), std::string::npos) << metrics->body;
}

// drain() closes a keep-alive connection waiting for its next request and one dripping its
// headers (deadlines far away), so serve() returns: a slow client cannot hold SIGTERM.
TEST(HttpServerTest, DrainClosesIdleAndDrippingConnections) {
  HttpServerConfig config;
  config.headerTimeout = std::chrono::hours(1);
  FakeServeModel model;
  HttpServer server(config);
  int port = server.bind().value();
  std::promise<Status> served;
  std::future<Status> done = served.get_future();
  std::thread serving([&] { served.set_value(server.serve()); });
  server.setModel(&model);
  auto idle = std::make_unique<RawClient>(port);
  ASSERT_TRUE(idle->send(kPing));
  EXPECT_NE(idle->readResponse().find("HTTP/1.1 200 "), std::string::npos);
  // The preamble proves a server thread serves the dripping connection before the drain.
  auto dripper = std::make_unique<Dripper>(port, kPing, kDrippedHeaders);
  server.drain();
  bool exited = done.wait_for(kFailureGuard) == std::future_status::ready;
  bool idleClosed = false, drippingClosed = false;
  if (exited) {
    EXPECT_EQ(idle->readToClose(idleClosed), "");
    EXPECT_EQ(dripper->answer(drippingClosed), "");
  }
  dripper.reset(); // without the fix, closing the clients is what ends serve()
  idle.reset();
  serving.join();
  ASSERT_TRUE(exited) << "serve() still running 30 s after drain()";
  EXPECT_TRUE(done.get().isOk());
  EXPECT_TRUE(idleClosed);
  EXPECT_TRUE(drippingClosed);
}

// Dripping clients on every HTTP thread: the header deadline frees them, so /ping (queued behind
// them) is answered.
TEST(HttpServerTest, PingAnswersWhileDrippingClientsHoldEveryThread) {
  HttpServerConfig config = shortDeadlines();
  config.httpThreads = 2;
  ServerFixture f(config);
  std::vector<std::unique_ptr<Dripper>> drippers;
  for (int i = 0; i < config.httpThreads; ++i)
    drippers.push_back(std::make_unique<Dripper>(f.port, kPing, kDrippedHeaders));
  httplib::Client client("127.0.0.1", f.port);
  client.set_read_timeout(kFailureGuard.count(), 0);
  auto ping = client.Get("/ping");
  ASSERT_TRUE(ping);
  EXPECT_EQ(ping->status, 200);
  for (auto &dripper : drippers) {
    bool closed = false;
    EXPECT_EQ(dripper->answer(closed).rfind("HTTP/1.1 408 ", 0), 0u);
    EXPECT_TRUE(closed);
  }
}

} // namespace
} // namespace kiln::rt::serve
