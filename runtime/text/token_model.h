// tokenizer.json "model": the vocabulary model that turns each pre-tokenized piece into ids
// (BPE, WordPiece or Unigram), behind one interface for the Tokenizer.
#pragma once

#include "runtime/base/status.h"
#include "runtime/text/bpe.h"
#include "runtime/text/tokenizer_json.h"
#include "runtime/text/unigram.h"
#include "runtime/text/wordpiece.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kiln::rt {

class TokenModel {
public:
  // Reads tj.root["model"] and takes tj's vocab and merges. `where` is the file name for errors.
  static Result<TokenModel> fromJson(TokenizerJson &tj, const std::string &where);

  // Appends the ids of one pre-tokenized piece.
  void tokenize(std::string_view piece, std::vector<int32_t> &out) const {
    std::visit([&](const auto &m) { m.tokenize(piece, out); }, model_);
  }
  const Vocab &vocab() const {
    return std::visit([](const auto &m) -> const Vocab & { return m.vocab(); }, model_);
  }
  int32_t tokenToId(std::string_view token) const { return vocab().find(token); } // -1: absent
  bool hasId(int32_t id) const { return vocab().hasId(id); }
  std::string_view idToToken(int32_t id) const { return vocab().token(id); } // empty: absent
  int32_t idLimit() const { return vocab().idLimit(); }

private:
  std::variant<BpeModel, WordPieceModel, UnigramModel> model_;
};

} // namespace kiln::rt
