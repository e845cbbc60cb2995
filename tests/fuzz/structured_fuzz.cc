// The structured-output compilers (runtime/structured): the first byte of an input picks what the
// rest is, as a client sends it: 'g' grammar text (guided_grammar), 'r' a regular expression
// (guided_regex), 'j' a JSON schema (response_format / guided_json), anything else: 'g'. A text
// that compiles is then run over its own bytes by the matcher, and a mask is taken over a small
// vocabulary at every step.
//
// Invariants: a regex or schema that converts gives grammar text that parses (the converters
// emit only what grammar.h accepts); the mask cache agrees with the matcher's walk; a refused
// byte leaves the matcher's state as it was.
#include "runtime/structured/grammar_automaton.h"
#include "runtime/structured/json_schema_grammar.h"
#include "runtime/structured/regex_grammar.h"
#include "tests/fuzz/fuzz_util.h"

#include <nlohmann/json.hpp>

#include <string>

namespace {

using namespace kiln;
using namespace kiln::structured;

Result<std::string> grammarText(char kind, std::string_view rest) {
  if (kind == 'r')
    return regexToGrammar(rest);
  if (kind == 'j') {
    const auto schema = nlohmann::ordered_json::parse(rest, nullptr, false);
    if (schema.is_discarded())
      return invalidArgument("not JSON");
    return jsonSchemaToGrammar(schema);
  }
  return std::string(rest);
}

void runOverBytes(const std::shared_ptr<const Grammar> &grammar, std::string_view bytes) {
  static const auto vocab = std::make_shared<const TokenTrie>(std::vector<std::string>{
      "", "{", "}", "\"", "a", "ab", "1", ",", " ", "\xC3", "\xA9", "\xC3\xA9", "[", "]"});
  GrammarAutomaton automaton(grammar, vocab);
  GrammarMatcher matcher(grammar);
  for (size_t i = 0; i < bytes.size() && i < 64; ++i) {
    KILN_FUZZ_CHECK(automaton.allowedTokens(matcher.stacks()) == allowedTokens(matcher, *vocab),
                    "mask cache differs from the matcher's walk");
    const std::vector<GrammarStack> before = matcher.stacks();
    if (!matcher.acceptByte(static_cast<uint8_t>(bytes[i])))
      KILN_FUZZ_CHECK(matcher.stacks() == before, "a refused byte changed the matcher");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0 || size > 4096)
    return 0;
  const char kind = static_cast<char>(data[0]);
  const std::string_view rest(reinterpret_cast<const char *>(data) + 1, size - 1);
  Result<std::string> text = grammarText(kind, rest);
  if (!text.isOk())
    return 0;
  Result<Grammar> grammar = parseGrammar(*text);
  if (kind == 'r' || kind == 'j')
    KILN_FUZZ_CHECK(grammar.isOk(), "converted text does not parse: " +
                                        (grammar.isOk() ? std::string() : grammar.status().message()));
  if (!grammar.isOk())
    return 0;
  runOverBytes(std::make_shared<const Grammar>(std::move(grammar).value()), rest);
  return 0;
}
