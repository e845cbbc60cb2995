#include "tests/e2e/e2e_util.h"

#include "compiler/import/gguf_file.h"

#include "runtime/base/file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <sys/wait.h>

namespace kiln::e2e {
namespace fs = std::filesystem;

namespace {

struct TempDirs {
  std::vector<fs::path> dirs;
  ~TempDirs() {
    std::error_code ec;
    for (const fs::path &dir : dirs)
      fs::remove_all(dir, ec);
  }
};
TempDirs &tempDirs() {
  static TempDirs dirs;
  return dirs;
}

std::string resolveModelDir(const std::string &recorded) {
  const std::string kShared = "shared:";
  if (recorded.rfind(kShared, 0) == 0)
    return std::string(KILN_ASSETS_DIR) + "/" + recorded.substr(kShared.size());
  // Recorded relative to the repository root; tests/data is KILN_TEST_DATA_DIR.
  return (fs::path(KILN_TEST_DATA_DIR) / ".." / ".." / recorded).lexically_normal().string();
}

} // namespace

std::optional<std::string> assetModelDir(const std::string &relative) {
  fs::path dir = fs::path(KILN_ASSETS_DIR) / relative;
  if (!fs::exists(dir / "config.json"))
    return std::nullopt;
  return dir.string();
}

std::optional<Golden> loadGolden(const std::string &name, std::string &skipReason) {
  std::string dir = std::string(KILN_TEST_DATA_DIR) + "/golden/";
  Result<std::string> text = readFile(dir + name + ".json");
  EXPECT_TRUE(text.isOk()) << text.status().toString();
  if (!text.isOk())
    return std::nullopt;
  nlohmann::json json = nlohmann::json::parse(*text);
  Golden golden;
  golden.model = json["model"];
  golden.modelDir = resolveModelDir(json["model_dir"]);
  golden.vocabSize = json["vocab_size"];
  golden.tolerance = json["tolerance"]["logits_max_abs"];
  golden.incremental = json.value("incremental", false);
  if (json["tolerance"].contains("rounding_flips")) {
    golden.roundingFraction = json["tolerance"]["rounding_flips"]["max_fraction_of_rows"];
    golden.roundingBound = json["tolerance"]["rounding_flips"]["logits_max_abs"];
  }
  if (json.contains("compile")) {
    golden.quantize = json["compile"].value("quantize", "");
    golden.groupSize = json["compile"].value("group_size", int64_t{0});
    golden.kvDtype = json["compile"].value("kv_dtype", "");
  }
  // A HF model directory, or a GGUF file (tests/data/gguf).
  if (!fs::exists(fs::path(golden.modelDir) / "config.json") &&
      !(compiler::isGgufPath(golden.modelDir) && fs::exists(golden.modelDir))) {
    skipReason = "model directory " + golden.modelDir +
                 " is absent (../shared/assets not present on this machine)";
    return std::nullopt;
  }
  for (const auto &c : json["cases"]) {
    GoldenCase gc;
    gc.promptIds = c["prompt_ids"].get<std::vector<int32_t>>();
    gc.greedyIds = c["greedy_ids"].get<std::vector<int32_t>>();
    gc.generateIds = c.contains("hf_generate_greedy_ids")
                         ? c["hf_generate_greedy_ids"].get<std::vector<int32_t>>()
                         : gc.greedyIds;
    gc.rows = c["logits_rows"];
    Result<std::string> bytes = readFile(dir + c["logits_file"].get<std::string>());
    EXPECT_TRUE(bytes.isOk()) << bytes.status().toString();
    if (!bytes.isOk())
      return std::nullopt;
    EXPECT_EQ(bytes->size(), static_cast<size_t>(gc.rows) * golden.vocabSize * sizeof(float));
    gc.logits.resize(bytes->size() / sizeof(float));
    std::memcpy(gc.logits.data(), bytes->data(), gc.logits.size() * sizeof(float));
    golden.cases.push_back(std::move(gc));
  }
  return golden;
}

std::optional<compiler::CompileOptions> cudaCompileOptions(std::string &why) {
#ifndef KILN_HAVE_CODEGEN
  why = "built without the CUDA code generator (KILN_ENABLE_CUDA=OFF)";
  return std::nullopt;
#else
  auto device = rt::createDevice("cuda");
  if (!device.isOk()) {
    why = "no CUDA device: " + device.status().message();
    return std::nullopt;
  }
  compiler::CompileOptions options;
  options.targets = {"cpu", (*device)->target()};
  return options;
#endif
}

WeightFormats weightFormats(const std::string &artifactDir) {
  WeightFormats formats;
  auto artifact = rt::Artifact::load(artifactDir);
  EXPECT_TRUE(artifact.isOk()) << artifact.status().toString();
  if (!artifact.isOk())
    return formats;
  for (const schema::WeightEntry *w : *(*artifact)->plan().ranks()->Get(0)->weights()) {
    const bool quantized = w->group_size() > 0;
    ++formats.count[std::string(schema::EnumNameDType(w->dtype())) +
                    (quantized ? " g" + std::to_string(w->group_size()) : "")];
    if (quantized)
      formats.quantizedBytes += w->size();
  }
  return formats;
}

std::string compileForTest(const std::string &modelDir, compiler::CompileOptions options) {
  char pattern[] = "/tmp/kiln-e2e-XXXXXX";
  const char *made = mkdtemp(pattern);
  EXPECT_NE(made, nullptr);
  fs::path root = made ? made : "/tmp";
  tempDirs().dirs.push_back(root);
  options.modelDir = modelDir;
  options.outDir = (root / "model.kiln").string();
  Status status = compiler::compileModel(options);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return options.outDir;
}

LoadedArtifact loadForTest(const std::string &artifactDir, int32_t numKvBlocks,
                           const std::string &deviceName) {
  LoadedArtifact loaded;
  auto artifact = rt::Artifact::load(artifactDir);
  EXPECT_TRUE(artifact.isOk()) << artifact.status().toString();
  if (!artifact.isOk())
    return loaded;
  loaded.artifact = std::move(*artifact);
  auto device = rt::createDevice(deviceName);
  EXPECT_TRUE(device.isOk()) << device.status().toString();
  if (!device.isOk())
    return loaded;
  loaded.device = std::move(*device);
  rt::ExecutorOptions options;
  options.numKvBlocks = numKvBlocks;
  auto executor = rt::Executor::create(*loaded.artifact, *loaded.device, options);
  EXPECT_TRUE(executor.isOk()) << executor.status().toString();
  if (executor.isOk())
    loaded.executor = std::move(*executor);
  return loaded;
}

std::pair<int, std::string> runCommand(const std::string &command) {
  std::string output;
  FILE *pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe)
    return {-1, ""};
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe))
    output.append(buffer.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

float maxAbsDiff(const float *a, const float *b, size_t count) {
  float worst = 0;
  for (size_t i = 0; i < count; ++i) {
    float d = std::fabs(a[i] - b[i]);
    if (!(d <= worst)) // also catches NaN
      worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

int32_t argmax(const float *row, int32_t size) {
  return static_cast<int32_t>(std::max_element(row, row + size) - row);
}

namespace {

using Tables = std::vector<std::vector<int32_t>>; // one sequence's, per KV cache group

// Blocks for `tokens` positions in every KV cache group, from block `first` on.
Tables blocksFor(int32_t tokens, const rt::RunnerLimits &limits, int32_t first) {
  return rt::ownBlockTables(limits, first, (tokens + limits.blockSize - 1) / limits.blockSize);
}

// The rows of one pass over a case, each checked against the golden's tolerance (or, where the
// golden allows rounding flips, counted and checked against their bound; the count is checked when
// the pass ends).
class RowTally {
public:
  RowTally(const Golden &golden, std::string pass) : golden_(golden), pass_(std::move(pass)) {}
  ~RowTally() {
    if (golden_.roundingFraction > 0)
      EXPECT_LE(over_, golden_.roundingFraction * rows_)
          << golden_.model << " " << pass_ << ": " << over_ << " of " << rows_ << " rows over "
          << golden_.tolerance;
  }
  void check(const float *got, const float *want, const std::string &where) {
    const float diff = maxAbsDiff(got, want, golden_.vocabSize);
    ++rows_;
    if (golden_.roundingFraction == 0) {
      EXPECT_LE(diff, golden_.tolerance) << golden_.model << " " << where;
      return;
    }
    EXPECT_LE(diff, golden_.roundingBound) << golden_.model << " " << where;
    over_ += diff > golden_.tolerance ? 1 : 0;
  }

private:
  const Golden &golden_;
  std::string pass_;
  int32_t rows_ = 0, over_ = 0;
};

void checkCase(rt::Executor &executor, const Golden &golden, const GoldenCase &gc, size_t index) {
  RowTally tally(golden, "case " + std::to_string(index) + " prefill and decode");
  const int32_t vocab = golden.vocabSize;
  const int32_t prompt = static_cast<int32_t>(gc.promptIds.size());
  ASSERT_EQ(gc.rows, prompt + static_cast<int32_t>(gc.greedyIds.size()));
  rt::SequenceStep step;
  step.tokenIds = gc.promptIds;
  step.startPosition = 0;
  step.blockTables = blocksFor(gc.rows, executor.limits(), 0);
  step.logits = rt::LogitsWanted::kAll;
  auto output = executor.execute(rt::StepBatch{{step}});
  ASSERT_TRUE(output.isOk()) << output.status().toString();
  ASSERT_EQ(output->vocabSize, vocab);
  ASSERT_EQ(output->numRows(), prompt);
  for (int32_t r = 0; r < prompt; ++r)
    tally.check(output->row(r), gc.logits.data() + size_t(r) * vocab,
                "case " + std::to_string(index) + " prompt row " + std::to_string(r));
  const float *last = output->row(prompt - 1);
  std::vector<float> previous(last, last + vocab);
  for (size_t k = 0; k < gc.greedyIds.size(); ++k) {
    EXPECT_EQ(argmax(previous.data(), vocab), gc.greedyIds[k])
        << golden.model << " case " << index << " greedy step " << k;
    // Teacher-forced with the golden id so one mismatch does not hide later comparisons.
    step.tokenIds = {gc.greedyIds[k]};
    step.startPosition = prompt + static_cast<int32_t>(k);
    step.logits = rt::LogitsWanted::kLast;
    output = executor.execute(rt::StepBatch{{step}});
    ASSERT_TRUE(output.isOk()) << output.status().toString();
    int32_t row = prompt + static_cast<int32_t>(k);
    tally.check(output->row(0), gc.logits.data() + size_t(row) * vocab,
                "case " + std::to_string(index) + " decode row " + std::to_string(row));
    previous.assign(output->row(0), output->row(0) + vocab);
  }
}

// The whole prompt + greedy sequence as one prefill: every row against the golden at once.
void checkCaseAsOnePrefill(rt::Executor &executor, const Golden &golden, const GoldenCase &gc,
                           size_t index) {
  const int32_t vocab = golden.vocabSize;
  rt::SequenceStep step;
  step.tokenIds = gc.promptIds;
  step.tokenIds.insert(step.tokenIds.end(), gc.greedyIds.begin(), gc.greedyIds.end());
  step.blockTables = blocksFor(gc.rows, executor.limits(), 0);
  step.logits = rt::LogitsWanted::kAll;
  auto output = executor.execute(rt::StepBatch{{step}});
  ASSERT_TRUE(output.isOk()) << output.status().toString();
  ASSERT_EQ(output->numRows(), gc.rows);
  RowTally tally(golden, "case " + std::to_string(index) + " as one prefill");
  for (int32_t r = 0; r < gc.rows; ++r)
    tally.check(output->row(r), gc.logits.data() + size_t(r) * vocab,
                "case " + std::to_string(index) + " one-prefill row " + std::to_string(r));
}

} // namespace

void checkGoldenLogits(const std::string &name, const std::string &device,
                       compiler::CompileOptions options) {
  std::string skipReason;
  std::optional<Golden> golden = loadGolden(name, skipReason);
  if (!golden) {
    if (!skipReason.empty())
      GTEST_SKIP() << skipReason;
    FAIL() << "cannot read the golden for " << name;
  }
  std::string artifact = compileForTest(golden->modelDir, golden->compileOptions(options));
  LoadedArtifact loaded = loadForTest(artifact, 64, device);
  ASSERT_NE(loaded.executor, nullptr);
  for (size_t i = 0; i < golden->cases.size(); ++i) {
    checkCase(*loaded.executor, *golden, golden->cases[i], i);
    if (!golden->incremental)
      checkCaseAsOnePrefill(*loaded.executor, *golden, golden->cases[i], i);
  }
}

namespace {

// Runs tokens [begin, end) of case `gc`'s prompt + greedy ids as one step (the whole prompt known
// while any of it is prefilled), checking every row against the golden.
void runAndCheckRows(rt::Executor &executor, const Golden &golden, const GoldenCase &gc,
                     const Tables &blocks, int32_t begin, int32_t end, const std::string &what,
                     RowTally &tally) {
  const int32_t vocab = golden.vocabSize;
  const int32_t prompt = static_cast<int32_t>(gc.promptIds.size());
  std::vector<int32_t> all = gc.promptIds;
  all.insert(all.end(), gc.greedyIds.begin(), gc.greedyIds.end());
  rt::SequenceStep step;
  step.tokenIds.assign(all.begin() + begin, all.begin() + end);
  step.startPosition = begin;
  step.blockTables = blocks;
  step.logits = rt::LogitsWanted::kAll;
  step.sequenceLength = std::max(end, prompt); // the whole prompt is known while prefilling
  auto output = executor.execute(rt::StepBatch{{step}});
  ASSERT_TRUE(output.isOk()) << output.status().toString();
  ASSERT_EQ(output->numRows(), end - begin);
  for (int32_t r = begin; r < end; ++r)
    tally.check(output->row(r - begin), gc.logits.data() + size_t(r) * vocab,
                what + " row " + std::to_string(r));
}

} // namespace

void checkGoldenChunkedAndCached(const std::string &name, int32_t chunk,
                                 compiler::CompileOptions options, const std::string &device) {
  std::string skipReason;
  std::optional<Golden> golden = loadGolden(name, skipReason);
  ASSERT_TRUE(golden) << skipReason;
  // Two sequences of blocks of their own in every KV cache group (Gemma 3's six at most).
  LoadedArtifact loaded =
      loadForTest(compileForTest(golden->modelDir, golden->compileOptions(options)), 256, device);
  ASSERT_NE(loaded.executor, nullptr);
  rt::Executor &executor = *loaded.executor;
  const int32_t blockSize = executor.limits().blockSize;
  for (size_t i = 0; i < golden->cases.size(); ++i) {
    const GoldenCase &gc = golden->cases[i];
    const int32_t prompt = static_cast<int32_t>(gc.promptIds.size());
    const std::string where = "case " + std::to_string(i);
    // Sequence A: blocks 0.., the prompt in chunks, then decode steps.
    const Tables blocksA = blocksFor(gc.rows, executor.limits(), 0);
    RowTally tallyA(*golden, where + " chunked");
    for (int32_t begin = 0; begin < prompt; begin += chunk)
      runAndCheckRows(executor, *golden, gc, blocksA, begin, std::min(prompt, begin + chunk),
                      where + " chunked prefill", tallyA);
    for (int32_t position = prompt; position < gc.rows; ++position)
      runAndCheckRows(executor, *golden, gc, blocksA, position, position + 1,
                      where + " decode after chunks", tallyA);
    // Sequence B: A's full prompt blocks as its prefix-cache hit, its own blocks after them (in
    // every KV cache group).
    const int32_t cachedBlocks = (prompt - 1) / blockSize; // at least one token to compute
    Tables blocksB = blocksFor(gc.rows, executor.limits(), 128);
    RowTally tallyB(*golden, where + " after a prefix-cache hit");
    for (size_t g = 0; g < blocksB.size(); ++g)
      std::copy(blocksA[g].begin(), blocksA[g].begin() + cachedBlocks, blocksB[g].begin());
    runAndCheckRows(executor, *golden, gc, blocksB, cachedBlocks * blockSize, prompt,
                    where + " prefill after a prefix-cache hit of " +
                        std::to_string(cachedBlocks * blockSize) + " tokens",
                    tallyB);
    for (int32_t position = prompt; position < gc.rows; ++position)
      runAndCheckRows(executor, *golden, gc, blocksB, position, position + 1,
                      where + " decode after the prefix-cache hit", tallyB);
  }
}

std::vector<int32_t> greedyIds(rt::Executor &executor, const std::vector<int32_t> &prompt,
                               int32_t newTokens) {
  rt::SequenceStep step;
  const int32_t total = static_cast<int32_t>(prompt.size()) + newTokens;
  const rt::RunnerLimits &limits = executor.limits();
  step.blockTables =
      rt::ownBlockTables(limits, 0, (total + limits.blockSize - 1) / limits.blockSize);
  step.tokenIds = prompt;
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < newTokens) {
    auto output = executor.execute(rt::StepBatch{{step}});
    EXPECT_TRUE(output.isOk()) << output.status().toString();
    if (!output.isOk())
      return out;
    out.push_back(argmax(output->row(0), output->vocabSize));
    step.startPosition += static_cast<int32_t>(step.tokenIds.size());
    step.tokenIds = {out.back()};
  }
  return out;
}

std::vector<int32_t> llama2cStories260KIds() {
  Result<std::string> text =
      readFile(std::string(KILN_ASSETS_DIR) + "/expected/stories260K_llama2c_reference.md");
  if (!text.isOk())
    return {};
  const size_t line = text->find("NEXT_TOKEN_IDS", text->find("## 1."));
  const size_t colon = text->find(": ", text->find(')', line));
  if (line == std::string::npos || colon == std::string::npos)
    return {};
  std::istringstream ids(text->substr(colon + 2, text->find('\n', colon) - colon - 2));
  std::vector<int32_t> out;
  for (int32_t id; ids >> id;)
    out.push_back(id);
  return out;
}

void checkTinyStoriesFloat64Greedy(rt::Executor &executor) {
  Result<std::string> text =
      readFile(std::string(KILN_ASSETS_DIR) + "/expected/tinystories656K_hf_reference_greedy.json");
  ASSERT_TRUE(text.isOk()) << text.status().toString();
  nlohmann::json reference = nlohmann::json::parse(*text);
  ASSERT_EQ(reference["cases"].size(), 4u);
  for (const auto &c : reference["cases"]) {
    auto prompt = c["input_ids"].get<std::vector<int32_t>>();
    auto expected = c["greedy_new_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedyIds(executor, prompt, static_cast<int32_t>(expected.size())), expected)
        << "prompt " << c["prompt"];
  }
}

} // namespace kiln::e2e
