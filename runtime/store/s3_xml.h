// The parts of S3's XML responses kiln reads (ListObjectsV2 pages, error codes, upload ids,
// ETags), apart from the HTTP client so that they can be tested and fuzzed without a server
// (tests/fuzz/s3_xml_fuzz.cc). A response body comes from the network: malformed XML is an
// error or an empty value, never an exception.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

struct S3Object {
  std::string key;
  uint64_t size = 0;
};

// The text of the first <tag>...</tag> at or after `from`, with the five predefined entities
// decoded; empty when absent. `end` (when given) receives the offset just past </tag>.
std::string xmlValue(const std::string &xml, const std::string &tag, size_t from = 0,
                     size_t *end = nullptr);

// One page of a ListObjectsV2 response.
struct S3ListPage {
  std::vector<S3Object> objects;
  // NextContinuationToken when IsTruncated is true; empty on the last page.
  std::string continuationToken;
};

// Errors (DATA_LOSS) for a <Contents> without a <Key>, a <Size> that is not a decimal uint64,
// and a truncated page without a continuation token.
Result<S3ListPage> parseListObjectsPage(const std::string &body);

} // namespace kiln::rt
