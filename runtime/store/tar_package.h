// model.tar.gz: an artifact's files at the archive root (SageMaker extracts ModelDataUrl into
// /opt/ml/model, so /opt/ml/model/plan.kiln etc.), written with libarchive, deterministic (sorted
// names, mtime 0, uid/gid 0, mode 0644, no gzip timestamp), pax format so files above 8 GiB fit.
#pragma once

#include "runtime/base/status.h"

#include <cstdint>
#include <functional>
#include <string>

namespace kiln::rt {

struct PackageOptions {
  // Hash every file against manifest.json first (refuses to package a corrupted artifact).
  bool verify = true;
  // One line per file, and one per `progressEveryBytes` inside a larger file (0: none).
  std::function<void(const std::string &)> progress;
  uint64_t progressEveryBytes = uint64_t(64) << 20;
};

// Writes `outPath` atomically (temp file + rename).
Status packageArtifact(const std::string &artifactDir, const std::string &outPath,
                       const PackageOptions &options = {});

// Extracts a tar (optionally gzip/zstd/xz compressed) into `destDir`, which must exist and be
// empty. Rejected, before anything is written for that entry: absolute paths, any '..'
// component, symlinks whose target leaves the tree (absolute or climbing out), hard links to
// paths outside the tree, and anything but regular files, directories and symlinks. Entries are
// also written with libarchive's secure flags (no writing through symlinks). On error the
// partially extracted contents are left for the caller to remove.
Status extractArchive(const std::string &archivePath, const std::string &destDir);

// extractArchive into a temporary directory beside `destDir`, check every file against the
// extracted manifest.json, then rename into place (`destDir` must not exist). The archive's
// manifest.json is read first (at most 16 MiB): an entry it does not list, or a listed file whose
// size differs from the listed one, is refused before it is written, and writing stops at the
// entry's size.
Status extractArtifactArchive(const std::string &archivePath, const std::string &destDir);

// Whether a relative archive path stays inside the tree: no '..' component, not absolute, not
// empty. `linkFrom` (for symlink targets) is the entry's own path, whose directory the target is
// relative to.
bool archivePathInsideTree(const std::string &path, const std::string &linkFrom = "");

} // namespace kiln::rt
