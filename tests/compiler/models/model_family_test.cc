// The family registry (compiler/models/model_family.h): model_type picks the family, the
// architecture must be one it builds, and each family reads its own config keys (windows, biases,
// q/k norms), refusing what it cannot compile with the field named.
#include "compiler/models/model_family.h"

#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;

const std::string kAssets = KILN_ASSETS_DIR;

Json configOf(const std::string &modelType, const std::string &architecture, int layers = 3) {
  return {{"architectures", {architecture}},
          {"model_type", modelType},
          {"vocab_size", 512},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", layers},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 256}};
}

struct Resolved {
  Result<const ModelFamily *> family = internalError("unset");
  HfModelConfig config;
};

Resolved resolve(const Json &json) {
  Resolved out;
  auto config = parseHfModelConfig(json.dump(), "", "m/config.json");
  EXPECT_TRUE(config.isOk()) << config.status().toString();
  if (!config.isOk())
    return out;
  out.config = *config;
  auto fields = ConfigFields::parse(json.dump(), "m/config.json");
  EXPECT_TRUE(fields.isOk()) << fields.status().toString();
  out.family = resolveModelFamily(*fields, out.config);
  return out;
}

std::string errorOf(const Json &json) {
  Resolved r = resolve(json);
  EXPECT_FALSE(r.family.isOk()) << json.dump();
  return r.family.isOk() ? "" : r.family.status().message();
}

TEST(ModelFamilyTest, EveryFamilyIsRegisteredByModelType) {
  EXPECT_EQ(supportedModelTypes(),
            "llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, gemma3, mixtral, qwen3_moe, "
            "qwen2_moe, bert, xlm-roberta, bart");
  for (auto [type, architecture] : {std::pair{"llama", "LlamaForCausalLM"},
                                    {"mistral", "MistralForCausalLM"},
                                    {"qwen2", "Qwen2ForCausalLM"},
                                    {"qwen3", "Qwen3ForCausalLM"},
                                    {"phi3", "Phi3ForCausalLM"},
                                    {"gemma2", "Gemma2ForCausalLM"}}) {
    Resolved r = resolve(configOf(type, architecture));
    ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
    EXPECT_EQ(std::string((*r.family)->name), type);
  }
}

TEST(ModelFamilyTest, UnknownModelTypeListsTheSupportedOnes) {
  std::string message = errorOf(configOf("gpt_neox", "GPTNeoXForCausalLM"));
  EXPECT_NE(
      message.find(
          "m/config.json: field 'model_type' is 'gpt_neox'; kiln compiles "
          "model_type: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, gemma3, mixtral, "
          "qwen3_moe"),
      std::string::npos)
      << message;
}

TEST(ModelFamilyTest, RealGpt2ConfigIsRefusedNamingItsModelType) {
  if (!fileExists(kAssets + "/configs/gpt2-gptq.config.json"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto text = readFile(kAssets + "/configs/gpt2-gptq.config.json");
  ASSERT_TRUE(text.isOk());
  Json json = Json::parse(*text);
  json.erase("quantization_config"); // not what this test is about
  json["intermediate_size"] = 3072;  // GPT-2 calls it n_inner (null); the import layer needs it
  json["vocab_size"] = 50257;
  json["hidden_size"] = 768;
  json["num_hidden_layers"] = 12;
  json["num_attention_heads"] = 12;
  std::string message = errorOf(json);
  EXPECT_NE(message.find("field 'model_type' is 'gpt2'"), std::string::npos) << message;
}

// A classification head is not a causal LM head: the architecture must be one the family builds.
TEST(ModelFamilyTest, ArchitectureOutsideTheFamilyIsRefused) {
  std::string message = errorOf(configOf("qwen2", "Qwen2ForSequenceClassification"));
  EXPECT_NE(message.find("field 'architectures' names 'Qwen2ForSequenceClassification'; for "
                         "model_type 'qwen2' kiln compiles Qwen2ForCausalLM"),
            std::string::npos)
      << message;
}

TEST(ModelFamilyTest, EveryFamilyRefusesOtherActivations) {
  for (auto [type, architecture] : {std::pair{"llama", "LlamaForCausalLM"},
                                    {"mistral", "MistralForCausalLM"},
                                    {"qwen2", "Qwen2ForCausalLM"},
                                    {"qwen3", "Qwen3ForCausalLM"},
                                    {"phi3", "Phi3ForCausalLM"}}) {
    Json json = configOf(type, architecture);
    json["hidden_act"] = "gelu";
    std::string message = errorOf(json);
    EXPECT_NE(message.find("field 'hidden_act' is 'gelu'"), std::string::npos) << message;
  }
}

// Encoders: BERT's keys (layer_norm_eps, type_vocab_size, erf gelu, absolute positions) and
// XLM-R's position offset after its padding index; what they cannot compile is refused by name.
TEST(ModelFamilyTest, EncodersReadTheirKeys) {
  Json bert = configOf("bert", "BertModel");
  bert["layer_norm_eps"] = 1e-12;
  bert["hidden_act"] = "gelu";
  Resolved r = resolve(bert);
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  EXPECT_TRUE(r.config.embeds);
  EXPECT_EQ(r.config.layerNormEps, 1e-12);
  EXPECT_EQ(r.config.typeVocabSize, 2);
  EXPECT_EQ(r.config.positionOffset, 0);
  bert["position_embedding_type"] = "relative_key";
  EXPECT_NE(errorOf(bert).find("field 'position_embedding_type' is 'relative_key'"),
            std::string::npos);
  bert["position_embedding_type"] = "absolute";
  bert["hidden_act"] = "silu";
  EXPECT_NE(errorOf(bert).find("field 'hidden_act' is 'silu'"), std::string::npos);

  Json xlmr = configOf("xlm-roberta", "XLMRobertaModel");
  xlmr["pad_token_id"] = 1;
  xlmr["type_vocab_size"] = 1;
  r = resolve(xlmr);
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  EXPECT_EQ(r.config.positionOffset, 2);
  EXPECT_EQ(r.config.typeVocabSize, 1);
  xlmr.erase("pad_token_id");
  EXPECT_NE(errorOf(xlmr).find("pad_token_id"), std::string::npos);
}

// A decoder saved as a bare <Family>Model is an embedding model (its final hidden states).
TEST(ModelFamilyTest, BareDecoderModelsEmbed) {
  for (auto [type, architecture] :
       {std::pair{"qwen3", "Qwen3Model"}, {"qwen2", "Qwen2Model"}, {"mistral", "MistralModel"}}) {
    Resolved r = resolve(configOf(type, architecture));
    ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
    EXPECT_TRUE(r.config.embeds) << architecture;
  }
  Resolved causal = resolve(configOf("qwen3", "Qwen3ForCausalLM"));
  ASSERT_TRUE(causal.family.isOk());
  EXPECT_FALSE(causal.config.embeds);
}

// Gemma 2's keys, with Gemma2Config's defaults where config.json leaves them out (soft-capping
// 50 / 30, query_pre_attn_scalar 256, window 4096 on even layers, tied), null caps as none, and
// another activation refused naming hidden_activation.
TEST(ModelFamilyTest, Gemma2ReadsItsKeysAndDefaults) {
  Resolved r = resolve(configOf("gemma2", "Gemma2ForCausalLM", 4));
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  const HfModelConfig &c = r.config;
  EXPECT_TRUE(c.geluTanhMlp && c.normPlusOne && c.sandwichNorms && c.scaleEmbeddings);
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_DOUBLE_EQ(c.attnLogitSoftcap, 50.0);
  EXPECT_DOUBLE_EQ(c.finalLogitSoftcap, 30.0);
  EXPECT_DOUBLE_EQ(c.attentionScale, 1.0 / 16.0);
  EXPECT_EQ(c.slidingWindows, (std::vector<int64_t>{4096, 0, 4096, 0}));
  Json json = configOf("gemma2", "Gemma2ForCausalLM", 3);
  json["attn_logit_softcapping"] = nullptr;
  json["final_logit_softcapping"] = 12.5;
  json["query_pre_attn_scalar"] = 144;
  json["sliding_window"] = 10;
  json["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention"};
  json["tie_word_embeddings"] = false;
  r = resolve(json);
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  EXPECT_DOUBLE_EQ(r.config.attnLogitSoftcap, 0.0);
  EXPECT_DOUBLE_EQ(r.config.finalLogitSoftcap, 12.5);
  EXPECT_DOUBLE_EQ(r.config.attentionScale, 1.0 / 12.0);
  EXPECT_EQ(r.config.slidingWindows, (std::vector<int64_t>{0, 10, 10}));
  EXPECT_FALSE(r.config.tieWordEmbeddings);
  json = configOf("gemma2", "Gemma2ForCausalLM");
  json["hidden_activation"] = "gelu";
  std::string message = errorOf(json);
  EXPECT_NE(message.find("field 'hidden_activation' is 'gelu'"), std::string::npos) << message;
  json = configOf("gemma2", "Gemma2ForCausalLM");
  json["layer_types"] = {"full_attention"};
  message = errorOf(json);
  EXPECT_NE(message.find("layer_types"), std::string::npos) << message;
}

// What compile.cc does: the family's normalized config.json, then both readers.
Resolved resolveNormalized(const Json &json) {
  Resolved out;
  auto written = ConfigFields::parse(json.dump(), "m/config.json");
  EXPECT_TRUE(written.isOk());
  auto family = findModelFamily(*written);
  EXPECT_TRUE(family.isOk()) << family.status().toString();
  if (!family.isOk())
    return out;
  auto text = familyConfigJson(**family, json.dump(), "m/config.json");
  if (!text.isOk()) {
    out.family = text.status();
    return out;
  }
  return resolve(Json::parse(*text));
}

// Gemma 3: a published text_config holds only what differs from Gemma3TextConfig's defaults; the
// multimodal wrapper's text tower is read from text_config; transformers 5's rope_parameters per
// layer kind read as the published spelling; five local layers to one global.
TEST(ModelFamilyTest, Gemma3ReadsTextConfigDefaultsAndRopePerLayerKind) {
  Json wrapper = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                  {"model_type", "gemma3"},
                  {"eos_token_id", {1, 106}},
                  {"text_config",
                   {{"hidden_size", 2560},
                    {"intermediate_size", 10240},
                    {"model_type", "gemma3_text"},
                    {"num_hidden_layers", 34},
                    {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                    {"sliding_window", 1024}}},
                  {"vision_config", {{"model_type", "siglip_vision_model"}}}};
  Resolved r = resolveNormalized(wrapper); // gemma-3-4b-it's config.json, vision_config cut
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  const HfModelConfig &c = r.config;
  EXPECT_EQ(c.architecture, "Gemma3ForConditionalGeneration");
  EXPECT_EQ(c.vocabSize, 262208);
  EXPECT_EQ(c.hiddenSize, 2560);
  EXPECT_EQ(c.numLayers, 34);
  EXPECT_EQ(c.numHeads, 8);
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_EQ(c.headDim, 256);
  EXPECT_TRUE(c.qkNorm && c.normPlusOne && c.geluTanhMlp && c.tieWordEmbeddings);
  EXPECT_DOUBLE_EQ(c.attentionScale, 1.0 / 16.0);
  EXPECT_DOUBLE_EQ(c.attnLogitSoftcap, 0.0);
  EXPECT_DOUBLE_EQ(c.finalLogitSoftcap, 0.0);
  EXPECT_DOUBLE_EQ(c.ropeTheta, 1e6);
  EXPECT_DOUBLE_EQ(c.localRopeTheta, 1e4);
  ASSERT_TRUE(c.ropeScaling.has_value());
  EXPECT_EQ(c.eosTokenIds, (std::vector<int32_t>{1, 106}));
  ASSERT_EQ(c.slidingWindows.size(), 34u);
  for (int64_t i = 0; i < 34; ++i)
    EXPECT_EQ(c.slidingWindows[i], (i + 1) % 6 == 0 ? 0 : 1024) << "layer " << i;

  Json text = configOf("gemma3_text", "Gemma3ForCausalLM", 4);
  text["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 5e5}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 2e4}}}};
  text["sliding_window_pattern"] = 2;
  r = resolveNormalized(text);
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  EXPECT_DOUBLE_EQ(r.config.ropeTheta, 5e5);
  EXPECT_DOUBLE_EQ(r.config.localRopeTheta, 2e4);
  ASSERT_TRUE(r.config.ropeScaling.has_value());
  EXPECT_EQ(r.config.slidingWindows, (std::vector<int64_t>{4096, 0, 4096, 0}));
  text["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  r = resolveNormalized(text);
  ASSERT_FALSE(r.family.isOk());
  EXPECT_NE(r.family.status().message().find("rope_parameters.sliding_attention.rope_type"),
            std::string::npos)
      << r.family.status().message();
  wrapper.erase("text_config");
  r = resolveNormalized(wrapper);
  ASSERT_FALSE(r.family.isOk());
  EXPECT_NE(r.family.status().message().find("text_config"), std::string::npos);
}

// Mixture-of-experts keys: Mixtral's experts always renormalized; Qwen3-MoE's norm_topk_prob
// (default false), moe_intermediate_size, and the dense layers of mlp_only_layers and
// decoder_sparse_step; a missing expert count is named.
TEST(ModelFamilyTest, MoeFamiliesReadTheirExperts) {
  Json mixtral = configOf("mixtral", "MixtralForCausalLM");
  mixtral["num_local_experts"] = 8;
  mixtral["num_experts_per_tok"] = 2;
  Resolved r = resolve(mixtral);
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  EXPECT_EQ(r.config.numExperts, 8);
  EXPECT_EQ(r.config.expertsPerToken, 2);
  EXPECT_EQ(r.config.expertIntermediate, 128);
  EXPECT_TRUE(r.config.renormalizeExperts);
  EXPECT_TRUE(r.config.denseMlpLayers.empty());
  Json qwen = configOf("qwen3_moe", "Qwen3MoeForCausalLM", 4);
  qwen["num_experts"] = 16;
  qwen["num_experts_per_tok"] = 4;
  qwen["moe_intermediate_size"] = 48;
  qwen["mlp_only_layers"] = {0};
  qwen["decoder_sparse_step"] = 2;
  r = resolve(qwen);
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  EXPECT_EQ(r.config.expertIntermediate, 48);
  EXPECT_FALSE(r.config.renormalizeExperts);
  EXPECT_TRUE(r.config.qkNorm);
  // Layer 0 listed; layers 0 and 2 also fail (i + 1) % 2 == 0.
  EXPECT_EQ(r.config.denseMlpLayers, (std::vector<bool>{true, false, true, false}));
  qwen["num_experts_per_tok"] = 17;
  std::string message = errorOf(qwen);
  EXPECT_NE(message.find("num_experts_per_tok"), std::string::npos) << message;
  mixtral.erase("num_local_experts");
  message = errorOf(mixtral);
  EXPECT_NE(message.find("num_local_experts"), std::string::npos) << message;
}

// Qwen2-MoE: Qwen3-MoE's expert keys plus a shared expert of shared_expert_intermediate_size
// (required: Qwen2MoeConfig's default 5632 would not fit a smaller checkpoint); q/k/v biases by
// qkv_bias (default true), none on o_proj, no q/k norms.
TEST(ModelFamilyTest, Qwen2MoeReadsTheSharedExpertAndQkvBias) {
  Json qwen = configOf("qwen2_moe", "Qwen2MoeForCausalLM", 4);
  qwen["num_experts"] = 8;
  qwen["num_experts_per_tok"] = 4;
  qwen["moe_intermediate_size"] = 32;
  qwen["shared_expert_intermediate_size"] = 96;
  qwen["decoder_sparse_step"] = 2;
  Resolved r = resolve(qwen);
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  EXPECT_EQ(std::string((*r.family)->name), "qwen2_moe");
  EXPECT_EQ(r.config.numExperts, 8);
  EXPECT_EQ(r.config.expertIntermediate, 32);
  EXPECT_EQ(r.config.sharedExpertIntermediate, 96);
  EXPECT_FALSE(r.config.renormalizeExperts);
  EXPECT_EQ(r.config.denseMlpLayers, (std::vector<bool>{true, false, true, false}));
  EXPECT_TRUE(r.config.qkvBias && !r.config.oBias && !r.config.qkNorm);
  qwen["qkv_bias"] = false;
  EXPECT_FALSE(resolve(qwen).config.qkvBias);
  qwen.erase("shared_expert_intermediate_size");
  std::string message = errorOf(qwen);
  EXPECT_NE(message.find("shared_expert_intermediate_size"), std::string::npos) << message;
}

TEST(ModelFamilyTest, BiasesAndQkNormFollowTheFamily) {
  Json llama = configOf("llama", "LlamaForCausalLM");
  llama["attention_bias"] = true;
  Resolved r = resolve(llama);
  EXPECT_TRUE(r.config.qkvBias && r.config.oBias && !r.config.qkNorm);
  r = resolve(configOf("qwen2", "Qwen2ForCausalLM")); // q/k/v biases, none on o_proj
  EXPECT_TRUE(r.config.qkvBias && !r.config.oBias && !r.config.qkNorm);
  r = resolve(configOf("qwen3", "Qwen3ForCausalLM"));
  EXPECT_TRUE(!r.config.qkvBias && !r.config.oBias && r.config.qkNorm);
  r = resolve(configOf("mistral", "MistralForCausalLM"));
  EXPECT_TRUE(!r.config.qkvBias && !r.config.oBias && !r.config.qkNorm);
}

TEST(ModelFamilyTest, MistralAndPhi3WindowEveryLayer) {
  for (auto [type, architecture] :
       {std::pair{"mistral", "MistralForCausalLM"}, {"phi3", "Phi3ForCausalLM"}}) {
    Json json = configOf(type, architecture);
    Resolved r = resolve(json);
    EXPECT_TRUE(r.config.slidingWindows.empty()) << type; // no sliding_window: full attention
    json["sliding_window"] = nullptr;
    EXPECT_TRUE(resolve(json).config.slidingWindows.empty()) << type;
    json["sliding_window"] = 2047;
    EXPECT_EQ(resolve(json).config.slidingWindows, (std::vector<int64_t>{2047, 2047, 2047}))
        << type;
    json["sliding_window"] = 0;
    EXPECT_NE(errorOf(json).find("field 'sliding_window' must be positive, got 0"),
              std::string::npos)
        << type;
  }
}

// transformers' Qwen2Config/Qwen3Config: windows only with use_sliding_window, from
// max_window_layers on unless layer_types says which layers slide.
TEST(ModelFamilyTest, QwenWindowsFollowUseSlidingWindowAndLayerTypes) {
  for (auto [type, architecture] :
       {std::pair{"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}}) {
    Json json = configOf(type, architecture);
    json["sliding_window"] = 8;
    json["max_window_layers"] = 1;
    EXPECT_TRUE(resolve(json).config.slidingWindows.empty()) << type;
    json["use_sliding_window"] = true;
    EXPECT_EQ(resolve(json).config.slidingWindows, (std::vector<int64_t>{0, 8, 8})) << type;
    json["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
    EXPECT_EQ(resolve(json).config.slidingWindows, (std::vector<int64_t>{8, 0, 8})) << type;
    json["use_sliding_window"] = false; // a sliding layer attends fully without the switch
    EXPECT_TRUE(resolve(json).config.slidingWindows.empty()) << type;
    json["use_sliding_window"] = true;
    json["layer_types"] = {"sliding_attention", "full_attention"};
    EXPECT_NE(errorOf(json).find("field 'layer_types' lists 2 attention kinds for "
                                 "num_hidden_layers 3"),
              std::string::npos)
        << type;
    json["layer_types"] = {"sliding_attention", "linear_attention", "full_attention"};
    EXPECT_NE(errorOf(json).find("field 'layer_types' holds 'linear_attention'"), std::string::npos)
        << type;
  }
}

// Phi3Config reads the "su" and "yarn" types of early Phi-3 releases as longrope; other families
// read "yarn" as yarn and refuse "su".
TEST(ModelFamilyTest, Phi3ReadsSuAndYarnAsLongrope) {
  for (const char *type : {"su", "yarn"}) {
    Json json = configOf("phi3", "Phi3ForCausalLM");
    json["original_max_position_embeddings"] = 64;
    json["rope_scaling"] = {{"type", type},
                            {"short_factor", std::vector<double>(8, 1.0)},
                            {"long_factor", std::vector<double>(8, 2.0)}};
    auto fields = ConfigFields::parse(json.dump(), "m/config.json");
    ASSERT_TRUE(fields.isOk());
    auto family = findModelFamily(*fields);
    ASSERT_TRUE(family.isOk()) << family.status().toString();
    auto config = parseHfModelConfig(json.dump(), "", "m/config.json", (*family)->ropeTypeAliases);
    ASSERT_TRUE(config.isOk()) << type << ": " << config.status().toString();
    ASSERT_TRUE(config->ropeScaling.has_value());
    EXPECT_EQ(config->ropeScaling->type, "longrope") << type;
    EXPECT_EQ(ropeTables(*config).mode, RopeMode::kLongShort) << type;
  }
  Json qwen = configOf("qwen2", "Qwen2ForCausalLM");
  qwen["rope_scaling"] = {{"type", "su"}, {"factor", 2.0}};
  auto refused = parseHfModelConfig(qwen.dump(), "", "m/config.json");
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("field 'rope_scaling.type' is 'su'"), std::string::npos)
      << refused.status().message();
}

TEST(ModelFamilyTest, RealMistralConfigHasFullAttention) {
  const std::string path = kAssets + "/tokenizers/mistral-7b-instruct-v0.3/config.json";
  if (!fileExists(path))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto text = readFile(path);
  ASSERT_TRUE(text.isOk());
  Resolved r = resolve(Json::parse(*text));
  ASSERT_TRUE(r.family.isOk()) << r.family.status().toString();
  EXPECT_EQ(std::string((*r.family)->name), "mistral");
  EXPECT_TRUE(r.config.slidingWindows.empty()); // v0.3: "sliding_window": null
}

} // namespace
} // namespace kiln::compiler
