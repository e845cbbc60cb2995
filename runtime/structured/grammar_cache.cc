#include "runtime/structured/grammar_cache.h"

namespace kiln::structured {

Result<std::shared_ptr<const Grammar>> GrammarCache::get(const std::string &text) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = byText_.find(text); it != byText_.end()) {
      entries_.splice(entries_.begin(), entries_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: a large schema must not stall other requests.
  KILN_ASSIGN_OR_RETURN(Grammar grammar, parseGrammar(text));
  auto compiled = std::make_shared<const Grammar>(std::move(grammar));
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = byText_.find(text); it != byText_.end()) // compiled meanwhile by another thread
    return it->second->second;
  entries_.emplace_front(text, compiled);
  byText_[text] = entries_.begin();
  while (entries_.size() > capacity_) {
    byText_.erase(entries_.back().first);
    entries_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

GrammarCache &sharedGrammarCache() {
  static GrammarCache cache;
  return cache;
}

} // namespace kiln::structured
