#include "tools/kiln/commands.h"

#include <iostream>

namespace kiln::tools {

int reportError(const std::string &command, const Status &status) {
  std::cerr << "kiln " << command << ": error: " << status.message() << "\n";
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

int runNotYetAvailable(const std::string &command, const CommandArgs &) {
  std::cerr << "kiln " << command << ": not available in this version of kiln yet\n";
  return 1;
}

} // namespace kiln::tools
