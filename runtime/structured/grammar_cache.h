// Compiled grammars by their text, shared by every request of the process: a JSON schema a
// client sends with each request is converted and compiled once. Thread-safe (HTTP threads
// compile); keeps the most recently used `capacity` grammars.
#pragma once

#include "runtime/structured/grammar.h"

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiln::structured {

class GrammarCache {
public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  // The compiled grammar of `text` (parseGrammar's errors are returned, not cached).
  Result<std::shared_ptr<const Grammar>> get(const std::string &text);
  size_t size() const;

private:
  using Entry = std::pair<std::string, std::shared_ptr<const Grammar>>;
  mutable std::mutex mutex_;
  size_t capacity_;
  std::list<Entry> entries_; // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> byText_;
};

// The process-wide cache the API layer uses (runtime/serve/structured_request.cc).
GrammarCache &sharedGrammarCache();

} // namespace kiln::structured
