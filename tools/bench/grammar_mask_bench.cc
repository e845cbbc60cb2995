// grammar_mask_bench TOKENIZER_DIR [SCHEMA.json]: how long the structured-output token masks take
// for a real vocabulary (runtime/structured/grammar_automaton.h), at the points of a JSON
// document where the mask differs most: before an object, inside a string (almost every token
// allowed) and inside a number. For each: the matcher's walk of the vocabulary trie over its
// stacks (allowedTokens, what the first version did every step), the automaton's first mask of
// that state (transitions computed on the way) and its cached mask (a lookup). A benchmark, not a
// test: docs/benchmarks.md records its output.
#include "runtime/base/file.h"
#include "runtime/service/text_hooks.h"
#include "runtime/structured/grammar_automaton.h"
#include "runtime/structured/json_schema_grammar.h"
#include "runtime/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <string>

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
              vocab->nodes().size(), millisSince(t0));
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
  return 0;
}
