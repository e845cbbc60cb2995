#include "compiler/import/hf_config.h"

#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <tuple>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;

const std::string kAssets = KILN_ASSETS_DIR;

// A small valid Llama config; each error test breaks one field of it.
Json baseConfig() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 384,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": null,
    "max_position_embeddings": 512, "tie_word_embeddings": true,
    "bos_token_id": 1, "eos_token_id": 2
  })");
}

Result<HfModelConfig> parse(const Json &config, const std::string &generation = "") {
  return parseHfModelConfig(config.dump(), generation, "m/config.json");
}

// The parse must fail, and its message must name `field` (and `alsoNamed` when given).
void expectError(const Json &config, const std::string &field, const std::string &alsoNamed = "",
                 const std::string &generation = "") {
  auto result = parse(config, generation);
  ASSERT_FALSE(result.isOk()) << "expected an error naming " << field;
  const std::string &message = result.status().message();
  EXPECT_NE(message.find("'" + field + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  if (!alsoNamed.empty())
    EXPECT_NE(message.find(alsoNamed), std::string::npos) << message;
}

bool haveAsset(const std::string &relative) {
  return fileExists(kAssets + "/" + relative);
}

TEST(HfConfigTest, TinyStories656KFromAssets) {
  if (!haveAsset("models/tinystories-656K-hf/config.json"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto config = loadHfModelConfig(kAssets + "/models/tinystories-656K-hf");
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  EXPECT_EQ(config->modelType, "llama");
  EXPECT_EQ(config->architecture, "LlamaForCausalLM");
  EXPECT_EQ(config->vocabSize, 2048);
  EXPECT_EQ(config->hiddenSize, 128);
  EXPECT_EQ(config->intermediateSize, 384);
  EXPECT_EQ(config->numLayers, 2);
  EXPECT_EQ(config->numHeads, 8);
  EXPECT_EQ(config->numKvHeads, 4);
  EXPECT_EQ(config->headDim, 16);
  EXPECT_DOUBLE_EQ(config->rmsNormEps, 1e-6);
  EXPECT_DOUBLE_EQ(config->ropeTheta, 10000.0);
  EXPECT_FALSE(config->ropeScaling.has_value());
  EXPECT_TRUE(config->tieWordEmbeddings);
  EXPECT_FALSE(config->attentionBias);
  EXPECT_FALSE(config->mlpBias);
  EXPECT_EQ(config->maxPositionEmbeddings, 512);
  EXPECT_EQ(config->torchDtype, "float32");
  EXPECT_EQ(config->bosTokenId, 1);
  EXPECT_EQ(config->eosTokenIds, std::vector<int32_t>({2}));
  EXPECT_EQ(config->padTokenId, -1);
}

TEST(HfConfigTest, Stories260KFromAssetsHasExplicitHeadDim) {
  if (!haveAsset("models/stories260K-hf/config.json"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto config = loadHfModelConfig(kAssets + "/models/stories260K-hf");
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  EXPECT_EQ(config->vocabSize, 512);
  EXPECT_EQ(config->hiddenSize, 64);
  EXPECT_EQ(config->intermediateSize, 172);
  EXPECT_EQ(config->numLayers, 5);
  EXPECT_EQ(config->numHeads, 8);
  EXPECT_EQ(config->numKvHeads, 4);
  EXPECT_EQ(config->headDim, 8);
  EXPECT_DOUBLE_EQ(config->rmsNormEps, 1e-5);
  EXPECT_TRUE(config->tieWordEmbeddings);
  EXPECT_EQ(config->bosTokenId, 1);
  EXPECT_EQ(config->eosTokenIds, std::vector<int32_t>({2}));
}

Result<HfModelConfig> parseAsset(const std::string &relative) {
  KILN_ASSIGN_OR_RETURN(std::string text, readFile(kAssets + "/" + relative));
  return parseHfModelConfig(text, "", relative);
}

// bitsandbytes (8-bit, quantized at load time from the stored weights) is not a format kiln reads.
TEST(HfConfigTest, BitsAndBytesFinetuneIsRejected) {
  if (!haveAsset("configs/llama-3.2-1b-finetune.config.json"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto config = parseAsset("configs/llama-3.2-1b-finetune.config.json");
  ASSERT_FALSE(config.isOk());
  EXPECT_EQ(config.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(config.status().message().find("'quantization_config.quant_method' is 'bitsandbytes'"),
            std::string::npos)
      << config.status().message();
}

// A real GPTQ config (GPT-2's: 4-bit, group 128, sym, desc_act false) reads as kiln's settings.
TEST(HfConfigTest, GptqConfigIsRead) {
  if (!haveAsset("configs/gpt2-gptq.config.json"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto text = readFile(kAssets + "/configs/gpt2-gptq.config.json");
  ASSERT_TRUE(text.isOk());
  auto fields = ConfigFields::parse(*text, "gpt2-gptq.config.json");
  ASSERT_TRUE(fields.isOk());
  auto q = parseHfQuantization(*fields);
  ASSERT_TRUE(q.isOk()) << q.status().toString();
  ASSERT_TRUE(q->has_value());
  EXPECT_EQ((*q)->method, HfQuantization::Method::kGptq);
  EXPECT_EQ((*q)->groupSize, 128);
  EXPECT_TRUE((*q)->symmetric);
  EXPECT_TRUE((*q)->zerosMinusOne); // no checkpoint_format: the original "gptq"
}

// transformers' FineGrainedFP8Config as the FP8 checkpoints write it (DeepSeek-V3, Qwen3-FP8):
// weight_block_size read, [128, 128] when absent; a static activation scheme reads the same (kiln
// computes activations in the compile's dtype either way).
TEST(HfConfigTest, Fp8BlockConfigIsRead) {
  for (const bool withBlock : {true, false}) {
    Json q = {{"quant_method", "fp8"},
              {"activation_scheme", withBlock ? "dynamic" : "static"},
              {"fmt", "e4m3"}};
    if (withBlock)
      q["weight_block_size"] = {64, 32};
    auto fields = ConfigFields::parse(Json{{"quantization_config", q}}.dump(), "config.json");
    ASSERT_TRUE(fields.isOk());
    auto parsed = parseHfQuantization(*fields);
    ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
    ASSERT_TRUE(parsed->has_value());
    EXPECT_EQ((*parsed)->method, HfQuantization::Method::kFp8);
    EXPECT_STREQ((*parsed)->methodName(), "fp8");
    EXPECT_EQ((*parsed)->blockRows, withBlock ? 64 : 128);
    EXPECT_EQ((*parsed)->blockColumns, withBlock ? 32 : 128);
  }
}

// The import layer reads any decoder's common fields; which model types compile is the model
// families' call (tests/compiler/models/model_family_test.cc).
TEST(HfConfigTest, OtherFamiliesCommonFieldsAreRead) {
  if (!haveAsset("tokenizers/mistral-7b-instruct-v0.3/config.json"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto config = parseAsset("tokenizers/mistral-7b-instruct-v0.3/config.json");
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  EXPECT_EQ(config->modelType, "mistral");
  EXPECT_EQ(config->architecture, "MistralForCausalLM");
  EXPECT_EQ(config->vocabSize, 32768);
  EXPECT_EQ(config->numKvHeads, 8);
  EXPECT_EQ(config->headDim, 128);
  EXPECT_DOUBLE_EQ(config->ropeTheta, 1000000.0);
}

TEST(HfConfigTest, FinetuneWithoutQuantizationHasLlama3RopeScaling) {
  if (!haveAsset("configs/llama-3.2-1b-finetune.config.json"))
    GTEST_SKIP() << "assets not found at " << kAssets;
  auto text = readFile(kAssets + "/configs/llama-3.2-1b-finetune.config.json");
  ASSERT_TRUE(text.isOk());
  Json json = Json::parse(*text);
  json.erase("quantization_config");
  auto config = parse(json);
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  ASSERT_TRUE(config->ropeScaling.has_value());
  EXPECT_EQ(config->ropeScaling->type, "llama3");
  EXPECT_DOUBLE_EQ(config->ropeScaling->factor, 32.0);
  EXPECT_DOUBLE_EQ(config->ropeScaling->lowFreqFactor, 1.0);
  EXPECT_DOUBLE_EQ(config->ropeScaling->highFreqFactor, 4.0);
  EXPECT_EQ(config->ropeScaling->originalMaxPositionEmbeddings, 8192);
  EXPECT_DOUBLE_EQ(config->ropeTheta, 500000.0);
  EXPECT_EQ(config->headDim, 64);
  EXPECT_EQ(config->numHeads, 32);
  EXPECT_EQ(config->numKvHeads, 8);
  EXPECT_EQ(config->numLayers, 16);
  EXPECT_EQ(config->vocabSize, 128256);
  EXPECT_EQ(config->maxPositionEmbeddings, 131072);
  EXPECT_EQ(config->torchDtype, "float16");
  EXPECT_EQ(config->bosTokenId, 128000);
  EXPECT_EQ(config->eosTokenIds, std::vector<int32_t>({128001}));
}

TEST(HfConfigTest, EosIdsAreTheUnionInFirstSeenOrder) {
  Json config = baseConfig();
  config["eos_token_id"] = {128001, 128008, 128009};
  config["bos_token_id"] = 1;
  config["pad_token_id"] = 3;
  auto parsed = parse(config, R"({"eos_token_id": [128009, 128001, 7], "bos_token_id": 5,
                                  "pad_token_id": null})");
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->eosTokenIds, std::vector<int32_t>({128001, 128008, 128009, 7}));
  EXPECT_EQ(parsed->bosTokenId, 5); // generation_config.json overrides when set
  EXPECT_EQ(parsed->padTokenId, 3); // ... and not when null

  config.erase("eos_token_id");
  config["pad_token_id"] = -1; // early Llama conversions: "no pad token"
  parsed = parse(config, R"({"eos_token_id": 9})");
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->eosTokenIds, std::vector<int32_t>({9}));
  EXPECT_EQ(parsed->padTokenId, -1);
}

TEST(HfConfigTest, DefaultsWhenOptionalFieldsAreAbsent) {
  Json config = baseConfig();
  for (const char *key : {"num_key_value_heads", "rms_norm_eps", "rope_theta", "rope_scaling",
                          "max_position_embeddings", "tie_word_embeddings", "hidden_act",
                          "bos_token_id", "eos_token_id", "architectures"})
    config.erase(key);
  auto parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->numKvHeads, 8);
  EXPECT_EQ(parsed->headDim, 16);
  EXPECT_DOUBLE_EQ(parsed->rmsNormEps, 1e-6);
  EXPECT_DOUBLE_EQ(parsed->ropeTheta, 10000.0);
  EXPECT_EQ(parsed->maxPositionEmbeddings, 2048);
  EXPECT_FALSE(parsed->tieWordEmbeddings);
  EXPECT_EQ(parsed->bosTokenId, -1);
  EXPECT_TRUE(parsed->eosTokenIds.empty());
  EXPECT_EQ(parsed->architecture, "");
}

TEST(HfConfigTest, RopeScalingTypeKeys) {
  Json config = baseConfig();
  config["rope_scaling"] = {{"type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192}};
  auto parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  ASSERT_TRUE(parsed->ropeScaling.has_value());
  EXPECT_DOUBLE_EQ(parsed->ropeScaling->factor, 8.0);

  config["rope_scaling"] = {{"rope_type", "default"}};
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_FALSE(parsed->ropeScaling.has_value());

  // transformers 5 writes rope_parameters instead.
  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = {
      {"rope_type", "llama3"},   {"rope_theta", 500000.0},
      {"factor", 32.0},          {"low_freq_factor", 1.0},
      {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  ASSERT_TRUE(parsed->ropeScaling.has_value());
  EXPECT_DOUBLE_EQ(parsed->ropeScaling->factor, 32.0);
  EXPECT_DOUBLE_EQ(parsed->ropeTheta, 500000.0);
}

TEST(HfConfigTest, UnsupportedRopeScalingNamesTheField) {
  Json config = baseConfig();
  // The message names the key the file uses and lists what kiln supports.
  config["rope_scaling"] = {{"rope_type", "su"}, {"factor", 2.0}};
  expectError(config, "rope_scaling.rope_type", "'su'");
  expectError(config, "rope_scaling.rope_type", "default, linear, dynamic, yarn, longrope, llama3");
  config["rope_scaling"] = {{"type", "ntk"}, {"factor", 2.0}};
  expectError(config, "rope_scaling.type", "'ntk'");
  config.erase("rope_scaling");
  config["rope_parameters"] = {{"rope_type", "mrope"}, {"rope_theta", 1e4}};
  expectError(config, "rope_parameters.rope_type", "'mrope'");
  config["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}},
                               {"sliding_attention", {{"rope_type", "linear"}, {"factor", 8.0}}}};
  expectError(config, "rope_parameters.full_attention", "per layer type");
  config = baseConfig();
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"low_freq_factor", 1.0}};
  expectError(config, "rope_scaling.factor", "missing");
  config["rope_scaling"] = "llama3";
  expectError(config, "rope_scaling");
}

// Each bad value names its field (as the file spells it) and the limit it breaks. The base
// config's head_dim is 16: 8 rotary pairs.
TEST(HfConfigTest, BadRopeScalingValuesNameFieldAndLimit) {
  const Json seven = std::vector<double>(7, 1.0), eight = std::vector<double>(8, 1.0),
             nine = std::vector<double>(9, 2.0);
  const std::vector<std::tuple<Json, std::string, std::string>> cases = {
      {{{"type", "linear"}, {"factor", 0.0}}, "rope_scaling.factor", "positive"},
      {{{"type", "linear"}}, "rope_scaling.factor", "missing"},
      {{{"rope_type", "dynamic"}, {"factor", -2.0}}, "rope_scaling.factor", "positive"},
      {{{"rope_type", "dynamic"}, {"factor", "2"}}, "rope_scaling.factor", "number"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", -1.0}},
       "rope_scaling.attention_factor",
       "positive"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", -32}},
       "rope_scaling.beta_fast",
       "positive"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 0}},
       "rope_scaling.original_max_position_embeddings",
       "positive"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", "no"}},
       "rope_scaling.truncate",
       "true or false"},
      {{{"type", "longrope"}, {"short_factor", seven}, {"long_factor", eight}},
       "rope_scaling.short_factor",
       "rotary_dim/2 = 8"},
      {{{"type", "longrope"}, {"short_factor", eight}, {"long_factor", nine}},
       "rope_scaling.long_factor",
       "got 9"},
      {{{"type", "longrope"}, {"short_factor", eight}}, "rope_scaling.long_factor", "missing"},
      {{{"type", "longrope"}, {"short_factor", eight}, {"long_factor", {1, 1, 1, 0, 1, 1, 1, 1}}},
       "rope_scaling.long_factor",
       "positive"},
      {{{"type", "longrope"}, {"short_factor", eight}, {"long_factor", eight}, {"factor", 0}},
       "rope_scaling.factor",
       "positive"},
      {{{"type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 1.5}},
       "rope_scaling.partial_rotary_factor",
       "(0, 1]"},
  };
  for (const auto &[scaling, field, limit] : cases) {
    Json config = baseConfig();
    config["rope_scaling"] = scaling;
    SCOPED_TRACE(scaling.dump());
    expectError(config, field, limit);
  }
}

TEST(HfConfigTest, PartialRotaryFactorGivesTheRotaryDim) {
  Json config = baseConfig(); // head_dim 16
  auto parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_DOUBLE_EQ(parsed->partialRotaryFactor, 1.0);
  EXPECT_EQ(parsed->rotaryDim, 16);
  config["partial_rotary_factor"] = 0.5;
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_DOUBLE_EQ(parsed->partialRotaryFactor, 0.5);
  EXPECT_EQ(parsed->rotaryDim, 8);
  EXPECT_EQ(ropeTables(*parsed).invFreq.size(), 4u);
  // int(16 * 0.3) = 4: Python's truncation.
  config["partial_rotary_factor"] = 0.3;
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->rotaryDim, 4);
  // rope_parameters' own value wins over the top level's (transformers 5).
  config["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.25}};
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->rotaryDim, 4);
  config["rope_parameters"]["partial_rotary_factor"] = 0.75;
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->rotaryDim, 12);

  config = baseConfig();
  config["partial_rotary_factor"] = 0.3125; // 5 dims: odd
  expectError(config, "partial_rotary_factor", "even");
  config["partial_rotary_factor"] = 0.0;
  expectError(config, "partial_rotary_factor", "(0, 1]");
  config.erase("partial_rotary_factor");
  config["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.0625}};
  expectError(config, "rope_parameters.partial_rotary_factor", "even");
}

TEST(HfConfigTest, EveryRopeScalingTypeParses) {
  Json config = baseConfig(); // max_position_embeddings 512
  config["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->ropeScaling->type, "linear");
  EXPECT_DOUBLE_EQ(parsed->ropeScaling->factor, 4.0);

  config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  RopeTables tables = ropeTables(*parsed);
  EXPECT_EQ(tables.mode, RopeMode::kDynamicNtk);
  EXPECT_EQ(tables.originalMaxPositions, 512); // max_position_embeddings
  EXPECT_DOUBLE_EQ(tables.dynamicFactor, 2.0);
  EXPECT_EQ(tables.ropeTheta, 10000.0f);

  config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0},
                            {"beta_fast", 0},      {"beta_slow", 2},
                            {"mscale", 0.707},     {"mscale_all_dim", 0.5},
                            {"truncate", false},   {"attention_factor", 1.2}};
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  const RopeScaling &yarn = *parsed->ropeScaling;
  EXPECT_DOUBLE_EQ(yarn.betaFast, 32.0); // 0 is transformers' "unset" (`or 32`)
  EXPECT_DOUBLE_EQ(yarn.betaSlow, 2.0);
  EXPECT_DOUBLE_EQ(yarn.mscale, 0.707);
  EXPECT_DOUBLE_EQ(yarn.mscaleAllDim, 0.5);
  EXPECT_FALSE(yarn.truncate);
  EXPECT_EQ(yarn.originalMaxPositionEmbeddings, 512); // defaults to max_position_embeddings
  EXPECT_EQ(ropeTables(*parsed).attentionScaling, 1.2f);

  // longrope: factor derived from the context lengths, Phi-3's top-level original length wins.
  const std::vector<double> shortFactor(8, 1.0), longFactor(8, 4.0);
  config["max_position_embeddings"] = 8192;
  config["original_max_position_embeddings"] = 2048;
  config["rope_scaling"] = {{"type", "longrope"},
                            {"short_factor", shortFactor},
                            {"long_factor", longFactor},
                            {"original_max_position_embeddings", 4096}};
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->ropeScaling->originalMaxPositionEmbeddings, 2048);
  EXPECT_DOUBLE_EQ(parsed->ropeScaling->factor, 4.0);
  EXPECT_EQ(parsed->ropeScaling->shortFactor, shortFactor);
  EXPECT_EQ(parsed->ropeScaling->longFactor, longFactor);
  tables = ropeTables(*parsed);
  EXPECT_EQ(tables.mode, RopeMode::kLongShort);
  EXPECT_EQ(tables.originalMaxPositions, 2048);
  EXPECT_EQ(tables.attentionScaling,
            static_cast<float>(std::sqrt(1 + std::log(4.0) / std::log(2048.0))));
  ASSERT_EQ(tables.longInvFreq.size(), 8u);
  EXPECT_EQ(tables.longInvFreq[0], 0.25f);
  EXPECT_EQ(tables.invFreq[0], 1.0f);
  config.erase("original_max_position_embeddings");
  parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->ropeScaling->originalMaxPositionEmbeddings, 4096);
  EXPECT_DOUBLE_EQ(parsed->ropeScaling->factor, 2.0);
}

TEST(HfConfigTest, UnsupportedSettingsNameTheField) {
  Json config = baseConfig();
  config["quantization_config"] = {{"quant_method", "awq"}};
  expectError(config, "quantization_config.bits");
  config["quantization_config"] = {
      {"quant_method", "awq"}, {"bits", 4}, {"group_size", 64}, {"version", "gemv"}};
  expectError(config, "quantization_config.version");
}

TEST(HfConfigTest, MissingRequiredFieldsAreNamed) {
  for (const char *key : {"model_type", "vocab_size", "hidden_size", "intermediate_size",
                          "num_hidden_layers", "num_attention_heads"}) {
    Json config = baseConfig();
    config.erase(key);
    SCOPED_TRACE(key);
    expectError(config, key, "missing");
  }
}

TEST(HfConfigTest, WrongJsonTypesAreNamed) {
  std::vector<std::pair<std::string, Json>> cases = {
      {"hidden_size", "128"},         {"vocab_size", 2048.5},     {"rms_norm_eps", "1e-6"},
      {"tie_word_embeddings", "yes"}, {"eos_token_id", "2"},      {"eos_token_id", {2, "3"}},
      {"bos_token_id", 1.5},          {"model_type", 7},          {"architectures", "Llama"},
      {"num_key_value_heads", 0},     {"rope_theta", {{"x", 1}}}, {"intermediate_size", -5}};
  for (const auto &[key, value] : cases) {
    Json config = baseConfig();
    config[key] = value;
    SCOPED_TRACE(key + " = " + value.dump());
    expectError(config, key);
  }
}

TEST(HfConfigTest, DivisibilityIsChecked) {
  Json config = baseConfig();
  config["num_key_value_heads"] = 3;
  expectError(config, "num_attention_heads", "'num_key_value_heads'");
  config = baseConfig();
  config["hidden_size"] = 100;
  expectError(config, "hidden_size", "'head_dim'");
  // An explicit head_dim does not need to divide hidden_size.
  config["head_dim"] = 32;
  auto parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(parsed->headDim, 32);
  config["head_dim"] = 15;
  expectError(config, "head_dim", "even");
}

// Found by tests/fuzz/hf_config_fuzz: the RoPE tables hold head_dim / 2 floats and are built from
// the config before any weight is read, so head_dim 2^40 asked for 2 TiB (and 4e8 for 800 MB).
TEST(HfConfigTest, HeadDimIsBoundedBeforeItSizesTheRopeTables) {
  Json config = baseConfig();
  config["head_dim"] = int64_t(1) << 40;
  expectError(config, "head_dim", "up to 4096");
  config.erase("head_dim"); // derived as hidden_size / num_attention_heads
  config["hidden_size"] = config["num_attention_heads"].get<int64_t>() * (int64_t(1) << 40);
  expectError(config, "hidden_size", "gives head_dim 1099511627776");
  config = baseConfig();
  config["head_dim"] = 4096;
  auto parsed = parse(config);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(ropeTables(*parsed).invFreq.size(), 2048u);
}

TEST(HfConfigTest, InvalidJsonNamesTheFile) {
  auto parsed = parseHfModelConfig("{\"model_type\": ", "", "dir/config.json");
  ASSERT_FALSE(parsed.isOk());
  EXPECT_NE(parsed.status().message().find("dir/config.json"), std::string::npos);
  parsed = parseHfModelConfig(baseConfig().dump(), "[1,", "dir/config.json");
  ASSERT_FALSE(parsed.isOk());
  EXPECT_NE(parsed.status().message().find("dir/generation_config.json"), std::string::npos)
      << parsed.status().message();
  parsed = parseHfModelConfig(baseConfig().dump(), R"({"eos_token_id": "x"})", "dir/config.json");
  ASSERT_FALSE(parsed.isOk());
  EXPECT_NE(parsed.status().message().find("dir/generation_config.json: field 'eos_token_id'"),
            std::string::npos)
      << parsed.status().message();
}

TEST(HfConfigTest, MissingDirectoryIsNotFound) {
  auto parsed = loadHfModelConfig("/nonexistent/kiln-model");
  ASSERT_FALSE(parsed.isOk());
  EXPECT_EQ(parsed.status().code(), StatusCode::kNotFound);
  EXPECT_NE(parsed.status().message().find("/nonexistent/kiln-model/config.json"),
            std::string::npos);
}

} // namespace
} // namespace kiln::compiler
