// Stop strings over a stream of text deltas. A stop string may span any number of deltas (token
// boundaries); text that could still turn out to be the start of a stop string is held back until
// resolved; the stop string itself and everything after it are never emitted.
//
// The stream stops at the earliest point where any stop string is complete; when several end
// there, the one that starts first (the longest) wins.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

struct StopStringUpdate {
  std::string text; // safe to emit now
  int matched = -1; // index of the stop string that matched in this update, else -1
};

class StopStringMatcher {
public:
  explicit StopStringMatcher(std::vector<std::string> stopStrings); // empty strings are ignored

  // Feeds a delta. After a match, further input is ignored (returns empty updates).
  StopStringUpdate push(std::string_view delta);
  // The stream ended without a stop: returns the held-back text.
  std::string finish();

  bool stopped() const { return matched_ >= 0; }
  int matchedIndex() const { return matched_; }
  const std::string &matchedString() const;

private:
  std::vector<std::string> stops_;
  std::vector<int> index_; // position in the caller's list for each kept stop string
  std::string held_;
  int matched_ = -1;
};

} // namespace kiln::rt
