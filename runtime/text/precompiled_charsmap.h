// tokenizer.json's "Precompiled" normalizer: SentencePiece's compiled normalization rules
// (precompiled_charsmap, base64; nmt_nfkc for XLM-R, mBART, T5 and most SentencePiece models), with
// the semantics of HF tokenizers' normalizers/precompiled.rs. The blob is a little-endian u32
// trie size, a darts-clone double-array trie over UTF-8 keys of that many bytes, and the
// replacement strings, NUL-terminated, that the trie's values point into.
//
// Text is rewritten one extended grapheme cluster at a time: a cluster of under 6 bytes is looked
// up whole; otherwise (or when that finds nothing) each of its characters is looked up alone. A
// lookup takes the shortest key that prefixes the text, as HF does.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

class PrecompiledCharsMap {
public:
  // `where` names the field in errors ("tokenizer.json: normalizer.precompiled_charsmap").
  static Result<std::shared_ptr<const PrecompiledCharsMap>> fromBase64(std::string_view encoded,
                                                                       const std::string &where);
  static Result<std::shared_ptr<const PrecompiledCharsMap>> fromBytes(std::string_view blob,
                                                                      const std::string &where);

  void apply(std::string &text) const;
  // The replacement of the shortest key that prefixes `chunk`, if any.
  std::optional<std::string_view> transform(std::string_view chunk) const;

private:
  void rewriteCluster(std::string_view cluster, std::string &out) const;

  std::vector<uint32_t> units_;
  std::string replacements_;
};

} // namespace kiln::rt
