// A temporary directory per test and a fake artifact (files + a manifest.json with their sizes
// and hashes) for the store tests.
#pragma once

#include "runtime/base/file.h"
#include "runtime/base/sha256.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

namespace kiln::rt::testing {

class TempDir {
public:
  TempDir() {
    char pattern[] = "/tmp/kiln-store-test-XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

// Writes `files` into `dir` and a manifest.json listing them.
inline void writeFakeArtifact(const std::string &dir,
                              const std::map<std::string, std::string> &files) {
  std::filesystem::create_directories(dir);
  nlohmann::json list = nlohmann::json::array();
  for (const auto &[name, bytes] : files) {
    ASSERT_TRUE(writeFileAtomic(dir + "/" + name, bytes).isOk());
    list.push_back({{"name", name},
                    {"size", bytes.size()},
                    {"sha256", sha256Hex(bytes.data(), bytes.size())}});
  }
  nlohmann::json manifest = {{"format", "kiln-artifact"}, {"files", list}};
  ASSERT_TRUE(writeFileAtomic(dir + "/manifest.json", manifest.dump(2)).isOk());
}

inline std::string fileText(const std::string &path) {
  Result<std::string> text = readFile(path);
  return text.isOk() ? *text : "<unreadable: " + text.status().message() + ">";
}

} // namespace kiln::rt::testing
