// One function per `kiln` subcommand; each returns the process exit code. Errors go to stderr.
#pragma once

#include "runtime/base/status.h"

#include <string>
#include <vector>

namespace kiln::tools {

using CommandArgs = std::vector<std::string>;

int runCompile(const CommandArgs &args);
int runGenerate(const CommandArgs &args);
int runInspect(const CommandArgs &args);
int runTokenize(const CommandArgs &args);
int runBench(const CommandArgs &args);
int runProfile(const CommandArgs &args);
// Shipping (runtime/store): package_command.cc, push_command.cc, pull_command.cc, verify_command.cc.
int runPackage(const CommandArgs &args);
int runPush(const CommandArgs &args);
int runPull(const CommandArgs &args);
int runVerify(const CommandArgs &args);
// Commands whose issue has not landed yet: say so clearly instead of failing obscurely.
int runNotYetAvailable(const std::string &command, const CommandArgs &args);

// Prints "kiln <command>: error: <status>" to stderr and returns exit code 1 (2 for bad usage).
int reportError(const std::string &command, const Status &status);

} // namespace kiln::tools
