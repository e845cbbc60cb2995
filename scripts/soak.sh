#!/usr/bin/env bash
# Soak test of `kiln serve` on TinyStories-656K (issue 19; results in docs/reliability.md, "Soak"):
#   scripts/soak.sh [MINUTES] [--asan]        (MINUTES defaults to 10)
# 256 streaming clients (10% hang up mid-stream, 5% send bad requests), 100 dripping clients and
# a /ping prober for MINUTES, then the KV-idle, descriptor and SIGTERM-drain checks of
# tools/soak/soak.py; exits non-zero if a criterion fails. Not a CI test: it takes minutes and
# both cores.
#   --asan  builds kiln with -fsanitize=address,undefined (gcc, -O1, no compiler/CUDA/tests) into
#           ${KILN_ASAN_BUILD_DIR:-build-asan} and serves with that; any sanitizer report fails,
#           /ping latency and RSS growth are reported, not judged (docs/reliability.md, "Soak").
# The model is compiled (--max-batch 64 --max-seq-len 512) by the kiln of
# ${KILN_BUILD_DIR:-build}, which also serves it without --asan. Both builds run first (no-ops when
# current) unless KILN_SOAK_NO_BUILD=1. Results: ${KILN_SOAK_DIR:-/tmp/kiln-soak}/<date>/ (the
# server log, /ping latencies, summary.json). More soak.py options: KILN_SOAK_ARGS="--streams 64".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
minutes=10
asan=0
for arg in "$@"; do
  case "$arg" in
    --asan) asan=1 ;;
    *[!0-9.]* | '' | .) echo "usage: scripts/soak.sh [MINUTES] [--asan]" >&2; exit 2 ;;
    *) minutes=$arg ;;
  esac
done
model=${KILN_ASSETS_DIR:-$root/../shared/assets}/models/tinystories-656K-hf
if [ ! -f "$model/config.json" ]; then
  echo "error: $model is missing (set KILN_ASSETS_DIR to the directory holding models/)" >&2
  exit 1
fi
build=${KILN_BUILD_DIR:-$root/build}
asan_build=${KILN_ASAN_BUILD_DIR:-$root/build-asan}
if [ "${KILN_SOAK_NO_BUILD:-0}" != 1 ]; then
  KILN_BUILD_DIR=$build KILN_BUILD_TARGETS=kiln bash "$root/scripts/build.sh"
  if [ "$asan" = 1 ]; then
    sanitize="-fsanitize=address,undefined -fno-omit-frame-pointer"
    KILN_BUILD_DIR=$asan_build KILN_BUILD_TARGETS=kiln bash "$root/scripts/build.sh" \
      -DKILN_BUILD_COMPILER=OFF -DKILN_BUILD_TESTS=OFF -DKILN_ENABLE_CUDA=OFF \
      "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1" "-DCMAKE_C_FLAGS_RELEASE=-O1 -g1" \
      "-DCMAKE_CXX_FLAGS=$sanitize" "-DCMAKE_C_FLAGS=$sanitize" \
      -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined \
      -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined
  fi
fi
work=${KILN_SOAK_DIR:-/tmp/kiln-soak}
run=$work/$(date +%Y%m%d-%H%M%S)
[ "$asan" = 1 ] && run=$run-asan
mkdir -p "$run"
"$build/tools/kiln/kiln" compile "$model" -o "$work/tinystories.kiln" --max-batch 64 \
  --max-seq-len 512 --quiet
serve_kiln=$build/tools/kiln/kiln
extra=()
if [ "$asan" = 1 ]; then
  serve_kiln=$asan_build/tools/kiln/kiln
  extra+=(--asan)
  # Reports go to the server log, which soak.py scans; leaks are checked at the drained exit.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
fi
echo "soak: $minutes min, kiln $serve_kiln, results in $run"
# shellcheck disable=SC2086 # KILN_SOAK_ARGS is a list of options
python3 "$root/tools/soak/soak.py" --kiln "$serve_kiln" --artifact "$work/tinystories.kiln" \
  --chat-template "$root/tests/e2e/serve/chat_template.jinja" --work "$run" \
  --minutes "$minutes" "${extra[@]}" ${KILN_SOAK_ARGS:-} 2>&1 | tee "$run/summary.txt"
exit "${PIPESTATUS[0]}"
