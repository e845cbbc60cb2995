// Shared helpers for the tokenizer tests: where each family's files live under the shared assets,
// and loading them.
#pragma once

#include "runtime/base/file.h"
#include "runtime/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kiln::rt::testing {

inline std::string assetsDir() {
  return KILN_ASSETS_DIR;
}
inline bool haveAssets() {
  return fileExists(assetsDir() + "/tokenizers/gpt2/tokenizer.json");
}

struct Family {
  const char *name;
  const char *dir; // relative to the assets directory
};

inline const std::vector<Family> &families() {
  static const std::vector<Family> kFamilies = {
      {"gpt2", "tokenizers/gpt2"},
      {"llama2", "tokenizers/llama2"},
      {"llama3", "tokenizers/llama3"},
      {"llama3.2", "tokenizers/llama3.2"},
      {"qwen2.5", "tokenizers/qwen2.5"},
      {"phi3", "tokenizers/phi3-mini"},
      {"mistral", "tokenizers/mistral-7b-instruct-v0.3"},
      {"gemma2", "tokenizers/gemma2"},
      {"tinystories", "models/tinystories-656K-hf"},
      {"stories260k", "models/stories260K-hf"},
  };
  return kFamilies;
}

inline Result<Tokenizer> loadFamily(const std::string &name) {
  for (const Family &f : families()) {
    if (name != f.name)
      continue;
    return Tokenizer::fromDirectory(assetsDir() + "/" + f.dir);
  }
  return notFound("no tokenizer family '" + name + "'");
}

inline std::vector<std::string> splitOn(const std::string &text, const std::string &sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    if (pos == std::string::npos) {
      out.push_back(text.substr(start));
      return out;
    }
    out.push_back(text.substr(start, pos - start));
    start = pos + sep.size();
  }
}

inline std::string joinIds(const std::vector<int32_t> &ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i)
    s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

} // namespace kiln::rt::testing
