// TGI's POST /generate, /generate_stream and / (what huggingface_hub's InferenceClient posts to),
// GET /info, and SageMaker's POST /invocations.
#include "runtime/serve/json_fields.h"
#include "runtime/serve/openai_request.h"
#include "runtime/serve/routes.h"
#include "runtime/serve/tgi_request.h"
#include "runtime/serve/tgi_stream.h"
#include "schema/version.h"

#include <algorithm>

namespace kiln::rt::serve {
namespace {

// How a non-streaming answer is shaped: TGI's POST / wraps the response in a one-element array
// (the shape of the older hosted Inference API); /generate and /invocations do not.
enum class WholeShape { kObject, kArray };

void runTgiAs(RouteContext &ctx, ServeModel &model, std::shared_ptr<GenerationRequest> request,
              httplib::Response &res, bool lmiJsonLines, WholeShape shape) {
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
  auto answer = [context, shape](const std::vector<GenerationResult> &results) {
    const GenerationResult &result = results.at(0);
    if (!result.error.isOk())
      return WholeAnswer{errorFromStatus(result.error), nullptr};
    nlohmann::json body = tgiGenerateResponse(context, result);
    if (shape == WholeShape::kArray)
      body = nlohmann::json::array({std::move(body)});
    return WholeAnswer{std::nullopt, std::move(body)};
  };
  answerWhole(ctx, res, std::move(*submitted), request, ErrorStyle::kTgi, std::move(answer));
}

} // namespace

void runTgi(RouteContext &ctx, ServeModel &model, std::shared_ptr<GenerationRequest> request,
            httplib::Response &res, bool lmiJsonLines) {
  runTgiAs(ctx, model, std::move(request), res, lmiJsonLines, WholeShape::kObject);
}

namespace {

std::shared_ptr<GenerationRequest> parseTgi(RouteContext &ctx, const httplib::Request &req,
                                             httplib::Response &res) {
  nlohmann::json body;
  if (!readJsonBody(ctx, req, res, ErrorStyle::kTgi, body))
    return nullptr;
  auto request = std::make_shared<GenerationRequest>();
  if (auto error = parseTgiRequest(body, *request, &req.body)) {
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

// TGI's "compat" route: a /generate body whose "stream" picks /generate_stream's SSE or a
// non-streaming answer in a one-element array. `return_full_text` defaults to true here, as TGI
// defaults it for models whose task is text-generation (every model kiln serves).
void handleTgiCompat(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kTgi);
  nlohmann::json body;
  if (!model || !readJsonBody(ctx, req, res, ErrorStyle::kTgi, body))
    return;
  auto request = std::make_shared<GenerationRequest>();
  if (auto error = parseTgiRequest(body, *request, &req.body))
    return sendError(res, *error, ErrorStyle::kTgi);
  const nlohmann::json *params = JsonFields(body).get("parameters");
  if (!params || !JsonFields(*params).has("return_full_text"))
    request->returnFullText = true;
  runTgiAs(ctx, *model, std::move(request), res, false, WholeShape::kArray);
}

// TGI's Info: what kiln knows of the served model and its limits; TGI's router settings that
// kiln has no counterpart for get the value that describes kiln (one input per request, no
// best_of, no separate validation workers: HTTP threads tokenize).
void handleTgiInfo(RouteContext &ctx, const httplib::Request &, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kTgi);
  if (!model)
    return;
  const EngineLimits &limits = model->engine().limits();
  int64_t maxInput = std::max<int64_t>(limits.maxSeqLen - 1, 0);
  sendJson(res, {{"model_id", model->name()},
                 {"model_sha", nullptr},
                 {"model_pipeline_tag", "text-generation"},
                 {"max_concurrent_requests", ctx.admission->limit()},
                 {"max_best_of", 1},
                 {"max_stop_sequences", kMaxStopStrings},
                 {"max_input_tokens", maxInput},
                 {"max_input_length", maxInput}, // the name before TGI 2.0
                 {"max_total_tokens", limits.maxSeqLen},
                 {"max_batch_total_tokens",
                  static_cast<int64_t>(limits.numKvBlocks) * limits.blockSize},
                 {"max_batch_size", limits.maxBatch},
                 {"validation_workers", 1},
                 {"max_client_batch_size", 1},
                 {"router", "kiln"},
                 {"version", kKilnVersion},
                 {"sha", nullptr},
                 {"docker_label", nullptr}});
}

// SageMaker sends every body to /invocations: TGI-style {"inputs"} (LMI's default schema), or
// OpenAI chat / completion bodies. Streams use the configured format (JSON lines or SSE).
void handleInvocations(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = modelOrError(ctx, res, ErrorStyle::kTgi);
  if (model && !model->generates())
    return runFeatureExtraction(ctx, *model, req, res);
  nlohmann::json body;
  if (!model || !readJsonBody(ctx, req, res, ErrorStyle::kTgi, body))
    return;
  InvocationKind kind;
  if (auto error = classifyInvocation(body, kind))
    return sendError(res, *error, ErrorStyle::kTgi);
  auto request = std::make_shared<GenerationRequest>();
  Framing framing = ctx.sageMakerStreamFormat;
  if (kind == InvocationKind::kTgi) {
    if (auto error = parseTgiRequest(body, *request, &req.body))
      return sendError(res, *error, ErrorStyle::kTgi);
    return runTgi(ctx, *model, std::move(request), res, framing == Framing::kJsonLines);
  }
  std::optional<ApiError> error;
  if (kind == InvocationKind::kChat)
    error = parseChatRequest(body, req.body, *request);
  else
    error = parseCompletionRequest(body, *request, &req.body);
  if (error)
    return sendError(res, *error, ErrorStyle::kOpenAi);
  if (kind == InvocationKind::kChat)
    runChat(ctx, *model, std::move(request), res, framing);
  else
    runCompletion(ctx, *model, std::move(request), res, framing);
}

} // namespace kiln::rt::serve
