// Embedding-encoder tokenizers (WordPiece with BertNormalizer / BertPreTokenizer, Unigram with a
// Precompiled charsmap and byte fallback, RoBERTa-style byte-level BPE) against goldens from HF
// tokenizers 0.22 (tools/goldens/make_encoder_tokenizer_goldens.py writes the tokenizer.json files
// and goldens under tests/data/tokenizer/encoders), plus an every-code-point sweep of the BERT
// character classes and the charsmap, and the error values of malformed components.
#include "runtime/base/file.h"
#include "runtime/text/decoder.h"
#include "runtime/text/normalizer.h"
#include "runtime/text/pre_tokenizer.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_utf8.h"
#include "tests/runtime/text/tokenizer_test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unicode/uchar.h>

#include <cstdio>

namespace kiln::rt {
namespace {

using nlohmann::json;
using testing::joinIds;

std::string encodersDir() {
  return std::string(KILN_TEST_DATA_DIR) + "/tokenizer/encoders";
}

json readJson(const std::string &path) {
  auto text = readFile(path);
  return text.isOk() ? json::parse(*text) : json();
}

class EncoderTokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EncoderTokenizerTest, MatchesHuggingFaceGoldens) {
  const std::string name = GetParam();
  json goldens = readJson(encodersDir() + "/" + name + "/goldens.json");
  ASSERT_TRUE(goldens.contains("cases")) << "missing goldens for " << name;
  EXPECT_EQ(goldens["tokenizers_version"].get<std::string>().rfind("0.22.", 0), 0u);
  auto tok = Tokenizer::fromFiles(encodersDir() + "/" + name + "/tokenizer.json");
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  EXPECT_EQ(tok->vocabSize(), goldens["vocab_size"].get<int32_t>());
  ASSERT_GE(goldens["cases"].size(), 100u);
  for (const json &c : goldens["cases"]) {
    std::string text = c["text"].get<std::string>();
    auto ids = c["ids"].get<std::vector<int32_t>>();
    auto idsSpecial = c["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(joinIds(tok->encode(text, false)), joinIds(ids)) << name << ": '" << text << "'";
    EXPECT_EQ(joinIds(tok->encode(text, true)), joinIds(idsSpecial))
        << name << ": '" << text << "'";
    EXPECT_EQ(tok->decode(ids, false), c["decode_plain"].get<std::string>())
        << name << ": '" << text << "'";
    EXPECT_EQ(tok->decode(idsSpecial, false), c["decode_special"].get<std::string>())
        << name << ": '" << text << "'";
    EXPECT_EQ(tok->decode(idsSpecial, true), c["decode_skip"].get<std::string>())
        << name << ": '" << text << "'";
    // HF's truncation (TEI's truncate): the text's tokens cut, the special tokens kept.
    for (size_t length : {3, 6})
      for (auto [side, label] : {std::pair{Truncation::Side::kRight, "right"},
                                 std::pair{Truncation::Side::kLeft, "left"}}) {
        const std::string key = std::string("ids_special_") + label + "_" + std::to_string(length);
        ASSERT_TRUE(c.contains(key)) << name << ": no " << key;
        auto cut = tok->encode(text, true, Truncation{length, side});
        ASSERT_TRUE(cut.isOk()) << cut.status().toString();
        EXPECT_EQ(joinIds(*cut), joinIds(c[key].get<std::vector<int32_t>>()))
            << name << " " << key << ": '" << text << "'";
      }
  }
  // No room for a text token beside the special tokens: an error, as HF raises one.
  const size_t specials = tok->encode("", true).size();
  if (specials > 0) {
    auto none = tok->encode("hello", true, Truncation{specials, Truncation::Side::kRight});
    ASSERT_FALSE(none.isOk());
    EXPECT_NE(none.status().message().find("no room for text"), std::string::npos);
  }
}

std::string paramName(const ::testing::TestParamInfo<std::string> &info) {
  std::string n = info.param;
  for (char &c : n)
    if (c == '-')
      c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Encoders, EncoderTokenizerTest,
                         ::testing::Values("bert-uncased", "bert-cased", "bert-strip-accents",
                                           "bert-lower-keep-accents", "xlmr-unigram",
                                           "unigram-byte-fallback", "roberta-bpe"),
                         paramName);

// --- Every code point against HF's per-character behaviour (unicode_sweep.json). ---

class UnicodeSweep : public ::testing::Test {
protected:
  void SetUp() override {
    sweep_ = readJson(encodersDir() + "/unicode_sweep.json");
    ASSERT_TRUE(sweep_.contains("bert_punctuation")) << "missing unicode_sweep.json";
  }
  // Code points in the golden ranges of `key`, as a dense bitmap.
  std::vector<bool> members(const char *key) const {
    std::vector<bool> in(0x110000, false);
    for (const json &r : sweep_[key])
      for (uint32_t cp = r[0].get<uint32_t>(); cp <= r[1].get<uint32_t>(); ++cp)
        in[cp] = true;
    return in;
  }
  // Calls f(cp, utf8) for every scalar value.
  template <typename F> static void forEachCodePoint(F f) {
    for (char32_t cp = 0; cp < 0x110000; ++cp)
      if (cp < 0xD800 || cp > 0xDFFF)
        f(cp, utf8::encode(cp));
  }
  static std::string hex(char32_t cp) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%X", static_cast<unsigned>(cp));
    return buf;
  }
  static Normalizer bert(bool clean, bool strip, bool lower) {
    json spec = {{"type", "BertNormalizer"},
                 {"clean_text", clean},
                 {"handle_chinese_chars", false},
                 {"strip_accents", strip},
                 {"lowercase", lower}};
    auto n = Normalizer::fromJson(spec, "sweep");
    EXPECT_TRUE(n.isOk());
    return std::move(n).value();
  }
  json sweep_;
};

TEST_F(UnicodeSweep, BertPreTokenizerIsolatesExactlyHfPunctuation) {
  auto pre = PreTokenizer::fromJson(json{{"type", "BertPreTokenizer"}}, "sweep");
  ASSERT_TRUE(pre.isOk());
  std::vector<bool> punct = members("bert_punctuation");
  PieceList pieces, scratch;
  int wrong = 0;
  forEachCodePoint([&](char32_t cp, const std::string &s) {
    pieces.clear();
    pieces.buffer = "a" + s + "a";
    pieces.spans.push_back({0, static_cast<uint32_t>(pieces.buffer.size()), true});
    pre->apply(pieces, scratch);
    if ((pieces.spans.size() == 3) != punct[cp] && ++wrong < 20)
      ADD_FAILURE() << "U+" << hex(cp) << " HF punctuation " << punct[cp];
  });
  EXPECT_EQ(wrong, 0);
}

TEST_F(UnicodeSweep, BertCleanTextRemovesAndSpacesLikeHf) {
  Normalizer clean = bert(true, false, false);
  std::vector<bool> removed = members("bert_clean_removed"), spaces = members("bert_clean_space");
  int wrong = 0;
  forEachCodePoint([&](char32_t cp, const std::string &s) {
    std::string t = s;
    clean.apply(t);
    bool isRemoved = t.empty(), isSpace = t == " " && cp != ' ';
    if ((isRemoved != removed[cp] || isSpace != spaces[cp]) && ++wrong < 20)
      ADD_FAILURE() << "U+" << hex(cp) << " -> '" << t << "'";
  });
  EXPECT_EQ(wrong, 0);
}

TEST_F(UnicodeSweep, BertStripAccentsRemovesExactlyHfMarks) {
  Normalizer strip = bert(false, true, false);
  std::vector<bool> marks = members("bert_strip_removed");
  int wrong = 0;
  forEachCodePoint([&](char32_t cp, const std::string &s) {
    std::string t = "a" + s;
    strip.apply(t);
    if ((t == "a") != marks[cp] && ++wrong < 20)
      ADD_FAILURE() << "U+" << hex(cp) << " -> '" << t << "'";
  });
  EXPECT_EQ(wrong, 0);
}

// HF lowercases with Rust's tables, which may be newer than the system ICU: characters ICU has not
// assigned are left out.
TEST_F(UnicodeSweep, BertLowercaseMapsEachCharacterLikeHf) {
  Normalizer lower = bert(false, false, true);
  const json &golden = sweep_["bert_lowercase"];
  int wrong = 0;
  forEachCodePoint([&](char32_t cp, const std::string &s) {
    UVersionInfo age;
    u_charAge(static_cast<UChar32>(cp), age);
    auto it = golden.find(hex(cp));
    std::string want = it == golden.end() ? s : it->get<std::string>();
    if (age[0] == 0 && age[1] == 0)
      return;
    std::string t = s;
    lower.apply(t);
    if (t != want && ++wrong < 20)
      ADD_FAILURE() << "U+" << hex(cp) << " -> '" << t << "', HF '" << want << "'";
  });
  EXPECT_EQ(wrong, 0);
}

TEST_F(UnicodeSweep, PrecompiledCharsmapRewritesEachCharacterLikeHf) {
  json tj = readJson(encodersDir() + "/xlmr-unigram/tokenizer.json");
  auto charsmap = Normalizer::fromJson(tj["normalizer"]["normalizers"][0], "sweep");
  ASSERT_TRUE(charsmap.isOk()) << charsmap.status().toString();
  const json &golden = sweep_["xlmr_precompiled"];
  int wrong = 0;
  forEachCodePoint([&](char32_t cp, const std::string &s) {
    auto it = golden.find(hex(cp));
    std::string want = it == golden.end() ? s : it->get<std::string>();
    std::string t = s;
    charsmap->apply(t);
    if (t != want && ++wrong < 20)
      ADD_FAILURE() << "U+" << hex(cp) << " -> '" << t << "', HF '" << want << "'";
  });
  EXPECT_EQ(wrong, 0);
}

// HF's NFKC uses Unicode 9.0 tables (runtime/text/normalizer.cc): later characters stay as they
// are.
TEST_F(UnicodeSweep, NfkcMapsEachCharacterLikeHf) {
  auto nfkc = Normalizer::fromJson(json{{"type", "NFKC"}}, "sweep");
  ASSERT_TRUE(nfkc.isOk());
  const json &golden = sweep_["nfkc"];
  int wrong = 0;
  forEachCodePoint([&](char32_t cp, const std::string &s) {
    auto it = golden.find(hex(cp));
    std::string want = it == golden.end() ? s : it->get<std::string>();
    std::string t = s;
    nfkc->apply(t);
    if (t != want && ++wrong < 20)
      ADD_FAILURE() << "U+" << hex(cp) << " -> '" << t << "', HF '" << want << "'";
  });
  EXPECT_EQ(wrong, 0);
}

// Canonical reordering: a mark HF's tables know moves past U+0334 (combining class 1).
TEST_F(UnicodeSweep, NfdDecomposesAndReordersLikeHf) {
  auto nfd = Normalizer::fromJson(json{{"type", "NFD"}}, "sweep");
  ASSERT_TRUE(nfd.isOk());
  std::vector<bool> changes = members("nfd_changes_a_c_u0334");
  int wrong = 0;
  forEachCodePoint([&](char32_t cp, const std::string &s) {
    std::string in = "a" + s + "\u0334", t = in;
    nfd->apply(t);
    if ((t != in) != changes[cp] && ++wrong < 20)
      ADD_FAILURE() << "U+" << hex(cp) << " HF changes it " << changes[cp];
  });
  EXPECT_EQ(wrong, 0);
}

// --- Component behaviour the goldens do not reach, and malformed components. ---

std::string decodeWith(const json &spec, const std::vector<std::string_view> &tokens) {
  auto d = Decoder::fromJson(spec, "decoder");
  EXPECT_TRUE(d.isOk()) << d.status().toString();
  return d.isOk() ? d->decode(tokens) : "";
}

TEST(EncoderComponentsTest, WordPieceDecoderMatchesHf) {
  json wp = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  // From HF tokenizers 0.22.2: decoders.WordPiece("##", True).decode([...]).
  EXPECT_EQ(decodeWith(wp, {"##a", "b", "##c", "'", "s", "n't", "."}), "##a bc ' sn't.");
  // After another step the WordPiece stage holds each token until it is whole.
  json seq = {
      {"type", "Sequence"},
      {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "_"}}}, {"content", " "}}, wp}}};
  EXPECT_EQ(decodeWith(seq, {"hello", "##_world", ".", "do", "_not", "##s"}),
            "hello world. do  nots");
  auto d = Decoder::fromJson(wp, "decoder");
  ASSERT_TRUE(d.isOk());
  EXPECT_EQ(d->tokenBytes("##ing"), "ing");
  EXPECT_EQ(d->tokenBytes("word"), " word");
  EXPECT_EQ(d->tokenBytes("."), ".");
}

TEST(EncoderComponentsTest, UnigramWithoutUnknownIdDropsUnknownCharacters) {
  // HF fails such an encode ("unk_id is missing"); kiln's encode cannot fail, so it drops them.
  std::string j = R"({"model":{"type":"Unigram","unk_id":null,"vocab":[["a",-1.0],["b",-2.0],
    ["ab",-1.5]]}})";
  auto tok = Tokenizer::fromJson(j);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  EXPECT_EQ(joinIds(tok->encode("abxa", false)), "2 0");
}

TEST(EncoderComponentsTest, UnigramFusesUnknownRunsAndPrefersBestPath) {
  std::string j = R"({"model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["a",-1.0],
    ["b",-2.0],["ab",-4.0],["abc",-2.5],["c",-1.0]]}})";
  auto tok = Tokenizer::fromJson(j);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  // "ab" (-4) loses to "a"+"b" (-3); "abc" (-2.5) beats "a"+"b"+"c" (-4).
  EXPECT_EQ(joinIds(tok->encode("ab", false)), "1 2");
  EXPECT_EQ(joinIds(tok->encode("abc", false)), "4");
  EXPECT_EQ(joinIds(tok->encode("xyzaqq", false)), "0 1 0");
}

TEST(EncoderComponentsTest, MalformedComponentsAreErrorsNamingTheField) {
  auto expectError = [](const std::string &tokenizerJson, const std::string &needle) {
    auto t = Tokenizer::fromJson(tokenizerJson);
    ASSERT_FALSE(t.isOk()) << needle;
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  };
  expectError(R"({"model":{"type":"Unigram","unk_id":5,"vocab":[["a",0.0]]}})",
              "model.unk_id 5 is not an id of model.vocab");
  expectError(R"({"model":{"type":"Unigram","unk_id":0,"vocab":[["a"]]}})",
              "model.vocab[0] must be [token, score]");
  expectError(R"({"model":{"type":"Unigram","vocab":{"a":0}}})",
              "model.vocab must be a list of [token, score]");
  expectError(R"({"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"a":0}}})",
              "model.unk_token '[UNK]' is not in model.vocab");
  const std::string wordPiece =
      R"({"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"[UNK]":0,"a":1}},)";
  expectError(wordPiece + R"("normalizer":{"type":"Precompiled","precompiled_charsmap":"!!"}})",
              "tokenizer.json: normalizer.precompiled_charsmap is not valid base64");
  expectError(wordPiece +
                  R"("normalizer":{"type":"Precompiled","precompiled_charsmap":"AAAAAA=="}})",
              "tokenizer.json: normalizer.precompiled_charsmap: the trie size 0 does not fit");
  expectError(wordPiece + R"("normalizer":{"type":"Precompiled"}})",
              "tokenizer.json: normalizer: field 'precompiled_charsmap' must be a string");
  expectError(wordPiece + R"("pre_tokenizer":{"type":"BertPreTokenizerX"}})",
              "pre_tokenizer type 'BertPreTokenizerX' is not supported");
}

TEST(EncoderComponentsTest, WordPieceUnknownsAndLongWords) {
  std::string j = R"({"model":{"type":"WordPiece","unk_token":"[UNK]","max_input_chars_per_word":5,
    "continuing_subword_prefix":"##","vocab":{"[UNK]":0,"un":1,"##aff":2,"##able":3,"a":4}},
    "pre_tokenizer":{"type":"BertPreTokenizer"}})";
  auto tok = Tokenizer::fromJson(j);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  EXPECT_EQ(joinIds(tok->encode("unaff a", false)), "1 2 4");
  EXPECT_EQ(joinIds(tok->encode("unaffable", false)), "0"); // 9 characters > 5
  EXPECT_EQ(joinIds(tok->encode("unx", false)), "0");       // "##x" matches nothing
  EXPECT_EQ(joinIds(tok->encode("a,a", false)), "4 0 4");   // "," is isolated, then unknown
}

} // namespace
} // namespace kiln::rt
