#include "compiler/import/gguf_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace kiln::compiler {
namespace {

using Json = nlohmann::ordered_json;

// llama.cpp's llama_token_type numbering (tokenizer.ggml.token_type).
constexpr int64_t kUserDefinedToken = 4, kControlToken = 3;
constexpr std::string_view kMetaspace = "\xE2\x96\x81"; // U+2581, sentencepiece's space

// ---- Pre-tokenizers of "gpt2" vocabularies, by tokenizer.ggml.pre --------------------------

enum class PreKind {
  kByteLevel,       // GPT-2's ByteLevel with its own regex
  kDigitsByteLevel, // every digit alone, then ByteLevel (SmolLM, StarCoder)
  kSplit,           // Split(regex, Isolated), then ByteLevel without its regex
};

// The regexes of the models' own tokenizer.json files (the ones transformers' GGUF loader and
// llama.cpp's llama-vocab.cpp use for these names).
constexpr const char *kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char *kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char *kQwen35Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char *kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char *kGpt4oSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizerRule {
  const char *name;
  PreKind kind;
  const char *splitRegex = nullptr;
  // Llama-3-style vocabularies: a piece that is itself a token is not merged (their
  // tokenizer.json says ignore_merges, and llama.cpp sets it for these names), and BOS is added
  // when the file does not say (llama.cpp's default for them; their tokenizer.json's
  // post-processor adds it).
  bool llama3Style = false;
};

constexpr PreTokenizerRule kPreTokenizers[] = {
    {"default", PreKind::kByteLevel},
    {"gpt2", PreKind::kByteLevel},
    {"gpt-2", PreKind::kByteLevel},
    {"phi-2", PreKind::kByteLevel},
    {"mpt", PreKind::kByteLevel},
    {"olmo", PreKind::kByteLevel},
    {"smollm", PreKind::kDigitsByteLevel},
    {"starcoder", PreKind::kDigitsByteLevel},
    {"refact", PreKind::kDigitsByteLevel},
    {"codeshell", PreKind::kDigitsByteLevel},
    {"command-r", PreKind::kDigitsByteLevel},
    {"llama3", PreKind::kSplit, kLlama3Split, true},
    {"llama-v3", PreKind::kSplit, kLlama3Split, true},
    {"llama-bpe", PreKind::kSplit, kLlama3Split, true},
    {"falcon3", PreKind::kSplit, kLlama3Split, true},
    {"falcon-h1", PreKind::kSplit, kLlama3Split, true},
    {"pixtral", PreKind::kSplit, kLlama3Split, true},
    {"midm-2.0", PreKind::kSplit, kLlama3Split, true},
    {"lfm2", PreKind::kSplit, kLlama3Split, true},
    {"jina-v5-nano", PreKind::kSplit, kLlama3Split, true},
    {"dbrx", PreKind::kSplit, kLlama3Split},
    {"smaug-bpe", PreKind::kSplit, kLlama3Split},
    {"qwen2", PreKind::kSplit, kQwen2Split},
    {"deepseek-r1-qwen", PreKind::kSplit, kQwen2Split},
    {"kormo", PreKind::kSplit, kQwen2Split},
    {"f2llmv2", PreKind::kSplit, kQwen2Split},
    {"megrez", PreKind::kSplit, kQwen2Split},
    {"qwen35", PreKind::kSplit, kQwen35Split},
    {"tekken", PreKind::kSplit, kTekkenSplit, true},
    {"gpt-4o", PreKind::kSplit, kGpt4oSplit},
    {"llama4", PreKind::kSplit, kGpt4oSplit},
    {"kanana2", PreKind::kSplit, kGpt4oSplit},
    {"minimax-m2", PreKind::kSplit, kGpt4oSplit},
};

Result<const PreTokenizerRule *> findPreTokenizer(const std::string &pre) {
  for (const PreTokenizerRule &rule : kPreTokenizers)
    if (pre == rule.name)
      return &rule;
  std::string known;
  for (const PreTokenizerRule &rule : kPreTokenizers)
    known += std::string(known.empty() ? "" : ", ") + rule.name;
  return unimplemented("tokenizer.ggml.pre '" + pre +
                       "' is not a pre-tokenizer kiln knows for a gpt2 (byte-level BPE) "
                       "tokenizer; known: " +
                       known);
}

// ---- UTF-8 ------------------------------------------------------------------------------

// How many continuation bytes follow a UTF-8 lead byte; -1 for a byte no valid sequence starts
// with (a continuation byte, an overlong 2-byte lead, or a lead past U+10FFFF).
int continuationBytes(uint8_t lead) {
  if (lead < 0x80)
    return 0;
  if (lead < 0xC2)
    return -1;
  if (lead < 0xE0)
    return 1;
  if (lead < 0xF0)
    return 2;
  return lead < 0xF5 ? 3 : -1;
}

// Decodes the code point at s[pos] and advances pos; -1 (and one byte) for invalid UTF-8:
// overlong forms, surrogates and values past U+10FFFF included.
int32_t nextCodePoint(std::string_view s, size_t &pos) {
  auto lead = static_cast<uint8_t>(s[pos]);
  int extra = continuationBytes(lead);
  if (extra < 0 || pos + extra >= s.size()) {
    ++pos;
    return -1;
  }
  int32_t cp = extra == 0 ? lead : lead & (0x3F >> extra);
  for (int i = 1; i <= extra; ++i) {
    auto b = static_cast<uint8_t>(s[pos + i]);
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return -1;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr int32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  pos += static_cast<size_t>(extra) + 1;
  if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
    return -1;
  return cp;
}

bool isValidUtf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();)
    if (nextCodePoint(s, pos) < 0)
      return false;
  return true;
}

void appendUtf8(int32_t cp, std::string &out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's byte-to-character table: printable Latin-1 bytes stand for themselves, the other
// bytes for U+0100 upwards in byte order.
const std::array<int32_t, 256> &byteLevelChars() {
  static const std::array<int32_t, 256> table = [] {
    std::array<int32_t, 256> t{};
    int32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

// True when every character of `token` is one of the 256 byte-level characters.
bool isByteLevelSpelled(std::string_view token) {
  static const std::unordered_set<int32_t> alphabet(byteLevelChars().begin(),
                                                    byteLevelChars().end());
  for (size_t pos = 0; pos < token.size();)
    if (!alphabet.count(nextCodePoint(token, pos)))
      return false;
  return true;
}

std::string byteLevelSpelling(std::string_view text) {
  std::string out;
  for (char c : text)
    appendUtf8(byteLevelChars()[static_cast<uint8_t>(c)], out);
  return out;
}

// Byte offsets of the code point boundaries inside `token` (excluding 0 and size).
std::vector<size_t> innerBoundaries(std::string_view token) {
  std::vector<size_t> cuts;
  for (size_t pos = 0; pos < token.size();) {
    nextCodePoint(token, pos);
    if (pos < token.size())
      cuts.push_back(pos);
  }
  return cuts;
}

size_t codePointCount(std::string_view s) {
  return innerBoundaries(s).size() + (s.empty() ? 0 : 1);
}

// ---- JSON text ------------------------------------------------------------------------------

void appendJsonString(std::string_view s, std::string &out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : s) {
    auto u = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      out += "\\u00";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// ---- Reading the metadata -------------------------------------------------------------------

std::string typeName(const GgufValue &v) {
  return v.isArray() ? std::string("array of ") + ggufValueTypeName(v.elementType)
                     : ggufValueTypeName(v.type);
}

enum class ArrayKind { kStrings, kIntegers, kFloats };

bool elementsAre(GgufValueType type, ArrayKind kind) {
  bool isFloat = type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
  switch (kind) {
  case ArrayKind::kStrings:
    return type == GgufValueType::kString;
  case ArrayKind::kFloats:
    return isFloat;
  case ArrayKind::kIntegers:
    break;
  }
  return !isFloat && type != GgufValueType::kString && type != GgufValueType::kBool;
}

// The array at `key` (nullptr when absent and not required), checked for its element kind and,
// when `size` is given, its length.
Result<const GgufValue *> findArray(const GgufFile &gguf, const std::string &key, ArrayKind kind,
                                    bool required, size_t size = SIZE_MAX) {
  const GgufValue *v = gguf.find(key);
  if (v == nullptr) {
    if (required)
      return invalidArgument(key + " is missing");
    return static_cast<const GgufValue *>(nullptr);
  }
  if (!v->isArray() || !elementsAre(v->elementType, kind)) {
    const char *want = kind == ArrayKind::kStrings  ? "strings"
                       : kind == ArrayKind::kFloats ? "floats"
                                                    : "integers";
    return invalidArgument(key + " must be an array of " + want + ", got " + typeName(*v));
  }
  if (size != SIZE_MAX && v->arraySize() != size)
    return invalidArgument(key + " has " + std::to_string(v->arraySize()) +
                           " entries but tokenizer.ggml.tokens has " + std::to_string(size));
  return v;
}

// A special token id; -1 when absent or outside the vocabulary (llama.cpp ignores those too).
Result<int32_t> findTokenId(const GgufFile &gguf, const std::string &key, size_t vocabSize) {
  const GgufValue *v = gguf.find(key);
  if (v == nullptr)
    return -1;
  if (!v->isInteger() || v->type == GgufValueType::kBool)
    return invalidArgument(key + " must be an integer, got " + typeName(*v));
  if (v->intValue < 0 || static_cast<uint64_t>(v->intValue) >= vocabSize)
    return -1;
  return static_cast<int32_t>(v->intValue);
}

struct SpecialIds {
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
};

// What the tokenizer.ggml.* keys say, checked. The vectors point into the GgufFile.
struct GgufVocab {
  std::string model;
  std::string architecture;
  const PreTokenizerRule *pre = nullptr; // gpt2 only
  const std::vector<std::string> *tokens = nullptr;
  const std::vector<double> *scores = nullptr;      // null when absent
  const std::vector<int64_t> *types = nullptr;      // null when absent
  const std::vector<std::string> *merges = nullptr; // null when absent
  SpecialIds ids;
  bool addBos = false, addEos = false, addSpacePrefix = true;
  bool byteLevel() const { return model == "gpt2"; }
};

Status readSpecialIds(const GgufFile &gguf, size_t n, SpecialIds &ids) {
  const std::string k = "tokenizer.ggml.";
  KILN_ASSIGN_OR_RETURN(ids.bos, findTokenId(gguf, k + "bos_token_id", n));
  KILN_ASSIGN_OR_RETURN(ids.eos, findTokenId(gguf, k + "eos_token_id", n));
  KILN_ASSIGN_OR_RETURN(ids.unk, findTokenId(gguf, k + "unknown_token_id", n));
  KILN_ASSIGN_OR_RETURN(ids.pad, findTokenId(gguf, k + "padding_token_id", n));
  KILN_ASSIGN_OR_RETURN(ids.eot, findTokenId(gguf, k + "eot_token_id", n));
  KILN_ASSIGN_OR_RETURN(ids.eom, findTokenId(gguf, k + "eom_token_id", n));
  return okStatus();
}

Status readTokenArrays(const GgufFile &gguf, GgufVocab &v) {
  KILN_ASSIGN_OR_RETURN(const GgufValue *tokens,
                        findArray(gguf, "tokenizer.ggml.tokens", ArrayKind::kStrings, true));
  v.tokens = &tokens->strings;
  const size_t n = v.tokens->size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX))
    return invalidArgument("tokenizer.ggml.tokens has " + std::to_string(n) + " entries");
  for (size_t i = 0; i < n; ++i)
    if (!isValidUtf8((*v.tokens)[i]))
      return invalidArgument("tokenizer.ggml.tokens[" + std::to_string(i) + "] is not valid UTF-8");
  KILN_ASSIGN_OR_RETURN(const GgufValue *scores,
                        findArray(gguf, "tokenizer.ggml.scores", ArrayKind::kFloats, false, n));
  KILN_ASSIGN_OR_RETURN(const GgufValue *types, findArray(gguf, "tokenizer.ggml.token_type",
                                                          ArrayKind::kIntegers, false, n));
  KILN_ASSIGN_OR_RETURN(const GgufValue *merges,
                        findArray(gguf, "tokenizer.ggml.merges", ArrayKind::kStrings, false));
  v.scores = scores ? &scores->floats : nullptr;
  v.types = types ? &types->ints : nullptr;
  v.merges = merges ? &merges->strings : nullptr;
  return readSpecialIds(gguf, n, v.ids);
}

Result<GgufVocab> readGgufVocab(const GgufFile &gguf) {
  GgufVocab v;
  if (gguf.find("tokenizer.ggml.model") == nullptr)
    return invalidArgument("tokenizer.ggml.model is missing: the GGUF file has no tokenizer");
  KILN_ASSIGN_OR_RETURN(v.model, gguf.getString("tokenizer.ggml.model"));
  if (v.model != "gpt2" && v.model != "llama")
    return unimplemented("tokenizer.ggml.model '" + v.model +
                         "' is not supported; kiln reads gpt2 and llama");
  v.architecture = gguf.getStringOr("general.architecture", "");
  if (v.model == "llama" && v.architecture.rfind("gemma", 0) == 0)
    return unimplemented("general.architecture '" + v.architecture +
                         "' with tokenizer.ggml.model 'llama' is not supported: Gemma's "
                         "sentencepiece vocabulary is stored differently");
  KILN_RETURN_IF_ERROR(readTokenArrays(gguf, v));
  if (v.byteLevel()) {
    KILN_ASSIGN_OR_RETURN(v.pre,
                          findPreTokenizer(gguf.getStringOr("tokenizer.ggml.pre", "default")));
    if (v.merges == nullptr)
      return invalidArgument(
          "tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its merges)");
  } else if (v.merges == nullptr && v.scores == nullptr) {
    return invalidArgument("tokenizer.ggml.scores is missing (a llama tokenizer without "
                           "tokenizer.ggml.merges needs the scores to derive them)");
  }
  // llama.cpp adds BOS to sentencepiece and Llama-3-style vocabularies unless the file says not.
  bool bosByDefault = !v.byteLevel() || v.pre->llama3Style;
  v.addBos = gguf.getBoolOr("tokenizer.ggml.add_bos_token", bosByDefault);
  v.addEos = gguf.getBoolOr("tokenizer.ggml.add_eos_token", false);
  v.addSpacePrefix = gguf.getBoolOr("tokenizer.ggml.add_space_prefix", true);
  return v;
}

// ---- Vocabulary and merges ------------------------------------------------------------------

// tokenizer.json's vocabulary: each id's spelling, and for each spelling its last id (a JSON
// object keeps one id per key; transformers builds it as {token: index}, so the last wins).
// `ids` views the strings of `spelled`: a Vocab may be moved (the strings stay put) but not copied.
struct Vocab {
  Vocab() = default;
  Vocab(Vocab &&) = default;
  Vocab(const Vocab &) = delete;
  std::vector<std::string> spelled;
  std::unordered_map<std::string_view, int32_t> ids;
  int32_t idOf(std::string_view s) const {
    auto it = ids.find(s);
    return it == ids.end() ? -1 : it->second;
  }
};

// Byte-level vocabularies are stored in GPT-2's byte alphabet, except added tokens that some
// converters store as plain text: those are respelled, as transformers does.
Vocab buildVocab(const GgufVocab &v) {
  Vocab vocab;
  const auto &tokens = *v.tokens;
  vocab.spelled.reserve(tokens.size());
  for (const std::string &t : tokens)
    vocab.spelled.push_back(!v.byteLevel() || isByteLevelSpelled(t) ? t : byteLevelSpelling(t));
  vocab.ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    vocab.ids[vocab.spelled[i]] = static_cast<int32_t>(i);
  return vocab;
}

using Merge = std::pair<int32_t, int32_t>; // left and right token ids

Result<std::vector<Merge>> mergesFromFile(const std::vector<std::string> &lines,
                                          const Vocab &vocab) {
  std::vector<Merge> merges;
  merges.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string &line = lines[i];
    auto error = [&](const char *what) {
      return invalidArgument("tokenizer.ggml.merges[" + std::to_string(i) + "] '" + line + "' " +
                             what);
    };
    size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
      return error("is not a pair 'a b'");
    std::string_view a(line.data(), sp), b(line.data() + sp + 1, line.size() - sp - 1);
    int32_t left = vocab.idOf(a), right = vocab.idOf(b);
    if (left < 0 || right < 0 || vocab.idOf(std::string(a) + std::string(b)) < 0)
      return error("uses a token that is not in tokenizer.ggml.tokens");
    merges.emplace_back(left, right);
  }
  return merges;
}

// The merges a sentencepiece vocabulary implies, as transformers' generate_merges derives them:
// every split of every token into two tokens, ranked by the token's score (highest first), then
// by the longer left part, then the longer right part; ties keep vocabulary order (tokens in
// first-appearance order, a token's splits by the ids of their parts).
std::vector<Merge> mergesFromScores(const GgufVocab &v, const Vocab &vocab) {
  struct Candidate {
    Merge merge;
    double score;
    size_t leftChars, rightChars;
  };
  std::vector<Candidate> all, local;
  std::unordered_set<std::string_view> seen;
  const auto &tokens = *v.tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string_view token = vocab.spelled[i];
    if (!seen.insert(token).second)
      continue;
    double score = (*v.scores)[vocab.idOf(token)]; // a repeated token's last score
    local.clear();
    size_t chars = codePointCount(token);
    size_t leftChars = 0;
    for (size_t cut : innerBoundaries(token)) {
      ++leftChars;
      int32_t left = vocab.idOf(token.substr(0, cut)), right = vocab.idOf(token.substr(cut));
      if (left >= 0 && right >= 0)
        local.push_back({{left, right}, score, leftChars, chars - leftChars});
    }
    std::sort(local.begin(), local.end(),
              [](const Candidate &a, const Candidate &b) { return a.merge < b.merge; });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate &a, const Candidate &b) {
    if (a.score != b.score)
      return a.score > b.score;
    if (a.leftChars != b.leftChars)
      return a.leftChars > b.leftChars;
    return a.rightChars > b.rightChars;
  });
  std::vector<Merge> merges;
  merges.reserve(all.size());
  for (const Candidate &c : all)
    merges.push_back(c.merge);
  return merges;
}

std::string modelJson(const GgufVocab &v, const Vocab &vocab, const std::vector<Merge> &merges) {
  std::string out;
  out.reserve(vocab.spelled.size() * 24 + merges.size() * 24);
  if (v.byteLevel()) {
    out += R"({"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":"",)"
           R"("end_of_word_suffix":"","fuse_unk":false,"byte_fallback":false,"ignore_merges":)";
    out += v.pre->llama3Style ? "true" : "false";
  } else {
    out +=
        R"({"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,)"
        R"("end_of_word_suffix":null,"fuse_unk":true,"byte_fallback":true,"ignore_merges":false)";
  }
  out += R"(,"vocab":{)";
  bool first = true;
  for (size_t id = 0; id < vocab.spelled.size(); ++id) {
    if (vocab.idOf(vocab.spelled[id]) != static_cast<int32_t>(id))
      continue; // a later id spells the same token
    out += first ? "" : ",";
    first = false;
    appendJsonString(vocab.spelled[id], out);
    out += ":" + std::to_string(id);
  }
  out += R"(},"merges":[)";
  for (size_t i = 0; i < merges.size(); ++i) {
    out += i == 0 ? "[" : ",[";
    appendJsonString(vocab.spelled[merges[i].first], out);
    out += ",";
    appendJsonString(vocab.spelled[merges[i].second], out);
    out += "]";
  }
  out += "]}";
  return out;
}

// ---- Added tokens, normalizer, pre-tokenizer, post-processor, decoder ----------------------

// Control tokens (special), user-defined tokens (not special), and bos/eos/unk/pad (special), by
// id. In a byte-level vocabulary a token outside the byte alphabet is left out: it cannot be
// matched in text as its vocabulary spelling, and transformers leaves it out too.
Json addedTokensJson(const GgufVocab &v, const Vocab &vocab) {
  std::map<int32_t, bool> added; // id -> special
  auto add = [&](int32_t index, bool special) {
    const std::string &token = (*v.tokens)[index];
    if (v.byteLevel() && !isByteLevelSpelled(token))
      return;
    int32_t id = vocab.idOf(token);
    added[id] = added[id] || special;
  };
  const size_t n = v.tokens->size();
  for (size_t i = 0; v.types != nullptr && i < n; ++i) {
    if ((*v.types)[i] == kControlToken)
      add(static_cast<int32_t>(i), true);
    else if ((*v.types)[i] == kUserDefinedToken)
      add(static_cast<int32_t>(i), false);
  }
  for (int32_t id : {v.ids.bos, v.ids.eos, v.ids.unk, v.ids.pad})
    if (id >= 0)
      add(id, true);
  Json out = Json::array();
  for (auto [id, special] : added)
    out.push_back({{"id", id},
                   {"content", vocab.spelled[id]},
                   {"single_word", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"normalized", false},
                   {"special", special}});
  return out;
}

Json byteLevelJson(bool useRegex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", useRegex}};
}

Json preTokenizerJson(const GgufVocab &v) {
  if (!v.byteLevel()) {
    if (v.architecture == "phi3")
      return nullptr; // Phi-3 prepends its space in the normalizer
    return {{"type", "Metaspace"},
            {"replacement", std::string(kMetaspace)},
            {"prepend_scheme", v.addSpacePrefix ? "first" : "never"},
            {"split", false}};
  }
  switch (v.pre->kind) {
  case PreKind::kByteLevel:
    return byteLevelJson(true);
  case PreKind::kDigitsByteLevel:
    return {{"type", "Sequence"},
            {"pretokenizers", Json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                           byteLevelJson(true)})}};
  case PreKind::kSplit:
    break;
  }
  return {{"type", "Sequence"},
          {"pretokenizers", Json::array({{{"type", "Split"},
                                          {"pattern", {{"Regex", v.pre->splitRegex}}},
                                          {"behavior", "Isolated"},
                                          {"invert", false}},
                                         byteLevelJson(false)})}};
}

// Phi-3's tokenizer.json writes its prefix space and spaces as a normalizer (transformers'
// GGUF loader rebuilds it so by architecture); no other supported vocabulary has a normalizer.
Json normalizerJson(const GgufVocab &v) {
  if (v.byteLevel() || v.architecture != "phi3")
    return nullptr;
  return {{"type", "Sequence"},
          {"normalizers", Json::array({{{"type", "Prepend"}, {"prepend", std::string(kMetaspace)}},
                                       {{"type", "Replace"},
                                        {"pattern", {{"String", " "}}},
                                        {"content", std::string(kMetaspace)}}})}};
}

Json decoderJson(const GgufVocab &v) {
  if (v.byteLevel())
    return {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", true},
            {"use_regex", true}};
  Json steps = Json::array();
  steps.push_back(
      {{"type", "Replace"}, {"pattern", {{"String", std::string(kMetaspace)}}}, {"content", " "}});
  steps.push_back({{"type", "ByteFallback"}});
  steps.push_back({{"type", "Fuse"}});
  if (v.addSpacePrefix || v.architecture == "phi3")
    steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", steps}};
}

// TemplateProcessing as transformers' update_post_processor writes it: [bos] $A [eos] for one
// sequence, [bos] $A [eos] [bos] $B [eos] for a pair.
Json postProcessorJson(const GgufVocab &v, const Vocab &vocab) {
  auto special = [&](int32_t id, int typeId) {
    return Json{{"SpecialToken", {{"id", vocab.spelled[id]}, {"type_id", typeId}}}};
  };
  auto sequence = [](const char *name, int typeId) {
    return Json{{"Sequence", {{"id", name}, {"type_id", typeId}}}};
  };
  Json single = Json::array(), pair = Json::array(), specials = Json::object();
  for (int typeId : {0, 1}) {
    Json &out = typeId == 0 ? single : pair;
    if (typeId == 1)
      out = single;
    if (v.addBos)
      out.push_back(special(v.ids.bos, typeId));
    out.push_back(sequence(typeId == 0 ? "A" : "B", typeId));
    if (v.addEos)
      out.push_back(special(v.ids.eos, typeId));
  }
  for (auto [on, id] : {std::pair{v.addBos, v.ids.bos}, std::pair{v.addEos, v.ids.eos}})
    if (on)
      specials[vocab.spelled[id]] = {{"id", vocab.spelled[id]},
                                     {"ids", Json::array({id})},
                                     {"tokens", Json::array({vocab.spelled[id]})}};
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

std::string tokenizerJson(const GgufVocab &v, const Vocab &vocab,
                          const std::vector<Merge> &merges) {
  Json head = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", addedTokensJson(v, vocab)},
               {"normalizer", normalizerJson(v)},
               {"pre_tokenizer", preTokenizerJson(v)},
               {"post_processor", postProcessorJson(v, vocab)},
               {"decoder", decoderJson(v)}};
  std::string out = head.dump();
  out.pop_back(); // the closing brace: the model follows
  out += R"(,"model":)";
  out += modelJson(v, vocab, merges);
  out += "}";
  return out;
}

std::string tokenizerConfigJson(const GgufFile &gguf, const GgufVocab &v, const Vocab &vocab) {
  // PreTrainedTokenizerFast: transformers and kiln take tokenizer.json as written (a Llama class
  // would make transformers rebuild its normalizer and pre-tokenizer).
  Json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  for (auto [name, id] : {std::pair{"bos_token", v.ids.bos}, std::pair{"eos_token", v.ids.eos},
                          std::pair{"unk_token", v.ids.unk}, std::pair{"pad_token", v.ids.pad}})
    if (id >= 0)
      config[name] = vocab.spelled[id];
  config["add_bos_token"] = v.addBos;
  config["add_eos_token"] = v.addEos;
  config["clean_up_tokenization_spaces"] = false;
  int64_t context = gguf.getIntOr(v.architecture + ".context_length", 0);
  if (!v.architecture.empty() && context > 0)
    config["model_max_length"] = context;
  if (const GgufValue *t = gguf.find("tokenizer.chat_template");
      t != nullptr && t->type == GgufValueType::kString)
    config["chat_template"] = t->stringValue;
  return config.dump(2, ' ', false, Json::error_handler_t::replace);
}

} // namespace

std::vector<std::string> ggufPreTokenizerNames() {
  std::vector<std::string> names;
  for (const PreTokenizerRule &rule : kPreTokenizers)
    names.emplace_back(rule.name);
  return names;
}

Result<GgufTokenizerFiles> convertGgufTokenizer(const GgufFile &gguf) {
  KILN_ASSIGN_OR_RETURN(GgufVocab v, readGgufVocab(gguf));
  if (v.addBos && v.ids.bos < 0)
    return invalidArgument("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id "
                           "is missing or outside the vocabulary");
  if (v.addEos && v.ids.eos < 0)
    return invalidArgument("tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id "
                           "is missing or outside the vocabulary");
  Vocab vocab = buildVocab(v);
  std::vector<Merge> merges;
  if (v.merges != nullptr) {
    KILN_ASSIGN_OR_RETURN(merges, mergesFromFile(*v.merges, vocab));
  } else {
    merges = mergesFromScores(v, vocab);
  }
  GgufTokenizerFiles files;
  files.tokenizerJson = tokenizerJson(v, vocab, merges);
  files.tokenizerConfigJson = tokenizerConfigJson(gguf, v, vocab);
  files.bosTokenId = v.ids.bos;
  files.padTokenId = v.ids.pad;
  files.addBos = v.addBos;
  for (int32_t id : {v.ids.eos, v.ids.eot, v.ids.eom})
    if (id >= 0 && std::find(files.eosTokenIds.begin(), files.eosTokenIds.end(), id) ==
                       files.eosTokenIds.end())
      files.eosTokenIds.push_back(id);
  return files;
}

} // namespace kiln::compiler
