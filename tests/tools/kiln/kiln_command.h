// Running the kiln binary from a test (tests/command_runner.h), a private temporary directory,
// and the tiny-llama fixture compiled once per test process (bf16, max batch 4, max seq len 160).
#pragma once

#include "tests/command_runner.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln::tools {

inline const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/kiln/kiln";

using testing::CommandResult;
using testing::runCommand;

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
