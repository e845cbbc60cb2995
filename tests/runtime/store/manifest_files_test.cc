#include "runtime/store/manifest_files.h"
#include "tests/runtime/store/store_test_util.h"

#include <gtest/gtest.h>

namespace kiln::rt {
namespace {
using testing::TempDir;
using testing::writeFakeArtifact;

const std::string kSha(64, 'a');

std::string manifestWith(const std::string &name, const std::string &sha = kSha) {
  return "{\"files\": [{\"name\": \"" + name + "\", \"size\": 3, \"sha256\": \"" + sha + "\"}]}";
}

TEST(ManifestFiles, ParsesTheWritersFormat) {
  Result<std::vector<ManifestFile>> files = parseManifestFiles(manifestWith("plan.kiln"), "m");
  ASSERT_TRUE(files.isOk()) << files.status().toString();
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].name, "plan.kiln");
  EXPECT_EQ((*files)[0].size, 3u);
}

TEST(ManifestFiles, RejectsNamesThatAreNotPlainFiles) {
  for (const char *name : {"../x", "a/b", "/etc/passwd", "..", ".", "", "manifest.json"}) {
    Result<std::vector<ManifestFile>> files = parseManifestFiles(manifestWith(name), "remote");
    EXPECT_EQ(files.status().code(), StatusCode::kDataLoss) << name;
    EXPECT_NE(files.status().message().find("is not a plain file name"), std::string::npos)
        << files.status().message();
  }
  EXPECT_FALSE(parseManifestFiles(manifestWith("w", "ABC"), "m").isOk());
  EXPECT_FALSE(parseManifestFiles("{\"files\": []}", "m").isOk());
  EXPECT_FALSE(parseManifestFiles("not json", "m").isOk());
  std::string twice = "{\"files\": [{\"name\": \"a\", \"size\": 1, \"sha256\": \"" + kSha +
                      "\"}, {\"name\": \"a\", \"size\": 1, \"sha256\": \"" + kSha + "\"}]}";
  EXPECT_NE(parseManifestFiles(twice, "m").status().message().find("listed twice"),
            std::string::npos);
}

TEST(ManifestFiles, VerifyNamesTheFileAndBothHashes) {
  TempDir tmp;
  writeFakeArtifact(tmp.path(), {{"a.bin", "abc"}, {"b.bin", "xyz"}});
  Result<std::vector<ManifestFile>> files = readArtifactManifest(tmp.path());
  ASSERT_TRUE(files.isOk());
  EXPECT_TRUE(verifyArtifactFiles(tmp.path(), *files).isOk());
  ASSERT_TRUE(writeFileAtomic(tmp / "b.bin", "xyZ").isOk());
  Status status = verifyArtifactFiles(tmp.path(), *files);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "checksum mismatch for '" + tmp / "b.bin" +
                                  "': manifest.json says sha256 " + sha256Hex("xyz", 3) +
                                  ", the file has " + sha256Hex("xyZ", 3));
  ASSERT_TRUE(writeFileAtomic(tmp / "b.bin", "xy").isOk());
  EXPECT_NE(verifyArtifactFiles(tmp.path(), *files).message().find("has 2 bytes"),
            std::string::npos);
  std::filesystem::remove(tmp / "a.bin");
  EXPECT_NE(verifyArtifactFiles(tmp.path(), *files).message().find("missing"), std::string::npos);
}

} // namespace
} // namespace kiln::rt
