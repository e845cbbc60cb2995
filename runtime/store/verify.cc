#include "runtime/store/verify.h"

#include "runtime/store/verify_load.h"
#include "schema/version.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

namespace kiln::rt {
namespace {

int32_t argmax(const float *row, int32_t size) {
  return int32_t(std::max_element(row, row + size) - row);
}

// Logits of every position of `tokens` (rows [0, tokens.size())), fed as prompt chunks of at most
// max_tokens_per_step and then the rest one token at a time, as decode steps.
Result<std::vector<float>> teacherForced(ModelRunner &executor, const std::vector<int32_t> &tokens,
                                         size_t promptLength) {
  const RunnerLimits &limits = executor.limits();
  SequenceStep step;
  step.blockTables =
      ownBlockTables(limits, 0, (int32_t(tokens.size()) + limits.blockSize - 1) / limits.blockSize);
  std::vector<float> logits;
  size_t position = 0;
  while (position < tokens.size()) {
    size_t chunk = position < promptLength
                       ? std::min(promptLength - position, size_t(limits.maxTokensPerStep))
                       : 1;
    step.tokenIds.assign(tokens.begin() + position, tokens.begin() + position + chunk);
    step.startPosition = int32_t(position);
    step.logits = LogitsWanted::kAll;
    // The whole prompt is known while any chunk of it is prefilled (plan.fbs SequenceLengths).
    step.sequenceLength = int32_t(std::max(promptLength, position + chunk));
    KILN_ASSIGN_OR_RETURN(StepOutput output, executor.execute(StepBatch{{step}}));
    logits.insert(logits.end(), output.logits.begin(), output.logits.end());
    position += chunk;
  }
  return logits;
}

CaseVerdict compareCase(const GoldenCase &c, const std::vector<float> &logits, int32_t vocab,
                        float tolerance) {
  CaseVerdict verdict;
  verdict.name = c.name;
  verdict.expectedIds = c.expectedIds;
  size_t prompt = c.promptIds.size();
  for (size_t k = 0; k < c.expectedIds.size(); ++k) {
    int32_t got = argmax(logits.data() + (prompt - 1 + k) * vocab, vocab);
    verdict.gotIds.push_back(got);
    if (got == c.expectedIds[k])
      continue;
    // Either logit of a near tie may move by the tolerance: the id is not compared (its row is).
    if (k < c.greedyMargins.size() && c.greedyMargins[k] <= 2 * tolerance) {
      ++verdict.nearTieDiffering;
      continue;
    }
    ++verdict.differingIds;
    if (verdict.idsMatch) {
      verdict.idsMatch = false;
      verdict.firstDifferingIndex = int32_t(k);
      verdict.expectedId = c.expectedIds[k];
      verdict.gotId = got;
    }
  }
  for (const GoldenRow &row : c.rows) {
    const float *got = logits.data() + size_t(row.position) * vocab;
    for (size_t i = 0; i < row.values.size(); ++i) {
      int32_t id = row.ids.empty() ? int32_t(i) : row.ids[i];
      float diff = std::fabs(got[id] - row.values[i]);
      if (std::isnan(diff))
        diff = INFINITY;
      if (diff > verdict.maxLogitDiff || verdict.maxDiffPosition < 0) {
        verdict.maxLogitDiff = diff;
        verdict.maxDiffPosition = row.position;
        verdict.maxDiffTokenId = id;
        verdict.maxDiffExpected = row.values[i];
        verdict.maxDiffGot = got[id];
      }
    }
  }
  verdict.logitsWithinTolerance = verdict.maxLogitDiff <= tolerance;
  return verdict;
}

std::string idsAround(const std::vector<int32_t> &ids, int32_t at) {
  int32_t from = std::max(0, at - 3), to = std::min(int32_t(ids.size()), at + 4);
  std::string out = from > 0 ? "[... " : "[";
  for (int32_t i = from; i < to; ++i)
    out += (i > from ? " " : "") + std::string(i == at ? ">" : "") + std::to_string(ids[i]) +
           (i == at ? "<" : "");
  return out + (to < int32_t(ids.size()) ? " ...]" : "]");
}

std::string formatFloat(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", value);
  return buffer;
}

std::string formatLogit(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6f", value);
  return buffer;
}

} // namespace

bool VerifyReport::passed() const {
  return std::all_of(cases.begin(), cases.end(), [](const CaseVerdict &c) { return c.passed(); });
}

std::string VerifyReport::text() const {
  std::string out;
  int failed = 0;
  for (const CaseVerdict &c : cases) {
    std::string ids = std::to_string(c.gotIds.size()) + " ids" +
                      (!c.idsMatch               ? ", " + std::to_string(c.differingIds) + " differ"
                       : c.nearTieDiffering == 0 ? " match"
                                                 : ", all compared ids match");
    if (c.nearTieDiffering > 0)
      ids += " (" + std::to_string(c.nearTieDiffering) +
             (c.nearTieDiffering == 1 ? " near-tie id differs" : " near-tie ids differ") +
             ": top-2 margin <= 2 x tolerance, not compared)";
    out += "case '" + c.name + "': " + (c.passed() ? "ok" : "FAIL") + ", " + ids +
           ", max logit diff " + formatFloat(c.maxLogitDiff) +
           (c.logitsWithinTolerance ? " <= " : " > ") + "tolerance " + formatFloat(tolerance) +
           "\n";
    if (!c.passed())
      ++failed;
    if (!c.idsMatch)
      out += "  first differing id at output index " + std::to_string(c.firstDifferingIndex) +
             ": expected " + std::to_string(c.expectedId) + ", got " + std::to_string(c.gotId) +
             "\n  expected " + idsAround(c.expectedIds, c.firstDifferingIndex) + "\n  got      " +
             idsAround(c.gotIds, c.firstDifferingIndex) + "\n";
    if (!c.logitsWithinTolerance)
      out += "  max logit diff at position " + std::to_string(c.maxDiffPosition) + ", token " +
             std::to_string(c.maxDiffTokenId) + ": expected " + formatLogit(c.maxDiffExpected) +
             ", got " + formatLogit(c.maxDiffGot) + "\n";
  }
  out += passed() ? "verify: PASS (" + std::to_string(cases.size()) + " cases)\n"
                  : "verify: FAIL (" + std::to_string(failed) + " of " +
                        std::to_string(cases.size()) + " cases differ)\n";
  return out;
}

Result<VerifyReport> verifyArtifact(const std::string &artifactDir, const VerifyGolden &golden,
                                    const VerifyOptions &options) {
  int32_t longest = 0;
  for (const GoldenCase &c : golden.cases)
    longest = std::max(longest, int32_t(c.promptIds.size() + c.expectedIds.size()));
  KILN_ASSIGN_OR_RETURN(VerifyLoaded loaded,
                        loadForVerify(artifactDir, options.device, options.devices, longest));
  int32_t vocab = loaded.runner->limits().vocabSize;
  if (vocab != golden.vocabSize)
    return invalidArgument("the golden's vocab_size is " + std::to_string(golden.vocabSize) +
                           " but the artifact's is " + std::to_string(vocab) +
                           ": the golden is for another model");
  VerifyReport report;
  report.tolerance = golden.logitsTolerance;
  for (const GoldenCase &c : golden.cases) {
    std::vector<int32_t> tokens = c.promptIds;
    tokens.insert(tokens.end(), c.expectedIds.begin(), c.expectedIds.end());
    KILN_ASSIGN_OR_RETURN(std::vector<float> logits,
                          teacherForced(*loaded.runner, tokens, c.promptIds.size()));
    report.cases.push_back(compareCase(c, logits, vocab, golden.logitsTolerance));
  }
  return report;
}

namespace {

GoldenRow topKRow(const float *row, int32_t vocab, int32_t position, int32_t topK) {
  GoldenRow out;
  out.position = position;
  if (topK <= 0 || topK >= vocab) {
    out.values.assign(row, row + vocab);
    return out;
  }
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + topK, order.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  for (int32_t i = 0; i < topK; ++i) {
    out.ids.push_back(order[size_t(i)]);
    out.values.push_back(row[order[size_t(i)]]);
  }
  return out;
}

// Greedy decoding of one prompt, recording the ids and each predicting row.
Result<GoldenCase> recordCase(ModelRunner &executor, const std::vector<int32_t> &prompt,
                              const RecordOptions &options) {
  const RunnerLimits &limits = executor.limits();
  GoldenCase c;
  c.promptIds = prompt;
  SequenceStep step;
  int32_t total = int32_t(prompt.size()) + options.maxTokens;
  step.blockTables = ownBlockTables(limits, 0, (total + limits.blockSize - 1) / limits.blockSize);
  std::vector<float> last;
  for (size_t position = 0; position < prompt.size();) {
    size_t chunk = std::min(prompt.size() - position, size_t(limits.maxTokensPerStep));
    step.tokenIds.assign(prompt.begin() + position, prompt.begin() + position + chunk);
    step.startPosition = int32_t(position);
    step.logits = LogitsWanted::kLast;
    step.sequenceLength = int32_t(prompt.size());
    KILN_ASSIGN_OR_RETURN(StepOutput output, executor.execute(StepBatch{{step}}));
    last = std::move(output.logits);
    position += chunk;
  }
  for (int32_t k = 0; k < options.maxTokens; ++k) {
    int32_t position = int32_t(prompt.size()) + k - 1;
    c.rows.push_back(topKRow(last.data(), limits.vocabSize, position, options.topK));
    int32_t next = argmax(last.data(), limits.vocabSize);
    c.expectedIds.push_back(next);
    if (k + 1 == options.maxTokens)
      break;
    step.tokenIds = {next};
    step.startPosition = position + 1;
    step.sequenceLength = 0;
    KILN_ASSIGN_OR_RETURN(StepOutput output, executor.execute(StepBatch{{step}}));
    last = std::move(output.logits);
  }
  return c;
}

} // namespace

Result<VerifyGolden> recordGolden(const std::string &artifactDir, const RecordOptions &options) {
  if (options.maxTokens < 1)
    return invalidArgument("--max-tokens must be at least 1");
  if (!(options.tolerance >= 0))
    return invalidArgument("--tolerance must be a non-negative number");
  std::vector<std::vector<int32_t>> prompts = options.prompts;
  int32_t longest = 1 + options.maxTokens;
  for (const auto &p : prompts) {
    if (p.empty())
      return invalidArgument("a prompt to record is empty");
    longest = std::max(longest, int32_t(p.size()) + options.maxTokens);
  }
  KILN_ASSIGN_OR_RETURN(VerifyLoaded loaded,
                        loadForVerify(artifactDir, options.device, options.devices, longest));
  const schema::ModelInfo &model = *loaded.artifact->plan().model();
  if (prompts.empty())
    prompts.push_back({model.bos_token_id() >= 0 ? model.bos_token_id() : 0});
  int32_t vocab = loaded.runner->limits().vocabSize;
  VerifyGolden golden;
  std::filesystem::path dir(artifactDir);
  golden.model = (dir.has_filename() ? dir : dir.parent_path()).stem().string();
  golden.vocabSize = vocab;
  golden.logitsTolerance = options.tolerance;
  golden.topK = options.topK;
  golden.generator = std::string("{\"tool\": \"kiln verify --write\", \"kiln_version\": \"") +
                     kKilnVersion + "\", \"device\": \"" + options.device + "\"}";
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int32_t id : prompts[i])
      if (id < 0 || id >= vocab)
        return invalidArgument("prompt " + std::to_string(i) + ": token id " + std::to_string(id) +
                               " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    KILN_ASSIGN_OR_RETURN(GoldenCase c, recordCase(*loaded.runner, prompts[i], options));
    c.name = "case" + std::to_string(i);
    golden.cases.push_back(std::move(c));
  }
  return golden;
}

} // namespace kiln::rt
