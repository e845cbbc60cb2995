// Hooks from token ids to text, implemented by the text layer (IncrementalDetokenizer,
// StopStringMatcher in runtime/text) through small adapters (runtime/service/text_hooks.h).
// The engine works without them: outputs then carry ids and an empty text.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

// One sample's incremental detokenization. Stop tokens (eos, stop ids) are never appended.
class TextStream {
public:
  virtual ~TextStream() = default;
  // Text that became final with this token (may hold back an incomplete UTF-8 sequence).
  virtual std::string append(int32_t tokenId) = 0;
  // Whatever is still held back, at the end of the sample.
  virtual std::string flush() = 0;
};

class Detokenizer {
public:
  virtual ~Detokenizer() = default;
  // The prompt gives the context a detokenizer needs (e.g. a leading-space rule).
  // `skipSpecialTokens`: SamplingParams::skipSpecialTokens.
  virtual std::unique_ptr<TextStream> openStream(std::span<const int32_t> promptIds,
                                                 bool skipSpecialTokens) = 0;
};

struct StopCheck {
  std::string text;     // the part of the delta (plus earlier held text) now safe to emit
  bool stopped = false; // a stop string matched; text ends before it
};

// One sample's stop-string state: holds back text that could be the start of a stop string.
class StopStringFilter {
public:
  virtual ~StopStringFilter() = default;
  virtual StopCheck push(std::string_view delta) = 0;
  virtual std::string flush() = 0;
};

class StopStringFilterFactory {
public:
  virtual ~StopStringFilterFactory() = default;
  virtual Result<std::unique_ptr<StopStringFilter>>
  create(const std::vector<std::string> &stops) = 0;
};

} // namespace kiln::rt
