#include "runtime/store/s3_xml.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {

std::string page(const std::string &contents, const std::string &truncated = "false",
                 const std::string &token = "") {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><IsTruncated>" + truncated +
         "</IsTruncated>" +
         (token.empty() ? "" : "<NextContinuationToken>" + token + "</NextContinuationToken>") +
         contents + "</ListBucketResult>";
}

TEST(S3Xml, ReadsValuesWithEntitiesDecoded) {
  const std::string xml = "<Error><Code>SlowDown</Code><Message>a &lt;b&gt; &amp;amp; "
                          "&quot;c&apos;</Message></Error>";
  EXPECT_EQ(xmlValue(xml, "Code"), "SlowDown");
  // &amp;amp; is "&amp;" in the text, not "&".
  EXPECT_EQ(xmlValue(xml, "Message"), "a <b> &amp; \"c'");
  EXPECT_EQ(xmlValue(xml, "RequestId"), "");
  EXPECT_EQ(xmlValue("<Code>never closed", "Code"), "");
  size_t end = 0;
  EXPECT_EQ(xmlValue(xml, "Code", 0, &end), "SlowDown");
  EXPECT_EQ(xml.substr(end, 9), "<Message>");
}

TEST(S3Xml, ParsesAListPage) {
  auto parsed =
      parseListObjectsPage(page("<Contents><Key>a/plan.kiln</Key><Size>8632</Size></Contents>"
                                "<Contents><Key>a/&lt;w&gt;.bin</Key><ETag>&quot;x&quot;</ETag>"
                                "<Size>18446744073709551615</Size></Contents>",
                                "true", "tok/en="));
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  ASSERT_EQ(parsed->objects.size(), 2u);
  EXPECT_EQ(parsed->objects[0].key, "a/plan.kiln");
  EXPECT_EQ(parsed->objects[0].size, 8632u);
  EXPECT_EQ(parsed->objects[1].key, "a/<w>.bin");
  EXPECT_EQ(parsed->objects[1].size, 18446744073709551615u);
  EXPECT_EQ(parsed->continuationToken, "tok/en=");

  auto last = parseListObjectsPage(page("", "false", "ignored"));
  ASSERT_TRUE(last.isOk());
  EXPECT_TRUE(last->objects.empty());
  EXPECT_EQ(last->continuationToken, "");
}

// A <Size> past uint64 made std::stoull throw out of S3Client::listObjects (the server's body
// crashed kiln pull); other non-numbers were read as their digit prefix, or as 0.
TEST(S3Xml, ASizeThatIsNotAByteCountIsAnError) {
  for (const std::string size :
       {"18446744073709551616", "99999999999999999999999", "-1", "12abc", "", " 5", "0x10"}) {
    auto parsed =
        parseListObjectsPage(page("<Contents><Key>k</Key><Size>" + size + "</Size></Contents>"));
    ASSERT_FALSE(parsed.isOk()) << size;
    EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(parsed.status().message().find("has <Size> '" + size + "'"), std::string::npos)
        << parsed.status().message();
  }
}

// An empty <Contents></Contents> used to end the listing there, silently dropping every object
// after it; a truncated page without a token ended it too.
TEST(S3Xml, IncompletePagesAreErrorsNotShortListings) {
  auto noKey = parseListObjectsPage(page("<Contents></Contents><Contents><Key>k</Key>"
                                         "<Size>1</Size></Contents>"));
  EXPECT_EQ(noKey.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(noKey.status().message().find("has no <Key>"), std::string::npos);
  auto noToken = parseListObjectsPage(page("", "true"));
  EXPECT_EQ(noToken.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(noToken.status().message().find("no <NextContinuationToken>"), std::string::npos);
}

} // namespace
} // namespace kiln::rt
