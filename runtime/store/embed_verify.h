// `kiln verify` of an embedding model (docs/verify.md): every case's input_ids through the
// Embedder (runtime/embed/embedder.h), each token's last hidden state compared with the golden's
// (transformers) and, where the model pools, the pooled vector with sentence-transformers' (both
// within the golden's tolerances). Goldens: tools/goldens/make_encoder_goldens.py writes them for
// the test fixtures (tests/data/golden/*.embed.json) and, pointed at a checkpoint, for a user's
// model.
#pragma once

#include "runtime/base/status.h"
#include "runtime/store/verify.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

struct EmbedGoldenCase {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<float> hidden; // [tokens, width]
  std::vector<float> pooled; // normalized when the golden says so; empty without pooling
  std::vector<int32_t> tokenTypeIds; // per token (a text pair: 1 on the second text)
};

struct EmbedGolden {
  int32_t width = 0;
  float hiddenTolerance = 0;
  float pooledTolerance = 0;
  std::string pooling; // sentence-transformers' mode, "" for none
  bool normalize = false;
  std::vector<EmbedGoldenCase> cases;
};

// True when `path` holds an embedding golden (its JSON has "hidden_size"); false for a generation
// golden or an unreadable file (readGolden then says why).
bool isEmbedGoldenFile(const std::string &path);
// The golden and its hidden-state files (named relative to the golden's directory).
Result<EmbedGolden> readEmbedGolden(const std::string &path);

struct EmbedCaseVerdict {
  std::string name;
  int32_t tokens = 0;
  float maxHiddenDiff = 0;
  float maxPooledDiff = 0; // 0 without pooling
  bool passed = true;
};

struct EmbedVerifyReport {
  std::vector<EmbedCaseVerdict> cases;
  float hiddenTolerance = 0;
  float pooledTolerance = 0;
  bool passed() const;
  // One line per case, then "verify: PASS (N cases)" or "verify: FAIL (K of N cases differ)".
  std::string text() const;
};

// Errors (not a failed verdict): an artifact that does not load or is not an embedding model, a
// width or pooling other than the golden's, a case longer than the compiled limits.
Result<EmbedVerifyReport> verifyEmbeddings(const std::string &artifactDir,
                                           const EmbedGolden &golden,
                                           const VerifyOptions &options = {});

} // namespace kiln::rt
