#include "runtime/text/byte_level.h"

#include "runtime/text/tokenizer_utf8.h"

#include <array>

namespace kiln::rt::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> charOf;
  std::array<int16_t, 512> byteOf;
  Tables() {
    byteOf.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      charOf[b] = utf8::encode(cp);
      byteOf[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables &tables() {
  static const Tables kTables;
  return kTables;
}

} // namespace

std::string_view charFor(uint8_t b) {
  return tables().charOf[b];
}

int byteFor(char32_t cp) {
  return cp < 512 ? tables().byteOf[cp] : -1;
}

void encodeBytes(std::string_view bytes, std::string &out) {
  const Tables &t = tables();
  for (char c : bytes)
    out.append(t.charOf[static_cast<uint8_t>(c)]);
}

bool decodeChars(std::string_view text, std::string &out) {
  size_t start = out.size();
  size_t pos = 0;
  while (pos < text.size()) {
    int b = byteFor(utf8::next(text, pos));
    if (b < 0) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(b));
  }
  return true;
}

} // namespace kiln::rt::byte_level
