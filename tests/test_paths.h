// Force-included into GPU tests (label gpu, tests/CMakeLists.txt): their KILN_ASSETS_DIR,
// KILN_TEST_DATA_DIR and KILN_BINARY_DIR expand to pathFromEnv(name, configured path), so the GPU
// kit (scripts/gpu-run.sh) can point binaries built on one machine at the data on another, where
// the configure-time paths do not exist. Unset or empty variables keep the configured path.
#pragma once

#include <cstdlib>

namespace kiln::testing {

inline const char *pathFromEnv(const char *variable, const char *configured) {
  const char *value = std::getenv(variable);
  return value != nullptr && *value != '\0' ? value : configured;
}

} // namespace kiln::testing
