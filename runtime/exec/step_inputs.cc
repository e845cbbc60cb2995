#include "runtime/exec/step_inputs.h"

#include "runtime/kv/kv_window.h"

#include <algorithm>
#include <string>

namespace kiln::rt {
namespace {

std::string seqName(size_t s) {
  return "sequence " + std::to_string(s);
}

// Group g's table of sequence s covers `end` positions with valid blocks, except (sliding window)
// blocks no new token reads, which may be kNoKvBlock.
Status validateBlockTable(const SequenceStep &seq, size_t s, int32_t g, int64_t end,
                          const RunnerLimits &limits) {
  const std::vector<int32_t> &table = seq.blockTables[g];
  const std::string name = seqName(s) + " block table " + std::to_string(g);
  int64_t numBlocks = static_cast<int64_t>(table.size());
  if (numBlocks > limits.maxBlocksPerSeq)
    return outOfRange(name + " has " + std::to_string(numBlocks) + " blocks; the artifact allows " +
                      std::to_string(limits.maxBlocksPerSeq) +
                      " per sequence (--max-seq-len / --kv-block-size)");
  if (numBlocks * limits.blockSize < end)
    return invalidArgument(name + " has " + std::to_string(numBlocks) + " blocks of " +
                           std::to_string(limits.blockSize) + " tokens, too few for its " +
                           std::to_string(end) + " positions");
  const int32_t firstRead =
      firstBlockInWindow(kvGroupWindow(limits, g), seq.startPosition, limits.blockSize);
  for (size_t i = 0; i < table.size(); ++i) {
    int32_t block = table[i];
    if (block == kNoKvBlock && static_cast<int32_t>(i) < firstRead)
      continue;
    if (block < 0 || block >= limits.numKvBlocks)
      return invalidArgument(name + " entry " + std::to_string(i) + " is block " +
                             std::to_string(block) + "; the KV cache has " +
                             std::to_string(limits.numKvBlocks) + " blocks");
  }
  return okStatus();
}

Status validateTokenTypes(const SequenceStep &seq, size_t s, const RunnerLimits &limits) {
  if (seq.tokenTypeIds.empty())
    return okStatus();
  if (seq.tokenTypeIds.size() != seq.tokenIds.size())
    return invalidArgument(seqName(s) + " has " + std::to_string(seq.tokenTypeIds.size()) +
                           " token types for " + std::to_string(seq.tokenIds.size()) +
                           " new tokens; give one per token or none");
  const int32_t types = std::max(limits.typeVocabSize, 1);
  for (size_t i = 0; i < seq.tokenTypeIds.size(); ++i)
    if (seq.tokenTypeIds[i] < 0 || seq.tokenTypeIds[i] >= types)
      return invalidArgument(seqName(s) + " token " + std::to_string(i) + " has token type " +
                             std::to_string(seq.tokenTypeIds[i]) + "; the model has " +
                             std::to_string(types) + " token type(s)");
  return okStatus();
}

Status validateSequence(const SequenceStep &seq, size_t s, const RunnerLimits &limits) {
  int64_t numNew = static_cast<int64_t>(seq.tokenIds.size());
  if (numNew == 0)
    return invalidArgument(seqName(s) + " has no new tokens");
  if (seq.startPosition < 0)
    return invalidArgument(seqName(s) + " has startPosition " + std::to_string(seq.startPosition) +
                           "; it must be >= 0");
  if (limits.embeds && seq.startPosition != 0)
    return invalidArgument(seqName(s) + " starts at position " + std::to_string(seq.startPosition) +
                           "; an embedding model computes each sequence whole in one step, from 0");
  int64_t end = seq.startPosition + numNew;
  if (end > limits.maxSeqLen)
    return outOfRange(seqName(s) + " reaches " + std::to_string(end) + " tokens (start " +
                      std::to_string(seq.startPosition) + " + " + std::to_string(numNew) +
                      " new); the artifact was compiled with --max-seq-len " +
                      std::to_string(limits.maxSeqLen));
  if (seq.sequenceLength != 0 &&
      (seq.sequenceLength < end || seq.sequenceLength > limits.maxSeqLen))
    return outOfRange(seqName(s) + " has sequenceLength " + std::to_string(seq.sequenceLength) +
                      "; it must be 0 or in [" + std::to_string(end) +
                      " (the step's end), --max-seq-len " + std::to_string(limits.maxSeqLen) + "]");
  for (size_t i = 0; i < seq.tokenIds.size(); ++i) {
    int32_t id = seq.tokenIds[i];
    if (id < 0 || id >= limits.vocabSize)
      return invalidArgument(seqName(s) + " token " + std::to_string(i) + " is id " +
                             std::to_string(id) + "; the vocabulary has " +
                             std::to_string(limits.vocabSize) + " tokens");
  }
  KILN_RETURN_IF_ERROR(validateTokenTypes(seq, s, limits));
  if (seq.wantsHidden && limits.hiddenWidth <= 0)
    return invalidArgument(seqName(s) +
                           " wants its final hidden states; this plan cannot return them (an "
                           "embedding plan returns them as its output)");
  if (seq.blockTables.size() != static_cast<size_t>(kvGroupCount(limits)))
    return invalidArgument(seqName(s) + " has " + std::to_string(seq.blockTables.size()) +
                           " block tables; the artifact's KV cache has " +
                           std::to_string(kvGroupCount(limits)) + " group(s), one table each");
  for (int32_t g = 0; g < kvGroupCount(limits); ++g)
    KILN_RETURN_IF_ERROR(validateBlockTable(seq, s, g, end, limits));
  return okStatus();
}

} // namespace

Status validateStep(const StepBatch &batch, const RunnerLimits &limits) {
  const auto &seqs = batch.sequences;
  if (seqs.empty())
    return invalidArgument("step has no sequences");
  if (seqs.size() > static_cast<size_t>(limits.maxBatch))
    return outOfRange("step has " + std::to_string(seqs.size()) +
                      " sequences; the artifact was compiled with --max-batch " +
                      std::to_string(limits.maxBatch));
  size_t totalTokens = 0;
  for (const SequenceStep &seq : seqs)
    totalTokens += seq.tokenIds.size();
  if (totalTokens > static_cast<size_t>(limits.maxTokensPerStep))
    return outOfRange("step has " + std::to_string(totalTokens) +
                      " tokens; the artifact was compiled with --max-tokens-per-step " +
                      std::to_string(limits.maxTokensPerStep));
  for (size_t s = 0; s < seqs.size(); ++s)
    KILN_RETURN_IF_ERROR(validateSequence(seqs[s], s, limits));
  return okStatus();
}

HostStepInputs::HostStepInputs(const RunnerLimits &limits)
    : tokenIds(limits.maxTokensPerStep), positions(limits.maxTokensPerStep),
      slotMapping(kvGroupCount(limits), std::vector<int32_t>(limits.maxTokensPerStep)),
      queryStartLoc(limits.maxBatch + 1), contextLens(limits.maxBatch),
      sequenceLengths(limits.maxBatch),
      blockTables(kvGroupCount(limits), std::vector<int32_t>(static_cast<size_t>(limits.maxBatch) *
                                                             limits.maxBlocksPerSeq)),
      logitsIndices(limits.maxTokensPerStep), lastPositions(limits.maxTokensPerStep),
      shiftedTokenIds(limits.maxTokensPerStep), tokenTypeIds(limits.maxTokensPerStep),
      maxBlocksPerSeq_(limits.maxBlocksPerSeq) {}

std::span<const int32_t> HostStepInputs::filled(schema::StepInputKind kind,
                                                const StepCounts &counts, uint32_t group) const {
  using K = schema::StepInputKind;
  size_t tokens = counts.numTokens, seqs = counts.numSeqs;
  switch (kind) {
  case K::TokenIds:
    return {tokenIds.data(), tokens};
  case K::Positions:
    return {positions.data(), tokens};
  case K::SlotMapping:
    return {slotMapping[group].data(), tokens};
  case K::QueryStartLoc:
    return {queryStartLoc.data(), seqs + 1};
  case K::ContextLens:
    return {contextLens.data(), seqs};
  case K::SequenceLengths:
    return {sequenceLengths.data(), seqs};
  case K::BlockTables:
    return {blockTables[group].data(), seqs * maxBlocksPerSeq_};
  case K::LogitsIndices:
    return {logitsIndices.data(), static_cast<size_t>(counts.numLogits)};
  case K::LastPositions:
    return {lastPositions.data(), tokens};
  case K::ShiftedTokenIds:
    return {shiftedTokenIds.data(), tokens};
  case K::TokenTypeIds:
    return {tokenTypeIds.data(), tokens};
  default:
    return {};
  }
}

StepCounts fillStepInputs(const StepBatch &batch, const RunnerLimits &limits,
                          HostStepInputs &inputs, StepOutput &out) {
  StepCounts counts;
  counts.numSeqs = static_cast<int32_t>(batch.sequences.size());
  out.rowsPerSequence.assign(counts.numSeqs, 0);
  out.firstRowOfSequence.assign(counts.numSeqs, 0);
  const int32_t blockSize = limits.blockSize;
  int32_t t = 0;
  for (int32_t s = 0; s < counts.numSeqs; ++s) {
    const SequenceStep &seq = batch.sequences[s];
    const int32_t numNew = static_cast<int32_t>(seq.tokenIds.size());
    inputs.queryStartLoc[s] = t;
    for (int32_t i = 0; i < numNew; ++i, ++t) {
      int32_t position = seq.startPosition + i;
      inputs.tokenIds[t] = seq.tokenIds[i];
      inputs.positions[t] = position;
      inputs.lastPositions[t] = seq.startPosition + numNew - 1;
      inputs.shiftedTokenIds[t] = i > 0 ? seq.tokenIds[i - 1] : limits.decoderStartTokenId;
      inputs.tokenTypeIds[t] = seq.tokenTypeIds.empty() ? 0 : seq.tokenTypeIds[i];
      for (size_t g = 0; g < seq.blockTables.size(); ++g)
        inputs.slotMapping[g][t] =
            seq.blockTables[g][position / blockSize] * blockSize + position % blockSize;
    }
    int32_t contextLen = seq.startPosition + numNew;
    inputs.contextLens[s] = contextLen;
    inputs.sequenceLengths[s] = std::max(seq.sequenceLength, contextLen);
    counts.maxContextLen = std::max(counts.maxContextLen, contextLen);
    for (size_t g = 0; g < seq.blockTables.size(); ++g) {
      // Entries no new token reads (kNoKvBlock) become block 0, like the padding.
      int32_t *row = inputs.blockTables[g].data() + static_cast<size_t>(s) * limits.maxBlocksPerSeq;
      std::fill(std::transform(seq.blockTables[g].begin(), seq.blockTables[g].end(), row,
                               [](int32_t block) { return std::max(block, 0); }),
                row + limits.maxBlocksPerSeq, 0);
    }
    const int32_t rows = logitsRowsOf(seq);
    out.firstRowOfSequence[s] = counts.numLogits;
    out.rowsPerSequence[s] = rows;
    for (int32_t r = 0; r < rows; ++r)
      inputs.logitsIndices[counts.numLogits++] = t - rows + r;
  }
  inputs.queryStartLoc[counts.numSeqs] = t;
  counts.numTokens = t;
  return counts;
}

int32_t logitsRowsOf(const StepBatch &batch) {
  int32_t rows = 0;
  for (const SequenceStep &seq : batch.sequences)
    rows += logitsRowsOf(seq);
  return rows;
}

Status validateLogitsRows(const StepBatch &batch, const RunnerLimits &limits) {
  const int32_t rows = logitsRowsOf(batch);
  if (rows <= limits.maxLogitsPerStep)
    return okStatus();
  return outOfRange("step asks for " + std::to_string(rows) +
                    " logits rows; the artifact was compiled with --max-logits-per-step " +
                    std::to_string(limits.maxLogitsPerStep));
}

LogitsPieces splitByLogitsRows(const StepBatch &batch, int32_t maxLogits) {
  LogitsPieces split;
  int32_t pieceRows = 0;
  auto startPiece = [&split, &pieceRows] {
    split.pieces.emplace_back();
    split.sources.emplace_back();
    pieceRows = 0;
  };
  auto add = [&split, &pieceRows](SequenceStep seq, int32_t source) {
    if (seq.logits == LogitsWanted::kArgmax)
      seq.logits = LogitsWanted::kLast;
    pieceRows += logitsRowsOf(seq);
    split.pieces.back().sequences.push_back(std::move(seq));
    split.sources.back().push_back(source);
  };
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceStep &seq = batch.sequences[s];
    const auto source = static_cast<int32_t>(s);
    const int32_t rows = logitsRowsOf(seq);
    if (split.pieces.empty() || pieceRows + rows > maxLogits)
      startPiece();
    if (rows <= maxLogits) {
      add(seq, source);
      continue;
    }
    const int32_t numNew = static_cast<int32_t>(seq.tokenIds.size());
    const int32_t end = seq.startPosition + numNew;
    for (int32_t first = 0; first < numNew; first += maxLogits) {
      if (first > 0)
        startPiece();
      SequenceStep chunk = seq;
      const int32_t count = std::min(maxLogits, numNew - first);
      chunk.tokenIds.assign(seq.tokenIds.begin() + first, seq.tokenIds.begin() + first + count);
      chunk.startPosition = seq.startPosition + first;
      chunk.sequenceLength = std::max(seq.sequenceLength, end);
      add(std::move(chunk), source);
    }
  }
  return split;
}

void appendPieceOutput(const StepOutput &piece, const std::vector<int32_t> &sources,
                       StepOutput &merged) {
  merged.vocabSize = piece.vocabSize;
  const int32_t firstRow = merged.numRows();
  merged.logits.insert(merged.logits.end(), piece.logits.begin(), piece.logits.end());
  merged.hiddenWidth = piece.hiddenWidth; // every piece has them, or none
  merged.hidden.insert(merged.hidden.end(), piece.hidden.begin(), piece.hidden.end());
  for (size_t i = 0; i < sources.size(); ++i) {
    const int32_t s = sources[i];
    // A chunked sequence's first piece sets its first row; later chunks only add rows.
    if (merged.rowsPerSequence[s] == 0)
      merged.firstRowOfSequence[s] = firstRow + piece.firstRowOfSequence[i];
    merged.rowsPerSequence[s] += piece.rowsPerSequence[i];
  }
}

std::vector<int32_t> decodeBatchBuckets(const RunnerLimits &limits) {
  const int32_t largest = std::max(1, std::min(limits.maxBatch, limits.maxTokensPerStep));
  std::vector<int32_t> buckets;
  for (int32_t b = 1; b < largest; b *= 2)
    buckets.push_back(b);
  buckets.push_back(largest);
  return buckets;
}

StepCounts padDecodeStep(const StepCounts &counts, int32_t bucket, const RunnerLimits &limits,
                         HostStepInputs &inputs) {
  for (int32_t i = counts.numSeqs; i < bucket; ++i) {
    inputs.tokenIds[i] = 0;
    inputs.positions[i] = 0;
    inputs.lastPositions[i] = 0;
    inputs.shiftedTokenIds[i] = 0;
    inputs.tokenTypeIds[i] = 0;
    inputs.queryStartLoc[i + 1] = i + 1;
    inputs.contextLens[i] = 1;
    inputs.sequenceLengths[i] = 1;
    for (size_t g = 0; g < inputs.blockTables.size(); ++g) {
      inputs.slotMapping[g][i] = -1;
      int32_t *row = inputs.blockTables[g].data() + static_cast<size_t>(i) * limits.maxBlocksPerSeq;
      std::fill(row, row + limits.maxBlocksPerSeq, 0);
    }
  }
  std::fill(inputs.logitsIndices.begin() + counts.numLogits, inputs.logitsIndices.begin() + bucket,
            0);
  StepCounts padded;
  padded.numSeqs = bucket;
  padded.numTokens = bucket;
  padded.numLogits = bucket;
  padded.maxContextLen = limits.maxSeqLen;
  return padded;
}

} // namespace kiln::rt
