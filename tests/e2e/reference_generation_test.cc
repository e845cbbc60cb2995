// Long greedy runs checked against references that are not transformers: llama2.c's own output
// for stories260K (200 tokens from BOS) and an independent float64 implementation of HF Llama for
// TinyStories-656K (../shared/assets/expected). Skipped, saying so, when the assets are absent.
#include "runtime/base/file.h"
#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

namespace kiln::e2e {
namespace {

// Greedy decoding through the executor, one sequence, blocks 0.. in order.
std::vector<int32_t> greedy(rt::Executor &executor, const std::vector<int32_t> &prompt,
                            int32_t newTokens) {
  rt::SequenceStep step;
  int32_t total = static_cast<int32_t>(prompt.size()) + newTokens;
  for (int32_t b = 0; b * executor.limits().blockSize < total; ++b)
    step.blockTable.push_back(b);
  step.tokenIds = prompt;
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < newTokens) {
    auto output = executor.execute(rt::StepBatch{{step}});
    EXPECT_TRUE(output.isOk()) << output.status().toString();
    if (!output.isOk())
      return out;
    int32_t next = argmax(output->row(0), output->vocabSize);
    out.push_back(next);
    step.startPosition += static_cast<int32_t>(step.tokenIds.size());
    step.tokenIds = {next};
  }
  return out;
}

std::vector<int32_t> llama2cSection1Ids() {
  Result<std::string> text =
      readFile(std::string(KILN_ASSETS_DIR) + "/expected/stories260K_llama2c_reference.md");
  if (!text.isOk())
    return {};
  size_t section = text->find("## 1.");
  size_t line = text->find("NEXT_TOKEN_IDS", section);
  size_t colon = text->find(": ", text->find(')', line));
  size_t end = text->find('\n', colon);
  std::istringstream ids(text->substr(colon + 2, end - colon - 2));
  std::vector<int32_t> out;
  for (int32_t id; ids >> id;)
    out.push_back(id);
  return out;
}

TEST(ReferenceGeneration, Stories260KGreedy200MatchesLlama2c) {
  auto dir = assetModelDir("models/stories260K-hf");
  if (!dir)
    GTEST_SKIP() << "../shared/assets/models/stories260K-hf is absent";
  std::vector<int32_t> expected = llama2cSection1Ids();
  ASSERT_EQ(expected.size(), 200u) << "could not parse section 1 of the llama2.c reference";
  compiler::CompileOptions options;
  options.maxSeqLen = 512;
  LoadedArtifact model = loadForTest(compileForTest(*dir, options), 32);
  ASSERT_NE(model.executor, nullptr);
  EXPECT_EQ(greedy(*model.executor, {1}, 200), expected);
}

TEST(ReferenceGeneration, TinyStories656KMatchesFloat64Reference) {
  auto dir = assetModelDir("models/tinystories-656K-hf");
  if (!dir)
    GTEST_SKIP() << "../shared/assets/models/tinystories-656K-hf is absent";
  Result<std::string> text = readFile(std::string(KILN_ASSETS_DIR) +
                                      "/expected/tinystories656K_hf_reference_greedy.json");
  ASSERT_TRUE(text.isOk()) << text.status().toString();
  LoadedArtifact model = loadForTest(compileForTest(*dir), 32);
  ASSERT_NE(model.executor, nullptr);
  nlohmann::json reference = nlohmann::json::parse(*text);
  ASSERT_EQ(reference["cases"].size(), 4u);
  for (const auto &c : reference["cases"]) {
    auto prompt = c["input_ids"].get<std::vector<int32_t>>();
    auto expected = c["greedy_new_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy(*model.executor, prompt, static_cast<int32_t>(expected.size())), expected)
        << "prompt " << c["prompt"];
  }
}

} // namespace
} // namespace kiln::e2e
