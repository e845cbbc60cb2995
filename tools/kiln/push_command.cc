// `kiln push ARTIFACT s3://BUCKET/PREFIX`: uploads every file of the artifact's manifest (large
// ones as parallel multipart uploads), then manifest.json last. Also the S3 flags and progress
// output that `kiln pull` shares.
#include "runtime/store/transfer.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>

namespace kiln::tools {

std::vector<FlagSpec> s3FlagSpecs() {
  return {
      {"--profile", "NAME",
       "profile of ~/.aws/credentials and ~/.aws/config (default: "
       "$AWS_PROFILE or 'default')"},
      {"--region", "REGION", "AWS region (default: $AWS_REGION, the profile's, else us-east-1)"},
      {"--endpoint-url", "URL", "S3-compatible endpoint (default: $AWS_ENDPOINT_URL)"},
      {"--part-size-mb", "N", "multipart part size in MiB, >= 5 (default 64)"},
      {"--parallel", "N", "parts in flight at once (default 8)"},
      {"--retries", "N", "attempts per request, the first included (default 5)"},
      {"--quiet", "", "no progress output"},
  };
}

namespace {

// SIGINT / SIGTERM during a transfer: a thread waits for them (they are blocked everywhere else)
// and sets the flag the transfer polls, so a push aborts its multipart uploads and a pull removes
// its temporary directory before the command exits, instead of dying mid-request.
const std::atomic<bool> *interruptFlag() {
  static std::atomic<bool> interrupted{false};
  static std::once_flag started;
  std::call_once(started, [] {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::thread([signals] {
      int signal = 0;
      if (sigwait(&signals, &signal) == 0) {
        std::cerr << "kiln: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
                  << ": stopping the transfer and cleaning up\n";
        interrupted = true;
      }
    }).detach();
  });
  return &interrupted;
}

std::string mib(uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f MiB", double(bytes) / (1 << 20));
  return buffer;
}

} // namespace

Result<rt::PullOptions> transferOptionsFromFlags(const Args &args) {
  rt::PullOptions options;
  options.aws.profile = args.getOr("--profile", "");
  options.aws.region = args.getOr("--region", "");
  options.aws.endpointUrl = args.getOr("--endpoint-url", "");
  KILN_ASSIGN_OR_RETURN(int64_t partMb, args.getInt("--part-size-mb", 64, 5, 5 * 1024));
  options.partSize = uint64_t(partMb) << 20;
  KILN_ASSIGN_OR_RETURN(int64_t parallel, args.getInt("--parallel", 8, 1, 64));
  options.parallelism = int(parallel);
  KILN_ASSIGN_OR_RETURN(int64_t retries, args.getInt("--retries", 5, 1, 20));
  options.client.retry.maxAttempts = int(retries);
  // Retry notices always reach stderr: a retry is worth knowing about even with --quiet.
  options.client.log = [](const std::string &line) { std::cerr << "kiln: " << line << "\n"; };
  options.interrupted = interruptFlag();
  if (!args.has("--quiet")) {
    auto start = std::chrono::steady_clock::now();
    options.progress = [start](const rt::TransferProgress &p) {
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      int percent = p.bytesTotal ? int(100.0 * double(p.bytesDone) / double(p.bytesTotal)) : 100;
      char line[160];
      std::snprintf(line, sizeof line, "%s: %s of %s (%d%%), %d of %d files%s%.1f%s\n", p.action,
                    mib(p.bytesDone).c_str(), mib(p.bytesTotal).c_str(), percent, p.filesDone,
                    p.filesTotal, p.finished ? ", done in " : " (", seconds,
                    p.finished ? " s" : " s)");
      std::cerr << line;
    };
    options.log = [](const std::string &line) { std::cerr << "kiln: " << line << "\n"; };
  }
  return options;
}

namespace {

CommandSpec pushSpec() {
  CommandSpec spec = {
      "push",
      "ARTIFACT s3://BUCKET/PREFIX [options]",
      "Upload a compiled artifact to S3 or an S3-compatible store. Every file is checked against\n"
      "manifest.json first; manifest.json is uploaded last, so a reader never sees a partial\n"
      "artifact. Pushing over an artifact uploads only changed files, staged under\n"
      ".kiln/objects/ until the new manifest replaces the old one: an interrupted push leaves\n"
      "the old artifact pullable, and running it again resumes. Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY(/AWS_SESSION_TOKEN), else\n"
      "the profile in ~/.aws/credentials. Requests are signed with AWS Signature V4.",
      s3FlagSpecs(),
      2,
      2,
  };
  return spec;
}

} // namespace

int runPush(const CommandArgs &argv) {
  const CommandSpec spec = pushSpec();
  Result<Args> args = Args::parse(spec, argv);
  if (!args.isOk())
    return reportError("push", args.status());
  if (args->helpRequested()) {
    std::cout << formatHelp(spec);
    return 0;
  }
  Result<rt::PullOptions> options = transferOptionsFromFlags(*args);
  if (!options.isOk())
    return reportError("push", options.status());
  const std::string &artifact = args->positionals()[0];
  const std::string &url = args->positionals()[1];
  Status status = rt::pushArtifact(artifact, url, *options);
  if (!status.isOk())
    return reportError("push", status);
  if (!args->has("--quiet"))
    std::cerr << "push: " << artifact << " -> " << url << "\n";
  return 0;
}

} // namespace kiln::tools
