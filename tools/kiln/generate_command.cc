// `kiln generate ARTIFACT --prompt-ids "1 2 3"`: greedy generation, one JSON line per prompt.
// Runs the executor directly, one sequence at a time; prompts longer than the compiled tokens per
// step are prefilled in chunks.
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/loaded_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>

namespace kiln::tools {
namespace {

const CommandSpec kGenerateSpec = {
    "generate",
    "ARTIFACT --prompt-ids \"1 2 3\" [options]",
    "Generate greedily from a compiled artifact and print one JSON line per prompt:\n"
    "{\"prompt_ids\":[...],\"output_ids\":[...],\"text\":\"...\",\"finish_reason\":\"...\"}",
    {
        {"--prompt-ids", "IDS", "prompt token ids, separated by spaces or commas"},
        {"--max-tokens", "N", "tokens to generate (default 16)"},
        {"--ignore-eos", "", "keep generating after an eos token"},
        {"--device", "cpu|cuda", "device to run on (default cpu)"},
        {"--output", "FILE", "write the JSON lines to FILE instead of stdout"},
    },
    1,
    1,
};

struct Generation {
  std::vector<int32_t> outputIds;
  std::string finishReason;
};

int32_t argmax(const float *row, int32_t size) {
  return static_cast<int32_t>(std::max_element(row, row + size) - row);
}

// Greedy decoding of one sequence. Blocks 0.. are the sequence's own (one sequence at a time).
Result<Generation> generateGreedy(rt::Executor &executor, const std::vector<int32_t> &prompt,
                                  int64_t maxTokens, const std::vector<int32_t> &eosIds,
                                  bool ignoreEos) {
  const rt::RunnerLimits &limits = executor.limits();
  if (static_cast<int64_t>(prompt.size()) >= limits.maxSeqLen)
    return outOfRange("the prompt has " + std::to_string(prompt.size()) +
                      " tokens; the artifact was compiled with --max-seq-len " +
                      std::to_string(limits.maxSeqLen) + " (room for the prompt plus one token)");
  int64_t total = std::min<int64_t>(static_cast<int64_t>(prompt.size()) + maxTokens,
                                    limits.maxSeqLen);
  rt::SequenceStep step;
  for (int64_t b = 0; b * limits.blockSize < total; ++b)
    step.blockTable.push_back(static_cast<int32_t>(b));

  Generation generation;
  // Prefill in chunks of at most max_tokens_per_step tokens.
  size_t done = 0;
  const rt::StepOutput *last = nullptr;
  rt::StepOutput output;
  while (done < prompt.size()) {
    size_t chunk = std::min(prompt.size() - done, static_cast<size_t>(limits.maxTokensPerStep));
    step.tokenIds.assign(prompt.begin() + done, prompt.begin() + done + chunk);
    step.startPosition = static_cast<int32_t>(done);
    done += chunk;
    step.logits = done == prompt.size() ? rt::LogitsWanted::kLast : rt::LogitsWanted::kNone;
    KILN_ASSIGN_OR_RETURN(output, executor.execute(rt::StepBatch{{step}}));
    last = &output;
  }
  int64_t position = static_cast<int64_t>(prompt.size());
  while (true) {
    int32_t next = argmax(last->row(0), last->vocabSize);
    generation.outputIds.push_back(next);
    ++position;
    if (!ignoreEos && std::find(eosIds.begin(), eosIds.end(), next) != eosIds.end()) {
      generation.finishReason = "stop";
      break;
    }
    if (static_cast<int64_t>(generation.outputIds.size()) >= maxTokens || position >= total) {
      generation.finishReason = "length";
      break;
    }
    step.tokenIds = {next};
    step.startPosition = static_cast<int32_t>(position - 1);
    step.logits = rt::LogitsWanted::kLast;
    KILN_ASSIGN_OR_RETURN(output, executor.execute(rt::StepBatch{{step}}));
  }
  return generation;
}

std::vector<int32_t> eosIdsOf(const rt::Artifact &artifact) {
  std::vector<int32_t> ids;
  if (const auto *eos = artifact.plan().model()->eos_token_ids())
    ids.assign(eos->begin(), eos->end());
  return ids;
}

Status runGenerate(const Args &args, std::ostream &out) {
  std::optional<std::string> promptIds = args.get("--prompt-ids");
  if (!promptIds)
    return invalidArgument("give the prompt with --prompt-ids \"1 2 3\"");
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, parseIdList(*promptIds, "--prompt-ids"));
  KILN_ASSIGN_OR_RETURN(int64_t maxTokens, args.getInt("--max-tokens", 16, 1, 1 << 24));
  const std::string &dir = args.positionals()[0];
  // One sequence at a time: the KV pool needs room for one prompt plus its output.
  KILN_ASSIGN_OR_RETURN(LoadedModel model,
                        loadModel(dir, args.getOr("--device", "cpu"),
                                  static_cast<int64_t>(prompt.size()) + maxTokens));
  KILN_ASSIGN_OR_RETURN(Generation generation,
                        generateGreedy(*model.executor, prompt, maxTokens,
                                       eosIdsOf(*model.artifact), args.has("--ignore-eos")));
  nlohmann::json line = {{"prompt_ids", prompt},
                         {"output_ids", generation.outputIds},
                         {"text", ""},
                         {"finish_reason", generation.finishReason}};
  out << line.dump() << "\n";
  return okStatus();
}

} // namespace

int runGenerate(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kGenerateSpec, argv);
  if (!args.isOk())
    return reportError("generate", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kGenerateSpec);
    return 0;
  }
  std::ofstream file;
  std::ostream *out = &std::cout;
  if (auto path = args->get("--output")) {
    file.open(*path);
    if (!file)
      return reportError("generate", unavailable("cannot write --output " + *path));
    out = &file;
  }
  Status status = runGenerate(*args, *out);
  if (!status.isOk())
    return reportError("generate", status);
  return 0;
}

} // namespace kiln::tools
