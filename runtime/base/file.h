// Files: read-only memory maps, whole-file reads, and atomic writes (write to a temp file in the
// same directory, fsync, rename) so a failed write never leaves a half-written file that loads.
#pragma once

#include "runtime/base/status.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln {

class MappedFile {
public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  // Maps `path` read-only. An empty file maps to an empty span.
  static Result<MappedFile> open(const std::string &path);

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  const std::string &path() const { return path_; }

private:
  const uint8_t *data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

Result<std::string> readFile(const std::string &path);
// Writes `bytes` to `path` atomically (temp file + fsync + rename).
Status writeFileAtomic(const std::string &path, std::string_view bytes);
bool fileExists(const std::string &path);

} // namespace kiln
