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
  ApiError error;
  error.httpStatus = 503;
  error.type = "service_unavailable_error";
  if (ctx.draining.load()) {
    error.message = "the server is shutting down and accepts no new requests";
    sendError(res, error, style);
    return nullptr;
  }
  ServeModel *model = ctx.model.load();
  if (!model) {
    error.message = "the model is still loading; retry when GET /ping answers 200";
    sendError(res, error, style);
  }
  return model;
}

bool readJsonBody(RouteContext &ctx, const httplib::Request &req, httplib::Response &res,
                  ErrorStyle style, nlohmann::json &body) {
  if (req.body.size() > ctx.maxBodyBytes) {
    ApiError error = badRequest("", "the request body has " + std::to_string(req.body.size()) +
                                        " bytes; the limit is " +
                                        std::to_string(ctx.maxBodyBytes) + " (--max-body-bytes)");
    error.httpStatus = 413;
    sendError(res, error, style);
    return false;
  }
  if (auto error = parseJsonObject(req.body, body)) {
    sendError(res, *error, style);
    return false;
  }
  return true;
}

std::optional<Submitted> submitGeneration(RouteContext &ctx, ServeModel &model,
                                          const GenerationRequest &request,
                                          httplib::Response &res, ErrorStyle style) {
  auto start = std::chrono::steady_clock::now();
  Request engineRequest;
  if (auto error = buildEngineRequest(request, model, engineRequest)) {
    sendError(res, *error, style);
    return std::nullopt;
  }
  std::optional<Admission::Ticket> ticket = ctx.admission->tryEnter();
  if (!ticket) {
    ApiError error;
    error.httpStatus = 503;
    error.type = "service_unavailable_error";
    error.code = "queue_full";
    error.message = "the server has " + std::to_string(ctx.admission->limit()) +
                    " requests in flight, its limit (--max-batch plus --max-waiting); retry later";
    sendError(res, error, style);
    return std::nullopt;
  }
  std::vector<int32_t> promptIds = engineRequest.promptIds;
  Result<RequestHandle> handle = model.engine().submit(std::move(engineRequest));
  if (!handle.isOk()) {
    sendError(res, errorFromStatus(handle.status()), style);
    return std::nullopt;
  }
  return Submitted{&model.engine(), std::move(handle).value(), std::move(*ticket),
                   std::move(promptIds), start};
}

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

FinishReason firstReason(const GenerationResult &result) {
  return result.samples.empty() ? FinishReason::kNone : result.samples[0].finishReason;
}

} // namespace

GenerationResult finishBlocking(RouteContext &ctx, Submitted &submitted, int32_t n) {
  GenerationResult result = collectAll(*submitted.handle.stream, submitted.promptIds, n);
  ctx.metrics.observeRequest(firstReason(result), secondsSince(submitted.start));
  return result;
}

namespace {

// What the chunked provider keeps alive for the whole stream.
struct StreamState {
  std::shared_ptr<const GenerationRequest> request;
  // Released when the request ends, before the last bytes go out, so a client that sends its
  // next request right after reading the end finds the slot free.
  std::optional<Admission::Ticket> ticket;
  std::unique_ptr<StreamSession> session;
};

} // namespace

void startStream(RouteContext &ctx, httplib::Response &res, Submitted submitted,
                 std::shared_ptr<const GenerationRequest> request,
                 std::unique_ptr<StreamFormatter> formatter, const char *contentType) {
  int32_t n = request->sampling.n;
  auto session = std::make_unique<StreamSession>(*submitted.engine, std::move(submitted.handle),
                                                 std::move(formatter),
                                                 std::move(submitted.promptIds), n);
  auto start = submitted.start;
  session->setOnFinished([&ctx, start](const GenerationResult &result, bool) {
    ctx.metrics.observeRequest(firstReason(result), secondsSince(start));
  });
  auto state = std::make_shared<StreamState>(
      StreamState{std::move(request), std::move(submitted.ticket), std::move(session)});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      contentType,
      [state](size_t, httplib::DataSink &sink) {
        auto write = [&sink](std::string_view bytes) { return sink.write(bytes.data(), bytes.size()); };
        auto alive = [&sink] { return sink.is_writable(); };
        switch (state->session->pump(write, alive, [&state] { state->ticket.reset(); })) {
        case StreamSession::Pump::kMore:
          return true;
        case StreamSession::Pump::kDone:
          sink.done();
          return true;
        case StreamSession::Pump::kClientGone:
          state->ticket.reset();
          return false;
        }
        return false;
      },
      [state](bool) {
        state->session.reset(); // cancels a request the client abandoned before its end
      });
}

} // namespace kiln::rt::serve
