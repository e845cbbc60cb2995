// What one engine step asks of a model and gets back: plain structs shared by the executor
// (which runs the plan), the scheduler/engine (which builds batches) and tests (fake runners).
#pragma once

#include "runtime/base/status.h"
#include "runtime/kv/kv_window.h"

#include <cstdint>
#include <vector>

namespace kiln::rt {

enum class LogitsWanted : uint8_t {
  kNone, // a prefill chunk that does not reach the end of the prompt
  kLast, // the usual case: logits of the sequence's last new token, for sampling
  kAll,  // logits of every new token (golden tests, prompt logprobs)
  // Only the id of the last token's largest logit (greedy sampling without penalties,
  // suppression or logprobs). A runner may answer with StepOutput::argmaxIds instead of logits
  // when every sequence of the step asks for this; otherwise it gives the row as for kLast.
  kArgmax,
};

// One sequence's slice of a step. Tokens before `startPosition` are already in the KV cache.
struct SequenceStep {
  std::vector<int32_t> tokenIds; // new tokens: a prefill chunk or one decode token
  int32_t startPosition = 0;     // position of tokenIds[0]
  // Per KV cache group (RunnerLimits::kvGroupWindows), the blocks covering positions
  // [0, startPosition + tokenIds.size()), in order. Blocks may be shared with other sequences
  // (prefix cache, parallel samples) for positions already written. In a sliding-window group
  // the entries of blocks no new token sees (all their positions before startPosition - W + 1)
  // may be kNoKvBlock.
  std::vector<std::vector<int32_t>> blockTables;
  LogitsWanted logits = LogitsWanted::kLast;
  // The length of the sequence these tokens belong to, for RoPE whose rotation depends on it
  // (plan.fbs SequenceLengths): all its known tokens, e.g. the whole prompt while a chunk of it
  // is prefilled. 0: the step's end, startPosition + tokenIds.size().
  int32_t sequenceLength = 0;
  // Per new token, its token type (an encoder's text pair: 1 on the second text), each below
  // RunnerLimits::typeVocabSize; empty: every token is type 0.
  std::vector<int32_t> tokenTypeIds;
  // Its logits rows' final hidden states too (StepOutput::hidden): the final norm's output the
  // lm_head reads, e.g. a last-token embedding taken from a generation plan. Needs
  // RunnerLimits::hiddenWidth > 0.
  bool wantsHidden = false;
};

// The logits rows a sequence's step gives: all new tokens' (kAll), its last one's (kLast, and
// kArgmax when the runner answers with rows), or none.
inline int32_t logitsRowsOf(const SequenceStep &seq) {
  switch (seq.logits) {
  case LogitsWanted::kAll:
    return static_cast<int32_t>(seq.tokenIds.size());
  case LogitsWanted::kLast:
  case LogitsWanted::kArgmax:
    return 1;
  case LogitsWanted::kNone:
    break;
  }
  return 0;
}

struct StepBatch {
  std::vector<SequenceStep> sequences;
};

// Logits rows in batch order: for each sequence, the rows it asked for (0, 1, or tokenIds.size()).
// With argmaxIds (every sequence asked for kArgmax): one id per row instead of logits, which is
// then empty (the id of the lowest largest finite logit, -1 when none is finite).
struct StepOutput {
  int32_t vocabSize = 0;
  std::vector<float> logits;      // [rows, vocabSize]
  std::vector<int32_t> argmaxIds; // [rows], or empty
  std::vector<int32_t> rowsPerSequence;
  std::vector<int32_t> firstRowOfSequence;
  // When a sequence of the step wantsHidden: every logits row's final hidden state, in fp32
  // ([rows, hiddenWidth], the rows of `logits`); else empty.
  int32_t hiddenWidth = 0;
  std::vector<float> hidden;

  const float *row(int32_t r) const { return logits.data() + static_cast<size_t>(r) * vocabSize; }
  const float *hiddenRow(int32_t r) const {
    return hidden.data() + static_cast<size_t>(r) * hiddenWidth;
  }
  int32_t numRows() const {
    if (!argmaxIds.empty())
      return static_cast<int32_t>(argmaxIds.size());
    return vocabSize ? static_cast<int32_t>(logits.size() / vocabSize) : 0;
  }
};

// Every sequence that wants logits asks only for their argmax, and at least one does: the step
// a runner may answer with StepOutput::argmaxIds.
inline bool onlyArgmaxWanted(const StepBatch &batch) {
  bool any = false;
  for (const SequenceStep &seq : batch.sequences) {
    if (seq.logits == LogitsWanted::kLast || seq.logits == LogitsWanted::kAll)
      return false;
    any = any || seq.logits == LogitsWanted::kArgmax;
  }
  return any;
}

// Limits a runner enforces; the scheduler plans within them.
struct RunnerLimits {
  int32_t maxBatch = 0; // sequences per step
  int32_t maxTokensPerStep = 0;
  // Logits rows one step of the compiled plan returns; a runner splits a step asking for more.
  int32_t maxLogitsPerStep = 0;
  int32_t maxSeqLen = 0;
  int32_t maxBlocksPerSeq = 0;
  int32_t blockSize = 0;
  int32_t numKvBlocks = 0; // size of the KV block pool
  // Per KV cache group (plan.fbs KvCacheSpec.groups): its sliding window, 0 for full attention.
  // Every sequence of a step brings one block table per group. Empty: one full-attention group.
  std::vector<int32_t> kvGroupWindows;
  int32_t vocabSize = 0;
  // > 0: a plan that returns logits can also return its logits rows' final hidden states
  // (SequenceStep::wantsHidden), this wide: the lm_head's input. 0: it cannot.
  int32_t hiddenWidth = 0;
  // Width of a StepOutput row: vocabSize for logits, the hidden size for a plan whose output is
  // hidden states (plan.fbs PlanOutput); 0 (a hand-built runner): vocabSize.
  int32_t outputWidth = 0;
  // An embedding model (PlanOutput HiddenStates: an encoder, or a decoder returning its final
  // hidden states): each sequence is computed whole in one step (startPosition 0; an encoder's
  // attention is bidirectional) and never split over steps.
  bool embeds = false;
  // ModelInfo.decoder_start_token_id: the first id of each sequence's ShiftedTokenIds (an
  // encoder-decoder's decoder input); -1 when the plan has no such input.
  int32_t decoderStartTokenId = -1;
  // ModelInfo.type_vocab_size: the token types a sequence's tokenTypeIds may hold (0 and 1: only
  // type 0; -1: an embedding plan older than token types, only type 0).
  int32_t typeVocabSize = 0;
  // > 0: a sequence longer than this rotates its keys by its length (plan.fbs RopeKvWrite modes
  // LongShort / DynamicNtk), so only KV written while a sequence is at most this long may be
  // shared through the prefix cache. 0: RoPE never depends on the length.
  int32_t ropeSwitchLength = 0;
  // The switch changes every key's rotation (plan.fbs RopeMode LongShort: longrope): a sequence
  // whose cached keys were rotated for a length at most ropeSwitchLength recomputes them all when
  // it grows past it, as transformers' Phi-3 generate() drops its cache there.
  bool recomputeAtRopeSwitch = false;
};

// The number of KV cache groups, and group g's sliding window (0: full attention).
inline int32_t kvGroupCount(const RunnerLimits &limits) {
  return limits.kvGroupWindows.empty() ? 1 : static_cast<int32_t>(limits.kvGroupWindows.size());
}
inline int32_t kvGroupWindow(const RunnerLimits &limits, int32_t group) {
  return limits.kvGroupWindows.empty() ? 0 : limits.kvGroupWindows[group];
}

// The block tables of a sequence that owns `numBlocks` consecutive blocks in every KV cache group,
// from block `first` on, the groups' runs one after another (kvGroupCount(limits) * numBlocks
// blocks in all): for callers that place sequences in the cache themselves (kiln verify, profile,
// tests) rather than through the KV cache manager.
inline std::vector<std::vector<int32_t>> ownBlockTables(const RunnerLimits &limits, int32_t first,
                                                        int32_t numBlocks) {
  std::vector<std::vector<int32_t>> tables(kvGroupCount(limits));
  for (auto &table : tables)
    for (int32_t b = 0; b < numBlocks; ++b)
      table.push_back(first++);
  return tables;
}

// Runs steps of a model. The executor is the real one; tests use fakes.
class ModelRunner {
public:
  virtual ~ModelRunner() = default;
  virtual const RunnerLimits &limits() const = 0;
  // Fails (never crashes) on a batch that exceeds the limits, naming the limit.
  virtual Result<StepOutput> execute(const StepBatch &batch) = 0;
};

} // namespace kiln::rt
