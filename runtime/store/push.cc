// kiln push. A first push to a prefix uploads each file to PREFIX/<name>, then manifest.json last.
// A push over an artifact already there keeps that artifact pullable until the new one replaces
// it, and keeps the plain PREFIX/<name> layout that the AWS CLI and SageMaker read:
//   1. files whose name, size and SHA-256 the old manifest already lists are left alone;
//   2. every other file goes to PREFIX/.kiln/objects/<sha256> (staged; an interrupted push leaves
//      the old manifest and old files untouched, and the next push reuses what it staged);
//   3. manifest.json is replaced: from here a pull reads changed files from their staged copies;
//   4. each staged copy is copied to PREFIX/<name> inside S3 (no bytes through the client);
//   5. staged copies, and files the new manifest no longer lists, are deleted.
// Content addressing makes every read safe: whatever a pull finds at a staged key has the bytes
// the manifest's SHA-256 names, and the pull checks every file against it anyway.
#include "runtime/base/file.h"
#include "runtime/store/manifest_files.h"
#include "runtime/store/transfer.h"
#include "runtime/store/transfer_tasks.h"
#include "schema/version.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace kiln::rt {

namespace detail {

std::string stagedObjectKey(const S3Location &at, const std::string &sha256) {
  return at.key(".kiln/objects/" + sha256);
}

} // namespace detail

namespace {

using detail::makeClient;
using detail::Progress;
using detail::runTasks;
using detail::stagedObjectKey;
using detail::Task;

constexpr uint64_t kMaxCopyObjectBytes = uint64_t(5) << 30; // S3's single CopyObject limit
constexpr uint64_t kMaxPartBytes = uint64_t(5) << 30;
constexpr uint64_t kMaxParts = 10000;

struct MultipartUpload {
  std::string key;
  std::string uploadId;
  std::vector<std::string> etags;
};

// One object to write: `bytes` to `key`.
struct Upload {
  std::string key;
  std::span<const uint8_t> bytes;
};

// Uploads or copies to run together: single-request tasks, and multipart uploads whose parts are
// tasks too (completed once every task has run).
struct Batch {
  std::vector<Task> tasks;
  std::vector<std::unique_ptr<MultipartUpload>> multiparts;
};

// Creates a multipart upload of `parts` parts to `key`, owned by `batch`.
Result<MultipartUpload *> startMultipart(S3Client &client, const std::string &bucket,
                                         const std::string &key, size_t parts, Batch &batch) {
  KILN_ASSIGN_OR_RETURN(std::string uploadId, client.createMultipartUpload(bucket, key));
  auto multipart = std::make_unique<MultipartUpload>();
  multipart->key = key;
  multipart->uploadId = uploadId;
  multipart->etags.resize(parts);
  batch.multiparts.push_back(std::move(multipart));
  return batch.multiparts.back().get();
}

// Adds the tasks of one upload: one PUT, or a multipart upload of parts in parallel.
Status planUpload(S3Client &client, const std::string &bucket, const Upload &upload,
                  const TransferOptions &options, Progress &progress, Batch &batch) {
  std::span<const uint8_t> bytes = upload.bytes;
  if (bytes.size() <= options.partSize) {
    batch.tasks.push_back([&client, &progress, bucket, key = upload.key, bytes]() {
      KILN_RETURN_IF_ERROR(client.putObject(bucket, key, bytes, &progress.bytes));
      ++progress.filesDone;
      return okStatus();
    });
    return okStatus();
  }
  size_t parts = (bytes.size() + options.partSize - 1) / options.partSize;
  KILN_ASSIGN_OR_RETURN(MultipartUpload * u,
                        startMultipart(client, bucket, upload.key, parts, batch));
  for (size_t p = 0; p < parts; ++p) {
    std::span<const uint8_t> part =
        bytes.subspan(p * options.partSize,
                      std::min<size_t>(options.partSize, bytes.size() - p * options.partSize));
    batch.tasks.push_back([&client, &progress, bucket, u, p, part]() {
      KILN_ASSIGN_OR_RETURN(u->etags[p], client.uploadPart(bucket, u->key, u->uploadId,
                                                           int(p + 1), part, &progress.bytes));
      return okStatus();
    });
  }
  return okStatus();
}

// A failed or interrupted push: its multipart uploads are aborted (S3 keeps and bills their parts
// otherwise), and `failure` says so, or says how to abort one by hand when that fails too.
Status abortUploads(const S3Client &client, const std::string &bucket,
                    const std::vector<std::unique_ptr<MultipartUpload>> &multiparts,
                    const PushOptions &options, const Status &failure) {
  if (multiparts.empty())
    return failure;
  S3Client cleanup(client.config(), options.client); // the first client is cancelled
  std::string notes;
  int aborted = 0;
  for (const auto &upload : multiparts) {
    Status abort = cleanup.abortMultipartUpload(bucket, upload->key, upload->uploadId);
    if (abort.isOk()) {
      ++aborted;
      continue;
    }
    notes += "; aborting the multipart upload of s3://" + bucket + "/" + upload->key +
             " failed (" + abort.message() + "): abort it with aws s3api abort-multipart-upload "
             "--bucket " + bucket + " --key " + upload->key + " --upload-id " + upload->uploadId;
  }
  if (aborted > 0)
    notes = "; aborted " + std::to_string(aborted) + " multipart upload(s)" + notes;
  return Status(failure.code(), failure.message() + notes);
}

// Runs `batch` unless planning it failed (`planned`), then completes its multipart uploads; on any
// failure aborts them, so nothing is left half-uploaded. `progress`, when given, ticks and counts
// completed multipart files.
Status runBatch(S3Client &client, const std::string &bucket, Batch &batch, Status planned,
                const PushOptions &options, Progress *progress) {
  Status status = std::move(planned);
  if (status.isOk())
    status = runTasks(
        batch.tasks, options.parallelism, client,
        progress ? std::function<void()>([progress] { progress->report(false); }) : nullptr,
        options.interrupted);
  for (const auto &upload : batch.multiparts) {
    if (!status.isOk())
      break;
    status = client.completeMultipartUpload(bucket, upload->key, upload->uploadId, upload->etags);
    if (status.isOk() && progress)
      ++progress->filesDone;
  }
  if (!status.isOk())
    return abortUploads(client, bucket, batch.multiparts, options, status);
  return okStatus();
}

// Uploads every entry of `uploads` in parallel.
Status uploadAll(S3Client &client, const S3Location &to, const std::vector<Upload> &uploads,
                 const PushOptions &options, Progress &progress) {
  Batch batch;
  Status planned;
  for (size_t i = 0; i < uploads.size() && planned.isOk(); ++i)
    planned = planUpload(client, to.bucket, uploads[i], options, progress, batch);
  return runBatch(client, to.bucket, batch, std::move(planned), options, &progress)
      .withContext("push to " + to.url());
}

// As a task, so SIGINT/SIGTERM cancels it like any upload.
Status putManifest(S3Client &client, const S3Location &to, const std::string &manifestText,
                   const PushOptions &options, Progress &progress) {
  std::vector<Task> tasks = {[&]() {
    return client.putObject(
        to.bucket, to.key(kManifestFileName),
        {reinterpret_cast<const uint8_t *>(manifestText.data()), manifestText.size()},
        &progress.bytes);
  }};
  KILN_RETURN_IF_ERROR(runTasks(tasks, 1, client, {}, options.interrupted)
                           .withContext("push to " + to.url() + ": writing " + kManifestFileName));
  ++progress.filesDone;
  return okStatus();
}

// What a re-push finds at the prefix: the files its manifest lists and every object's size.
struct RemoteArtifact {
  std::vector<ManifestFile> files;
  std::map<std::string, uint64_t> sizes;

  bool holds(const std::string &key, uint64_t size) const {
    auto it = sizes.find(key);
    return it != sizes.end() && it->second == size;
  }
  bool lists(const ManifestFile &file) const {
    return std::any_of(files.begin(), files.end(), [&](const ManifestFile &old) {
      return old.name == file.name && old.size == file.size && old.sha256 == file.sha256;
    });
  }
};

// Null when the prefix holds no manifest.json (a first push).
Result<std::optional<RemoteArtifact>> readRemoteArtifact(S3Client &client, const S3Location &to,
                                                         const PushOptions &options) {
  Result<std::string> manifest = client.getObject(to.bucket, to.key(kManifestFileName));
  if (manifest.status().code() == StatusCode::kNotFound)
    return std::optional<RemoteArtifact>();
  KILN_RETURN_IF_ERROR(manifest.status());
  RemoteArtifact remote;
  Result<std::vector<ManifestFile>> files =
      parseManifestFiles(*manifest, to.url(kManifestFileName));
  if (files.isOk())
    remote.files = std::move(files).value();
  else if (options.log) // an unreadable manifest protects nothing: every file is uploaded
    options.log("ignoring the unreadable manifest already there: " + files.status().message());
  KILN_ASSIGN_OR_RETURN(std::vector<S3Object> objects, client.listObjects(to.bucket, to.key("")));
  for (const S3Object &object : objects)
    remote.sizes[object.key] = object.size;
  return std::optional<RemoteArtifact>(std::move(remote));
}

// Adds the server-side copy of `from` (of `size` bytes) to `to`: one CopyObject, or a multipart
// upload of part copies above S3's 5 GiB CopyObject limit.
Status planCopy(S3Client &client, const std::string &bucket, const std::string &from,
                const std::string &to, uint64_t size, const PushOptions &options, Batch &batch) {
  if (size <= kMaxCopyObjectBytes) {
    batch.tasks.push_back(
        [&client, bucket, from, to]() { return client.copyObject(bucket, from, to); });
    return okStatus();
  }
  uint64_t partSize = std::max(options.partSize, (size + kMaxParts - 1) / kMaxParts);
  partSize = std::min(partSize, kMaxPartBytes);
  KILN_ASSIGN_OR_RETURN(MultipartUpload * u,
                        startMultipart(client, bucket, to, (size + partSize - 1) / partSize, batch));
  for (size_t p = 0; p < u->etags.size(); ++p) {
    uint64_t offset = p * partSize, length = std::min(partSize, size - offset);
    batch.tasks.push_back([&client, bucket, from, u, p, offset, length]() {
      KILN_ASSIGN_OR_RETURN(u->etags[p], client.uploadPartCopy(bucket, u->key, u->uploadId,
                                                               int(p + 1), from, offset, length));
      return okStatus();
    });
  }
  return okStatus();
}

// Step 4: every staged file copied to its plain key.
Status copyStagedToPlainKeys(S3Client &client, const S3Location &to,
                             const std::vector<ManifestFile> &staged, const PushOptions &options) {
  Batch batch;
  Status planned;
  for (size_t i = 0; i < staged.size() && planned.isOk(); ++i)
    planned = planCopy(client, to.bucket, stagedObjectKey(to, staged[i].sha256),
                       to.key(staged[i].name), staged[i].size, options, batch);
  return runBatch(client, to.bucket, batch, std::move(planned), options, nullptr);
}

// Step 5: deletes what the new artifact does not use. A failure here leaves only clutter (the
// artifact is complete), so it is reported in the log rather than failing the push.
void removeLeftovers(S3Client &client, const S3Location &to, const RemoteArtifact &remote,
                     const std::vector<ManifestFile> &files, const std::set<std::string> &staged,
                     const PushOptions &options) {
  std::set<std::string> keys = staged;
  std::string stagedPrefix = stagedObjectKey(to, "");
  for (const auto &[key, size] : remote.sizes)
    if (key.rfind(stagedPrefix, 0) == 0) // left by an earlier interrupted push too
      keys.insert(key);
  for (const ManifestFile &old : remote.files)
    if (std::none_of(files.begin(), files.end(),
                     [&](const ManifestFile &f) { return f.name == old.name; }) &&
        remote.sizes.count(to.key(old.name)))
      keys.insert(to.key(old.name));
  for (const std::string &key : keys)
    if (Status deleted = client.deleteObject(to.bucket, key);
        !deleted.isOk() && deleted.code() != StatusCode::kNotFound && options.log)
      options.log("could not delete s3://" + to.bucket + "/" + key + " (" + deleted.message() +
                  "); the artifact is complete, the object is only clutter");
}

Status rePush(S3Client &client, const S3Location &to, const RemoteArtifact &remote,
              const std::vector<ManifestFile> &files, const std::vector<MappedFile> &mapped,
              const std::string &manifestText, const PushOptions &options, Progress &progress) {
  std::vector<ManifestFile> changed;
  std::vector<Upload> uploads;
  std::set<std::string> stagedKeys;
  int unchanged = 0, stagedBefore = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    std::string key = stagedObjectKey(to, files[i].sha256);
    // A staged copy exists only until its plain key is written: while it does, the plain key may
    // still hold the previous bytes (a push interrupted after its manifest) and is rewritten.
    if (remote.lists(files[i]) && remote.holds(to.key(files[i].name), files[i].size) &&
        !remote.holds(key, files[i].size)) {
      ++unchanged;
      continue;
    }
    changed.push_back(files[i]);
    if (!stagedKeys.insert(key).second) // same bytes as another file: staged once
      continue;
    if (remote.holds(key, files[i].size)) {
      ++stagedBefore;
      continue;
    }
    uploads.push_back({key, mapped[i].bytes()});
    progress.total += mapped[i].size();
  }
  progress.files = int(uploads.size()) + 1;
  if (options.log)
    options.log("replacing the artifact at " + to.url() + ": " + std::to_string(unchanged) +
                " of " + std::to_string(files.size()) + " files unchanged, " +
                std::to_string(uploads.size()) + " to upload" +
                (stagedBefore ? ", " + std::to_string(stagedBefore) +
                                    " staged by an earlier interrupted push"
                              : "") +
                "; the old artifact stays pullable until its manifest is replaced");
  KILN_RETURN_IF_ERROR(
      uploadAll(client, to, uploads, options, progress)
          .withContext("the artifact already at " + to.url() + " is unchanged"));
  KILN_RETURN_IF_ERROR(putManifest(client, to, manifestText, options, progress));
  Status copied = copyStagedToPlainKeys(client, to, changed, options);
  if (!copied.isOk())
    return copied.withContext(
        "push to " + to.url() + ": the new artifact is published and kiln pulls it, but its " +
        std::to_string(changed.size()) +
        " changed file(s) are still only under .kiln/objects/ (the AWS CLI and SageMaker read "
        "the old bytes at their plain keys); run the same kiln push again to finish");
  removeLeftovers(client, to, remote, files, stagedKeys, options);
  return okStatus();
}

Status firstPush(S3Client &client, const S3Location &to, const std::vector<ManifestFile> &files,
                 const std::vector<MappedFile> &mapped, const std::string &manifestText,
                 const PushOptions &options, Progress &progress) {
  std::vector<Upload> uploads;
  for (size_t i = 0; i < files.size(); ++i) {
    uploads.push_back({to.key(files[i].name), mapped[i].bytes()});
    progress.total += mapped[i].size();
  }
  progress.files = int(files.size()) + 1;
  KILN_RETURN_IF_ERROR(uploadAll(client, to, uploads, options, progress));
  // Last, so a reader never finds a manifest whose files are still on their way.
  return putManifest(client, to, manifestText, options, progress);
}

} // namespace

Status pushArtifact(const std::string &artifactDir, const std::string &s3Url,
                    const PushOptions &options) {
  KILN_ASSIGN_OR_RETURN(S3Location to, parseS3Url(s3Url));
  std::string manifestText;
  KILN_ASSIGN_OR_RETURN(std::vector<ManifestFile> files,
                        readArtifactManifest(artifactDir, &manifestText));
  if (options.verifyBeforePush)
    KILN_RETURN_IF_ERROR(verifyArtifactFiles(artifactDir, files)
                             .withContext("refusing to push a corrupted artifact"));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, makeClient(options));
  std::vector<MappedFile> mapped;
  for (const ManifestFile &file : files) {
    KILN_ASSIGN_OR_RETURN(MappedFile m, MappedFile::open(artifactDir + "/" + file.name));
    mapped.push_back(std::move(m));
  }
  Progress progress{"push", options};
  progress.total = manifestText.size();
  KILN_ASSIGN_OR_RETURN(std::optional<RemoteArtifact> remote,
                        readRemoteArtifact(*client, to, options));
  if (remote) {
    KILN_RETURN_IF_ERROR(
        rePush(*client, to, *remote, files, mapped, manifestText, options, progress));
  } else {
    KILN_RETURN_IF_ERROR(firstPush(*client, to, files, mapped, manifestText, options, progress));
  }
  progress.report(true);
  return okStatus();
}

} // namespace kiln::rt
