// RoPE tables (compiler/import/rope_scaling.h) against transformers' rotary embeddings, recorded by
// tools/goldens/make_rope_golden.py in tests/data/golden/rope_inv_freq.json: every case's config
// goes through parseHfModelConfig as config.json text, so parsing and arithmetic are checked
// together.
#include "compiler/import/hf_config.h"

#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;

// float32 pow differs by at most an ulp or two between libm and torch's vectorized pow.
constexpr double kRelativeTolerance = 1e-6;

Json loadGolden() {
  auto text = readFile(std::string(KILN_TEST_DATA_DIR) + "/golden/rope_inv_freq.json");
  EXPECT_TRUE(text.isOk()) << text.status().toString();
  return text.isOk() ? Json::parse(*text) : Json();
}

// A config.json for the case: its "config" fields (the scaled cases) or, for the first cases, a
// Llama with the case's theta, head_dim and scaling (as make_rope_golden.py built them).
Json configJsonFor(const Json &testCase) {
  const int64_t headDim = testCase["head_dim"].get<int64_t>();
  Json config = {{"model_type", "llama"},
                 {"vocab_size", 32},
                 {"hidden_size", 4 * headDim},
                 {"intermediate_size", 64},
                 {"num_hidden_layers", 1},
                 {"num_attention_heads", 4},
                 {"head_dim", headDim},
                 {"max_position_embeddings", 131072},
                 {"rope_theta", testCase["rope_theta"]}};
  if (!testCase["rope_scaling"].is_null())
    config["rope_scaling"] = testCase["rope_scaling"];
  if (testCase.contains("config"))
    config.update(testCase["config"]);
  return config;
}

HfModelConfig parseCase(const Json &testCase) {
  auto parsed = parseHfModelConfig(configJsonFor(testCase).dump(), "", "golden/config.json");
  EXPECT_TRUE(parsed.isOk()) << parsed.status().toString();
  return parsed.isOk() ? *parsed : HfModelConfig();
}

void expectRow(const std::vector<float> &actual, const Json &expectedJson,
               const std::string &what) {
  std::vector<double> expected = expectedJson.get<std::vector<double>>();
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], kRelativeTolerance * std::abs(expected[i]))
        << what << "[" << i << "]";
}

std::string typeOf(const HfModelConfig &config) {
  return config.ropeScaling ? config.ropeScaling->type : "default";
}

TEST(RopeInvFreqTest, MatchesTransformers) {
  Json golden = loadGolden();
  ASSERT_GE(golden["cases"].size(), 20u);
  std::set<std::string> types;
  int partialCases = 0, longRows = 0, shortRows = 0, dynamicAbove = 0, explicitAttention = 0;
  for (const Json &testCase : golden["cases"]) {
    SCOPED_TRACE(testCase["name"].get<std::string>());
    HfModelConfig config = parseCase(testCase);
    const RopeTables tables = ropeTables(config);
    types.insert(typeOf(config));
    expectRow(tables.invFreq, testCase["inv_freq"], "inv_freq");
    // The wrapper the model builders call gives the construction-time row.
    EXPECT_EQ(ropeInverseFrequencies(config, tables.rotaryDim), tables.invFreq);
    if (testCase.contains("rotary_dim")) {
      EXPECT_EQ(tables.rotaryDim, testCase["rotary_dim"].get<int64_t>());
      partialCases += tables.rotaryDim < config.headDim;
    }
    const float attentionScaling = testCase.value("attention_scaling", 1.0);
    EXPECT_EQ(tables.attentionScaling, attentionScaling);
    if (config.ropeScaling && config.ropeScaling->attentionFactor)
      ++explicitAttention;
    const std::string type = typeOf(config);
    EXPECT_EQ(tables.mode, type == "longrope"  ? RopeMode::kLongShort
                           : type == "dynamic" ? RopeMode::kDynamicNtk
                                               : RopeMode::kStatic);
    for (const Json &at : testCase.value("at_seq_len", Json::array())) {
      const int64_t seqLen = at["seq_len"].get<int64_t>();
      SCOPED_TRACE("seq_len " + std::to_string(seqLen));
      if (tables.mode == RopeMode::kLongShort) {
        const bool useLong = seqLen > tables.originalMaxPositions;
        (useLong ? longRows : shortRows) += 1;
        expectRow(useLong ? tables.longInvFreq : tables.invFreq, at["inv_freq"], "longrope row");
      } else {
        ASSERT_EQ(tables.mode, RopeMode::kDynamicNtk);
        dynamicAbove += seqLen > tables.originalMaxPositions;
        expectRow(dynamicNtkInvFreq(tables, seqLen), at["inv_freq"], "dynamic row");
      }
    }
  }
  EXPECT_EQ(types,
            (std::set<std::string>{"default", "linear", "dynamic", "yarn", "longrope", "llama3"}));
  EXPECT_GE(partialCases, 5);
  EXPECT_GE(longRows, 4);
  EXPECT_GE(shortRows, 4);
  EXPECT_GE(dynamicAbove, 10);
  EXPECT_GE(explicitAttention, 2);
}

// transformers 5 writes the scaling into `rope_parameters` (with rope_theta): the same tables.
TEST(RopeInvFreqTest, RopeParametersGiveTheSameTablesAsRopeScaling) {
  Json golden = loadGolden();
  for (const Json &testCase : golden["cases"]) {
    if (testCase["rope_scaling"].is_null())
      continue;
    SCOPED_TRACE(testCase["name"].get<std::string>());
    Json config = configJsonFor(testCase);
    Json parameters = config["rope_scaling"];
    if (parameters.contains("type")) {
      parameters["rope_type"] = parameters["type"];
      parameters.erase("type");
    }
    parameters["rope_theta"] = config["rope_theta"];
    config.erase("rope_scaling");
    config.erase("rope_theta");
    config["rope_parameters"] = parameters;
    auto parsed = parseHfModelConfig(config.dump(), "", "golden/config.json");
    ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
    const RopeTables expected = ropeTables(parseCase(testCase)), actual = ropeTables(*parsed);
    EXPECT_EQ(actual.mode, expected.mode);
    EXPECT_EQ(actual.invFreq, expected.invFreq);
    EXPECT_EQ(actual.longInvFreq, expected.longInvFreq);
    EXPECT_EQ(actual.attentionScaling, expected.attentionScaling);
    EXPECT_EQ(actual.originalMaxPositions, expected.originalMaxPositions);
  }
}

TEST(RopeInvFreqTest, Llama3ScalingTouchesOnlyLowAndMediumFrequencies) {
  HfModelConfig plain;
  plain.ropeTheta = 500000.0;
  HfModelConfig scaled = plain;
  scaled.ropeScaling = RopeScaling{"llama3", 32.0, 1.0, 4.0, 8192};
  std::vector<float> base = ropeInverseFrequencies(plain, 64);
  std::vector<float> adjusted = ropeInverseFrequencies(scaled, 64);
  ASSERT_EQ(base.size(), 32u);
  ASSERT_EQ(adjusted.size(), 32u);
  // High frequencies (wavelength < 8192/4) are unchanged; the lowest is divided by the factor.
  EXPECT_EQ(adjusted[0], base[0]);
  EXPECT_EQ(adjusted[31], base[31] / 32.0f);
  for (size_t i = 0; i < base.size(); ++i)
    EXPECT_LE(adjusted[i], base[i]);
}

// The dynamic row: the unscaled one up to max_position_embeddings, then ever lower frequencies
// (a larger base) as the sequence grows; the first pair always turns at 1 radian per position.
TEST(RopeInvFreqTest, DynamicNtkRowsGrowTheBaseWithTheSequence) {
  HfModelConfig config;
  config.headDim = 64;
  config.maxPositionEmbeddings = 2048;
  config.ropeScaling = RopeScaling{"dynamic", 2.0};
  const RopeTables tables = ropeTables(config);
  ASSERT_EQ(tables.mode, RopeMode::kDynamicNtk);
  EXPECT_EQ(tables.originalMaxPositions, 2048);
  EXPECT_EQ(dynamicNtkInvFreq(tables, 1), tables.invFreq);
  EXPECT_EQ(dynamicNtkInvFreq(tables, 2048), tables.invFreq);
  std::vector<float> previous = tables.invFreq;
  for (int64_t seqLen : {2049, 4096, 100000}) {
    std::vector<float> row = dynamicNtkInvFreq(tables, seqLen);
    ASSERT_EQ(row.size(), 32u);
    EXPECT_EQ(row[0], 1.0f);
    for (size_t i = 1; i < row.size(); ++i)
      EXPECT_LT(row[i], previous[i]) << seqLen << " pair " << i;
    previous = row;
  }
}

} // namespace
} // namespace kiln::compiler
