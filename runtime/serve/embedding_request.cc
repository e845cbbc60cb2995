#include "runtime/serve/embedding_request.h"

#include "runtime/base/base64.h"
#include "runtime/embed/pooling.h"

#include <cstring>
#include <string>

namespace kiln::rt::serve {
namespace {

using nlohmann::json;

// One text through the tokenizer (special tokens as the model adds them); with `truncation`
// (TEI's truncate) cut to it as HF's tokenizer would.
std::optional<ApiError> encodeText(const json &text, const std::string &field,
                                   const ServeModel &model,
                                   const std::optional<Truncation> &truncation,
                                   std::vector<int32_t> &out) {
  if (!text.is_string())
    return badRequest(field, "field '" + field + "' must be a string");
  if (text.get_ref<const std::string &>().empty())
    return badRequest(field, "field '" + field + "' is an empty string");
  const std::string &value = text.get_ref<const std::string &>();
  Result<std::vector<int32_t>> ids =
      truncation ? model.encodePrompt(value, *truncation) : model.encodePrompt(value);
  if (!ids.isOk())
    return errorFromStatus(ids.status(), field);
  out = std::move(*ids);
  return std::nullopt;
}

// {"text": ..., "text_pair": ...}: the two texts as the tokenizer pairs them, into out's last input
// and, for a model that takes token types, its token types.
std::optional<ApiError> encodeTextPair(const json &pair, const std::string &field,
                                       const ServeModel &model, const EmbeddingModelInfo &info,
                                       EmbeddingRequest &out) {
  for (const char *key : {"text", "text_pair"}) {
    const std::string name = field + "." + key;
    if (!pair.contains(key) || !pair[key].is_string())
      return badRequest(name, "field '" + name +
                                  "' must be a string (a text pair is {\"text\": "
                                  "..., \"text_pair\": ...})");
    if (pair[key].get_ref<const std::string &>().empty())
      return badRequest(name, "field '" + name + "' is an empty string");
  }
  Result<PairEncoding> encoded =
      model.encodePromptPair(pair["text"].get_ref<const std::string &>(),
                             pair["text_pair"].get_ref<const std::string &>());
  if (!encoded.isOk())
    return errorFromStatus(encoded.status(), field);
  if (info.typeVocabSize < 0)
    return badRequest(field, "this artifact was compiled before kiln took token types (schema "
                             "13), so it embeds no text pairs: recompile it");
  out.inputs.back() = std::move(encoded->ids);
  if (info.typeVocabSize < 2)
    return std::nullopt;
  out.tokenTypes.resize(out.inputs.size());
  out.tokenTypes.back() = std::move(encoded->typeIds);
  return std::nullopt;
}

std::optional<ApiError> checkLength(const std::vector<int32_t> &ids, const std::string &field,
                                    const EmbeddingModelInfo &info) {
  if (static_cast<int64_t>(ids.size()) <= info.maxInputTokens)
    return std::nullopt;
  return badRequest(field, "field '" + field + "' has " + std::to_string(ids.size()) +
                               " tokens; this model embeds at most " +
                               std::to_string(info.maxInputTokens) +
                               " (the compiled --max-seq-len / --max-tokens-per-step)");
}

// A list of token ids, each a non-negative integer.
bool tokenIds(const json &value, std::vector<int32_t> &out) {
  if (!value.is_array() || value.empty())
    return false;
  for (const json &id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return false;
    out.push_back(id.get<int32_t>());
  }
  return true;
}

// Which inputs besides strings an API takes.
struct InputForms {
  bool ids = false;   // OpenAI: token ids, or lists of them
  bool pairs = false; // SageMaker: text pairs {"text": ..., "text_pair": ...}
};

// A string or a non-empty list of strings (TEI, SageMaker); OpenAI also takes token ids,
// SageMaker text pairs.
std::optional<ApiError> parseInputs(const json &input, const std::string &field, InputForms forms,
                                    const ServeModel &model, const EmbeddingModelInfo &info,
                                    EmbeddingRequest &out,
                                    const std::optional<Truncation> &truncation = std::nullopt) {
  out.batched = input.is_array();
  std::vector<int32_t> ids;
  if (forms.ids && tokenIds(input, ids)) {
    out.inputs.push_back(std::move(ids));
    out.batched = false;
  } else if (forms.pairs && input.is_object()) {
    out.inputs.emplace_back();
    if (auto error = encodeTextPair(input, field, model, info, out))
      return error;
  } else if (input.is_string()) {
    out.inputs.emplace_back();
    if (auto error = encodeText(input, field, model, truncation, out.inputs.back()))
      return error;
  } else if (input.is_array() && !input.empty()) {
    for (size_t i = 0; i < input.size(); ++i) {
      const std::string item = field + "[" + std::to_string(i) + "]";
      out.inputs.emplace_back();
      if (forms.ids && input[i].is_array()) {
        if (!tokenIds(input[i], out.inputs.back()))
          return badRequest(item, "field '" + item + "' must be a non-empty list of token ids");
      } else if (forms.pairs && input[i].is_object()) {
        if (auto error = encodeTextPair(input[i], item, model, info, out))
          return error;
      } else if (auto error = encodeText(input[i], item, model, truncation, out.inputs.back())) {
        return error;
      }
    }
  } else {
    return badRequest(field, "field '" + field + "' must be a string" +
                                 (forms.pairs ? ", a text pair" : "") + " or a non-empty list" +
                                 (forms.ids     ? " (of strings, token ids or id lists)"
                                  : forms.pairs ? " (of strings or text pairs)"
                                                : ""));
  }
  if (!out.tokenTypes.empty())
    out.tokenTypes.resize(out.inputs.size()); // the single texts after the last pair: all type 0
  for (size_t i = 0; i < out.inputs.size(); ++i)
    if (auto error = checkLength(out.inputs[i],
                                 out.batched ? field + "[" + std::to_string(i) + "]" : field, info))
      return error;
  return std::nullopt;
}

std::optional<ApiError> requirePooling(const EmbeddingModelInfo &info) {
  if (info.pooling != PoolingMode::kNone)
    return std::nullopt;
  return badRequest("", "this model has no pooling (no sentence-transformers modules.json and "
                        "1_Pooling/config.json beside the checkpoint), so it gives no sentence "
                        "embedding; /invocations returns its hidden states");
}

// TEI's "truncate" (default false: a longer input is refused, naming the limit) and
// "truncation_direction" ("Right", the default, keeps an input's first tokens; "Left" its last).
std::optional<ApiError> parseTeiTruncation(const json &body, const EmbeddingModelInfo &info,
                                           std::optional<Truncation> &out) {
  const json truncate = body.value("truncate", json(false));
  if (!truncate.is_boolean() && !truncate.is_null())
    return badRequest("truncate", "field 'truncate' must be a boolean");
  const json direction = body.value("truncation_direction", json("Right"));
  const std::string side = direction.is_string() ? direction.get<std::string>() : "";
  if (side != "Right" && side != "right" && side != "Left" && side != "left")
    return badRequest("truncation_direction",
                      "field 'truncation_direction' must be \"Right\" or \"Left\"");
  if (truncate != json(true))
    return std::nullopt;
  out = Truncation{static_cast<size_t>(info.maxInputTokens), side == "Right" || side == "right"
                                                                 ? Truncation::Side::kRight
                                                                 : Truncation::Side::kLeft};
  return std::nullopt;
}

std::vector<float> finished(const Embedding &e, int32_t dimensions, bool normalize) {
  std::vector<float> v = e.pooled;
  if (dimensions > 0 && dimensions < static_cast<int32_t>(v.size()))
    v.resize(dimensions);
  return normalize ? normalizedL2(v) : v;
}

int64_t tokensOf(const std::vector<Embedding> &results) {
  int64_t tokens = 0;
  for (const Embedding &e : results)
    tokens += e.numTokens;
  return tokens;
}

} // namespace

std::optional<ApiError> parseOpenAiEmbeddingRequest(const json &body, const ServeModel &model,
                                                    const EmbeddingModelInfo &info,
                                                    EmbeddingRequest &out) {
  if (auto error = requirePooling(info))
    return error;
  if (!body.contains("input"))
    return badRequest("input", "field 'input' is required");
  const std::string format = body.value("encoding_format", "float");
  if (!body.value("encoding_format", json("float")).is_string() ||
      (format != "float" && format != "base64"))
    return badRequest("encoding_format", "field 'encoding_format' must be \"float\" or \"base64\"");
  out.base64 = format == "base64";
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    const json &d = body["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > info.width)
      return badRequest("dimensions", "field 'dimensions' must be an integer in [1, " +
                                          std::to_string(info.width) + "] (the model's width)");
    out.dimensions = d.get<int32_t>();
  }
  return parseInputs(body["input"], "input", {.ids = true}, model, info, out);
}

std::optional<ApiError> parseTeiEmbedRequest(const json &body, const ServeModel &model,
                                             const EmbeddingModelInfo &info,
                                             EmbeddingRequest &out) {
  if (auto error = requirePooling(info))
    return error;
  if (!body.contains("inputs"))
    return badRequest("inputs", "field 'inputs' is required");
  if (body.contains("normalize")) {
    if (!body["normalize"].is_boolean())
      return badRequest("normalize", "field 'normalize' must be a boolean");
    out.normalize = body["normalize"].get<bool>();
  }
  std::optional<Truncation> truncation;
  if (auto error = parseTeiTruncation(body, info, truncation))
    return error;
  return parseInputs(body["inputs"], "inputs", {}, model, info, out, truncation);
}

std::optional<ApiError> parseFeatureExtractionRequest(std::string_view body, bool isJson,
                                                      const ServeModel &model,
                                                      const EmbeddingModelInfo &info,
                                                      EmbeddingRequest &out) {
  if (!isJson)
    return parseInputs(json(std::string(body)), "body", {}, model, info, out);
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("inputs"))
    return badRequest("inputs", "a JSON body must be an object with field 'inputs' (a string, a "
                                "text pair or a list of them); send raw text as text/plain");
  return parseInputs(parsed["inputs"], "inputs", {.pairs = true}, model, info, out);
}

json openAiEmbeddingsBody(const std::vector<Embedding> &results, const EmbeddingRequest &request,
                          const EmbeddingModelInfo &info, const std::string &model) {
  json data = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const std::vector<float> v = finished(results[i], request.dimensions, info.normalize);
    json embedding = v;
    if (request.base64) // little-endian float32, as OpenAI's clients decode it
      embedding = encodeBase64(
          std::string_view(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(float)));
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  const int64_t tokens = tokensOf(results);
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

json teiEmbedBody(const std::vector<Embedding> &results, const EmbeddingRequest &request) {
  json out = json::array();
  for (const Embedding &e : results)
    out.push_back(finished(e, 0, request.normalize.value_or(true)));
  return out;
}

json featureExtractionBody(const std::vector<Embedding> &results, const EmbeddingRequest &request,
                           const EmbeddingModelInfo &info, bool pooled) {
  json out = json::array();
  for (const Embedding &e : results) {
    if (pooled) {
      out.push_back(finished(e, 0, info.normalize));
      continue;
    }
    json rows = json::array();
    for (int32_t t = 0; t < e.numTokens; ++t)
      rows.push_back(std::vector<float>(e.hidden.begin() + size_t(t) * info.width,
                                        e.hidden.begin() + size_t(t + 1) * info.width));
    out.push_back(json::array({std::move(rows)})); // [1][tokens][hidden]
  }
  return request.batched ? out : out[0];
}

} // namespace kiln::rt::serve
