// Verify goldens: prompts, the ids a correct artifact produces after them, and the logits (full
// rows or a top-k of each row) with a tolerance. Two formats are read:
//  - "kiln-verify-golden" (written by `kiln verify --write`): per case the prompt, the expected
//    ids and, per predicting position, the top-k logits;
//  - the transformers goldens of tests/data/golden (tools/goldens/make_llama_goldens.py): prompt,
//    greedy ids and every row of logits in a raw float32 file beside the JSON.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

// The logits after feeding the token at `position` of prompt + expected ids (so the row that
// predicts the token at position + 1). `ids` empty: `values` is the whole row (vocab entries).
struct GoldenRow {
  int32_t position = 0;
  std::vector<int32_t> ids;
  std::vector<float> values;
};

struct GoldenCase {
  std::string name;
  std::vector<int32_t> promptIds;
  std::vector<int32_t> expectedIds;
  std::vector<GoldenRow> rows;
};

struct VerifyGolden {
  std::string model;
  int32_t vocabSize = 0;
  float logitsTolerance = 1e-4f; // max |got - expected| over every stored logit
  int32_t topK = 0;              // 0: full rows
  std::string generator;         // who wrote it and with which versions (free text)
  std::vector<GoldenCase> cases;
};

inline constexpr const char *kVerifyGoldenFormat = "kiln-verify-golden";

// Reads either format; errors name the file and field.
Result<VerifyGolden> readGolden(const std::string &path);
// Writes the kiln-verify-golden format (atomically).
Status writeGolden(const VerifyGolden &golden, const std::string &path);

} // namespace kiln::rt
