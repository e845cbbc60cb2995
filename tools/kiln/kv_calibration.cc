#include "tools/kiln/kv_calibration.h"

#include "runtime/base/file.h"
#include "runtime/exec/kv_calibration.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <sstream>

namespace kiln::tools {
namespace {

// One JSON line: a text through the tokenizer, or token ids as given.
Result<std::vector<int32_t>> promptOfLine(const std::string &line, const std::string &where,
                                          const rt::Tokenizer *tokenizer) {
  const nlohmann::json value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (value.is_string()) {
    if (!tokenizer)
      return invalidArgument(where + ": a text prompt needs the model's tokenizer.json");
    return tokenizer->encode(value.get<std::string>(), /*addSpecialTokens=*/true);
  }
  std::vector<int32_t> ids;
  if (value.is_array())
    for (const nlohmann::json &id : value) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        return invalidArgument(where + ": token ids must be non-negative integers");
      ids.push_back(id.get<int32_t>());
    }
  if (!value.is_array() || ids.empty())
    return invalidArgument(where + ": each line must be a JSON string (a text) or a non-empty "
                                   "array of token ids");
  return ids;
}

void logCalibration(std::ostream *log, const rt::KvCalibration &c) {
  if (!log)
    return;
  auto range = [](const std::vector<float> &v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    std::ostringstream text;
    text << "[" << *lo << ", " << *hi << "]";
    return text.str();
  };
  *log << "calibrate: " << c.tokens << " prompt tokens; per-layer k scales " << range(c.kScales)
       << ", v scales " << range(c.vScales) << "\n";
}

} // namespace

Result<std::vector<std::vector<int32_t>>> readCalibrationPrompts(const std::string &path,
                                                                 const rt::Tokenizer *tokenizer) {
  KILN_ASSIGN_OR_RETURN(std::string text, readFile(path));
  std::vector<std::vector<int32_t>> prompts;
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    KILN_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                          promptOfLine(line, path + ":" + std::to_string(number), tokenizer));
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty())
    return invalidArgument(path + ": no calibration prompts (JSON Lines: a string or an array of "
                                  "token ids a line)");
  return prompts;
}

Status compileWithKvCalibration(compiler::CompileOptions options, const std::string &promptsPath) {
  if (options.kvDtype != "fp8")
    return invalidArgument("--kv-calibration calibrates an fp8 KV cache: give --kv-dtype fp8");
  compiler::CompileOptions measuring = options;
  measuring.outDir = options.outDir + ".calibrating";
  measuring.kvDtype.clear(); // the activations' dtype: the values fp8 would round
  measuring.targets = {"cpu"};
  measuring.tp = 1;
  if (options.log)
    *options.log << "calibrate: compiling " << measuring.outDir
                 << " (cpu, KV cache as --dtype) to measure the KV cache\n";
  struct RemoveScratch {
    std::string dir;
    ~RemoveScratch() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } scratch{measuring.outDir};
  KILN_RETURN_IF_ERROR(compiler::compileModel(measuring));
  std::optional<rt::Tokenizer> tokenizer;
  if (std::filesystem::exists(measuring.outDir + "/tokenizer.json")) {
    KILN_ASSIGN_OR_RETURN(tokenizer, rt::Tokenizer::fromDirectory(measuring.outDir));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> prompts,
                        readCalibrationPrompts(promptsPath, tokenizer ? &*tokenizer : nullptr));
  KILN_ASSIGN_OR_RETURN(rt::KvCalibration calibration,
                        rt::calibrateKvCache(measuring.outDir, prompts));
  logCalibration(options.log, calibration);
  options.kvKScales = calibration.kScales;
  options.kvVScales = calibration.vScales;
  return compiler::compileModel(options);
}

} // namespace kiln::tools
