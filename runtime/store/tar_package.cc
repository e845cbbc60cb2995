#include "runtime/store/tar_package.h"

#include "runtime/store/manifest_files.h"
#include "schema/version.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

namespace kiln::rt {
namespace fs = std::filesystem;

namespace {

using ArchivePtr = std::unique_ptr<archive, int (*)(archive *)>;
using EntryPtr = std::unique_ptr<archive_entry, void (*)(archive_entry *)>;

std::string archiveError(archive *a) {
  const char *message = archive_error_string(a);
  return message ? message : "unknown libarchive error";
}

// One progress line per `every` bytes of a large file ("weights.rank0.bin: 128/424 MiB").
void fileProgress(const PackageOptions &options, const std::string &name, uint64_t done,
                  uint64_t size) {
  if (options.progress)
    options.progress("package: " + name + ": " + std::to_string(done >> 20) + "/" +
                     std::to_string(size >> 20) + " MiB");
}

Status addFile(archive *out, const std::string &dir, const std::string &name, uint64_t size,
               const PackageOptions &options) {
  std::string path = dir + "/" + name;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return notFound("cannot open '" + path + "': " + std::strerror(errno));
  EntryPtr entry(archive_entry_new(), archive_entry_free);
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_size(entry.get(), la_int64_t(size));
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_mtime(entry.get(), 0, 0);
  archive_entry_set_uid(entry.get(), 0);
  archive_entry_set_gid(entry.get(), 0);
  Status status;
  if (archive_write_header(out, entry.get()) != ARCHIVE_OK)
    status = unavailable("cannot add '" + name + "' to the archive: " + archiveError(out));
  std::vector<char> buffer(size_t(1) << 20);
  uint64_t written = 0;
  while (status.isOk()) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      status = unavailable("cannot read '" + path + "': " + std::strerror(errno));
    if (n <= 0)
      break;
    if (archive_write_data(out, buffer.data(), size_t(n)) != n)
      status = unavailable("cannot write '" + name + "' into the archive: " + archiveError(out));
    uint64_t before = written;
    written += uint64_t(n);
    if (options.progressEveryBytes > 0 && written < size &&
        written / options.progressEveryBytes != before / options.progressEveryBytes)
      fileProgress(options, name, written, size);
  }
  ::close(fd);
  if (status.isOk() && written != size)
    status = dataLoss("'" + path + "' changed size while it was packaged");
  return status;
}

} // namespace

bool archivePathInsideTree(const std::string &path, const std::string &linkFrom) {
  if (path.empty() || path[0] == '/' || path.find('\0') != std::string::npos)
    return false;
  fs::path base = linkFrom.empty() ? fs::path() : fs::path(linkFrom).parent_path();
  int depth = 0;
  for (const fs::path &part : base / fs::path(path)) {
    std::string s = part.string();
    if (s == "..") {
      // A '..' inside the tree (a/../b) is harmless in a symlink target but never needed in an
      // entry name: entry names are rejected outright, link targets only when they climb out.
      if (linkFrom.empty() || --depth < 0)
        return false;
    } else if (!s.empty() && s != ".") {
      ++depth;
    }
  }
  return true;
}

Status packageArtifact(const std::string &artifactDir, const std::string &outPath,
                       const PackageOptions &options) {
  std::string manifestText;
  KILN_ASSIGN_OR_RETURN(std::vector<ManifestFile> files,
                        readArtifactManifest(artifactDir, &manifestText));
  if (options.verify)
    KILN_RETURN_IF_ERROR(verifyArtifactFiles(artifactDir, files));
  files.push_back({kManifestFileName, manifestText.size(), ""});
  std::sort(files.begin(), files.end(),
            [](const ManifestFile &a, const ManifestFile &b) { return a.name < b.name; });
  std::string tmp = outPath + ".tmp-" + std::to_string(::getpid());
  ArchivePtr out(archive_write_new(), archive_write_free);
  archive_write_set_format_pax_restricted(out.get());
  archive_write_add_filter_gzip(out.get());
  // gzip's header holds the time of writing unless told not to: leave it 0 (reproducible bytes).
  if (archive_write_set_filter_option(out.get(), "gzip", "timestamp", nullptr) != ARCHIVE_OK)
    return internalError("libarchive refused gzip:!timestamp: " + archiveError(out.get()));
  if (archive_write_open_filename(out.get(), tmp.c_str()) != ARCHIVE_OK)
    return unavailable("cannot create '" + tmp + "': " + archiveError(out.get()));
  Status status;
  for (const ManifestFile &file : files) {
    if (options.progress)
      options.progress("package: " + file.name + " (" + std::to_string(file.size) + " bytes)");
    status = addFile(out.get(), artifactDir, file.name, file.size, options);
    if (!status.isOk())
      break;
  }
  if (status.isOk() && archive_write_close(out.get()) != ARCHIVE_OK)
    status = unavailable("cannot finish '" + tmp + "': " + archiveError(out.get()));
  out.reset();
  std::error_code ec;
  if (status.isOk()) {
    fs::rename(tmp, outPath, ec);
    if (ec)
      status = unavailable("cannot rename '" + tmp + "' to '" + outPath + "': " + ec.message());
  }
  if (!status.isOk())
    fs::remove(tmp, ec);
  return status;
}

namespace {

// Checks one entry before it is written; `root` is the destination.
Status checkEntry(archive_entry *entry, const std::string &archivePath) {
  const char *rawName = archive_entry_pathname(entry);
  std::string name = rawName ? rawName : "";
  std::string where = archivePath + ": entry '" + name + "'";
  if (!archivePathInsideTree(name))
    return dataLoss(where + " is an absolute path or climbs out of the tree with '..'; refusing "
                            "to extract");
  if (const char *hard = archive_entry_hardlink(entry)) {
    if (!archivePathInsideTree(hard))
      return dataLoss(where + " is a hard link to '" + std::string(hard) +
                      "' outside the tree; refusing to extract");
    return okStatus();
  }
  mode_t type = archive_entry_filetype(entry);
  if (type == AE_IFLNK) {
    const char *target = archive_entry_symlink(entry);
    if (!target || !archivePathInsideTree(target, name))
      return dataLoss(where + " is a symlink to '" + std::string(target ? target : "") +
                      "' outside the tree; refusing to extract");
    return okStatus();
  }
  if (type != AE_IFREG && type != AE_IFDIR)
    return dataLoss(where + " is not a regular file, directory or symlink; refusing to extract");
  return okStatus();
}

// Copies the entry's data; more than `limit` bytes (its header's size, or the manifest's) is an
// error before the block past the limit is written.
Status copyData(archive *in, archive *out, const std::string &where, uint64_t limit) {
  const void *block;
  size_t size;
  la_int64_t offset;
  for (;;) {
    int rc = archive_read_data_block(in, &block, &size, &offset);
    if (rc == ARCHIVE_EOF)
      return okStatus();
    if (rc != ARCHIVE_OK)
      return dataLoss(where + ": " + archiveError(in));
    if (offset < 0 || uint64_t(offset) > limit || size > limit - uint64_t(offset))
      return dataLoss(where + " holds more than its " + std::to_string(limit) + " bytes");
    if (archive_write_data_block(out, block, size, offset) != ARCHIVE_OK)
      return unavailable(where + ": " + archiveError(out));
  }
}

} // namespace

namespace {

// "./plan.kiln" and "plan.kiln" name the same entry (tar -C dir . writes the first).
std::string plainName(std::string name) {
  while (name.rfind("./", 0) == 0)
    name.erase(0, 2);
  return name;
}

// An artifact archive holds manifest.json and the files it lists, nothing else, each of its
// listed size: checked per entry before it is written.
Status checkArtifactEntry(archive_entry *entry, const std::string &where,
                          const std::map<std::string, uint64_t> &allowed) {
  std::string name = plainName(archive_entry_pathname(entry));
  if (archive_entry_filetype(entry) == AE_IFDIR && (name.empty() || name == "."))
    return okStatus();
  auto it = allowed.find(name);
  if (it == allowed.end() || archive_entry_filetype(entry) != AE_IFREG ||
      archive_entry_hardlink(entry) != nullptr)
    return dataLoss(where + " is not a file manifest.json lists; an artifact archive holds only "
                            "those");
  if (!archive_entry_size_is_set(entry) || uint64_t(archive_entry_size(entry)) != it->second)
    return dataLoss(where + " has " + std::to_string(archive_entry_size(entry)) +
                    " bytes; manifest.json lists " + std::to_string(it->second));
  return okStatus();
}

ArchivePtr openArchiveForReading(const std::string &archivePath, Status &status) {
  ArchivePtr in(archive_read_new(), archive_read_free);
  archive_read_support_format_tar(in.get());
  archive_read_support_format_gnutar(in.get());
  archive_read_support_filter_all(in.get());
  if (archive_read_open_filename(in.get(), archivePath.c_str(), size_t(1) << 20) != ARCHIVE_OK)
    status = dataLoss("cannot open archive '" + archivePath + "': " + archiveError(in.get()));
  return in;
}

constexpr uint64_t kMaxManifestBytes = uint64_t(16) << 20;

// The text of the archive's manifest.json (a first pass over the headers, stopping there).
Result<std::string> archiveManifestText(const std::string &archivePath) {
  Status status;
  ArchivePtr in = openArchiveForReading(archivePath, status);
  KILN_RETURN_IF_ERROR(status);
  for (;;) {
    archive_entry *entry = nullptr;
    int rc = archive_read_next_header(in.get(), &entry);
    if (rc == ARCHIVE_EOF)
      return dataLoss("archive '" + archivePath + "' has no manifest.json: not a kiln artifact");
    if (rc != ARCHIVE_OK)
      return dataLoss("archive '" + archivePath + "' is damaged: " + archiveError(in.get()));
    if (plainName(archive_entry_pathname(entry)) != kManifestFileName ||
        archive_entry_filetype(entry) != AE_IFREG)
      continue;
    la_int64_t size = archive_entry_size(entry);
    if (size < 0 || uint64_t(size) > kMaxManifestBytes)
      return dataLoss("archive '" + archivePath + "': manifest.json has " + std::to_string(size) +
                      " bytes, more than the " + std::to_string(kMaxManifestBytes) + " allowed");
    std::string text(size_t(size), '\0');
    if (archive_read_data(in.get(), text.data(), text.size()) != size)
      return dataLoss("archive '" + archivePath + "': manifest.json is truncated");
    return text;
  }
}

Status extractArchiveChecked(const std::string &archivePath, const std::string &destDir,
                             const std::map<std::string, uint64_t> *allowed) {
  Status opened;
  ArchivePtr in = openArchiveForReading(archivePath, opened);
  KILN_RETURN_IF_ERROR(opened);
  ArchivePtr out(archive_write_disk_new(), archive_write_free);
  // Names were checked above; entries are written under an absolute destination, so only the
  // symlink and '..' guards apply here (defence in depth against a link planted earlier).
  archive_write_disk_set_options(out.get(),
                                 ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  std::error_code ec;
  std::string root = fs::absolute(destDir, ec).lexically_normal().string();
  while (root.size() > 1 && root.back() == '/')
    root.pop_back();
  for (;;) {
    archive_entry *entry = nullptr;
    int rc = archive_read_next_header(in.get(), &entry);
    if (rc == ARCHIVE_EOF)
      break;
    if (rc != ARCHIVE_OK)
      return dataLoss("archive '" + archivePath + "' is damaged: " + archiveError(in.get()));
    KILN_RETURN_IF_ERROR(checkEntry(entry, archivePath));
    std::string name = archive_entry_pathname(entry);
    std::string where = archivePath + ": entry '" + name + "'";
    if (allowed)
      KILN_RETURN_IF_ERROR(checkArtifactEntry(entry, where, *allowed));
    archive_entry_set_pathname(entry, (root + "/" + name).c_str());
    if (const char *hard = archive_entry_hardlink(entry))
      archive_entry_set_hardlink(entry, (root + "/" + hard).c_str());
    archive_entry_set_uid(entry, getuid());
    archive_entry_set_gid(entry, getgid());
    archive_entry_set_perm(entry, archive_entry_filetype(entry) == AE_IFDIR ? 0755 : 0644);
    if (archive_write_header(out.get(), entry) != ARCHIVE_OK)
      return dataLoss(where + " cannot be extracted: " + archiveError(out.get()));
    if (archive_entry_size(entry) > 0)
      KILN_RETURN_IF_ERROR(copyData(in.get(), out.get(), where, uint64_t(archive_entry_size(entry))));
    if (archive_write_finish_entry(out.get()) != ARCHIVE_OK)
      return unavailable(where + ": " + archiveError(out.get()));
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK)
    return unavailable("extracting '" + archivePath + "': " + archiveError(out.get()));
  return okStatus();
}

} // namespace

Status extractArchive(const std::string &archivePath, const std::string &destDir) {
  return extractArchiveChecked(archivePath, destDir, nullptr);
}

Status extractArtifactArchive(const std::string &archivePath, const std::string &destDir) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(destDir, ec)))
    return failedPrecondition("'" + destDir +
                              "' already exists; remove it or choose another "
                              "directory");
  std::string tmp = destDir + ".extract-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    return unavailable("cannot create '" + tmp + "': " + ec.message());
  // The manifest first: only the files it lists, of their listed sizes, are written.
  Status status;
  std::map<std::string, uint64_t> allowed;
  Result<std::string> manifest = archiveManifestText(archivePath);
  Result<std::vector<ManifestFile>> listed =
      manifest.isOk() ? parseManifestFiles(*manifest, archivePath + ": manifest.json")
                      : Result<std::vector<ManifestFile>>(manifest.status());
  if (!listed.isOk())
    status = listed.status();
  else {
    for (const ManifestFile &file : *listed)
      allowed[file.name] = file.size;
    allowed[kManifestFileName] = manifest->size();
    status = extractArchiveChecked(archivePath, tmp, &allowed);
  }
  if (status.isOk()) {
    Result<std::vector<ManifestFile>> files = readArtifactManifest(tmp);
    status = files.isOk() ? verifyArtifactFiles(tmp, *files) : files.status();
    if (!status.isOk())
      status = status.withContext("archive '" + archivePath + "' does not hold a valid artifact");
  }
  if (status.isOk()) {
    fs::rename(tmp, destDir, ec);
    if (ec)
      status = unavailable("cannot rename '" + tmp + "' to '" + destDir + "': " + ec.message());
  }
  if (!status.isOk())
    fs::remove_all(tmp, ec);
  return status;
}

} // namespace kiln::rt
