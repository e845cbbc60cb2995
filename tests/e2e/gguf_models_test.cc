// The GGUF front end end to end (compiler/import/gguf_model.h): GGUF files compiled by kiln and
// run on the cpu backend against transformers reading the same files
// (tools/goldens/make_gguf_goldens.py).
// - Fixtures (tests/data/gguf): one per family, in the layouts llama.cpp's converter writes
//   (llama's permuted q/k rows, qwen2 biases, qwen3 q/k norms with tied embeddings, phi3's fused
//   qkv and gate_up), quantized Q8_0 / Q4_0 / F16 / Q5_1: logits within 1e-4 at every prompt
//   position and 16 greedy steps, chunked prefill and prefix-cache hits.
// - SmolLM2-135M-Instruct (Q4_1, the default model; scripts/fetch-smollm2.sh caches it): the
//   golden's sparse rows within 1e-4, greedy ids, and the chat prompt's ids through the
//   artifact's tokenizer and chat template (both converted from the GGUF metadata) equal to
//   transformers' GGUF tokenizer + apply_chat_template. Skipped with a message when the file is
//   absent, except in CI (CI=true), where that is a failure.
// - The Q8_0 and Q4_0 fixtures again with KILN_CPU_ACTIVATIONS=int8, against transformers with the
//   same int8 rows (tools/goldens/make_int8_activation_goldens.py).
#include "tests/e2e/e2e_util.h"

#include "kernels/cpu/activation_mode.h"
#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace kiln::e2e {
namespace {

namespace fs = std::filesystem;

TEST(GgufFixtures, LlamaPermutedQkQ8_0) {
  checkGoldenLogits("tiny-llama.gguf");
  checkGoldenChunkedAndCached("tiny-llama.gguf", 5);
}

TEST(GgufFixtures, Qwen2BiasesMqaQ4_0) {
  checkGoldenLogits("tiny-qwen2-untied.gguf");
  checkGoldenChunkedAndCached("tiny-qwen2-untied.gguf", 6);
}

TEST(GgufFixtures, Qwen3QkNormTiedF16) {
  checkGoldenLogits("gguf-qwen3.gguf");
  checkGoldenChunkedAndCached("gguf-qwen3.gguf", 6);
}

TEST(GgufFixtures, Phi3FusedQ5_1) {
  checkGoldenLogits("tiny-phi3.gguf");
  checkGoldenChunkedAndCached("tiny-phi3.gguf", 5);
}

// KILN_CPU_ACTIVATIONS=int8 (kernels/cpu/activation_mode.h): the Q8_0 and Q4_0 fixtures with each
// Linear's rows quantized to int8, against transformers quantizing each nn.Linear's input by the
// same rule (tools/goldens/make_int8_activation_goldens.py), within the same 1e-4, prefill and 16
// greedy steps, chunked and from the prefix cache.
class GgufInt8Activations : public ::testing::Test {
protected:
  void SetUp() override { kernels::cpu::setCpuActivations(kernels::cpu::CpuActivations::kInt8); }
  void TearDown() override { kernels::cpu::setCpuActivations(kernels::cpu::CpuActivations::kF32); }
};

TEST_F(GgufInt8Activations, LlamaQ8_0) {
  checkGoldenLogits("tiny-llama.gguf.int8-activations");
  checkGoldenChunkedAndCached("tiny-llama.gguf.int8-activations", 5);
}

TEST_F(GgufInt8Activations, Qwen2Q4_0) {
  checkGoldenLogits("tiny-qwen2-untied.gguf.int8-activations");
  checkGoldenChunkedAndCached("tiny-qwen2-untied.gguf.int8-activations", 6);
}

// The int8 goldens are not the fp32 ones: the quantization moves the logits by far more than the
// tolerance, so a run that ignored the mode would fail the tests above.
TEST(GgufInt8ActivationGoldens, DifferFromTheFp32RowGoldens) {
  for (const char *fixture : {"tiny-llama.gguf", "tiny-qwen2-untied.gguf"}) {
    const std::string dir = std::string(KILN_TEST_DATA_DIR) + "/golden/" + fixture;
    Result<std::string> fp32 = readFile(dir + ".case2.logits.f32");
    Result<std::string> int8 = readFile(dir + ".int8-activations.case2.logits.f32");
    ASSERT_TRUE(fp32.isOk() && int8.isOk()) << fixture;
    ASSERT_EQ(fp32->size(), int8->size());
    const auto *a = reinterpret_cast<const float *>(fp32->data());
    const auto *b = reinterpret_cast<const float *>(int8->data());
    EXPECT_GT(maxAbsDiff(a, b, fp32->size() / sizeof(float)), 1e-2f) << fixture;
  }
}

// The compile log names the stored types, and those kiln dequantizes rather than keeps packed.
TEST(GgufFixtures, CompileLogNamesStoredAndDequantizedBlockTypes) {
  std::ostringstream log;
  compiler::CompileOptions options;
  options.log = &log;
  compileForTest(std::string(KILN_TEST_DATA_DIR) + "/gguf/tiny-phi3.gguf", options);
  EXPECT_NE(log.str().find("phi3, 15 tensors (F32 5, Q5_1 10), no tokenizer metadata; Q5_1 blocks "
                           "are dequantized (kiln keeps Q8_0, Q4_0 and Q4_1 matrices packed)\n"),
            std::string::npos)
      << log.str();
  std::ostringstream q8;
  options.log = &q8;
  compileForTest(std::string(KILN_TEST_DATA_DIR) + "/gguf/tiny-llama.gguf", options);
  EXPECT_NE(q8.str().find(" tensors (F32 "), std::string::npos) << q8.str();
  EXPECT_EQ(q8.str().find("are dequantized"), std::string::npos) << q8.str();
}

// Logits of every prompt position of `ids` from a fresh compile of `model`.
std::vector<float> promptLogits(const std::string &model, const std::vector<int32_t> &ids) {
  LoadedArtifact loaded = loadForTest(compileForTest(model), 16);
  if (!loaded.executor)
    return {};
  rt::SequenceStep step;
  step.tokenIds = ids;
  step.blockTables = {{0, 1}};
  step.logits = rt::LogitsWanted::kAll;
  auto output = loaded.executor->execute(rt::StepBatch{{step}});
  EXPECT_TRUE(output.isOk()) << output.status().toString();
  if (!output.isOk())
    return {};
  std::vector<float> rows;
  for (int32_t r = 0; r < output->numRows(); ++r)
    rows.insert(rows.end(), output->row(r), output->row(r) + 512);
  return rows;
}

// The first part of a split model (tests/data/gguf/tiny-llama-split: the same tensors in 3
// files), and a directory holding one .gguf, compile to the model of tiny-llama.gguf (checked
// against transformers above): identical logits.
TEST(GgufFixtures, SplitPartsAndDirectoryCompileToTheSameModel) {
  const std::string data = std::string(KILN_TEST_DATA_DIR) + "/gguf/";
  const std::vector<int32_t> ids = {1, 17, 300, 42, 511, 256, 99};
  std::vector<float> single = promptLogits(data + "tiny-llama.gguf", ids);
  ASSERT_EQ(single.size(), ids.size() * 512);
  std::vector<float> split =
      promptLogits(data + "tiny-llama-split/tiny-llama-00001-of-00003.gguf", ids);
  ASSERT_EQ(split.size(), single.size());
  EXPECT_EQ(maxAbsDiff(split.data(), single.data(), single.size()), 0.f);
  fs::path dir = fs::path(::testing::TempDir()) / "gguf-dir-model";
  fs::create_directories(dir);
  fs::copy_file(data + "tiny-llama.gguf", dir / "model.gguf", fs::copy_options::overwrite_existing);
  std::vector<float> fromDir = promptLogits(dir.string(), ids);
  ASSERT_EQ(fromDir.size(), single.size());
  EXPECT_EQ(maxAbsDiff(fromDir.data(), single.data(), single.size()), 0.f);
}

bool inCi() {
  const char *ci = std::getenv("CI");
  std::string value = ci ? ci : "";
  return value == "true" || value == "1";
}

// The cached SmolLM2 GGUF (scripts/fetch-smollm2.sh), or "" when absent.
std::string smolLm2Path() {
  if (const char *path = std::getenv("KILN_SMOLLM2_GGUF"); path && *path)
    return path;
  std::string cache;
  if (const char *dir = std::getenv("KILN_MODEL_CACHE"); dir && *dir)
    cache = dir;
  else if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    cache = std::string(xdg) + "/kiln/models";
  else if (const char *home = std::getenv("HOME"); home && *home)
    cache = std::string(home) + "/.cache/kiln/models";
  std::string path = cache + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  return fs::exists(path) ? path : "";
}

class GgufSmolLM2 : public ::testing::Test {
protected:
  void SetUp() override {
    path_ = smolLm2Path();
    if (path_.empty()) {
      if (inCi())
        FAIL() << "SmolLM2-135M-Instruct GGUF not cached; CI fetches it with "
                  "scripts/fetch-smollm2.sh";
      GTEST_SKIP() << "SmolLM2-135M-Instruct GGUF not cached: run scripts/fetch-smollm2.sh";
    }
    Result<std::string> text =
        readFile(std::string(KILN_TEST_DATA_DIR) + "/golden/smollm2-135m-instruct.gguf.json");
    ASSERT_TRUE(text.isOk()) << text.status().toString();
    golden_ = nlohmann::json::parse(*text);
  }
  std::string path_;
  nlohmann::json golden_;
};

// One prefill of the prompt, then one decode step per greedy id: every sparse row within the
// golden's tolerance of transformers' float64 forward (logits_fp64: transformers' own fp32 rows are
// ~6.6e-5 from it, kiln's ~5e-5), and each greedy id the argmax of its row.
TEST_F(GgufSmolLM2, LogitsAndGreedyIdsMatchTransformers) {
  compiler::CompileOptions options;
  options.maxBatch = 1;
  options.maxSeqLen = 128;
  LoadedArtifact loaded = loadForTest(compileForTest(path_, options), 16);
  ASSERT_NE(loaded.executor, nullptr);
  rt::Executor &executor = *loaded.executor;
  const int32_t vocab = golden_["vocab_size"];
  const float tolerance = golden_["tolerance"]["logits_max_abs"];
  const std::string against = golden_["tolerance"]["against"]; // logits_fp64
  const int32_t blockSize = executor.limits().blockSize;
  for (size_t c = 0; c < golden_["cases"].size(); ++c) {
    const nlohmann::json &gc = golden_["cases"][c];
    std::vector<int32_t> prompt = gc["prompt_ids"], greedy = gc["greedy_ids"];
    std::vector<int32_t> blocks;
    for (int32_t b = 0; b * blockSize < static_cast<int32_t>(prompt.size() + greedy.size()); ++b)
      blocks.push_back(b);
    std::vector<std::vector<float>> rows;
    rt::SequenceStep step;
    step.tokenIds = prompt;
    step.blockTables = {blocks};
    step.logits = rt::LogitsWanted::kAll;
    step.sequenceLength = static_cast<int32_t>(prompt.size());
    auto output = executor.execute(rt::StepBatch{{step}});
    ASSERT_TRUE(output.isOk()) << output.status().toString();
    for (int32_t r = 0; r < output->numRows(); ++r)
      rows.emplace_back(output->row(r), output->row(r) + vocab);
    for (size_t k = 0; k + 1 < greedy.size(); ++k) {
      rt::SequenceStep decode;
      decode.tokenIds = {greedy[k]};
      decode.startPosition = static_cast<int32_t>(prompt.size() + k);
      decode.blockTables = {blocks};
      decode.logits = rt::LogitsWanted::kAll;
      decode.sequenceLength = decode.startPosition + 1;
      auto out = executor.execute(rt::StepBatch{{decode}});
      ASSERT_TRUE(out.isOk()) << out.status().toString();
      rows.emplace_back(out->row(0), out->row(0) + vocab);
    }
    ASSERT_EQ(rows.size() + 1, gc["rows"].size());
    double worst = 0, worstFp32 = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const nlohmann::json &sparse = gc["rows"][r];
      for (size_t i = 0; i < sparse["ids"].size(); ++i) {
        int32_t id = sparse["ids"][i];
        double expected = sparse[against][i], fp32 = sparse["logits"][i];
        worst = std::max(worst, std::abs(rows[r][id] - expected));
        worstFp32 = std::max(worstFp32, std::abs(rows[r][id] - fp32));
        EXPECT_NEAR(rows[r][id], expected, tolerance)
            << "case " << c << " row " << r << " id " << id;
      }
    }
    for (size_t k = 0; k < greedy.size(); ++k)
      EXPECT_EQ(argmax(rows[prompt.size() - 1 + k].data(), vocab), greedy[k])
          << "case " << c << " greedy step " << k;
    std::cout << "case " << c << ": " << rows.size() << " rows, max |kiln - transformers fp64| "
              << worst << ", |kiln - transformers fp32| " << worstFp32 << "\n";
  }
}

// `kiln generate --chat` on the compiled GGUF: the prompt ids come from the artifact's tokenizer
// and chat template (converted from the GGUF metadata) and equal transformers'; the greedy
// answer is the golden's, up to the end-of-turn token where generation stops.
TEST_F(GgufSmolLM2, GenerateChatPromptIdsAndAnswer) {
  compiler::CompileOptions options;
  options.maxBatch = 2;
  options.maxSeqLen = 128;
  std::string artifact = compileForTest(path_, options);
  const std::string kiln = std::string(KILN_BINARY_DIR) + "/tools/kiln/kiln";
  for (const nlohmann::json &gc : golden_["cases"]) {
    std::string text = gc["prompt_text"];
    auto [code, output] = runCommand(kiln + " generate " + artifact + " --chat '" + text +
                                     "' --max-tokens 16 2>/dev/null");
    ASSERT_EQ(code, 0) << output;
    nlohmann::json line = nlohmann::json::parse(output.substr(0, output.find('\n')));
    EXPECT_EQ(line["prompt_ids"], gc["prompt_ids"]) << text;
    std::vector<int32_t> greedy = gc["greedy_ids"], got = line["output_ids"];
    auto end = std::find(greedy.begin(), greedy.end(), 2); // <|im_end|>, the eos id
    std::vector<int32_t> expected(greedy.begin(), end == greedy.end() ? end : end + 1);
    EXPECT_EQ(got, expected) << text << ": " << line.dump();
  }
}

} // namespace
} // namespace kiln::e2e
