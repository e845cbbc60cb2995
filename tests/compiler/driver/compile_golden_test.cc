// Compiled plans executed by the runtime's cpu executor against the Hugging Face transformers
// goldens (tests/data/golden): every logits row of prompt + 16 greedy ids within the golden's
// tolerance, once as one prefill and once as prefill + token-by-token decode through the paged
// KV cache. This is the check that the emitted op order and buffer roles mean what plan.fbs says.
#include "compiler/driver/compile.h"
#include "runtime/artifact/artifact.h"
#include "runtime/base/file.h"
#include "runtime/exec/executor.h"
#include "runtime/hal/device.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

struct GoldenCase {
  std::vector<int32_t> ids;  // prompt + greedy
  size_t promptLength = 0;
  std::vector<float> logits; // [ids.size(), vocab]
};

struct Golden {
  std::string modelDir;
  int32_t vocab = 0;
  double tolerance = 0;
  std::vector<GoldenCase> cases;
};

// Reads tests/data/golden/<name>.json; "" modelDir when the model or golden is absent.
Golden readGolden(const std::string &name) {
  Golden golden;
  std::string goldenDir = std::string(KILN_TEST_DATA_DIR) + "/golden/";
  auto text = readFile(goldenDir + name + ".json");
  if (!text.isOk())
    return golden;
  nlohmann::json json = nlohmann::json::parse(*text);
  std::string dir = json["model_dir"];
  if (dir.rfind("shared:", 0) == 0)
    dir = std::string(KILN_ASSETS_DIR) + "/" + dir.substr(7);
  else
    dir = std::string(KILN_TEST_DATA_DIR) + "/../../" + dir;
  if (!fs::exists(dir))
    return golden;
  golden.vocab = json["vocab_size"];
  golden.tolerance = json["tolerance"]["logits_max_abs"];
  for (const auto &c : json["cases"]) {
    GoldenCase gc;
    gc.ids = c["prompt_ids"].get<std::vector<int32_t>>();
    gc.promptLength = gc.ids.size();
    for (int32_t id : c["greedy_ids"].get<std::vector<int32_t>>())
      gc.ids.push_back(id);
    auto bytes = readFile(goldenDir + c["logits_file"].get<std::string>());
    EXPECT_TRUE(bytes.isOk());
    gc.logits.resize(bytes->size() / 4);
    std::memcpy(gc.logits.data(), bytes->data(), bytes->size());
    EXPECT_EQ(gc.logits.size(), gc.ids.size() * golden.vocab);
    golden.cases.push_back(std::move(gc));
  }
  golden.modelDir = dir;
  return golden;
}

double maxAbsDiff(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

class CompileGoldenTest : public ::testing::TestWithParam<const char *> {};

TEST_P(CompileGoldenTest, ExecutedPlanMatchesTransformers) {
  Golden golden = readGolden(GetParam());
  if (golden.modelDir.empty())
    GTEST_SKIP() << "model or golden for " << GetParam() << " absent";
  fs::path out = fs::path(::testing::TempDir()) / (std::string("kiln_golden_") + GetParam());
  fs::remove_all(out);
  CompileOptions options;
  options.modelDir = golden.modelDir;
  options.outDir = out.string();
  options.maxBatch = 2;
  options.maxSeqLen = 64;
  Status compiled = compileModel(options);
  ASSERT_TRUE(compiled.isOk()) << compiled.toString();
  auto artifact = rt::Artifact::load(out.string());
  ASSERT_TRUE(artifact.isOk()) << artifact.status().toString();
  auto device = rt::createDevice("cpu");
  ASSERT_TRUE(device.isOk()) << device.status().toString();
  auto executor = rt::Executor::create(**artifact, **device);
  ASSERT_TRUE(executor.isOk()) << executor.status().toString();
  const int32_t blockSize = (*executor)->limits().blockSize;

  for (size_t c = 0; c < golden.cases.size(); ++c) {
    const GoldenCase &gc = golden.cases[c];
    std::vector<int32_t> blocks;
    for (int32_t b = 0; b * blockSize < static_cast<int32_t>(gc.ids.size()); ++b)
      blocks.push_back(b);
    // One prefill over everything.
    rt::StepBatch batch;
    batch.sequences.push_back({gc.ids, 0, blocks, rt::LogitsWanted::kAll});
    auto output = (*executor)->execute(batch);
    ASSERT_TRUE(output.isOk()) << output.status().toString();
    ASSERT_EQ(output->logits.size(), gc.logits.size());
    double prefillDiff = maxAbsDiff(output->logits.data(), gc.logits.data(), gc.logits.size());
    EXPECT_LE(prefillDiff, golden.tolerance) << GetParam() << " case " << c << " (prefill)";
    RecordProperty("case" + std::to_string(c) + "_prefill_max_abs", std::to_string(prefillDiff));
    // Prompt, then one token per step: each step's logits row is the golden row of its token.
    std::vector<int32_t> prompt(gc.ids.begin(), gc.ids.begin() + gc.promptLength);
    rt::StepBatch prefill;
    prefill.sequences.push_back({prompt, 0, blocks, rt::LogitsWanted::kLast});
    auto first = (*executor)->execute(prefill);
    ASSERT_TRUE(first.isOk()) << first.status().toString();
    double worst = maxAbsDiff(first->row(0), &gc.logits[(gc.promptLength - 1) * golden.vocab],
                              golden.vocab);
    for (size_t t = gc.promptLength; t < gc.ids.size(); ++t) {
      rt::StepBatch decode;
      decode.sequences.push_back(
          {{gc.ids[t]}, static_cast<int32_t>(t), blocks, rt::LogitsWanted::kLast});
      auto step = (*executor)->execute(decode);
      ASSERT_TRUE(step.isOk()) << step.status().toString();
      worst = std::max(worst, maxAbsDiff(step->row(0), &gc.logits[t * golden.vocab], golden.vocab));
    }
    EXPECT_LE(worst, golden.tolerance) << GetParam() << " case " << c << " (decode)";
    RecordProperty("case" + std::to_string(c) + "_decode_max_abs", std::to_string(worst));
  }
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Models, CompileGoldenTest,
                         ::testing::Values("tiny-llama", "tiny-llama-tied", "tiny-llama3",
                                           "stories260K", "tinystories-656K"),
                         [](const auto &info) {
                           std::string name = info.param;
                           for (char &ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           return name;
                         });

} // namespace
} // namespace kiln::compiler
