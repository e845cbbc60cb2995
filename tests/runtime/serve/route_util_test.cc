// Non-streaming answers (answerWhole) over real sockets: a request that ends within the first
// heartbeat interval gets a plain Content-Length response; a longer one is chunked, led by
// heartbeat spaces, with the same JSON body; a client that hangs up mid-request has its request
// cancelled on every non-streaming route (/v1/completions, /v1/chat/completions, /generate,
// /invocations), which the engine and /metrics both show.
#include "tests/runtime/serve/server_fixture.h"

#include <gtest/gtest.h>

namespace kiln::rt::serve {
namespace {

using nlohmann::json;
using testing::engineIdle;
using testing::postThenHangUp;
using testing::ServerFixture;

const char *kSlowCompletion = R"({"prompt": "abc", "max_tokens": 60, "temperature": 0,
    "ignore_eos": true, "return_token_ids": true})";

TEST(RouteUtilTest, FastRequestsKeepAPlainResponse) {
  ServerFixture f;
  auto res = f.post("/v1/completions", kSlowCompletion);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Length"), std::to_string(res->body.size()));
  EXPECT_FALSE(res->has_header("Transfer-Encoding"));
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(res->body.front(), '{');
}

TEST(RouteUtilTest, SlowRequestsGetHeartbeatsThenTheSameBody) {
  ServerFixture f;
  json fast = json::parse(f.post("/v1/completions", kSlowCompletion)->body);
  f.slowSteps(std::chrono::milliseconds(40)); // 60 tokens: about 2.4 s
  auto res = f.post("/v1/completions", kSlowCompletion);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Transfer-Encoding"), "chunked");
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  size_t start = res->body.find_first_not_of(' ');
  ASSERT_NE(start, std::string::npos);
  EXPECT_GE(start, 1u) << "a request of over 2 s sends at least one heartbeat";
  EXPECT_EQ(res->body[start], '{');
  json slow = json::parse(res->body); // leading whitespace is valid JSON
  EXPECT_EQ(slow["choices"][0]["token_ids"], fast["choices"][0]["token_ids"]);
  EXPECT_EQ(slow["usage"], fast["usage"]);
  // The TGI route's body parses the same way.
  auto tgi = f.post("/generate", R"({"inputs": "abc", "parameters": {"max_new_tokens": 60,
      "ignore_eos": true}})");
  ASSERT_EQ(tgi->status, 200) << tgi->body;
  EXPECT_EQ(tgi->get_header_value("Transfer-Encoding"), "chunked");
  EXPECT_EQ(json::parse(tgi->body)["generated_text"].is_string(), true);
}

// The client sends its request and hangs up after 0.5 s without reading: its request is
// cancelled (a heartbeat write fails), long before the 120 tokens at 50 ms each would end it.
TEST(RouteUtilTest, NonStreamingClientGoneIsCancelledOnEveryRoute) {
  ServerFixture f;
  f.slowSteps(std::chrono::milliseconds(50));
  const std::pair<const char *, const char *> requests[] = {
      {"/v1/completions", R"({"prompt": "abc", "max_tokens": 120, "ignore_eos": true})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
          "max_tokens": 120, "ignore_eos": true})"},
      {"/generate", R"({"inputs": "abc", "parameters": {"max_new_tokens": 120,
          "ignore_eos": true}})"},
      {"/invocations", R"({"inputs": "abc", "parameters": {"max_new_tokens": 120,
          "ignore_eos": true}})"},
  };
  std::vector<std::thread> clients;
  for (const auto &[path, body] : requests)
    clients.emplace_back([&f, path = path, body = body] {
      postThenHangUp(f.port, path, body, 0, std::chrono::milliseconds(500));
    });
  for (std::thread &t : clients)
    t.join();
  ASSERT_TRUE(engineIdle(f.model, /*seconds=*/20));
  MetricsSnapshot m = f.model.engine().metrics();
  EXPECT_EQ(m.requestsAborted, 4u);
  EXPECT_EQ(m.requestsFinished, 0u);
  EXPECT_LT(m.generationTokens, 4u * 120u);
  std::string metrics = f.client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("kiln:requests_cancelled_total{model_name=\"fake-model\"} 4\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kiln:server_requests_in_flight{model_name=\"fake-model\"} 0\n"),
            std::string::npos);
}

// A failure within the first interval still answers with its own status, not 200.
TEST(RouteUtilTest, FastFailuresKeepTheirStatus) {
  ServerFixture f;
  f.model.runner().setFailureHook(
      [](const StepBatch &) { return internalError("injected step failure"); });
  auto res = f.post("/v1/completions", R"({"prompt": "abc", "max_tokens": 4})");
  EXPECT_EQ(res->status, 500) << res->body;
  EXPECT_NE(json::parse(res->body)["error"]["message"].get<std::string>().find("injected"),
            std::string::npos)
      << res->body;
  EXPECT_FALSE(res->has_header("Transfer-Encoding"));
}

} // namespace
} // namespace kiln::rt::serve
