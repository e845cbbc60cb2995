#include "runtime/text/tokenizer.h"

#include "runtime/base/file.h"
#include "runtime/text/normalizer.h"
#include "runtime/text/pre_tokenizer.h"
#include "runtime/text/token_model.h"
#include "runtime/text/tokenizer_added.h"
#include "runtime/text/tokenizer_json.h"
#include "runtime/text/tokenizer_utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_set>

namespace kiln::rt {

using Json = nlohmann::json;

struct Tokenizer::Impl {
  TokenModel model;
  Normalizer normalizer;
  PreTokenizer preTokenizer;
  Decoder decoder;
  AddedVocabulary added;
  // One piece of a post-processor template: special-token ids, or the tokens of text A or B.
  // Every id a piece adds gets its typeId.
  struct TemplatePiece {
    enum class Kind { kSpecial, kSequenceA, kSequenceB };
    Kind kind = Kind::kSpecial;
    std::vector<int32_t> specialIds; // kSpecial only
    int32_t typeId = 0;
  };
  using Template = std::vector<TemplatePiece>;
  // The post-processor flattened into templates (see compileTemplate): one text with special
  // tokens, and a text pair with and without them. pairStatus says why there is no pair template.
  Template singleTemplate;
  Template pairTemplate;
  Template pairPlainTemplate;
  Status pairStatus;
  std::vector<int32_t> prefixIds; // singleTemplate's special ids before and after the sequence
  std::vector<int32_t> suffixIds;
  std::vector<uint8_t> specialById;
  SpecialTokenStrings special;
  std::string chatTemplate;
  bool cleanUp = false;
  int32_t vocabSize = 0;
  int32_t bosId = -1;
  std::vector<int32_t> eosIds;

  int32_t tokenToId(std::string_view token) const {
    int32_t id = added.idOf(token);
    return id >= 0 ? id : model.tokenToId(token);
  }
};

namespace {

constexpr const char *kJsonName = "tokenizer.json";

Result<std::vector<AddedToken>> loadAddedTokens(const Json &root) {
  std::vector<AddedToken> out;
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null())
    return out;
  if (!it->is_array())
    return invalidArgument(std::string(kJsonName) + ": added_tokens must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json &t = (*it)[i];
    std::string where = std::string(kJsonName) + ": added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object())
      return invalidArgument(where + " must be an object");
    AddedToken a;
    KILN_ASSIGN_OR_RETURN(a.content, jsonString(t, "content", where));
    int64_t id = jsonIntOr(t, "id", -1);
    if (id < 0 || id >= kTokenIdLimit)
      return invalidArgument(where + ": field 'id' must be an integer in [0, 2^24)");
    a.id = static_cast<int32_t>(id);
    a.special = jsonBoolOr(t, "special", false);
    a.lstrip = jsonBoolOr(t, "lstrip", false);
    a.rstrip = jsonBoolOr(t, "rstrip", false);
    a.normalized = jsonBoolOr(t, "normalized", !a.special);
    a.singleWord = jsonBoolOr(t, "single_word", false);
    out.push_back(std::move(a));
  }
  return out;
}

// A token id in a post-processor: an integer in [0, kTokenIdLimit) (nlohmann's get<int32_t>
// would throw on a string and truncate a large or fractional number).
Result<int32_t> templateTokenId(const Json &id, const std::string &where) {
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kTokenIdLimit)
    return invalidArgument(where + ": token id " + id.dump() + " is not an integer in [0, 2^24)");
  return static_cast<int32_t>(id.get<int64_t>());
}

using Template = Tokenizer::Impl::Template;
using TemplatePiece = Tokenizer::Impl::TemplatePiece;
// What a post-processor passes to the next one (the `tokenizers` Vec<Encoding>): one template
// per encoding, merged in order at the end.
using Encodings = std::vector<Template>;

TemplatePiece specialPiece(int32_t id, int32_t typeId) {
  return {TemplatePiece::Kind::kSpecial, {id}, typeId};
}

void setTypeIds(Template &encoding, int32_t typeId) {
  for (TemplatePiece &piece : encoding)
    piece.typeId = typeId;
}

// BertProcessing: [CLS] A [SEP] (type ids kept, 0 on [CLS] and [SEP]) and B [SEP] ([SEP] 1).
// RobertaProcessing: every type id 0, then <s> A </s> and </s> B </s>.
Status applyBertOrRoberta(const Json &pp, bool roberta, bool addSpecialTokens, Encodings &encodings,
                          const std::string &where) {
  auto cls = pp.find("cls"), sep = pp.find("sep");
  if (cls == pp.end() || sep == pp.end() || !cls->is_array() || cls->size() != 2 ||
      !sep->is_array() || sep->size() != 2)
    return invalidArgument(where + ": cls and sep must be [token, id]");
  KILN_ASSIGN_OR_RETURN(int32_t clsId, templateTokenId((*cls)[1], where + ".cls"));
  KILN_ASSIGN_OR_RETURN(int32_t sepId, templateTokenId((*sep)[1], where + ".sep"));
  if (roberta)
    for (Template &encoding : encodings)
      setTypeIds(encoding, 0);
  if (!addSpecialTokens)
    return okStatus();
  for (size_t i = 0; i < encodings.size(); ++i) {
    Template &encoding = encodings[i];
    const int32_t typeId = roberta || i == 0 ? 0 : 1;
    if (i == 0 || roberta)
      encoding.insert(encoding.begin(), specialPiece(i == 0 ? clsId : sepId, 0));
    encoding.push_back(specialPiece(sepId, typeId));
  }
  return okStatus();
}

// A template piece's "type_id" (0 when absent).
Result<int32_t> pieceTypeId(const Json &body, const std::string &where) {
  auto it = body.find("type_id");
  if (it == body.end())
    return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= kTokenIdLimit)
    return invalidArgument(where + ": type_id " + it->dump() + " is not an integer in [0, 2^24)");
  return static_cast<int32_t>(it->get<int64_t>());
}

// One {"Sequence": {"id": "A"|"B", "type_id": n}} piece: a copy of that encoding, every type id n.
Status addSequencePiece(const Json &body, const Encodings &encodings, Encodings &out,
                        const std::string &where) {
  std::string id = body.is_object() ? jsonStringOr(body, "id", "") : "";
  if (id != "A" && id != "B")
    return invalidArgument(where + ": a Sequence piece's id must be \"A\" or \"B\"");
  const size_t index = id == "A" ? 0 : 1;
  if (index >= encodings.size())
    return invalidArgument(where + ": $B is used with one sequence");
  KILN_ASSIGN_OR_RETURN(int32_t typeId, pieceTypeId(body, where));
  out.push_back(encodings[index]);
  setTypeIds(out.back(), typeId);
  return okStatus();
}

// One {"SpecialToken": {"id": NAME, "type_id": n}} piece: special_tokens[NAME].ids, type id n.
Status addSpecialTokenPiece(const Json &body, const Json &specials, Encodings &out,
                            const std::string &where) {
  if (!body.is_object() || !body.contains("id") || !body["id"].is_string())
    return invalidArgument(where + ": each piece must be a Sequence or a SpecialToken");
  std::string name = body["id"].get<std::string>();
  auto sp = specials.find(name);
  if (sp == specials.end() || !sp->is_object() || !sp->contains("ids") || !(*sp)["ids"].is_array())
    return invalidArgument(where + ": special token '" + name + "' is not in special_tokens");
  KILN_ASSIGN_OR_RETURN(int32_t typeId, pieceTypeId(body, where));
  Template encoding;
  for (const Json &id : (*sp)["ids"]) {
    KILN_ASSIGN_OR_RETURN(int32_t value,
                          templateTokenId(id, where + ": special token '" + name + "'"));
    encoding.push_back(specialPiece(value, typeId));
  }
  out.push_back(std::move(encoding));
  return okStatus();
}

// TemplateProcessing: "single" for one encoding, "pair" for two; one encoding per piece, the
// special tokens' only when addSpecialTokens.
Status applyTemplateProcessing(const Json &pp, bool addSpecialTokens, Encodings &encodings,
                               const std::string &where) {
  if (encodings.size() != 1 && encodings.size() != 2)
    return unimplemented(where +
                         ": TemplateProcessing after a processor that splits the text into " +
                         std::to_string(encodings.size()) + " encodings is not supported");
  const std::string key = encodings.size() == 1 ? "single" : "pair";
  auto tmpl = pp.find(key);
  if (key == "pair" && tmpl == pp.end())
    return invalidArgument(where + ".pair is missing: this tokenizer has no text-pair template");
  if (tmpl == pp.end() || !tmpl->is_array())
    return invalidArgument(where + "." + key + " must be an array");
  const Json specials = pp.value("special_tokens", Json::object());
  Encodings out;
  for (const Json &piece : *tmpl) {
    auto sequence = piece.is_object() ? piece.find("Sequence") : piece.end();
    if (piece.is_object() && sequence != piece.end()) {
      KILN_RETURN_IF_ERROR(addSequencePiece(*sequence, encodings, out, where + "." + key));
      continue;
    }
    auto special = piece.is_object() ? piece.find("SpecialToken") : piece.end();
    if (!piece.is_object() || special == piece.end())
      return invalidArgument(where + "." + key +
                             ": each piece must be a Sequence or a SpecialToken");
    if (addSpecialTokens)
      KILN_RETURN_IF_ERROR(addSpecialTokenPiece(*special, specials, out, where + "." + key));
  }
  encodings = std::move(out);
  return okStatus();
}

// One post-processor of tokenizer.json on the encodings, as `tokenizers` runs it.
Status applyPostProcessor(const Json &pp, bool addSpecialTokens, Encodings &encodings,
                          const std::string &where) {
  std::string type = jsonStringOr(pp, "type", "");
  if (type == "Sequence") {
    auto it = pp.find("processors");
    if (it == pp.end() || !it->is_array())
      return invalidArgument(where + ".processors must be an array");
    for (size_t i = 0; i < it->size(); ++i)
      KILN_RETURN_IF_ERROR(applyPostProcessor((*it)[i], addSpecialTokens, encodings,
                                              where + ".processors[" + std::to_string(i) + "]"));
    return okStatus();
  }
  if (type == "ByteLevel")
    return okStatus(); // only adjusts offsets
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return applyBertOrRoberta(pp, type == "RobertaProcessing", addSpecialTokens, encodings, where);
  if (type != "TemplateProcessing")
    return unimplemented(where + ": post_processor type '" + type + "' is not supported");
  return applyTemplateProcessing(pp, addSpecialTokens, encodings, where);
}

// The post-processor (null: none) flattened into one template for `sequences` (1 or 2) texts:
// text A starts with type id 0 and text B with 1, as `tokenizers` encodes them.
Result<Template> compileTemplate(const Json &pp, size_t sequences, bool addSpecialTokens,
                                 const std::string &where) {
  Encodings encodings = {{TemplatePiece{TemplatePiece::Kind::kSequenceA, {}, 0}}};
  if (sequences == 2)
    encodings.push_back({TemplatePiece{TemplatePiece::Kind::kSequenceB, {}, 1}});
  if (!pp.is_null())
    KILN_RETURN_IF_ERROR(applyPostProcessor(pp, addSpecialTokens, encodings, where));
  Template merged;
  for (Template &encoding : encodings)
    merged.insert(merged.end(), encoding.begin(), encoding.end());
  return merged;
}

// encode() adds the single template's special ids before its first sequence piece as prefixIds
// and the ones after it as suffixIds.
void deriveAffixes(Tokenizer::Impl &impl) {
  impl.prefixIds.clear();
  impl.suffixIds.clear();
  bool seenSequence = false;
  for (const TemplatePiece &piece : impl.singleTemplate) {
    if (piece.kind != TemplatePiece::Kind::kSpecial) {
      seenSequence = true;
      continue;
    }
    std::vector<int32_t> &ids = seenSequence ? impl.suffixIds : impl.prefixIds;
    ids.insert(ids.end(), piece.specialIds.begin(), piece.specialIds.end());
  }
}

// The single template must compile (the load fails otherwise); a pair template that does not
// leaves pairStatus for encodePair to return.
Status loadPostProcessor(const Json &pp, Tokenizer::Impl &impl, const std::string &where) {
  KILN_ASSIGN_OR_RETURN(impl.singleTemplate, compileTemplate(pp, 1, true, where));
  deriveAffixes(impl);
  Result<Template> pair = compileTemplate(pp, 2, true, where);
  Result<Template> plain = compileTemplate(pp, 2, false, where);
  impl.pairStatus = pair.isOk() ? plain.status() : pair.status();
  impl.pairTemplate = pair.isOk() ? *pair : Template();
  impl.pairPlainTemplate = plain.isOk() ? *plain : Template();
  if (!impl.pairStatus.isOk())
    return okStatus();
  for (const Template *t : {&impl.pairTemplate, &impl.pairPlainTemplate}) {
    bool hasA = false, hasB = false;
    for (const TemplatePiece &piece : *t) {
      hasA = hasA || piece.kind == TemplatePiece::Kind::kSequenceA;
      hasB = hasB || piece.kind == TemplatePiece::Kind::kSequenceB;
    }
    // `tokenizers` builds no such template (its builder requires both) but loads one from JSON
    // and drops a text; an error is more useful than a missing text.
    if (!hasA || !hasB)
      impl.pairStatus = invalidArgument(where + ".pair must use both sequences ($A and $B)");
  }
  return okStatus();
}

// "bos_token": "<s>" or {"content": "<s>", ...} or null.
std::string specialString(const Json &v) {
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return {};
}

// The id of the bos/eos token that add_bos_token / add_eos_token asks for.
Result<int32_t> configSpecialId(const Tokenizer::Impl &impl, const std::string &token,
                                const char *flag, const char *field) {
  int32_t id = impl.tokenToId(token);
  if (token.empty() || id < 0)
    return invalidArgument(std::string("tokenizer_config.json: ") + flag + " is true but " + field +
                           " '" + token + "' is not a token");
  return id;
}

Json specialTemplatePiece(const std::string &name, int32_t typeId) {
  return {{"SpecialToken", {{"id", name}, {"type_id", typeId}}}};
}
Json sequenceTemplatePiece(const char *id, int32_t typeId) {
  return {{"Sequence", {{"id", id}, {"type_id", typeId}}}};
}

// transformers' update_post_processor as a TemplateProcessing: single "bos? $A eos?" (type ids 0),
// pair the same followed by "bos? $B eos?" (type ids 1). Ids < 0: not added.
Json bosEosTemplate(const Tokenizer::Impl &impl, int32_t bosId, int32_t eosId) {
  Json single = Json::array(), pair = Json::array(), specials = Json::object();
  auto addSequence = [&](Json &pieces, const char *id, int32_t typeId) {
    if (bosId >= 0)
      pieces.push_back(specialTemplatePiece(impl.special.bos, typeId));
    pieces.push_back(sequenceTemplatePiece(id, typeId));
    if (eosId >= 0)
      pieces.push_back(specialTemplatePiece(impl.special.eos, typeId));
  };
  addSequence(single, "A", 0);
  addSequence(pair, "A", 0);
  addSequence(pair, "B", 1);
  if (bosId >= 0)
    specials[impl.special.bos] = {{"id", impl.special.bos}, {"ids", Json::array({bosId})}};
  if (eosId >= 0)
    specials[impl.special.eos] = {{"id", impl.special.eos}, {"ids", Json::array({eosId})}};
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

// transformers' Llama/Gemma-class fast tokenizers rebuild the post-processor from
// add_bos_token / add_eos_token (update_post_processor); other classes keep tokenizer.json's.
Status applyBosEosOverride(const Json &config, Tokenizer::Impl &impl) {
  std::string cls = config.is_object() ? jsonStringOr(config, "tokenizer_class", "") : "";
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0)
    cls.resize(cls.size() - 4);
  static const char *kRebuilding[] = {"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer",
                                      "CohereTokenizer", "GPTNeoXTokenizer"};
  if (std::find(std::begin(kRebuilding), std::end(kRebuilding), cls) == std::end(kRebuilding))
    return okStatus();
  int32_t bosId = -1, eosId = -1;
  if (jsonBoolOr(config, "add_bos_token", cls != "GPTNeoXTokenizer")) {
    KILN_ASSIGN_OR_RETURN(bosId,
                          configSpecialId(impl, impl.special.bos, "add_bos_token", "bos_token"));
  }
  if (jsonBoolOr(config, "add_eos_token", false)) {
    KILN_ASSIGN_OR_RETURN(eosId,
                          configSpecialId(impl, impl.special.eos, "add_eos_token", "eos_token"));
  }
  return loadPostProcessor(bosEosTemplate(impl, bosId, eosId), impl,
                           "tokenizer_config.json: post_processor (add_bos_token/add_eos_token)");
}

Status loadConfig(std::string_view configText, std::string_view mapText, Tokenizer::Impl &impl) {
  Json config = Json::object(), map = Json::object();
  try {
    if (!configText.empty())
      config = Json::parse(configText);
    if (!mapText.empty())
      map = Json::parse(mapText);
  } catch (const std::exception &e) {
    return invalidArgument(
        std::string(configText.empty() ? "special_tokens_map.json" : "tokenizer_config.json") +
        ": invalid JSON: " + e.what());
  }
  if (!config.is_object() || !map.is_object())
    return invalidArgument("tokenizer_config.json / special_tokens_map.json must be JSON objects");
  auto pick = [&](const char *key) {
    std::string v = config.contains(key) ? specialString(config[key]) : "";
    return v.empty() && map.contains(key) ? specialString(map[key]) : v;
  };
  impl.special.bos = pick("bos_token");
  impl.special.eos = pick("eos_token");
  impl.special.unk = pick("unk_token");
  impl.special.pad = pick("pad_token");
  const Json &extra = config.contains("additional_special_tokens")
                          ? config["additional_special_tokens"]
                          : map.value("additional_special_tokens", Json::array());
  if (extra.is_array())
    for (const Json &t : extra)
      if (std::string s = specialString(t); !s.empty())
        impl.special.additional.push_back(s);
  impl.cleanUp = jsonBoolOr(config, "clean_up_tokenization_spaces", false);
  if (config.contains("chat_template")) {
    const Json &ct = config["chat_template"];
    if (ct.is_string()) {
      impl.chatTemplate = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const Json &t : ct)
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
            t["template"].is_string())
          impl.chatTemplate = t["template"].get<std::string>();
    }
  }
  return applyBosEosOverride(config, impl);
}

void finishImpl(Tokenizer::Impl &impl) {
  int32_t limit = impl.model.idLimit();
  for (const AddedToken &t : impl.added.tokens())
    limit = std::max(limit, t.id + 1);
  impl.vocabSize = limit;
  // HF skips by token string: any id whose string is a special added token's content.
  std::unordered_set<std::string> specials;
  for (const AddedToken &t : impl.added.tokens())
    if (t.special)
      specials.insert(t.content);
  impl.specialById.assign(static_cast<size_t>(limit), 0);
  for (int32_t id = 0; id < limit; ++id) {
    const AddedToken *a = impl.added.byId(id);
    std::string_view s = a != nullptr ? std::string_view(a->content) : impl.model.idToToken(id);
    if (a != nullptr || impl.model.hasId(id))
      impl.specialById[id] = specials.count(std::string(s)) ? 1 : 0;
  }
  impl.bosId = impl.special.bos.empty() ? -1 : impl.tokenToId(impl.special.bos);
  if (!impl.special.eos.empty())
    if (int32_t id = impl.tokenToId(impl.special.eos); id >= 0)
      impl.eosIds.push_back(id);
}

// The first of `ids` that is not below vocabSize; -1 when none is.
int32_t idOutsideVocabulary(const Tokenizer::Impl &impl, const std::vector<int32_t> &ids) {
  for (int32_t id : ids)
    if (id >= impl.vocabSize)
      return id;
  return -1;
}

int32_t pairIdOutsideVocabulary(const Tokenizer::Impl &impl) {
  for (const TemplatePiece &piece : impl.pairTemplate)
    if (int32_t id = idOutsideVocabulary(impl, piece.specialIds); id >= 0)
      return id;
  return -1;
}

Status outsideVocabulary(const std::string &where, int32_t id, const Tokenizer::Impl &impl) {
  return invalidArgument(where + " adds token id " + std::to_string(id) +
                         ", outside the vocabulary (" + std::to_string(impl.vocabSize) + " ids)");
}

} // namespace

Result<Tokenizer> Tokenizer::fromJson(std::string_view tokenizerJson, std::string_view configJson,
                                      std::string_view specialTokensMapJson) {
  KILN_ASSIGN_OR_RETURN(TokenizerJson tj, parseTokenizerJson(tokenizerJson, kJsonName));
  auto impl = std::make_shared<Impl>();
  KILN_ASSIGN_OR_RETURN(impl->model, TokenModel::fromJson(tj, kJsonName));
  const Json &root = tj.root;
  std::string j = kJsonName;
  KILN_ASSIGN_OR_RETURN(impl->normalizer,
                        Normalizer::fromJson(root.value("normalizer", Json()), j + ": normalizer"));
  KILN_ASSIGN_OR_RETURN(
      impl->preTokenizer,
      PreTokenizer::fromJson(root.value("pre_tokenizer", Json()), j + ": pre_tokenizer"));
  KILN_ASSIGN_OR_RETURN(impl->decoder,
                        Decoder::fromJson(root.value("decoder", Json()), j + ": decoder"));
  KILN_ASSIGN_OR_RETURN(std::vector<AddedToken> added, loadAddedTokens(root));
  impl->added.build(std::move(added), impl->normalizer);
  KILN_RETURN_IF_ERROR(
      loadPostProcessor(root.value("post_processor", Json()), *impl, j + ": post_processor"));
  KILN_RETURN_IF_ERROR(loadConfig(configJson, specialTokensMapJson, *impl));
  finishImpl(*impl);
  // encode() emits these ids as they are; one outside the vocabulary would reach the model.
  for (const std::vector<int32_t> *ids : {&impl->prefixIds, &impl->suffixIds})
    if (int32_t id = idOutsideVocabulary(*impl, *ids); id >= 0)
      return outsideVocabulary(j + ": post_processor", id, *impl);
  if (int32_t id = pairIdOutsideVocabulary(*impl); id >= 0 && impl->pairStatus.isOk())
    impl->pairStatus = outsideVocabulary(j + ": post_processor.pair", id, *impl);
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Result<Tokenizer> Tokenizer::fromFiles(const std::string &tokenizerJsonPath,
                                       const std::string &tokenizerConfigPath,
                                       const std::string &specialTokensMapPath) {
  KILN_ASSIGN_OR_RETURN(MappedFile json, MappedFile::open(tokenizerJsonPath));
  std::string config, map;
  if (!tokenizerConfigPath.empty()) {
    KILN_ASSIGN_OR_RETURN(config, readFile(tokenizerConfigPath));
  }
  if (!specialTokensMapPath.empty()) {
    KILN_ASSIGN_OR_RETURN(map, readFile(specialTokensMapPath));
  }
  std::string_view text(reinterpret_cast<const char *>(json.data()), json.size());
  Result<Tokenizer> t = fromJson(text, config, map);
  if (!t.isOk())
    return t.status().withContext(tokenizerJsonPath);
  return t;
}

Result<Tokenizer> Tokenizer::fromDirectory(const std::string &dir) {
  std::string json = dir + "/tokenizer.json";
  if (!fileExists(json))
    return notFound(dir + ": no tokenizer.json");
  std::string config = dir + "/tokenizer_config.json", map = dir + "/special_tokens_map.json";
  return fromFiles(json, fileExists(config) ? config : "", fileExists(map) ? map : "");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool addSpecialTokens) const {
  const Impl &impl = *impl_;
  std::string repaired;
  if (!utf8::isValid(text)) {
    utf8::LossyDecoder lossy;
    lossy.feed(text, repaired);
    lossy.finish(repaired);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (addSpecialTokens)
    ids.insert(ids.end(), impl.prefixIds.begin(), impl.prefixIds.end());
  std::vector<AddedVocabulary::Split> raw, norm;
  std::string normalized;
  PieceList pieces, scratch;
  impl.added.split(text, false, raw);
  for (const auto &r : raw) {
    if (r.id >= 0) {
      ids.push_back(r.id);
      continue;
    }
    normalized.assign(text.substr(r.begin, r.end - r.begin));
    impl.normalizer.apply(normalized);
    impl.added.split(normalized, true, norm);
    for (const auto &n : norm) {
      if (n.id >= 0) {
        ids.push_back(n.id);
        continue;
      }
      pieces.clear();
      pieces.buffer.assign(normalized, n.begin, n.end - n.begin);
      pieces.spans.push_back(
          {0, static_cast<uint32_t>(n.end - n.begin), r.begin == 0 && n.begin == 0});
      impl.preTokenizer.apply(pieces, scratch);
      for (const auto &span : pieces.spans)
        impl.model.tokenize(pieces.text(span), ids);
    }
  }
  if (addSpecialTokens)
    ids.insert(ids.end(), impl.suffixIds.begin(), impl.suffixIds.end());
  return ids;
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool addSpecialTokens,
                                               const Truncation &truncation) const {
  const Impl &impl = *impl_;
  const size_t specials = addSpecialTokens ? impl.prefixIds.size() + impl.suffixIds.size() : 0;
  if (truncation.maxLength <= specials)
    return invalidArgument("truncation to " + std::to_string(truncation.maxLength) +
                           " tokens leaves no room for text beside the " +
                           std::to_string(specials) + " special tokens this tokenizer adds");
  std::vector<int32_t> textIds = encode(text, /*addSpecialTokens=*/false);
  const size_t room = truncation.maxLength - specials;
  if (textIds.size() > room) {
    if (truncation.side == Truncation::Side::kRight)
      textIds.resize(room);
    else
      textIds.erase(textIds.begin(), textIds.end() - static_cast<std::ptrdiff_t>(room));
  }
  if (!addSpecialTokens)
    return textIds;
  std::vector<int32_t> ids(impl.prefixIds);
  ids.insert(ids.end(), textIds.begin(), textIds.end());
  ids.insert(ids.end(), impl.suffixIds.begin(), impl.suffixIds.end());
  return ids;
}

Result<PairEncoding> Tokenizer::encodePair(std::string_view text, std::string_view textPair,
                                           bool addSpecialTokens) const {
  const Impl &impl = *impl_;
  if (!impl.pairStatus.isOk())
    return impl.pairStatus;
  using Kind = Impl::TemplatePiece::Kind;
  const std::vector<int32_t> a = encode(text, false), b = encode(textPair, false);
  PairEncoding out;
  for (const Impl::TemplatePiece &piece :
       addSpecialTokens ? impl.pairTemplate : impl.pairPlainTemplate) {
    const std::vector<int32_t> &ids =
        piece.kind == Kind::kSpecial ? piece.specialIds : (piece.kind == Kind::kSequenceA ? a : b);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.typeIds.insert(out.typeIds.end(), ids.size(), piece.typeId);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skipSpecialTokens) const {
  Decoder::Stream stream = impl_->decoder.stream();
  std::string out;
  for (int32_t id : ids) {
    bool known = false;
    std::string_view token = tokenString(id, known);
    if (!known || (skipSpecialTokens && isSpecialToken(id)))
      continue;
    stream.push(token, out);
  }
  stream.finish(out);
  return out;
}

std::string_view Tokenizer::tokenString(int32_t id, bool &known) const {
  if (const AddedToken *a = impl_->added.byId(id)) {
    known = true;
    return a->content;
  }
  known = impl_->model.hasId(id);
  return impl_->model.idToToken(id);
}

std::string Tokenizer::tokenBytes(int32_t id) const {
  if (isSpecialToken(id))
    return "";
  if (const AddedToken *a = impl_->added.byId(id))
    return impl_->decoder.tokenBytes(a->content); // decode() runs added tokens' content through
                                                  // the decoder too (Gemma's "▁▁" runs)
  if (!impl_->model.hasId(id))
    return "";
  return impl_->decoder.tokenBytes(impl_->model.idToToken(id));
}

Decoder::Stream Tokenizer::newDecodeStream() const {
  return impl_->decoder.stream();
}

int32_t Tokenizer::tokenToId(std::string_view token) const {
  return impl_->tokenToId(token);
}

std::optional<std::string> Tokenizer::idToToken(int32_t id) const {
  bool known = false;
  std::string_view s = tokenString(id, known);
  if (!known)
    return std::nullopt;
  return std::string(s);
}

int32_t Tokenizer::vocabSize() const {
  return impl_->vocabSize;
}
int32_t Tokenizer::bosTokenId() const {
  return impl_->bosId;
}
std::vector<int32_t> Tokenizer::eosTokenIds() const {
  return impl_->eosIds;
}
bool Tokenizer::isSpecialToken(int32_t id) const {
  return id >= 0 && id < impl_->vocabSize && impl_->specialById[id] != 0;
}
const SpecialTokenStrings &Tokenizer::specialTokens() const {
  return impl_->special;
}
const std::string &Tokenizer::chatTemplate() const {
  return impl_->chatTemplate;
}
bool Tokenizer::cleanUpTokenizationSpacesEnabled() const {
  return impl_->cleanUp;
}

std::string cleanUpTokenizationSpaces(std::string_view text) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string s(text);
  for (auto [from, to] : kRules)
    replaceLiteral(from, to, s);
  return s;
}

} // namespace kiln::rt
