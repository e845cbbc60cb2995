// Base64 against RFC 4648's test vectors (section 10), and a round trip of every byte value.
#include "runtime/base/base64.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

TEST(Base64Test, Rfc4648Vectors) {
  const std::pair<const char *, const char *> vectors[] = {{"", ""},
                                                           {"f", "Zg=="},
                                                           {"fo", "Zm8="},
                                                           {"foo", "Zm9v"},
                                                           {"foob", "Zm9vYg=="},
                                                           {"fooba", "Zm9vYmE="},
                                                           {"foobar", "Zm9vYmFy"}};
  for (const auto &[plain, encoded] : vectors) {
    EXPECT_EQ(encodeBase64(plain), encoded);
    EXPECT_EQ(decodeBase64(encoded), std::string(plain));
  }
  EXPECT_EQ(decodeBase64("Zm9vYg"), std::string("foob")) << "padding is optional";
  EXPECT_EQ(decodeBase64("Zm9v!"), std::nullopt);
}

TEST(Base64Test, EveryByteRoundTrips) {
  std::string bytes;
  for (int b = 0; b < 256; ++b)
    bytes.push_back(static_cast<char>(b));
  EXPECT_EQ(decodeBase64(encodeBase64(bytes)), bytes);
}

} // namespace
} // namespace kiln::rt
