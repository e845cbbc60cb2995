// `kiln generate ARTIFACT (--prompt TEXT | --prompt-ids IDS | --chat TEXT | --input FILE)`: runs
// every prompt through the engine concurrently (continuous batching) and prints one JSON line per
// prompt, in input order: {"prompt_ids":[...],"output_ids":[...],"text":"...","finish_reason":".."}.
#include "runtime/service/serving_model.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/generate_input.h"

#include <chrono>
#include <fstream>
#include <iostream>

namespace kiln::tools {
namespace {

const CommandSpec kGenerateSpec = {
    "generate",
    "ARTIFACT (--prompt TEXT | --prompt-ids IDS | --chat TEXT | --input FILE) [options]",
    "Generate from a compiled artifact. All prompts run through the engine concurrently; one JSON\n"
    "line per prompt is printed in input order:\n"
    "{\"prompt_ids\":[...],\"output_ids\":[...],\"text\":\"...\",\"finish_reason\":\"...\"}\n"
    "--input lines: {\"prompt\": \"...\"} | {\"prompt_ids\": [...]} | {\"messages\": [...]} plus\n"
    "optional per-request fields (max_tokens, temperature, top_k, top_p, min_p, seed, stop, ...).",
    {
        {"--prompt", "TEXT", "prompt text, encoded with the artifact's tokenizer"},
        {"--prompt-ids", "IDS", "prompt token ids, separated by spaces or commas"},
        {"--chat", "TEXT", "one user message, rendered with the artifact's chat template"},
        {"--input", "FILE", "JSON lines, one request each ('-' reads stdin)"},
        {"--max-tokens", "N", "tokens to generate per prompt (default 16)"},
        {"--temperature", "T", "sampling temperature (default 0: greedy)"},
        {"--top-k", "K", "sample from the K most likely tokens (default off)"},
        {"--top-p", "P", "nucleus sampling probability mass (default 1: off)"},
        {"--min-p", "P", "drop tokens below P x the top probability (default 0: off)"},
        {"--seed", "S", "per-request random seed (reproducible whatever else runs)"},
        {"--stop", "TEXT", "a stop string (not included in the output)"},
        {"--ignore-eos", "", "keep generating after an eos token"},
        {"--device", "cpu|cuda|cuda:N", "device to run on (default cpu; cuda is cuda:0)"},
        {"--devices", "0,1,...",
         "CUDA GPU of each tensor-parallel rank (default 0..tp-1); a repeated GPU is shared"},
        {"--kv-cache-mb", "N", "KV cache size in MiB (default 256 on cpu)"},
        {"--gpu-memory-utilization", "F",
         "on cuda, the KV cache fills each GPU up to this fraction, in (0, 1] (default 0.9)"},
        {"--chat-template", "FILE", "Jinja chat template overriding the artifact's"},
        {"--output", "FILE", "write the JSON lines to FILE instead of stdout"},
    },
    1,
    1,
};

Result<rt::SamplingParams> samplingFromFlags(const Args &args) {
  rt::SamplingParams params;
  KILN_ASSIGN_OR_RETURN(int64_t maxTokens, args.getInt("--max-tokens", 16, 1, 1 << 24));
  params.maxTokens = static_cast<int32_t>(maxTokens);
  KILN_ASSIGN_OR_RETURN(double temperature, args.getDouble("--temperature", 0.0, 0.0, 100.0));
  params.temperature = static_cast<float>(temperature);
  KILN_ASSIGN_OR_RETURN(int64_t topK, args.getInt("--top-k", 0, 0, INT32_MAX));
  params.topK = static_cast<int32_t>(topK);
  KILN_ASSIGN_OR_RETURN(double topP, args.getDouble("--top-p", 1.0, 1e-9, 1.0));
  params.topP = static_cast<float>(topP);
  KILN_ASSIGN_OR_RETURN(double minP, args.getDouble("--min-p", 0.0, 0.0, 1.0));
  params.minP = static_cast<float>(minP);
  if (args.has("--seed")) {
    KILN_ASSIGN_OR_RETURN(int64_t seed, args.getInt("--seed", 0, 0, INT64_MAX));
    params.seed = static_cast<uint64_t>(seed);
  }
  if (auto stop = args.get("--stop"))
    params.stop = {*stop};
  params.ignoreEos = args.has("--ignore-eos");
  return params;
}

Result<std::vector<GenerateJob>> readInputFile(const std::string &path,
                                               const rt::SamplingParams &defaults) {
  std::ifstream file;
  std::istream *in = &std::cin;
  if (path != "-") {
    file.open(path);
    if (!file)
      return notFound("cannot read --input " + path);
    in = &file;
  }
  std::vector<GenerateJob> jobs;
  std::string line;
  for (int number = 1; std::getline(*in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    KILN_ASSIGN_OR_RETURN(GenerateJob job, jobFromJsonLine(line, number, defaults));
    jobs.push_back(std::move(job));
  }
  if (jobs.empty())
    return invalidArgument("--input " + path + " holds no requests");
  return jobs;
}

Result<std::vector<GenerateJob>> jobsFromArgs(const Args &args) {
  KILN_ASSIGN_OR_RETURN(rt::SamplingParams defaults, samplingFromFlags(args));
  int sources = args.has("--prompt") + args.has("--prompt-ids") + args.has("--chat") +
                args.has("--input");
  if (sources != 1)
    return invalidArgument("give exactly one of --prompt, --prompt-ids, --chat, --input");
  if (auto input = args.get("--input"))
    return readInputFile(*input, defaults);
  GenerateJob job;
  job.sampling = defaults;
  if (auto text = args.get("--prompt"))
    job.prompt = *text;
  if (auto ids = args.get("--prompt-ids")) {
    KILN_ASSIGN_OR_RETURN(std::vector<int32_t> parsed, parseIdList(*ids, "--prompt-ids"));
    job.promptIds = std::move(parsed);
  }
  if (auto chat = args.get("--chat"))
    job.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", *chat}}});
  return std::vector<GenerateJob>{std::move(job)};
}

Result<std::vector<int32_t>> promptIdsOf(const rt::ServingModel &model, const GenerateJob &job) {
  if (job.promptIds)
    return *job.promptIds;
  if (job.prompt)
    return model.encodePrompt(*job.prompt);
  return model.encodeChat(*job.messages, /*addGenerationPrompt=*/true);
}

// One submitted job: its handle, or the error that kept it from being submitted.
struct Submitted {
  std::vector<int32_t> promptIds;
  std::optional<rt::RequestHandle> handle;
  Status error;
};

nlohmann::ordered_json collect(Submitted &submitted, int64_t &generatedTokens) {
  nlohmann::ordered_json line = {{"prompt_ids", submitted.promptIds}};
  if (!submitted.handle) {
    line["error"] = submitted.error.message();
    return line;
  }
  std::vector<int32_t> outputIds;
  std::string text;
  std::string finishReason;
  while (std::optional<rt::RequestOutput> output = submitted.handle->stream->next()) {
    outputIds.insert(outputIds.end(), output->tokenIds.begin(), output->tokenIds.end());
    text += output->text;
    if (output->finishReason != rt::FinishReason::kNone)
      finishReason = rt::finishReasonName(output->finishReason);
    if (output->finishReason == rt::FinishReason::kError)
      line["error"] = output->error.message();
  }
  generatedTokens += static_cast<int64_t>(outputIds.size());
  line["output_ids"] = outputIds;
  line["text"] = text;
  line["finish_reason"] = finishReason;
  return line;
}

Result<rt::ServingOptions> servingOptionsFrom(const Args &args) {
  rt::ServingOptions options;
  options.device = args.getOr("--device", args.has("--devices") ? "cuda" : "cpu");
  if (auto devices = args.get("--devices")) {
    KILN_ASSIGN_OR_RETURN(options.devices, parseDeviceList(*devices, "--devices"));
  }
  // 0 when absent: ServingModel picks 256 MiB on cpu, --gpu-memory-utilization on cuda.
  KILN_ASSIGN_OR_RETURN(int64_t kvMiB, args.getInt("--kv-cache-mb", 0, 1, 1 << 30));
  options.kvCacheBytes = static_cast<size_t>(kvMiB) << 20;
  KILN_ASSIGN_OR_RETURN(options.gpuMemoryUtilization, args.getFraction("--gpu-memory-utilization"));
  options.log = [](const std::string &line) { std::cerr << "kiln generate: " << line << "\n"; };
  if (auto path = args.get("--chat-template")) {
    std::ifstream file(*path);
    if (!file)
      return notFound("cannot read --chat-template " + *path);
    options.chatTemplate.assign(std::istreambuf_iterator<char>(file), {});
  }
  return options;
}

// Returns the number of failed requests.
Result<int> runGenerate(const Args &args, std::ostream &out) {
  KILN_ASSIGN_OR_RETURN(std::vector<GenerateJob> jobs, jobsFromArgs(args));
  KILN_ASSIGN_OR_RETURN(rt::ServingOptions options, servingOptionsFrom(args));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<rt::ServingModel> model,
                        rt::ServingModel::open(args.positionals()[0], options));
  auto start = std::chrono::steady_clock::now();
  std::vector<Submitted> submitted(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    Result<std::vector<int32_t>> ids = promptIdsOf(*model, jobs[i]);
    if (!ids.isOk()) {
      submitted[i].error = ids.status();
      continue;
    }
    submitted[i].promptIds = *ids;
    Result<rt::RequestHandle> handle = model->engine().submit({*ids, jobs[i].sampling});
    if (handle.isOk())
      submitted[i].handle = std::move(*handle);
    else
      submitted[i].error = handle.status();
  }
  int failures = 0;
  int64_t generated = 0;
  for (Submitted &s : submitted) {
    nlohmann::ordered_json line = collect(s, generated);
    if (line.contains("error")) {
      ++failures;
      std::cerr << "kiln generate: error: " << line["error"].get<std::string>() << "\n";
    }
    out << line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (jobs.size() > 1)
    std::cerr << "kiln generate: " << jobs.size() << " requests, " << generated
              << " tokens generated in " << seconds << " s (" << generated / seconds
              << " tokens/s)\n";
  return failures;
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
  Result<int> failures = runGenerate(*args, *out);
  if (!failures.isOk())
    return reportError("generate", failures.status());
  return *failures == 0 ? 0 : 1;
}

} // namespace kiln::tools
