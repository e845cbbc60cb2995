// Running the kiln binary from a test: its output and exit code, a private temporary directory,
// and the tiny-llama fixture compiled once per test process (bf16, max batch 4, max seq len 160).
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln::tools {

inline const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/kiln/kiln";

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

// A private temporary directory per test process (ctest runs the cases as parallel processes),
// removed at exit.
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/kiln-command-test-XXXXXX";
    const char *made = mkdtemp(pattern);
    path = made ? made : "";
  }
  ~TempDir() {
    if (!path.empty())
      std::filesystem::remove_all(path);
  }
};

// The tiny-llama fixture compiled once per test process.
inline const std::string &fixtureArtifact() {
  static const TempDir temp;
  static const std::string dir = [] {
    EXPECT_FALSE(temp.path.empty()) << "mkdtemp failed";
    const std::string out = temp.path + "/tiny-llama.kiln";
    CommandResult r =
        runCommand(kKiln + " compile " + KILN_TEST_DATA_DIR + "/models/tiny-llama -o " + out +
                       " --dtype bf16 --max-batch 4 --max-seq-len 160 --quiet",
                   true);
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return out;
  }();
  return dir;
}

} // namespace kiln::tools
