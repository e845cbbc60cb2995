#include "tests/e2e/hidden_states_util.h"

#include "runtime/base/file.h"
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

namespace kiln::e2e {
namespace {

struct HiddenCase {
  std::vector<int32_t> ids;
  std::vector<float> rows; // [ids.size(), hidden]
};

std::vector<HiddenCase> loadHiddenGolden(const std::string &fixture, int32_t &hidden,
                                         float &tolerance, std::string &modelDir) {
  const std::string dir = std::string(KILN_TEST_DATA_DIR) + "/golden/";
  Result<std::string> text = readFile(dir + fixture + ".hidden.json");
  EXPECT_TRUE(text.isOk()) << text.status().toString();
  if (!text.isOk())
    return {};
  const nlohmann::json json = nlohmann::json::parse(*text);
  tolerance = json["tolerance"]["hidden_max_abs"];
  modelDir = std::string(KILN_TEST_DATA_DIR) + "/models/" + json["model"].get<std::string>();
  std::vector<HiddenCase> cases;
  for (const auto &c : json["cases"]) {
    HiddenCase hc;
    hc.ids = c["ids"].get<std::vector<int32_t>>();
    hidden = c["hidden_size"];
    Result<std::string> bytes = readFile(dir + c["hidden_file"].get<std::string>());
    EXPECT_TRUE(bytes.isOk()) << bytes.status().toString();
    if (!bytes.isOk())
      return {};
    EXPECT_EQ(bytes->size(), hc.ids.size() * size_t(hidden) * sizeof(float));
    hc.rows.resize(bytes->size() / sizeof(float));
    std::memcpy(hc.rows.data(), bytes->data(), bytes->size());
    cases.push_back(std::move(hc));
  }
  return cases;
}

void expectRowsNear(const float *got, const float *want, int32_t hidden, float tolerance,
                    const std::string &what) {
  float worst = 0;
  for (int32_t i = 0; i < hidden; ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LE(worst, tolerance) << what;
}

} // namespace

void checkGoldenHiddenStates(const std::string &fixture, const std::string &device,
                             compiler::CompileOptions options) {
  int32_t hidden = 0;
  float tolerance = 0;
  std::string modelDir;
  const std::vector<HiddenCase> cases = loadHiddenGolden(fixture, hidden, tolerance, modelDir);
  ASSERT_FALSE(cases.empty());
  LoadedArtifact loaded = loadForTest(compileForTest(modelDir, options), 64, device);
  ASSERT_TRUE(loaded.executor);
  rt::Executor &executor = *loaded.executor;
  ASSERT_EQ(executor.limits().hiddenWidth, hidden);
  // Each case alone, every row.
  std::vector<std::vector<float>> lastRows;
  for (size_t c = 0; c < cases.size(); ++c) {
    rt::SequenceStep seq;
    seq.tokenIds = cases[c].ids;
    seq.blockTables = rt::ownBlockTables(executor.limits(), 0, 8);
    seq.logits = rt::LogitsWanted::kAll;
    seq.wantsHidden = true;
    Result<rt::StepOutput> out = executor.execute({{seq}});
    ASSERT_TRUE(out.isOk()) << out.status().toString();
    const auto rows = static_cast<int32_t>(seq.tokenIds.size());
    ASSERT_EQ(out->hiddenWidth, hidden);
    ASSERT_EQ(out->hidden.size(), size_t(rows) * hidden);
    ASSERT_EQ(out->numRows(), rows);
    for (int32_t r = 0; r < rows; ++r)
      expectRowsNear(out->hiddenRow(r), cases[c].rows.data() + size_t(r) * hidden, hidden,
                     tolerance, "case " + std::to_string(c) + " row " + std::to_string(r));
    lastRows.emplace_back(out->hiddenRow(rows - 1), out->hiddenRow(rows - 1) + hidden);
  }
  // All cases in one step, the last row of each: the rows each gave alone.
  rt::StepBatch batch;
  for (size_t c = 0; c < cases.size(); ++c) {
    rt::SequenceStep seq;
    seq.tokenIds = cases[c].ids;
    seq.blockTables = rt::ownBlockTables(executor.limits(), int32_t(8 * c), 8);
    seq.logits = rt::LogitsWanted::kLast;
    seq.wantsHidden = true;
    batch.sequences.push_back(std::move(seq));
  }
  Result<rt::StepOutput> out = executor.execute(batch);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  ASSERT_EQ(out->numRows(), static_cast<int32_t>(cases.size()));
  for (size_t c = 0; c < cases.size(); ++c)
    expectRowsNear(out->hiddenRow(out->firstRowOfSequence[c]), lastRows[c].data(), hidden,
                   device == "cpu" ? 0.0f : tolerance, "batched case " + std::to_string(c));
}

} // namespace kiln::e2e
