// Numeric bounds of JSON schemas (runtime/structured/json_schema_numbers.h): integers rounded
// inward to integer ranges, numbers as decimal ranges digit by digit (json_schema_library.h
// integerRange / decimalRange).
#include "runtime/structured/json_schema_numbers.h"

#include "runtime/structured/json_schema_library.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace kiln::structured::json_schema_internal {

using Json = nlohmann::ordered_json;

namespace {

// A number's JSON text ("0.1", "-3", "1e-07", "1.5e+20") as decimal digits, `integer` possibly
// longer than 15 digits (the caller decides what that means).
DecimalBound decimalDigits(const std::string &text) {
  DecimalBound bound;
  bound.negative = !text.empty() && text[0] == '-';
  const size_t start = bound.negative ? 1 : 0;
  const size_t e = text.find_first_of("eE");
  const std::string mantissa = text.substr(start, e == std::string::npos ? e : e - start);
  const long exponent = e == std::string::npos ? 0 : std::stol(text.substr(e + 1));
  const size_t dot = mantissa.find('.');
  std::string digits = mantissa;
  if (dot != std::string::npos)
    digits.erase(dot, 1);
  long point = static_cast<long>(dot == std::string::npos ? mantissa.size() : dot) + exponent;
  if (point < 0) {
    digits.insert(0, static_cast<size_t>(-point), '0');
    point = 0;
  }
  if (static_cast<size_t>(point) > digits.size())
    digits.append(static_cast<size_t>(point) - digits.size(), '0');
  bound.integer = digits.substr(0, static_cast<size_t>(point));
  bound.fraction = digits.substr(static_cast<size_t>(point));
  bound.integer.erase(0, std::min(bound.integer.find_first_not_of('0'), bound.integer.size()));
  if (bound.integer.empty())
    bound.integer = "0";
  const size_t last = bound.fraction.find_last_not_of('0');
  bound.fraction.erase(last == std::string::npos ? 0 : last + 1);
  return bound;
}

// A bound keyword's value (minimum, exclusiveMaximum, ...), nullopt when absent; draft 4's
// boolean exclusive* and non-numbers are errors naming it.
Result<std::optional<double>> boundValue(const Json &schema, const std::string &keyword,
                                         const std::string &path) {
  if (!schema.contains(keyword))
    return std::optional<double>();
  const Json &value = schema.at(keyword);
  if (value.is_boolean())
    return unsupported(path, "'" + keyword + "' as a boolean", "draft 4; use a number");
  if (!value.is_number())
    return invalid(path, "'" + keyword + "' must be a number");
  return std::optional<double>(value.get<double>());
}

// The tighter of a side's two keywords (minimum / exclusiveMinimum, maximum / exclusiveMaximum):
// the larger lower or smaller upper value, the exclusive one when equal. nullopt: neither given.
Result<std::optional<std::pair<double, std::string>>>
tighterNumberBound(const Json &schema, bool lower, const std::string &path) {
  std::optional<std::pair<double, std::string>> tightest;
  for (const std::string keyword :
       lower ? std::array<std::string, 2>{"exclusiveMinimum", "minimum"}
             : std::array<std::string, 2>{"exclusiveMaximum", "maximum"}) {
    KILN_ASSIGN_OR_RETURN(std::optional<double> v, boundValue(schema, keyword, path));
    if (v && (!tightest || (lower ? *v > tightest->first : *v < tightest->first)))
      tightest = std::make_pair(*v, keyword);
  }
  return tightest;
}

// An integer bound, rounded inward to an integer (minimum 1.5 means 2, exclusiveMaximum 3 means
// 2), or nothing when the schema does not have `keyword`.
Result<std::optional<double>> integerBound(const Json &schema, const std::string &keyword,
                                           const std::string &path) {
  KILN_ASSIGN_OR_RETURN(std::optional<double> value, boundValue(schema, keyword, path));
  if (!value)
    return value;
  const double bound = *value;
  const bool exclusive = keyword.rfind("exclusive", 0) == 0;
  if (keyword.find("inimum") != std::string::npos) // minimum, exclusiveMinimum
    return std::optional<double>(exclusive ? std::floor(bound) + 1 : std::ceil(bound));
  return std::optional<double>(exclusive ? std::ceil(bound) - 1 : std::floor(bound));
}

Status emptyRangeError(const Json &schema, const std::string &loKeyword,
                       const std::string &hiKeyword, const std::string &path) {
  const auto named = [&](const std::string &keyword) {
    return "'" + keyword + "' " + schema.at(keyword).dump();
  };
  if (!loKeyword.empty() && !hiKeyword.empty())
    return invalid(path, named(loKeyword) + " and " + named(hiKeyword) +
                             " leave no integer between them: the schema matches nothing");
  return schemaError(StatusCode::kOutOfRange, path,
                     named(loKeyword.empty() ? hiKeyword : loKeyword) +
                         " leaves no integer of at most 15 digits, the limit of integers here");
}

} // namespace

// Numbers within minimum / maximum / exclusiveMinimum / exclusiveMaximum, any decimal values:
// written without an exponent, at most 15 integer and 15 fraction digits like every number here
// (decimalRange). minimum 0 alone keeps the exponent (nonneg-number).
Result<std::string> numberBody(const Json &schema, const std::string &path) {
  if (schema.contains("multipleOf"))
    return unsupported(path, "keyword 'multipleOf' on numbers", "integers and bounds are");
  KILN_ASSIGN_OR_RETURN(auto lowest, tighterNumberBound(schema, true, path));
  KILN_ASSIGN_OR_RETURN(auto highest, tighterNumberBound(schema, false, path));
  if (!lowest && !highest)
    return std::string("number");
  if (lowest && !highest && lowest->first == 0 && lowest->second == "minimum")
    return std::string("nonneg-number");
  if (lowest && highest &&
      (lowest->first > highest->first ||
       (lowest->first == highest->first &&
        (lowest->second != "minimum" || highest->second != "maximum"))))
    return invalid(path, "'" + lowest->second + "' " + schema.at(lowest->second).dump() + " and '" +
                             highest->second + "' " + schema.at(highest->second).dump() +
                             " leave no number between them: the schema matches nothing");
  std::optional<DecimalBound> lower, upper;
  for (const auto &[side, out] : {std::pair{&lowest, &lower}, std::pair{&highest, &upper}}) {
    if (!*side)
      continue;
    const std::string &keyword = (*side)->second;
    DecimalBound bound = decimalDigits(schema.at(keyword).dump());
    bound.exclusive = keyword.rfind("exclusive", 0) == 0;
    if (bound.fraction.size() > 15)
      return unsupported(path,
                         "'" + keyword + "' " + schema.at(keyword).dump() +
                             " with more than 15 fraction digits",
                         "the numbers written here have at most 15");
    const bool beyond = bound.integer.size() > 15; // past every number written here
    const bool isLower = side == &lowest;
    if (beyond && bound.negative != isLower) // above all (lower) or below all (upper)
      return schemaError(StatusCode::kOutOfRange, path,
                         "'" + keyword + "' " + schema.at(keyword).dump() +
                             " leaves no number of at most 15 integer digits, the limit of "
                             "numbers here");
    if (!beyond) // else no bound that side
      *out = bound;
  }
  const std::string body = decimalRange(lower ? &*lower : nullptr, upper ? &*upper : nullptr);
  if (body.empty())
    return invalid(path, "the bounds leave no number of at most 15 fraction digits");
  return body;
}

// The integers within the tightest lower and the tightest upper bound; each side stays within 15
// digits like the unbounded integer rule.
Result<std::string> integerBody(const Json &schema, const std::string &path) {
  if (schema.contains("multipleOf"))
    return unsupported(path, "keyword 'multipleOf'");
  double lo = -kMaxInteger, hi = kMaxInteger; // exact: below 2^53
  std::string loKeyword, hiKeyword;           // the keywords that set them, if any
  for (const std::string keyword : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    KILN_ASSIGN_OR_RETURN(std::optional<double> bound, integerBound(schema, keyword, path));
    const bool lower = keyword.find("inimum") != std::string::npos;
    if (bound && lower && *bound > lo)
      lo = *bound, loKeyword = keyword;
    if (bound && !lower && *bound < hi)
      hi = *bound, hiKeyword = keyword;
  }
  if (lo > hi)
    return emptyRangeError(schema, loKeyword, hiKeyword, path);
  if (hi == kMaxInteger && (lo == -kMaxInteger || lo == 0 || lo == 1))
    return std::string(lo == 0 ? "nonneg-integer" : lo == 1 ? "pos-integer" : "integer");
  return integerRange(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
}

} // namespace kiln::structured::json_schema_internal
