// Embedding requests as the APIs write them, checked and tokenized before anything runs: OpenAI's
// POST /v1/embeddings, TEI's POST /embed and SageMaker's /invocations of an encoder (feature
// extraction: raw text/plain or {"inputs": ...}). Errors name the field and the limit.
#pragma once

#include "runtime/embed/embedding_service.h"
#include "runtime/serve/api_error.h"
#include "runtime/serve/serve_model.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string_view>
#include <vector>

namespace kiln::rt::serve {

struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs; // token ids, special tokens as the tokenizer adds
  // Empty, or per input its tokens' types (a text pair's; a single text's list is empty).
  std::vector<std::vector<int32_t>> tokenTypes;
  bool base64 = false;                      // OpenAI encoding_format "base64"
  int32_t dimensions = 0;                   // OpenAI dimensions: the first N values; 0: all
  std::optional<bool> normalize;            // TEI normalize; nullopt: the model's own
  bool batched = true; // the input was a list (SageMaker answers a single text unwrapped)
};

// OpenAI: input (a string, a list of strings, a list of token ids or of id lists), encoding_format
// (float | base64), dimensions (1..width), model (ignored here: the route checks it), user.
std::optional<ApiError> parseOpenAiEmbeddingRequest(const nlohmann::json &body,
                                                    const ServeModel &model,
                                                    const EmbeddingModelInfo &info,
                                                    EmbeddingRequest &out);
// TEI: inputs (a string or a list of strings), normalize (default true), truncate (false only).
std::optional<ApiError> parseTeiEmbedRequest(const nlohmann::json &body, const ServeModel &model,
                                             const EmbeddingModelInfo &info, EmbeddingRequest &out);
// SageMaker: the body as raw text (any Content-Type but JSON), or JSON {"inputs": a string, a text
// pair {"text": ..., "text_pair": ...} (as HF's pipelines take one), or a list of them}.
std::optional<ApiError> parseFeatureExtractionRequest(std::string_view body, bool json,
                                                      const ServeModel &model,
                                                      const EmbeddingModelInfo &info,
                                                      EmbeddingRequest &out);

// OpenAI's list object; the pooled vectors cut to `dimensions` and normalized when the model
// normalizes (after the cut, as OpenAI's shortened embeddings are).
nlohmann::json openAiEmbeddingsBody(const std::vector<Embedding> &results,
                                    const EmbeddingRequest &request, const EmbeddingModelInfo &info,
                                    const std::string &model);
// TEI: one list of floats per input, normalized unless the request said normalize false.
nlohmann::json teiEmbedBody(const std::vector<Embedding> &results, const EmbeddingRequest &request);
// SageMaker feature extraction: each input's last_hidden_state as [1][tokens][hidden] (a list of
// them for a list input); `pooled`: each input's pooled vector instead (normalized as the model).
nlohmann::json featureExtractionBody(const std::vector<Embedding> &results,
                                     const EmbeddingRequest &request,
                                     const EmbeddingModelInfo &info, bool pooled);

} // namespace kiln::rt::serve
