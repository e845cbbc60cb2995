// Runs a compiled grammar (grammar.h) over output bytes, and says which tokens may come next.
//
// The matcher keeps every way the bytes so far can continue: a set of stacks, each the positions
// still to finish in the rules entered, its top always a byte-range element (an empty stack: the
// text so far is a complete match of root). A byte keeps the stacks whose top admits it, each
// advanced past that element and expanded again through rule references and finished
// alternatives. grammar.cc refuses left recursion, so expanding always ends.
//
// The token mask walks a trie of the vocabulary's token bytes from the matcher's stacks, one byte
// per trie edge, pruning a subtree as soon as no stack survives: a token is allowed when all its
// bytes are. The end-of-sequence token is allowed exactly where the text is a complete match.
#pragma once

#include "runtime/structured/grammar.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::structured {

// One position still to match: element `index` of alternative `alt` of rule `rule`.
struct GrammarPosition {
  uint32_t rule = 0, alt = 0, index = 0;
  bool operator==(const GrammarPosition &) const = default;
  auto operator<=>(const GrammarPosition &) const = default;
};
using GrammarStack = std::vector<GrammarPosition>;

class GrammarMatcher {
public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Consumes one byte if the grammar allows it here (true); otherwise changes nothing (false).
  bool acceptByte(uint8_t byte);
  // Consumes all of `bytes` if the grammar allows them (true); otherwise changes nothing.
  bool acceptBytes(std::string_view bytes);
  // Whether the bytes so far are a complete match of root (end of sequence allowed).
  bool canEnd() const;
  // Whether nothing more can be matched and the text is complete (only end of sequence left).
  bool mustEnd() const;

  const Grammar &grammar() const { return *grammar_; }
  const std::vector<GrammarStack> &stacks() const { return stacks_; }
  // The stacks after `byte` from `from` (empty: the byte is not allowed there).
  std::vector<GrammarStack> advance(const std::vector<GrammarStack> &from, uint8_t byte) const;

private:
  void expand(GrammarStack stack, std::vector<GrammarStack> &out) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<GrammarStack> stacks_; // sorted, unique
};

// The vocabulary's tokens as bytes, shared by every request of a model: token id t's bytes are
// tokenBytes[t] (runtime/text Tokenizer::tokenBytes; empty for tokens a grammar never allows:
// special and control tokens).
class TokenTrie {
public:
  explicit TokenTrie(std::vector<std::string> tokenBytes);
  size_t vocabSize() const { return tokenBytes_.size(); }
  // Token t's bytes ("" for an id outside the vocabulary).
  const std::string &bytesOf(int32_t t) const;

  // The trie's nodes in preorder, flat, so a mask is one forward pass over contiguous memory
  // (the walk skips the subtree of a byte the grammar refuses): entry 0 is the root; entry i > 0
  // is reached from the nearest entry before it of depth - 1 by `byte`, and its subtree is
  // [i, subtreeEnd). One entry more than the nodes ends the list (its firstToken closes the
  // last node's tokens).
  struct Entry {
    uint32_t subtreeEnd;
    uint32_t firstToken; // tokensAt(i) = the tokens [firstToken, the next entry's firstToken)
    uint32_t depth;      // bytes from the root
    uint8_t byte;
  };
  const std::vector<Entry> &entries() const { return entries_; }
  size_t numNodes() const { return entries_.size() - 1; }
  uint32_t maxDepth() const { return maxDepth_; }
  // The tokens whose bytes end at entry i.
  std::span<const int32_t> tokensAt(uint32_t i) const {
    return {tokens_.data() + entries_[i].firstToken, tokens_.data() + entries_[i + 1].firstToken};
  }

private:
  std::vector<std::string> tokenBytes_;
  std::vector<Entry> entries_;
  std::vector<int32_t> tokens_;
  uint32_t maxDepth_ = 0;
};

// allowed[t] = 1 when token t's bytes can all be consumed from the matcher's state, else 0; the
// end of sequence is not a token here (see GrammarMatcher::canEnd).
std::vector<uint8_t> allowedTokens(const GrammarMatcher &matcher, const TokenTrie &trie);

} // namespace kiln::structured
