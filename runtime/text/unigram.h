// Unigram language-model tokenizer (SentencePiece unigram as tokenizer.json stores it) with the
// semantics of HF tokenizers' models::unigram: the Viterbi best segmentation of each piece under
// the vocab's log-probability scores. A character no piece starts with becomes an unknown node
// scored min(score) - 10; adjacent unknown nodes fuse into one unknown token, which byte
// fallback (when enabled and every <0xXX> token exists) spells as bytes instead.
#pragma once

#include "runtime/base/status.h"
#include "runtime/text/vocab.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

class UnigramModel {
public:
  // `pieces[i]` is (token, score) of id i. unkId < 0: no unknown token; HF then fails the encode
  // of text with an unknown character, kiln drops that character.
  static Result<UnigramModel> create(std::vector<std::pair<std::string, double>> pieces,
                                     int64_t unkId, bool byteFallback, const std::string &where);

  // Appends the ids of one pre-tokenized piece.
  void tokenize(std::string_view piece, std::vector<int32_t> &out) const;
  const Vocab &vocab() const { return vocab_; }

private:
  // A byte trie over the vocab: children of a node are contiguous and sorted by byte.
  struct TrieNode {
    uint32_t firstChild = 0;
    uint32_t childCount = 0;
    int32_t id = -1; // the token that ends here (the last id spelled so, as HF's map keeps)
    uint8_t byte = 0;
  };
  struct Best {
    double score = 0;
    int32_t start = -1; // -1: no path ends here yet
    int32_t id = -1;
  };
  void buildTrie(const std::vector<std::pair<std::string, double>> &pieces);
  int32_t child(int32_t node, uint8_t byte) const;
  void viterbi(std::string_view piece, std::vector<Best> &best) const;
  void emit(std::string_view piece, const std::vector<Best> &best, std::vector<int32_t> &out) const;
  void emitToken(std::string_view text, int32_t id, std::vector<int32_t> &out) const;

  Vocab vocab_;
  std::vector<double> scores_;
  std::vector<TrieNode> trie_;
  double unkScore_ = 0;
  int32_t unkId_ = -1;
  bool byteFallback_ = false;
  std::array<int32_t, 256> byteIds_{};
};

} // namespace kiln::rt
