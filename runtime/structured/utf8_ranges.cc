#include "runtime/structured/utf8_ranges.h"

#include <algorithm>

namespace kiln::structured {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;
// The largest code point of each encoded length (1 to 4 bytes).
constexpr uint32_t kMaxOfLength[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};

// Sorted, merged, surrogates removed; the complement first when negated.
std::vector<CodePointRange> normalize(std::vector<CodePointRange> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodePointRange &a, const CodePointRange &b) { return a.lo < b.lo; });
  std::vector<CodePointRange> merged;
  for (CodePointRange r : ranges) {
    r.hi = std::min(r.hi, kMaxCodePoint);
    if (r.lo > r.hi)
      continue;
    if (!merged.empty() && r.lo <= merged.back().hi + 1)
      merged.back().hi = std::max(merged.back().hi, r.hi);
    else
      merged.push_back(r);
  }
  if (negated) {
    std::vector<CodePointRange> complement;
    uint32_t next = 0;
    for (const CodePointRange &r : merged) {
      if (r.lo > next)
        complement.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodePoint)
      complement.push_back({next, kMaxCodePoint});
    merged = std::move(complement);
  }
  std::vector<CodePointRange> out;
  for (const CodePointRange &r : merged) { // cut the surrogates out
    if (r.hi < kSurrogateLo || r.lo > kSurrogateHi) {
      out.push_back(r);
      continue;
    }
    if (r.lo < kSurrogateLo)
      out.push_back({r.lo, kSurrogateLo - 1});
    if (r.hi > kSurrogateHi)
      out.push_back({kSurrogateHi + 1, r.hi});
  }
  return out;
}

// [lo, hi] of one encoded length, split until each piece is a product of byte ranges: lo and hi
// then share every byte but the ones whose ranges run full (0x80-0xBF) below the first that
// differs.
void splitRange(uint32_t lo, uint32_t hi, std::vector<ByteRangeSequence> &out) {
  if (lo > hi)
    return;
  for (uint32_t max : kMaxOfLength)
    if (lo <= max && hi > max) {
      splitRange(lo, max, out);
      splitRange(max + 1, hi, out);
      return;
    }
  for (int bits = 6; bits <= 18; bits += 6) {
    const uint32_t mask = (1u << bits) - 1;
    if ((lo & ~mask) == (hi & ~mask))
      break; // the bytes above these `bits` agree
    if ((lo & mask) != 0) {
      splitRange(lo, lo | mask, out);
      splitRange((lo | mask) + 1, hi, out);
      return;
    }
    if ((hi & mask) != mask) {
      splitRange(lo, (hi & ~mask) - 1, out);
      splitRange(hi & ~mask, hi, out);
      return;
    }
  }
  const std::vector<uint8_t> a = encodeUtf8(lo), b = encodeUtf8(hi);
  ByteRangeSequence sequence;
  for (size_t i = 0; i < a.size(); ++i)
    sequence.push_back({a[i], b[i]});
  out.push_back(std::move(sequence));
}

} // namespace

size_t decodeUtf8(std::string_view text, uint32_t &cp) {
  if (text.empty())
    return 0;
  const auto b0 = static_cast<uint8_t>(text[0]);
  const size_t length = b0 < 0x80                  ? 1
                        : b0 >= 0xC2 && b0 <= 0xDF ? 2
                        : b0 >= 0xE0 && b0 <= 0xEF ? 3
                        : b0 >= 0xF0 && b0 <= 0xF4 ? 4
                                                   : 0;
  if (length == 0 || text.size() < length)
    return 0;
  cp = length == 1 ? b0 : b0 & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    if ((b & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  const uint32_t minOfLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < minOfLength[length] || cp > kMaxCodePoint || (cp >= kSurrogateLo && cp <= kSurrogateHi))
    return 0;
  return length;
}

std::vector<uint8_t> encodeUtf8(uint32_t cp) {
  if (cp < 0x80)
    return {static_cast<uint8_t>(cp)};
  if (cp < 0x800)
    return {static_cast<uint8_t>(0xC0 | (cp >> 6)), static_cast<uint8_t>(0x80 | (cp & 0x3F))};
  if (cp < 0x10000)
    return {static_cast<uint8_t>(0xE0 | (cp >> 12)),
            static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)),
            static_cast<uint8_t>(0x80 | (cp & 0x3F))};
  return {static_cast<uint8_t>(0xF0 | (cp >> 18)), static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F)),
          static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)),
          static_cast<uint8_t>(0x80 | (cp & 0x3F))};
}

std::vector<ByteRangeSequence> utf8ByteRanges(std::vector<CodePointRange> ranges, bool negated) {
  std::vector<ByteRangeSequence> out;
  for (const CodePointRange &r : normalize(std::move(ranges), negated))
    splitRange(r.lo, r.hi, out);
  return out;
}

} // namespace kiln::structured
