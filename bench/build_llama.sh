#!/usr/bin/env bash
# Fetch llama.cpp's source through PyPI (the llama-cpp-python sdist vendors it
# under vendor/llama.cpp) and build only llama-bench and llama-batched-bench
# (with LLAMA_SERVER=1 also llama-server, for bench/server_bench),
# natively tuned, into bench/.work/compare/. PyPI is the one registry here that
# carries the whole llama.cpp tree (an sdist already in .venv/sdist/ is used
# as is); the build is cached, so a rerun only checks the binaries.
#
# usage: bench/build_llama.sh [PYTHON]     prints the llama-bench path
#        (llama-batched-bench is beside it)
#
# LLAMA_PERPLEXITY=1 builds only llama-perplexity (the anchor for
# `spindle perplexity`, tests/cli/test_llama_perplexity.py) and prints its
# path instead: the tests need no benches, and each tool costs build time.
#
# LLAMA_DIFFUSION=1 builds only llama-diffusion-cli (the anchor for masked
# diffusion generation, tests/cli/test_llama_diffusion.py) and prints its
# path; it lives among llama.cpp's examples, so those are configured too.
#
# LLAMA_ISA=avx2 builds for AVX2 + FMA + F16C only (no AVX-512, no AVX-VNNI)
# into llama-build-VERSION-avx2: the anchor for SPINDLE_SIMD=avx2 on a
# machine that has more (how an AVX2-only CPU is measured without one).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${1:-$ROOT/.venv/bin/python}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
WORK="$ROOT/bench/.work/compare"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
ISA="${LLAMA_ISA:-native}"
case "$ISA" in
native) BUILD="$WORK/llama-build-$VERSION"
        ISA_FLAGS=(-DGGML_NATIVE=ON) ;;
avx2)   BUILD="$WORK/llama-build-$VERSION-avx2"
        ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
                   -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF
                   -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF
                   -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF) ;;
*) echo "build_llama: LLAMA_ISA is native or avx2, not '$ISA'" >&2; exit 2 ;;
esac
BIN="$BUILD/bin/llama-bench"
BATCHED_BIN="$BUILD/bin/llama-batched-bench"
JOBS="${JOBS:-2}"
TARGETS=(llama-bench llama-batched-bench)
SERVER=OFF
EXAMPLES=OFF
if [[ "${LLAMA_PERPLEXITY:-0}" == 1 ]]; then
    BIN="$BUILD/bin/llama-perplexity"
    BATCHED_BIN="$BIN"
    TARGETS=(llama-perplexity)
fi
if [[ "${LLAMA_DIFFUSION:-0}" == 1 ]]; then
    BIN="$BUILD/bin/llama-diffusion-cli"
    BATCHED_BIN="$BIN"
    TARGETS=(llama-diffusion-cli)
    EXAMPLES=ON
fi
if [[ "${LLAMA_SERVER:-0}" == 1 ]]; then
    TARGETS+=(llama-server)
    SERVER=ON
fi

if [[ -x "$BIN" && -x "$BATCHED_BIN" && ( $SERVER == OFF || -x "$BUILD/bin/llama-server" ) ]]; then
    echo "$BIN"
    exit 0
fi
mkdir -p "$WORK/dl"
TARBALL="$WORK/dl/llama_cpp_python-$VERSION.tar.gz"
VENDORED="$ROOT/.venv/sdist/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$TARBALL" && -f "$VENDORED" ]]; then
    cp "$VENDORED" "$TARBALL"
fi
if [[ ! -f "$TARBALL" ]]; then
    echo "build_llama: downloading llama-cpp-python==$VERSION sdist" >&2
    # pip prepares the sdist's metadata, fetching scikit-build-core into an
    # isolated env; nothing is built or installed.
    "$PY" -m pip download --no-deps --no-binary :all: \
        "llama-cpp-python==$VERSION" -d "$WORK/dl" >&2
fi
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    tar -xzf "$TARBALL" -C "$WORK" "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi
echo "build_llama: configuring llama.cpp (log: $BUILD.log)" >&2
# Everything but the tools' common library and the benches (and the server
# when asked: it needs the multimodal library, built with the tools) is off;
# LLAMA_CURL / LLAMA_OPENSSL off keeps the build offline and dependency-free.
# No AMX (as scripts/setup.sh): its matmul crashes under some hypervisors.
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" \
    -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=$EXAMPLES -DLLAMA_BUILD_SERVER=$SERVER -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TOOLS=ON \
    >"$BUILD.log" 2>&1
echo "build_llama: building ${TARGETS[*]} with -j$JOBS (several minutes on 2 cores)" >&2
cmake --build "$BUILD" --target "${TARGETS[@]}" -j"$JOBS" >>"$BUILD.log" 2>&1 || {
    tail -30 "$BUILD.log" >&2
    exit 1
}
echo "$BIN"
