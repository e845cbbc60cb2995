// Runs an encoder (a ModelRunner whose limits say `encoder`: plan.fbs PlanOutput HiddenStates)
// over whole sequences: packed into steps of at most the compiled max batch and tokens per step
// (padding-free: each sequence is exactly its tokens), each sequence's KV in blocks of its own for
// that step only, so no KV cache manager is involved. Returns every token's hidden state and, when
// the model pools, the pooled vector. Not thread-safe: one caller at a time (the serving layer
// runs it on one worker thread, as the engine thread owns a generation model).
#pragma once

#include "runtime/embed/pooling.h"
#include "runtime/exec/step.h"

#include <cstdint>
#include <vector>

namespace kiln::rt {

struct Embedding {
  std::vector<float> hidden; // [tokens, width]: the last hidden state of every token
  // [width], before any normalization (callers apply normalizedL2 as the model or the request
  // says); empty when the model has no pooling.
  std::vector<float> pooled;
  int32_t numTokens = 0;
};

struct EmbedderConfig {
  ModelRunner *runner = nullptr; // an encoder; must outlive the embedder
  PoolingMode pooling = PoolingMode::kNone;
};

class Embedder {
public:
  static Result<Embedder> create(const EmbedderConfig &config);

  // One Embedding per input, in order. tokenTypes: empty, or per input its tokens' types (a text
  // pair's second text type 1; an empty list: all type 0). Fails, computing nothing, on an empty
  // input, an id outside the vocabulary, a token type the model does not have, or an input longer
  // than the compiled limits (the error names the input, the length and the limit).
  Result<std::vector<Embedding>> embed(const std::vector<std::vector<int32_t>> &inputs,
                                       const std::vector<std::vector<int32_t>> &tokenTypes = {});
  // embed()'s checks alone (thread-safe: reads only the limits).
  Status validate(const std::vector<std::vector<int32_t>> &inputs,
                  const std::vector<std::vector<int32_t>> &tokenTypes = {}) const;

  int32_t width() const { return limits().outputWidth; }
  // The longest input: max_seq_len, and one step's tokens (a sequence is computed in one step).
  int32_t maxInputTokens() const;
  const RunnerLimits &limits() const { return config_.runner->limits(); }

private:
  explicit Embedder(const EmbedderConfig &config) : config_(config) {}
  // Inputs [first, end) as one step; their rows appended to out[first..end).
  Status runStep(const std::vector<std::vector<int32_t>> &inputs,
                 const std::vector<std::vector<int32_t>> &tokenTypes, size_t first, size_t end,
                 std::vector<Embedding> &out);
  Status validateTokenTypes(const std::vector<std::vector<int32_t>> &inputs,
                            const std::vector<std::vector<int32_t>> &tokenTypes) const;

  EmbedderConfig config_;
};

} // namespace kiln::rt
