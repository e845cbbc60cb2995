// `kiln verify`: runs an artifact through the real executor, teacher-forced (each case's prompt,
// then its expected ids one decode step at a time), so the comparison is deterministic and one
// differing id does not shift every later position.
#pragma once

#include "runtime/base/status.h"
#include "runtime/store/golden.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

struct VerifyOptions {
  std::string device = "cpu"; // cpu, cuda or cuda:N
  std::vector<int> devices;   // a tp artifact's ranks on these CUDA GPUs (--devices)
};

struct CaseVerdict {
  std::string name;
  bool idsMatch = true;
  int32_t firstDifferingIndex = -1; // index into expectedIds
  int32_t expectedId = -1;
  int32_t gotId = -1;
  std::vector<int32_t> expectedIds; // the golden's
  std::vector<int32_t> gotIds;      // argmax of each predicting row
  int32_t differingIds = 0;         // compared steps whose id differs
  int32_t nearTieDiffering = 0;     // near-tie steps (GoldenCase::greedyMargins) whose id differs
  float maxLogitDiff = 0;           // max |got - expected| over the stored logits (inf on NaN)
  int32_t maxDiffPosition = -1;
  int32_t maxDiffTokenId = -1;
  float maxDiffExpected = 0;
  float maxDiffGot = 0;
  bool logitsWithinTolerance = true;
  bool passed() const { return idsMatch && logitsWithinTolerance; }
};

struct VerifyReport {
  std::vector<CaseVerdict> cases;
  float tolerance = 0;
  bool passed() const;
  // The readable summary: one line per case, and for a failing case the first differing
  // position (expected vs got ids around it) and the max logit diff vs the tolerance.
  std::string text() const;
};

// Errors (not a failed verdict) for an artifact that does not load, a golden whose vocabulary
// differs, or a case longer than the artifact's compiled max_seq_len.
Result<VerifyReport> verifyArtifact(const std::string &artifactDir, const VerifyGolden &golden,
                                    const VerifyOptions &options = {});

struct RecordOptions {
  std::vector<std::vector<int32_t>> prompts; // empty: one prompt of the model's BOS id
  int32_t maxTokens = 16;                    // greedy ids recorded per prompt
  int32_t topK = 16;                         // logits kept per row; 0 keeps whole rows
  float tolerance = 1e-4f;
  std::string device = "cpu";
  std::vector<int> devices;
};

// Greedy-decodes every prompt with the artifact and records the ids and logits as a golden.
Result<VerifyGolden> recordGolden(const std::string &artifactDir, const RecordOptions &options);

} // namespace kiln::rt
