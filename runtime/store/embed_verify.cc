#include "runtime/store/embed_verify.h"

#include "runtime/base/file.h"
#include "runtime/base/sha256.h"
#include "runtime/embed/embedder.h"
#include "runtime/store/verify_load.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace kiln::rt {
namespace {

using nlohmann::json;

Result<json> parseGoldenJson(const std::string &path) {
  KILN_ASSIGN_OR_RETURN(std::string text, readFile(path));
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object())
    return invalidArgument(path + ": not a JSON object");
  return parsed;
}

// A float32 file beside the golden of exactly rows x width values, matching `sha256` when given
// (as readGolden checks a logits file).
Result<std::vector<float>> readRows(const std::string &dir, const std::string &file,
                                    const std::string &sha256, size_t rows, int32_t width) {
  if (file.find('/') != std::string::npos)
    return invalidArgument("'hidden_file' must be a file name beside the golden: " + file);
  const std::string path = dir + "/" + file;
  KILN_ASSIGN_OR_RETURN(std::string bytes, readFile(path));
  if (!sha256.empty() && sha256 != sha256Hex(bytes.data(), bytes.size()))
    return invalidArgument(path + " does not match the golden's hidden_sha256 (damaged or "
                                  "replaced)");
  const size_t want = rows * static_cast<size_t>(width) * sizeof(float);
  if (bytes.size() != want)
    return invalidArgument(path + ": " + std::to_string(bytes.size()) + " bytes, expected " +
                           std::to_string(want) + " (" + std::to_string(rows) + " tokens x " +
                           std::to_string(width) + " float32)");
  std::vector<float> values(rows * static_cast<size_t>(width));
  std::memcpy(values.data(), bytes.data(), want);
  return values;
}

Result<EmbedGoldenCase> readCase(const json &c, const std::string &dir, int32_t width,
                                 size_t index) {
  EmbedGoldenCase out;
  const std::string where = "case " + std::to_string(index);
  try {
    out.name = c.value("what", where);
    out.ids = c.at("input_ids").get<std::vector<int32_t>>();
    out.tokenTypeIds = c.value("token_type_ids", std::vector<int32_t>(out.ids.size(), 0));
    if (out.tokenTypeIds.size() != out.ids.size())
      return invalidArgument(where + ": " + std::to_string(out.tokenTypeIds.size()) +
                             " token_type_ids for " + std::to_string(out.ids.size()) +
                             " input_ids");
    if (c.contains("pooled"))
      out.pooled = c.at("pooled").get<std::vector<float>>();
    KILN_ASSIGN_OR_RETURN(out.hidden,
                          readRows(dir, c.at("hidden_file").get<std::string>(),
                                   c.value("hidden_sha256", std::string()), out.ids.size(), width));
  } catch (const json::exception &e) {
    return invalidArgument(where + ": " + e.what());
  }
  if (out.ids.empty())
    return invalidArgument(where + ": no input_ids");
  return out;
}

float maxAbsDiff(const std::vector<float> &got, const std::vector<float> &want) {
  if (got.size() != want.size())
    return INFINITY;
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float d = std::fabs(got[i] - want[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d); // NaN counts as infinitely far
  }
  return worst;
}

std::string formatted(const char *format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

} // namespace

bool isEmbedGoldenFile(const std::string &path) {
  Result<json> parsed = parseGoldenJson(path);
  return parsed.isOk() && parsed->contains("hidden_size");
}

Result<EmbedGolden> readEmbedGolden(const std::string &path) {
  KILN_ASSIGN_OR_RETURN(json parsed, parseGoldenJson(path));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  EmbedGolden golden;
  try {
    golden.width = parsed.at("hidden_size").get<int32_t>();
    const json &tolerance = parsed.at("tolerance");
    golden.hiddenTolerance = tolerance.at("hidden_max_abs").get<float>();
    golden.pooledTolerance = tolerance.value("pooled_max_abs", golden.hiddenTolerance);
    if (parsed.contains("pooling")) {
      golden.pooling = parsed["pooling"].at("mode").get<std::string>();
      golden.normalize = parsed["pooling"].value("normalize", false);
    }
    if (golden.width <= 0)
      return invalidArgument(path + ": hidden_size must be positive");
    const json &cases = parsed.at("cases");
    for (size_t i = 0; i < cases.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(EmbedGoldenCase c, readCase(cases[i], dir, golden.width, i));
      golden.cases.push_back(std::move(c));
    }
  } catch (const json::exception &e) {
    return invalidArgument(path + ": " + e.what());
  }
  if (golden.cases.empty())
    return invalidArgument(path + ": no cases");
  return golden;
}

bool EmbedVerifyReport::passed() const {
  return std::all_of(cases.begin(), cases.end(), [](const auto &c) { return c.passed; });
}

std::string EmbedVerifyReport::text() const {
  std::string out;
  size_t failed = 0;
  const size_t checked = cases.size();
  for (const EmbedCaseVerdict &c : cases) {
    out += "case " + c.name + " (" + std::to_string(c.tokens) + " tokens): ";
    failed += c.passed ? 0 : 1;
    out += "hidden max |diff| " + formatted("%.3g", c.maxHiddenDiff) + " (tolerance " +
           formatted("%.3g", hiddenTolerance) + ")";
    if (c.maxPooledDiff > 0 || pooledTolerance > 0)
      out += ", pooled " + formatted("%.3g", c.maxPooledDiff) + " (tolerance " +
             formatted("%.3g", pooledTolerance) + ")";
    out += c.passed ? ": ok\n" : ": FAIL\n";
  }
  if (failed == 0)
    return out + "verify: PASS (" + std::to_string(checked) + " cases)\n";
  return out + "verify: FAIL (" + std::to_string(failed) + " of " + std::to_string(checked) +
         " cases differ)\n";
}

Result<EmbedVerifyReport> verifyEmbeddings(const std::string &artifactDir,
                                           const EmbedGolden &golden,
                                           const VerifyOptions &options) {
  int32_t longest = 1;
  for (const EmbedGoldenCase &c : golden.cases)
    longest = std::max(longest, static_cast<int32_t>(c.ids.size()));
  KILN_ASSIGN_OR_RETURN(VerifyLoaded loaded,
                        loadForVerify(artifactDir, options.device, options.devices, longest));
  if (!loaded.runner->limits().embeds)
    return invalidArgument(artifactDir + " generates text: an embedding golden (hidden_size) "
                                         "checks an embedding model; use a generation golden");
  const schema::ModelInfo &model = *loaded.artifact->plan().model();
  const std::string pooling = model.pooling() ? model.pooling()->str() : "";
  if (pooling != golden.pooling)
    return invalidArgument("the golden pools '" + golden.pooling + "' but the artifact '" +
                           pooling + "': the golden is for another model");
  KILN_ASSIGN_OR_RETURN(PoolingMode mode, parsePoolingMode(pooling));
  KILN_ASSIGN_OR_RETURN(Embedder embedder, Embedder::create({loaded.runner.get(), mode}));
  if (embedder.width() != golden.width)
    return invalidArgument("the golden's hidden_size is " + std::to_string(golden.width) +
                           " but the artifact's is " + std::to_string(embedder.width()) +
                           ": the golden is for another model");
  EmbedVerifyReport report;
  report.hiddenTolerance = golden.hiddenTolerance;
  report.pooledTolerance = golden.pooling.empty() ? 0 : golden.pooledTolerance;
  for (const EmbedGoldenCase &c : golden.cases) {
    EmbedCaseVerdict verdict{c.name, static_cast<int32_t>(c.ids.size())};
    KILN_ASSIGN_OR_RETURN(std::vector<Embedding> got, embedder.embed({c.ids}, {c.tokenTypeIds}));
    verdict.maxHiddenDiff = maxAbsDiff(got[0].hidden, c.hidden);
    verdict.passed = verdict.maxHiddenDiff <= golden.hiddenTolerance;
    if (!golden.pooling.empty()) {
      const std::vector<float> pooled =
          golden.normalize ? normalizedL2(got[0].pooled) : got[0].pooled;
      verdict.maxPooledDiff = maxAbsDiff(pooled, c.pooled);
      verdict.passed = verdict.passed && verdict.maxPooledDiff <= golden.pooledTolerance;
    }
    report.cases.push_back(verdict);
  }
  return report;
}

} // namespace kiln::rt
