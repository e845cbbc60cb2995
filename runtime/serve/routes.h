// Route handlers, one function per endpoint, over what every handler shares (RouteContext).
// Internal to kiln_serve: http_server.cc registers them.
#pragma once

#include "runtime/serve/api_error.h"
#include "runtime/serve/generation.h"
#include "runtime/serve/metrics_text.h"
#include "runtime/serve/serve_model.h"
#include "runtime/serve/sse.h"
#include "runtime/serve/stream_session.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

namespace kiln::rt::serve {

enum class ErrorStyle { kOpenAi, kTgi };

struct RouteContext {
  std::atomic<ServeModel *> model{nullptr}; // null until loaded
  std::unique_ptr<Admission> admission;
  ServerMetrics metrics;
  std::atomic<bool> draining{false};
  size_t maxBodyBytes = 0;
  int retryAfterSeconds = 1;
  Framing sageMakerStreamFormat = Framing::kJsonLines;
};

// Writes the error in the API's shape (503s get Retry-After).
void sendError(httplib::Response &res, const ApiError &error, ErrorStyle style);
// The loaded model, or a 503 (loading, draining) already written.
ServeModel *modelOrError(RouteContext &ctx, httplib::Response &res, ErrorStyle style);
// Parses the JSON body (size, UTF-8, syntax, object) or writes the 4xx.
bool readJsonBody(RouteContext &ctx, const httplib::Request &req, httplib::Response &res,
                  ErrorStyle style, nlohmann::json &body);

// A request admitted and submitted to the engine.
struct Submitted {
  Engine *engine = nullptr;
  RequestHandle handle;
  Admission::Ticket ticket;
  std::vector<int32_t> promptIds;
  std::chrono::steady_clock::time_point start;
};
// Builds the engine request, takes an admission slot (503 + Retry-After when full) and submits.
std::optional<Submitted> submitGeneration(RouteContext &ctx, ServeModel &model,
                                          const GenerationRequest &request,
                                          httplib::Response &res, ErrorStyle style);
// Blocks until the request finishes and records its metrics.
GenerationResult finishBlocking(RouteContext &ctx, Submitted &submitted, int32_t n);
// Hands the stream to httplib's chunked provider: the session, request and admission slot live
// until the last chunk (or the client's disconnect).
void startStream(RouteContext &ctx, httplib::Response &res, Submitted submitted,
                 std::shared_ptr<const GenerationRequest> request,
                 std::unique_ptr<StreamFormatter> formatter, const char *contentType);
void sendJson(httplib::Response &res, const nlohmann::json &body);

void handleCompletions(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
void handleChatCompletions(RouteContext &ctx, const httplib::Request &req,
                           httplib::Response &res);
void handleModels(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
void handleTgiGenerate(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
void handleTgiGenerateStream(RouteContext &ctx, const httplib::Request &req,
                             httplib::Response &res);
void handleInvocations(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);

// Shared by /v1/* and /invocations: run a parsed OpenAI request.
void runCompletion(RouteContext &ctx, ServeModel &model,
                   std::shared_ptr<GenerationRequest> request, httplib::Response &res,
                   Framing framing);
void runChat(RouteContext &ctx, ServeModel &model, std::shared_ptr<GenerationRequest> request,
             httplib::Response &res, Framing framing);
// Shared by /generate, /generate_stream and /invocations.
void runTgi(RouteContext &ctx, ServeModel &model, std::shared_ptr<GenerationRequest> request,
            httplib::Response &res, bool lmiJsonLines);

} // namespace kiln::rt::serve
