#!/usr/bin/env bash
# The GPU kit's entry point (copied to .gpukit/run.sh by scripts/gpu-kit.sh; docs/gpu.md). Runs ON
# the GPU machine, from the repository root, with the kit carried in:
#   bash .gpukit/run.sh tests   GPU test binaries (gtest XML), the kernel tests again under
#                               compute-sanitizer memcheck, and end-to-end checks through kiln:
#                               compile the tiny fixtures, stories260K and TinyStories-656K for
#                               cpu + the device's SM, verify against the transformers goldens on
#                               cpu and cuda, bf16 cuda vs bf16 cpu, a small `kiln bench` on cuda
#   bash .gpukit/run.sh bench   roofline, the random Llama-3.1-8B-shaped bf16 model, kiln bench
#                               on cuda at batch 1/64/256 x 128/128 and 1000/1000, the
#                               transformers peer on the same workloads, compare.py's table
#   bash .gpukit/run.sh all     both, in that order
# A short call can narrow `tests`: KILN_KIT_TESTS="cuda_attention_test" runs only those test
# binaries (and their memcheck runs), KILN_KIT_E2E=0 leaves out the end-to-end checks.
# Every step has a timeout and the whole command a time budget (KILN_KIT_BUDGET_S, default 540 s,
# inside the device tool's 600 s): a step that would not fit is reported as not run, with the
# mode that runs it alone. Logs go to $OUT (at most 8 files come back from the device tool):
# summary.txt (the result of every step), env.txt, tests.log, sanitizer.log, e2e.log, bench.log,
# results.tar.gz (gtest XML, JSON results, per-step logs). Without $OUT: /tmp/kiln-gpukit-out.
# The kit's binaries get LD_LIBRARY_PATH = kit lib/ first, then the machine's driver, CUDA
# toolkit, NVRTC, cuBLASLt and NCCL directories; nothing else in this script sees it (python's
# torch keeps the machine's own libraries).
set -uo pipefail

mode=${1:-tests}
case "$mode" in tests | bench | all) ;; *)
  echo "usage: $0 tests|bench|all" >&2
  exit 64
  ;;
esac
kit_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$PWD
[ -d "$repo/tests/data" ] || repo=$(dirname "$kit_dir")
OUT=${OUT:-/tmp/kiln-gpukit-out}
work=${KILN_KIT_WORK:-/tmp/kiln-gpukit}
start_s=$(date +%s)
budget_s=${KILN_KIT_BUDGET_S:-540}
mkdir -p "$OUT" "$work/results" "$work/logs"
summary=$OUT/summary.txt
envlog=$OUT/env.txt
for f in summary.txt env.txt tests.log sanitizer.log e2e.log bench.log; do
  : >"$OUT/$f"
done
declare -A counts=()

note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(($(date +%s) - start_s)); }

# record STATUS NAME DETAIL: one summary line per check (PASS PARTIAL FAIL TIMEOUT SKIP MISSING
# NOTRUN).
record() {
  counts[$1]=$((${counts[$1]:-0} + 1))
  printf '%-8s %-44s %s\n' "$1" "$2" "${3:-}" | tee -a "$summary"
}

# Seconds a step may take: its own limit, cut to what is left of the budget (minus 20 s for
# packing results); prints nothing and fails when under 15 s are left.
step_timeout() {
  local left=$((budget_s - $(elapsed) - 20))
  [ "$left" -ge 15 ] || return 1
  echo $((left < $1 ? left : $1))
}

# run_logged LOG SECONDS CMD...: appends a header, the command's output and its exit status.
run_logged() {
  local log=$1 seconds=$2 rc
  shift 2
  echo "=== $(date -u +%H:%M:%S) [$seconds s] $*" >>"$log"
  timeout -k 10 "$seconds" "$@" >>"$log" 2>&1
  rc=$?
  echo "=== exit $rc" >>"$log"
  return $rc
}

# "$kx" CMD...: a kit binary with the kit's library path (a script, so timeout can run it).
write_kx() {
  kx=$work/kx
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "$@"\n' "$kit_ld" >"$kx"
  chmod +x "$kx"
}

unpack_kit() {
  if [ ! -f "$kit_dir/kit.tar.xz" ]; then
    kit_root=$kit_dir # assembled without compression
    return
  fi
  kit_root=$work/kit
  local stamp
  stamp=$(stat -c %s-%Y "$kit_dir/kit.tar.xz")
  [ "$(cat "$kit_root/.stamp" 2>/dev/null)" = "$stamp" ] && return
  rm -rf "$kit_root"
  mkdir -p "$kit_root"
  if command -v xz >/dev/null; then
    xz -dc "$kit_dir/kit.tar.xz" | tar -C "$kit_root" -xf -
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
      "$kit_dir/kit.tar.xz" "$kit_root"
  fi || {
    echo "run.sh: cannot unpack $kit_dir/kit.tar.xz" >&2
    exit 1
  }
  echo "$stamp" >"$kit_root/.stamp"
}

# The loader cache (ldconfig is in /sbin, often not on PATH).
ldconfig_p() {
  local l
  for l in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
    command -v "$l" >/dev/null && "$l" -p 2>/dev/null && return
  done
}

# Directories where this machine keeps the NVIDIA libraries: KILN_KIT_LIB_DIRS (colon-separated)
# first, then the loader cache, the usual toolkit
# and driver folders, and python's nvidia-* wheels (torch's CUDA libraries). Never a stubs/ dir:
# the toolkit's stub libcuda fails cuInit.
candidate_dirs() {
  [ -z "${KILN_KIT_LIB_DIRS:-}" ] || tr ':' '\n' <<<"$KILN_KIT_LIB_DIRS"
  ldconfig_p | sed -n 's/.* => \(.*\)\/[^/]*$/\1/p' | sort -u
  ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib /usr/local/cuda-*/lib64 \
    /usr/local/cuda-*/targets/*/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
    /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/wsl/lib 2>/dev/null
  python3 - 2>/dev/null <<'EOF'
import glob, os, sys
for p in sys.path:
    for d in glob.glob(os.path.join(p, "nvidia", "**", "lib"), recursive=True):
        print(d)
EOF
}

find_lib() { # find_lib PATTERN: the first directory holding a file matching it
  local dir f
  for dir in "${dirs[@]}"; do
    [[ $dir == */stubs* ]] && continue
    for f in "$dir"/$1; do
      [ -e "$f" ] && echo "$dir" && return 0
    done
  done
  return 1
}

# The newest GLIBCXX version the kit's binaries need; the machine's libstdc++ is used when it has
# it (newer ones are backward compatible), else the kit's lib/compat copy.
libstdcxx_dir() {
  local need sys
  need=$(grep -aoh 'GLIBCXX_3\.4\.[0-9]*' "$kit_root"/bin/* 2>/dev/null | sort -uV | tail -1)
  sys=$(ldconfig_p | awk '$1 == "libstdc++.so.6" && /x86-64/ {print $NF; exit}')
  if [ -n "$sys" ] && [ -n "$need" ] && grep -aq "$need" "$sys"; then
    echo "libstdc++: the machine's $sys has $need" >>"$envlog"
  else
    echo "libstdc++: the kit's (the machine's ${sys:-none} lacks ${need:-?})" >>"$envlog"
    echo "$kit_root/lib/compat"
  fi
}

setup_libraries() {
  mapfile -t dirs < <(candidate_dirs | awk '!seen[$0]++')
  local path=$kit_root/lib compat lib dir
  compat=$(libstdcxx_dir)
  [ -n "$compat" ] && path+=":$compat"
  for lib in 'libcuda.so.1' 'libnvrtc.so.13*' 'libnvrtc-builtins.so.13*' 'libcublasLt.so.13*' \
    'libcublas.so.13*' 'libnccl.so.2*'; do
    if dir=$(find_lib "$lib"); then
      echo "found $lib in $dir" >>"$envlog"
      [[ ":$path:" == *":$dir:"* ]] || path+=":$dir"
    else
      echo "missing on this machine: $lib" | tee -a "$envlog"
    fi
  done
  kit_ld=$path
  write_kx
  {
    echo "LD_LIBRARY_PATH for kit binaries: $kit_ld"
    echo "--- how kiln's libraries resolve with that path"
    "$kx" ldd "$kit_root/bin/kiln" 2>&1
  } >>"$envlog"
  local bin missing
  for bin in kiln roofline; do
    missing=$("$kx" ldd "$kit_root/bin/$bin" 2>&1 | grep 'not found' | awk '{print $1}' | xargs)
    [ -z "$missing" ] || record FAIL "libraries for $bin" "not found: $missing (docs/gpu.md)"
  done
}

# kiln's NVRTC codegen needs the toolkit's headers (cuda_fp16.h, cccl/): CUDA_HOME, else
# /usr/local/cuda (compiled in), else nvcc's toolkit or python's nvidia wheels.
setup_cuda_home() {
  local root nvcc
  nvcc=$(command -v nvcc || true)
  for root in "${CUDA_HOME:-}" /usr/local/cuda ${nvcc:+"$(dirname "$(dirname "$nvcc")")"} \
    /usr/local/cuda-*; do
    [ -n "$root" ] && [ -f "$root/include/cuda_fp16.h" ] && break
    root=""
  done
  if [ -z "$root" ]; then
    root=$(python3 - 2>/dev/null <<'EOF2'
import glob, os, sys
for p in sys.path:
    for h in glob.glob(os.path.join(p, "nvidia", "**", "include", "cuda_fp16.h"), recursive=True):
        print(os.path.dirname(os.path.dirname(h)))
        sys.exit()
EOF2
)
  fi
  if [ -n "$root" ]; then
    export CUDA_HOME=$root
    echo "CUDA_HOME=$CUDA_HOME (NVRTC headers)" >>"$envlog"
  else
    echo "no CUDA headers found (cuda_fp16.h): kiln compile --target sm_XX will fail" | tee -a "$envlog"
  fi
}

# Tests compiled elsewhere read the configured paths where the environment does not override
# them (tests linking kiln_e2e_util): alias them here when they are missing (root only).
alias_path() { # alias_path CONFIGURED TARGET
  local configured=$1 target=$2 physical
  [ -e "$configured" ] && return
  physical=$(realpath -m "$configured")
  if mkdir -p "$(dirname "$physical")" 2>/dev/null && ln -sfn "$target" "$physical" 2>/dev/null; then
    echo "alias: $configured -> $target" >>"$envlog"
  else
    echo "cannot alias $configured -> $target (tests reading it directly will skip)" >>"$envlog"
  fi
}

setup_paths() {
  local manifest=$kit_dir/manifest.txt src build assets
  src=$(sed -n 's/^configured: source \(.*\), build .*/\1/p' "$manifest")
  build=$(sed -n 's/^configured: source .*, build \(.*\)/\1/p' "$manifest")
  assets=$(sed -n 's/^configured: KILN_ASSETS_DIR //p' "$manifest")
  mkdir -p "$work/build/tools/kiln" "$work/build/tools/bench"
  ln -sfn "$kit_root/bin/kiln" "$work/build/tools/kiln/kiln"
  ln -sfn "$kit_root/bin/roofline" "$work/build/tools/bench/roofline"
  export KILN_ASSETS_DIR=$kit_root/data KILN_TEST_DATA_DIR=$repo/tests/data
  export KILN_BINARY_DIR=$work/build
  [ -n "$src" ] && alias_path "$src" "$repo"
  [ -n "$build" ] && alias_path "$build" "$work/build"
  [ -n "$assets" ] && alias_path "$assets" "$kit_root/data"
  echo "KILN_ASSETS_DIR=$KILN_ASSETS_DIR KILN_TEST_DATA_DIR=$KILN_TEST_DATA_DIR" \
    "KILN_BINARY_DIR=$KILN_BINARY_DIR" >>"$envlog"
}

# gpu=1 and sm (kiln's --target name: sm_90a on Hopper) when nvidia-smi sees a GPU, or when
# KILN_KIT_SIMULATED_GPU names the directory of cudasim's libcuda.so.1 (docs/cudasim.md): a
# rehearsal here of everything a GPU session runs. Its times mean nothing, so Linear autotuning
# is off there (timing every cuBLASLt candidate on the simulator takes minutes).
detect_gpu() {
  gpu=0
  sm=sm_90a
  simulated=""
  if [ -n "${KILN_KIT_SIMULATED_GPU:-}" ]; then
    simulated=$KILN_KIT_SIMULATED_GPU
    gpu=1
    local cc=${KILN_CUDASIM_SM:-90}
    cc=${cc%%,*}
    sm=sm_$cc
    [[ $cc == 9* || $cc == 10* ]] && sm+=a
    export KILN_KIT_LIB_DIRS="$simulated${KILN_KIT_LIB_DIRS:+:$KILN_KIT_LIB_DIRS}"
    export KILN_LINEAR_AUTOTUNE=0
    echo "GPU: simulated (cudasim, $simulated), $sm" | tee -a "$envlog"
    return
  fi
  echo "--- nvidia-smi" | tee -a "$envlog"
  if ! command -v nvidia-smi >/dev/null; then
    echo "nvidia-smi: not found (no GPU here)" | tee -a "$envlog"
    return
  fi
  nvidia-smi 2>&1 | tee -a "$envlog"
  local cc
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
  if [[ $cc =~ ^([0-9]+)\.([0-9]+)$ ]]; then
    gpu=1
    local major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
    sm=sm_$((major * 10 + minor))
    [[ $major == 9 || $major == 10 ]] && sm+=a
  fi
}

# ---- tests --------------------------------------------------------------------------------

# report_gtest NAME LOG RC: one summary line from a gtest binary's output.
report_gtest() {
  local name=$1 log=$2 rc=$3 passed skipped failed reasons
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([A-Za-z_][^ ]*\).*/\1/p' "$log" | sort -u | head -5 | xargs)
  reasons=$(awk '/: Skipped$/ {getline; print}' "$log" | sort | uniq -c | sort -rn | head -3 |
    sed 's/^ *\([0-9]*\) /\1x /' | paste -sd ';' -)
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    record TIMEOUT "$name" "killed at its time limit; see tests.log"
  elif [ "$rc" != 0 ]; then
    record FAIL "$name" "exit $rc; failed: ${failed:-?}"
  elif [ "${passed:-0}" = 0 ] && [ "${skipped:-0}" != 0 ]; then
    record SKIP "$name" "$skipped skipped: $reasons"
  else
    record PASS "$name" "${passed:-0} passed, ${skipped:-0} skipped${reasons:+ ($reasons)}"
  fi
}

# KILN_KIT_TESTS="a_test b_test": only those GPU test binaries (and their memcheck runs); unset:
# every one in gpu_tests.txt.
selected_test() {
  [ -z "${KILN_KIT_TESTS:-}" ] || [[ " $KILN_KIT_TESTS " == *" $1 "* ]]
}

run_gpu_tests() {
  note "--- GPU test binaries (label gpu), gtest XML in results.tar.gz"
  local name kind t log rc
  while read -r name kind <&3; do
    [ -n "$name" ] || continue
    selected_test "$name" || continue
    if ! t=$(step_timeout "${KILN_KIT_TEST_TIMEOUT_S:-240}"); then
      record NOTRUN "gtest $name" "time budget spent: run 'run.sh tests' alone"
      continue
    fi
    log=$work/logs/$name.log
    : >"$log"
    run_logged "$log" "$t" "$kx" "$kit_root/bin/$name" --gtest_color=no \
      --gtest_output="xml:$work/results/$name.xml"
    rc=$?
    cat "$log" >>"$OUT/tests.log"
    report_gtest "gtest $name" "$log" "$rc"
  done 3<"$kit_root/bin/gpu_tests.txt"
}

find_sanitizer() {
  command -v compute-sanitizer && return
  # shellcheck disable=SC2012 # globs of fixed install locations
  ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null |
    head -1
}

run_sanitizer() {
  note "--- kernel tests under compute-sanitizer memcheck"
  local san name kind t log rc errors
  san=$(find_sanitizer)
  if [ -z "$san" ]; then
    record MISSING "compute-sanitizer" "not found on this machine"
    return
  fi
  if [ "$gpu" != 1 ] || [ -n "$simulated" ]; then
    record SKIP "compute-sanitizer" "${simulated:+simulated GPU: }no GPU to check"
    return
  fi
  while read -r name kind <&3; do
    [ "$kind" = kernel ] || continue
    selected_test "$name" || continue
    if ! t=$(step_timeout "${KILN_KIT_SANITIZER_TIMEOUT_S:-300}"); then
      record NOTRUN "memcheck $name" "time budget spent: run 'run.sh tests' alone"
      continue
    fi
    log=$work/logs/memcheck-$name.log
    : >"$log"
    run_logged "$log" "$t" "$san" --tool memcheck --target-processes all --error-exitcode 86 \
      --print-limit 100 env LD_LIBRARY_PATH="$kit_ld" "$kit_root/bin/$name" --gtest_color=no \
      ${KILN_SANITIZER_FILTER:+--gtest_filter=$KILN_SANITIZER_FILTER}
    rc=$?
    cat "$log" >>"$OUT/sanitizer.log"
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -1)
    if [ "$rc" = 86 ]; then
      record FAIL "memcheck $name" "${errors:-?} memcheck errors; see sanitizer.log"
    else
      report_gtest "memcheck $name" "$log" "$rc"
    fi
  done 3<"$kit_root/bin/gpu_tests.txt"
}

# e2e_step NAME SECONDS CMD...: PASS or FAIL (with the last output line) for one command.
e2e_step() {
  local name=$1 want=$2 t rc
  shift 2
  if ! t=$(step_timeout "$want"); then
    record NOTRUN "$name" "time budget spent"
    return 1
  fi
  run_logged "$OUT/e2e.log" "$t" "$@"
  rc=$?
  case $rc in
  0) record PASS "$name" ;;
  124 | 137) record TIMEOUT "$name" "after ${t}s" ;;
  *) record FAIL "$name" "exit $rc: $(grep -v '^=== ' "$OUT/e2e.log" | tail -1 | cut -c1-150)" ;;
  esac
  return $rc
}

# Without a GPU, `--device cuda` must fail cleanly, saying why.
expect_no_gpu() {
  local name=$1 rc last
  shift
  run_logged "$OUT/e2e.log" 60 "$@"
  rc=$?
  last=$(grep -v '^=== ' "$OUT/e2e.log" | tail -1 | cut -c1-150)
  if [ $rc != 0 ] && [ $rc -lt 124 ] && grep -qiE 'no CUDA device|no GPU|libcuda|cuInit' <<<"$last"; then
    record SKIP "$name" "no GPU, said cleanly: $last"
  else
    record FAIL "$name" "expected a clean 'no GPU' error, got exit $rc: $last"
  fi
}

e2e_model() { # e2e_model NAME MODEL_DIR
  local name=$1 dir=$2 golden=$repo/tests/data/golden/$1.json art=$work/e2e/$1.kiln
  if [ ! -d "$dir" ] || [ ! -f "$golden" ]; then
    record SKIP "e2e $name" "model $dir or golden $golden is absent"
    return
  fi
  rm -rf "$art"
  e2e_step "compile $name --target cpu,$sm" 180 \
    "$kx" "$kit_root/bin/kiln" compile "$dir" -o "$art" --quiet --target "cpu,$sm" || return
  e2e_step "verify $name --device cpu" 120 \
    "$kx" "$kit_root/bin/kiln" verify "$art" --golden "$golden" --device cpu
  if [ "$gpu" = 1 ]; then
    e2e_step "verify $name --device cuda" 180 \
      "$kx" "$kit_root/bin/kiln" verify "$art" --golden "$golden" --device cuda
  else
    expect_no_gpu "verify $name --device cuda" \
      "$kx" "$kit_root/bin/kiln" verify "$art" --golden "$golden" --device cuda
  fi
}

# bf16 on cuda against bf16 on cpu (the cpu backend is the reference; both round every op's
# output to bf16, in different orders): logits within KILN_KIT_BF16_TOLERANCE, same greedy ids.
e2e_bf16() { # e2e_bf16 NAME MODEL_DIR
  local name=$1 dir=$2 art=$work/e2e/$1-bf16.kiln ref=$work/results/$1-bf16-cpu-golden.json
  [ -d "$dir" ] || return
  rm -rf "$art"
  e2e_step "compile $name --dtype bf16 --target cpu,$sm" 180 \
    "$kx" "$kit_root/bin/kiln" compile "$dir" -o "$art" --quiet --dtype bf16 --target "cpu,$sm" || return
  e2e_step "bf16 $name: cpu reference" 120 "$kx" "$kit_root/bin/kiln" verify "$art" --device cpu \
    --write "$ref" --prompt-ids "1 5 9 23 7 100 42; 1 300 12" --max-tokens 16 \
    --tolerance "${KILN_KIT_BF16_TOLERANCE:-0.1}" || return
  e2e_step "bf16 $name: cuda vs cpu" 180 \
    "$kx" "$kit_root/bin/kiln" verify "$art" --golden "$ref" --device cuda
}

run_e2e() {
  note "--- end to end through kiln (compile for cpu,$sm; verify vs transformers goldens)"
  mkdir -p "$work/e2e"
  local fixtures=$repo/tests/data/models data=$kit_root/data/models
  e2e_model tiny-llama "$fixtures/tiny-llama"
  e2e_model tiny-llama-tied "$fixtures/tiny-llama-tied"
  e2e_model tiny-llama3 "$fixtures/tiny-llama3"
  e2e_model stories260K "$data/stories260K-hf"
  e2e_model tinystories-656K "$data/tinystories-656K-hf"
  [ "$gpu" = 1 ] || return 0
  e2e_bf16 tiny-llama "$fixtures/tiny-llama"
  e2e_bf16 tinystories-656K "$data/tinystories-656K-hf"
  e2e_step "kiln bench --device cuda (tinystories-656K, batch 8)" 120 \
    "$kx" "$kit_root/bin/kiln" bench "$work/e2e/tinystories-656K.kiln" --device cuda --batch 8 \
    --input-len 32 --output-len 32 --num-prompts 16
}

run_tests() {
  run_gpu_tests
  run_sanitizer
  if [ "${KILN_KIT_E2E:-1}" = 0 ]; then
    record SKIP "end to end" "KILN_KIT_E2E=0"
  else
    run_e2e
  fi
}

# ---- bench --------------------------------------------------------------------------------

# bench_json NAME SECONDS FILE CMD...: stdout to FILE (JSON), stderr to bench.log.
bench_json() {
  local name=$1 want=$2 file=$3 t rc
  shift 3
  if ! t=$(step_timeout "$want"); then
    record NOTRUN "$name" "time budget spent: split the workloads (docs/gpu.md)"
    return 1
  fi
  echo "=== $(date -u +%H:%M:%S) [$t s] $*" >>"$OUT/bench.log"
  timeout -k 10 "$t" "$@" >"$file" 2>>"$OUT/bench.log"
  rc=$?
  echo "=== exit $rc" >>"$OUT/bench.log"
  case $rc in
  0) record PASS "$name" "$(head -c 160 "$file" | tr '\n' ' ')" ;;
  3) record PARTIAL "$name" "exit 3: some figures failed, see errors in its JSON (e.g. out of memory)" ;;
  124 | 137) record TIMEOUT "$name" "after ${t}s" ;;
  *) record FAIL "$name" "exit $rc: $(tail -1 "$OUT/bench.log" | cut -c1-150)" ;;
  esac
  return $rc
}

have_tool() { # have_tool PATH: the benchmark helper's scripts may not exist yet
  [ -f "$1" ] && return 0
  record MISSING "${1#"$repo"/}" "not in this tree (tools/bench is written by the benchmark task)"
  return 1
}

# The random model and its artifact stay in KILN_BENCH_DIR while the machine is warm; a marker
# file says each was written completely (a killed step leaves none).
bench_model() {
  local tool=$repo/tools/bench/make_random_llama.py preset=${KILN_BENCH_PRESET:-llama-3.1-8b}
  local target=$sm max_seq=${KILN_BENCH_MAX_SEQ_LEN:-4608} quantize=${KILN_BENCH_QUANTIZE:-}
  [ "$bench_device" = cuda ] || target=cpu
  model_dir=${KILN_BENCH_DIR:-/tmp/kiln-bench}/$preset
  # One artifact per target, length and weight format: a warm machine reuses it only for the same
  # compile.
  bench_art=$model_dir-$target-$max_seq${quantize:+-$quantize}.kiln
  have_tool "$tool" || return 1
  if [ ! -f "$model_dir.complete" ]; then
    mkdir -p "$(dirname "$model_dir")"
    bench_json "make_random_llama $preset${KILN_BENCH_LAYERS:+ --layers $KILN_BENCH_LAYERS}" 420 \
      "$work/logs/make_model.out" "$bench_python" "$tool" --preset "$preset" --out "$model_dir" \
      ${KILN_BENCH_LAYERS:+--layers "$KILN_BENCH_LAYERS"} || return 1
    touch "$model_dir.complete"
  fi
  [ -f "$bench_art.complete" ] && return 0
  rm -rf "$bench_art"
  bench_json "compile bf16${quantize:+ --quantize $quantize} --target $target" 420 \
    "$work/logs/compile_bench.out" \
    "$kx" "$kit_root/bin/kiln" compile "$model_dir" -o "$bench_art" --dtype bf16 --target "$target" \
    ${quantize:+--quantize "$quantize"} \
    --max-batch 256 --max-seq-len "$max_seq" --max-tokens-per-step 4096 \
    --quiet || return 1
  touch "$bench_art.complete"
}

# Flags this kiln's bench understands beyond the basic ones (other tasks add them).
bench_flags() {
  local help
  help=$("$kx" "$kit_root/bin/kiln" bench --help 2>&1)
  grep -q -- '--no-verify-weights' <<<"$help" && echo --no-verify-weights
  [ "$bench_device" = cuda ] || return 0
  if grep -q -- '--gpu-memory-utilization' <<<"$help"; then
    echo --gpu-memory-utilization "${KILN_BENCH_GPU_UTIL:-0.9}"
  else
    echo --kv-cache-mb "${KILN_BENCH_KV_MB:-40000}"
  fi
}

# kiln profile (docs/profile.md) on the bench artifact: each step of KILN_BENCH_PROFILES
# (mode:batch:length; decode at that context, or a prefill of that many tokens) timed op by op,
# as fractions of the roofline's ceilings when it was measured. JSON and table in results/, the
# tables appended to summary.txt (so the reply's output tail shows where the time goes).
run_profiles() {
  local flags=$1 spec mode b len name shape roofline=()
  if ! "$kx" "$kit_root/bin/kiln" profile --help >/dev/null 2>&1; then
    record MISSING "kiln profile" "this kit's kiln has no profile command"
    return 0
  fi
  [ -s "$results/roofline.json" ] && roofline=(--roofline "$results/roofline.json")
  for spec in ${KILN_BENCH_PROFILES:-decode:1:128 decode:64:1000 prefill:1:4096}; do
    IFS=: read -r mode b len <<<"$spec"
    shape=(--batch "$b" --context "$len")
    [ "$mode" = prefill ] && shape=(--batch "$b" --prefill "$len")
    name=profile-$mode-$b-$len
    # shellcheck disable=SC2086 # word lists
    bench_json "kiln profile $mode b$b $len" 240 "$results/$name.txt" \
      "$kx" "$kit_root/bin/kiln" profile "$bench_art" --device "$bench_device" "${shape[@]}" \
      "${roofline[@]}" --json-out "$results/$name.json" $flags &&
      cat "$results/$name.txt" >>"$summary"
  done
}

# A change measured against its own switch in one call: with KILN_BENCH_AB_ENV set (say
# KILN_GEMV_OVERLAP=0), the first workload and every KILN_BENCH_PROFILES step run again under
# those variables, as ab-kiln-<workload>.json (outside compare.py's kiln-*.json) and
# ab-profile-<mode>-<batch>-<length>.txt.
# Prompts a workload of batch b runs: b, at least 4 (the first workload also measures batch-1
# decode and TTFT; with 4 prompts a batch-64 workload would measure 4 sequences' throughput).
prompts() {
  echo $(($1 > 4 ? $1 : 4))
}

run_ab() {
  local flags=$1 w=$2 b i o spec mode len shape name
  [ -n "${KILN_BENCH_AB_ENV:-}" ] || return 0
  IFS=x read -r b i o <<<"$w"
  # shellcheck disable=SC2086 # word lists
  bench_json "kiln bench b$b $i/$o, $KILN_BENCH_AB_ENV" 300 "$results/ab-kiln-$w.json" \
    env $KILN_BENCH_AB_ENV "$kx" "$kit_root/bin/kiln" bench "$bench_art" --device "$bench_device" \
    --json --batch "$b" --input-len "$i" --output-len "$o" $flags --num-prompts "$(prompts "$b")" ||
    return 0
  for spec in ${KILN_BENCH_PROFILES:-decode:1:128 decode:64:1000 prefill:1:4096}; do
    IFS=: read -r mode b len <<<"$spec"
    shape=(--batch "$b" --context "$len")
    [ "$mode" = prefill ] && shape=(--batch "$b" --prefill "$len")
    name=ab-profile-$mode-$b-$len
    # shellcheck disable=SC2086 # word lists
    bench_json "kiln profile $mode b$b $len, $KILN_BENCH_AB_ENV" 240 "$results/$name.txt" \
      env $KILN_BENCH_AB_ENV "$kx" "$kit_root/bin/kiln" profile "$bench_art" \
      --device "$bench_device" "${shape[@]}" $flags &&
      cat "$results/$name.txt" >>"$summary"
  done
}

# Nsight Compute over one profile step, with KILN_BENCH_NCU=mode:batch:length (as
# KILN_BENCH_PROFILES): every kernel of the first KILN_BENCH_NCU_COUNT launches (default 400) with
# its duration, DRAM bytes, registers, grid and achieved occupancy, caches flushed before each
# (ncu's default), clocks left alone; Linear autotuning off and the GEMV forced for decode rows,
# so the launches are the step's own and not load-time timing candidates. CSV in
# results/ncu-<mode>-<batch>-<length>.csv. Use with KILN_BENCH_LAYERS (few layers, same shapes).
run_ncu() {
  local flags=$1 mode b len shape name
  [ -n "${KILN_BENCH_NCU:-}" ] || return 0
  if ! command -v ncu >/dev/null; then
    record MISSING "ncu" "Nsight Compute is not on this machine's PATH"
    return 0
  fi
  IFS=: read -r mode b len <<<"$KILN_BENCH_NCU"
  shape=(--batch "$b" --context "$len")
  [ "$mode" = prefill ] && shape=(--batch "$b" --prefill "$len")
  name=ncu-$mode-$b-$len
  # shellcheck disable=SC2086 # word lists
  bench_json "ncu kiln profile $mode b$b $len" 300 "$results/$name.csv" \
    env KILN_LINEAR_AUTOTUNE=0 KILN_LINEAR_GEMV=always ncu --clock-control none \
    --target-processes all --launch-count "${KILN_BENCH_NCU_COUNT:-400}" --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active \
    "$kx" "$kit_root/bin/kiln" profile "$bench_art" --device "$bench_device" "${shape[@]}" $flags
}

# The sequence of docs/benchmarks.md ("Commands for the GPU session"): batch-1 decode and the
# long-prompt TTFT measured once (the first workload), then the throughput workloads.
run_bench() {
  note "--- bench (roofline, kiln bench and the transformers peer on a random ${KILN_BENCH_PRESET:-llama-3.1-8b})"
  bench_device=${KILN_BENCH_DEVICE:-cuda}
  bench_python=${KILN_BENCH_PYTHON:-python3}
  if [ "$gpu" != 1 ]; then
    expect_no_gpu "roofline" "$kx" "$kit_root/bin/roofline"
    if [ "$bench_device" = cuda ]; then
      record SKIP "bench" "no GPU (KILN_BENCH_DEVICE=cpu rehearses the sequence on the cpu)"
      return 0
    fi
  fi
  local workloads=${KILN_BENCH_WORKLOADS:-1x128x128 64x128x128 256x128x128 1x1000x1000 64x1000x1000 256x1000x1000}
  local w b i o flags once="--ttft-len ${KILN_BENCH_TTFT_LEN:-4096}"
  local results=$work/results
  if [ -n "$simulated" ]; then
    record SKIP "roofline" "simulated GPU: its bandwidth and peak mean nothing"
  elif [ "$gpu" = 1 ] && [ ! -f "$results/roofline.json" ]; then
    bench_json "roofline" 180 "$results/roofline.json" "$kx" "$kit_root/bin/roofline"
  fi
  bench_model || return 0
  flags=$(bench_flags)
  if [ "${KILN_BENCH_KILN:-1}" = 1 ]; then
    for w in $workloads; do
      IFS=x read -r b i o <<<"$w"
      # shellcheck disable=SC2086 # word lists
      bench_json "kiln bench b$b $i/$o" 300 "$results/kiln-$w.json" \
        "$kx" "$kit_root/bin/kiln" bench "$bench_art" --device "$bench_device" --json --batch "$b" \
        --input-len "$i" --output-len "$o" $flags --num-prompts "$(prompts "$b")" \
        ${once:---no-batch1}
      once=""
    done
    run_profiles "$flags"
    run_ab "$flags" "${workloads%% *}"
    run_ncu "$flags"
  fi
  once="--ttft-len ${KILN_BENCH_TTFT_LEN:-4096}"
  if [ "${KILN_BENCH_PEER:-1}" = 1 ] && have_tool "$repo/tools/bench/hf_peer.py"; then
    for w in $workloads; do
      IFS=x read -r b i o <<<"$w"
      # shellcheck disable=SC2086 # word lists
      bench_json "transformers peer b$b $i/$o" 300 "$results/hf-$w.json" \
        "$bench_python" "$repo/tools/bench/hf_peer.py" "$model_dir" --device "$bench_device" \
        --batch "$b" --input-len "$i" --output-len "$o" --num-prompts "$(prompts "$b")" \
        ${once:---no-batch1}
      once=""
    done
  fi
  if have_tool "$repo/tools/bench/compare.py"; then
    local roofline=()
    [ -s "$results/roofline.json" ] && roofline=(--roofline "$results/roofline.json")
    bench_json "compare.py" 60 "$results/compare.md" "$bench_python" \
      "$repo/tools/bench/compare.py" "${roofline[@]}" --kiln "$results"/kiln-*.json \
      --hf "$results"/hf-*.json && cat "$results/compare.md" >>"$summary"
  fi
}

# ---- results ------------------------------------------------------------------------------

finish() {
  local status line=""
  for status in PASS PARTIAL FAIL TIMEOUT SKIP MISSING NOTRUN; do
    line+="$status ${counts[$status]:-0}  "
  done
  note "--- totals: $line(elapsed $(elapsed)s)"
  tar -C "$work" -czf "$OUT/results.tar.gz" results logs 2>/dev/null
  [ "${counts[FAIL]:-0}" = 0 ] && [ "${counts[TIMEOUT]:-0}" = 0 ]
}


gpu_name() {
  if [ -n "$simulated" ]; then
    echo "simulated (cudasim)"
  elif [ "$gpu" = 1 ]; then
    nvidia-smi --query-gpu=name --format=csv,noheader | head -1
  else
    echo none
  fi
}

main() {
  unpack_kit
  {
    echo "kiln GPU kit run: mode $mode, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), repo $repo"
    head -2 "$kit_dir/manifest.txt"
  } | tee -a "$envlog"
  detect_gpu
  setup_libraries
  setup_cuda_home
  setup_paths
  note "mode $mode; GPU: $(gpu_name) ($sm); budget ${budget_s}s"
  case "$mode" in
  tests) run_tests ;;
  bench) run_bench ;;
  all)
    run_tests
    run_bench
    ;;
  esac
  finish
}

main
