// A tiny Llama-shaped model built in the test (no checkpoint): random weights, the fused step
// program the compiler emits for Llama (Embedding, RmsNorm, Linear(qkv), RopeKvWrite, Attention,
// Linear(o), AddRmsNorm, Linear(gate/up), SiluMul, Linear(down), AddRmsNorm, GatherRows,
// Linear(lm_head)), and a dense double-precision reference forward pass to check it against.
#pragma once

#include "runtime/artifact/artifact.h"
#include "runtime/base/status.h"
#include "runtime/hal/device.h"
#include "schema/plan_generated.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::rt::testing {

struct TinyLlamaConfig {
  int32_t vocab = 64;
  int32_t hidden = 32;
  int32_t intermediate = 64;
  int32_t layers = 2;
  int32_t heads = 4;
  int32_t kvHeads = 2;
  int32_t headDim = 8;
  float eps = 1e-5f;
  float ropeTheta = 10000.0f;
  uint32_t seed = 1234;
  // Compiled maxima.
  int32_t maxBatch = 4;
  int32_t maxSeqLen = 64;
  int32_t maxTokensPerStep = 64;
  int32_t blockSize = 4;
};

struct NamedTensor {
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<float> values; // stored as F32
};

struct TinyLlama {
  TinyLlamaConfig config;
  // In Rank.weights order: embed, per layer {input_norm, qkv, o, post_norm, gate_up, down},
  // final_norm, lm_head, inv_freq.
  std::vector<NamedTensor> weights;

  const NamedTensor &weight(const std::string &name) const;
};

TinyLlama makeTinyLlama(const TinyLlamaConfig &config = {});

// The complete plan except Rank.weights / weights_file / weights_file_size (the writer's part).
schema::PlanT buildTinyLlamaPlan(const TinyLlama &model);

// Writes the model as an artifact directory with writeArtifact; `edit` may change the plan first.
Status writeTinyLlamaArtifact(const TinyLlama &model, const std::string &dir,
                              const std::function<void(schema::PlanT &)> &edit = {});

// Logits [tokens.size(), vocab] of every position of one sequence, dense, in double precision.
std::vector<double> referenceLogits(const TinyLlama &model, const std::vector<int32_t> &tokens);

// A fresh empty directory under the test temp dir.
std::string makeTempDir(const std::string &prefix);

// The suite fixture the executor tests share: a tiny Llama written as an artifact directory in a
// fresh temp dir, loaded, and a cpu device to run it on. The suite's SetUpTestSuite calls
// setUpTinyLlama; the inherited TearDownTestSuite frees it all and removes the directory. The
// members are static because gtest runs a suite's tests together, one suite at a time.
class TinyLlamaOnCpuTest : public ::testing::Test {
protected:
  static void setUpTinyLlama(const std::string &tempPrefix, const TinyLlamaConfig &config = {});
  static void TearDownTestSuite();

  static std::unique_ptr<TinyLlama> model_;
  static std::string root_; // holds model.kiln; tests may write other artifacts beside it
  static std::unique_ptr<Artifact> artifact_;
  static std::unique_ptr<Device> cpu_;
};

} // namespace kiln::rt::testing
