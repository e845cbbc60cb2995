// SHA-256 (OpenSSL EVP) for the weights index and artifact manifests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kiln {

// Lower-case hex digest of `bytes`.
std::string sha256Hex(std::span<const uint8_t> bytes);
std::string sha256Hex(const void *data, size_t size);

} // namespace kiln
