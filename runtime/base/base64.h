// Base64 with the standard alphabet and '=' padding (RFC 4648 section 4): tokenizer.json's
// precompiled charsmap, OpenAI's embeddings with encoding_format "base64".
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln::rt {

std::string encodeBase64(std::string_view bytes);
// nullopt on a character outside the alphabet; trailing '=' are optional.
std::optional<std::string> decodeBase64(std::string_view text);

} // namespace kiln::rt
