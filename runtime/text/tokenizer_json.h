// Fast reader for HF tokenizer.json: the big members (model.vocab, model.merges) are streamed
// straight into vectors with a SAX pass; everything else lands in a small nlohmann DOM. model.vocab
// is an object of token -> id (BPE, WordPiece) or a list of [token, score] (Unigram).
// Internal to runtime/text (keeps nlohmann out of the public tokenizer header).
#pragma once

#include "runtime/base/status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

struct TokenizerJson {
  nlohmann::json root; // the file without model.vocab / model.merges
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, double>> scoredVocab; // Unigram
  std::vector<std::pair<std::string, std::string>> merges;
  bool hasVocab = false;
  bool hasScoredVocab = false;
  bool hasMerges = false;
};

// `name` is used in error messages ("tokenizer.json: ...").
Result<TokenizerJson> parseTokenizerJson(std::string_view text, const std::string &name);

// Small typed getters with messages that name the field.
Result<std::string> jsonString(const nlohmann::json &obj, const char *field,
                               const std::string &where);
std::string jsonStringOr(const nlohmann::json &obj, const char *field, std::string fallback);
bool jsonBoolOr(const nlohmann::json &obj, const char *field, bool fallback);
int64_t jsonIntOr(const nlohmann::json &obj, const char *field, int64_t fallback);

} // namespace kiln::rt
