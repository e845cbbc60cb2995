// Tokenizer::encode / decode and IncrementalDetokenizer on arbitrary bytes, with real tokenizers:
// tests/data's byte-level BPE fixture always, and (when ../shared/assets is present) GPT-2,
// Llama 3, Qwen2.5 (byte-level BPE), Llama 2 and stories260K (SentencePiece-style BPE with byte
// fallback).
//
// Input: byte 0 picks the tokenizer, byte 1 the flags, the rest is the text; the same bytes read
// as little-endian int32 are also decoded as ids (most out of the vocabulary or negative).
// Invariants: encoded ids are in the vocabulary; for the byte-level tokenizers without a
// normalizer, decode(encode(text)) is the text (invalid UTF-8 replaced by U+FFFD, as encode
// documents); the streaming detokenizer's output equals decode() of the same ids.
#include "runtime/base/file.h"
#include "runtime/text/detokenizer.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_utf8.h"
#include "tests/fuzz/fuzz_util.h"

#include <cstring>
#include <string>
#include <vector>

#ifndef KILN_TEST_DATA_DIR
#error "KILN_TEST_DATA_DIR must name tests/data"
#endif
#ifndef KILN_ASSETS_DIR
#error "KILN_ASSETS_DIR must name ../shared/assets"
#endif

namespace {

using kiln::rt::Tokenizer;

struct LoadedTokenizer {
  std::string name;
  Tokenizer tokenizer;
  bool roundTrips; // byte-level BPE, no normalizer: every valid UTF-8 text decodes back
};

std::vector<LoadedTokenizer> loadTokenizers() {
  struct Source {
    std::string name, dir;
    bool roundTrips;
  };
  const std::string assets = KILN_ASSETS_DIR;
  const std::vector<Source> sources = {
      {"tiny-llama", std::string(KILN_TEST_DATA_DIR) + "/models/tiny-llama", true},
      {"stories260K", assets + "/models/stories260K-hf", false},
      {"gpt2", assets + "/tokenizers/gpt2", true},
      {"llama3", assets + "/tokenizers/llama3", true},
      {"qwen2.5", assets + "/tokenizers/qwen2.5", false}, // NFC normalizer
      {"llama2", assets + "/tokenizers/llama2", false},
  };
  std::vector<LoadedTokenizer> loaded;
  for (const Source &source : sources) {
    if (!kiln::fileExists(source.dir + "/tokenizer.json"))
      continue;
    auto tokenizer = Tokenizer::fromDirectory(source.dir);
    if (!tokenizer.isOk()) {
      std::fprintf(stderr, "%s: %s\n", source.dir.c_str(), tokenizer.status().toString().c_str());
      std::abort();
    }
    loaded.push_back({source.name, std::move(tokenizer).value(), source.roundTrips});
  }
  std::fprintf(stderr, "tokenizer_encode_fuzz: %zu tokenizer(s) loaded\n", loaded.size());
  return loaded;
}

std::string streamed(const Tokenizer &tokenizer, const std::vector<int32_t> &ids,
                     bool skipSpecial) {
  kiln::rt::IncrementalDetokenizer detokenizer(tokenizer, skipSpecial);
  std::string out;
  for (int32_t id : ids)
    out += detokenizer.push(id);
  return out + detokenizer.finish();
}

// What encode() tokenizes: invalid UTF-8 replaced by U+FFFD per maximal subpart.
std::string replaceInvalidUtf8(std::string_view text) {
  std::string out;
  kiln::rt::utf8::LossyDecoder lossy;
  lossy.feed(text, out);
  lossy.finish(out);
  return out;
}

void checkDecode(const LoadedTokenizer &loaded, const std::vector<int32_t> &ids, bool skipSpecial) {
  const std::string whole = loaded.tokenizer.decode(ids, skipSpecial);
  KILN_FUZZ_CHECK(streamed(loaded.tokenizer, ids, skipSpecial) == whole,
                  loaded.name + ": the streaming detokenizer differs from decode()");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::vector<LoadedTokenizer> tokenizers = loadTokenizers();
  if (size < 2)
    return 0;
  const LoadedTokenizer &loaded = tokenizers[data[0] % tokenizers.size()];
  const bool addSpecial = data[1] & 1, skipSpecial = data[1] & 2;
  const std::string_view text(reinterpret_cast<const char *>(data) + 2, size - 2);

  const std::vector<int32_t> ids = loaded.tokenizer.encode(text, addSpecial);
  for (int32_t id : ids)
    KILN_FUZZ_CHECK(id >= 0 && id < loaded.tokenizer.vocabSize(),
                    loaded.name + ": encode gave id " + std::to_string(id));
  checkDecode(loaded, ids, skipSpecial);
  if (loaded.roundTrips && !addSpecial) {
    const std::string decoded = loaded.tokenizer.decode(ids, /*skipSpecialTokens=*/false);
    KILN_FUZZ_CHECK(decoded == replaceInvalidUtf8(text),
                    loaded.name + ": decode(encode(text)) differs from the text");
  }

  // The same bytes as ids: unknown and negative ids are skipped, never read out of range.
  std::vector<int32_t> raw((size - 2) / 4);
  if (!raw.empty())
    std::memcpy(raw.data(), data + 2, raw.size() * 4);
  checkDecode(loaded, raw, skipSpecial);
  const int32_t vocab = loaded.tokenizer.vocabSize();
  for (int32_t &id : raw) // mostly in range, a few past the end
    id = static_cast<int32_t>(static_cast<uint32_t>(id) % static_cast<uint32_t>(vocab + 4));
  checkDecode(loaded, raw, skipSpecial);
  return 0;
}
