// Route handlers, one function per endpoint, over what every handler shares (RouteContext).
// Internal to kiln_serve: http_server.cc registers them.
#pragma once

#include "runtime/serve/api_error.h"
#include "runtime/serve/generation.h"
#include "runtime/serve/http_server.h"
#include "runtime/serve/metrics_text.h"
#include "runtime/serve/serve_model.h"
#include "runtime/serve/sse.h"
#include "runtime/serve/stream_session.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
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
  InvocationOutput invocationOutput = InvocationOutput::kHiddenStates;
};

// Writes the error in the API's shape (503s get Retry-After).
void sendError(httplib::Response &res, const ApiError &error, ErrorStyle style);
// The loaded model, or a 503 (loading, draining) already written.
ServeModel *modelOrError(RouteContext &ctx, httplib::Response &res, ErrorStyle style);
// A 413 for a body over --max-body-bytes; nullopt when it fits.
std::optional<ApiError> bodyOverLimit(const RouteContext &ctx, const httplib::Request &req);
// Parses the JSON body (size, UTF-8, syntax, object) or writes the 4xx.
bool readJsonBody(RouteContext &ctx, const httplib::Request &req, httplib::Response &res,
                  ErrorStyle style, nlohmann::json &body);

// A request admitted and submitted to the engine: one engine request per prompt.
struct Submitted {
  Engine *engine = nullptr;
  std::vector<RequestHandle> handles;
  Admission::Ticket ticket; // one slot per prompt
  std::vector<std::vector<int32_t>> promptIds;
  std::chrono::steady_clock::time_point start;
};
// Builds every prompt's engine request (all are checked before any is submitted, so a bad prompt
// in a batch runs none), takes an admission slot per prompt (503 + Retry-After when full) and
// submits them.
std::optional<Submitted> submitGeneration(RouteContext &ctx, ServeModel &model,
                                          const GenerationRequest &request,
                                          httplib::Response &res, ErrorStyle style);
// Hands the stream to httplib's chunked provider: the session, request and admission slots live
// until the last chunk (or the client's disconnect).
void startStream(RouteContext &ctx, httplib::Response &res, Submitted submitted,
                 std::shared_ptr<const GenerationRequest> request,
                 std::unique_ptr<StreamFormatter> formatter, const char *contentType);

// A non-streaming route's answer once every prompt has ended: an error (status and body in the
// route's style) or a 200 JSON body.
struct WholeAnswer {
  std::optional<ApiError> error;
  nlohmann::json body;
};
using WholeAnswerFn = std::function<WholeAnswer(const std::vector<GenerationResult> &)>;
// How long a non-streaming request may run before its response turns into heartbeats.
inline constexpr std::chrono::milliseconds kHeartbeatInterval{1000};
// Answers a non-streaming request. One that ends within kHeartbeatInterval gets a plain response
// (Content-Length, any status). A longer one is answered chunked: 200 and Content-Type at once,
// then a space every kHeartbeatInterval while it runs (JSON allows leading whitespace), then the
// body. httplib 0.11.4 gives a handler no way to see a closed connection except a failed write,
// so the heartbeats are what notices a client that went away: its requests are then cancelled.
// An error after the first heartbeat can only be reported in the body (the status is sent).
void answerWhole(RouteContext &ctx, httplib::Response &res, Submitted submitted,
                 std::shared_ptr<const GenerationRequest> request, ErrorStyle style,
                 WholeAnswerFn answer);
void sendJson(httplib::Response &res, const nlohmann::json &body);

void handleCompletions(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
void handleChatCompletions(RouteContext &ctx, const httplib::Request &req,
                           httplib::Response &res);
void handleModels(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
// GET /v1/models/{id}: the served model's entry, or 404 model_not_found for another id.
void handleModel(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
void handleTgiGenerate(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
void handleTgiGenerateStream(RouteContext &ctx, const httplib::Request &req,
                             httplib::Response &res);
// POST /: a TGI body streamed (SSE) or not (a one-element array), as TGI's compat route.
void handleTgiCompat(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
// GET /info: TGI's Info object.
void handleTgiInfo(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
void handleInvocations(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
// POST /v1/embeddings (OpenAI) and POST /embed (TEI): an encoder's pooled vectors.
void handleEmbeddings(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
void handleTeiEmbed(RouteContext &ctx, const httplib::Request &req, httplib::Response &res);
// /invocations of an encoder: raw text or {"inputs": ...} -> hidden states or pooled vectors.
void runFeatureExtraction(RouteContext &ctx, ServeModel &model, const httplib::Request &req,
                          httplib::Response &res);

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
