// Text pairs (Tokenizer::encodePair): input ids and token type ids against HF goldens
// (tests/data/golden/tokenizer_pairs.json from tools/goldens/make_tokenizer_pair_goldens.py, and
// the text-pair cases of the tiny-bert / tiny-xlm-roberta / tiny-bart embedding goldens), the type
// id of every piece of a hand-written TemplateProcessing, composed post-processors, and the error
// values of tokenizers without a usable pair template.
#include "runtime/base/file.h"
#include "runtime/text/tokenizer.h"
#include "tests/runtime/text/tokenizer_test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kiln::rt {
namespace {

using nlohmann::json;
using testing::joinIds;

json readJson(const std::string &path) {
  auto text = readFile(path);
  return text.isOk() ? json::parse(*text) : json();
}

std::string dataDir() {
  return KILN_TEST_DATA_DIR;
}

// A golden entry's tokenizer: its directory, with "config_patch" merged into
// tokenizer_config.json when the entry has one.
Result<Tokenizer> loadGoldenTokenizer(const json &entry) {
  const std::string root =
      entry["root"].get<std::string>() == "assets" ? testing::assetsDir() : dataDir();
  const std::string dir = root + "/" + entry["dir"].get<std::string>();
  if (!entry.contains("config_patch"))
    return Tokenizer::fromDirectory(dir);
  KILN_ASSIGN_OR_RETURN(std::string tokenizerJson, readFile(dir + "/tokenizer.json"));
  KILN_ASSIGN_OR_RETURN(std::string configText, readFile(dir + "/tokenizer_config.json"));
  json config = json::parse(configText);
  config.merge_patch(entry["config_patch"]);
  std::string map;
  if (fileExists(dir + "/special_tokens_map.json")) {
    KILN_ASSIGN_OR_RETURN(map, readFile(dir + "/special_tokens_map.json"));
  }
  return Tokenizer::fromJson(tokenizerJson, config.dump(), map);
}

void expectPair(const Tokenizer &tok, const std::string &text, const std::string &textPair,
                bool addSpecialTokens, const json &ids, const json &typeIds,
                const std::string &label) {
  auto pair = tok.encodePair(text, textPair, addSpecialTokens);
  ASSERT_TRUE(pair.isOk()) << label << ": " << pair.status().toString();
  EXPECT_EQ(joinIds(pair->ids), joinIds(ids.get<std::vector<int32_t>>()))
      << label << ": '" << text << "' + '" << textPair << "'";
  EXPECT_EQ(joinIds(pair->typeIds), joinIds(typeIds.get<std::vector<int32_t>>()))
      << label << ": '" << text << "' + '" << textPair << "'";
}

TEST(TokenizerPairTest, MatchesHuggingFaceGoldens) {
  json golden = readJson(dataDir() + "/golden/tokenizer_pairs.json");
  ASSERT_TRUE(golden.contains("tokenizers")) << "missing tests/data/golden/tokenizer_pairs.json";
  EXPECT_EQ(golden["versions"]["tokenizers"].get<std::string>().rfind("0.22.", 0), 0u);
  size_t checked = 0;
  for (const json &entry : golden["tokenizers"]) {
    const std::string name = entry["name"].get<std::string>();
    if (entry["root"].get<std::string>() == "assets" && !testing::haveAssets())
      continue;
    auto tok = loadGoldenTokenizer(entry);
    ASSERT_TRUE(tok.isOk()) << name << ": " << tok.status().toString();
    ASSERT_GE(entry["cases"].size(), 5u) << name;
    for (const json &c : entry["cases"]) {
      const std::string text = c["text"].get<std::string>();
      const std::string textPair = c["text_pair"].get<std::string>();
      expectPair(*tok, text, textPair, true, c["input_ids"], c["token_type_ids"], name);
      expectPair(*tok, text, textPair, false, c["input_ids_plain"], c["token_type_ids_plain"],
                 name + " (no special tokens)");
    }
    ++checked;
  }
  // The tokenizers under tests/data (BERT, XLM-R, RoBERTa, BART, none) always run; the
  // Llama/Gemma/Mistral/Phi-3/Llama-3.2/Qwen2.5 ones need the shared assets.
  EXPECT_GE(checked, testing::haveAssets() ? 16u : 8u);
}

// The text-pair case of each embedding golden (AutoTokenizer(model_dir)(text, text_pair)).
TEST(TokenizerPairTest, MatchesEmbeddingGoldenPairs) {
  for (const char *model : {"tiny-bert", "tiny-xlm-roberta", "tiny-bart"}) {
    json golden = readJson(dataDir() + "/golden/" + model + ".embed.json");
    ASSERT_TRUE(golden.contains("cases")) << model;
    const std::string modelDir = golden["model_dir"].get<std::string>();
    ASSERT_EQ(modelDir.rfind("tests/data/", 0), 0u) << modelDir;
    auto tok = Tokenizer::fromDirectory(dataDir() + "/" + modelDir.substr(11));
    ASSERT_TRUE(tok.isOk()) << model << ": " << tok.status().toString();
    size_t pairs = 0;
    for (const json &c : golden["cases"]) {
      if (!c.contains("text_pair"))
        continue;
      expectPair(*tok, c["text"].get<std::string>(), c["text_pair"].get<std::string>(), true,
                 c["input_ids"], c["token_type_ids"], model);
      ++pairs;
    }
    EXPECT_GE(pairs, 1u) << model;
  }
}

// Vocab [UNK]=0 <s>=1 </s>=2 [CLS]=3 [SEP]=4 a=5 b=6 c=7 ab=8: "ab c" -> 8 7, "ca" -> 7 5.
std::string tinyTokenizerJson(const std::string &postProcessor) {
  static const std::pair<int, const char *> kSpecials[] = {
      {1, "<s>"}, {2, "</s>"}, {3, "[CLS]"}, {4, "[SEP]"}};
  std::string added;
  for (auto [id, content] : kSpecials)
    added += std::string(added.empty() ? "" : ",") + R"({"id":)" + std::to_string(id) +
             R"(,"content":")" + content +
             R"(","special":true,"normalized":false,"single_word":false,"lstrip":false,)"
             R"("rstrip":false})";
  return R"({"version":"1.0","added_tokens":[)" + added +
         R"(],"normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":)" +
         postProcessor +
         R"(,"decoder":null,"model":{"type":"BPE","unk_token":"[UNK]","vocab":)"
         R"({"[UNK]":0,"<s>":1,"</s>":2,"[CLS]":3,"[SEP]":4,"a":5,"b":6,"c":7,)"
         R"("ab":8},"merges":["a b"]}})";
}

struct PairExpectation {
  std::string ids, typeIds, idsPlain, typeIdsPlain;
};

void expectTinyPair(const std::string &postProcessor, const PairExpectation &expected) {
  auto tok = Tokenizer::fromJson(tinyTokenizerJson(postProcessor));
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  auto pair = tok->encodePair("ab c", "ca", true);
  ASSERT_TRUE(pair.isOk()) << pair.status().toString();
  EXPECT_EQ(joinIds(pair->ids), expected.ids);
  EXPECT_EQ(joinIds(pair->typeIds), expected.typeIds);
  auto plain = tok->encodePair("ab c", "ca", false);
  ASSERT_TRUE(plain.isOk()) << plain.status().toString();
  EXPECT_EQ(joinIds(plain->ids), expected.idsPlain);
  EXPECT_EQ(joinIds(plain->typeIds), expected.typeIdsPlain);
}

// Expected values in these tests: tokenizers.Tokenizer.from_str(tinyTokenizerJson(pp)).encode(
// "ab c", "ca", add_special_tokens=True / False).ids / .type_ids, the same with tokenizers 0.22.2
// and 0.23.3.
TEST(TokenizerPairTest, EveryTemplatePieceCarriesItsTypeId) {
  // [CLS]:2 $A:3 sep2:4 $B:5 </s>:6, where sep2 is two ids ([SEP] </s>).
  expectTinyPair(
      R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},
        {"Sequence":{"id":"A","type_id":0}}],
        "pair":[{"SpecialToken":{"id":"[CLS]","type_id":2}},{"Sequence":{"id":"A","type_id":3}},
          {"SpecialToken":{"id":"sep2","type_id":4}},{"Sequence":{"id":"B","type_id":5}},
          {"SpecialToken":{"id":"</s>","type_id":6}}],
        "special_tokens":{"[CLS]":{"id":"[CLS]","ids":[3],"tokens":["[CLS]"]},
          "sep2":{"id":"sep2","ids":[4,2],"tokens":["[SEP]","</s>"]},
          "</s>":{"id":"</s>","ids":[2],"tokens":["</s>"]}}})",
      {"3 8 7 4 2 7 5 2", "2 3 3 4 4 5 5 6", "8 7 7 5", "3 3 5 5"});
  // $B:1 </s>:0 $A:0: a template may put the second text first.
  expectTinyPair(
      R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":0}}],
        "pair":[{"Sequence":{"id":"B","type_id":1}},{"SpecialToken":{"id":"</s>","type_id":0}},
          {"Sequence":{"id":"A","type_id":0}}],
        "special_tokens":{"</s>":{"id":"</s>","ids":[2],"tokens":["</s>"]}}})",
      {"7 5 2 8 7", "1 1 0 0 0", "7 5 8 7", "1 1 0 0"});
}

TEST(TokenizerPairTest, ProcessorsComposeAsTokenizersDoes) {
  const std::string bert = R"({"type":"BertProcessing","sep":["[SEP]",4],"cls":["[CLS]",3]})";
  const std::string roberta = R"({"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",1],)"
                              R"("trim_offsets":true,"add_prefix_space":false})";
  const std::string byteLevel = R"({"type":"ByteLevel","add_prefix_space":false,)"
                                R"("trim_offsets":false,"use_regex":true})";
  auto sequence = [](const std::string &first, const std::string &second) {
    return R"({"type":"Sequence","processors":[)" + first + "," + second + "]}";
  };
  // BertProcessing: [CLS] A [SEP] (0) B [SEP] (1); without special tokens A (0) B (1).
  expectTinyPair(bert, {"3 8 7 4 7 5 4", "0 0 0 0 1 1 1", "8 7 7 5", "0 0 1 1"});
  // RobertaProcessing: <s> A </s> </s> B </s>, every type id 0 (with or without special tokens).
  expectTinyPair(roberta, {"1 8 7 2 2 7 5 2", "0 0 0 0 0 0 0 0", "8 7 7 5", "0 0 0 0"});
  // ByteLevel adds nothing.
  expectTinyPair(sequence(byteLevel, bert),
                 {"3 8 7 4 7 5 4", "0 0 0 0 1 1 1", "8 7 7 5", "0 0 1 1"});
  // Each processor wraps the encodings the previous one made; Roberta zeroes Bert's type ids.
  expectTinyPair(sequence(bert, roberta),
                 {"1 3 8 7 4 2 2 7 5 4 2", "0 0 0 0 0 0 0 0 0 0 0", "8 7 7 5", "0 0 0 0"});
  // No post-processor: A (0) then B (1), with or without special tokens.
  expectTinyPair("null", {"8 7 7 5", "0 0 1 1", "8 7 7 5", "0 0 1 1"});
}

// update_post_processor's pair template "bos:0 $A:0 eos:0 bos:1 $B:1 eos:1" on a hand-written
// Llama-class tokenizer. Expected: transformers 4.57.1 LlamaTokenizerFast(tokenizer_object=
// Tokenizer.from_str(tinyTokenizerJson(single)), add_bos_token=True, add_eos_token=True,
// bos_token="<s>", eos_token="</s>")(["ab c"], ["ca"], add_special_tokens=True / False,
// return_token_type_ids=True). The Llama-2 cases of tokenizer_pairs.json check real files.
TEST(TokenizerPairTest, LlamaClassConfigRebuildsThePairTemplate) {
  const std::string single =
      R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":0}}],)"
      R"("pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],)"
      R"("special_tokens":{}})";
  auto tok = Tokenizer::fromJson(tinyTokenizerJson(single),
                                 R"({"tokenizer_class":"LlamaTokenizerFast","add_bos_token":true,
                                     "add_eos_token":true,"bos_token":"<s>","eos_token":"</s>"})");
  ASSERT_TRUE(tok.isOk()) << tok.status().toString();
  EXPECT_EQ(joinIds(tok->encode("ab c", true)), "1 8 7 2");
  auto pair = tok->encodePair("ab c", "ca", true);
  ASSERT_TRUE(pair.isOk()) << pair.status().toString();
  EXPECT_EQ(joinIds(pair->ids), "1 8 7 2 1 7 5 2");
  EXPECT_EQ(joinIds(pair->typeIds), "0 0 0 0 1 1 1 1");
  auto plain = tok->encodePair("ab c", "ca", false);
  ASSERT_TRUE(plain.isOk());
  EXPECT_EQ(joinIds(plain->ids), "8 7 7 5");
  EXPECT_EQ(joinIds(plain->typeIds), "0 0 1 1");
}

// A tokenizer.json without a usable pair template still loads and encodes single texts;
// encodePair returns an InvalidArgument error naming post_processor.pair.
TEST(TokenizerPairTest, UnusablePairTemplateIsAnErrorOnlyForPairs) {
  const std::string specials = R"("special_tokens":{"[CLS]":{"id":"[CLS]","ids":[3]},)"
                               R"("far":{"id":"far","ids":[99]}})";
  const std::string single = R"("single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},)"
                             R"({"Sequence":{"id":"A","type_id":0}}])";
  auto expectPairError = [&](const std::string &pair, const std::string &message) {
    std::string pp = R"({"type":"TemplateProcessing",)" + single + pair + "," + specials + "}";
    auto tok = Tokenizer::fromJson(tinyTokenizerJson(pp));
    ASSERT_TRUE(tok.isOk()) << message << ": " << tok.status().toString();
    EXPECT_EQ(joinIds(tok->encode("ab c", true)), "3 8 7");
    for (bool addSpecialTokens : {true, false}) {
      auto result = tok->encodePair("ab c", "ca", addSpecialTokens);
      ASSERT_FALSE(result.isOk()) << message;
      EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(result.status().message().find("post_processor.pair"), std::string::npos)
          << result.status().message();
      EXPECT_NE(result.status().message().find(message), std::string::npos)
          << result.status().message();
    }
  };
  expectPairError("", "post_processor.pair is missing");
  // tokenizers' template builder rejects these; loaded from JSON they would drop a text.
  expectPairError(R"(,"pair":[])", "post_processor.pair must use both sequences");
  expectPairError(R"(,"pair":[{"Sequence":{"id":"A","type_id":0}}])", "must use both sequences");
  expectPairError(R"(,"pair":{"A":0})", "post_processor.pair must be an array");
  expectPairError(R"(,"pair":[{"Sequence":{"id":"A"}},{"Sequence":{"id":"C"}}])",
                  R"(post_processor.pair: a Sequence piece's id must be "A" or "B")");
  expectPairError(R"(,"pair":[{"SpecialToken":{"id":"[SEP]"}},{"Sequence":{"id":"A"}},)"
                  R"({"Sequence":{"id":"B"}}])",
                  "post_processor.pair: special token '[SEP]' is not in special_tokens");
  expectPairError(R"(,"pair":[{"Sequence":{"id":"A","type_id":-1}},{"Sequence":{"id":"B"}}])",
                  "type_id -1 is not an integer");
  // An id past the vocabulary in the pair template only.
  expectPairError(R"(,"pair":[{"Sequence":{"id":"A"}},{"SpecialToken":{"id":"far"}},)"
                  R"({"Sequence":{"id":"B"}}])",
                  "post_processor.pair adds token id 99, outside the vocabulary (9 ids)");
}

} // namespace
} // namespace kiln::rt
