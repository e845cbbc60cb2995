// Shared helpers for the tokenizer tests: where each family's files live under the shared assets,
// and loading them (with the in-memory repair the llama2 asset needs, see loadFamily).
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

// The llama2 tokenizer.json in the assets (from onnxruntime-extensions) had its U+00A0 characters
// turned into ASCII spaces: four vocab keys and three merges ("   ") are broken, and HF tokenizers
// itself refuses to load it ("Merges text file invalid at line 18918"). Restore U+00A0 the way
// tools/goldens/make_tokenizer_goldens.py does; the result matches Meta's Llama-2 vocabulary.
inline std::string repairNbsp(const std::string &text) {
  nlohmann::json j = nlohmann::json::parse(text);
  auto fix = [](std::string s) {
    std::string out;
    for (char c : s)
      out += c == ' ' ? std::string("\xC2\xA0") : std::string(1, c);
    return out;
  };
  nlohmann::json vocab = nlohmann::json::object();
  for (auto &[k, v] : j["model"]["vocab"].items())
    vocab[fix(k)] = v;
  j["model"]["vocab"] = vocab;
  for (auto &m : j["model"]["merges"]) {
    std::string s = m.get<std::string>();
    if (std::count(s.begin(), s.end(), ' ') == 1)
      continue;
    for (size_t sep = 0; sep < s.size(); ++sep) {
      if (s[sep] != ' ')
        continue;
      std::string a = fix(s.substr(0, sep)), b = fix(s.substr(sep + 1));
      if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) {
        m = a + " " + b;
        break;
      }
    }
  }
  return j.dump();
}

inline Result<Tokenizer> loadFamily(const std::string &name) {
  for (const Family &f : families()) {
    if (name != f.name)
      continue;
    std::string dir = assetsDir() + "/" + f.dir;
    if (name != "llama2")
      return Tokenizer::fromDirectory(dir);
    KILN_ASSIGN_OR_RETURN(std::string json, readFile(dir + "/tokenizer.json"));
    KILN_ASSIGN_OR_RETURN(std::string config, readFile(dir + "/tokenizer_config.json"));
    KILN_ASSIGN_OR_RETURN(std::string map, readFile(dir + "/special_tokens_map.json"));
    return Tokenizer::fromJson(repairNbsp(json), config, map);
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
