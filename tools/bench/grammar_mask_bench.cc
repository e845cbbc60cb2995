// grammar_mask_bench TOKENIZER_DIR [SCHEMA.json]: how long the structured-output token masks take
// for a real vocabulary (runtime/structured/grammar_automaton.h), at the points of a JSON
// document where the mask differs most: before an object, inside a string (almost every token
// allowed) and inside a number. For each: the matcher's walk of the vocabulary trie over its
// stacks (allowedTokens, what the first version did every step), the automaton's first mask of
// that state (transitions computed on the way) and its cached mask (a lookup).
//
// Then, with the default schema, what a decode step pays: the schema's compile time (JSON schema ->
// grammar -> automaton, once per schema: runtime/structured/grammar_cache.h), and the time per step
// of computing every sequence's mask and advancing it past its token, as the engine does
// (runtime/structured/output_constraint.h, one OutputConstraint per sample), for a batch of 1 and
// of 64 sequences each writing a valid document (varied names, ages and tags) token by token: mean
// and p99 over the steps, once on a new automaton (the schema's first requests: each state's first
// mask is computed then) and once on the warm one. A benchmark, not a test: docs/benchmarks.md
// records its output.
#include "runtime/base/file.h"
#include "runtime/service/text_hooks.h"
#include "runtime/structured/grammar_automaton.h"
#include "runtime/structured/json_schema_grammar.h"
#include "runtime/structured/output_constraint.h"
#include "runtime/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

double millisSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

constexpr const char *kDefaultSchema =
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},)"
    R"("tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","tags"],)"
    R"("additionalProperties":false})";

// Document i of the default schema, as a model would write it.
std::string document(int i) {
  static const char *kNames[] = {"Ada Lovelace", "Grace", "Linus Torvalds", "Mar\u00eda",
                                 "Zhang Wei",    "Olu",   "Jean-Baptiste",  "K"};
  static const char *kTags[] = {"math", "compilers", "kernels", "gpu", "rust", "ops", "ml"};
  std::string tags;
  for (int t = 0; t < i % 4; ++t)
    tags += std::string(t ? ", " : "") + "\"" + kTags[(i + t) % 7] + "\"";
  return std::string("{\"name\": \"") + kNames[i % 8] +
         "\", \"age\": " + std::to_string(17 + i * 7 % 60) + ", \"tags\": [" + tags + "]}";
}

struct StepTimes {
  double mean = 0, p99 = 0;
  size_t steps = 0;
  std::string error; // a document's ids that the grammar refuses
};

// `batch` sequences writing documents 0.. of the schema token by token (each one's ids from the
// tokenizer), every step computing each running sequence's mask and accepting its token; the time
// of each step's masks and advances.
StepTimes decodeSteps(const rt::Tokenizer &tokenizer,
                      const std::shared_ptr<const structured::Grammar> &grammar,
                      const std::shared_ptr<const structured::TokenTrie> &vocab,
                      const std::shared_ptr<structured::GrammarAutomaton> &automaton, int batch) {
  std::vector<std::vector<int32_t>> ids;
  std::vector<structured::OutputConstraint> constraints;
  for (int i = 0; i < batch; ++i) {
    ids.push_back(tokenizer.encode(document(i), false));
    constraints.emplace_back(grammar, vocab, automaton);
  }
  std::vector<double> steps;
  for (size_t step = 0;; ++step) {
    bool any = false;
    const auto t = Clock::now();
    for (int i = 0; i < batch; ++i) {
      if (step >= ids[i].size())
        continue;
      any = true;
      const std::vector<uint8_t> mask = constraints[i].allowedMask({});
      if (!mask[ids[i][step]] || !constraints[i].accept(ids[i][step])) {
        StepTimes refused;
        refused.error = "document " + std::to_string(i) + "'s token " + std::to_string(step) +
                        " is not allowed (a SentencePiece tokenizer's leading space?)";
        return refused;
      }
    }
    if (!any)
      break;
    steps.push_back(millisSince(t));
  }
  StepTimes out;
  out.steps = steps.size();
  for (double s : steps)
    out.mean += s / steps.size();
  std::sort(steps.begin(), steps.end());
  out.p99 = steps[std::min(steps.size() - 1, steps.size() * 99 / 100)];
  return out;
}

// Compile time of the default schema, then decodeSteps cold and warm at batch 1 and 64.
void decodeReport(const rt::Tokenizer &tokenizer,
                  const std::shared_ptr<const structured::TokenTrie> &vocab) {
  const auto t0 = Clock::now();
  Result<std::string> text =
      structured::jsonSchemaToGrammar(nlohmann::ordered_json::parse(kDefaultSchema));
  Result<structured::Grammar> parsed = structured::parseGrammar(*text);
  auto grammar = std::make_shared<const structured::Grammar>(std::move(parsed).value());
  auto automaton = std::make_shared<structured::GrammarAutomaton>(grammar, vocab);
  std::printf("\ndefault schema compiled in %.2f ms\n", millisSince(t0));
  std::printf("%-6s %-5s %6s %14s %14s\n", "batch", "cache", "steps", "mean ms/step",
              "p99 ms/step");
  for (int batch : {1, 64}) {
    auto cold = std::make_shared<structured::GrammarAutomaton>(grammar, vocab);
    const StepTimes first = decodeSteps(tokenizer, grammar, vocab, cold, batch);
    const StepTimes warm = decodeSteps(tokenizer, grammar, vocab, cold, batch);
    if (!first.error.empty()) {
      std::printf("not measured: %s\n", first.error.c_str());
      return;
    }
    for (const auto &[name, times] : {std::pair{"cold", first}, std::pair{"warm", warm}})
      std::printf("%-6d %-5s %6zu %14.3f %14.3f\n", batch, name, times.steps, times.mean,
                  times.p99);
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR [SCHEMA.json]\n", argv[0]);
    return 2;
  }
  Result<rt::Tokenizer> tokenizer = rt::Tokenizer::fromDirectory(argv[1]);
  if (!tokenizer.isOk()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().toString().c_str());
    return 1;
  }
  std::string schemaText = kDefaultSchema;
  if (argc > 2) {
    Result<std::string> file = readFile(argv[2]);
    if (!file.isOk())
      return std::fprintf(stderr, "%s\n", file.status().toString().c_str()), 1;
    schemaText = *file;
  }
  const auto schema = nlohmann::ordered_json::parse(schemaText);
  Result<std::string> text = structured::jsonSchemaToGrammar(schema);
  Result<structured::Grammar> parsed =
      text.isOk() ? structured::parseGrammar(*text) : Result<structured::Grammar>(text.status());
  if (!parsed.isOk())
    return std::fprintf(stderr, "%s\n", parsed.status().toString().c_str()), 1;
  auto grammar = std::make_shared<const structured::Grammar>(std::move(parsed).value());
  const auto t0 = Clock::now();
  auto vocab = rt::tokenVocabulary(*tokenizer);
  std::printf("vocabulary: %zu tokens, trie %zu nodes, built in %.1f ms\n", vocab->vocabSize(),
              vocab->numNodes(), millisSince(t0));
  structured::GrammarAutomaton automaton(grammar, vocab);
  std::printf("%-34s %10s %12s %12s %10s\n", "state (text so far)", "allowed", "stack walk",
              "first mask", "cached");
  for (const char *prefix :
       {"", "{\"name\": \"", "{\"name\": \"ab", "{\"name\": \"ab\", \"age\": 1"}) {
    structured::GrammarMatcher matcher(grammar);
    if (!matcher.acceptBytes(prefix)) {
      std::printf("%-34s not a prefix of this schema's documents\n", prefix);
      continue;
    }
    auto t = Clock::now();
    const std::vector<uint8_t> walked = structured::allowedTokens(matcher, *vocab);
    const double walk = millisSince(t);
    t = Clock::now();
    automaton.allowedTokens(matcher.stacks());
    const double first = millisSince(t);
    t = Clock::now();
    const std::vector<uint8_t> &cached = automaton.allowedTokens(matcher.stacks());
    const double again = millisSince(t);
    size_t allowed = 0;
    for (uint8_t a : cached)
      allowed += a;
    std::printf("%-34s %10zu %9.2f ms %9.2f ms %7.3f ms%s\n",
                ("'" + std::string(prefix) + "'").c_str(), allowed, walk, first, again,
                walked == cached ? "" : "  MISMATCH");
  }
  decodeReport(*tokenizer, vocab);
  return 0;
}
