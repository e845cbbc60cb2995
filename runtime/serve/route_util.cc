#include "runtime/serve/json_fields.h"
#include "runtime/serve/json_text.h"
#include "runtime/serve/routes.h"

namespace kiln::rt::serve {

void sendJson(httplib::Response &res, const nlohmann::json &body) {
  res.set_content(dumpJson(body), "application/json");
}

void sendError(httplib::Response &res, const ApiError &error, ErrorStyle style) {
  res.status = error.httpStatus;
  if (error.httpStatus == 503)
    res.set_header("Retry-After", "1");
  res.set_content(style == ErrorStyle::kTgi ? tgiErrorBody(error) : openAiErrorBody(error),
                  "application/json");
}

ServeModel *modelOrError(RouteContext &ctx, httplib::Response &res, ErrorStyle style) {
  if (ctx.draining.load()) {
    sendError(res, serverShuttingDown(), style);
    return nullptr;
  }
  ServeModel *model = ctx.model.load();
  if (!model)
    sendError(res,
              serviceUnavailable("the model is still loading; retry when GET /ping answers 200"),
              style);
  return model;
}

std::optional<ApiError> bodyOverLimit(const RouteContext &ctx, const httplib::Request &req) {
  if (req.body.size() <= ctx.maxBodyBytes)
    return std::nullopt;
  ApiError error = badRequest("", "the request body has " + std::to_string(req.body.size()) +
                                      " bytes; the limit is " + std::to_string(ctx.maxBodyBytes) +
                                      " (--max-body-bytes)");
  error.httpStatus = 413;
  return error;
}

bool readJsonBody(RouteContext &ctx, const httplib::Request &req, httplib::Response &res,
                  ErrorStyle style, nlohmann::json &body) {
  if (auto error = bodyOverLimit(ctx, req)) {
    sendError(res, *error, style);
    return false;
  }
  if (auto error = parseJsonObject(req.body, body)) {
    sendError(res, *error, style);
    return false;
  }
  return true;
}

namespace {

ApiError queueFull(const Admission &admission, size_t prompts) {
  std::string limit = std::to_string(admission.limit());
  ApiError error = serviceUnavailable(
      prompts == 1
          ? "the server has " + limit +
                " requests in flight, its limit (--max-batch plus --max-waiting); retry later"
          : "this request's " + std::to_string(prompts) + " prompts count as " +
                std::to_string(prompts) + " requests and the server has " +
                std::to_string(admission.inFlight()) + " in flight; its limit is " + limit +
                " (--max-batch plus --max-waiting); retry later");
  error.code = "queue_full";
  return error;
}

// A batch that could never be admitted is the client's to fix, not a reason to retry.
ApiError batchOverLimit(const Admission &admission, size_t prompts) {
  std::string limit = std::to_string(admission.limit());
  return badRequest("prompt", "field 'prompt' holds " + std::to_string(prompts) +
                                  " prompts but the server admits at most " + limit +
                                  " requests at once (--max-batch plus --max-waiting); send at "
                                  "most " +
                                  limit + " prompts per request");
}

} // namespace

std::optional<Submitted> submitGeneration(RouteContext &ctx, ServeModel &model,
                                          const GenerationRequest &request,
                                          httplib::Response &res, ErrorStyle style) {
  auto start = std::chrono::steady_clock::now();
  const size_t count = request.promptCount();
  std::vector<Request> engineRequests(count);
  for (size_t p = 0; p < count; ++p) {
    if (auto error = buildEngineRequest(request, request.promptAt(p), model, engineRequests[p])) {
      sendError(res, *error, style);
      return std::nullopt;
    }
  }
  if (count > 1 && static_cast<int64_t>(count) > ctx.admission->limit()) {
    sendError(res, batchOverLimit(*ctx.admission, count), style);
    return std::nullopt;
  }
  std::optional<Admission::Ticket> ticket = ctx.admission->tryEnter(static_cast<int64_t>(count));
  if (!ticket) {
    sendError(res, queueFull(*ctx.admission, count), style);
    return std::nullopt;
  }
  Submitted out{&model.engine(), {}, std::move(*ticket), {}, start};
  for (Request &engineRequest : engineRequests) {
    std::vector<int32_t> promptIds = engineRequest.promptIds;
    Result<RequestHandle> handle = model.engine().submit(std::move(engineRequest));
    if (!handle.isOk()) {
      // Settings the engine rejects fail the first prompt, before anything ran; a later prompt
      // fails only when a shutdown began meanwhile: take back the ones already submitted.
      for (const RequestHandle &submitted : out.handles)
        (void)model.engine().cancel(submitted.id);
      sendError(res, errorFromStatus(handle.status()), style);
      return std::nullopt;
    }
    out.handles.push_back(std::move(handle).value());
    out.promptIds.push_back(std::move(promptIds));
  }
  return out;
}

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

FinishReason firstReason(const GenerationResult &result) {
  return result.samples.empty() ? FinishReason::kNone : result.samples[0].finishReason;
}

// The session over a submitted request, reporting each prompt's engine request to the metrics.
std::unique_ptr<StreamSession> makeSession(RouteContext &ctx, Submitted &submitted,
                                           std::unique_ptr<StreamFormatter> formatter, int32_t n) {
  auto session = std::make_unique<StreamSession>(*submitted.engine, std::move(submitted.handles),
                                                 std::move(formatter),
                                                 std::move(submitted.promptIds), n);
  auto start = submitted.start;
  session->setOnFinished([&ctx, start](const std::vector<GenerationResult> &results, bool) {
    double seconds = secondsSince(start);
    for (const GenerationResult &result : results) {
      // A cancelled request ends as abort even if some of its samples had already finished.
      ctx.metrics.observeRequest(result.cancelled ? FinishReason::kAbort : firstReason(result),
                                 seconds);
      ctx.metrics.countCancelled(result.cancelled ? 1 : 0);
    }
  });
  return session;
}

// What the chunked provider keeps alive for the whole response.
struct ChunkedState {
  std::shared_ptr<const GenerationRequest> request;
  // Released when the request ends, before the last bytes go out, so a client that sends its
  // next request right after reading the end finds the slot free.
  std::optional<Admission::Ticket> ticket;
  std::unique_ptr<StreamSession> session;
  std::chrono::steady_clock::time_point lastWrite = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point lastCheck = lastWrite;
};

// How often a whole answer in progress checks its connection while outputs keep arriving (the
// session checks only when none came within its poll).
constexpr std::chrono::milliseconds kLivenessInterval{100};

// Pumps the session into the sink; with `heartbeat`, writes a space when nothing was written for
// kHeartbeatInterval. Returns what httplib's chunked provider returns.
bool pumpChunked(ChunkedState &state, httplib::DataSink &sink, bool heartbeat) {
  auto write = [&sink, &state](std::string_view bytes) {
    state.lastWrite = std::chrono::steady_clock::now();
    return sink.write(bytes.data(), bytes.size());
  };
  auto alive = [&sink] { return sink.is_writable(); };
  switch (state.session->pump(write, alive, [&state] { state.ticket.reset(); })) {
  case StreamSession::Pump::kMore: {
    if (!heartbeat)
      return true;
    // httplib's is_writable peeks the socket, so a client's FIN shows here without a write. A
    // peer gone without one shows when a heartbeat write fails (the first write after it left
    // often succeeds and draws the reset; the next one fails).
    auto now = std::chrono::steady_clock::now();
    bool connected = true;
    if (now - state.lastCheck >= kLivenessInterval) {
      state.lastCheck = now;
      connected = sink.is_writable();
    }
    if (connected && (now - state.lastWrite < kHeartbeatInterval || write(" ")))
      return true;
    state.session->abandon();
    state.ticket.reset();
    return false;
  }
  case StreamSession::Pump::kDone:
    sink.done();
    return true;
  case StreamSession::Pump::kClientGone:
    state.ticket.reset();
    return false;
  }
  return false;
}

void provideChunked(httplib::Response &res, std::shared_ptr<ChunkedState> state,
                    const char *contentType, bool heartbeat) {
  res.set_chunked_content_provider(
      contentType,
      [state, heartbeat](size_t, httplib::DataSink &sink) {
        return pumpChunked(*state, sink, heartbeat);
      },
      [state](bool) {
        state->session.reset(); // cancels requests the client abandoned before their end
      });
}

// Renders the whole body once every prompt has ended, keeping the error for the status line.
class WholeBodyFormatter : public StreamFormatter {
public:
  WholeBodyFormatter(WholeAnswerFn answer, ErrorStyle style)
      : answer_(std::move(answer)), style_(style) {}
  std::string output(size_t, const RequestOutput &, const GenerationResult &) override {
    return {};
  }
  std::string end(const std::vector<GenerationResult> &results) override {
    WholeAnswer answer = answer_(results);
    error_ = answer.error;
    if (!error_)
      return dumpJson(answer.body);
    return style_ == ErrorStyle::kTgi ? tgiErrorBody(*error_) : openAiErrorBody(*error_);
  }
  const std::optional<ApiError> &error() const { return error_; }

private:
  WholeAnswerFn answer_;
  ErrorStyle style_;
  std::optional<ApiError> error_;
};

} // namespace

void startStream(RouteContext &ctx, httplib::Response &res, Submitted submitted,
                 std::shared_ptr<const GenerationRequest> request,
                 std::unique_ptr<StreamFormatter> formatter, const char *contentType) {
  int32_t n = request->sampling.n;
  auto session = makeSession(ctx, submitted, std::move(formatter), n);
  auto state = std::make_shared<ChunkedState>(
      ChunkedState{std::move(request), std::move(submitted.ticket), std::move(session)});
  res.set_header("Cache-Control", "no-cache");
  provideChunked(res, std::move(state), contentType, /*heartbeat=*/false);
}

void answerWhole(RouteContext &ctx, httplib::Response &res, Submitted submitted,
                 std::shared_ptr<const GenerationRequest> request, ErrorStyle style,
                 WholeAnswerFn answer) {
  auto formatter = std::make_unique<WholeBodyFormatter>(std::move(answer), style);
  WholeBodyFormatter *whole = formatter.get();
  auto session = makeSession(ctx, submitted, std::move(formatter), request->sampling.n);
  std::optional<Admission::Ticket> ticket(std::move(submitted.ticket));
  std::string body;
  auto collect = [&body](std::string_view bytes) {
    body.append(bytes);
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + kHeartbeatInterval;
  while (!session->done()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    session->pump(collect, [] { return true; }, nullptr,
                  std::min(left, std::chrono::milliseconds(50)));
  }
  if (session->done()) {
    if (whole->error())
      return sendError(res, *whole->error(), style);
    res.set_content(body, "application/json");
    return;
  }
  auto state = std::make_shared<ChunkedState>(
      ChunkedState{std::move(request), std::move(ticket), std::move(session)});
  provideChunked(res, std::move(state), "application/json", /*heartbeat=*/true);
}

} // namespace kiln::rt::serve
