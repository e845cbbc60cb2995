#include "runtime/store/tar_package.h"

#include "runtime/store/manifest_files.h"
#include "schema/version.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
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

Status copyData(archive *in, archive *out, const std::string &where) {
  const void *block;
  size_t size;
  la_int64_t offset;
  for (;;) {
    int rc = archive_read_data_block(in, &block, &size, &offset);
    if (rc == ARCHIVE_EOF)
      return okStatus();
    if (rc != ARCHIVE_OK)
      return dataLoss(where + ": " + archiveError(in));
    if (archive_write_data_block(out, block, size, offset) != ARCHIVE_OK)
      return unavailable(where + ": " + archiveError(out));
  }
}

} // namespace

Status extractArchive(const std::string &archivePath, const std::string &destDir) {
  ArchivePtr in(archive_read_new(), archive_read_free);
  archive_read_support_format_tar(in.get());
  archive_read_support_format_gnutar(in.get());
  archive_read_support_filter_all(in.get());
  if (archive_read_open_filename(in.get(), archivePath.c_str(), size_t(1) << 20) != ARCHIVE_OK)
    return dataLoss("cannot open archive '" + archivePath + "': " + archiveError(in.get()));
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
    archive_entry_set_pathname(entry, (root + "/" + name).c_str());
    if (const char *hard = archive_entry_hardlink(entry))
      archive_entry_set_hardlink(entry, (root + "/" + hard).c_str());
    archive_entry_set_uid(entry, getuid());
    archive_entry_set_gid(entry, getgid());
    archive_entry_set_perm(entry, archive_entry_filetype(entry) == AE_IFDIR ? 0755 : 0644);
    if (archive_write_header(out.get(), entry) != ARCHIVE_OK)
      return dataLoss(where + " cannot be extracted: " + archiveError(out.get()));
    if (archive_entry_size(entry) > 0)
      KILN_RETURN_IF_ERROR(copyData(in.get(), out.get(), where));
    if (archive_write_finish_entry(out.get()) != ARCHIVE_OK)
      return unavailable(where + ": " + archiveError(out.get()));
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK)
    return unavailable("extracting '" + archivePath + "': " + archiveError(out.get()));
  return okStatus();
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
  Status status = extractArchive(archivePath, tmp);
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
