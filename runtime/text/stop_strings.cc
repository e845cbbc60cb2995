#include "runtime/text/stop_strings.h"

#include <algorithm>

namespace kiln::rt {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stopStrings) {
  for (size_t i = 0; i < stopStrings.size(); ++i) {
    if (stopStrings[i].empty())
      continue;
    stops_.push_back(std::move(stopStrings[i]));
    index_.push_back(static_cast<int>(i));
  }
}

const std::string &StopStringMatcher::matchedString() const {
  static const std::string kNone;
  for (size_t k = 0; k < index_.size(); ++k)
    if (index_[k] == matched_)
      return stops_[k];
  return kNone;
}

StopStringUpdate StopStringMatcher::push(std::string_view delta) {
  StopStringUpdate update;
  if (stopped())
    return update;
  held_.append(delta);
  // Held text never contains a whole stop string, so any occurrence found now is new.
  size_t bestEnd = std::string::npos, bestStart = 0;
  int best = -1;
  for (size_t k = 0; k < stops_.size(); ++k) {
    size_t pos = held_.find(stops_[k]);
    if (pos == std::string::npos)
      continue;
    size_t end = pos + stops_[k].size();
    if (end < bestEnd || (end == bestEnd && pos < bestStart)) {
      bestEnd = end;
      bestStart = pos;
      best = static_cast<int>(k);
    }
  }
  if (best >= 0) {
    matched_ = index_[best];
    update.matched = matched_;
    update.text = held_.substr(0, bestStart);
    held_.clear();
    return update;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string &s : stops_) {
    size_t maxLen = std::min(s.size() - 1, held_.size());
    for (size_t len = maxLen; len > hold; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  update.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return update;
}

std::string StopStringMatcher::finish() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

} // namespace kiln::rt
