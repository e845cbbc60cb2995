#include "tests/e2e/half_dtype_util.h"

#include "runtime/base/file.h"
#include "runtime/base/half.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>

namespace kiln::e2e {
namespace fs = std::filesystem;

namespace {

std::string resolveModelDir(const std::string &recorded) {
  const std::string kShared = "shared:";
  if (recorded.rfind(kShared, 0) == 0)
    return std::string(KILN_ASSETS_DIR) + "/" + recorded.substr(kShared.size());
  return (fs::path(KILN_TEST_DATA_DIR) / ".." / ".." / recorded).lexically_normal().string();
}

std::vector<float> widenLogits(const std::string &bytes, const std::string &dtype) {
  std::vector<float> values(bytes.size() / 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    values[i] = dtype == "bf16" ? bf16ToF32(bits) : f16ToF32(bits);
  }
  return values;
}

} // namespace

std::optional<HalfGolden> loadHalfGolden(const std::string &model, const std::string &dtype,
                                         std::string &skipReason) {
  const std::string dir = std::string(KILN_TEST_DATA_DIR) + "/golden/";
  Result<std::string> text = readFile(dir + model + "." + dtype + ".json");
  EXPECT_TRUE(text.isOk()) << text.status().toString();
  if (!text.isOk())
    return std::nullopt;
  nlohmann::json json = nlohmann::json::parse(*text);
  HalfGolden golden;
  golden.model = json["model"];
  golden.dtype = json["dtype"];
  golden.modelDir = resolveModelDir(json["model_dir"]);
  golden.vocabSize = json["vocab_size"];
  EXPECT_EQ(golden.dtype, dtype);
  if (!fs::exists(fs::path(golden.modelDir) / "config.json")) {
    skipReason = "model directory " + golden.modelDir +
                 " is absent (../shared/assets not present on this machine)";
    return std::nullopt;
  }
  for (const auto &c : json["cases"]) {
    HalfGoldenCase gc;
    gc.promptIds = c["prompt_ids"].get<std::vector<int32_t>>();
    gc.greedyIds = c["greedy_ids"].get<std::vector<int32_t>>();
    gc.greedyMargins = c["greedy_margins"].get<std::vector<float>>();
    gc.rows = c["logits_rows"];
    gc.hfHalfVsFp32 = c["hf_half_vs_fp32_max_abs"];
    Result<std::string> bytes = readFile(dir + c["logits_file"].get<std::string>());
    EXPECT_TRUE(bytes.isOk()) << bytes.status().toString();
    if (!bytes.isOk())
      return std::nullopt;
    EXPECT_EQ(bytes->size(), size_t(gc.rows) * golden.vocabSize * 2);
    gc.logits = widenLogits(*bytes, dtype);
    if (c.contains("kiln_rounding_file")) {
      Result<std::string> ref = readFile(dir + c["kiln_rounding_file"].get<std::string>());
      EXPECT_TRUE(ref.isOk()) << ref.status().toString();
      if (!ref.isOk())
        return std::nullopt;
      EXPECT_EQ(ref->size(), size_t(gc.rows) * golden.vocabSize * sizeof(float));
      gc.kilnRounding.resize(ref->size() / sizeof(float));
      std::memcpy(gc.kilnRounding.data(), ref->data(), ref->size());
    }
    golden.cases.push_back(std::move(gc));
  }
  return golden;
}

std::vector<std::vector<float>> runTeacherForced(rt::ModelRunner &runner,
                                                 const HalfGolden &golden) {
  const int32_t blockSize = runner.limits().blockSize;
  const size_t n = golden.cases.size();
  std::vector<std::vector<float>> rows(n);
  std::vector<std::vector<std::vector<int32_t>>> blocks; // per case, per KV cache group
  int32_t nextBlock = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t count = (golden.cases[i].rows + blockSize - 1) / blockSize;
    blocks.push_back(rt::ownBlockTables(runner.limits(), nextBlock, count));
    nextBlock += count * rt::kvGroupCount(runner.limits());
  }
  for (size_t step = 0;; ++step) {
    rt::StepBatch batch;
    std::vector<size_t> who;
    for (size_t i = 0; i < n && i <= step; ++i) {
      const HalfGoldenCase &gc = golden.cases[i];
      const size_t k = step - i; // 0: the prompt; k: greedy id k-1
      if (k > gc.greedyIds.size())
        continue;
      rt::SequenceStep seq;
      const int32_t prompt = static_cast<int32_t>(gc.promptIds.size());
      seq.tokenIds = k == 0 ? gc.promptIds : std::vector<int32_t>{gc.greedyIds[k - 1]};
      seq.startPosition = k == 0 ? 0 : prompt + static_cast<int32_t>(k) - 1;
      seq.blockTables = blocks[i];
      seq.logits = k == 0 ? rt::LogitsWanted::kAll : rt::LogitsWanted::kLast;
      batch.sequences.push_back(std::move(seq));
      who.push_back(i);
    }
    if (batch.sequences.empty())
      return rows;
    Result<rt::StepOutput> out = runner.execute(batch);
    EXPECT_TRUE(out.isOk()) << out.status().toString();
    if (!out.isOk())
      return {};
    for (size_t s = 0; s < who.size(); ++s) {
      const float *first = out->row(out->firstRowOfSequence[s]);
      rows[who[s]].insert(rows[who[s]].end(), first,
                          first + size_t(out->rowsPerSequence[s]) * out->vocabSize);
    }
  }
}

float maxAbsDiffOf(const float *a, const float *b, size_t count) {
  float worst = 0;
  for (size_t i = 0; i < count; ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= worst))
      worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

} // namespace kiln::e2e
