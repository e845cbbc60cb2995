#include "runtime/serve/api_key.h"

#include <cctype>

namespace kiln::rt::serve {

bool constantTimeEquals(std::string_view a, std::string_view b) {
  return constantTimeEqualsVisiting(a, b, [](size_t) {});
}

bool bearerMatches(std::string_view header, std::string_view key) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() < kScheme.size())
    return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i])
      return false;
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ')
    token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\r'))
    token.remove_suffix(1);
  return constantTimeEquals(token, key);
}

} // namespace kiln::rt::serve
