// S3 XML response bodies (runtime/store/s3_xml.h): ListObjectsV2 pages and the single values the
// client reads from error, CreateMultipartUpload and UploadPartCopy responses.
//
// Invariant: a page that parses, written back as ListObjectsV2 XML (entities escaped), parses to
// the same objects and continuation token.
#include "runtime/store/s3_xml.h"
#include "tests/fuzz/fuzz_util.h"

#include <string>

namespace {

using kiln::rt::S3ListPage;

std::string escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string writeBack(const S3ListPage &page) {
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult>";
  xml += page.continuationToken.empty()
             ? "<IsTruncated>false</IsTruncated>"
             : "<IsTruncated>true</IsTruncated><NextContinuationToken>" +
                   escape(page.continuationToken) + "</NextContinuationToken>";
  for (const kiln::rt::S3Object &object : page.objects)
    xml += "<Contents><Key>" + escape(object.key) + "</Key><Size>" + std::to_string(object.size) +
           "</Size></Contents>";
  return xml + "</ListBucketResult>";
}

bool samePage(const S3ListPage &a, const S3ListPage &b) {
  if (a.continuationToken != b.continuationToken || a.objects.size() != b.objects.size())
    return false;
  for (size_t i = 0; i < a.objects.size(); ++i)
    if (a.objects[i].key != b.objects[i].key || a.objects[i].size != b.objects[i].size)
      return false;
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string body(reinterpret_cast<const char *>(data), size);
  for (const char *tag : {"Code", "Message", "UploadId", "ETag", "Error"}) {
    size_t end = 0;
    std::string value = kiln::rt::xmlValue(body, tag, 0, &end);
    KILN_FUZZ_CHECK(value.size() <= body.size(), "a value longer than the body");
  }
  auto page = kiln::rt::parseListObjectsPage(body);
  if (!page.isOk())
    return 0;
  for (const kiln::rt::S3Object &object : page->objects)
    KILN_FUZZ_CHECK(!object.key.empty(), "an object without a key");
  const std::string again = writeBack(*page);
  auto reparsed = kiln::rt::parseListObjectsPage(again);
  KILN_FUZZ_CHECK(reparsed.isOk() && samePage(*page, *reparsed),
                  "a page written back parses differently:\n" + again);
  return 0;
}
