#include "tools/kiln/args.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace kiln::tools {
namespace {

const FlagSpec *findFlag(const CommandSpec &spec, const std::string &name) {
  for (const FlagSpec &flag : spec.flags)
    if (flag.name == name)
      return &flag;
  return nullptr;
}

std::string commandPrefix(const CommandSpec &spec) { return "kiln " + spec.name + ": "; }

} // namespace

Result<Args> Args::parse(const CommandSpec &spec, const std::vector<std::string> &argv) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string &token = argv[i];
    if (token == "--help" || token == "-h") {
      args.help_ = true;
      continue;
    }
    if (token.size() < 2 || token[0] != '-' || token == "-") {
      args.positionals_.push_back(token);
      continue;
    }
    std::string name = token;
    std::optional<std::string> inlineValue;
    if (size_t eq = token.find('='); eq != std::string::npos) {
      name = token.substr(0, eq);
      inlineValue = token.substr(eq + 1);
    }
    const FlagSpec *flag = findFlag(spec, name);
    if (!flag)
      return invalidArgument(commandPrefix(spec) + "unknown option '" + name +
                             "' (see kiln " + spec.name + " --help)");
    if (flag->valueName.empty()) {
      if (inlineValue)
        return invalidArgument(commandPrefix(spec) + "option " + name + " takes no value");
      args.values_[name] = "true";
      continue;
    }
    if (inlineValue) {
      args.values_[name] = *inlineValue;
    } else if (i + 1 < argv.size()) {
      args.values_[name] = argv[++i];
    } else {
      return invalidArgument(commandPrefix(spec) + "option " + name + " needs a value (" +
                             flag->valueName + ")");
    }
  }
  if (args.help_)
    return args;
  int count = static_cast<int>(args.positionals_.size());
  if (count < spec.minPositionals || count > spec.maxPositionals)
    return invalidArgument(commandPrefix(spec) + "expected " + spec.usage + " (got " +
                           std::to_string(count) + " positional arguments)");
  return args;
}

std::optional<std::string> Args::get(const std::string &flag) const {
  auto it = values_.find(flag);
  if (it == values_.end())
    return std::nullopt;
  return it->second;
}

std::string Args::getOr(const std::string &flag, const std::string &fallback) const {
  return get(flag).value_or(fallback);
}

Result<int64_t> Args::getInt(const std::string &flag, int64_t fallback, int64_t min,
                             int64_t max) const {
  std::optional<std::string> text = get(flag);
  if (!text)
    return fallback;
  int64_t value = 0;
  const char *end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr != end)
    return invalidArgument(flag + " expects an integer, got '" + *text + "'");
  if (value < min || value > max)
    return outOfRange(flag + " " + *text + " is outside [" + std::to_string(min) + ", " +
                      std::to_string(max) + "]");
  return value;
}

Result<double> Args::getDouble(const std::string &flag, double fallback, double min,
                               double max) const {
  std::optional<std::string> text = get(flag);
  if (!text)
    return fallback;
  char *end = nullptr;
  double value = std::strtod(text->c_str(), &end);
  if (text->empty() || end != text->c_str() + text->size() || !std::isfinite(value))
    return invalidArgument(flag + " expects a number, got '" + *text + "'");
  if (value < min || value > max) {
    std::ostringstream range;
    range << "[" << min << ", " << max << "]";
    return outOfRange(flag + " " + *text + " is outside " + range.str());
  }
  return value;
}

Result<double> Args::getFraction(const std::string &flag) const {
  std::optional<std::string> text = get(flag);
  if (!text)
    return 0.0;
  char *end = nullptr;
  double value = std::strtod(text->c_str(), &end);
  if (text->empty() || end != text->c_str() + text->size() || !std::isfinite(value))
    return invalidArgument(flag + " expects a number in (0, 1], got '" + *text + "'");
  if (value <= 0 || value > 1)
    return outOfRange(flag + " " + *text + " is outside (0, 1]");
  return value;
}

std::string formatHelp(const CommandSpec &spec) {
  std::ostringstream out;
  out << "usage: kiln " << spec.name << " " << spec.usage << "\n\n" << spec.summary << "\n";
  if (!spec.flags.empty())
    out << "\noptions:\n";
  for (const FlagSpec &flag : spec.flags) {
    std::string left = "  " + flag.name + (flag.valueName.empty() ? "" : " " + flag.valueName);
    out << left;
    if (left.size() < 28)
      out << std::string(28 - left.size(), ' ');
    else
      out << "\n" << std::string(28, ' ');
    out << flag.help << "\n";
  }
  out << "  --help                    show this help\n";
  return out.str();
}

Result<std::vector<int32_t>> parseIdList(const std::string &text, const std::string &flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == ',' || text[i] == '\t' || text[i] == '\n') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != ',' && text[j] != '\t' &&
           text[j] != '\n')
      ++j;
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + j, value);
    if (ec != std::errc() || ptr != text.data() + j || value < 0 || value > INT32_MAX)
      return invalidArgument(flag + ": '" + text.substr(i, j - i) +
                             "' is not a token id (a non-negative integer)");
    ids.push_back(static_cast<int32_t>(value));
    i = j;
  }
  if (ids.empty())
    return invalidArgument(flag + " is empty: give at least one token id");
  return ids;
}

Result<std::vector<int>> parseDeviceList(const std::string &text, const std::string &flag) {
  std::vector<int> ordinals;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || text[i] == ' ') {
      ++i;
      continue;
    }
    size_t j = text.find_first_of(", ", i);
    if (j == std::string::npos)
      j = text.size();
    int value = 0;
    auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + j, value);
    if (ec != std::errc() || ptr != text.data() + j || value < 0 || value > 9999)
      return invalidArgument(flag + ": '" + text.substr(i, j - i) +
                             "' is not a CUDA device ordinal (a non-negative integer)");
    ordinals.push_back(value);
    i = j;
  }
  if (ordinals.empty())
    return invalidArgument(flag + " is empty: give one CUDA device ordinal per rank (e.g. " + flag +
                           " 0,1)");
  return ordinals;
}

} // namespace kiln::tools
