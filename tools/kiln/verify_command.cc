// `kiln verify ARTIFACT --golden GOLDEN.json`: runs every golden case through the executor
// (teacher-forced) and exits 0 only when every id matches and every logit is within tolerance;
// otherwise prints where it differs and exits 1 (a regression). Anything that keeps the check
// from running (bad flags, a missing or unreadable golden, an artifact that does not load or does
// not fit the golden) exits 2, so a CI gate can tell a regression from a broken setup.
// `--write GOLDEN.json` records this artifact's greedy ids and top-k logits as a golden instead.
#include "runtime/store/embed_verify.h"
#include "runtime/store/verify.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <optional>

namespace kiln::tools {
namespace {

const CommandSpec kVerifySpec = {
    "verify",
    "ARTIFACT (--golden GOLDEN.json | --write GOLDEN.json) [options]",
    "Check an artifact's outputs against a golden: every case's prompt, then its expected ids\n"
    "fed one at a time (teacher-forced, deterministic). Exit 0 only when every greedy id matches\n"
    "and every stored logit is within the golden's tolerance; otherwise print the first\n"
    "differing position and the largest logit difference, and exit 1.\n"
    "Exit codes: 0 pass; 1 regression (an id or a logit differs); 2 error (bad flags, a missing\n"
    "or unreadable golden, an artifact that does not load or does not match the golden's\n"
    "vocabulary or length).\n"
    "Goldens: written by --write, by tools/goldens/make_verify_golden.py from transformers for\n"
    "your own model, or the transformers goldens of tests/data/golden (fp32, bf16, fp16).\n"
    "An embedding model checks against an embedding golden (tests/data/golden/*.embed.json,\n"
    "tools/goldens/make_encoder_goldens.py): every case's last hidden states and pooled vector\n"
    "within the golden's tolerances, same exit codes.\n"
    "Where a golden records top-2 margins, an id whose margin is <= 2 x tolerance (a near tie)\n"
    "is not compared; its logits are. See docs/verify.md.",
    {
        {"--golden", "FILE", "the golden to check against"},
        {"--write", "FILE", "record this artifact's outputs as a golden instead"},
        {"--prompt-ids", "IDS", "--write: prompts as ids, ';' between prompts (\"1 5 9; 1 7\")"},
        {"--input", "FILE", "--write: JSON lines with {\"prompt_ids\": [...]} per prompt"},
        {"--max-tokens", "N", "--write: greedy ids recorded per prompt (default 16)"},
        {"--top-k", "K", "--write: logits kept per position, 0 = all (default 16)"},
        {"--tolerance", "T",
         "max |logit difference| (an embedding golden: hidden state and pooled difference): "
         "--write records it (default 1e-4); --golden: instead of the golden's"},
        {"--device", "cpu|cuda|cuda:N", "device to run on (default cpu; cuda is cuda:0)"},
        {"--devices", "0,1,...",
         "CUDA GPU of each tensor-parallel rank (default 0..tp-1); "
         "a repeated GPU is shared"},
    },
    1,
    1,
};

// Exit codes (docs/verify.md): 1 is reserved for a regression, so every error is 2.
constexpr int kExitRegression = 1;
constexpr int kExitError = 2;

int verifyError(const Status &status) {
  reportError("verify", status);
  return kExitError;
}

Result<std::vector<std::vector<int32_t>>> promptsFromFlags(const Args &args) {
  std::vector<std::vector<int32_t>> prompts;
  if (auto text = args.get("--prompt-ids")) {
    size_t start = 0;
    while (start <= text->size()) {
      size_t end = text->find(';', start);
      std::string part = text->substr(start, end == std::string::npos ? end : end - start);
      KILN_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parseIdList(part, "--prompt-ids"));
      prompts.push_back(std::move(ids));
      if (end == std::string::npos)
        break;
      start = end + 1;
    }
  }
  if (auto path = args.get("--input")) {
    std::ifstream in(*path);
    if (!in)
      return notFound("--input: cannot open '" + *path + "'");
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos)
        continue;
      nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
      if (json.is_discarded() || !json.is_object() || !json.contains("prompt_ids") ||
          !json["prompt_ids"].is_array())
        return invalidArgument("--input " + *path + " line " + std::to_string(number) +
                               ": expected {\"prompt_ids\": [...]}");
      std::vector<int32_t> ids;
      for (const auto &v : json["prompt_ids"]) {
        if (!v.is_number_integer())
          return invalidArgument("--input " + *path + " line " + std::to_string(number) +
                                 ": field 'prompt_ids' holds a non-integer");
        ids.push_back(v.get<int32_t>());
      }
      prompts.push_back(std::move(ids));
    }
  }
  return prompts;
}

// --device and --devices (which alone means cuda).
Status placementFromFlags(const Args &args, std::string &device, std::vector<int> &devices) {
  device = args.getOr("--device", args.has("--devices") ? "cuda" : "cpu");
  if (auto list = args.get("--devices")) {
    KILN_ASSIGN_OR_RETURN(devices, parseDeviceList(*list, "--devices"));
  }
  return okStatus();
}

int writeGoldenFile(const Args &args, const std::string &artifact, const std::string &out) {
  rt::RecordOptions options;
  Result<std::vector<std::vector<int32_t>>> prompts = promptsFromFlags(args);
  if (!prompts.isOk())
    return verifyError(prompts.status());
  options.prompts = std::move(prompts).value();
  Result<int64_t> maxTokens = args.getInt("--max-tokens", 16, 1, 1 << 20);
  Result<int64_t> topK = args.getInt("--top-k", 16, 0, 1 << 24);
  Result<double> tolerance = args.getDouble("--tolerance", 1e-4, 0.0, 1e6);
  for (const Status &s : {maxTokens.status(), topK.status(), tolerance.status()})
    if (!s.isOk())
      return verifyError(s);
  options.maxTokens = int32_t(*maxTokens);
  options.topK = int32_t(*topK);
  options.tolerance = float(*tolerance);
  Status placed = placementFromFlags(args, options.device, options.devices);
  if (!placed.isOk())
    return verifyError(placed);
  Result<rt::VerifyGolden> golden = rt::recordGolden(artifact, options);
  if (!golden.isOk())
    return verifyError(golden.status());
  Status status = rt::writeGolden(*golden, out);
  if (!status.isOk())
    return verifyError(status);
  std::cerr << "verify: wrote " << out << " (" << golden->cases.size() << " cases, "
            << options.maxTokens << " ids each)\n";
  return 0;
}

// --golden's --tolerance, when given: it replaces the golden's.
Result<std::optional<float>> toleranceOverride(const Args &args) {
  if (!args.has("--tolerance"))
    return std::optional<float>();
  KILN_ASSIGN_OR_RETURN(double tolerance, args.getDouble("--tolerance", 0.0, 0.0, 1e6));
  return std::optional<float>(float(tolerance));
}

// An embedding golden (rt::isEmbedGoldenFile): hidden states and pooled vectors.
int verifyEmbeddingGolden(const Args &args, const std::string &artifact, const std::string &path) {
  Result<rt::EmbedGolden> golden = rt::readEmbedGolden(path);
  if (!golden.isOk())
    return verifyError(golden.status());
  Result<std::optional<float>> tolerance = toleranceOverride(args);
  if (!tolerance.isOk())
    return verifyError(tolerance.status());
  if (*tolerance)
    golden->hiddenTolerance = golden->pooledTolerance = **tolerance;
  rt::VerifyOptions options;
  Status placed = placementFromFlags(args, options.device, options.devices);
  if (!placed.isOk())
    return verifyError(placed);
  Result<rt::EmbedVerifyReport> report = rt::verifyEmbeddings(artifact, *golden, options);
  if (!report.isOk())
    return verifyError(report.status());
  std::cout << report->text();
  return report->passed() ? 0 : kExitRegression;
}

} // namespace

int runVerify(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kVerifySpec, argv);
  if (!args.isOk())
    return verifyError(args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kVerifySpec);
    return 0;
  }
  const std::string &artifact = args->positionals()[0];
  if (args->has("--golden") == args->has("--write"))
    return verifyError(invalidArgument("give exactly one of --golden FILE or --write FILE"));
  if (args->has("--write"))
    return writeGoldenFile(*args, artifact, *args->get("--write"));
  if (rt::isEmbedGoldenFile(*args->get("--golden")))
    return verifyEmbeddingGolden(*args, artifact, *args->get("--golden"));
  Result<rt::VerifyGolden> golden = rt::readGolden(*args->get("--golden"));
  if (!golden.isOk())
    return verifyError(golden.status());
  Result<std::optional<float>> tolerance = toleranceOverride(*args);
  if (!tolerance.isOk())
    return verifyError(tolerance.status());
  if (*tolerance) {
    golden->logitsTolerance = **tolerance;
    golden->toleranceNote.clear();
  }
  if (!golden->toleranceNote.empty())
    std::cerr << "verify: tolerance " << golden->logitsTolerance << " (" << golden->toleranceNote
              << "; --tolerance overrides)\n";
  rt::VerifyOptions options;
  Status placed = placementFromFlags(*args, options.device, options.devices);
  if (!placed.isOk())
    return verifyError(placed);
  Result<rt::VerifyReport> report = rt::verifyArtifact(artifact, *golden, options);
  if (!report.isOk())
    return verifyError(report.status());
  std::cout << report->text();
  return report->passed() ? 0 : kExitRegression;
}

} // namespace kiln::tools
