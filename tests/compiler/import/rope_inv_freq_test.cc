// ropeInverseFrequencies() against transformers' LlamaRotaryEmbedding.inv_freq, recorded by
// tools/goldens/make_rope_golden.py in tests/data/golden/rope_inv_freq.json.
#include "compiler/import/hf_config.h"

#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;

// float32 pow differs by at most an ulp or two between libm and torch's vectorized pow.
constexpr double kRelativeTolerance = 1e-6;

HfModelConfig configFor(const Json &testCase) {
  HfModelConfig config;
  config.ropeTheta = testCase["rope_theta"].get<double>();
  const Json &scaling = testCase["rope_scaling"];
  if (!scaling.is_null()) {
    RopeScaling rope;
    rope.type = scaling["rope_type"].get<std::string>();
    rope.factor = scaling["factor"].get<double>();
    rope.lowFreqFactor = scaling["low_freq_factor"].get<double>();
    rope.highFreqFactor = scaling["high_freq_factor"].get<double>();
    rope.originalMaxPositionEmbeddings = scaling["original_max_position_embeddings"].get<int64_t>();
    config.ropeScaling = rope;
  }
  return config;
}

TEST(RopeInvFreqTest, MatchesTransformers) {
  auto text = readFile(std::string(KILN_TEST_DATA_DIR) + "/golden/rope_inv_freq.json");
  ASSERT_TRUE(text.isOk()) << text.status().toString();
  Json golden = Json::parse(*text);
  ASSERT_GE(golden["cases"].size(), 8u);
  int scaledCases = 0;
  for (const Json &testCase : golden["cases"]) {
    SCOPED_TRACE(testCase["name"].get<std::string>());
    HfModelConfig config = configFor(testCase);
    scaledCases += config.ropeScaling.has_value();
    std::vector<float> actual = ropeInverseFrequencies(config, testCase["head_dim"].get<int64_t>());
    std::vector<double> expected = testCase["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_NEAR(actual[i], expected[i], kRelativeTolerance * std::abs(expected[i]))
          << "inv_freq[" << i << "]";
  }
  EXPECT_GE(scaledCases, 4);
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

} // namespace
} // namespace kiln::compiler
