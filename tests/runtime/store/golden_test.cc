#include "runtime/store/golden.h"
#include "runtime/store/verify.h"
#include "tests/runtime/store/store_test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::rt {
namespace {
using testing::TempDir;

TEST(Golden, ReadsTheTransformersGoldensDirectly) {
  Result<VerifyGolden> golden =
      readGolden(std::string(KILN_TEST_DATA_DIR) + "/golden/tiny-llama.json");
  ASSERT_TRUE(golden.isOk()) << golden.status().toString();
  EXPECT_EQ(golden->model, "tiny-llama");
  EXPECT_EQ(golden->vocabSize, 512);
  EXPECT_FLOAT_EQ(golden->logitsTolerance, 1e-4f);
  ASSERT_EQ(golden->cases.size(), 3u);
  const GoldenCase &c = golden->cases[1];
  EXPECT_EQ(c.promptIds, (std::vector<int32_t>{1, 17, 300, 42, 511, 256, 99}));
  EXPECT_EQ(c.expectedIds.size(), 16u);
  ASSERT_EQ(c.rows.size(), 7u + 16u); // every position, whole rows
  EXPECT_EQ(c.rows[6].position, 6);
  EXPECT_TRUE(c.rows[6].ids.empty());
  ASSERT_EQ(c.rows[6].values.size(), 512u);
  // Row P-1+k predicts expected[k] (the README's invariant).
  for (size_t k = 0; k < 16; ++k) {
    const std::vector<float> &row = c.rows[6 + k].values;
    EXPECT_EQ(std::max_element(row.begin(), row.end()) - row.begin(), c.expectedIds[k]) << k;
  }
}

TEST(Golden, WriteReadRoundTripIsExact) {
  TempDir tmp;
  VerifyGolden golden;
  golden.model = "m";
  golden.vocabSize = 10;
  golden.logitsTolerance = 2.5e-3f;
  golden.topK = 2;
  golden.generator = "{\"tool\": \"test\"}";
  golden.cases.push_back(
      {"c", {1, 2}, {3, 4}, {{1, {3, 7}, {1.0f / 3, -2.75e-7f}}, {2, {4, 0}, {9.5f, 9.25f}}}});
  ASSERT_TRUE(writeGolden(golden, tmp / "g.json").isOk());
  Result<VerifyGolden> back = readGolden(tmp / "g.json");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->vocabSize, 10);
  EXPECT_EQ(back->topK, 2);
  EXPECT_EQ(back->logitsTolerance, 2.5e-3f);
  ASSERT_EQ(back->cases.size(), 1u);
  EXPECT_EQ(back->cases[0].expectedIds, (std::vector<int32_t>{3, 4}));
  ASSERT_EQ(back->cases[0].rows.size(), 2u);
  EXPECT_EQ(back->cases[0].rows[0].ids, (std::vector<int32_t>{3, 7}));
  EXPECT_EQ(back->cases[0].rows[0].values[0], 1.0f / 3); // bit-exact through JSON
  EXPECT_EQ(back->cases[0].rows[0].values[1], -2.75e-7f);
}

TEST(Golden, BadGoldensNameTheField) {
  TempDir tmp;
  auto errorOf = [&](const std::string &text) {
    EXPECT_TRUE(writeFileAtomic(tmp / "g.json", text).isOk());
    return readGolden(tmp / "g.json").status().message();
  };
  std::string head = "{\"format\": \"kiln-verify-golden\", \"vocab_size\": 8, "
                     "\"tolerance\": {\"logits_max_abs\": 0.1}, \"cases\": ";
  EXPECT_NE(errorOf("[]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(errorOf(head + "[]}").find("has no cases"), std::string::npos);
  EXPECT_NE(errorOf(head + "[{\"prompt_ids\": [1], \"expected_ids\": [9]}]}")
                .find("'expected_ids' id 9 is outside the vocabulary [0, 8)"),
            std::string::npos);
  EXPECT_NE(errorOf(head + "[{\"prompt_ids\": [], \"expected_ids\": [1]}]}")
                .find("'prompt_ids' is empty"),
            std::string::npos);
  EXPECT_NE(errorOf(head + "[{\"prompt_ids\": [1], \"expected_ids\": [1], \"logits\": "
                           "[{\"position\": 5, \"values\": [1]}]}]}")
                .find("position 5 is outside the case's 2 tokens"),
            std::string::npos);
  EXPECT_NE(errorOf("{\"vocab_size\": 8, \"cases\": [{}]}").find("tolerance.logits_max_abs"),
            std::string::npos);
}

TEST(VerifyReport, FailureTextShowsFirstDifferenceAndLogitDiff) {
  VerifyReport report;
  report.tolerance = 1e-4f;
  CaseVerdict ok;
  ok.name = "case0";
  ok.gotIds = {5, 6};
  ok.maxLogitDiff = 2e-6f;
  CaseVerdict bad;
  bad.name = "case1";
  bad.gotIds = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  bad.idsMatch = false;
  bad.firstDifferingIndex = 4;
  bad.expectedId = 42;
  bad.gotId = 5;
  bad.maxLogitDiff = 0.5f;
  bad.logitsWithinTolerance = false;
  bad.maxDiffPosition = 10;
  bad.maxDiffTokenId = 42;
  bad.maxDiffExpected = 1.5f;
  bad.maxDiffGot = 1.0f;
  report.cases = {ok, bad};
  EXPECT_FALSE(report.passed());
  EXPECT_EQ(report.text(),
            "case 'case0': ok, 2 ids match, max logit diff 2e-06 <= tolerance 0.0001\n"
            "case 'case1': FAIL, 9 ids, max logit diff 0.5 > tolerance 0.0001\n"
            "  first differing id at output index 4: expected 42, got 5\n"
            "  expected [... 2 3 4 >42< 6 7 8 ...]\n"
            "  got      [... 2 3 4 >5< 6 7 8 ...]\n"
            "  max logit diff at position 10, token 42: expected 1.500000, got 1.000000\n"
            "verify: FAIL (1 of 2 cases differ)\n");
  report.cases = {ok};
  EXPECT_TRUE(report.passed());
  EXPECT_EQ(report.text().substr(report.text().rfind("verify:")), "verify: PASS (1 cases)\n");
}

} // namespace
} // namespace kiln::rt
