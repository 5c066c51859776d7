#!/usr/bin/env bash
# Cross-builds the compute module for AArch64 and runs its unit tests under
# qemu-user (`-cpu max`: NEON, dotprod and i8mm): the NEON f32 kernels
# (matmul_neon.c), the dotprod / i8mm integer kernels of the ggml types
# (ggml_dot_neon.c, ggml_dot_kquants_neon.c) and the portable path, checked
# by the same tests/unit sources as on x86 against their double-precision
# references. Only src/compute (with the KV cache and error helpers its tests
# use) is built, which needs nothing outside libc, and
# the tests use a small cmocka stand-in (tests/arm64/cmocka.h), so no
# AArch64 builds of libcjson, pcre2, utf8proc or cmocka are needed.
#
#   scripts/test_arm64.sh   (build dir: build-arm64/; ~2 min of CPU time
#                            once the packages are installed: 115 s user
#                            measured here, of which ~35 s are the dotprod /
#                            i8mm levels and their tests)
set -euo pipefail
cd "$(dirname "$0")/.."

CC=${CC_ARM64:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_ARM64:-qemu-aarch64}
OUT=build-arm64
JOBS=${JOBS:-2}
# Compute tests only; each runs every level the CPU has against its
# reference. Those with integer kernels (TESTS_INT8) run under -cpu max:
# scalar, neon, dotprod and i8mm. The others only reach the NEON f32
# kernels, which are the same at the three AArch64 levels, so they run
# under -cpu cortex-a57 (ARMv8.0: scalar and neon), which halves their time.
TESTS_INT8="test_matmul test_matmul_vnni test_matmul_ggml test_ggml_dot"
TESTS_F32="test_matmul_check test_ops test_attention test_linear_attention test_rope test_rope_interleaved test_threadpool"
TESTS="$TESTS_INT8 $TESTS_F32"

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
# The NEON table and the dotprod / i8mm kernels must really be in the
# library (not empty translation units because of a wrong guard), and the
# extensions' instructions only in their files (the base build is plain
# ARMv8-A: no SDOT or SMMLA elsewhere; matmul_int8_neon.c: the MLX affine
# int8 rows).
aarch64-linux-gnu-nm "$OUT/libcompute.a" | grep -E ' [DR] sp_mm_kernels_neon$' >/dev/null ||
  { echo "test_arm64: sp_mm_kernels_neon missing from the aarch64 build"; exit 1; }
for o in "$OUT"/obj/*.o; do
  n=$(aarch64-linux-gnu-objdump -d "$o" | grep -cE '[[:space:]](sdot|udot|smmla|ummla|usmmla)[[:space:]]' || true)
  case "$(basename "$o")" in
    ggml_dot_neon.o|ggml_dot_kquants_neon.o|matmul_int8_neon.o)
      [ "$n" -gt 0 ] || { echo "test_arm64: no SDOT/SMMLA in $o"; exit 1; } ;;
    *) [ "$n" -eq 0 ] || { echo "test_arm64: SDOT/SMMLA outside the dotprod/i8mm files: $o"; exit 1; } ;;
  esac
done

# (The tests without the vectorizer: gcc 12 for aarch64 crashes vectorizing
# a reduction of test_ggml_dot.c; the tests are references, not kernels.)
printf '%s\n' $TESTS | xargs -P "$JOBS" -I{} sh -c \
  'exec $3 $4 -fno-tree-vectorize -static -Isrc -Iinclude -Itests/arm64 -Itests/unit "tests/unit/$2.c" "$1/libcompute.a" -lm -o "$1/$2"' \
  _ "$OUT" {} "$CC" "$CFLAGS"
"$CC" $CFLAGS -static -Isrc tests/arm64/simd_level.c "$OUT/libcompute.a" -lm -o "$OUT/simd_level"

# The dispatch: the best level the emulated CPU reports (getauxval), lowered
# by SPINDLE_SIMD, never raised (and no x86 level can be asked for); the
# f32 kernels are NEON's at every AArch64 level.
expect_level() {  # $1 qemu -cpu, $2 SPINDLE_SIMD value ('' for unset), $3 expected output
  local got
  got=$(env -u SPINDLE_SIMD ${2:+SPINDLE_SIMD=$2} "$QEMU" -cpu "$1" "$OUT/simd_level")
  if [ "$got" != "$3" ]; then
    echo "test_arm64: -cpu $1 SPINDLE_SIMD='$2': got '$got', want '$3'"; exit 1
  fi
}
expect_level max "" "i8mm neon"
expect_level max dotprod "dotprod neon"
expect_level max neon "neon neon"
expect_level max scalar "scalar portable"
expect_level max avx512 "i8mm neon"
expect_level cortex-a76 "" "dotprod neon"   # SDOT, no SMMLA
expect_level cortex-a76 i8mm "dotprod neon"
expect_level cortex-a57 "" "neon neon"      # ARMv8.0
expect_level cortex-a57 dotprod "neon neon"
echo "== dispatch: the CPU's level (max: i8mm, cortex-a76: dotprod, cortex-a57: neon), lowered by SPINDLE_SIMD"

for t in $TESTS; do
  cpu=cortex-a57
  case " $TESTS_INT8 " in *" $t "*) cpu=max ;; esac
  echo "== $t (qemu-aarch64 -cpu $cpu)"
  if ! "$QEMU" -cpu "$cpu" "$OUT/$t" >"$OUT/$t.log" 2>&1; then
    cat "$OUT/$t.log"; echo "test_arm64: $t failed"; exit 1
  fi
  grep -E "^\[ (FAILED|SKIPPED|PASSED)" "$OUT/$t.log" || true
done
echo "== arm64: all passed"
