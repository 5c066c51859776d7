#!/usr/bin/env bash
# Instructions per decode call of the AArch64 kernels, per SIMD level, under
# qemu-user (no ARM machine is at hand: these are executed-instruction
# counts, not times; they leave out memory stalls, so a kernel bound by DRAM
# bandwidth gains less than its ratio here).
#
#   bench/arm64_insns.sh [ROWS COLS]   (default 64 x 1024; needs the
#                                       build-arm64/ library of
#                                       scripts/test_arm64.sh)
#
# Each count is the number of translation blocks qemu executes with one
# instruction per block (-singlestep -d nochain,exec); one call's count is
# (count with 3 calls - count with 1 call) / 2, so start-up and set-up
# cancel. A call is a whole sp_matmul of one token: activation quantization
# (or the 3-part split of precision high) included.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-64}
COLS=${2:-1024}
CC=${CC_ARM64:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_ARM64:-qemu-aarch64}
OUT=build-arm64
[ -f "$OUT/libcompute.a" ] || scripts/test_arm64.sh >/dev/null
"$CC" -std=c17 -O3 -DNDEBUG -D_GNU_SOURCE -pthread -static -Isrc -Iinclude \
  tests/tools/kernel_calls.c "$OUT/libcompute.a" -lm -o "$OUT/kernel_calls"

count() {  # $1 level, $2 precision, $3 type, $4 tokens, $5 calls
  SPINDLE_SIMD=$1 SPINDLE_PRECISION=$2 "$QEMU" -cpu max -singlestep -d nochain,exec \
    -D /dev/stdout "$OUT/kernel_calls" "$3" "$ROWS" "$COLS" "$4" "$5" | grep -c '^Trace'
}
per_call() { echo $(( ($(count "$@" 3) - $(count "$@" 1)) / 2 )); }

echo "rows=$ROWS cols=$COLS, one token; instructions per call (ratio to neon)"
printf '%-6s %-5s %10s %10s %10s\n' type prec neon dotprod i8mm
for prec in fast high; do
  for t in q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K mlx4 mlx8; do
    [ "$prec" = fast ] && [ "${t#mlx}" != "$t" ] && continue  # (same kernel as high, 1 level)
    n=$(per_call neon "$prec" "$t" 1)
    d=$(per_call dotprod "$prec" "$t" 1)
    i=$(per_call i8mm "$prec" "$t" 1)
    printf '%-6s %-5s %10d %10d (%.2fx) %10d (%.2fx)\n' "$t" "$prec" "$n" "$d" \
      "$(echo "$n / $d" | bc -l)" "$i" "$(echo "$n / $i" | bc -l)"
  done
done
