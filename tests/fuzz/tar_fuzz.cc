// Archive extraction (runtime/store/tar_package.h): extractArchive and extractArtifactArchive on
// hostile tar / tar.gz bytes (libarchive's readers, then kiln's entry checks: absolute paths,
// '..', links leaving the tree, entry types, manifest.json's list and sizes).
//
// Invariant: whatever the archive holds, nothing is written outside the destination. Each input
// extracts into <scratch>/dest (and <scratch>/artifact); afterwards the scratch directory holds
// only the archive and those two.
#include "runtime/store/tar_package.h"
#include "tests/fuzz/fuzz_util.h"

#include <filesystem>
#include <set>
#include <string>

namespace {

namespace fs = std::filesystem;

void checkNothingOutside(const kiln::fuzz::ScratchDir &dir) {
  const std::set<std::string> expected = {"archive", "dest", "artifact"};
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(dir.path(), ec)) {
    const std::string name = entry.path().filename().string();
    KILN_FUZZ_CHECK(expected.count(name) == 1, "extraction wrote '" + name + "' beside dest");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const kiln::fuzz::ScratchDir dir;
  dir.reset();
  dir.write("archive", std::string_view(reinterpret_cast<const char *>(data), size));
  std::error_code ec;
  fs::create_directory(dir.file("dest"), ec);
  kiln::Status plain = kiln::rt::extractArchive(dir.file("archive"), dir.file("dest"));
  kiln::Status artifact =
      kiln::rt::extractArtifactArchive(dir.file("archive"), dir.file("artifact"));
  if (!plain.isOk())
    KILN_FUZZ_CHECK(!plain.message().empty(), "an error without a message");
  if (!artifact.isOk())
    KILN_FUZZ_CHECK(!fs::exists(dir.file("artifact"), ec), "a failed extraction left its output");
  checkNothingOutside(dir);
  return 0;
}
