// What `kiln generate` runs: one GenerateJob per prompt, from the flags or from --input JSON lines
// ({"prompt": "..."} | {"prompt_ids": [...]} | {"messages": [...]}, plus per-request sampling
// fields with OpenAI/vLLM names: max_tokens, temperature, top_k, top_p, min_p, seed, stop,
// stop_token_ids, ignore_eos, min_tokens, repetition_penalty, presence_penalty, frequency_penalty).
#pragma once

#include "runtime/base/status.h"
#include "runtime/sampling/sampling_params.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace kiln::tools {

struct GenerateJob {
  std::optional<std::string> prompt;            // text, encoded with the artifact's tokenizer
  std::optional<std::vector<int32_t>> promptIds;
  std::optional<nlohmann::ordered_json> messages; // chat, rendered with the chat template
  rt::SamplingParams sampling;
};

// Applies the sampling fields of `line` over `defaults`; errors name `where` and the field.
Result<rt::SamplingParams> samplingFromJson(const nlohmann::json &line,
                                            const rt::SamplingParams &defaults,
                                            const std::string &where);
// Parses one --input line (1-based `lineNumber` for messages).
Result<GenerateJob> jobFromJsonLine(const std::string &text, int lineNumber,
                                    const rt::SamplingParams &defaults);

} // namespace kiln::tools
