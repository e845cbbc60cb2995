// Tokenizer::fromJson on hostile tokenizer.json / tokenizer_config.json / special_tokens_map.json:
// the model (BPE vocab and merges), added tokens, normalizers, pre-tokenizers (PCRE2 patterns
// included), post-processor and decoder chain.
//
// Input: tokenizer.json [sep tokenizer_config.json [sep special_tokens_map.json]] (fuzz_util.h).
// A tokenizer that loads encodes a fixed text to ids inside its vocabulary, and its streaming
// detokenizer agrees with decode().
#include "runtime/text/detokenizer.h"
#include "runtime/text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

#include <string>
#include <vector>

namespace {

using kiln::rt::Tokenizer;

// ASCII, spaces and newlines, digits, accents, CJK, an emoji, a lone continuation byte, and the
// special-token strings most tokenizers define.
constexpr std::string_view kSample =
    "<s>Hello  world!\n\tIt's 2024: caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 \x80"
    "</s><|endoftext|><unk> <|im_start|>user";

void checkIds(const Tokenizer &tokenizer, const std::vector<int32_t> &ids) {
  for (int32_t id : ids)
    KILN_FUZZ_CHECK(id >= 0 && id < tokenizer.vocabSize(),
                    "encode gave id " + std::to_string(id) + " outside the vocabulary of " +
                        std::to_string(tokenizer.vocabSize()));
}

void checkStreaming(const Tokenizer &tokenizer, const std::vector<int32_t> &ids, bool skip) {
  kiln::rt::IncrementalDetokenizer detokenizer(tokenizer, skip);
  std::string streamed;
  for (int32_t id : ids)
    streamed += detokenizer.push(id);
  streamed += detokenizer.finish();
  KILN_FUZZ_CHECK(streamed == tokenizer.decode(ids, skip),
                  "the streaming detokenizer differs from decode()");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::vector<std::string_view> files = kiln::fuzz::splitFiles(data, size);
  auto tokenizer =
      Tokenizer::fromJson(files[0], kiln::fuzz::fileOr(files, 1), kiln::fuzz::fileOr(files, 2));
  if (!tokenizer.isOk()) {
    KILN_FUZZ_CHECK(!tokenizer.status().message().empty(), "an error without a message");
    return 0;
  }
  for (bool addSpecial : {false, true}) {
    const std::vector<int32_t> ids = tokenizer->encode(kSample, addSpecial);
    checkIds(*tokenizer, ids);
    checkStreaming(*tokenizer, ids, /*skip=*/addSpecial);
  }
  // Every id of the vocabulary (and a few past it) decodes, and names a token or none.
  std::vector<int32_t> all;
  for (int32_t id = -2; id < tokenizer->vocabSize() + 2 && id < 4096; ++id) {
    all.push_back(id);
    (void)tokenizer->idToToken(id);
  }
  checkStreaming(*tokenizer, all, /*skip=*/false);
  return 0;
}
