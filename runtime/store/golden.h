// Verify goldens: prompts, the ids a correct artifact produces after them, and the logits (full
// rows or a top-k of each row) with a tolerance. Two formats are read:
//  - "kiln-verify-golden" (written by `kiln verify --write`): per case the prompt, the expected
//    ids and, per predicting position, the top-k logits;
//  - the transformers goldens of tests/data/golden (tools/goldens/make_llama_goldens.py,
//    make_half_goldens.py) and of tools/goldens/make_verify_golden.py: prompt, greedy ids and every
//    row of logits in a raw file beside the JSON, float32 or, where the golden's "logits_dtype"
//    (else "dtype") says bf16 / fp16, 16-bit half values.
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
  // Top-1 minus top-2 logit of the row that predicts expectedIds[k] (transformers goldens'
  // "greedy_margins"); empty when not recorded. A step whose margin is at most twice the
  // tolerance is a near tie: a correct engine may pick the other id, so verify does not compare it.
  std::vector<float> greedyMargins;
};

struct VerifyGolden {
  std::string model;
  int32_t vocabSize = 0;
  float logitsTolerance = 1e-4f; // max |got - expected| over every stored logit
  // Where logitsTolerance came from: "" the golden's tolerance.logits_max_abs, else a note (the
  // half-precision goldens of tests/data/golden carry none: see halfGoldenTolerance).
  std::string toleranceNote;
  std::string dtype = "fp32"; // the dtype transformers ran the model in ("dtype"), fp32 if absent
  int32_t topK = 0;           // 0: full rows
  std::string generator;      // who wrote it and with which versions (free text)
  std::vector<GoldenCase> cases;
};

inline constexpr const char *kVerifyGoldenFormat = "kiln-verify-golden";

// The tolerance of a bf16 / fp16 transformers golden without one (those written by
// tools/goldens/make_half_goldens.py): the largest max |kiln - transformers| measured in that
// dtype over the tiny models plus about 50% (tests/e2e/half_dtype_golden_test.cc): bf16 0.35,
// fp16 0.04. Negative for any other dtype (a golden must then carry its own tolerance).
float halfGoldenTolerance(const std::string &dtype);

// Reads either format; errors name the file and field.
Result<VerifyGolden> readGolden(const std::string &path);
// Writes the kiln-verify-golden format (atomically).
Status writeGolden(const VerifyGolden &golden, const std::string &path);

} // namespace kiln::rt
