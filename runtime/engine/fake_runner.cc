#include "runtime/engine/fake_runner.h"

#include "runtime/base/hash.h"
#include "runtime/sampling/sampler.h"

#include <string>

namespace kiln::rt {
namespace {

std::string seqName(size_t i) {
  return "batch sequence " + std::to_string(i);
}

void replaceRowsByArgmax(StepOutput &out) {
  const int32_t rows = out.numRows();
  out.argmaxIds.resize(rows);
  for (int32_t r = 0; r < rows; ++r)
    out.argmaxIds[r] = argmaxToken(std::span<const float>(out.row(r), out.vocabSize));
  out.logits.clear();
}

} // namespace

FakeRunner::FakeRunner(const FakeRunnerConfig &config) : config_(config) {
  const size_t slots = static_cast<size_t>(std::max(0, config.limits.numKvBlocks)) *
                       std::max(0, config.limits.blockSize);
  kvTokens_.assign(slots, -1);
  writeStamp_.assign(slots, 0);
}

void FakeRunner::logitsFor(std::span<const int32_t> history, std::span<float> out) const {
  uint64_t h = mix64(config_.seed ^ 0x5eed5eed5eedull);
  for (int32_t id : history)
    h = mix64(h + 0x9e3779b97f4a7c15ull + static_cast<uint32_t>(id));
  for (size_t v = 0; v < out.size(); ++v) {
    const uint64_t r = mix64(h ^ (0xd1b54a32d192ed03ull * (v + 1)));
    out[v] = static_cast<float>(r >> 40) * (8.0f / 16777216.0f) - 4.0f; // [-4, 4)
  }
  for (int32_t eos : config_.eosTokenIds)
    if (eos >= 0 && static_cast<size_t>(eos) < out.size())
      out[eos] += config_.eosLogitBoost;
}

int64_t FakeRunner::slotOf(const SequenceStep &seq, int32_t group, int32_t position) const {
  const int32_t bs = config_.limits.blockSize;
  return static_cast<int64_t>(seq.blockTables[group][position / bs]) * bs + position % bs;
}

Status FakeRunner::checkTables(const SequenceStep &s, size_t i) const {
  const RunnerLimits &l = config_.limits;
  const int64_t end = s.startPosition + static_cast<int64_t>(s.tokenIds.size());
  if (static_cast<int32_t>(s.blockTables.size()) != kvGroupCount(l))
    return invalidArgument("FakeRunner: " + seqName(i) + " has " +
                           std::to_string(s.blockTables.size()) + " block tables, not " +
                           std::to_string(kvGroupCount(l)));
  for (int32_t g = 0; g < kvGroupCount(l); ++g) {
    const std::vector<int32_t> &table = s.blockTables[g];
    if (static_cast<int32_t>(table.size()) > l.maxBlocksPerSeq ||
        static_cast<int64_t>(table.size()) * l.blockSize < end)
      return outOfRange("FakeRunner: " + seqName(i) + " block table does not cover its tokens");
    const int32_t firstRead = firstBlockInWindow(kvGroupWindow(l, g), s.startPosition, l.blockSize);
    for (size_t k = 0; k < table.size(); ++k)
      if ((table[k] < 0 || table[k] >= l.numKvBlocks) &&
          !(table[k] == kNoKvBlock && static_cast<int32_t>(k) < firstRead))
        return outOfRange("FakeRunner: " + seqName(i) + " block id " + std::to_string(table[k]));
  }
  return okStatus();
}

Status FakeRunner::checkBatch(const StepBatch &batch) const {
  const RunnerLimits &l = config_.limits;
  if (batch.sequences.empty())
    return invalidArgument("FakeRunner: empty batch");
  if (static_cast<int32_t>(batch.sequences.size()) > l.maxBatch)
    return outOfRange("FakeRunner: " + std::to_string(batch.sequences.size()) +
                      " sequences exceed maxBatch " + std::to_string(l.maxBatch));
  int64_t tokens = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceStep &s = batch.sequences[i];
    tokens += static_cast<int64_t>(s.tokenIds.size());
    const int64_t end = s.startPosition + static_cast<int64_t>(s.tokenIds.size());
    if (s.tokenIds.empty() || s.startPosition < 0 || end > l.maxSeqLen)
      return outOfRange("FakeRunner: " + seqName(i) + " positions outside [0, maxSeqLen)");
    KILN_RETURN_IF_ERROR(checkTables(s, i));
    for (int32_t t : s.tokenIds)
      if (t < 0 || t >= l.vocabSize)
        return outOfRange("FakeRunner: " + seqName(i) + " token id " + std::to_string(t));
  }
  if (tokens > l.maxTokensPerStep)
    return outOfRange("FakeRunner: " + std::to_string(tokens) + " tokens exceed maxTokensPerStep " +
                      std::to_string(l.maxTokensPerStep));
  return okStatus();
}

Status FakeRunner::writeTokens(const StepBatch &batch) {
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceStep &s = batch.sequences[i];
    for (size_t k = 0; k < s.tokenIds.size(); ++k)
      for (int32_t g = 0; g < kvGroupCount(config_.limits); ++g) {
        const int64_t slot = slotOf(s, g, s.startPosition + static_cast<int32_t>(k));
        if (writeStamp_[slot] == executeCalls_)
          return internalError("FakeRunner: two sequences write KV slot " + std::to_string(slot) +
                               " in one step (or two KV cache groups do)");
        writeStamp_[slot] = executeCalls_;
        kvTokens_[slot] = s.tokenIds[k];
      }
  }
  return okStatus();
}

Result<std::vector<int32_t>> FakeRunner::readHistory(const SequenceStep &seq,
                                                     int32_t lastPosition) const {
  std::vector<int32_t> history;
  history.reserve(lastPosition + 1);
  for (int32_t g = 0; g < kvGroupCount(config_.limits); ++g) {
    const int32_t window = kvGroupWindow(config_.limits, g);
    for (int32_t p = window > 0 ? std::max(0, lastPosition - window + 1) : 0; p <= lastPosition;
         ++p) {
      const int32_t token = kvTokens_[slotOf(seq, g, p)];
      if (token < 0)
        return internalError("FakeRunner: position " + std::to_string(p) +
                             " reads a KV slot never written");
      history.push_back(token);
    }
  }
  return history;
}

Result<StepOutput> FakeRunner::execute(const StepBatch &batch) {
  ++executeCalls_;
  if (failureHook_)
    KILN_RETURN_IF_ERROR(failureHook_(batch));
  KILN_RETURN_IF_ERROR(checkBatch(batch));
  KILN_RETURN_IF_ERROR(writeTokens(batch));
  StepOutput out;
  out.vocabSize = config_.limits.vocabSize;
  int32_t rows = 0, tokens = 0;
  for (const SequenceStep &s : batch.sequences) {
    const int32_t n = static_cast<int32_t>(s.tokenIds.size());
    tokens += n;
    const int32_t want = logitsRowsOf(s);
    out.firstRowOfSequence.push_back(rows);
    out.rowsPerSequence.push_back(want);
    for (int32_t r = 0; r < want; ++r) {
      KILN_ASSIGN_OR_RETURN(std::vector<int32_t> history,
                            readHistory(s, s.startPosition + n - want + r));
      out.logits.resize(static_cast<size_t>(rows + 1) * out.vocabSize);
      logitsFor(history, std::span<float>(out.logits)
                             .subspan(static_cast<size_t>(rows) * out.vocabSize, out.vocabSize));
      ++rows;
    }
  }
  if (config_.answerArgmax && onlyArgmaxWanted(batch)) {
    replaceRowsByArgmax(out);
    ++stats_.argmaxSteps;
  }
  ++stats_.steps;
  stats_.tokens += tokens;
  stats_.maxTokensInStep = std::max(stats_.maxTokensInStep, tokens);
  stats_.maxSequencesInStep =
      std::max(stats_.maxSequencesInStep, static_cast<int32_t>(batch.sequences.size()));
  return out;
}

} // namespace kiln::rt
