#!/usr/bin/env bash
# Builds the GPU kit (docs/gpu.md): everything a session with a GPU needs to run every GPU check in
# one or two device calls, on a machine that has the NVIDIA driver and CUDA toolkit but none of our
# build dependencies and no network. Here (x86-64 Debian 12) it
#   1. configures $KILN_GPUKIT_BUILD (default build-gpukit) with CUDA, the compiler and
#      KILN_STATIC_MLIR=ON (no libMLIR.so / libLLVM.so at run time), and builds kiln, roofline and
#      every test binary labelled gpu (target kiln_gpu_tests, list in <build>/gpu_tests.txt);
#   2. assembles .gpukit/ (ignored through .git/info/exclude):
#        run.sh        scripts/gpu-run.sh, the entry point on the GPU machine
#        manifest.txt  commit, binaries, carried libraries with their sources, configured paths
#        kit.tar.xz    bin/ (stripped binaries, gpu_tests.txt), lib/ (shared libraries), and
#                      data/ (the small models and expected outputs from ../shared/assets the GPU
#                      checks read; carried, never committed)
#   3. prints the kit's size and fails above 60 MiB (the device tool carries 64 MiB in all,
#      working tree included).
# Carried: every library ldd shows except glibc's own (libc, libm, libdl, libpthread, librt,
# ld-linux) and the NVIDIA driver/toolkit libraries, which must match the GPU machine's driver and
# come from there (libcuda, libnvrtc*, libcublas*, libnccl, libcudart). libstdc++ and libgcc_s go
# to lib/compat/, used there only when the system's libstdc++ is older than ours (a newer one is
# backward compatible, and python's torch needs the newer one in the same process tree).
#
#   scripts/gpu-kit.sh [extra cmake -D arguments]
# Last it runs the kit here as the GPU machine would, without a GPU and with an empty environment
# (every GPU test must skip saying why; KILN_GPUKIT_CHECK=0 skips this).
# Environment: KILN_GPUKIT_BUILD, KILN_JOBS (default 2), KILN_ASSETS_DIR (default
# ../shared/assets), KILN_GPUKIT_SKIP_BUILD=1 (assemble from an existing build only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_GPUKIT_BUILD:-$root/build-gpukit}
kit=$root/.gpukit
assets=${KILN_ASSETS_DIR:-$root/../shared/assets}
limit_mib=60

die() {
  echo "gpu-kit: error: $*" >&2
  exit 1
}

exclude_kit() {
  local exclude
  exclude=$(git -C "$root" rev-parse --git-path info/exclude)
  [[ $exclude = /* ]] || exclude=$root/$exclude
  mkdir -p "$(dirname "$exclude")"
  grep -qxF '/.gpukit/' "$exclude" 2>/dev/null || echo '/.gpukit/' >>"$exclude"
}

build_binaries() {
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")} CCACHE_NOHASHDIR=true
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_ENABLE_CUDA=ON \
    -DKILN_BUILD_COMPILER=ON -DKILN_STATIC_MLIR=ON -DCMAKE_PREFIX_PATH=/usr/lib/llvm-19 "$@" \
    >"$build/gpukit-configure.log" 2>&1 ||
    { tail -30 "$build/gpukit-configure.log"; die "configure failed"; }
  ninja -C "$build" -j "${KILN_JOBS:-2}" kiln kiln_roofline kiln_gpu_tests ||
    die "build failed (ninja -C $build kiln kiln_roofline kiln_gpu_tests)"
}

# Provided on the GPU machine: glibc's libraries and the NVIDIA driver/toolkit libraries.
provided_there() {
  case "$1" in
  linux-vdso.so* | ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so*) return 0 ;;
  libresolv.so* | libutil.so* | libanl.so* | libmvec.so*) return 0 ;; # glibc too
  libcuda.so* | libnvrtc* | libcublas* | libnccl* | libcudart*) return 0 ;;
  esac
  return 1
}

# bin/: stripped copies; gpu_tests.txt lists "name kind" (kind kernel: also run under
# compute-sanitizer, the tests of tests/kernels/cuda).
copy_binaries() {
  local stage=$1 name path kind
  mkdir -p "$stage/bin"
  install -m 755 "$build/tools/kiln/kiln" "$stage/bin/kiln"
  install -m 755 "$build/tools/bench/roofline" "$stage/bin/roofline"
  : >"$stage/bin/gpu_tests.txt"
  while read -r name path; do
    [ -n "$name" ] || continue
    [ -x "$path" ] || die "gpu test $name was not built ($path)"
    install -m 755 "$path" "$stage/bin/$name"
    kind=other
    [[ $path == */tests/kernels/* ]] && kind=kernel
    echo "$name $kind" >>"$stage/bin/gpu_tests.txt"
  done <"$build/gpu_tests.txt"
  strip --strip-unneeded "$stage"/bin/* 2>/dev/null || true
}

# lib/: the shared libraries the binaries need that the GPU machine may lack.
copy_libraries() {
  local stage=$1 line name path missing=""
  mkdir -p "$stage/lib/compat"
  for bin in "$stage"/bin/*; do
    [ "$(head -c 4 "$bin" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    while read -r line; do
      name=${line%% *}
      path=$(sed -n 's/.*=> \(\/[^ ]*\) (.*/\1/p' <<<"$line")
      provided_there "$name" && continue
      if [ -z "$path" ]; then
        [[ $line == *"not found"* ]] && missing+=" $name(${bin##*/})"
        continue
      fi
      case "$name" in
      libstdc++.so* | libgcc_s.so*) cp -L -n "$path" "$stage/lib/compat/$name" ;;
      *) cp -L -n "$path" "$stage/lib/$name" ;;
      esac
      echo "$name $path" >>"$stage/lib/sources.txt"
    done < <(ldd "$bin" | sed 's/^[[:space:]]*//')
  done
  [ -z "$missing" ] || die "libraries not found by ldd:$missing"
  sort -u -o "$stage/lib/sources.txt" "$stage/lib/sources.txt"
}

# data/: the same layout as ../shared/assets, only what the GPU checks read.
copy_data() {
  local stage=$1 item
  mkdir -p "$stage/data/models" "$stage/data/expected"
  if [ ! -d "$assets/models" ]; then
    echo "gpu-kit: warning: $assets is absent: the kit has no data/ (model checks will skip)" >&2
    return
  fi
  for item in models/tinystories-656K-hf models/stories260K-hf models/stories260K-llama2c \
    expected/stories260K_llama2c_reference.md expected/stories260K_hf_reference_logits.json \
    expected/tinystories656K_hf_reference_greedy.json; do
    [ -e "$assets/$item" ] || die "missing $assets/$item"
    cp -r "$assets/$item" "$stage/data/$item"
  done
}

write_manifest() {
  local stage=$1 out=$2
  {
    echo "kiln GPU kit, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"'), glibc $(ldd --version | head -1 | awk '{print $NF}')"
    echo "commit $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD -- . ':!build*' 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || echo '?')"
    echo "configured: source $root, build $build"
    echo "configured: KILN_ASSETS_DIR $(sed -n 's/^KILN_ASSETS_DIR:PATH=//p' "$build/CMakeCache.txt")"
    echo "configured: KILN_TEST_DATA_DIR $root/tests/data"
    echo "configured: KILN_BINARY_DIR $build"
    echo "binaries:"
    (cd "$stage/bin" && for f in *; do printf '  %-28s %10d\n' "$f" "$(stat -c %s "$f")"; done)
    echo "libraries (carried from):"
    sed 's/^/  /' "$stage/lib/sources.txt"
    echo "data:"
    (cd "$stage" && find data -type f | sort | sed 's/^/  /')
  } >"$out"
}

main() {
  command -v ldd >/dev/null || die "ldd is required"
  exclude_kit
  if [ "${KILN_GPUKIT_SKIP_BUILD:-0}" != 1 ]; then
    build_binaries "$@"
  fi
  [ -f "$build/gpu_tests.txt" ] || die "$build/gpu_tests.txt is missing: configure $build first"
  stage=$(mktemp -d "${TMPDIR:-/tmp}/gpukit.XXXXXX")
  trap 'rm -rf "$stage"' EXIT
  copy_binaries "$stage"
  copy_libraries "$stage"
  copy_data "$stage"
  rm -rf "$kit"
  mkdir -p "$kit"
  install -m 755 "$root/scripts/gpu-run.sh" "$kit/run.sh"
  write_manifest "$stage" "$kit/manifest.txt"
  echo "gpu-kit: compressing ($(du -sm "$stage" | cut -f1) MiB uncompressed)"
  # One xz stream with a 64 MiB dictionary: the test binaries share most of their code (-T2 -6
  # cut it into independent blocks: 35 MiB instead of 25).
  tar -C "$stage" -cf - bin lib data | xz -T1 -9e >"$kit/kit.tar.xz"
  local bytes tree
  bytes=$(du -sb "$kit" | cut -f1)
  tree=$(cd "$root" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  cat "$kit/manifest.txt"
  awk -v k="$kit" -v b="$bytes" -v l="$limit_mib" -v t="$tree" 'BEGIN {
    printf "gpu-kit: %s is %.1f MiB (limit %d MiB); the working tree that travels with it is %.1f MiB\n",
      k, b / 1048576, l, t / 1048576 }'
  [ "$bytes" -le $((limit_mib * 1024 * 1024)) ] ||
    die "the kit is $((bytes / 1048576)) MiB, over the $limit_mib MiB limit: drop data or binaries"
  [ $((bytes + tree)) -le $((64 * 1024 * 1024)) ] ||
    die "kit + working tree = $(((bytes + tree) / 1048576)) MiB: over the device tool's 64 MiB"
  [ "${KILN_GPUKIT_CHECK:-1}" = 1 ] && self_check
  echo "gpu-kit: ready. On the GPU machine: bash .gpukit/run.sh tests|bench|all (docs/gpu.md)"
}

# The kit as the GPU machine will start it, with nothing of this shell's environment: without a
# GPU every GPU test must skip with its reason and the cpu checks pass.
self_check() {
  local out
  out=$(mktemp -d "${TMPDIR:-/tmp}/gpukit-check.XXXXXX")
  echo "gpu-kit: self-check: env -i PATH=/usr/bin:/bin bash .gpukit/run.sh tests (OUT=$out)"
  (cd "$root" && env -i PATH=/usr/bin:/bin OUT="$out" KILN_KIT_WORK="$out/work" \
    bash .gpukit/run.sh tests) >"$out/run.out" 2>&1 ||
    { cat "$out/run.out"; die "self-check failed (logs in $out)"; }
  sed -n '/^--- GPU test binaries/,$p' "$out/summary.txt"
  rm -rf "$out"
}

main "$@"
