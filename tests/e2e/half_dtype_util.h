// Helpers of the --dtype bf16/fp16 end-to-end tests: transformers' half goldens (made by
// tools/goldens/make_half_goldens.py; logits stored as raw bf16/fp16) and a teacher-forced run of
// their cases on any ModelRunner (an Executor, or a MultiRankRunner at --tp > 1).
#pragma once

#include "runtime/exec/step.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::e2e {

struct HalfGoldenCase {
  std::vector<int32_t> promptIds;
  std::vector<int32_t> greedyIds;
  std::vector<float> logits;        // [rows, vocab], the half logits widened exactly
  std::vector<float> greedyMargins; // top-1 minus top-2 of the row that picked greedy id k
  int32_t rows = 0;
  float hfHalfVsFp32 = 0; // max |these logits - transformers fp32's|, as recorded
  // bf16 fixtures: fp32 logits of transformers' fp32 model rounding where plan.fbs says kiln does
  // (make_half_goldens.py KilnRounding), same ids; empty when not recorded.
  std::vector<float> kilnRounding;
};

struct HalfGolden {
  std::string model;
  std::string modelDir; // resolved path
  std::string dtype;    // "bf16" | "fp16"
  int32_t vocabSize = 0;
  std::vector<HalfGoldenCase> cases;
};

// Reads tests/data/golden/<model>.<dtype>.json and its logits files; nullopt + `skipReason` when
// the model lives in ../shared/assets and that is absent (test failures for unreadable files).
std::optional<HalfGolden> loadHalfGolden(const std::string &model, const std::string &dtype,
                                         std::string &skipReason);

// Every case as a sequence of its own (blocks allocated in order from 0): its prompt as one
// prefill with every row's logits, then its 16 greedy ids teacher-forced one decode step each.
// Case i starts at step i, so most steps mix one prefill with decodes. Returns each case's
// logits rows in position order (what the golden holds). Fails the test on a step error.
std::vector<std::vector<float>> runTeacherForced(rt::ModelRunner &runner, const HalfGolden &golden);

// Max |a - b| over `count` floats (NaN counts as infinity).
float maxAbsDiffOf(const float *a, const float *b, size_t count);

} // namespace kiln::e2e
