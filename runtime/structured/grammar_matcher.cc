#include "runtime/structured/grammar_matcher.h"

#include <algorithm>

namespace kiln::structured {
namespace {

void sortUnique(std::vector<GrammarStack> &stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

} // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  const GrammarRule &root = grammar_->rules[grammar_->root];
  for (uint32_t a = 0; a < root.alternatives.size(); ++a)
    expand({{grammar_->root, a, 0}}, stacks_);
  sortUnique(stacks_);
}

// Pops finished alternatives and enters rule references until the top is a byte range (or the
// stack is empty: root is complete); each alternative of an entered rule is its own stack.
void GrammarMatcher::expand(GrammarStack stack, std::vector<GrammarStack> &out) const {
  while (!stack.empty()) {
    const GrammarPosition top = stack.back();
    const auto &sequence = grammar_->rules[top.rule].alternatives[top.alt];
    if (top.index == sequence.size()) {
      stack.pop_back();
      continue;
    }
    const GrammarElement &element = sequence[top.index];
    if (element.kind == GrammarElement::Kind::kBytes)
      break;
    // Where to go on once the referenced rule is done; nowhere when the reference ends its
    // alternative (a tail call: popped now, so right-recursive repetition keeps a constant depth
    // and a string's body stays one state however long it grows).
    if (++stack.back().index == sequence.size())
      stack.pop_back();
    const auto &alternatives = grammar_->rules[element.rule].alternatives;
    for (uint32_t a = 0; a + 1 < alternatives.size(); ++a) {
      GrammarStack entered = stack;
      entered.push_back({element.rule, a, 0});
      expand(std::move(entered), out);
    }
    stack.push_back({element.rule, static_cast<uint32_t>(alternatives.size() - 1), 0});
  }
  out.push_back(std::move(stack));
}

std::vector<GrammarStack> GrammarMatcher::advance(const std::vector<GrammarStack> &from,
                                                  uint8_t byte) const {
  std::vector<GrammarStack> out;
  for (const GrammarStack &stack : from) {
    if (stack.empty())
      continue;
    const GrammarPosition &top = stack.back();
    const GrammarElement &e = grammar_->rules[top.rule].alternatives[top.alt][top.index];
    if (byte < e.lo || byte > e.hi)
      continue;
    GrammarStack next = stack;
    next.back().index++;
    expand(std::move(next), out);
  }
  sortUnique(out);
  return out;
}

bool GrammarMatcher::acceptByte(uint8_t byte) {
  std::vector<GrammarStack> next = advance(stacks_, byte);
  if (next.empty())
    return false;
  stacks_ = std::move(next);
  return true;
}

bool GrammarMatcher::acceptBytes(std::string_view bytes) {
  std::vector<GrammarStack> state = stacks_;
  for (char c : bytes) {
    state = advance(state, static_cast<uint8_t>(c));
    if (state.empty())
      return false;
  }
  stacks_ = std::move(state);
  return true;
}

bool GrammarMatcher::canEnd() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const auto &s) { return s.empty(); });
}

bool GrammarMatcher::mustEnd() const {
  return std::all_of(stacks_.begin(), stacks_.end(), [](const auto &s) { return s.empty(); });
}

namespace {

// The trie as linked nodes, while it is built.
struct TrieNode {
  std::vector<std::pair<uint8_t, uint32_t>> children; // (byte, node), sorted by byte
  std::vector<int32_t> tokens;                        // the tokens whose bytes end here
};

} // namespace

TokenTrie::TokenTrie(std::vector<std::string> tokenBytes) : tokenBytes_(std::move(tokenBytes)) {
  std::vector<TrieNode> nodes(1);
  for (size_t t = 0; t < tokenBytes_.size(); ++t) {
    if (tokenBytes_[t].empty())
      continue;
    uint32_t node = 0;
    for (char c : tokenBytes_[t]) {
      const auto byte = static_cast<uint8_t>(c);
      auto &children = nodes[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), byte,
                                 [](const auto &child, uint8_t b) { return child.first < b; });
      if (it != children.end() && it->first == byte) {
        node = it->second;
        continue;
      }
      const auto created = static_cast<uint32_t>(nodes.size());
      children.insert(it, {byte, created});
      nodes.emplace_back(); // invalidates `children`: not used after this
      node = created;
    }
    nodes[node].tokens.push_back(static_cast<int32_t>(t));
  }
  // Preorder, without recursion (a token may be long): each node's entry, then its children's
  // subtrees in byte order; a node's subtreeEnd is set when the walk has left it.
  struct Visit {
    uint32_t node, entry;
    size_t child; // the next child to visit
  };
  entries_.reserve(nodes.size() + 1);
  std::vector<Visit> path;
  const auto enter = [&](uint32_t node, uint8_t byte) {
    const auto depth = static_cast<uint32_t>(path.size());
    maxDepth_ = std::max(maxDepth_, depth);
    entries_.push_back({0, static_cast<uint32_t>(tokens_.size()), depth, byte});
    tokens_.insert(tokens_.end(), nodes[node].tokens.begin(), nodes[node].tokens.end());
    path.push_back({node, static_cast<uint32_t>(entries_.size() - 1), 0});
  };
  enter(0, 0);
  while (!path.empty()) {
    Visit &top = path.back();
    const auto &children = nodes[top.node].children;
    if (top.child == children.size()) {
      entries_[top.entry].subtreeEnd = static_cast<uint32_t>(entries_.size());
      path.pop_back();
      continue;
    }
    const auto [byte, child] = children[top.child++];
    enter(child, byte); // may move `top`: not used after this
  }
  entries_.push_back({static_cast<uint32_t>(entries_.size() + 1),
                      static_cast<uint32_t>(tokens_.size()), 0, 0}); // the end
}

const std::string &TokenTrie::bytesOf(int32_t t) const {
  static const std::string kNone;
  return t >= 0 && static_cast<size_t>(t) < tokenBytes_.size() ? tokenBytes_[t] : kNone;
}

// The preorder walk, each depth's stacks kept for the entries below it.
std::vector<uint8_t> allowedTokens(const GrammarMatcher &matcher, const TokenTrie &trie) {
  std::vector<uint8_t> allowed(trie.vocabSize(), 0);
  const std::vector<TokenTrie::Entry> &entries = trie.entries();
  std::vector<std::vector<GrammarStack>> at(trie.maxDepth() + 1);
  at[0] = matcher.stacks();
  for (uint32_t i = 1; i < trie.numNodes();) {
    const TokenTrie::Entry &e = entries[i];
    std::vector<GrammarStack> next = matcher.advance(at[e.depth - 1], e.byte);
    if (next.empty()) {
      i = e.subtreeEnd;
      continue;
    }
    for (int32_t token : trie.tokensAt(i))
      allowed[token] = 1;
    at[e.depth] = std::move(next);
    ++i;
  }
  return allowed;
}

} // namespace kiln::structured
