#include "runtime/serve/api_key.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kiln::rt::serve {
namespace {

TEST(ApiKeyTest, ConstantTimeEquals) {
  EXPECT_TRUE(constantTimeEquals("secret", "secret"));
  EXPECT_FALSE(constantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(constantTimeEquals("secret1", "secret"));
  EXPECT_FALSE(constantTimeEquals("secre", "secret"));
  EXPECT_FALSE(constantTimeEquals("", "secret"));
  EXPECT_TRUE(constantTimeEquals("", ""));
  // A prefix of the key followed by a NUL must not match (the length is part of the check).
  EXPECT_FALSE(constantTimeEquals(std::string_view("secret\0", 7), "secret"));
}

TEST(ApiKeyTest, BearerHeader) {
  EXPECT_TRUE(bearerMatches("Bearer sk-123", "sk-123"));
  EXPECT_TRUE(bearerMatches("bearer sk-123", "sk-123"));
  EXPECT_TRUE(bearerMatches("Bearer  sk-123 ", "sk-123"));
  EXPECT_FALSE(bearerMatches("Bearer sk-124", "sk-123"));
  EXPECT_FALSE(bearerMatches("Basic sk-123", "sk-123"));
  EXPECT_FALSE(bearerMatches("sk-123", "sk-123"));
  EXPECT_FALSE(bearerMatches("", "sk-123"));
  EXPECT_FALSE(bearerMatches("Bearer ", "sk-123"));
}

// The time to reject a key must not depend on where the first wrong byte is. Checked by what the
// comparison does rather than by timing it (which would depend on the machine's load): whatever
// the candidate (equal, wrong at the first or last byte, shorter, longer, empty), every position
// of the key is compared, once each and in order; an early exit at the first difference would
// stop the walk there.
TEST(ApiKeyTest, EveryByteOfTheKeyIsComparedWhereverTheFirstDifferenceIs) {
  const std::string key = "sk-kiln-0123456789";
  std::vector<size_t> everyPosition(key.size());
  for (size_t i = 0; i < key.size(); ++i)
    everyPosition[i] = i;
  std::string wrongFirst = key, wrongLast = key;
  wrongFirst.front() = 'x';
  wrongLast.back() = 'x';
  const std::vector<std::pair<std::string, bool>> candidates = {
      {key, true},
      {wrongFirst, false},
      {wrongLast, false},
      {key.substr(0, 1), false},
      {key + "extra", false},
      {"", false},
      {std::string(key.size(), 'x'), false}};
  for (const auto &[candidate, equal] : candidates) {
    std::vector<size_t> visited;
    bool result =
        constantTimeEqualsVisiting(candidate, key, [&](size_t i) { visited.push_back(i); });
    EXPECT_EQ(result, equal) << "'" << candidate << "'";
    EXPECT_EQ(result, constantTimeEquals(candidate, key)) << "'" << candidate << "'";
    EXPECT_EQ(visited, everyPosition) << "'" << candidate << "'";
  }
}

} // namespace
} // namespace kiln::rt::serve
