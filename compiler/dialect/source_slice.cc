#include "compiler/dialect/source_slice.h"

#include <charconv>

namespace kiln::compiler {
namespace {

std::optional<int64_t> parseInt(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

// "a:b" -> {a, b}; b may be -1 only when given as "-1".
bool parseRange(std::string_view text, int64_t &begin, int64_t &end) {
  size_t colon = text.find(':');
  if (colon == std::string_view::npos)
    return false;
  auto b = parseInt(text.substr(0, colon)), e = parseInt(text.substr(colon + 1));
  if (!b || !e || *b < 0 || *e < -1 || (*e != -1 && *e < *b))
    return false;
  begin = *b;
  end = *e;
  return true;
}

std::string range(int64_t begin, int64_t end) {
  return std::to_string(begin) + ":" + std::to_string(end);
}

} // namespace

namespace {

// [innerBegin, innerEnd) of the range [outerBegin, outerEnd) (-1: to the end) in absolute terms.
bool composeRange(int64_t outerBegin, int64_t outerEnd, int64_t innerBegin, int64_t innerEnd,
                  int64_t &begin, int64_t &end) {
  begin = outerBegin + innerBegin;
  end = innerEnd == -1 ? outerEnd : outerBegin + innerEnd;
  return outerEnd == -1 || (begin <= outerEnd && end != -1 && end <= outerEnd);
}

// "TENSOR@ROW" of "|add_row=TENSOR@ROW" or "|sub_row=TENSOR@ROW".
bool parseAddRow(std::string_view text, SourceSlice &slice) {
  const size_t at = text.rfind('@');
  if (at == std::string_view::npos || at == 0 || at + 1 == text.size())
    return false;
  int64_t row = 0;
  for (char ch : text.substr(at + 1)) {
    if (ch < '0' || ch > '9' || row > (int64_t(1) << 40))
      return false;
    row = row * 10 + (ch - '0');
  }
  slice.addRowTensor = std::string(text.substr(0, at));
  slice.addRow = row;
  return true;
}

} // namespace

std::optional<SourceSlice> composeSourceSlices(const SourceSlice &outer, const SourceSlice &inner) {
  SourceSlice slice;
  slice.tensor = outer.tensor;
  if (!composeRange(outer.rowBegin, outer.rowEnd, inner.rowBegin, inner.rowEnd, slice.rowBegin,
                    slice.rowEnd) ||
      !composeRange(outer.colBegin, outer.colEnd, inner.colBegin, inner.colEnd, slice.colBegin,
                    slice.colEnd))
    return std::nullopt;
  slice.plusOne = outer.plusOne || inner.plusOne;
  slice.addRowTensor = outer.addRowTensor.empty() ? inner.addRowTensor : outer.addRowTensor;
  slice.addRow = outer.addRowTensor.empty() ? inner.addRow : outer.addRow;
  slice.subtractRow = outer.addRowTensor.empty() ? inner.subtractRow : outer.subtractRow;
  return slice;
}

std::string formatSourceSlice(const SourceSlice &slice) {
  std::string spec = slice.tensor;
  if (slice.rowBegin != 0 || slice.rowEnd != -1)
    spec += "|rows=" + range(slice.rowBegin, slice.rowEnd);
  if (slice.colBegin != 0 || slice.colEnd != -1)
    spec += "|cols=" + range(slice.colBegin, slice.colEnd);
  if (slice.plusOne)
    spec += "|plus_one";
  if (!slice.addRowTensor.empty())
    spec += (slice.subtractRow ? "|sub_row=" : "|add_row=") + slice.addRowTensor + "@" +
            std::to_string(slice.addRow);
  return spec;
}

std::optional<SourceSlice> parseSourceSlice(std::string_view spec) {
  SourceSlice slice;
  size_t bar = spec.find('|');
  slice.tensor = std::string(spec.substr(0, bar));
  if (slice.tensor.empty())
    return std::nullopt;
  while (bar != std::string_view::npos) {
    spec = spec.substr(bar + 1);
    bar = spec.find('|');
    std::string_view part = spec.substr(0, bar);
    bool ok = false;
    if (part.rfind("rows=", 0) == 0)
      ok = parseRange(part.substr(5), slice.rowBegin, slice.rowEnd);
    else if (part.rfind("cols=", 0) == 0)
      ok = parseRange(part.substr(5), slice.colBegin, slice.colEnd);
    else if (part == "plus_one")
      ok = slice.plusOne = true;
    else if (part.rfind("add_row=", 0) == 0)
      ok = parseAddRow(part.substr(8), slice);
    else if (part.rfind("sub_row=", 0) == 0)
      ok = slice.subtractRow = parseAddRow(part.substr(8), slice);
    if (!ok)
      return std::nullopt;
  }
  return slice;
}

std::optional<std::vector<int64_t>>
slicedShape(const SourceSlice &slice, const std::vector<int64_t> &shape, std::string &error) {
  if (shape.empty() || shape.size() > 2) {
    error = "only rank-1 and rank-2 tensors can be sliced";
    return std::nullopt;
  }
  std::vector<int64_t> out = shape;
  out[0] = (slice.rowEnd == -1 ? shape[0] : slice.rowEnd) - slice.rowBegin;
  if (slice.colBegin != 0 || slice.colEnd != -1) {
    if (shape.size() != 2) {
      error = "a column slice needs a rank-2 tensor";
      return std::nullopt;
    }
    int64_t end = slice.colEnd == -1 ? shape[1] : slice.colEnd;
    if (end > shape[1]) {
      error = "columns " + range(slice.colBegin, end) + " lie outside its " +
              std::to_string(shape[1]) + " columns";
      return std::nullopt;
    }
    out[1] = end - slice.colBegin;
  }
  if (out[0] <= 0 || (out.size() == 2 && out[1] <= 0)) {
    error = "the slice " + formatSourceSlice(slice) + " is empty";
    return std::nullopt;
  }
  return out;
}

} // namespace kiln::compiler
