#!/usr/bin/env bash
# Cross-builds the compute module for AArch64 and runs its unit tests under
# qemu-user: the NEON kernels (matmul_neon.c) and the portable path, checked
# by the same tests/unit sources as on x86 against their double-precision
# references. Only src/compute (with the KV cache and error helpers its tests
# use) is built, which needs nothing outside libc, and
# the tests use a small cmocka stand-in (tests/arm64/cmocka.h), so no
# AArch64 builds of libcjson, pcre2, utf8proc or cmocka are needed.
#
#   scripts/test_arm64.sh   (build dir: build-arm64/; ~30 s here once the
#                            packages are installed)
set -euo pipefail
cd "$(dirname "$0")/.."

CC=${CC_ARM64:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_ARM64:-qemu-aarch64}
OUT=build-arm64
JOBS=${JOBS:-2}
# Compute tests only; test_matmul itself runs every level the CPU has
# (portable and NEON) against its reference.
TESTS="test_matmul test_matmul_check test_matmul_ggml test_ops test_attention test_linear_attention test_rope test_rope_interleaved test_threadpool"

scripts/apt_install.sh test_arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user

# The project's warnings, as errors: the cross build is the only place the
# AArch64 code is compiled at all.
CFLAGS="-std=c17 -O3 -DNDEBUG -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wshadow -Wvla -Werror -pthread"
mkdir -p "$OUT/obj"
echo "== cross-compiling src/compute (+ the KV cache it reads) for aarch64 ($CC)"
printf '%s\n' src/compute/*.c src/compute/*/*.c src/runtime/kv_cache.c src/base/error.c | xargs -P "$JOBS" -I{} sh -c \
  'o="$1/obj/$(basename "$2" .c).o"; exec $3 $4 -Isrc -Iinclude -c "$2" -o "$o"' \
  _ "$OUT" {} "$CC" "$CFLAGS"
rm -f "$OUT/libcompute.a"
aarch64-linux-gnu-ar rcs "$OUT/libcompute.a" "$OUT"/obj/*.o
# The NEON table must really be in the library (not an empty translation
# unit because of a wrong guard).
aarch64-linux-gnu-nm "$OUT/libcompute.a" | grep -E ' [DR] sp_mm_kernels_neon$' >/dev/null ||
  { echo "test_arm64: sp_mm_kernels_neon missing from the aarch64 build"; exit 1; }

printf '%s\n' $TESTS | xargs -P "$JOBS" -I{} sh -c \
  'exec $3 $4 -static -Isrc -Iinclude -Itests/arm64 -Itests/unit "tests/unit/$2.c" "$1/libcompute.a" -lm -o "$1/$2"' \
  _ "$OUT" {} "$CC" "$CFLAGS"
"$CC" $CFLAGS -static -Isrc tests/arm64/simd_level.c "$OUT/libcompute.a" -lm -o "$OUT/simd_level"

# The dispatch: NEON by default, the portable path with SPINDLE_SIMD=scalar
# (and no x86 level can be asked for).
expect_level() {  # $1 SPINDLE_SIMD value ('' for unset), $2 expected output
  local got
  got=$(env -u SPINDLE_SIMD ${1:+SPINDLE_SIMD=$1} "$QEMU" "$OUT/simd_level")
  if [ "$got" != "$2" ]; then
    echo "test_arm64: SPINDLE_SIMD='$1': got '$got', want '$2'"; exit 1
  fi
}
expect_level "" "neon neon"
expect_level scalar "scalar portable"
expect_level avx512 "neon neon"
echo "== dispatch: neon by default, SPINDLE_SIMD=scalar -> portable"

for t in $TESTS; do
  echo "== $t (qemu-aarch64)"
  if ! "$QEMU" "$OUT/$t" >"$OUT/$t.log" 2>&1; then
    cat "$OUT/$t.log"; echo "test_arm64: $t failed"; exit 1
  fi
  grep -E "^\[ (FAILED|SKIPPED|PASSED)" "$OUT/$t.log" || true
done
echo "== arm64: all passed"
