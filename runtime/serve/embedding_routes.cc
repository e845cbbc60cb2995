// POST /v1/embeddings (OpenAI), POST /embed (TEI) and /invocations of an embedding model
// (SageMaker feature extraction): requests parsed and tokenized (embedding_request.h), admitted
// like generation requests, and embedded by the model's Embeddings: an encoder's EmbeddingService,
// which batches concurrent requests together, or a generating model's engine, which runs them in
// its steps beside generation (runtime/service/engine_embeddings.h).
#include "runtime/serve/embedding_request.h"
#include "runtime/serve/routes.h"

namespace kiln::rt::serve {
namespace {

// The served model's embeddings, or an error written (loading, draining, or a generating model).
Embeddings *embeddingsOrError(RouteContext &ctx, httplib::Response &res, ErrorStyle style,
                              ServeModel *&model) {
  model = modelOrError(ctx, res, style);
  if (!model)
    return nullptr;
  Embeddings *embeddings = model->embeddings();
  if (!embeddings)
    sendError(res,
              badRequest("", "model '" + model->name() +
                                 "' generates text and its plan returns no final hidden "
                                 "states; embeddings need an embedding model (compiled from "
                                 "BertModel, XLMRobertaModel, BartModel or Qwen3Model) or a "
                                 "decoder whose plan ends in its lm_head"),
              style);
  return embeddings;
}

// Runs `request` (one admission slot) and answers with `body` of its results.
template <class Body>
void runEmbedding(RouteContext &ctx, Embeddings &embeddings, EmbeddingRequest &request,
                  httplib::Response &res, ErrorStyle style, Body body) {
  std::optional<Admission::Ticket> ticket = ctx.admission->tryEnter(1);
  if (!ticket)
    return sendError(res,
                     serviceUnavailable("the server has " + std::to_string(ctx.admission->limit()) +
                                        " requests in flight, its limit; retry later"),
                     style);
  Result<std::vector<Embedding>> results =
      embeddings.embed(std::move(request.inputs), std::move(request.tokenTypes));
  if (!results.isOk())
    return sendError(res, errorFromStatus(results.status()), style);
  sendJson(res, body(*results));
}

bool isJsonBody(const httplib::Request &req) {
  const std::string type = req.get_header_value("Content-Type");
  return type.find("json") != std::string::npos;
}

} // namespace

void handleEmbeddings(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = nullptr;
  Embeddings *embeddings = embeddingsOrError(ctx, res, ErrorStyle::kOpenAi, model);
  nlohmann::json body;
  if (!embeddings || !readJsonBody(ctx, req, res, ErrorStyle::kOpenAi, body))
    return;
  const std::string requested =
      body.value("model", nlohmann::json("")).is_string() ? body.value("model", "") : "";
  if (!requested.empty() && requested != model->name())
    return sendError(res, modelNotFound(requested, model->name()), ErrorStyle::kOpenAi);
  EmbeddingRequest request;
  if (auto error = parseOpenAiEmbeddingRequest(body, *model, embeddings->info(), request))
    return sendError(res, *error, ErrorStyle::kOpenAi);
  const EmbeddingModelInfo &info = embeddings->info();
  const std::string name = model->name();
  runEmbedding(ctx, *embeddings, request, res, ErrorStyle::kOpenAi,
               [&](const std::vector<Embedding> &results) {
                 return openAiEmbeddingsBody(results, request, info, name);
               });
}

void handleTeiEmbed(RouteContext &ctx, const httplib::Request &req, httplib::Response &res) {
  ServeModel *model = nullptr;
  Embeddings *embeddings = embeddingsOrError(ctx, res, ErrorStyle::kTgi, model);
  nlohmann::json body;
  if (!embeddings || !readJsonBody(ctx, req, res, ErrorStyle::kTgi, body))
    return;
  EmbeddingRequest request;
  if (auto error = parseTeiEmbedRequest(body, *model, embeddings->info(), request))
    return sendError(res, *error, ErrorStyle::kTgi);
  runEmbedding(
      ctx, *embeddings, request, res, ErrorStyle::kTgi,
      [&](const std::vector<Embedding> &results) { return teiEmbedBody(results, request); });
}

void runFeatureExtraction(RouteContext &ctx, ServeModel &model, const httplib::Request &req,
                          httplib::Response &res) {
  Embeddings *embeddings = model.embeddings();
  if (auto error = bodyOverLimit(ctx, req))
    return sendError(res, *error, ErrorStyle::kTgi);
  EmbeddingRequest request;
  if (auto error = parseFeatureExtractionRequest(req.body, isJsonBody(req), model,
                                                 embeddings->info(), request))
    return sendError(res, *error, ErrorStyle::kTgi);
  const bool pooled = ctx.invocationOutput == InvocationOutput::kPooled;
  const EmbeddingModelInfo &info = embeddings->info();
  runEmbedding(ctx, *embeddings, request, res, ErrorStyle::kTgi,
               [&](const std::vector<Embedding> &results) {
                 return featureExtractionBody(results, request, info, pooled);
               });
}

} // namespace kiln::rt::serve
