#include "runtime/store/s3_xml.h"

#include <charconv>
#include <cstring>

namespace kiln::rt {
namespace {

std::string xmlDecode(std::string text) {
  static const std::pair<const char *, const char *> kEntities[] = {
      {"&quot;", "\""}, {"&apos;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}};
  for (const auto &[entity, plain] : kEntities)
    for (size_t pos = 0; (pos = text.find(entity, pos)) != std::string::npos; pos += 1)
      text.replace(pos, std::strlen(entity), plain);
  return text;
}

// Where the first <tag>...</tag> at or after `from` holds its text: [begin, stop), and `end` just
// past </tag>. False when there is none.
bool findElement(const std::string &xml, const std::string &tag, size_t from, size_t &begin,
                 size_t &stop, size_t &end) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  begin = xml.find(open, from);
  if (begin == std::string::npos)
    return false;
  begin += open.size();
  stop = xml.find(close, begin);
  if (stop == std::string::npos)
    return false;
  end = stop + close.size();
  return true;
}

Result<uint64_t> parseSize(const std::string &text, const std::string &key) {
  uint64_t size = 0;
  auto [next, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
  if (text.empty() || ec != std::errc() || next != text.data() + text.size())
    return dataLoss("S3 ListObjectsV2: object '" + key + "' has <Size> '" + text +
                    "', not a byte count");
  return size;
}

} // namespace

std::string xmlValue(const std::string &xml, const std::string &tag, size_t from, size_t *end) {
  size_t begin = 0, stop = 0, after = 0;
  if (!findElement(xml, tag, from, begin, stop, after))
    return "";
  if (end)
    *end = after;
  return xmlDecode(xml.substr(begin, stop - begin));
}

Result<S3ListPage> parseListObjectsPage(const std::string &body) {
  S3ListPage page;
  size_t begin = 0, stop = 0, end = 0;
  for (size_t pos = 0; findElement(body, "Contents", pos, begin, stop, end); pos = end) {
    const std::string item = body.substr(begin, stop - begin);
    std::string key = xmlValue(item, "Key");
    if (key.empty())
      return dataLoss("S3 ListObjectsV2: a <Contents> entry has no <Key>");
    KILN_ASSIGN_OR_RETURN(uint64_t size, parseSize(xmlValue(item, "Size"), key));
    page.objects.push_back({std::move(key), size});
  }
  if (xmlValue(body, "IsTruncated") == "true") {
    page.continuationToken = xmlValue(body, "NextContinuationToken");
    if (page.continuationToken.empty())
      return dataLoss("S3 ListObjectsV2: a truncated page has no <NextContinuationToken>");
  }
  return page;
}

} // namespace kiln::rt
