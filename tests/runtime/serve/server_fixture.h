// An HttpServer over a FakeServeModel on a loopback port, plus what the server tests share:
// a strict SSE reader, an engine-idle wait, and a raw client that hangs up mid-response.
#pragma once

#include "runtime/serve/http_server.h"
#include "runtime/serve/sse.h"
#include "tests/runtime/serve/fake_serve_model.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace kiln::rt::serve::testing {

class ServerFixture {
public:
  explicit ServerFixture(HttpServerConfig config = {}, FakeModelOptions options = {},
                         bool setModel = true)
      : model(options), server(config) {
    port = server.bind().value();
    thread = std::thread([this] { EXPECT_TRUE(server.serve().isOk()); });
    if (setModel)
      server.setModel(&model);
  }
  ~ServerFixture() {
    server.drain();
    thread.join();
  }
  httplib::Client client() {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20, 0);
    return c;
  }
  httplib::Result post(const std::string &path, const std::string &body,
                       httplib::Headers headers = {}) {
    return client().Post(path.c_str(), headers, body, "application/json");
  }
  // Every engine step sleeps this long first (slows generation down for timing-dependent tests).
  void slowSteps(std::chrono::milliseconds perStep) {
    model.runner().setFailureHook([perStep](const StepBatch &) {
      std::this_thread::sleep_for(perStep);
      return okStatus();
    });
  }

  FakeServeModel model;
  HttpServer server;
  int port = 0;
  std::thread thread;
};

// The JSON payloads of an SSE body; with `expectDone`, checks it ends with exactly one [DONE].
inline std::vector<nlohmann::json> sseJson(const std::string &body, bool expectDone = true) {
  std::vector<std::string> events;
  std::string error;
  EXPECT_TRUE(parseSseEvents(body, events, error)) << error << "\n" << body;
  std::vector<nlohmann::json> out;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i] == "[DONE]") {
      EXPECT_EQ(i + 1, events.size()) << "[DONE] must come last";
      continue;
    }
    out.push_back(nlohmann::json::parse(events[i]));
  }
  if (expectDone)
    EXPECT_EQ(events.empty() ? "" : events.back(), "[DONE]");
  return out;
}

// Polls until the engine holds no request and no KV block (or `seconds` pass).
inline bool engineIdle(FakeServeModel &model, int seconds = 5) {
  for (int i = 0; i < seconds * 100; ++i) {
    MetricsSnapshot m = model.engine().metrics();
    if (m.numRunning == 0 && m.numWaiting == 0 && m.kvBlocksUsed == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A raw client: sends a POST to `path`, reads until `bytes` arrived (or, with bytes == 0, waits
// `wait` without reading), then hangs up.
inline void postThenHangUp(int port, const std::string &path, const std::string &body, size_t bytes,
                           std::chrono::milliseconds wait = {}) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
  std::string request = "POST " + path +
                        " HTTP/1.1\r\nHost: x\r\nContent-Type: "
                        "application/json\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string got;
  char buffer[512];
  while (got.size() < bytes) {
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    ASSERT_GT(n, 0);
    got.append(buffer, static_cast<size_t>(n));
  }
  std::this_thread::sleep_for(wait);
  ::close(fd);
}

} // namespace kiln::rt::serve::testing
