// Embedding requests parsed (runtime/serve/embedding_request.h): SageMaker's text pairs, and
// which requests keep their token types. The model is the byte-per-id fake; its pair encoding is
// text's bytes, then text_pair's, types 0 then 1 (BERT's segments without the special tokens).
#include "runtime/serve/embedding_request.h"
#include "tests/runtime/serve/fake_serve_model.h"

#include <gtest/gtest.h>

namespace kiln::rt::serve {
namespace {

class PairingModel : public testing::FakeServeModel {
public:
  Result<PairEncoding> encodePromptPair(std::string_view text,
                                        std::string_view textPair) const override {
    PairEncoding out;
    const std::string_view parts[] = {text, textPair};
    for (int32_t type = 0; type < 2; ++type)
      for (unsigned char c : parts[type]) {
        out.ids.push_back(c);
        out.typeIds.push_back(type);
      }
    return out;
  }
};

EmbeddingModelInfo infoWithTypes(int32_t typeVocabSize) {
  EmbeddingModelInfo info;
  info.width = 8;
  info.maxInputTokens = 16;
  info.typeVocabSize = typeVocabSize;
  return info;
}

TEST(EmbeddingRequestTest, TextPairsCarryTheirTokenTypesBesideSingleTexts) {
  PairingModel model;
  EmbeddingRequest request;
  const std::string body = R"({"inputs": ["ab", {"text": "c", "text_pair": "de"}, "f"]})";
  ASSERT_FALSE(parseFeatureExtractionRequest(body, true, model, infoWithTypes(2), request));
  EXPECT_TRUE(request.batched);
  ASSERT_EQ(request.inputs.size(), 3u);
  EXPECT_EQ(request.inputs[1], (std::vector<int32_t>{'c', 'd', 'e'}));
  ASSERT_EQ(request.tokenTypes.size(), 3u);
  EXPECT_TRUE(request.tokenTypes[0].empty());
  EXPECT_EQ(request.tokenTypes[1], (std::vector<int32_t>{0, 1, 1}));
  EXPECT_TRUE(request.tokenTypes[2].empty());

  // One pair alone answers unwrapped, as one text does.
  EmbeddingRequest one;
  ASSERT_FALSE(parseFeatureExtractionRequest(R"({"inputs": {"text": "a", "text_pair": "b"}})", true,
                                             model, infoWithTypes(2), one));
  EXPECT_FALSE(one.batched);
  EXPECT_EQ(one.tokenTypes, (std::vector<std::vector<int32_t>>{{0, 1}}));
}

// A model without token types (XLM-R: 1, a decoder: 0) gets the pair's ids alone, as transformers
// passes token_type_ids only to models that take them.
TEST(EmbeddingRequestTest, ModelsWithoutTokenTypesGetThePairsIdsAlone) {
  PairingModel model;
  for (int32_t types : {0, 1}) {
    EmbeddingRequest request;
    ASSERT_FALSE(parseFeatureExtractionRequest(R"({"inputs": {"text": "a", "text_pair": "bc"}})",
                                               true, model, infoWithTypes(types), request));
    EXPECT_EQ(request.inputs, (std::vector<std::vector<int32_t>>{{'a', 'b', 'c'}}));
    EXPECT_TRUE(request.tokenTypes.empty()) << types;
  }
  // An embedding artifact compiled before token types (runtime/exec/step.h: -1) refuses pairs.
  EmbeddingRequest old;
  std::optional<ApiError> error = parseFeatureExtractionRequest(
      R"({"inputs": [{"text": "a", "text_pair": "b"}]})", true, model, infoWithTypes(-1), old);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "inputs[0]");
  EXPECT_NE(error->message.find("recompile it"), std::string::npos) << error->message;
}

TEST(EmbeddingRequestTest, BadPairsAreRefusedNamingTheField) {
  PairingModel model;
  const EmbeddingModelInfo info = infoWithTypes(2);
  const std::pair<const char *, const char *> cases[] = {
      {R"({"inputs": {"text": "a"}})", "inputs.text_pair"},
      {R"({"inputs": [{"text": "", "text_pair": "b"}]})", "inputs[0].text"},
      {R"({"inputs": ["a", {"text": "a", "text_pair": 3}]})", "inputs[1].text_pair"},
      {R"({"inputs": {"text": "0123456789", "text_pair": "0123456789"}})", "inputs"},
  };
  for (const auto &[body, field] : cases) {
    EmbeddingRequest request;
    std::optional<ApiError> error = parseFeatureExtractionRequest(body, true, model, info, request);
    ASSERT_TRUE(error) << body;
    EXPECT_EQ(error->httpStatus, 400) << body;
    EXPECT_EQ(error->param, field) << body << ": " << error->message;
  }
  // TEI's /embed and OpenAI's /v1/embeddings take single texts only.
  EmbeddingRequest tei;
  std::optional<ApiError> error = parseTeiEmbedRequest(
      nlohmann::json::parse(R"({"inputs": {"text": "a", "text_pair": "b"}})"), model,
      [] {
        EmbeddingModelInfo pooled = infoWithTypes(2);
        pooled.pooling = PoolingMode::kMean;
        return pooled;
      }(),
      tei);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->param, "inputs");
}

} // namespace
} // namespace kiln::rt::serve
