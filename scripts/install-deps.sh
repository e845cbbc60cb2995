#!/usr/bin/env bash
# Installs every Debian package kiln's build and tests need on a fresh Debian 12 machine.
# Idempotent: skips apt when everything is already installed. Run as root or with sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git pkg-config
  libssl-dev libflatbuffers-dev flatbuffers-compiler nlohmann-json3-dev
  libgtest-dev libgmock-dev libpcre2-dev libicu-dev
  # the compiler only (docs/toolchain.md: libzstd-dev is a missing dependency of llvm-19-dev)
  libmlir-19-dev mlir-19-tools llvm-19-dev libzstd-dev
  python3 python3-venv
  # kiln serve (runtime/serve) and its end-to-end tests
  libcpp-httplib-dev curl
  # kiln push/pull (S3 over libcurl with SigV4) and kiln package (tar.gz via libarchive)
  libcurl4-openssl-dev libarchive-dev
  # scripts/fuzz.sh: clang with libFuzzer and the sanitizers, and OpenMP for clang
  clang libclang-rt-14-dev libomp-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
echo "install-deps: all build and test packages present"
