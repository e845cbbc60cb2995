// The file list of an artifact's manifest.json ({name, size, sha256} per file) and the checks
// every shipping path runs against it: before packaging or pushing (never ship a corrupted
// artifact) and after pulling or extracting (never publish one).
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::rt {

struct ManifestFile {
  std::string name;
  uint64_t size = 0;
  std::string sha256; // lower-case hex
};

// Parses manifest.json text. Names must be plain file names (no '/', not '.', '..' or
// manifest.json): a manifest fetched from a bucket is untrusted input. `source` names the
// manifest in errors.
Result<std::vector<ManifestFile>> parseManifestFiles(const std::string &manifestJson,
                                                     const std::string &source);

// Reads `dir/manifest.json` and returns its file list (errors name the file).
Result<std::vector<ManifestFile>> readArtifactManifest(const std::string &dir,
                                                       std::string *manifestText = nullptr);

// Hex SHA-256 of a whole file, streamed.
Result<std::string> sha256OfFile(const std::string &path);

// Every manifest file exists in `dir` with the listed size and SHA-256. The error names the first
// file that differs, with expected and actual values.
Status verifyArtifactFiles(const std::string &dir, const std::vector<ManifestFile> &files);

} // namespace kiln::rt
