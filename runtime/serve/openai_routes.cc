// POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id}.
#include "runtime/serve/openai_request.h"
#include "runtime/serve/openai_stream.h"
#include "runtime/serve/routes.h"
#include "runtime/serve/tool_request.h"

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

// The flow both OpenAI generation routes share: submit, then stream through `makeStream` or
// answer once with `respond(header, request, results)`.
using MakeOpenAiStream = std::unique_ptr<StreamFormatter> (*)(OpenAiStreamContext);
using OpenAiResponder = nlohmann::json (*)(const ResponseHeader &, const GenerationRequest &,
                                           const std::vector<GenerationResult> &,
                                           const ServeModel &);

void runOpenAiGeneration(RouteContext &ctx, ServeModel &model,
                         std::shared_ptr<GenerationRequest> request, httplib::Response &res,
                         Framing framing, const char *idPrefix, MakeOpenAiStream makeStream,
                         OpenAiResponder respond) {
  std::optional<Submitted> submitted =
      submitGeneration(ctx, model, *request, res, ErrorStyle::kOpenAi);
  if (!submitted)
    return;
  ResponseHeader header = headerFor(idPrefix, model);
  if (request->stream) {
    startStream(ctx, res, std::move(*submitted), request,
                makeStream({header, request.get(), &model, framing}), contentTypeOf(framing));
    return;
  }
  auto answer = [header, request, &model, respond](const std::vector<GenerationResult> &results) {
    if (auto error = everySampleFailed(results))
      return WholeAnswer{error, nullptr};
    return WholeAnswer{std::nullopt, respond(header, *request, results, model)};
  };
  answerWhole(ctx, res, std::move(*submitted), request, ErrorStyle::kOpenAi, std::move(answer));
}

// A chat request has one prompt (its messages), so one result.
nlohmann::json chatResponseOfFirst(const ResponseHeader &header, const GenerationRequest &request,
                                   const std::vector<GenerationResult> &results,
                                   const ServeModel &model) {
  return chatResponse(header, request, results.at(0), model);
}

} // namespace

void runCompletion(RouteContext &ctx, ServeModel &model, std::shared_ptr<GenerationRequest> request,
                   httplib::Response &res, Framing framing) {
  runOpenAiGeneration(ctx, model, std::move(request), res, framing, "cmpl", &makeCompletionStream,
                      &completionResponse);
}

void runChat(RouteContext &ctx, ServeModel &model, std::shared_ptr<GenerationRequest> request,
             httplib::Response &res, Framing framing) {
  // Mistral's calls start with [TOOL_CALLS], a special token: the parser has to see it (as in
  // vLLM, which turns skip_special_tokens off for them too).
  if (toolCallFormatFor(request->tools, model.toolCallFormat()) == ToolCallFormat::kMistral)
    request->sampling.skipSpecialTokens = false;
  runOpenAiGeneration(ctx, model, std::move(request), res, framing, "chatcmpl", &makeChatStream,
                      &chatResponseOfFirst);
}

void handleCompletions(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kOpenAi);
  nlohmann::json body;
  if (!model || !readJsonBody(ctx, req, res, ErrorStyle::kOpenAi, body))
    return;
  auto request = std::make_shared<GenerationRequest>();
  if (auto error = parseCompletionRequest(body, *request, &req.body))
    return sendError(res, *error, ErrorStyle::kOpenAi);
  runCompletion(ctx, *model, std::move(request), res, Framing::kSse);
}

void handleChatCompletions(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kOpenAi);
  nlohmann::json body;
  if (!model || !readJsonBody(ctx, req, res, ErrorStyle::kOpenAi, body))
    return;
  auto request = std::make_shared<GenerationRequest>();
  if (auto error = parseChatRequest(body, req.body, *request))
    return sendError(res, *error, ErrorStyle::kOpenAi);
  runChat(ctx, *model, std::move(request), res, Framing::kSse);
}

namespace {

// One entry of GET /v1/models, as vLLM writes it.
nlohmann::json modelObject(ServeModel &model) {
  return {{"id", model.name()},
          {"object", "model"},
          {"created", unixSeconds()},
          {"owned_by", "kiln"},
          {"root", model.name()},
          {"parent", nullptr},
          {"max_model_len", model.engine().limits().maxSeqLen}};
}

} // namespace

void handleModels(RouteContext &ctx, const httplib::Request &, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kOpenAi);
  if (!model)
    return;
  sendJson(res, {{"object", "list"}, {"data", nlohmann::json::array({modelObject(*model)})}});
}

void handleModel(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kOpenAi);
  if (!model)
    return;
  std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
  if (id != model->name())
    return sendError(res, modelNotFound(id, model->name()), ErrorStyle::kOpenAi);
  sendJson(res, modelObject(*model));
}

} // namespace kiln::rt::serve
