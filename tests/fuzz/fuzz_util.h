// Shared by the libFuzzer targets in tests/fuzz (docs/reliability.md): splitting one input into
// the several files a parser reads, a scratch directory per process, and invariant checks that
// stop the run the way a sanitizer report does.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace kiln::fuzz {

// Inputs that stand for several files (plan.kiln + manifest.json, config.json +
// generation_config.json, ...) hold them in order, separated by this line. An input without it is
// its first file alone, so a plain file from a model directory is a valid seed.
inline constexpr std::string_view kFileSeparator = "\n--kiln-fuzz-next-file--\n";

inline std::vector<std::string_view> splitFiles(const uint8_t *data, size_t size) {
  std::string_view rest(reinterpret_cast<const char *>(data), size);
  std::vector<std::string_view> files;
  for (;;) {
    size_t at = rest.find(kFileSeparator);
    if (at == std::string_view::npos) {
      files.push_back(rest);
      return files;
    }
    files.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kFileSeparator.size());
  }
}

// The `index`th file of an input, or `fallback` when the input has fewer.
inline std::string_view fileOr(const std::vector<std::string_view> &files, size_t index,
                               std::string_view fallback = {}) {
  return index < files.size() ? files[index] : fallback;
}

// A violated invariant: print it and abort, so libFuzzer saves the input as a crash.
[[noreturn]] inline void invariantFailed(const char *condition, const char *file, int line,
                                         const std::string &detail) {
  std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n%s\n", file, line, condition,
               detail.c_str());
  std::abort();
}

#define KILN_FUZZ_CHECK(condition, detail)                                                         \
  do {                                                                                             \
    if (!(condition))                                                                              \
      ::kiln::fuzz::invariantFailed(#condition, __FILE__, __LINE__, (detail));                     \
  } while (0)

// A directory of this process's own under $TMPDIR (or /tmp), for parsers that read files or
// directories. Removed at exit; reset() empties it between inputs.
class ScratchDir {
public:
  ScratchDir() {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-fuzz-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!::mkdtemp(buffer.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = buffer.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir &) = delete;
  ScratchDir &operator=(const ScratchDir &) = delete;

  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

  void reset() const {
    std::error_code ec;
    for (const auto &entry : std::filesystem::directory_iterator(path_, ec))
      std::filesystem::remove_all(entry.path(), ec);
  }

  void write(const std::string &name, std::string_view bytes) const {
    std::ofstream out(file(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", file(name).c_str());
      std::abort();
    }
  }

private:
  std::string path_;
};

} // namespace kiln::fuzz
