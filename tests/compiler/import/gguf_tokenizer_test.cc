// convertGgufTokenizer: the tokenizer.json it writes, loaded by kiln's tokenizer, gives the ids of
// transformers' own GGUF tokenizer (tests/data/golden/gguf_tokenizer_ids.json, written by
// tools/goldens/make_gguf_tokenizer_goldens.py) for a real byte-level GGUF (SmolLM2-135M-Instruct,
// tokenizer.ggml.pre "smollm"; scripts/fetch-smollm2.sh) and a sentencepiece one
// (tests/data/gguf/stories260k-tokenizer.gguf). Errors name the metadata key.
#include "compiler/import/gguf_tokenizer.h"

#include "runtime/base/file.h"
#include "runtime/text/tokenizer.h"
#include "tests/compiler/import/gguf_test_builder.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>

namespace kiln::compiler {
namespace {

using Json = nlohmann::json;
using testing::GgufBuilder;
using testing::ggufString;
using testing::podBytes;

std::string envOr(const char *name, const std::string &fallback) {
  const char *value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// scripts/fetch-smollm2.sh's cache: $KILN_SMOLLM2_GGUF, else
// ${KILN_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/models}/smollm2/<file>.
std::string smollm2Path() {
  std::string cache = envOr(
      "KILN_MODEL_CACHE", envOr("XDG_CACHE_HOME", envOr("HOME", "") + "/.cache") + "/kiln/models");
  return envOr("KILN_SMOLLM2_GGUF", cache + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
}

bool inCi() {
  std::string ci = envOr("CI", "");
  return ci == "true" || ci == "1";
}

const Json &goldens() {
  static const Json json = [] {
    auto text = readFile(std::string(KILN_TEST_DATA_DIR) + "/golden/gguf_tokenizer_ids.json");
    return text.isOk() ? Json::parse(*text) : Json();
  }();
  return json;
}

std::string joinIds(const std::vector<int32_t> &ids) {
  std::string out;
  for (int32_t id : ids)
    out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

// With $KILN_GGUF_TOKENIZER_DUMP_DIR set, the converted files are written there, for
// make_gguf_tokenizer_goldens.py --check-json (HF tokenizers loading kiln's output).
void dumpIfAsked(const std::string &name, const GgufTokenizerFiles &files) {
  std::string dir = envOr("KILN_GGUF_TOKENIZER_DUMP_DIR", "");
  if (dir.empty())
    return;
  ASSERT_TRUE(writeFileAtomic(dir + "/" + name + ".tokenizer.json", files.tokenizerJson).isOk());
  ASSERT_TRUE(
      writeFileAtomic(dir + "/" + name + ".tokenizer_config.json", files.tokenizerConfigJson)
          .isOk());
}

// Converts `gguf`, loads the result with kiln's tokenizer and compares every golden case.
void expectGoldenIds(const std::string &name, const GgufFile &gguf, rt::Tokenizer *out = nullptr) {
  const Json &models = goldens()["models"];
  ASSERT_TRUE(models.contains(name)) << "no goldens for " << name;
  const Json &model = models[name];
  auto files = convertGgufTokenizer(gguf);
  ASSERT_TRUE(files.isOk()) << files.status().toString();
  dumpIfAsked(name, *files);
  auto tok = rt::Tokenizer::fromJson(files->tokenizerJson, files->tokenizerConfigJson);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  ASSERT_GE(model["cases"].size(), 80u);
  for (const Json &c : model["cases"]) {
    std::string text = c["text"].get<std::string>();
    EXPECT_EQ(joinIds(tok->encode(text, false)), joinIds(c["ids"].get<std::vector<int32_t>>()))
        << name << ": '" << text << "'";
    EXPECT_EQ(joinIds(tok->encode(text, true)),
              joinIds(c["ids_special"].get<std::vector<int32_t>>()))
        << name << " (add_special_tokens): '" << text << "'";
  }
  if (out != nullptr)
    *out = *tok;
}

TEST(GgufTokenizerTest, SmolLm2MatchesTransformers) {
  const std::string path = smollm2Path();
  if (!fileExists(path)) {
    if (inCi())
      FAIL() << path << " not found (run scripts/fetch-smollm2.sh; CI may not skip)";
    GTEST_SKIP() << path << " not found: run scripts/fetch-smollm2.sh or set KILN_SMOLLM2_GGUF";
  }
  auto gguf = GgufFile::open(path);
  ASSERT_TRUE(gguf.isOk()) << gguf.status().toString();
  EXPECT_EQ(goldens()["models"]["smollm2"]["metadata"]["pre"], "smollm");
  rt::Tokenizer tok;
  expectGoldenIds("smollm2", *gguf, &tok);

  auto files = convertGgufTokenizer(*gguf);
  ASSERT_TRUE(files.isOk());
  EXPECT_EQ(files->bosTokenId, 1);
  EXPECT_EQ(files->padTokenId, 2);
  EXPECT_EQ(files->eosTokenIds, std::vector<int32_t>{2});
  EXPECT_FALSE(files->addBos);
  EXPECT_EQ(tok.bosTokenId(), 1);
  EXPECT_EQ(tok.eosTokenIds(), std::vector<int32_t>{2});
  EXPECT_EQ(tok.vocabSize(), 49152);
  EXPECT_TRUE(tok.isSpecialToken(0));  // <|endoftext|>, a control token
  EXPECT_TRUE(tok.isSpecialToken(16)); // <empty_output>
  EXPECT_FALSE(tok.isSpecialToken(17));
  EXPECT_EQ(tok.chatTemplate(), *gguf->getString("tokenizer.chat_template"));
  EXPECT_FALSE(tok.chatTemplate().empty());
  // Byte-level BPE loses nothing: decoding the ids gives the text back.
  for (const Json &c : goldens()["models"]["smollm2"]["cases"])
    EXPECT_EQ(tok.decode(c["ids"].get<std::vector<int32_t>>(), false),
              c["text"].get<std::string>());
  Json config = Json::parse(files->tokenizerConfigJson);
  EXPECT_EQ(config["bos_token"], "<|im_start|>");
  EXPECT_EQ(config["eos_token"], "<|im_end|>");
  EXPECT_EQ(config["unk_token"], "<|endoftext|>");
  EXPECT_EQ(config["pad_token"], "<|im_end|>");
  EXPECT_EQ(config["add_bos_token"], false);
  EXPECT_EQ(config["model_max_length"], 8192);
}

TEST(GgufTokenizerTest, SentencepieceFixtureMatchesTransformers) {
  auto gguf = GgufFile::open(std::string(KILN_TEST_DATA_DIR) + "/gguf/stories260k-tokenizer.gguf");
  ASSERT_TRUE(gguf.isOk()) << gguf.status().toString();
  rt::Tokenizer tok;
  expectGoldenIds("stories260k", *gguf, &tok);

  auto files = convertGgufTokenizer(*gguf);
  ASSERT_TRUE(files.isOk());
  EXPECT_EQ(files->bosTokenId, 1);
  EXPECT_EQ(files->padTokenId, -1);
  EXPECT_EQ(files->eosTokenIds, std::vector<int32_t>{2});
  EXPECT_TRUE(files->addBos);
  EXPECT_EQ(tok.bosTokenId(), 1);
  EXPECT_EQ(tok.chatTemplate(), *gguf->getString("tokenizer.chat_template"));
  EXPECT_EQ(tok.encode("", true), std::vector<int32_t>{1});
  // Byte fallback and the prefix space come back out of the decoder.
  std::vector<int32_t> ids = tok.encode("Lily saw 日本", false);
  EXPECT_EQ(tok.decode(ids, false), "Lily saw 日本");
  Json config = Json::parse(files->tokenizerConfigJson);
  EXPECT_EQ(config["bos_token"], "<s>");
  EXPECT_EQ(config["eos_token"], "</s>");
  EXPECT_EQ(config["unk_token"], "<unk>");
  EXPECT_FALSE(config.contains("pad_token"));
  EXPECT_EQ(config["add_bos_token"], true);
}

// ---- Hand-made metadata ---------------------------------------------------------------------

std::string stringArray(const std::vector<std::string> &values) {
  std::string out = podBytes<uint32_t>(8) + podBytes<uint64_t>(values.size());
  for (const std::string &v : values)
    out += ggufString(v);
  return out;
}
std::string int32Array(const std::vector<int32_t> &values) {
  std::string out = podBytes<uint32_t>(5) + podBytes<uint64_t>(values.size());
  for (int32_t v : values)
    out += podBytes(v);
  return out;
}
std::string float32Array(const std::vector<float> &values) {
  std::string out = podBytes<uint32_t>(6) + podBytes<uint64_t>(values.size());
  for (float v : values)
    out += podBytes(v);
  return out;
}
GgufBuilder &kvBool(GgufBuilder &b, const std::string &key, bool value) {
  return b.kvRaw(key, 7, podBytes<uint8_t>(value ? 1 : 0));
}

// A byte-level vocabulary: the 256 byte characters, three merges, and four added tokens.
struct ByteLevelVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he"};
  ByteLevelVocab() {
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      int cp = printable ? b : next++;
      std::string s;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      tokens.push_back(s);
    }
    for (const char *t : {"Ġt", "he", "Ġthe"})
      tokens.push_back(t);
    types.assign(tokens.size(), 1);
    for (const char *t : {"<|begin|>", "<|eot|>", "<|end|>"}) {
      tokens.push_back(t);
      types.push_back(3);
    }
    tokens.push_back("<think>");
    types.push_back(4);
  }
  int32_t id(const std::string &token) const {
    return static_cast<int32_t>(std::find(tokens.begin(), tokens.end(), token) - tokens.begin());
  }
};

GgufBuilder byteLevelGguf(const ByteLevelVocab &v, const std::string &pre) {
  GgufBuilder b;
  b.kvString("general.architecture", "llama");
  b.kvString("tokenizer.ggml.model", "gpt2");
  if (!pre.empty())
    b.kvString("tokenizer.ggml.pre", pre);
  b.kvRaw("tokenizer.ggml.tokens", 9, stringArray(v.tokens));
  b.kvRaw("tokenizer.ggml.token_type", 9, int32Array(v.types));
  b.kvRaw("tokenizer.ggml.merges", 9, stringArray(v.merges));
  b.kvU32("tokenizer.ggml.bos_token_id", v.id("<|begin|>"));
  b.kvU32("tokenizer.ggml.eos_token_id", v.id("<|eot|>"));
  b.kvU32("tokenizer.ggml.eot_token_id", v.id("<|end|>"));
  b.kvU32("tokenizer.ggml.eom_token_id", v.id("<|eot|>"));
  return b;
}

Result<GgufTokenizerFiles> convertBytes(const GgufBuilder &builder) {
  std::vector<uint8_t> bytes = builder.bytes();
  KILN_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::parse(bytes, "test.gguf"));
  return convertGgufTokenizer(gguf);
}

std::string errorOf(const GgufBuilder &builder) {
  auto files = convertBytes(builder);
  return files.isOk() ? "(no error)" : files.status().toString();
}

TEST(GgufTokenizerTest, EveryKnownPreTokenizerLoadsInKiln) {
  ByteLevelVocab v;
  for (const std::string &pre : ggufPreTokenizerNames()) {
    auto files = convertBytes(byteLevelGguf(v, pre));
    ASSERT_TRUE(files.isOk()) << pre << ": " << files.status().toString();
    EXPECT_EQ(files->eosTokenIds, (std::vector<int32_t>{v.id("<|eot|>"), v.id("<|end|>")})) << pre;
    auto tok = rt::Tokenizer::fromJson(files->tokenizerJson, files->tokenizerConfigJson);
    ASSERT_TRUE(tok.isOk()) << pre << ": " << tok.status().toString();
    std::vector<int32_t> ids = tok->encode("the <think>x<|eot|>", false);
    EXPECT_EQ(ids, (std::vector<int32_t>{v.id("t"), v.id("he"), v.id("Ġ"), v.id("<think>"),
                                         v.id("x"), v.id("<|eot|>")}))
        << pre;
    EXPECT_EQ(tok->encode(" the", false), std::vector<int32_t>{v.id("Ġthe")}) << pre;
    EXPECT_TRUE(tok->isSpecialToken(v.id("<|eot|>")));
    EXPECT_FALSE(tok->isSpecialToken(v.id("<think>")));
    // Llama-3-style vocabularies add BOS when the file does not say; the others do not.
    bool llama3Style = pre == "llama-bpe" || pre == "llama3" || pre == "tekken";
    if (pre == "llama-bpe" || pre == "gpt2" || pre == "smollm" || pre == "tekken" || pre == "qwen2")
      EXPECT_EQ(files->addBos, llama3Style) << pre;
  }
  // No tokenizer.ggml.pre (files older than the key) reads as "default".
  EXPECT_TRUE(convertBytes(byteLevelGguf(v, "")).isOk());
}

TEST(GgufTokenizerTest, DigitsStayAloneOnlyWhereThePreTokenizerSaysSo) {
  ByteLevelVocab v;
  v.tokens.push_back("12");
  v.types.push_back(1);
  v.merges.push_back("1 2");
  auto encode = [&](const std::string &pre) {
    auto files = convertBytes(byteLevelGguf(v, pre));
    EXPECT_TRUE(files.isOk()) << files.status().toString();
    return rt::Tokenizer::fromJson(files->tokenizerJson)->encode("12", false);
  };
  EXPECT_EQ(encode("gpt2"), std::vector<int32_t>{v.id("12")});
  EXPECT_EQ(encode("smollm"), (std::vector<int32_t>{v.id("1"), v.id("2")}));
  EXPECT_EQ(encode("qwen2"), (std::vector<int32_t>{v.id("1"), v.id("2")}));
  EXPECT_EQ(encode("llama-bpe"), std::vector<int32_t>{v.id("12")});
}

TEST(GgufTokenizerTest, UnknownModelNamesTheKey) {
  GgufBuilder b;
  b.kvString("tokenizer.ggml.model", "rwkv");
  b.kvRaw("tokenizer.ggml.tokens", 9, stringArray({"a", "b"}));
  std::string error = errorOf(b);
  EXPECT_NE(error.find("tokenizer.ggml.model 'rwkv' is not supported; kiln reads gpt2 and llama"),
            std::string::npos)
      << error;
}

TEST(GgufTokenizerTest, UnknownPreNamesTheKeyAndTheKnownOnes) {
  std::string error = errorOf(byteLevelGguf(ByteLevelVocab(), "made-up-pre"));
  EXPECT_NE(error.find("tokenizer.ggml.pre 'made-up-pre'"), std::string::npos) << error;
  for (const char *known : {"smollm", "llama-bpe", "qwen2", "deepseek-r1-qwen", "gpt2"})
    EXPECT_NE(error.find(known), std::string::npos) << error;
}

TEST(GgufTokenizerTest, MalformedMetadataNamesTheKey) {
  EXPECT_NE(errorOf(GgufBuilder().kvString("general.architecture", "llama"))
                .find("tokenizer.ggml.model is missing"),
            std::string::npos);

  ByteLevelVocab v;
  v.merges.push_back("Ġthe nope");
  std::string error = errorOf(byteLevelGguf(v, "gpt2"));
  EXPECT_NE(error.find("tokenizer.ggml.merges[3] 'Ġthe nope'"), std::string::npos) << error;

  v = ByteLevelVocab();
  v.merges.push_back("a b c");
  error = errorOf(byteLevelGguf(v, "gpt2"));
  EXPECT_NE(error.find("tokenizer.ggml.merges[3]"), std::string::npos) << error;

  GgufBuilder b;
  b.kvString("tokenizer.ggml.model", "llama");
  b.kvRaw("tokenizer.ggml.tokens", 9, stringArray({"<unk>", "a", "b"}));
  b.kvRaw("tokenizer.ggml.scores", 9, float32Array({0, -1}));
  error = errorOf(b);
  EXPECT_NE(error.find("tokenizer.ggml.scores has 2 entries but tokenizer.ggml.tokens has 3"),
            std::string::npos)
      << error;

  b = GgufBuilder();
  b.kvString("tokenizer.ggml.model", "llama");
  b.kvRaw("tokenizer.ggml.tokens", 9, stringArray({"<unk>", "a", "b"}));
  b.kvRaw("tokenizer.ggml.scores", 9, float32Array({0, -1, -2}));
  error = errorOf(b); // add_bos_token defaults to true for sentencepiece
  EXPECT_NE(error.find("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id"),
            std::string::npos)
      << error;

  b = GgufBuilder();
  b.kvString("tokenizer.ggml.model", "llama");
  b.kvRaw("tokenizer.ggml.tokens", 9, stringArray({"ok", std::string("\xC3\x28", 2)}));
  error = errorOf(b);
  EXPECT_NE(error.find("tokenizer.ggml.tokens[1] is not valid UTF-8"), std::string::npos) << error;
}

// A sentencepiece vocabulary: merges from the scores, and add_space_prefix false keeping text as
// it is (no prefix space added, none stripped on decode).
TEST(GgufTokenizerTest, SentencepieceMergesAndPrefixSpace) {
  auto build = [](bool addSpacePrefix) {
    GgufBuilder b;
    b.kvString("general.architecture", "llama");
    b.kvString("tokenizer.ggml.model", "llama");
    b.kvRaw("tokenizer.ggml.tokens", 9,
            stringArray({"<unk>", "<s>", "</s>", "▁", "a", "b", "ab", "▁ab", "▁a"}));
    b.kvRaw("tokenizer.ggml.scores", 9, float32Array({0, 0, 0, -1, -2, -3, -4, -5, -6}));
    b.kvRaw("tokenizer.ggml.token_type", 9, int32Array({2, 3, 3, 1, 1, 1, 1, 1, 1}));
    b.kvU32("tokenizer.ggml.bos_token_id", 1);
    b.kvU32("tokenizer.ggml.eos_token_id", 2);
    b.kvU32("tokenizer.ggml.unknown_token_id", 0);
    kvBool(b, "tokenizer.ggml.add_space_prefix", addSpacePrefix);
    kvBool(b, "tokenizer.ggml.add_eos_token", true);
    return b;
  };
  auto files = convertBytes(build(true));
  ASSERT_TRUE(files.isOk()) << files.status().toString();
  Json json = Json::parse(files->tokenizerJson);
  // By the merged token's score; "▁ab"'s two splits by the longer left part first (what
  // transformers' generate_merges gives for this vocabulary).
  EXPECT_EQ(json["model"]["merges"].dump(), R"([["a","b"],["▁a","b"],["▁","ab"],["▁","a"]])");
  auto tok = rt::Tokenizer::fromJson(files->tokenizerJson, files->tokenizerConfigJson);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  EXPECT_EQ(tok->encode("ab a", true), (std::vector<int32_t>{1, 7, 8, 2}));
  EXPECT_EQ(tok->decode(tok->encode("ab a", false), false), "ab a");

  files = convertBytes(build(false));
  ASSERT_TRUE(files.isOk()) << files.status().toString();
  tok = rt::Tokenizer::fromJson(files->tokenizerJson, files->tokenizerConfigJson);
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  EXPECT_EQ(tok->encode("ab a", false), (std::vector<int32_t>{6, 8}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{7}, false), " ab");
}

} // namespace
} // namespace kiln::compiler
