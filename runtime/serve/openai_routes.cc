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
bool sendIfFailed(const GenerationResult &result, httplib::Response &res) {
  if (result.error.isOk())
    return false;
  for (const SampleResult &s : result.samples)
    if (s.finishReason != FinishReason::kError)
      return false;
  sendError(res, errorFromStatus(result.error), ErrorStyle::kOpenAi);
  return true;
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
  GenerationResult result = finishBlocking(ctx, *submitted, request->sampling.n);
  if (!sendIfFailed(result, res))
    sendJson(res, completionResponse(header, *request, result, model));
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
  GenerationResult result = finishBlocking(ctx, *submitted, request->sampling.n);
  if (!sendIfFailed(result, res))
    sendJson(res, chatResponse(header, *request, result, model));
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
