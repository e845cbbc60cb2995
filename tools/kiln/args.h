// A small command-line parser for the kiln subcommands: `--flag value`, `--flag=value`, boolean
// `--flag`, and positionals. Errors name the flag and the accepted range.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::tools {

struct FlagSpec {
  std::string name;         // "--max-batch"
  std::string valueName;    // "N"; empty for a boolean flag
  std::string help;
};

struct CommandSpec {
  std::string name;         // "compile"
  std::string usage;        // "MODEL_DIR -o OUT.kiln [options]"
  std::string summary;
  std::vector<FlagSpec> flags;
  int minPositionals = 0;
  int maxPositionals = 0;
};

class Args {
public:
  // Fails on an unknown flag, a missing value, or the wrong number of positionals.
  static Result<Args> parse(const CommandSpec &spec, const std::vector<std::string> &argv);

  bool helpRequested() const { return help_; }
  bool has(const std::string &flag) const { return values_.count(flag) > 0; }
  std::optional<std::string> get(const std::string &flag) const;
  std::string getOr(const std::string &flag, const std::string &fallback) const;
  // Integer flag within [min, max]; `fallback` when absent.
  Result<int64_t> getInt(const std::string &flag, int64_t fallback, int64_t min,
                         int64_t max) const;
  Result<double> getDouble(const std::string &flag, double fallback, double min,
                           double max) const;
  // A fraction in (0, 1] ("--gpu-memory-utilization 0.85"); 0 when absent.
  Result<double> getFraction(const std::string &flag) const;
  const std::vector<std::string> &positionals() const { return positionals_; }

private:
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
};

std::string formatHelp(const CommandSpec &spec);

// Parses "1 2 3" (spaces or commas) into ids; names `flag` in errors.
Result<std::vector<int32_t>> parseIdList(const std::string &text, const std::string &flag);

// Parses "0,1,1" into CUDA device ordinals, one per rank (repeats allowed); names `flag` in
// errors.
Result<std::vector<int>> parseDeviceList(const std::string &text, const std::string &flag);

} // namespace kiln::tools
