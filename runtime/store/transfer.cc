#include "runtime/store/transfer.h"

#include "runtime/base/file.h"
#include "runtime/base/sha256.h"
#include "runtime/store/manifest_files.h"
#include "runtime/store/tar_package.h"
#include "runtime/store/transfer_tasks.h"
#include "schema/version.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace kiln::rt {
namespace fs = std::filesystem;

namespace detail {

Status runTasks(std::vector<Task> &tasks, int parallelism, S3Client &client,
                const std::function<void()> &tick, const std::atomic<bool> *interrupted) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::condition_variable done;
  size_t running = 0;
  Status firstError;
  auto worker = [&] {
    for (size_t i; (i = next++) < tasks.size();) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!firstError.isOk())
          break;
      }
      Status status = tasks[i]();
      if (!status.isOk()) {
        std::lock_guard<std::mutex> lock(mutex);
        // A cancelled part only echoes the failure that cancelled it.
        if (firstError.isOk() || firstError.code() == StatusCode::kCancelled)
          firstError = status;
        client.cancel();
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    --running;
    done.notify_all();
  };
  size_t threads = std::min<size_t>(std::max(parallelism, 1), tasks.size());
  running = threads;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back(worker);
  {
    std::unique_lock<std::mutex> lock(mutex);
    auto nextTick = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (running > 0) {
      done.wait_until(lock, nextTick);
      if (interrupted && interrupted->load() && firstError.isOk()) {
        firstError = cancelled("cancelled"); // workers stop taking tasks
        client.cancel();                     // and the requests in flight stop
      }
      if (tick && running > 0 && std::chrono::steady_clock::now() >= nextTick) {
        nextTick += std::chrono::seconds(1);
        lock.unlock();
        tick();
        lock.lock();
      }
    }
  }
  for (std::thread &thread : pool)
    thread.join();
  if (interrupted && interrupted->load())
    return cancelled("interrupted by SIGINT or SIGTERM");
  return firstError;
}

void Progress::report(bool finished) {
  if (!options.progress)
    return;
  TransferProgress p;
  p.action = action;
  p.bytesDone = bytes.load();
  p.bytesTotal = total;
  p.filesDone = filesDone.load();
  p.filesTotal = files;
  p.finished = finished;
  options.progress(p);
}

Result<std::unique_ptr<S3Client>> makeClient(const TransferOptions &options) {
  if (options.partSize < kMinPartSize)
    return invalidArgument("part size " + std::to_string(options.partSize) +
                           " bytes is below S3's minimum of 5 MiB (--part-size-mb)");
  KILN_ASSIGN_OR_RETURN(AwsConfig config, resolveAwsConfig(options.aws));
  return std::make_unique<S3Client>(std::move(config), options.client);
}

} // namespace detail

namespace {

using detail::makeClient;
using detail::stagedObjectKey;
using detail::Progress;
using detail::runTasks;
using detail::Task;

bool isTarballUrl(const std::string &url) {
  auto endsWith = [&](const std::string &suffix) {
    return url.size() >= suffix.size() &&
           url.compare(url.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return endsWith(".tar.gz") || endsWith(".tgz") || endsWith(".tar");
}

// Removes a temporary directory unless released.
struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty())
      fs::remove_all(path, ec);
  }
};

Status checkDestination(const std::string &destDir, bool replace) {
  std::error_code ec;
  fs::file_status st = fs::symlink_status(destDir, ec);
  if (!fs::exists(st))
    return okStatus();
  if (!fs::is_directory(st))
    return failedPrecondition("'" + destDir + "' exists and is not a directory");
  if (fs::is_empty(destDir, ec))
    return okStatus();
  if (!replace)
    return failedPrecondition("'" + destDir +
                              "' already exists and is not empty; remove it or "
                              "pass --force to replace it");
  if (!fs::exists(destDir + "/" + kManifestFileName, ec))
    return failedPrecondition("'" + destDir + "' is not a kiln artifact; refusing to replace it");
  return okStatus();
}

Status publishDir(const std::string &tmp, const std::string &destDir) {
  std::error_code ec;
  std::string old;
  if (fs::exists(fs::symlink_status(destDir, ec))) {
    old = destDir + ".old-" + std::to_string(::getpid());
    fs::remove_all(old, ec);
    fs::rename(destDir, old, ec);
    if (ec)
      return unavailable("cannot move '" + destDir + "' aside: " + ec.message());
  }
  fs::rename(tmp, destDir, ec);
  if (ec) {
    std::error_code restore;
    if (!old.empty())
      fs::rename(old, destDir, restore);
    return unavailable("cannot rename '" + tmp + "' to '" + destDir + "': " + ec.message());
  }
  if (!old.empty())
    fs::remove_all(old, ec);
  return okStatus();
}

struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0)
      ::close(fd);
  }
};

void addRangeTasks(S3Client &client, const std::string &bucket, const std::string &key,
                   uint64_t size, int fd, const TransferOptions &options, Progress &progress,
                   std::vector<Task> &tasks) {
  for (uint64_t offset = 0; offset < size; offset += options.partSize) {
    uint64_t length = std::min(options.partSize, size - offset);
    tasks.push_back([&client, &progress, bucket, key, offset, length, fd]() {
      return client.getObjectRange(bucket, key, offset, length, fd, offset, &progress.bytes);
    });
  }
}

Status syncFile(int fd, const std::string &path) {
  return ::fdatasync(fd) == 0 ? okStatus()
                              : unavailable("cannot sync '" + path + "': " + std::strerror(errno));
}

// Downloads `files` (from `keys`, in the same order) into `dir` as ranged GETs of partSize, in
// parallel.
Status downloadFiles(S3Client &client, const std::string &bucket,
                     const std::vector<ManifestFile> &files, const std::vector<std::string> &keys,
                     const std::string &dir, const TransferOptions &options, Progress &progress) {
  std::vector<OpenFile> fds(files.size());
  std::vector<Task> tasks;
  for (size_t i = 0; i < files.size(); ++i) {
    std::string path = dir + "/" + files[i].name;
    fds[i].fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fds[i].fd < 0 || ::ftruncate(fds[i].fd, off_t(files[i].size)) != 0)
      return unavailable("cannot create '" + path + "': " + std::strerror(errno));
    progress.total += files[i].size;
    addRangeTasks(client, bucket, keys[i], files[i].size, fds[i].fd, options, progress, tasks);
  }
  KILN_RETURN_IF_ERROR(
      runTasks(tasks, options.parallelism, client, [&] { progress.report(false); },
                 options.interrupted));
  for (size_t i = 0; i < files.size(); ++i)
    KILN_RETURN_IF_ERROR(syncFile(fds[i].fd, dir + "/" + files[i].name));
  return okStatus();
}

// s3://bucket/key.tar.gz: download beside destDir, then extract safely and check the manifest.
Status pullTarball(S3Client &client, const S3Location &from, const std::string &destDir,
                   const PullOptions &options) {
  std::string tmp = destDir + ".pull-" + std::to_string(::getpid()) + ".tar";
  TempDir cleanup{tmp};
  KILN_ASSIGN_OR_RETURN(uint64_t size, client.objectSize(from.bucket, from.prefix));
  Progress progress{"pull", options};
  progress.files = 1;
  progress.total = size;
  {
    OpenFile file;
    file.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file.fd < 0 || ::ftruncate(file.fd, off_t(size)) != 0)
      return unavailable("cannot create '" + tmp + "': " + std::strerror(errno));
    std::vector<Task> tasks;
    addRangeTasks(client, from.bucket, from.prefix, size, file.fd, options, progress, tasks);
    KILN_RETURN_IF_ERROR(
        runTasks(tasks, options.parallelism, client, [&] { progress.report(false); },
                 options.interrupted));
  }
  progress.filesDone = 1;
  progress.report(true);
  // Errors name the object in S3, not the temporary download.
  Status extracted = extractArtifactArchive(tmp, destDir);
  if (extracted.isOk())
    return extracted;
  std::string message = extracted.message();
  for (size_t at = message.find(tmp); at != std::string::npos; at = message.find(tmp, at))
    message.replace(at, tmp.size(), from.url());
  return Status(extracted.code(), message);
}

// Where each file of the manifest is read from: its staged copy when a re-push left one (see
// runtime/store/push.cc), else its plain key. A store that refuses the listing has none.
std::vector<std::string> sourceKeys(S3Client &client, const S3Location &from,
                                    const std::vector<ManifestFile> &files, bool *anyStaged) {
  std::map<std::string, uint64_t> staged;
  if (Result<std::vector<S3Object>> listed =
          client.listObjects(from.bucket, stagedObjectKey(from, ""));
      listed.isOk())
    for (const S3Object &object : *listed)
      staged[object.key] = object.size;
  std::vector<std::string> keys;
  *anyStaged = false;
  for (const ManifestFile &file : files) {
    auto it = staged.find(stagedObjectKey(from, file.sha256));
    bool useStaged = it != staged.end() && it->second == file.size;
    *anyStaged |= useStaged;
    keys.push_back(useStaged ? it->first : from.key(file.name));
  }
  return keys;
}

Status pullPrefix(S3Client &client, const S3Location &from, const std::string &destDir,
                  const PullOptions &options) {
  KILN_ASSIGN_OR_RETURN(std::string manifestText,
                        client.getObject(from.bucket, from.key(kManifestFileName)));
  KILN_ASSIGN_OR_RETURN(std::vector<ManifestFile> files,
                        parseManifestFiles(manifestText, from.url(kManifestFileName)));
  std::string tmp = destDir + ".pull-" + std::to_string(::getpid());
  TempDir cleanup{tmp};
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    return unavailable("cannot create '" + tmp + "': " + ec.message());
  Progress progress{"pull", options};
  progress.files = int(files.size());
  bool anyStaged = false;
  std::vector<std::string> keys = sourceKeys(client, from, files, &anyStaged);
  Status downloaded = downloadFiles(client, from.bucket, files, keys, tmp, options, progress);
  if (downloaded.code() == StatusCode::kNotFound && anyStaged) {
    // The push that staged them finished meanwhile and removed its staged copies: by then every
    // plain key holds this manifest's bytes. (The first client was cancelled by the failure.)
    S3Client retry(client.config(), options.client);
    progress.bytes = 0;
    progress.total = 0;
    keys = sourceKeys(retry, from, files, &anyStaged);
    downloaded = downloadFiles(retry, from.bucket, files, keys, tmp, options, progress);
  }
  KILN_RETURN_IF_ERROR(downloaded);
  Status verified = verifyArtifactFiles(tmp, files);
  if (!verified.isOk())
    return dataLoss(verified.message() + " (the object under " + from.url() +
                    " is corrupted or was replaced during the pull; nothing was written to '" +
                    destDir + "')");
  progress.filesDone = int(files.size());
  progress.report(true);
  KILN_RETURN_IF_ERROR(writeFileAtomic(tmp + "/" + kManifestFileName, manifestText));
  KILN_RETURN_IF_ERROR(publishDir(tmp, destDir));
  cleanup.path.clear();
  return okStatus();
}

} // namespace

namespace {

constexpr std::initializer_list<const char *> kPullSuffixes = {".pull-", ".new-", ".old-",
                                                               ".extract-"};

// The pid of `name` when it is `base` + one of `suffixes` + digits (+ ".tar").
std::optional<pid_t> temporaryPid(const std::string &name, const std::string &base,
                                  std::initializer_list<const char *> suffixes) {
  for (const char *suffix : suffixes) {
    std::string prefix = base + suffix;
    if (name.rfind(prefix, 0) != 0)
      continue;
    std::string digits = name.substr(prefix.size());
    if (digits.size() > 4 && digits.compare(digits.size() - 4, 4, ".tar") == 0)
      digits.resize(digits.size() - 4);
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return static_cast<pid_t>(std::stol(digits));
  }
  return std::nullopt;
}

bool processRuns(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

// Removes the entries of `dir` named base + suffix + PID whose process no longer runs.
int removeStaleTemporaries(const fs::path &dir, const std::string &base,
                           std::initializer_list<const char *> suffixes) {
  std::error_code ec;
  int removed = 0;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    std::optional<pid_t> pid = temporaryPid(entry.path().filename().string(), base, suffixes);
    if (pid && *pid != ::getpid() && !processRuns(*pid) && fs::remove_all(entry.path(), ec) > 0)
      ++removed;
  }
  return removed;
}

} // namespace

int removeStalePullTemporaries(const std::string &destDir) {
  std::error_code ec;
  fs::path dest = fs::absolute(destDir, ec).lexically_normal();
  if (dest.filename().empty())
    dest = dest.parent_path();
  return removeStaleTemporaries(dest.parent_path(), dest.filename().string(), kPullSuffixes);
}

Status pullArtifact(const std::string &s3Url, const std::string &destDir,
                    const PullOptions &options) {
  KILN_ASSIGN_OR_RETURN(S3Location from, parseS3Url(s3Url));
  KILN_RETURN_IF_ERROR(checkDestination(destDir, options.replace));
  if (int stale = removeStalePullTemporaries(destDir); stale > 0 && options.log)
    options.log("removed " + std::to_string(stale) + " temporary director" +
                (stale == 1 ? "y" : "ies") + " left by interrupted pulls beside '" + destDir + "'");
  std::error_code ec;
  fs::path parent = fs::absolute(destDir, ec).parent_path();
  fs::create_directories(parent, ec);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, makeClient(options));
  if (isTarballUrl(s3Url)) {
    if (fs::exists(destDir, ec) && fs::is_empty(destDir, ec))
      fs::remove(destDir, ec);
    if (options.replace && fs::exists(destDir, ec)) {
      std::string tmp = destDir + ".new-" + std::to_string(::getpid());
      KILN_RETURN_IF_ERROR(pullTarball(*client, from, tmp, options));
      return publishDir(tmp, destDir);
    }
    return pullTarball(*client, from, destDir, options);
  }
  return pullPrefix(*client, from, destDir, options);
}

std::string defaultCacheDir() {
  if (const char *dir = std::getenv("KILN_CACHE_DIR"); dir && *dir)
    return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/kiln";
  const char *home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln";
}

namespace {

// A cached artifact is usable when its manifest is byte-identical and every file has its size
// (the loader then checks the plan hash and, by default, every weight's hash).
bool cacheEntryMatches(const std::string &dir, const std::string &manifestText) {
  Result<std::string> cached = readFile(dir + "/" + kManifestFileName);
  if (!cached.isOk() || (!manifestText.empty() && *cached != manifestText))
    return false;
  Result<std::vector<ManifestFile>> files = parseManifestFiles(*cached, dir);
  if (!files.isOk())
    return false;
  std::error_code ec;
  for (const ManifestFile &file : *files)
    if (fs::file_size(dir + "/" + file.name, ec) != file.size || ec)
      return false;
  return true;
}

std::string urlIndexPath(const std::string &root, const std::string &source) {
  return root + "/urls/" + sha256Hex(source.data(), source.size());
}

} // namespace

Result<std::string> pullToCache(const std::string &s3Url, const PullOptions &options) {
  KILN_ASSIGN_OR_RETURN(S3Location from, parseS3Url(s3Url));
  std::error_code ec;
  std::string root =
      fs::absolute(options.cacheDir.empty() ? defaultCacheDir() : options.cacheDir, ec)
          .lexically_normal()
          .string();
  fs::create_directories(root + "/artifacts", ec);
  fs::create_directories(root + "/urls", ec);
  if (ec)
    return unavailable("cannot create the artifact cache '" + root + "': " + ec.message());
  auto note = [&](const std::string &line) {
    if (options.log)
      options.log(line);
  };
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, makeClient(options));
  // The same URL on another endpoint is another artifact.
  std::string source = client->config().endpointUrl + " " + s3Url;
  auto remember = [&](const std::string &dir) -> Result<std::string> {
    (void)writeFileAtomic(urlIndexPath(root, source), dir);
    return dir;
  };
  std::string manifestText;
  if (!isTarballUrl(s3Url)) {
    Result<std::string> fetched = client->getObject(from.bucket, from.key(kManifestFileName));
    if (!fetched.isOk()) {
      Result<std::string> known = readFile(urlIndexPath(root, source));
      if (fetched.status().code() == StatusCode::kUnavailable && known.isOk() &&
          cacheEntryMatches(*known, "")) {
        note("cannot reach " + s3Url + " (" + fetched.status().message() +
             "); using the artifact pulled from it earlier: " + *known);
        return *known;
      }
      return fetched.status();
    }
    manifestText = std::move(fetched).value();
    std::string dir = root + "/artifacts/" + sha256Hex(manifestText.data(), manifestText.size());
    if (cacheEntryMatches(dir, manifestText)) {
      note("using cached artifact " + dir + " (manifest of " + s3Url + " unchanged)");
      return remember(dir);
    }
    note("pulling " + s3Url + " into the cache " + dir);
    PullOptions pull = options;
    pull.replace = true;
    Status status = pullArtifact(s3Url, dir, pull);
    if (!status.isOk() && !cacheEntryMatches(dir, manifestText)) // another process may have won
      return status;
    return remember(dir);
  }
  // A tarball's manifest is inside it: pull, then file it under its manifest's hash.
  removeStaleTemporaries(root + "/artifacts", "", {".staging-"}); // of interrupted runs
  std::string staging = root + "/artifacts/.staging-" + std::to_string(::getpid());
  fs::remove_all(staging, ec);
  KILN_RETURN_IF_ERROR(pullArtifact(s3Url, staging, options));
  TempDir cleanup{staging};
  KILN_ASSIGN_OR_RETURN(manifestText, readFile(staging + "/" + kManifestFileName));
  std::string dir = root + "/artifacts/" + sha256Hex(manifestText.data(), manifestText.size());
  if (!cacheEntryMatches(dir, manifestText)) {
    fs::remove_all(dir, ec);
    fs::rename(staging, dir, ec);
    if (ec && !cacheEntryMatches(dir, manifestText))
      return unavailable("cannot move '" + staging + "' to '" + dir + "': " + ec.message());
  }
  return remember(dir);
}

} // namespace kiln::rt
