// End-to-end helpers: compile a model with the real compiler, load it with the real runtime, and
// compare against golden data from Hugging Face transformers (tests/data/golden, made by
// tools/goldens/make_llama_goldens.py).
#pragma once

#include "compiler/driver/compile.h"
#include "runtime/artifact/artifact.h"
#include "runtime/exec/executor.h"
#include "runtime/hal/device.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::e2e {

struct GoldenCase {
  std::vector<int32_t> promptIds;
  std::vector<int32_t> greedyIds;
  // What transformers' generate() returned, when it differs in kind from the rows (tiny-phi3-
  // longrope: generate recomputes the cache at the rope switch); else greedyIds.
  std::vector<int32_t> generateIds;
  std::vector<float> logits; // [rows, vocab]: row r = logits after token r of prompt + greedy
  int32_t rows = 0;
};

struct Golden {
  std::string model;
  std::string modelDir; // resolved path
  int32_t vocabSize = 0;
  float tolerance = 0;
  // Goldens whose numerics round to integers (int8 rows: tools/goldens/make_int8_activation_
  // goldens.py) may see a value land on the other side of a rounding boundary, which moves the
  // logits of that row and the rows after it: there, up to `roundingFraction` of the rows of each
  // pass may exceed `tolerance`, every row within `roundingBound` ("tolerance"."rounding_flips").
  double roundingFraction = 0;
  float roundingBound = 0;
  // The rows come from a prefill of the prompt and one-token decode steps (RoPE that depends on
  // the sequence's length: tests/data/README.md), so one prefill of prompt + greedy ids does not
  // reproduce them.
  bool incremental = false;
  // The compile options the golden needs ("compile" of tools/goldens/make_quantize_goldens.py
  // and make_kv_dtype_goldens.py): --quantize, --group-size, --kv-dtype; empty for the others.
  std::string quantize;
  int64_t groupSize = 0;
  std::string kvDtype;
  std::vector<GoldenCase> cases;
  // `options` with the golden's own compile options set.
  compiler::CompileOptions compileOptions(compiler::CompileOptions options) const {
    options.quantize = quantize;
    options.groupSize = groupSize;
    options.kvDtype = kvDtype;
    return options;
  }
};

// Reads tests/data/golden/<name>.json and its logits files. nullopt + `skipReason` when the
// model lives in ../shared/assets and that directory is absent.
std::optional<Golden> loadGolden(const std::string &name, std::string &skipReason);

// Real checkpoints from ../shared/assets; nullopt when absent.
std::optional<std::string> assetModelDir(const std::string &relative);

// Compile options for cpu + GPU 0's SM, or nullopt with `why` (no device / no codegen) for the
// GPU tests to skip with.
std::optional<compiler::CompileOptions> cudaCompileOptions(std::string &why);

// Compiles `modelDir` into a fresh temporary directory (removed at exit). Fails the test on error.
std::string compileForTest(const std::string &modelDir, compiler::CompileOptions options = {});

// "Q8 g32" / "F32" -> weights of rank 0 of an artifact stored so, and the bytes of the quantized
// ones (fails the test when the artifact does not load).
struct WeightFormats {
  std::map<std::string, int> count;
  uint64_t quantizedBytes = 0;
};
WeightFormats weightFormats(const std::string &artifactDir);

struct LoadedArtifact {
  std::unique_ptr<rt::Artifact> artifact;
  std::unique_ptr<rt::Device> device;
  std::unique_ptr<rt::Executor> executor;
};
// On `device` ("cpu", "cuda", "cuda:1", ...); fails the test when it cannot be opened.
LoadedArtifact loadForTest(const std::string &artifactDir, int32_t numKvBlocks,
                           const std::string &device = "cpu");

// Max |a - b| over `count` floats.
// Runs `command` in a shell with stderr merged into stdout: {exit code (-1 if it did not exit),
// output}.
std::pair<int, std::string> runCommand(const std::string &command);

float maxAbsDiff(const float *a, const float *b, size_t count);
int32_t argmax(const float *row, int32_t size);

// Greedy decoding through the executor: one sequence, blocks 0.. in order, `newTokens` ids.
std::vector<int32_t> greedyIds(rt::Executor &executor, const std::vector<int32_t> &prompt,
                               int32_t newTokens);
// llama2.c's 200 greedy ids of stories260K from BOS (section 1 of
// ../shared/assets/expected/stories260K_llama2c_reference.md); empty when unreadable.
std::vector<int32_t> llama2cStories260KIds();
// TinyStories-656K's four float64-reference greedy cases
// (../shared/assets/expected/tinystories656K_hf_reference_greedy.json), asserted on `executor`.
void checkTinyStoriesFloat64Greedy(rt::Executor &executor);

// Runs every golden case: prefill (all logits) then 16 teacher-forced decode steps, and the whole
// prompt + greedy ids as one prefill; asserts each row within the golden's tolerance and each
// greedy argmax equal to the golden id. Compiled with `options` (model and output directories
// are filled in), run on `device`.
void checkGoldenLogits(const std::string &name, const std::string &device = "cpu",
                       compiler::CompileOptions options = {});

// Every golden case with its prompt prefilled in chunks of `chunk` tokens, then again with its
// full prompt blocks taken from the prefix cache (another sequence's blocks, only the rest
// prefilled), each followed by teacher-forced decode steps: every row within the golden's
// tolerance. Compiled with `options` (kv block size, ...), run on `device`.
void checkGoldenChunkedAndCached(const std::string &name, int32_t chunk,
                                 compiler::CompileOptions options = {},
                                 const std::string &device = "cpu");

} // namespace kiln::e2e
