// POST /v1/completions, POST /v1/chat/completions, GET /v1/models.
#include "runtime/serve/openai_request.h"
#include "runtime/serve/openai_stream.h"
#include "runtime/serve/routes.h"

namespace kiln::rt::serve {
namespace {

ResponseHeader headerFor(const char *prefix, const ServeModel &model) {
  return {newResponseId(prefix), unixSeconds(), model.name()};
}

const char *contentTypeOf(Framing framing) {
  return framing == Framing::kSse ? "text/event-stream" : "application/jsonlines";
}

// A request whose every sample failed answers with the error instead of a 200 body.
std::optional<ApiError> everySampleFailed(const std::vector<GenerationResult> &results) {
  const Status *first = nullptr;
  for (const GenerationResult &result : results) {
    for (const SampleResult &s : result.samples)
      if (s.finishReason != FinishReason::kError)
        return std::nullopt;
    if (!first && !result.error.isOk())
      first = &result.error;
  }
  if (!first)
    return std::nullopt;
  return errorFromStatus(*first);
}

} // namespace

void runCompletion(RouteContext &ctx, ServeModel &model,
                   std::shared_ptr<GenerationRequest> request, httplib::Response &res,
                   Framing framing) {
  std::optional<Submitted> submitted =
      submitGeneration(ctx, model, *request, res, ErrorStyle::kOpenAi);
  if (!submitted)
    return;
  ResponseHeader header = headerFor("cmpl", model);
  if (request->stream) {
    auto formatter = makeCompletionStream({header, request.get(), &model, framing});
    startStream(ctx, res, std::move(*submitted), request, std::move(formatter),
                contentTypeOf(framing));
    return;
  }
  auto answer = [header, request, &model](const std::vector<GenerationResult> &results) {
    if (auto error = everySampleFailed(results))
      return WholeAnswer{error, nullptr};
    return WholeAnswer{std::nullopt, completionResponse(header, *request, results, model)};
  };
  answerWhole(ctx, res, std::move(*submitted), request, ErrorStyle::kOpenAi, std::move(answer));
}

void runChat(RouteContext &ctx, ServeModel &model, std::shared_ptr<GenerationRequest> request,
             httplib::Response &res, Framing framing) {
  std::optional<Submitted> submitted =
      submitGeneration(ctx, model, *request, res, ErrorStyle::kOpenAi);
  if (!submitted)
    return;
  ResponseHeader header = headerFor("chatcmpl", model);
  if (request->stream) {
    auto formatter = makeChatStream({header, request.get(), &model, framing});
    startStream(ctx, res, std::move(*submitted), request, std::move(formatter),
                contentTypeOf(framing));
    return;
  }
  auto answer = [header, request, &model](const std::vector<GenerationResult> &results) {
    if (auto error = everySampleFailed(results))
      return WholeAnswer{error, nullptr};
    return WholeAnswer{std::nullopt, chatResponse(header, *request, results.at(0), model)};
  };
  answerWhole(ctx, res, std::move(*submitted), request, ErrorStyle::kOpenAi, std::move(answer));
}

void handleCompletions(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kOpenAi);
  nlohmann::json body;
  if (!model || !readJsonBody(ctx, req, res, ErrorStyle::kOpenAi, body))
    return;
  auto request = std::make_shared<GenerationRequest>();
  if (auto error = parseCompletionRequest(body, *request))
    return sendError(res, *error, ErrorStyle::kOpenAi);
  runCompletion(ctx, *model, std::move(request), res, Framing::kSse);
}

// The messages again with their keys in the client's order (chat templates print them so).
nlohmann::ordered_json orderedMessages(const std::string &rawBody) {
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(rawBody, nullptr, false);
  if (ordered.is_discarded() || !ordered.is_object() || !ordered.contains("messages"))
    return nullptr;
  return ordered["messages"];
}

void handleChatCompletions(RouteContext &ctx, const httplib::Request &req,
                           httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kOpenAi);
  nlohmann::json body;
  if (!model || !readJsonBody(ctx, req, res, ErrorStyle::kOpenAi, body))
    return;
  auto request = std::make_shared<GenerationRequest>();
  if (auto error = parseChatRequest(body, orderedMessages(req.body), *request))
    return sendError(res, *error, ErrorStyle::kOpenAi);
  runChat(ctx, *model, std::move(request), res, Framing::kSse);
}

void handleModels(RouteContext &ctx, const httplib::Request &, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kOpenAi);
  if (!model)
    return;
  const EngineLimits &limits = model->engine().limits();
  nlohmann::json entry = {{"id", model->name()},
                          {"object", "model"},
                          {"created", unixSeconds()},
                          {"owned_by", "kiln"},
                          {"root", model->name()},
                          {"parent", nullptr},
                          {"max_model_len", limits.maxSeqLen}};
  sendJson(res, {{"object", "list"}, {"data", nlohmann::json::array({entry})}});
}

} // namespace kiln::rt::serve
