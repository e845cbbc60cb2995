// `kiln`: one binary, thin subcommands over the compiler and runtime libraries (docs/design.md).
#include "schema/version.h"
#include "tools/kiln/commands.h"

#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>

#ifdef KILN_HAVE_SERVE
namespace kiln::tools {
int runServe(const CommandArgs &args); // serve_command.cc
}
#endif

namespace {

struct Command {
  const char *name;
  const char *summary;
  std::function<int(const kiln::tools::CommandArgs &)> run;
};

int notYet(const char *name, const kiln::tools::CommandArgs &args) {
  return kiln::tools::runNotYetAvailable(name, args);
}

const Command kCommands[] = {
    {"compile", "compile a Hugging Face model directory into a kiln artifact",
     kiln::tools::runCompile},
    {"generate", "generate tokens from an artifact", kiln::tools::runGenerate},
    {"inspect", "print an artifact (plan, weights index, maxima) as JSON", kiln::tools::runInspect},
    {"tokenize", "encode or decode text with a model's tokenizer", kiln::tools::runTokenize},
#ifdef KILN_HAVE_SERVE
    {"serve", "serve an artifact over HTTP (OpenAI, TGI, SageMaker)", kiln::tools::runServe},
#else
    {"serve", "serve an artifact over HTTP (OpenAI, TGI, SageMaker)",
     [](const auto &a) { return notYet("serve", a); }},
#endif
    {"bench", "measure throughput, TTFT and inter-token latency", kiln::tools::runBench},
    {"profile", "time one engine step op by op against the hardware limits",
     kiln::tools::runProfile},
#ifdef KILN_HAVE_STORE
    {"verify", "check an artifact's outputs against a golden file", kiln::tools::runVerify},
    {"package", "pack an artifact as model.tar.gz for SageMaker", kiln::tools::runPackage},
    {"push", "upload an artifact to S3", kiln::tools::runPush},
    {"pull", "download an artifact from S3", kiln::tools::runPull},
#else
    {"verify", "check an artifact's outputs against a golden file",
     [](const auto &a) { return notYet("verify", a); }},
    {"package", "pack an artifact as model.tar.gz for SageMaker",
     [](const auto &a) { return notYet("package", a); }},
    {"push", "upload an artifact to S3", [](const auto &a) { return notYet("push", a); }},
    {"pull", "download an artifact from S3", [](const auto &a) { return notYet("pull", a); }},
#endif
};

void printUsage(std::FILE *out) {
  std::fprintf(out, "usage: kiln <command> [options]   (kiln <command> --help for details)\n\n"
                    "commands:\n");
  for (const Command &command : kCommands)
    std::fprintf(out, "  %-10s %s\n", command.name, command.summary);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    printUsage(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    printUsage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("kiln %s (artifact schema %u)\n", kiln::kKilnVersion, kiln::kSchemaVersion);
    return 0;
  }
  kiln::tools::CommandArgs args(argv + 2, argv + argc);
  for (const Command &command : kCommands)
    if (name == command.name)
      return command.run(args);
  std::fprintf(stderr, "kiln: unknown command '%s'\n\n", name.c_str());
  printUsage(stderr);
  return 2;
}
