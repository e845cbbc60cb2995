// `kiln pull s3://BUCKET/PREFIX DIR`: downloads an artifact (or a model.tar.gz object) and
// publishes DIR only after every file's SHA-256 matches the manifest.
#include "runtime/store/transfer.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <iostream>

namespace kiln::tools {

// push_command.cc: the S3 flags and progress output push and pull share.
std::vector<FlagSpec> s3FlagSpecs();
Result<rt::PullOptions> transferOptionsFromFlags(const Args &args);

namespace {

CommandSpec pullSpec() {
  CommandSpec spec = {
      "pull",
      "s3://BUCKET/PREFIX (DIR | --to-cache) [options]",
      "Download an artifact pushed with `kiln push` (or a `kiln package` tarball:\n"
      "s3://BUCKET/KEY.tar.gz) into DIR. Files are downloaded in parallel ranged requests into a\n"
      "temporary directory beside DIR, checked against manifest.json (size and SHA-256), and only\n"
      "then renamed to DIR: a failed pull leaves nothing that loads.\n"
      "--to-cache pulls into the artifact cache instead (what `kiln serve s3://...` does): keyed\n"
      "by the SHA-256 of manifest.json, reused while the manifest is unchanged, and used as is\n"
      "when the store cannot be reached; prints the cached artifact's directory.",
      s3FlagSpecs(),
      1,
      2,
  };
  spec.flags.push_back({"--force", "", "replace an existing artifact at DIR"});
  spec.flags.push_back({"--to-cache", "", "pull into the artifact cache and print its directory"});
  spec.flags.push_back({"--cache-dir", "DIR",
                        "cache root (default: $KILN_CACHE_DIR, else "
                        "$XDG_CACHE_HOME/kiln, else ~/.cache/kiln)"});
  return spec;
}

} // namespace

int runPull(const CommandArgs &argv) {
  const CommandSpec spec = pullSpec();
  Result<Args> args = Args::parse(spec, argv);
  if (!args.isOk())
    return reportError("pull", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(spec);
    return 0;
  }
  Result<rt::PullOptions> options = transferOptionsFromFlags(*args);
  if (!options.isOk())
    return reportError("pull", options.status());
  options->replace = args->has("--force");
  options->cacheDir = args->getOr("--cache-dir", "");
  const std::string &url = args->positionals()[0];
  if (args->has("--to-cache") != (args->positionals().size() == 1))
    return reportError("pull",
                       invalidArgument("give either DIR or --to-cache (see kiln pull --help)"));
  if (args->has("--to-cache")) {
    options->log = [](const std::string &line) { std::cerr << "kiln: " << line << "\n"; };
    Result<std::string> dir = rt::pullToCache(url, *options);
    if (!dir.isOk())
      return reportError("pull", dir.status());
    std::cout << *dir << "\n";
    return 0;
  }
  const std::string &dir = args->positionals()[1];
  Status status = rt::pullArtifact(url, dir, *options);
  if (!status.isOk())
    return reportError("pull", status);
  if (!args->has("--quiet"))
    std::cerr << "pull: " << url << " -> " << dir
              << " (every file's sha256 matches manifest.json)\n";
  return 0;
}

} // namespace kiln::tools
