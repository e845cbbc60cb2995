#include "compiler/import/sentence_transformers.h"

#include "runtime/base/file.h"

#include <nlohmann/json.hpp>

#include <utility>
#include <vector>

namespace kiln::compiler {
namespace {

using nlohmann::json;

Result<json> readJson(const std::string &path) {
  KILN_ASSIGN_OR_RETURN(std::string text, readFile(path));
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    return invalidArgument(path + ": not valid JSON");
  return parsed;
}

// The one mode 1_Pooling/config.json turns on.
Result<std::string> poolingMode(const json &config, const std::string &path) {
  static const std::pair<const char *, const char *> kModes[] = {
      {"pooling_mode_cls_token", "cls"},
      {"pooling_mode_mean_tokens", "mean"},
      {"pooling_mode_max_tokens", "max"},
      {"pooling_mode_lasttoken", "lasttoken"}};
  static const char *const kUnsupported[] = {"pooling_mode_mean_sqrt_len_tokens",
                                             "pooling_mode_weightedmean_tokens"};
  for (const char *key : kUnsupported)
    if (config.value(key, false))
      return unimplemented(path + ": field '" + key +
                           "' is true; kiln pools with cls, mean, max or lasttoken");
  std::vector<std::string> modes;
  for (const auto &[key, mode] : kModes)
    if (config.value(key, false))
      modes.push_back(mode);
  if (modes.size() != 1)
    return unimplemented(path + ": " + std::to_string(modes.size()) +
                         " pooling modes are on; kiln pools with exactly one");
  return modes.front();
}

} // namespace

Result<SentencePooling> readSentencePooling(const std::string &modelDir) {
  SentencePooling pooling;
  const std::string modulesPath = modelDir + "/modules.json";
  if (!fileExists(modulesPath))
    return pooling;
  KILN_ASSIGN_OR_RETURN(json modules, readJson(modulesPath));
  if (!modules.is_array())
    return invalidArgument(modulesPath + ": expected a list of modules");
  for (const json &module : modules) {
    const std::string type = module.value("type", "");
    if (type.ends_with(".Normalize")) {
      pooling.normalize = true;
    } else if (type.ends_with(".Pooling")) {
      const std::string path = modelDir + "/" + module.value("path", "") + "/config.json";
      KILN_ASSIGN_OR_RETURN(json config, readJson(path));
      KILN_ASSIGN_OR_RETURN(pooling.mode, poolingMode(config, path));
    }
  }
  return pooling;
}

} // namespace kiln::compiler
