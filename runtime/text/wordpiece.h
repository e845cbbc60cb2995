// WordPiece model (BERT family) with the semantics of HF tokenizers' models::wordpiece: greedy
// longest-match-first over each pre-tokenized word, continuation pieces spelled with a prefix
// ("##"), and the whole word as one unknown token when some part matches nothing or the word
// has more than max_input_chars_per_word characters.
#pragma once

#include "runtime/base/status.h"
#include "runtime/text/vocab.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

struct WordPieceOptions {
  std::string unkToken = "[UNK]";
  std::string continuingSubwordPrefix = "##";
  int64_t maxInputCharsPerWord = 100;
};

class WordPieceModel {
public:
  // `where` prefixes error messages (e.g. "tokenizer.json"). The unknown token must be in the
  // vocab: HF fails the encode of any word that needs it otherwise.
  static Result<WordPieceModel> create(std::vector<std::pair<std::string, int64_t>> vocab,
                                       WordPieceOptions options, const std::string &where);

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t> &out) const;
  const Vocab &vocab() const { return vocab_; }

private:
  WordPieceOptions options_;
  Vocab vocab_;
  int32_t unkId_ = -1;
  size_t longestToken_ = 0; // bytes; no longer candidate can match, so none is tried
};

} // namespace kiln::rt
