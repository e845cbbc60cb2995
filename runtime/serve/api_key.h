// --api-key: clients send "Authorization: Bearer KEY". The comparison takes the same time
// wherever the first difference is, so response timing does not reveal the key byte by byte.
#pragma once

#include <cstddef>
#include <string_view>

namespace kiln::rt::serve {

// constantTimeEquals with `visit(i)` called for each position i of `b` it compares, in order.
// The time stays independent of the contents because the walk has no early exit: every position
// of the expected key is compared whatever the input is, and the length difference is folded
// into the result. tests/runtime/serve/api_key_test.cc checks exactly that through `visit`
// (a wall-clock comparison would depend on the machine's load).
template <typename Visit>
bool constantTimeEqualsVisiting(std::string_view a, std::string_view b, Visit &&visit) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    visit(i);
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

// Constant time in the contents (the time depends only on the lengths).
bool constantTimeEquals(std::string_view a, std::string_view b);

// True when `authorizationHeader` is "Bearer <key>" (scheme case-insensitive) with the right key.
bool bearerMatches(std::string_view authorizationHeader, std::string_view key);

} // namespace kiln::rt::serve
