// TGI's POST /generate and /generate_stream, and SageMaker's POST /invocations.
#include "runtime/serve/openai_request.h"
#include "runtime/serve/routes.h"
#include "runtime/serve/tgi_request.h"
#include "runtime/serve/tgi_stream.h"

namespace kiln::rt::serve {

void runTgi(RouteContext &ctx, ServeModel &model, std::shared_ptr<GenerationRequest> request,
            httplib::Response &res, bool lmiJsonLines) {
  std::optional<Submitted> submitted = submitGeneration(ctx, model, *request, res, ErrorStyle::kTgi);
  if (!submitted)
    return;
  TgiContext context{request.get(), &model, model.eosTokenIds()};
  if (request->stream) {
    TgiStreamStyle style = lmiJsonLines ? TgiStreamStyle::kLmiJsonLines : TgiStreamStyle::kTgiSse;
    startStream(ctx, res, std::move(*submitted), request, makeTgiStream(context, style),
                lmiJsonLines ? "application/jsonlines" : "text/event-stream");
    return;
  }
  auto answer = [context](const std::vector<GenerationResult> &results) {
    const GenerationResult &result = results.at(0);
    if (!result.error.isOk())
      return WholeAnswer{errorFromStatus(result.error), nullptr};
    return WholeAnswer{std::nullopt, tgiGenerateResponse(context, result)};
  };
  answerWhole(ctx, res, std::move(*submitted), request, ErrorStyle::kTgi, std::move(answer));
}

namespace {

std::shared_ptr<GenerationRequest> parseTgi(RouteContext &ctx, const httplib::Request &req,
                                             httplib::Response &res) {
  nlohmann::json body;
  if (!readJsonBody(ctx, req, res, ErrorStyle::kTgi, body))
    return nullptr;
  auto request = std::make_shared<GenerationRequest>();
  if (auto error = parseTgiRequest(body, *request)) {
    sendError(res, *error, ErrorStyle::kTgi);
    return nullptr;
  }
  return request;
}

} // namespace

void handleTgiGenerate(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kTgi);
  if (!model)
    return;
  if (auto request = parseTgi(ctx, req, res)) {
    request->stream = false;
    runTgi(ctx, *model, std::move(request), res, false);
  }
}

void handleTgiGenerateStream(RouteContext &ctx, const httplib::Request &req,
                             httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kTgi);
  if (!model)
    return;
  if (auto request = parseTgi(ctx, req, res)) {
    request->stream = true;
    request->logprobs = true;
    request->sampling.logprobs = request->topLogprobs;
    runTgi(ctx, *model, std::move(request), res, false);
  }
}

// SageMaker sends every body to /invocations: TGI-style {"inputs"} (LMI's default schema), or
// OpenAI chat / completion bodies. Streams use the configured format (JSON lines or SSE).
void handleInvocations(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kTgi);
  nlohmann::json body;
  if (!model || !readJsonBody(ctx, req, res, ErrorStyle::kTgi, body))
    return;
  InvocationKind kind;
  if (auto error = classifyInvocation(body, kind))
    return sendError(res, *error, ErrorStyle::kTgi);
  auto request = std::make_shared<GenerationRequest>();
  Framing framing = ctx.sageMakerStreamFormat;
  if (kind == InvocationKind::kTgi) {
    if (auto error = parseTgiRequest(body, *request))
      return sendError(res, *error, ErrorStyle::kTgi);
    return runTgi(ctx, *model, std::move(request), res, framing == Framing::kJsonLines);
  }
  std::optional<ApiError> error;
  if (kind == InvocationKind::kChat)
    error = parseChatRequest(body, req.body, *request);
  else
    error = parseCompletionRequest(body, *request);
  if (error)
    return sendError(res, *error, ErrorStyle::kOpenAi);
  if (kind == InvocationKind::kChat)
    runChat(ctx, *model, std::move(request), res, framing);
  else
    runCompletion(ctx, *model, std::move(request), res, framing);
}

} // namespace kiln::rt::serve
