#!/usr/bin/env bash
# Builds kiln and runs every test: the command CI runs (.ci/run) and the README's second command.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$@"
build=${KILN_BUILD_DIR:-$root/build}
if [ ! -d "$root/../shared/assets" ]; then
  echo "note: $root/../shared/assets is absent: tests labelled 'model' will skip, saying so"
fi
"$root/scripts/python-test-deps.sh" || echo "note: no Python clients: the serve e2e tests will skip"
"$root/scripts/fetch-smollm2.sh" >/dev/null ||
  echo "note: SmolLM2-135M-Instruct could not be fetched: its tests skip (and fail in CI)"
cd "$build"
# ctest hides why a test skipped: show the GPU tests' reasons first (they skip without a device).
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
  echo "GPU tests (label gpu) skip on this machine; their reasons:"
  ctest -L gpu -V 2>&1 | grep -E "^[0-9]+: (no CUDA|.*Skipped$)" | sort -u || true
fi
ctest --output-on-failure -j "${KILN_TEST_JOBS:-$(nproc)}" --timeout 900
