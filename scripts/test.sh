#!/usr/bin/env bash
# Builds kiln and runs every test: the command CI runs (.ci/run) and the README's second command.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
# Under CI (CI=true) a missing test input is a failure, not a quiet skip of the tests needing it
# (KILN_STRICT_TESTS: no CUDA toolkit fails the configure, a cudasim skip fails its test).
ci=false
case "${CI:-}" in true | 1 | yes) ci=true ;; esac
strict_cmake=-DKILN_STRICT_TESTS=OFF
[ "$ci" = true ] && strict_cmake=-DKILN_STRICT_TESTS=ON
"$root/scripts/build.sh" "$strict_cmake" "$@"
build=${KILN_BUILD_DIR:-$root/build}
missing() {
  if [ "$ci" = true ]; then
    echo "error (CI): $1" >&2
    exit 1
  fi
  echo "note: $1"
}
if [ ! -d "$root/../shared/assets" ]; then
  missing "$root/../shared/assets is absent: tests labelled 'model' would skip"
fi
"$root/scripts/python-test-deps.sh" ||
  missing "the Python test clients did not install: the Python e2e tests would skip"
"$root/scripts/fetch-smollm2.sh" >/dev/null ||
  missing "SmolLM2-135M-Instruct could not be fetched: its tests would skip"
if torch_python=$("$root/scripts/python-torch-deps.sh" | tail -1); then
  export KILN_TEST_TORCH_PYTHON=$torch_python
else
  missing "torch and transformers did not install: verify_transformers_golden_test would skip"
fi
cd "$build"
# ctest counts a skipped test as passed: the summary after it gives each label's ran / skipped
# (with the reasons) / failed, and under CI a skip outside label gpu fails the run.
junit=$build/Testing/kiln-junit.xml
status=0
ctest --output-on-failure -j "${KILN_TEST_JOBS:-$(nproc)}" --timeout 900 --output-junit "$junit" ||
  status=$?
strict=()
[ "$ci" = true ] && strict=(--fail-on-skip)
python3 "$root/scripts/test_summary.py" "$build" "$junit" "${strict[@]}" || status=1
# Under CI every libFuzzer target (tests/fuzz) also runs for 20 s from its seeds, replaying the
# regress-* inputs of past findings; a crash, leak or sanitizer report fails the run. Its build
# directory is its own (every library in it is instrumented): docs/reliability.md.
if [ "$ci" = true ]; then
  KILN_FUZZ_BUILD_DIR=${KILN_FUZZ_BUILD_DIR:-$build-fuzz} bash "$root/scripts/fuzz.sh" 20 ||
    status=1
fi
exit $status
