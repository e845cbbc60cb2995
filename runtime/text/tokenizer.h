// Hugging Face tokenizer.json tokenizers (byte-level BPE, SentencePiece-style BPE and Unigram,
// BERT-style WordPiece) with the exact behaviour of the `tokenizers` library (0.22) as
// transformers (4.57) uses it: normalizer -> added/special-token splitting -> pre-tokenizer ->
// model -> post-processor for encode, decoder chain for decode. tokenizer_config.json adds the
// special-token strings, the chat template, and (for Llama/Gemma-class tokenizers) add_bos_token /
// add_eos_token.
//
// A Tokenizer is immutable after loading; copies share the loaded data and every const method is
// safe to call from many threads at once.
#pragma once

#include "runtime/base/status.h"
#include "runtime/text/decoder.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

// Special-token strings from tokenizer_config.json (falling back to special_tokens_map.json);
// empty when not set. Used by the chat-template renderer (bos_token, eos_token, ...).
struct SpecialTokenStrings {
  std::string bos;
  std::string eos;
  std::string unk;
  std::string pad;
  std::vector<std::string> additional;
};

// HF's truncation (`truncation=True, max_length=...`, `truncation_side`): a prompt of more than
// maxLength ids keeps the first (kRight cuts the end) or the last (kLeft) of its text's tokens,
// and the special tokens the tokenizer adds stay.
struct Truncation {
  enum class Side { kRight, kLeft };
  size_t maxLength = 0;
  Side side = Side::kRight;
};

// A text pair's token ids and, for each id, its token type id (segment id).
struct PairEncoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> typeIds;
};

class Tokenizer {
public:
  // tokenizerConfigPath / specialTokensMapPath may be "" (not used).
  static Result<Tokenizer> fromFiles(const std::string &tokenizerJsonPath,
                                     const std::string &tokenizerConfigPath = "",
                                     const std::string &specialTokensMapPath = "");
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json and
  // DIR/special_tokens_map.json.
  static Result<Tokenizer> fromDirectory(const std::string &dir);
  // Same from file contents; configJson / specialTokensMapJson may be empty.
  static Result<Tokenizer> fromJson(std::string_view tokenizerJson,
                                    std::string_view configJson = {},
                                    std::string_view specialTokensMapJson = {});

  // HF `encode(text, add_special_tokens=...)`. Special tokens written in the text are always
  // recognized. Invalid UTF-8 in `text` is first replaced by U+FFFD (per maximal subpart).
  std::vector<int32_t> encode(std::string_view text, bool addSpecialTokens) const;
  // The same with HF's truncation: the text's tokens are cut to truncation.maxLength less the
  // special tokens added (HF `num_special_tokens_to_add`). A maxLength that leaves no room for a
  // text token is an error (HF raises one too).
  Result<std::vector<int32_t>> encode(std::string_view text, bool addSpecialTokens,
                                      const Truncation &truncation) const;
  // HF `tokenizer([text], [text_pair], add_special_tokens=...)` (`tokenizers`' encode(text,
  // text_pair)): each text encoded as encode(text, false) does, then joined by the
  // post-processor's pair template (BERT: [CLS] A [SEP] B [SEP], type ids 0 on [CLS] A [SEP] and 1
  // on B [SEP]; without special tokens A then B). An empty textPair is still a second sequence
  // (transformers' one-pair call `tokenizer(text, "")` alone drops it and encodes text by itself).
  // typeIds are the `tokenizers` encoding's type_ids, which transformers returns as token_type_ids
  // for models that take them (XLM-R and BART tokenizers leave them out; they are all 0 there).
  // Llama/Gemma-class add_bos_token / add_eos_token give "bos A eos" (type ids 0) then "bos B eos"
  // (type ids 1). An InvalidArgument error naming post_processor.pair when tokenizer.json's
  // TemplateProcessing has no usable "pair" template (single texts still encode).
  Result<PairEncoding> encodePair(std::string_view text, std::string_view textPair,
                                  bool addSpecialTokens) const;
  // HF `decode(ids, skip_special_tokens=...)` without clean_up_tokenization_spaces. Ids that are
  // not in the vocabulary are skipped, as HF does.
  std::string decode(std::span<const int32_t> ids, bool skipSpecialTokens) const;

  int32_t tokenToId(std::string_view token) const; // -1 when unknown
  std::optional<std::string> idToToken(int32_t id) const;
  // One past the largest token id (model vocab and added tokens).
  int32_t vocabSize() const;
  int32_t bosTokenId() const; // -1 when there is none
  // The eos_token of tokenizer_config.json (generation_config.json may add more; the engine
  // merges those).
  std::vector<int32_t> eosTokenIds() const;
  bool isSpecialToken(int32_t id) const;
  const SpecialTokenStrings &specialTokens() const;
  // tokenizer_config.json "clean_up_tokenization_spaces" (default false). decode() never applies
  // it; callers that want transformers' decode output pass the text to
  // cleanUpTokenizationSpaces().
  bool cleanUpTokenizationSpacesEnabled() const;
  // tokenizer_config.json "chat_template" when it is a string; empty otherwise.
  const std::string &chatTemplate() const;

  // For IncrementalDetokenizer: the string the decoder sees for `id` (empty view when unknown;
  // `known` tells the two cases apart), and a fresh decoder stream.
  std::string_view tokenString(int32_t id, bool &known) const;
  // The bytes token `id` adds to generated text (Decoder::tokenBytes of its string or added
  // content); empty for special tokens and unknown ids, which a grammar never allows.
  std::string tokenBytes(int32_t id) const;
  Decoder::Stream newDecodeStream() const;

  struct Impl;

private:
  std::shared_ptr<const Impl> impl_;
};

// transformers' clean_up_tokenization: " ." -> ".", " ?" -> "?", " !" -> "!", " ," -> ",",
// " ' " -> "'", " n't" -> "n't", " 'm" -> "'m", " 's" -> "'s", " 've" -> "'ve", " 're" -> "'re",
// applied in that order.
std::string cleanUpTokenizationSpaces(std::string_view text);

} // namespace kiln::rt
