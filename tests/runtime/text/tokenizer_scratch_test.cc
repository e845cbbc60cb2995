// The tokenizer's thread-local scratch buffers do not keep the size of a huge input: after a thread
// encodes a 900 KB text, its heap use is back within a few scratch buffers of where it was.
// `kiln serve` encodes on hundreds of HTTP threads, so each one keeping its largest prompt's
// buffers (tens of MB for a long one) grew the server without bound (runtime/text/scratch.h).
// One tokenizer per path that keeps scratch: normalizer + BPE without a pre-tokenizer (the
// SentencePiece / TinyStories shape), ByteLevel, Metaspace and Split pre-tokenizers.
#include "runtime/text/scratch.h"
#include "runtime/text/tokenizer.h"

#include <gtest/gtest.h>

#include <malloc.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::rt {
namespace {

// "h" "i" "hi" in every vocabulary, plus the space of each shape.
std::string tokenizerJson(const std::string &normalizer, const std::string &preTokenizer,
                          const std::string &space) {
  return R"({"version":"1.0","added_tokens":[],"normalizer":)" + normalizer +
         R"(,"pre_tokenizer":)" + preTokenizer + R"(,"post_processor":null,"decoder":null,
    "model":{"type":"BPE","unk_token":"<unk>","fuse_unk":true,"byte_fallback":false,
      "vocab":{"<unk>":0,"h":1,"i":2,")" +
         space + R"(":3,"hi":4},"merges":["h i"]}})";
}

std::vector<std::pair<std::string, std::string>> tokenizers() {
  const std::string spaceToMeta = R"({"type":"Sequence","normalizers":[{"type":"Prepend",
    "prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]})";
  return {
      {"sentencepiece", tokenizerJson(spaceToMeta, "null", "▁")},
      {"byte-level", tokenizerJson("null", R"({"type":"ByteLevel","add_prefix_space":false,
        "use_regex":true})",
                                   "Ġ")},
      {"metaspace", tokenizerJson("null", R"({"type":"Metaspace","replacement":"▁",
        "prepend_scheme":"always","split":true})",
                                  "▁")},
      {"split", tokenizerJson("null", R"({"type":"Split","pattern":{"String":" "},
        "behavior":"Isolated","invert":false})",
                              " ")},
  };
}

size_t heapInUse() {
  struct mallinfo2 info = mallinfo2(); // every arena, plus mmapped chunks
  return info.uordblks + info.hblkhd;
}

// Heap bytes a fresh thread still holds after encoding `text` and freeing the ids: what its
// thread-local buffers kept. A short encode first makes the one-time allocations.
size_t retainedByEncode(const Tokenizer &tokenizer, const std::string &text, size_t &ids) {
  size_t retained = 0;
  std::thread([&] {
    (void)tokenizer.encode("hi hi", false);
    size_t before = heapInUse();
    ids = tokenizer.encode(text, false).size();
    size_t after = heapInUse();
    retained = after > before ? after - before : 0;
  }).join();
  return retained;
}

TEST(TokenizerScratchTest, AHugeInputLeavesNoPerThreadBufferBehind) {
  std::string text;
  for (int i = 0; i < 300000; ++i)
    text += "hi ";
  for (const auto &[name, json] : tokenizers()) {
    auto tokenizer = Tokenizer::fromJson(json);
    ASSERT_TRUE(tokenizer.isOk()) << name << ": " << tokenizer.status().toString();
    size_t ids = 0;
    size_t retained = retainedByEncode(*tokenizer, text, ids);
    EXPECT_GE(ids, 300000u) << name; // the text was encoded: one "hi" per word at least
    // Without the guards each path kept several MB (16-24 bytes per character or match).
    EXPECT_LT(retained, 8 * kScratchKeepBytes) << name;
  }
}

TEST(TokenizerScratchTest, ABufferIsFreedOnlyOverTheLimit) {
  std::vector<int> small, large;
  {
    ScratchGuard keepSmall(small), keepLarge(large);
    small.resize(16);
    large.resize(kScratchKeepBytes / sizeof(int) + 1);
  }
  EXPECT_GE(small.capacity(), 16u); // kept for the next call
  EXPECT_EQ(large.capacity(), 0u);
}

} // namespace
} // namespace kiln::rt
