// `kiln compile` in a build without the compiler (-DKILN_BUILD_COMPILER=OFF): the runtime-only kiln.
#include "tools/kiln/commands.h"

namespace kiln::tools {

int runCompile(const CommandArgs &) {
  return reportError("compile", unimplemented("this kiln was built without the compiler "
                                              "(-DKILN_BUILD_COMPILER=OFF); rebuild with it ON "
                                              "to compile models"));
}

} // namespace kiln::tools
