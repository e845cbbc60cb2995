#include "runtime/text/wordpiece.h"

#include "runtime/text/scratch.h"
#include "runtime/text/tokenizer_utf8.h"

#include <algorithm>

namespace kiln::rt {

Result<WordPieceModel> WordPieceModel::create(std::vector<std::pair<std::string, int64_t>> vocab,
                                              WordPieceOptions options, const std::string &where) {
  WordPieceModel m;
  m.options_ = std::move(options);
  for (const auto &entry : vocab)
    m.longestToken_ = std::max(m.longestToken_, entry.first.size());
  KILN_ASSIGN_OR_RETURN(m.vocab_,
                        Vocab::create(std::move(vocab), Vocab::Duplicates::kForgetEarlierId,
                                      where + ": model.vocab"));
  m.unkId_ = m.vocab_.find(m.options_.unkToken);
  if (m.unkId_ < 0)
    return invalidArgument(where + ": model.unk_token '" + m.options_.unkToken +
                           "' is not in model.vocab");
  if (m.options_.maxInputCharsPerWord < 0)
    return invalidArgument(where + ": model.max_input_chars_per_word must be >= 0");
  return m;
}

void WordPieceModel::tokenize(std::string_view word, std::vector<int32_t> &out) const {
  if (word.empty())
    return;
  size_t chars = 0;
  for (size_t pos = 0; pos < word.size(); pos += utf8::seqLength(static_cast<uint8_t>(word[pos])))
    ++chars;
  if (static_cast<int64_t>(chars) > options_.maxInputCharsPerWord) {
    out.push_back(unkId_);
    return;
  }
  thread_local std::string candidate;
  ScratchGuard keepCandidate(candidate);
  const size_t mark = out.size();
  size_t start = 0;
  while (start < word.size()) {
    // Longest vocab piece at `start`, shrinking one character at a time (from the longest
    // token's length: HF starts at the word's end, but nothing longer can match).
    size_t end = std::min(word.size(), start + longestToken_);
    while (end < word.size() && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80)
      --end;
    int32_t found = -1;
    while (end > start) {
      candidate.assign(start > 0 ? options_.continuingSubwordPrefix : std::string());
      candidate.append(word.substr(start, end - start));
      found = vocab_.find(candidate);
      if (found >= 0)
        break;
      do
        --end;
      while (end > start && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      out.resize(mark); // one unknown piece makes the whole word unknown
      out.push_back(unkId_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

} // namespace kiln::rt
