#include "tools/kiln/generate_input.h"

namespace kiln::tools {
namespace {

using nlohmann::json;

Status typeError(const std::string &where, const std::string &field, const char *expected) {
  return invalidArgument(where + ": field '" + field + "' must be " + expected);
}

template <typename T>
Status readNumber(const json &line, const std::string &where, const char *field, T &out) {
  auto it = line.find(field);
  if (it == line.end() || it->is_null())
    return okStatus();
  if (!it->is_number())
    return typeError(where, field, "a number");
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer())
      return typeError(where, field, "an integer");
  }
  out = it->get<T>();
  return okStatus();
}

Status readStops(const json &line, const std::string &where, rt::SamplingParams &params) {
  auto it = line.find("stop");
  if (it == line.end() || it->is_null())
    return okStatus();
  if (it->is_string()) {
    params.stop = {it->get<std::string>()};
    return okStatus();
  }
  if (!it->is_array())
    return typeError(where, "stop", "a string or a list of strings");
  params.stop.clear();
  for (const json &s : *it) {
    if (!s.is_string())
      return typeError(where, "stop", "a string or a list of strings");
    params.stop.push_back(s.get<std::string>());
  }
  return okStatus();
}

Status readIds(const json &value, const std::string &where, const char *field,
               std::vector<int32_t> &out) {
  if (!value.is_array())
    return typeError(where, field, "a list of token ids");
  out.clear();
  for (const json &id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return typeError(where, field, "a list of non-negative integer token ids");
    out.push_back(id.get<int32_t>());
  }
  return okStatus();
}

} // namespace

Result<rt::SamplingParams> samplingFromJson(const json &line, const rt::SamplingParams &defaults,
                                            const std::string &where) {
  rt::SamplingParams params = defaults;
  int32_t maxTokens = params.maxTokens.value_or(-1);
  KILN_RETURN_IF_ERROR(readNumber(line, where, "max_tokens", maxTokens));
  if (maxTokens >= 0)
    params.maxTokens = maxTokens;
  KILN_RETURN_IF_ERROR(readNumber(line, where, "temperature", params.temperature));
  KILN_RETURN_IF_ERROR(readNumber(line, where, "top_k", params.topK));
  KILN_RETURN_IF_ERROR(readNumber(line, where, "top_p", params.topP));
  KILN_RETURN_IF_ERROR(readNumber(line, where, "min_p", params.minP));
  KILN_RETURN_IF_ERROR(readNumber(line, where, "min_tokens", params.minTokens));
  KILN_RETURN_IF_ERROR(readNumber(line, where, "repetition_penalty", params.repetitionPenalty));
  KILN_RETURN_IF_ERROR(readNumber(line, where, "presence_penalty", params.presencePenalty));
  KILN_RETURN_IF_ERROR(readNumber(line, where, "frequency_penalty", params.frequencyPenalty));
  if (line.contains("seed") && !line["seed"].is_null()) {
    if (!line["seed"].is_number_integer())
      return typeError(where, "seed", "an integer");
    params.seed = line["seed"].get<uint64_t>();
  }
  if (line.contains("ignore_eos")) {
    if (!line["ignore_eos"].is_boolean())
      return typeError(where, "ignore_eos", "true or false");
    params.ignoreEos = line["ignore_eos"].get<bool>();
  }
  if (line.contains("stop_token_ids"))
    KILN_RETURN_IF_ERROR(readIds(line["stop_token_ids"], where, "stop_token_ids",
                                 params.stopTokenIds));
  KILN_RETURN_IF_ERROR(readStops(line, where, params));
  return params;
}

Result<GenerateJob> jobFromJsonLine(const std::string &text, int lineNumber,
                                    const rt::SamplingParams &defaults) {
  std::string where = "--input line " + std::to_string(lineNumber);
  json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (line.is_discarded() || !line.is_object())
    return invalidArgument(where + ": not a JSON object");
  GenerateJob job;
  int sources = 0;
  if (auto it = line.find("prompt"); it != line.end()) {
    if (!it->is_string())
      return typeError(where, "prompt", "a string");
    job.prompt = it->get<std::string>();
    ++sources;
  }
  if (auto it = line.find("prompt_ids"); it != line.end()) {
    job.promptIds.emplace();
    KILN_RETURN_IF_ERROR(readIds(*it, where, "prompt_ids", *job.promptIds));
    ++sources;
  }
  if (auto it = line.find("messages"); it != line.end()) {
    if (!it->is_array())
      return typeError(where, "messages", "a list of {\"role\", \"content\"} objects");
    // Re-read in document order: templates may print messages with tojson.
    job.messages = nlohmann::ordered_json::parse(text)["messages"];
    ++sources;
  }
  if (sources != 1)
    return invalidArgument(where + ": give exactly one of 'prompt', 'prompt_ids', 'messages'");
  KILN_ASSIGN_OR_RETURN(job.sampling, samplingFromJson(line, defaults, where));
  return job;
}

} // namespace kiln::tools
