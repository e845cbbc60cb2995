#include "runtime/embed/embedder.h"

#include <algorithm>
#include <string>

namespace kiln::rt {

Result<Embedder> Embedder::create(const EmbedderConfig &config) {
  if (!config.runner)
    return invalidArgument("EmbedderConfig.runner is null");
  if (!config.runner->limits().embeds)
    return failedPrecondition("the artifact generates text; embeddings need an embedding model (an "
                              "artifact compiled from BertModel, XLMRobertaModel or Qwen3Model)");
  return Embedder(config);
}

int32_t Embedder::maxInputTokens() const {
  return std::min(limits().maxSeqLen, limits().maxTokensPerStep);
}

Status Embedder::validateTokenTypes(const std::vector<std::vector<int32_t>> &inputs,
                                    const std::vector<std::vector<int32_t>> &tokenTypes) const {
  if (tokenTypes.empty())
    return okStatus();
  if (tokenTypes.size() != inputs.size())
    return invalidArgument("token types are given for " + std::to_string(tokenTypes.size()) +
                           " inputs of " + std::to_string(inputs.size()));
  const int32_t types = std::max(limits().typeVocabSize, 1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "input " + std::to_string(i);
    if (!tokenTypes[i].empty() && tokenTypes[i].size() != inputs[i].size())
      return invalidArgument(name + " has " + std::to_string(tokenTypes[i].size()) +
                             " token types for " + std::to_string(inputs[i].size()) + " tokens");
    for (int32_t type : tokenTypes[i])
      if (type < 0 || type >= types)
        return invalidArgument(name + " holds token type " + std::to_string(type) +
                               "; the model has " + std::to_string(types) +
                               (types == 1 ? " token type" : " token types"));
  }
  return okStatus();
}

Status Embedder::validate(const std::vector<std::vector<int32_t>> &inputs,
                          const std::vector<std::vector<int32_t>> &tokenTypes) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "input " + std::to_string(i);
    if (inputs[i].empty())
      return invalidArgument(name + " has no tokens");
    if (static_cast<int64_t>(inputs[i].size()) > maxInputTokens())
      return outOfRange(name + " has " + std::to_string(inputs[i].size()) +
                        " tokens; this model embeds at most " + std::to_string(maxInputTokens()) +
                        " (the compiled --max-seq-len / --max-tokens-per-step)");
    const int32_t blocks = (static_cast<int32_t>(inputs[i].size()) + limits().blockSize - 1) /
                           limits().blockSize * kvGroupCount(limits());
    if (blocks > limits().numKvBlocks)
      return outOfRange(name + " needs " + std::to_string(blocks) +
                        " KV blocks for one step; the cache holds " +
                        std::to_string(limits().numKvBlocks) + " (raise --kv-cache-mb)");
    for (int32_t id : inputs[i])
      if (id < 0 || id >= limits().vocabSize)
        return invalidArgument(name + " holds token id " + std::to_string(id) +
                               "; the vocabulary has " + std::to_string(limits().vocabSize) +
                               " tokens");
  }
  return validateTokenTypes(inputs, tokenTypes);
}

Status Embedder::runStep(const std::vector<std::vector<int32_t>> &inputs,
                         const std::vector<std::vector<int32_t>> &tokenTypes, size_t first,
                         size_t end, std::vector<Embedding> &out) {
  StepBatch batch;
  int32_t nextBlock = 0;
  for (size_t i = first; i < end; ++i) {
    SequenceStep seq;
    seq.tokenIds = inputs[i];
    if (!tokenTypes.empty())
      seq.tokenTypeIds = tokenTypes[i];
    const int32_t blocks =
        (static_cast<int32_t>(inputs[i].size()) + limits().blockSize - 1) / limits().blockSize;
    seq.blockTables = ownBlockTables(limits(), nextBlock, blocks);
    nextBlock += blocks * kvGroupCount(limits());
    seq.logits = LogitsWanted::kAll;
    batch.sequences.push_back(std::move(seq));
  }
  if (nextBlock > limits().numKvBlocks)
    return resourceExhausted("a step of " + std::to_string(end - first) + " inputs needs " +
                             std::to_string(nextBlock) + " KV blocks; the cache holds " +
                             std::to_string(limits().numKvBlocks));
  KILN_ASSIGN_OR_RETURN(StepOutput step, config_.runner->execute(batch));
  const int32_t width = step.vocabSize;
  for (size_t i = first; i < end; ++i) {
    const size_t s = i - first;
    const float *row = step.row(step.firstRowOfSequence[s]);
    Embedding &e = out[i];
    e.numTokens = step.rowsPerSequence[s];
    e.hidden.assign(row, row + static_cast<size_t>(e.numTokens) * width);
    if (config_.pooling != PoolingMode::kNone) {
      KILN_ASSIGN_OR_RETURN(e.pooled, poolHiddenStates(e.hidden, width, config_.pooling));
    }
  }
  return okStatus();
}

Result<std::vector<Embedding>>
Embedder::embed(const std::vector<std::vector<int32_t>> &inputs,
                const std::vector<std::vector<int32_t>> &tokenTypes) {
  KILN_RETURN_IF_ERROR(validate(inputs, tokenTypes));
  std::vector<Embedding> out(inputs.size());
  // Greedy packing in input order: a step takes inputs while their tokens, their count and their
  // KV blocks fit.
  const int32_t bs = limits().blockSize, groups = kvGroupCount(limits());
  size_t first = 0;
  while (first < inputs.size()) {
    size_t end = first;
    int32_t tokens = 0, blocks = 0;
    while (end < inputs.size() && static_cast<int32_t>(end - first) < limits().maxBatch) {
      const auto n = static_cast<int32_t>(inputs[end].size());
      const int32_t b = (n + bs - 1) / bs * groups;
      if (end > first &&
          (tokens + n > limits().maxTokensPerStep || blocks + b > limits().numKvBlocks))
        break;
      tokens += n;
      blocks += b;
      ++end;
    }
    KILN_RETURN_IF_ERROR(runStep(inputs, tokenTypes, first, end, out));
    first = end;
  }
  return out;
}

} // namespace kiln::rt
