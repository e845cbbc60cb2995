#include "tests/e2e/kv_golden_util.h"
#include "tests/e2e/fixture_edit.h"

#include "runtime/artifact/artifact.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

namespace kiln::e2e {
namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR);

// The golden's recorded distance from the fp32 golden must dwarf its tolerance.
void expectRoundingMovesTheGolden(const std::string &name) {
  std::ifstream file(kData + "/golden/" + name + ".json");
  ASSERT_TRUE(file) << name;
  const nlohmann::json golden = nlohmann::json::parse(file);
  const double moved = golden.at("rows_max_abs_diff_from_fp32").get<double>();
  const double tolerance = golden.at("tolerance").at("logits_max_abs").get<double>();
  EXPECT_GT(moved, 20 * tolerance) << name;
  if (golden.contains("kv_scales")) // the scales must matter too
    EXPECT_GT(golden.at("rows_max_abs_diff_from_unscaled_fp8").get<double>(), 20 * tolerance)
        << name;
}

// The golden's "kv_scales" (tensor name -> value); empty when it has none.
std::map<std::string, float> kvScalesOf(const std::string &name) {
  std::ifstream file(kData + "/golden/" + name + ".json");
  const nlohmann::json golden = nlohmann::json::parse(file);
  return golden.value("kv_scales", std::map<std::string, float>());
}

// The plan's kv_cache.k_scales / v_scales are the checkpoint's, layer by layer.
void expectPlanKvScales(const std::string &artifactDir,
                        const std::map<std::string, float> &scales) {
  auto artifact = rt::Artifact::load(artifactDir);
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  const schema::KvCacheSpec &kv = *(*artifact)->plan().kv_cache();
  ASSERT_TRUE(kv.k_scales() && kv.v_scales());
  ASSERT_EQ(kv.k_scales()->size(), kv.num_layers());
  ASSERT_EQ(kv.v_scales()->size(), kv.num_layers());
  for (uint32_t l = 0; l < kv.num_layers(); ++l) {
    const std::string attention = "model.layers." + std::to_string(l) + ".self_attn.";
    EXPECT_EQ(kv.k_scales()->Get(l), scales.at(attention + "k_scale")) << l;
    EXPECT_EQ(kv.v_scales()->Get(l), scales.at(attention + "v_scale")) << l;
  }
}

} // namespace

void expectKvDtype(const std::string &model, const std::string &flag, schema::DType expected) {
  compiler::CompileOptions options;
  options.kvDtype = flag;
  auto artifact = rt::Artifact::load(compileForTest(kData + "/models/" + model, options));
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  EXPECT_EQ((*artifact)->plan().activation_dtype(), schema::DType::F32);
  EXPECT_EQ((*artifact)->plan().kv_cache()->dtype(), expected) << flag;
}

namespace {

// Every row of every case, run as the prompt's prefill then teacher-forced decode steps, and as
// one prefill of the whole sequence: each row's max |kiln - golden|, and the greedy ids.
struct RowDiffs {
  std::vector<float> diffs;
  int greedyChecked = 0, greedyMatched = 0;
};
RowDiffs compareRows(const Golden &golden, rt::Executor &executor, float idMargin) {
  RowDiffs result;
  const int32_t vocab = golden.vocabSize;
  for (const GoldenCase &gc : golden.cases) {
    const int32_t prompt = static_cast<int32_t>(gc.promptIds.size());
    std::vector<int32_t> all = gc.promptIds;
    all.insert(all.end(), gc.greedyIds.begin(), gc.greedyIds.end());
    for (bool incremental : {true, false}) {
      for (int32_t begin = 0; begin < gc.rows;) {
        const int32_t end = !incremental ? gc.rows : begin == 0 ? prompt : begin + 1;
        rt::SequenceStep step;
        step.tokenIds.assign(all.begin() + begin, all.begin() + end);
        step.startPosition = begin;
        const rt::RunnerLimits &limits = executor.limits();
        step.blockTables =
            rt::ownBlockTables(limits, 0, (gc.rows + limits.blockSize - 1) / limits.blockSize);
        step.logits = rt::LogitsWanted::kAll;
        auto output = executor.execute(rt::StepBatch{{step}});
        EXPECT_TRUE(output.isOk()) << output.status().toString();
        if (!output.isOk())
          return result;
        for (int32_t r = begin; r < end; ++r) {
          const float *row = output->row(r - begin);
          const float *expected = gc.logits.data() + size_t(r) * vocab;
          result.diffs.push_back(maxAbsDiff(row, expected, vocab));
          const int32_t k = r - prompt + 1; // the greedy id row r picked
          if (k < 0 || k >= int32_t(gc.greedyIds.size()))
            continue;
          std::vector<float> sorted(expected, expected + vocab);
          std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
          if (sorted[0] - sorted[1] <= idMargin)
            continue; // a near-tie the tolerance allows either way
          ++result.greedyChecked;
          result.greedyMatched += argmax(row, vocab) == gc.greedyIds[k];
        }
        begin = end;
      }
    }
  }
  return result;
}

} // namespace

void checkKvGolden(const std::string &name, const std::string &model, schema::DType dtype,
                   float flipBound, double reproducedFraction, const std::string &device,
                   compiler::CompileOptions options) {
  expectRoundingMovesTheGolden(name);
  std::string skipReason;
  std::optional<Golden> golden = loadGolden(name, skipReason);
  ASSERT_TRUE(golden) << skipReason;
  ASSERT_FALSE(golden->kvDtype.empty());
  expectKvDtype(model, golden->kvDtype, dtype);
  // A golden of calibrated cache scales: the model with its "kv_scales" tensors added, unless the
  // options bring scales of their own (kiln's calibration).
  std::string modelDir = golden->modelDir;
  const std::map<std::string, float> scales =
      options.kvKScales.empty() ? kvScalesOf(name) : std::map<std::string, float>();
  if (!scales.empty())
    modelDir = fixtureWithScalars(name + "-" + device, model, scales);
  const std::string artifact = compileForTest(modelDir, golden->compileOptions(options));
  if (!scales.empty())
    expectPlanKvScales(artifact, scales);
  LoadedArtifact loaded = loadForTest(artifact, 64, device);
  ASSERT_NE(loaded.executor, nullptr);
  const RowDiffs rows = compareRows(*golden, *loaded.executor, 2 * flipBound);
  size_t reproduced = 0;
  float worst = 0;
  for (float diff : rows.diffs) {
    reproduced += diff <= golden->tolerance;
    worst = std::max(worst, diff);
  }
  std::cout << name << " on " << device << ": " << reproduced << " of " << rows.diffs.size()
            << " rows within " << golden->tolerance << ", worst " << worst << "; greedy ids "
            << rows.greedyMatched << " of " << rows.greedyChecked << " checked\n";
  EXPECT_GE(double(reproduced), reproducedFraction * double(rows.diffs.size()));
  EXPECT_LE(worst, flipBound);
  EXPECT_EQ(rows.greedyMatched, rows.greedyChecked);
  EXPECT_GT(rows.greedyChecked, 0);
}

} // namespace kiln::e2e
