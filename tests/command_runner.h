// Runs a shell command from a test: its exit code and output (stdout, or stdout and stderr).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kiln::testing {

struct CommandResult {
  int exitCode = -1;
  std::string output; // stdout, or stdout + stderr with `mergeStderr`
};

inline CommandResult runCommand(const std::string &command, bool mergeStderr) {
  CommandResult result;
  FILE *pipe = popen((command + (mergeStderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!pipe)
    return result;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe))
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

} // namespace kiln::testing
