#include "runtime/store/golden.h"

#include "runtime/base/file.h"
#include "runtime/base/half.h"
#include "runtime/base/sha256.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>

namespace kiln::rt {
namespace {

using Json = nlohmann::json;

Result<std::vector<int32_t>> idList(const Json &parent, const char *field,
                                    const std::string &where) {
  auto it = parent.find(field);
  if (it == parent.end() || !it->is_array())
    return invalidArgument(where + ": field '" + field + "' is missing or not an array");
  std::vector<int32_t> ids;
  for (const Json &v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      return invalidArgument(where + ": field '" + field +
                             "' holds a value that is not a token id");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

Status checkCase(const GoldenCase &c, int32_t vocab, const std::string &where) {
  if (c.promptIds.empty())
    return invalidArgument(where + ": 'prompt_ids' is empty");
  auto checkIds = [&](const std::vector<int32_t> &ids, const char *field) {
    for (int32_t id : ids)
      if (id >= vocab)
        return invalidArgument(where + ": '" + field + "' id " + std::to_string(id) +
                               " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    return okStatus();
  };
  KILN_RETURN_IF_ERROR(checkIds(c.promptIds, "prompt_ids"));
  KILN_RETURN_IF_ERROR(checkIds(c.expectedIds, "expected_ids"));
  int32_t length = int32_t(c.promptIds.size() + c.expectedIds.size());
  for (const GoldenRow &row : c.rows) {
    if (row.position < 0 || row.position >= length)
      return invalidArgument(where + ": logits row at position " + std::to_string(row.position) +
                             " is outside the case's " + std::to_string(length) + " tokens");
    if (row.ids.empty() ? row.values.size() != size_t(vocab) : row.ids.size() != row.values.size())
      return invalidArgument(where + ": logits row at position " + std::to_string(row.position) +
                             " has mismatched ids/values");
    KILN_RETURN_IF_ERROR(checkIds(row.ids, "logits.ids"));
  }
  return okStatus();
}

Result<GoldenCase> readKilnCase(const Json &c, const std::string &where) {
  GoldenCase out;
  out.name = c.value("name", std::string());
  KILN_ASSIGN_OR_RETURN(out.promptIds, idList(c, "prompt_ids", where));
  KILN_ASSIGN_OR_RETURN(out.expectedIds, idList(c, "expected_ids", where));
  auto logits = c.find("logits");
  if (logits != c.end()) {
    if (!logits->is_array())
      return invalidArgument(where + ": field 'logits' is not an array");
    for (const Json &r : *logits) {
      if (!r.is_object() || !r.contains("position") || !r["position"].is_number_integer() ||
          !r.contains("values") || !r["values"].is_array())
        return invalidArgument(where + ": each 'logits' entry needs integer 'position' and array "
                                       "'values'");
      GoldenRow row;
      row.position = r["position"].get<int32_t>();
      if (r.contains("ids")) {
        KILN_ASSIGN_OR_RETURN(row.ids, idList(r, "ids", where));
      }
      for (const Json &v : r["values"]) {
        if (!v.is_number())
          return invalidArgument(where + ": a logits value is not a number");
        row.values.push_back(v.get<float>());
      }
      out.rows.push_back(std::move(row));
    }
  }
  return out;
}

// Bytes per logit of a transformers golden's logits file, by its dtype name; 0 if unknown.
size_t logitBytes(const std::string &dtype) {
  return dtype == "fp32" ? 4 : dtype == "bf16" || dtype == "fp16" ? 2 : 0;
}

float logitAt(const char *data, size_t index, const std::string &dtype) {
  if (dtype == "fp32") {
    float value;
    std::memcpy(&value, data + index * 4, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, data + index * 2, 2);
  return dtype == "bf16" ? bf16ToF32(bits) : f16ToF32(bits);
}

Result<std::vector<float>> greedyMargins(const Json &c, size_t steps, const std::string &where) {
  std::vector<float> margins;
  auto it = c.find("greedy_margins");
  if (it == c.end())
    return margins;
  if (!it->is_array() || it->size() != steps)
    return invalidArgument(where + ": field 'greedy_margins' must hold one number per greedy id");
  for (const Json &v : *it) {
    if (!v.is_number())
      return invalidArgument(where + ": field 'greedy_margins' holds a non-number");
    margins.push_back(v.get<float>());
  }
  return margins;
}

// A transformers golden's case: every row of prompt + greedy ids in a raw file beside the JSON,
// little-endian, in `dtype` (fp32, bf16 or fp16).
Result<GoldenCase> readTransformersCase(const Json &c, int32_t vocab, const std::string &dtype,
                                        const std::string &dir, const std::string &where) {
  GoldenCase out;
  KILN_ASSIGN_OR_RETURN(out.promptIds, idList(c, "prompt_ids", where));
  KILN_ASSIGN_OR_RETURN(out.expectedIds, idList(c, "greedy_ids", where));
  KILN_ASSIGN_OR_RETURN(out.greedyMargins, greedyMargins(c, out.expectedIds.size(), where));
  std::string file = c["logits_file"].get<std::string>();
  if (file.find('/') != std::string::npos)
    return invalidArgument(where + ": 'logits_file' must be a file name beside the golden");
  KILN_ASSIGN_OR_RETURN(std::string bytes, readFile(dir + "/" + file));
  auto sha = c.find("logits_sha256");
  if (sha != c.end() && sha->is_string() &&
      sha->get<std::string>() != sha256Hex(bytes.data(), bytes.size()))
    return invalidArgument(where + ": '" + file +
                           "' does not match the golden's logits_sha256 (damaged or replaced)");
  size_t rows = out.promptIds.size() + out.expectedIds.size();
  size_t width = logitBytes(dtype);
  if (bytes.size() != rows * size_t(vocab) * width)
    return invalidArgument(where + ": '" + file + "' has " + std::to_string(bytes.size()) +
                           " bytes; expected " + std::to_string(rows) + " rows x " +
                           std::to_string(vocab) + " " + dtype + " logits");
  for (size_t r = 0; r < rows; ++r) {
    GoldenRow row;
    row.position = int32_t(r);
    row.values.resize(size_t(vocab));
    for (size_t i = 0; i < size_t(vocab); ++i)
      row.values[i] = logitAt(bytes.data(), r * vocab + i, dtype);
    out.rows.push_back(std::move(row));
  }
  return out;
}

// tolerance.logits_max_abs, else (a half golden of tests/data/golden) the dtype's measured bound.
Status readTolerance(const Json &json, const std::string &path, VerifyGolden &golden) {
  auto tolerance = json.find("tolerance");
  if (tolerance != json.end() && tolerance->is_object() && tolerance->contains("logits_max_abs") &&
      (*tolerance)["logits_max_abs"].is_number()) {
    golden.logitsTolerance = (*tolerance)["logits_max_abs"].get<float>();
    if (!(golden.logitsTolerance >= 0))
      return invalidArgument("golden '" + path + "': 'tolerance.logits_max_abs' is negative");
    return okStatus();
  }
  float fallback = halfGoldenTolerance(golden.dtype);
  if (tolerance != json.end() || fallback < 0)
    return invalidArgument("golden '" + path + "': field 'tolerance.logits_max_abs' is missing");
  golden.logitsTolerance = fallback;
  golden.toleranceNote =
      "the golden has no tolerance; the " + golden.dtype + " default of transformers goldens";
  return okStatus();
}

} // namespace

float halfGoldenTolerance(const std::string &dtype) {
  return dtype == "bf16" ? 0.35f : dtype == "fp16" ? 0.04f : -1.0f;
}

Result<VerifyGolden> readGolden(const std::string &path) {
  KILN_ASSIGN_OR_RETURN(std::string text, readFile(path));
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return invalidArgument("golden '" + path + "' is not a JSON object");
  VerifyGolden golden;
  bool kilnFormat = json.value("format", std::string()) == kVerifyGoldenFormat;
  if (!json.contains("vocab_size") || !json["vocab_size"].is_number_integer() ||
      json["vocab_size"].get<int64_t>() <= 0 || !json.contains("cases") ||
      !json["cases"].is_array())
    return invalidArgument("golden '" + path +
                           "' needs a positive integer 'vocab_size' and an "
                           "array 'cases'");
  golden.vocabSize = json["vocab_size"].get<int32_t>();
  golden.model = json.value("model", std::string());
  golden.topK = kilnFormat ? json.value("top_k", 0) : 0;
  std::string logitsDtype = "fp32";
  if (!kilnFormat) {
    for (const char *field : {"dtype", "logits_dtype"})
      if (json.contains(field) && !json[field].is_string())
        return invalidArgument("golden '" + path + "': field '" + field + "' is not a string");
    golden.dtype = json.value("dtype", std::string("fp32"));
    logitsDtype = json.value("logits_dtype", golden.dtype);
    if (logitBytes(logitsDtype) == 0)
      return invalidArgument("golden '" + path + "': logits dtype '" + logitsDtype +
                             "' is not one of fp32, bf16, fp16");
  }
  KILN_RETURN_IF_ERROR(readTolerance(json, path, golden));
  if (json.contains("generator"))
    golden.generator = json["generator"].dump();
  else if (json.contains("versions"))
    golden.generator = "transformers " + json["versions"].dump();
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty())
    dir = ".";
  for (size_t i = 0; i < json["cases"].size(); ++i) {
    const Json &c = json["cases"][i];
    std::string where = "golden '" + path + "' cases[" + std::to_string(i) + "]";
    if (!c.is_object())
      return invalidArgument(where + " is not an object");
    Result<GoldenCase> parsed =
        kilnFormat ? readKilnCase(c, where)
        : c.contains("logits_file") && c["logits_file"].is_string()
            ? readTransformersCase(c, golden.vocabSize, logitsDtype, dir, where)
            : Result<GoldenCase>(invalidArgument(where + ": neither format '" +
                                                 kVerifyGoldenFormat +
                                                 "' nor a transformers golden with 'logits_file'"));
    KILN_RETURN_IF_ERROR(parsed.status());
    if (parsed->name.empty())
      parsed->name = "case" + std::to_string(i);
    KILN_RETURN_IF_ERROR(checkCase(*parsed, golden.vocabSize, where));
    golden.cases.push_back(std::move(parsed).value());
  }
  if (golden.cases.empty())
    return invalidArgument("golden '" + path + "' has no cases");
  return golden;
}

Status writeGolden(const VerifyGolden &golden, const std::string &path) {
  Json json = Json::object();
  json["format"] = kVerifyGoldenFormat;
  json["version"] = 1;
  json["model"] = golden.model;
  json["generator"] = Json::parse(golden.generator, nullptr, false).is_discarded()
                          ? Json(golden.generator)
                          : Json::parse(golden.generator);
  json["vocab_size"] = golden.vocabSize;
  json["top_k"] = golden.topK;
  json["tolerance"] = {{"logits_max_abs", golden.logitsTolerance}};
  Json cases = Json::array();
  for (const GoldenCase &c : golden.cases) {
    Json rows = Json::array();
    for (const GoldenRow &row : c.rows) {
      Json r = {{"position", row.position}};
      if (!row.ids.empty())
        r["ids"] = row.ids;
      r["values"] = row.values;
      rows.push_back(std::move(r));
    }
    cases.push_back({{"name", c.name},
                     {"prompt_ids", c.promptIds},
                     {"expected_ids", c.expectedIds},
                     {"logits", std::move(rows)}});
  }
  json["cases"] = std::move(cases);
  return writeFileAtomic(path, json.dump(1) + "\n");
}

} // namespace kiln::rt
