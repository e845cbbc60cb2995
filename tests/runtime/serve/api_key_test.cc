#include "runtime/serve/api_key.h"

#include <gtest/gtest.h>

#include <chrono>

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

// The time to reject a key must not depend on where the first wrong byte is. A coarse check:
// early and late mismatches take the same time within a wide factor (timing noise on shared CI).
TEST(ApiKeyTest, TimeDoesNotDependOnTheMismatchPosition) {
  std::string key(4096, 'k');
  std::string early = key, late = key;
  early[0] = 'x';
  late[4095] = 'x';
  auto time = [&](const std::string &candidate) {
    auto start = std::chrono::steady_clock::now();
    bool any = false;
    for (int i = 0; i < 2000; ++i)
      any |= constantTimeEquals(candidate, key);
    EXPECT_FALSE(any);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double best = 1e9, bestLate = 1e9;
  for (int round = 0; round < 5; ++round) {
    best = std::min(best, time(early));
    bestLate = std::min(bestLate, time(late));
  }
  EXPECT_LT(bestLate / best, 3.0);
  EXPECT_GT(bestLate / best, 1.0 / 3.0);
}

} // namespace
} // namespace kiln::rt::serve
