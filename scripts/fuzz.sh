#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang + ASan + UBSan) and runs each for SECONDS:
#   scripts/fuzz.sh SECONDS
# Build directory: ${KILN_FUZZ_BUILD_DIR:-build-fuzz} (its own: every library in it is
# instrumented). KILN_FUZZ_TARGETS="tar_fuzz gguf_fuzz" runs only those. Each target starts from a
# copy of tests/fuzz/corpus/<target> (plus ../shared/assets files when present) in a temporary
# directory, so new inputs never land in the repository. A crash, leak, UB report, invariant
# failure, timeout (one input over 60 s) or out-of-memory fails the run; the input is kept in
# ${KILN_FUZZ_OUT:-<build dir>/fuzz-crashes}. How to reproduce and fix: docs/reliability.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-}
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh SECONDS   (seconds per target)" >&2
  exit 2
fi
build=${KILN_FUZZ_BUILD_DIR:-$root/build-fuzz}
out=${KILN_FUZZ_OUT:-$build/fuzz-crashes}
assets=$root/../shared/assets

for tool in clang clang++; do
  if ! command -v "$tool" >/dev/null; then
    echo "error: $tool not found; scripts/install-deps.sh installs clang, libclang-rt-14-dev and" \
      "libomp-14-dev (libFuzzer and OpenMP for clang)" >&2
    exit 1
  fi
done

# ccache hits across clones, as scripts/build.sh sets it up.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
export CCACHE_NOHASHDIR=true
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
started=$(date +%s)
# -O1 with assertions on (no NDEBUG); no MLIR, CUDA or GoogleTest: only what the targets link.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS_RELEASE="-O1 -g" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" \
  -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_COMPILER_MLIR=OFF -DKILN_ENABLE_CUDA=OFF \
  -DCMAKE_PREFIX_PATH=/usr/lib/llvm-19 >/dev/null
cmake --build "$build" --target kiln_fuzz -j "${KILN_JOBS:-$(nproc)}"
echo "fuzz: build took $(($(date +%s) - started)) s"

# Seeds from the shared assets (read, never copied into the repository): files up to 128 KiB,
# shaped as the target's input (tests/fuzz/fuzz_util.h joins several files with its separator).
sep=$'\n--kiln-fuzz-next-file--\n'
small() { [ -f "$1" ] && [ "$(stat -c %s "$1")" -le 131072 ]; }
shared_seeds() {
  local target=$1 dir=$2 n=0 f d
  [ -d "$assets" ] || return 0
  case $target in
  chat_template_fuzz)
    for f in "$assets"/chat_templates/*.jinja; do small "$f" && cp "$f" "$dir/shared-$((n++))"; done
    ;;
  hf_config_fuzz)
    for f in "$assets"/configs/*.json "$assets"/models/*/config.json; do
      small "$f" && cp "$f" "$dir/shared-$((n++))"
    done
    ;;
  tokenizer_json_fuzz)
    for d in "$assets"/models/* "$assets"/tokenizers/*; do
      small "$d/tokenizer.json" || continue
      { cat "$d/tokenizer.json"; [ -f "$d/tokenizer_config.json" ] &&
        printf '%s' "$sep" && cat "$d/tokenizer_config.json"; } >"$dir/shared-$((n++))"
    done
    ;;
  esac
  return 0
}

# libFuzzer dictionaries (tests/fuzz/dict, written by tests/fuzz/make_corpus.py): the tokens
# and field names a target's format is made of, so mutations reach past the syntax.
dict_for() {
  case $1 in
  chat_template_fuzz) echo jinja ;;
  s3_xml_fuzz) echo xml ;;
  artifact_fuzz | safetensors_fuzz | hf_config_fuzz | tokenizer_json_fuzz | serve_request_fuzz | \
    tool_call_fuzz)
    echo json ;;
  esac
}

mkdir -p "$out"
mapfile -t targets <"$build/fuzz_targets.txt"
if [ -n "${KILN_FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$KILN_FUZZ_TARGETS"
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
summary=()
for target in "${targets[@]}"; do
  [ -n "$target" ] || continue
  bin=$build/tests/fuzz/$target
  work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-fuzz-$target.XXXXXX")
  mkdir -p "$work/corpus"
  cp "$root/tests/fuzz/corpus/$target/"* "$work/corpus/"
  shared_seeds "$target" "$work/corpus"
  log=$out/$target.log
  echo "fuzz: $target for $seconds s ($(find "$work/corpus" -type f | wc -l) seeds)"
  touch "$work/started"
  rc=0
  # Input scratch files (tests/fuzz/fuzz_util.h ScratchDir) go under the run's own directory.
  dict=$(dict_for "$target")
  TMPDIR=$work "$bin" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=2048 \
    ${dict:+-dict="$root/tests/fuzz/dict/$dict.dict"} -print_final_stats=1 \
    -artifact_prefix="$out/$target-" "$work/corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -aE '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  # libFuzzer stops at the first failing input: crash-, leak-, timeout- or oom-<sha1>. It also
  # keeps inputs that took over 10 s as slow-unit-<sha1>: a loaded machine, not a failure.
  crashes=$(find "$out" -maxdepth 1 -newer "$work/started" \( -name "$target-crash-*" -o \
    -name "$target-leak-*" -o -name "$target-timeout-*" -o -name "$target-oom-*" \) | wc -l)
  result=ok
  # libFuzzer exits non-zero when it writes a failing input; a kept input counts even if not.
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    result="FAILED (exit $rc; $log)"
    failed+=("$target")
    grep -aE '^(==[0-9]+==ERROR|SUMMARY|.*fuzz invariant failed|.*runtime error)' "$log" | head -5 || true
    grep -aE '^(Test unit written to|artifact_prefix)' "$log" || true
  fi
  summary+=("$(printf '%-24s %9s %6s %7s %6s %7s  %s' "$target" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$crashes" "$result")")
  rm -rf "$work"
done

echo
printf '%-24s %9s %6s %7s %6s %7s  %s\n' target execs cov ft corpus crashes result
printf '%s\n' "${summary[@]}"
echo "fuzz: $seconds s per target; build + runs took $(($(date +%s) - started)) s"
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (reproduce: $build/tests/fuzz/TARGET $out/TARGET-crash-...)" >&2
  exit 1
fi
