// tokenizer.json "pre_tokenizer": splits normalized text into the pieces the model sees (Split
// with a regex or string, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit,
// BertPreTokenizer, and Sequences of them), with HF's split-behavior semantics (Isolated, Removed,
// MergedWithPrevious, MergedWithNext, Contiguous; optionally inverted).
#pragma once

#include "runtime/base/status.h"
#include "runtime/text/tokenizer_regex.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

// Pieces as byte ranges into one buffer; `atStart` marks a piece that begins at offset 0 of the
// original input (HF's offsets_original().0 == 0, used by Metaspace's "first" prepend scheme).
struct PieceList {
  struct Span {
    uint32_t begin;
    uint32_t end;
    bool atStart;
  };
  std::string buffer;
  std::vector<Span> spans;

  std::string_view text(const Span &s) const {
    return std::string_view(buffer).substr(s.begin, s.end - s.begin);
  }
  void clear() {
    buffer.clear();
    spans.clear();
  }
};

class PreTokenizer {
public:
  static Result<PreTokenizer> fromJson(const nlohmann::json &spec, const std::string &where);

  // Rewrites `pieces` in place; `scratch` is reused storage.
  void apply(PieceList &pieces, PieceList &scratch) const;
  bool empty() const { return steps_.empty(); }

private:
  enum class Kind { kSplit, kByteLevel, kMetaspace, kBert };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    Kind kind;
    TextRegex regex;
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool addPrefixSpace = false; // ByteLevel
    bool useRegex = true;        // ByteLevel
    std::string replacement;     // Metaspace
    int prependScheme = 0;       // Metaspace: 0 always, 1 first, 2 never
    bool split = true;           // Metaspace
  };
  static Status addSteps(const nlohmann::json &spec, const std::string &where,
                         std::vector<Step> &steps);
  static Result<Behavior> parseBehavior(const nlohmann::json &spec, const std::string &where);
  void applySplit(const Step &step, const PieceList &in, PieceList &out) const;
  void applyByteLevel(const Step &step, const PieceList &in, PieceList &out) const;
  void applyMetaspace(const Step &step, const PieceList &in, PieceList &out) const;
  static void applyBert(const PieceList &in, PieceList &out);

  std::vector<Step> steps_;
};

} // namespace kiln::rt
