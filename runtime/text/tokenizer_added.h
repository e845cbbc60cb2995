// Added tokens of tokenizer.json ("added_tokens") and how HF splits input text on them:
// non-normalized tokens are found in the raw text, normalized ones in each normalized piece,
// both leftmost-longest, with the lstrip / rstrip / single_word flags applied to each match.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::rt {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool singleWord = false;
};

class AddedVocabulary {
public:
  struct Split {
    size_t begin;
    size_t end;
    int32_t id; // -1: plain text
  };

  // Builds both matchers; normalized tokens are matched by their normalized content, as HF does.
  void build(std::vector<AddedToken> tokens, const Normalizer &normalizer);

  // Splits `text` on the raw (`normalizedSet` false) or normalized token set. Empty text gives
  // no splits.
  void split(std::string_view text, bool normalizedSet, std::vector<Split> &out) const;

  const AddedToken *byId(int32_t id) const;
  int32_t idOf(std::string_view content) const; // -1 when not an added token
  const std::vector<AddedToken> &tokens() const { return tokens_; }

private:
  struct Trie {
    struct Node {
      int32_t token = -1; // index into tokens_ when a pattern ends here
    };
    std::vector<Node> nodes{Node{}};
    std::unordered_map<uint64_t, int32_t> edges; // (node << 8 | byte) -> child
    bool first[256] = {};
    void insert(std::string_view pattern, int32_t token);
    // Longest pattern starting at `pos`: returns its token index and sets `end`, or -1.
    int32_t longestAt(std::string_view text, size_t pos, size_t &end) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> byId_;
  std::unordered_map<std::string, int32_t> byContent_;
  Trie raw_;
  Trie normalized_;
};

} // namespace kiln::rt
