#include "runtime/base/sha256.h"

#include <openssl/evp.h>

namespace kiln {

std::string sha256Hex(const void *data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::string sha256Hex(std::span<const uint8_t> bytes) {
  return sha256Hex(bytes.data(), bytes.size());
}

} // namespace kiln
