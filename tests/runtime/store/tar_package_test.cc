#include "runtime/store/tar_package.h"
#include "tests/runtime/store/store_test_util.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include <filesystem>

namespace kiln::rt {
namespace {
namespace fs = std::filesystem;
using testing::fileText;
using testing::TempDir;
using testing::writeFakeArtifact;

const std::map<std::string, std::string> kFiles = {
    {"plan.kiln", "PLAN BYTES"},
    {"weights.rank0.bin", std::string(300000, '\x5a')},
    {"tokenizer.json", "{\"model\": {}}"},
};

TEST(TarPackage, RoundTripPutsEveryFileAtTheArchiveRoot) {
  TempDir tmp;
  writeFakeArtifact(tmp / "model.kiln", kFiles);
  ASSERT_TRUE(packageArtifact(tmp / "model.kiln", tmp / "model.tar.gz").isOk());
  Status status = extractArtifactArchive(tmp / "model.tar.gz", tmp / "out");
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (const auto &[name, bytes] : kFiles)
    EXPECT_EQ(fileText(tmp / ("out/" + name)), bytes) << name;
  EXPECT_EQ(fileText(tmp / "out/manifest.json"), fileText(tmp / "model.kiln/manifest.json"));
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp / "out"), fs::directory_iterator()), 4);
}

TEST(TarPackage, IsByteForByteReproducible) {
  TempDir tmp;
  writeFakeArtifact(tmp / "model.kiln", kFiles);
  ASSERT_TRUE(packageArtifact(tmp / "model.kiln", tmp / "a.tar.gz").isOk());
  fs::last_write_time(tmp / "model.kiln/plan.kiln", fs::file_time_type::clock::now());
  ASSERT_TRUE(packageArtifact(tmp / "model.kiln", tmp / "b.tar.gz").isOk());
  EXPECT_EQ(fileText(tmp / "a.tar.gz"), fileText(tmp / "b.tar.gz"));
}

// Packages made at different times are equal only if gzip's header time (bytes 4-7, RFC 1952
// MTIME) is not the time of writing: it must be 0.
TEST(TarPackage, GzipHeaderCarriesNoTimestamp) {
  TempDir tmp;
  writeFakeArtifact(tmp / "model.kiln", kFiles);
  ASSERT_TRUE(packageArtifact(tmp / "model.kiln", tmp / "a.tar.gz").isOk());
  std::string bytes = fileText(tmp / "a.tar.gz");
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 2), "\x1f\x8b");
  EXPECT_EQ(bytes.substr(4, 4), std::string(4, '\0'));
}

// A large file reports progress inside it, not only when it starts.
TEST(TarPackage, ReportsProgressInsideALargeFile) {
  TempDir tmp;
  std::map<std::string, std::string> files = kFiles;
  files["weights.rank0.bin"] = std::string(size_t(5) << 20, '\x11'); // 5 MiB
  writeFakeArtifact(tmp / "model.kiln", files);
  PackageOptions options;
  std::vector<std::string> lines;
  options.progress = [&](const std::string &line) { lines.push_back(line); };
  options.progressEveryBytes = uint64_t(2) << 20;
  ASSERT_TRUE(packageArtifact(tmp / "model.kiln", tmp / "a.tar.gz", options).isOk());
  std::vector<std::string> inside;
  for (const std::string &line : lines)
    if (line.rfind("package: weights.rank0.bin: ", 0) == 0)
      inside.push_back(line);
  EXPECT_EQ(inside, (std::vector<std::string>{"package: weights.rank0.bin: 2/5 MiB",
                                              "package: weights.rank0.bin: 4/5 MiB"}));
}

TEST(TarPackage, RefusesACorruptedArtifactAndWritesNothing) {
  TempDir tmp;
  writeFakeArtifact(tmp / "model.kiln", kFiles);
  ASSERT_TRUE(writeFileAtomic(tmp / "model.kiln/plan.kiln", "PLAN BYTEZ").isOk());
  Status status = packageArtifact(tmp / "model.kiln", tmp / "model.tar.gz");
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("checksum mismatch for '" + tmp / "model.kiln/plan.kiln"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(fs::exists(tmp / "model.tar.gz"));
}

TEST(TarPackage, ExtractionChecksTheManifest) {
  TempDir tmp;
  writeFakeArtifact(tmp / "model.kiln", kFiles);
  // Packaged without the check, so the archive carries a file that disagrees with its manifest.
  ASSERT_TRUE(writeFileAtomic(tmp / "model.kiln/tokenizer.json", "{\"model\": []}").isOk());
  ASSERT_TRUE(packageArtifact(tmp / "model.kiln", tmp / "m.tar.gz", {/*verify=*/false}).isOk());
  Status status = extractArtifactArchive(tmp / "m.tar.gz", tmp / "out");
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("tokenizer.json"), std::string::npos) << status.message();
  EXPECT_FALSE(fs::exists(tmp / "out"));
}

// A crafted archive: one entry per (name, type, link target).
struct Entry {
  std::string name;
  mode_t type = AE_IFREG;
  std::string link; // symlink target, or hard link target when `hard`
  bool hard = false;
};

void writeArchive(const std::string &path, const std::vector<Entry> &entries) {
  archive *a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_add_filter_gzip(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const Entry &e : entries) {
    archive_entry *entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    archive_entry_set_filetype(entry, e.type);
    archive_entry_set_perm(entry, 0644);
    std::string body = e.type == AE_IFREG && !e.hard ? "evil" : "";
    archive_entry_set_size(entry, la_int64_t(body.size()));
    if (e.hard)
      archive_entry_set_hardlink(entry, e.link.c_str());
    else if (e.type == AE_IFLNK)
      archive_entry_set_symlink(entry, e.link.c_str());
    ASSERT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << e.name;
    if (!body.empty())
      archive_write_data(a, body.data(), body.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// An archive of regular files with the given bodies, in order.
void writeFilesArchive(const std::string &path,
                       const std::vector<std::pair<std::string, std::string>> &files) {
  archive *a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_add_filter_gzip(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const auto &[name, body] : files) {
    archive_entry *entry = archive_entry_new();
    archive_entry_set_pathname(entry, name.c_str());
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    archive_entry_set_size(entry, la_int64_t(body.size()));
    ASSERT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << name;
    archive_write_data(a, body.data(), body.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// The artifact's files as archive entries ("./" prefixes as tar -C dir . writes them), plus
// `extra`, with `resized` given another body.
std::vector<std::pair<std::string, std::string>>
artifactEntries(const fs::path &dir, const std::string &resized = "") {
  std::vector<std::pair<std::string, std::string>> files = {
      {"./manifest.json", fileText(dir / "manifest.json")}};
  for (const auto &[name, bytes] : kFiles)
    files.push_back({"./" + name, name == resized ? bytes + "more" : bytes});
  return files;
}

// A pulled archive is untrusted: an entry manifest.json does not list, or a listed file of
// another size, is refused before it is written, and nothing is published.
TEST(TarExtract, AnArtifactArchiveHoldsOnlyTheManifestsFilesAtTheirSizes) {
  TempDir tmp;
  writeFakeArtifact(tmp / "model.kiln", kFiles);
  auto good = artifactEntries(tmp / "model.kiln");
  writeFilesArchive(tmp / "good.tar.gz", good);
  Status ok = extractArtifactArchive(tmp / "good.tar.gz", tmp / "good");
  ASSERT_TRUE(ok.isOk()) << ok.toString(); // "./" names are the same files
  auto junk = good;
  junk.push_back({"junk.bin", std::string(1000, 'j')});
  writeFilesArchive(tmp / "junk.tar.gz", junk);
  Status status = extractArtifactArchive(tmp / "junk.tar.gz", tmp / "junk");
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("entry 'junk.bin' is not a file manifest.json lists"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(fs::exists(tmp / "junk"));
  writeFilesArchive(tmp / "big.tar.gz", artifactEntries(tmp / "model.kiln", "plan.kiln"));
  status = extractArtifactArchive(tmp / "big.tar.gz", tmp / "big");
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("entry './plan.kiln' has 14 bytes; manifest.json lists 10"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(fs::exists(tmp / "big"));
  writeFilesArchive(tmp / "nomanifest.tar.gz", {{"plan.kiln", "PLAN BYTES"}});
  status = extractArtifactArchive(tmp / "nomanifest.tar.gz", tmp / "nm");
  EXPECT_NE(status.message().find("has no manifest.json"), std::string::npos) << status.message();
}

struct HostileCase {
  const char *label;
  std::vector<Entry> entries;
  std::string phrase;
};

TEST(TarExtract, RejectsHostileArchivesAndWritesNothingOutside) {
  TempDir tmp;
  std::string outside = tmp / "outside"; // what every attack aims at
  std::string abs = outside + "/pwned";
  fs::create_directories(outside);
  const std::vector<HostileCase> cases = {
      {"absolute path", {{abs}}, "absolute path or climbs out"},
      {"dot-dot", {{"../outside/pwned"}}, "absolute path or climbs out"},
      {"nested dot-dot", {{"a/b/../../../outside/pwned"}}, "absolute path or climbs out"},
      {"symlink to an absolute path",
       {{"link", AE_IFLNK, outside}, {"link/pwned"}},
       "is a symlink to '" + outside + "' outside the tree"},
      {"symlink climbing out",
       {{"a/link", AE_IFLNK, "../../outside"}, {"a/link/pwned"}},
       "symlink to '../../outside' outside the tree"},
      {"hard link out", {{"h", AE_IFREG, "../outside/pwned", true}}, "hard link"},
      {"hard link absolute", {{"h", AE_IFREG, abs, true}}, "hard link"},
      {"fifo", {{"fifo", AE_IFIFO}}, "not a regular file, directory or symlink"},
  };
  int n = 0;
  for (const HostileCase &c : cases) {
    std::string archive = tmp / ("evil" + std::to_string(n) + ".tar.gz");
    std::string dest = tmp / ("dest" + std::to_string(n++));
    writeArchive(archive, c.entries);
    fs::create_directories(dest);
    Status status = extractArchive(archive, dest);
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << c.label << ": " << status.toString();
    EXPECT_NE(status.message().find("refusing to extract"), std::string::npos)
        << c.label << ": " << status.message();
    EXPECT_NE(status.message().find(c.phrase), std::string::npos)
        << c.label << ": " << status.message();
    EXPECT_FALSE(fs::exists(abs)) << c.label;
    EXPECT_TRUE(fs::is_empty(outside)) << c.label;
  }
  // The symlink-to-absolute message names its target.
  writeArchive(tmp / "abs-link.tar", {{"link", AE_IFLNK, "/etc"}});
  fs::create_directories(tmp / "d");
  Status status = extractArchive(tmp / "abs-link.tar", tmp / "d");
  EXPECT_NE(status.message().find("entry 'link' is a symlink to '/etc' outside the tree"),
            std::string::npos)
      << status.message();
}

TEST(TarExtract, AcceptsLinksThatStayInsideTheTree) {
  TempDir tmp;
  writeArchive(tmp / "ok.tar.gz", {{"a/file"},
                                   {"a/link", AE_IFLNK, "file"},
                                   {"b/up", AE_IFLNK, "../a/file"},
                                   {"hard", AE_IFREG, "a/file", true}});
  Status status = extractArchive(tmp / "ok.tar.gz", tmp.path());
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(fileText(tmp / "a/link"), "evil");
  EXPECT_EQ(fileText(tmp / "b/up"), "evil");
  EXPECT_EQ(fileText(tmp / "hard"), "evil");
}

TEST(TarExtract, DamagedArchiveIsAClearError) {
  TempDir tmp;
  writeFakeArtifact(tmp / "model.kiln", kFiles);
  ASSERT_TRUE(packageArtifact(tmp / "model.kiln", tmp / "m.tar.gz").isOk());
  std::string bytes = fileText(tmp / "m.tar.gz");
  ASSERT_TRUE(writeFileAtomic(tmp / "cut.tar.gz", bytes.substr(0, bytes.size() / 2)).isOk());
  Status status = extractArtifactArchive(tmp / "cut.tar.gz", tmp / "out");
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find(tmp / "cut.tar.gz"), std::string::npos) << status.message();
  EXPECT_FALSE(fs::exists(tmp / "out"));
}

TEST(TarExtract, PathInsideTree) {
  EXPECT_TRUE(archivePathInsideTree("a/b/c"));
  EXPECT_TRUE(archivePathInsideTree("./a"));
  EXPECT_FALSE(archivePathInsideTree(""));
  EXPECT_FALSE(archivePathInsideTree("/a"));
  EXPECT_FALSE(archivePathInsideTree(".."));
  EXPECT_FALSE(archivePathInsideTree("a/../b")); // entry names never need '..'
  EXPECT_TRUE(archivePathInsideTree("../b", "a/link"));
  EXPECT_FALSE(archivePathInsideTree("../../b", "a/link"));
  EXPECT_FALSE(archivePathInsideTree("../b", "link"));
  EXPECT_FALSE(archivePathInsideTree("/etc/passwd", "a/link"));
}

} // namespace
} // namespace kiln::rt
