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

// The half-precision goldens of tests/data/golden (make_half_goldens.py) carry no tolerance and
// store raw bf16 / fp16 logits; "dtype" says which.
TEST(Golden, ReadsTheHalfPrecisionGoldens) {
  Result<VerifyGolden> bf16 =
      readGolden(std::string(KILN_TEST_DATA_DIR) + "/golden/tiny-llama.bf16.json");
  ASSERT_TRUE(bf16.isOk()) << bf16.status().toString();
  EXPECT_EQ(bf16->dtype, "bf16");
  EXPECT_EQ(bf16->logitsTolerance, 0.35f);
  EXPECT_EQ(bf16->toleranceNote, "the golden has no tolerance; the bf16 default of transformers "
                                 "goldens");
  ASSERT_EQ(bf16->cases.size(), 3u);
  const GoldenCase &c = bf16->cases[1];
  EXPECT_EQ(c.expectedIds[0], 132);
  ASSERT_EQ(c.rows.size(), 7u + 16u);
  ASSERT_EQ(c.rows[6].values.size(), 512u);
  EXPECT_EQ(c.rows[6].values[132], 3.375f); // bf16 bits 0x4058
  ASSERT_EQ(c.greedyMargins.size(), 16u);
  EXPECT_EQ(c.greedyMargins[0], 0.40625f);
  EXPECT_EQ(c.greedyMargins[13], 0.0f); // a tie in transformers' bf16 logits
  Result<VerifyGolden> fp16 =
      readGolden(std::string(KILN_TEST_DATA_DIR) + "/golden/tiny-llama.fp16.json");
  ASSERT_TRUE(fp16.isOk()) << fp16.status().toString();
  EXPECT_EQ(fp16->dtype, "fp16");
  EXPECT_EQ(fp16->logitsTolerance, 0.04f);
  EXPECT_EQ(fp16->cases[1].rows[6].values[132], 3.37109375f); // fp16 bits 0x42be
  // The fp32 goldens keep their own tolerance and no note.
  Result<VerifyGolden> fp32 =
      readGolden(std::string(KILN_TEST_DATA_DIR) + "/golden/tiny-llama.json");
  ASSERT_TRUE(fp32.isOk());
  EXPECT_EQ(fp32->dtype, "fp32");
  EXPECT_TRUE(fp32->toleranceNote.empty());
}

// A transformers golden written in a temporary directory: vocab 4, one case of prompt [1] and
// greedy [2], two rows of logits in `dtype` ("logits.bin" holding `bytes`).
std::string transformersGolden(const TempDir &tmp, const std::string &fields,
                               const std::string &bytes) {
  EXPECT_TRUE(writeFileAtomic(tmp / "logits.bin", bytes).isOk());
  std::string text = "{\"vocab_size\": 4, " + fields +
                     "\"cases\": [{\"prompt_ids\": [1], \"greedy_ids\": [2], "
                     "\"logits_file\": \"logits.bin\"}]}";
  EXPECT_TRUE(writeFileAtomic(tmp / "g.json", text).isOk());
  return tmp / "g.json";
}

TEST(Golden, TransformersGoldenDtypesAndTolerance) {
  TempDir tmp;
  std::string halfRows(2 * 4 * 2, '\0');
  halfRows[2 * 2] = char(0x58), halfRows[2 * 2 + 1] = char(0x40); // row 0, id 2: bf16 3.375
  // logits_dtype wins over dtype (make_verify_golden.py stores f32 rows when a half model's
  // logits are not half values).
  Result<VerifyGolden> g = readGolden(
      transformersGolden(tmp,
                         "\"dtype\": \"fp32\", \"logits_dtype\": \"bf16\", \"tolerance\": "
                         "{\"logits_max_abs\": 0.5}, ",
                         halfRows));
  ASSERT_TRUE(g.isOk()) << g.status().toString();
  EXPECT_EQ(g->cases[0].rows[0].values[2], 3.375f);
  EXPECT_EQ(g->logitsTolerance, 0.5f);
  EXPECT_TRUE(g->toleranceNote.empty());
  g = readGolden(transformersGolden(tmp, "\"dtype\": \"fp16\", ", halfRows));
  ASSERT_TRUE(g.isOk()) << g.status().toString();
  EXPECT_EQ(g->cases[0].rows[0].values[2], 2.171875f); // fp16 bits 0x4058
  EXPECT_EQ(g->logitsTolerance, 0.04f);
  EXPECT_EQ(
      readGolden(transformersGolden(tmp, "\"dtype\": \"int8\", ", halfRows)).status().message(),
      "golden '" + (tmp / "g.json") + "': logits dtype 'int8' is not one of fp32, bf16, fp16");
  EXPECT_EQ(readGolden(transformersGolden(tmp, "\"dtype\": \"bf16\", ", halfRows + "xx"))
                .status()
                .message(),
            "golden '" + (tmp / "g.json") +
                "' cases[0]: 'logits.bin' has 18 bytes; expected 2 rows x 4 bf16 logits");
  // An fp32 golden must carry its tolerance.
  EXPECT_EQ(
      readGolden(transformersGolden(tmp, "", std::string(2 * 4 * 4, '\0'))).status().message(),
      "golden '" + (tmp / "g.json") + "': field 'tolerance.logits_max_abs' is missing");
}

TEST(Golden, LogitsFileMustMatchItsSha256) {
  TempDir tmp;
  Result<VerifyGolden> g =
      readGolden(transformersGolden(tmp, "\"dtype\": \"bf16\", ", std::string(16, '\0')));
  ASSERT_TRUE(g.isOk());
  std::string path = tmp / "g.json";
  Result<std::string> text = readFile(path);
  ASSERT_TRUE(text.isOk());
  std::string withSha = *text;
  withSha.insert(withSha.find("\"logits_file\""),
                 "\"logits_sha256\": \"" + std::string(64, '0') + "\", ");
  ASSERT_TRUE(writeFileAtomic(path, withSha).isOk());
  EXPECT_EQ(readGolden(path).status().message(),
            "golden '" + path +
                "' cases[0]: 'logits.bin' does not match the golden's logits_sha256 (damaged or "
                "replaced)");
}

TEST(Golden, MissingGoldenIsNotFound) {
  TempDir tmp;
  Result<VerifyGolden> g = readGolden(tmp / "absent.json");
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound);
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
  bad.expectedIds = {1, 2, 3, 4, 42, 6, 7, 8, 9};
  bad.gotIds = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  bad.idsMatch = false;
  bad.differingIds = 1;
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
            "case 'case1': FAIL, 9 ids, 1 differ, max logit diff 0.5 > tolerance 0.0001\n"
            "  first differing id at output index 4: expected 42, got 5\n"
            "  expected [... 2 3 4 >42< 6 7 8 ...]\n"
            "  got      [... 2 3 4 >5< 6 7 8 ...]\n"
            "  max logit diff at position 10, token 42: expected 1.500000, got 1.000000\n"
            "verify: FAIL (1 of 2 cases differ)\n");
  // Two differing ids: the expected row is the golden's at both (issue 18: it showed got ids
  // after the first difference).
  bad.expectedIds = {1, 2, 3, 4, 42, 6, 77, 8, 9};
  bad.differingIds = 2;
  bad.logitsWithinTolerance = true;
  bad.maxLogitDiff = 0;
  report.cases = {bad};
  EXPECT_EQ(report.text(), "case 'case1': FAIL, 9 ids, 2 differ, max logit diff 0 <= tolerance "
                           "0.0001\n"
                           "  first differing id at output index 4: expected 42, got 5\n"
                           "  expected [... 2 3 4 >42< 6 77 8 ...]\n"
                           "  got      [... 2 3 4 >5< 6 7 8 ...]\n"
                           "verify: FAIL (1 of 1 cases differ)\n");
  // A near tie that differs passes and is reported.
  ok.nearTieDiffering = 1;
  report.cases = {ok};
  EXPECT_EQ(report.text(), "case 'case0': ok, 2 ids, all compared ids match (1 near-tie id "
                           "differs: top-2 margin <= 2 x tolerance, not compared), max logit diff "
                           "2e-06 <= tolerance 0.0001\n"
                           "verify: PASS (1 cases)\n");
  ok.nearTieDiffering = 0;
  report.cases = {ok};
  EXPECT_TRUE(report.passed());
  EXPECT_EQ(report.text().substr(report.text().rfind("verify:")), "verify: PASS (1 cases)\n");
}

} // namespace
} // namespace kiln::rt
