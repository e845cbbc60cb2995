#include "runtime/text/token_model.h"

namespace kiln::rt {
namespace {

using Json = nlohmann::json;

Result<BpeModel> loadBpe(TokenizerJson &tj, const Json &model, const std::string &where) {
  if (!tj.hasVocab)
    return invalidArgument(where + ": model.vocab must be an object of token -> id");
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0)
    return unimplemented(where + ": model.dropout > 0 is not supported");
  BpeOptions o;
  o.unkToken = jsonStringOr(model, "unk_token", "");
  o.fuseUnk = jsonBoolOr(model, "fuse_unk", false);
  o.byteFallback = jsonBoolOr(model, "byte_fallback", false);
  o.ignoreMerges = jsonBoolOr(model, "ignore_merges", false);
  o.continuingSubwordPrefix = jsonStringOr(model, "continuing_subword_prefix", "");
  o.endOfWordSuffix = jsonStringOr(model, "end_of_word_suffix", "");
  return BpeModel::create(std::move(tj.vocab), tj.merges, std::move(o), where);
}

Result<WordPieceModel> loadWordPiece(TokenizerJson &tj, const Json &model,
                                     const std::string &where) {
  if (!tj.hasVocab)
    return invalidArgument(where + ": model.vocab must be an object of token -> id");
  WordPieceOptions o;
  o.unkToken = jsonStringOr(model, "unk_token", o.unkToken);
  o.continuingSubwordPrefix =
      jsonStringOr(model, "continuing_subword_prefix", o.continuingSubwordPrefix);
  o.maxInputCharsPerWord = jsonIntOr(model, "max_input_chars_per_word", o.maxInputCharsPerWord);
  return WordPieceModel::create(std::move(tj.vocab), std::move(o), where);
}

Result<UnigramModel> loadUnigram(TokenizerJson &tj, const Json &model, const std::string &where) {
  if (!tj.hasScoredVocab)
    return invalidArgument(where + ": model.vocab must be a list of [token, score]");
  int64_t unkId = -1;
  if (auto it = model.find("unk_id"); it != model.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      return invalidArgument(where + ": model.unk_id must be a non-negative integer or null");
    unkId = it->get<int64_t>();
  }
  return UnigramModel::create(std::move(tj.scoredVocab), unkId,
                              jsonBoolOr(model, "byte_fallback", false), where);
}

// HF reads a model without "type" as the first of BPE, WordPiece, WordLevel, Unigram that parses.
std::string inferType(const TokenizerJson &tj, const Json &model) {
  if (tj.hasMerges)
    return "BPE";
  if (tj.hasScoredVocab)
    return "Unigram";
  if (model.contains("continuing_subword_prefix") && model.contains("max_input_chars_per_word"))
    return "WordPiece";
  return "";
}

} // namespace

Result<TokenModel> TokenModel::fromJson(TokenizerJson &tj, const std::string &where) {
  const Json &model = tj.root.contains("model") ? tj.root["model"] : Json();
  if (!model.is_object())
    return invalidArgument(where + ": field 'model' must be an object");
  std::string type = jsonStringOr(model, "type", inferType(tj, model));
  TokenModel m;
  if (type == "BPE") {
    KILN_ASSIGN_OR_RETURN(m.model_, loadBpe(tj, model, where));
  } else if (type == "WordPiece") {
    KILN_ASSIGN_OR_RETURN(m.model_, loadWordPiece(tj, model, where));
  } else if (type == "Unigram") {
    KILN_ASSIGN_OR_RETURN(m.model_, loadUnigram(tj, model, where));
  } else {
    return unimplemented(where + ": model.type '" + type +
                         "' is not supported (BPE, WordPiece and Unigram are)");
  }
  return m;
}

} // namespace kiln::rt
