// tokenizer.json "decoder": turns token strings back into text (ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip, WordPiece, Sequence; no decoder joins tokens with spaces, as HF
// does).
//
// Every decoder step is implemented as a streaming stage, and batch decoding is the same stream
// fed all tokens and finished. That makes incremental detokenization exact by construction: a
// stage only emits text that no later token can change (an open byte-fallback group, an
// unfinished UTF-8 sequence, or trailing characters a Strip may remove stay buffered).
#pragma once

#include "runtime/base/status.h"
#include "runtime/text/tokenizer_regex.h"
#include "runtime/text/tokenizer_utf8.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

class Decoder {
public:
  static Result<Decoder> fromJson(const nlohmann::json &spec, const std::string &where);

  class Stream {
  public:
    // Feeds one token string; appends the text that became final to `out`.
    void push(std::string_view token, std::string &out);
    // Ends the token sequence and appends everything still buffered.
    void finish(std::string &out);

  private:
    friend class Decoder;
    struct State {
      std::string bytes; // ByteFallback: open group; Strip: held trailing characters
      utf8::LossyDecoder lossy;
      int64_t tokenIndex = -1; // index of the current token at this stage's input
      int64_t startLeft = 0;   // Strip: leading characters that may still be removed
      bool anyOutput = false;  // Fuse / ByteLevel: whether the single output token started
      int64_t heldIndex = -1;  // WordPiece: index of the token held in `bytes`
    };
    void feed(size_t stage, std::string_view chunk, bool newToken, std::string &out);
    void end(size_t stage, std::string &out);
    void endToken(size_t stage, std::string &out);
    void feedMetaspace(size_t stage, std::string_view chunk, bool newToken, std::string &out);
    void feedStrip(size_t stage, std::string_view chunk, bool newToken, std::string &out);
    void feedWordPiece(size_t stage, std::string_view chunk, bool newToken, std::string &out);
    const Decoder *decoder_ = nullptr;
    std::vector<State> states_;
  };

  Stream stream() const;
  std::string decode(const std::vector<std::string_view> &tokens) const;
  // The bytes one token adds to text in the middle of a sequence, for the constraint engine
  // (runtime/structured): each step's rewrite of a token (byte-level characters to bytes, a
  // <0xHH> token to its byte, Metaspace's and Replace's replacements) without the start-of-text
  // rules (Metaspace's first space, a Strip after Fuse) and without UTF-8 repair, so a token
  // holding half a code point gives that half.
  std::string tokenBytes(std::string_view token) const;

private:
  enum class Kind {
    kByteLevel,
    kMetaspace,
    kReplace,
    kByteFallback,
    kFuse,
    kStrip,
    kWordPiece,
    kJoinSpaces
  };
  struct Step {
    Kind kind;
    TextRegex pattern; // Replace
    std::string text;  // Replace content / Metaspace replacement / Strip content / WordPiece
                       // prefix
    bool literalOneChar = false;
    int64_t start = 0, stop = 0; // Strip
    bool stripFirst = true;      // Metaspace: prepend_scheme != never
    bool cleanup = false;        // WordPiece
  };
  static void wordPieceToken(const Step &step, bool first, std::string &token);
  static Status addSteps(const nlohmann::json &spec, const std::string &where,
                         std::vector<Step> &steps);
  std::vector<Step> steps_;
};

} // namespace kiln::rt
