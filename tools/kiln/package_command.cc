// `kiln package ARTIFACT -o model.tar.gz`: the artifact's files at the root of a gzip'd tar, the
// layout SageMaker extracts to /opt/ml/model from a ModelDataUrl.
#include "runtime/store/tar_package.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <iostream>

namespace kiln::tools {
namespace {

const CommandSpec kPackageSpec = {
    "package",
    "ARTIFACT -o model.tar.gz [--no-verify] [--quiet]",
    "Pack a compiled artifact as a gzip'd tar with its files at the archive root (what SageMaker\n"
    "extracts to /opt/ml/model). Every file is checked against manifest.json first. The archive\n"
    "is deterministic: sorted names, mtime 0, owner 0.",
    {
        {"-o", "FILE", "the archive to write (required)"},
        {"--no-verify", "", "skip the sha256 check of every file against manifest.json"},
        {"--quiet", "", "no progress output"},
    },
    1,
    1,
};

} // namespace

int runPackage(const CommandArgs &argv) {
  Result<Args> args = Args::parse(kPackageSpec, argv);
  if (!args.isOk())
    return reportError("package", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(kPackageSpec);
    return 0;
  }
  if (!args->has("-o"))
    return reportError("package", invalidArgument("-o FILE is required (e.g. -o model.tar.gz)"));
  rt::PackageOptions options;
  options.verify = !args->has("--no-verify");
  if (!args->has("--quiet"))
    options.progress = [](const std::string &line) { std::cerr << line << "\n"; };
  std::string out = *args->get("-o");
  Status status = rt::packageArtifact(args->positionals()[0], out, options);
  if (!status.isOk())
    return reportError("package", status);
  if (!args->has("--quiet"))
    std::cerr << "package: wrote " << out << "\n";
  return 0;
}

} // namespace kiln::tools
