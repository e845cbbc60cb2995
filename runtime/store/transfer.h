// Artifacts to and from S3 (or any S3-compatible store):
//   s3://BUCKET/PREFIX/<every file of manifest.json>, then PREFIX/manifest.json written last, so a
//   reader that finds the manifest finds a complete artifact. A push over an existing artifact
//   stages its changed files first and keeps the old artifact pullable until the new manifest
//   replaces it (runtime/store/push.cc).
// A pull downloads into a temporary directory beside the destination and renames it into place
// only after every file's size and SHA-256 match the manifest: a failed or corrupted pull never
// leaves a directory that loads. s3://BUCKET/KEY.tar.gz (a `kiln package` tarball, the layout
// SageMaker's ModelDataUrl points at) is pulled and extracted safely instead.
#pragma once

#include "runtime/base/status.h"
#include "runtime/store/aws_config.h"
#include "runtime/store/s3_client.h"

#include <cstdint>
#include <atomic>
#include <functional>
#include <string>

namespace kiln::rt {

struct TransferProgress {
  const char *action = ""; // "push" | "pull"
  uint64_t bytesDone = 0;
  uint64_t bytesTotal = 0;
  int filesDone = 0;
  int filesTotal = 0;
  bool finished = false;
};

struct TransferOptions {
  AwsConfigOverrides aws; // --profile, --region, --endpoint-url
  S3ClientOptions client; // retries, timeouts, retry log
  int parallelism = 8;    // parts (and files) in flight at once
  // Files above this size go up as multipart uploads of parts this size (and come down as ranged
  // GETs of this size). S3 requires at least 5 MiB per part but the last.
  uint64_t partSize = uint64_t(64) << 20;
  // Called about once a second while bytes move, and once with finished = true.
  std::function<void(const TransferProgress &)> progress;
  // Hash every local file against manifest.json before pushing (refuses a corrupted artifact).
  bool verifyBeforePush = true;
  // Set (by a SIGINT/SIGTERM handler) to stop: requests in flight are cancelled within about a
  // second, a push aborts its multipart uploads (and says so when an abort fails), a pull removes
  // its temporary directory; the result is a kCancelled error. Null: never interrupted.
  const std::atomic<bool> *interrupted = nullptr;
  // Informational lines ("using cached artifact ...", "2 of 5 files unchanged"); default: none.
  std::function<void(const std::string &)> log;
};

using PushOptions = TransferOptions;

struct PullOptions : TransferOptions {
  // pullToCache: root of the cache; empty: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
  // ~/.cache/kiln. Artifacts live in <root>/artifacts/<sha256 of manifest.json>.
  std::string cacheDir;
  // pullArtifact: replace an existing artifact at the destination.
  bool replace = false;
};

inline constexpr uint64_t kMinPartSize = uint64_t(5) << 20;

Status pushArtifact(const std::string &artifactDir, const std::string &s3Url,
                    const PushOptions &options = {});

// Removes what interrupted pulls into `destDir` left beside it (DIR.pull-PID, DIR.pull-PID.tar,
// DIR.new-PID, DIR.old-PID, DIR.extract-PID) when process PID no longer runs; a live puller's
// directory is kept. Every pull runs it first. Returns how many it removed.
int removeStalePullTemporaries(const std::string &destDir);

// `s3Url` is a prefix holding an artifact, or an object ending in .tar.gz / .tgz.
Status pullArtifact(const std::string &s3Url, const std::string &destDir,
                    const PullOptions &options = {});

// Pulls `s3Url` into the local cache unless an artifact with the same manifest is already there,
// and returns the local artifact directory. When the store cannot be reached, an artifact pulled
// earlier from the same URL is used (with a note in `log`).
Result<std::string> pullToCache(const std::string &s3Url, const PullOptions &options = {});

std::string defaultCacheDir();

} // namespace kiln::rt
