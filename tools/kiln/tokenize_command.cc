// `kiln tokenize TOKENIZER (--text T | stdin) [--decode] [--no-special]`: ids, space-separated.
// TOKENIZER is a tokenizer.json file or a directory holding one (a model dir or an artifact).
// stdin is taken byte for byte (no newline stripped).
#include "runtime/text/tokenizer.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <filesystem>
#include <iostream>
#include <iterator>

namespace kiln::tools {
namespace {

const CommandSpec kTokenizeSpec = {
    "tokenize",
    "TOKENIZER [--text TEXT] [--decode] [--no-special]",
    "Encode text (from --text, else all of stdin, byte for byte) into token ids printed on one\n"
    "line, or with --decode turn ids into text. TOKENIZER is a tokenizer.json file or a directory\n"
    "holding one, with tokenizer_config.json / special_tokens_map.json beside it when present.",
    {
        {"--text", "TEXT", "the input (default: read stdin)"},
        {"--decode", "", "the input is token ids; print their text"},
        {"--no-special", "", "encode without BOS/EOS; decode without special tokens"},
    },
    1,
    1,
};

Result<rt::Tokenizer> loadTokenizer(const std::string &path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path))
    return rt::Tokenizer::fromDirectory(path);
  fs::path dir = fs::path(path).parent_path();
  auto sibling = [&](const char *name) {
    fs::path p = dir / name;
    return fs::exists(p) ? p.string() : std::string();
  };
  return rt::Tokenizer::fromFiles(path, sibling("tokenizer_config.json"),
                                  sibling("special_tokens_map.json"));
}

Status runTokenize(const Args &args) {
  KILN_ASSIGN_OR_RETURN(rt::Tokenizer tokenizer, loadTokenizer(args.positionals()[0]));
  std::string input;
  if (auto text = args.get("--text"))
    input = *text;
  else
    input.assign(std::istreambuf_iterator<char>(std::cin), {});
  bool special = !args.has("--no-special");
  if (args.has("--decode")) {
    KILN_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parseIdList(input, "token ids"));
    for (int32_t id : ids)
      if (id >= tokenizer.vocabSize())
        return outOfRange("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                          std::to_string(tokenizer.vocabSize()) + ")");
    std::cout << tokenizer.decode(ids, /*skipSpecialTokens=*/!special);
    return okStatus();
  }
  std::vector<int32_t> ids = tokenizer.encode(input, special);
  for (size_t i = 0; i < ids.size(); ++i)
    std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
  return okStatus();
}

} // namespace

int runTokenize(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kTokenizeSpec, argv);
  if (!args.isOk())
    return reportError("tokenize", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kTokenizeSpec);
    return 0;
  }
  Status status = runTokenize(*args);
  if (!status.isOk())
    return reportError("tokenize", status);
  return 0;
}

} // namespace kiln::tools
