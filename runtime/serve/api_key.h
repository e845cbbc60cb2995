// --api-key: clients send "Authorization: Bearer KEY". The comparison takes the same time
// wherever the first difference is, so response timing does not reveal the key byte by byte.
#pragma once

#include <string_view>

namespace kiln::rt::serve {

// Constant time in the contents (the time depends only on the lengths).
bool constantTimeEquals(std::string_view a, std::string_view b);

// True when `authorizationHeader` is "Bearer <key>" (scheme case-insensitive) with the right key.
bool bearerMatches(std::string_view authorizationHeader, std::string_view key);

} // namespace kiln::rt::serve
