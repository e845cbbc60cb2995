#!/usr/bin/env bash
# Configures and builds kiln into ${KILN_BUILD_DIR:-build} with ccache (shared across clones).
# Extra arguments go to cmake's configure step, e.g. -DKILN_BUILD_COMPILER=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_BUILD_DIR:-$root/build}
# ccache hits across fresh clones: paths under the clone's parent are hashed relative.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
export CCACHE_NOHASHDIR=true
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
jobs=${KILN_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH=/usr/lib/llvm-19 "$@" >/dev/null
cmake --build "$build" -j "$jobs" ${KILN_BUILD_TARGETS:+--target $KILN_BUILD_TARGETS}
