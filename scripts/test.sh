#!/usr/bin/env bash
# The project's test command (README): installs what the tests need, builds
# a release and a sanitizer (ASan + UBSan) configuration, and runs the C unit
# tests (ctest) and the Python parity suites (pytest) against each.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
START=$SECONDS
stage() { echo "== [$(( (SECONDS - START) / 60 )) min] $*"; }

scripts/setup.sh

# Includes must point down the layer order (docs/ARCHITECTURE.md,
# "Layering"); checked before anything is built.
stage "include layering"
python3 scripts/check_layering.py

run_suite() {   # $1 build dir, $2 extra cmake flags, $3 exact-mode test paths
               # and options ("": no exact-mode run), $4... pytest selection
  local dir=$1 flags=$2 exact=$3
  stage "building $dir ($flags)"
  cmake -S . -B "$dir" $flags >/dev/null
  cmake --build "$dir" -j "$JOBS" 2>&1 | grep -E "error|warning" || true
  cmake --build "$dir" -j "$JOBS" >/dev/null
  stage "C unit tests ($dir)"
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS"
  # The kernels pick the best SIMD path at run time; run the C tests again
  # on the lower paths so the portable fallback and AVX2 stay tested.
  for level in scalar avx2; do
    stage "C unit tests ($dir, SPINDLE_SIMD=$level)"
    SPINDLE_SIMD=$level ctest --test-dir "$dir" --output-on-failure -j "$JOBS" \
      -R "test_matmul|test_attention|test_ops"
  done
  # The mlx-lm parity suites once more with f32 activations everywhere (the
  # default mode's int8 kernels are held to the same tolerances above). The
  # GGUF, engine, speculation and sequence-state tests choose their precision themselves
  # or do not depend on it, so they run once.
  if [ -n "$exact" ]; then
    stage "mlx-lm parity ($dir, SPINDLE_PRECISION=exact)"
    # shellcheck disable=SC2086  # $exact is a list of pytest arguments
    SPINDLE_PRECISION=exact SPINDLE_BUILD="$PWD/$dir" SPINDLE_BUILD_DIR="$PWD/$dir" \
      SPINDLE_BIN="$PWD/$dir/spindle" .venv/bin/python -m pytest -q -p no:cacheprovider \
      $exact
  fi
  stage "Python suites ($dir)"
  SPINDLE_BUILD="$PWD/$dir" SPINDLE_BUILD_DIR="$PWD/$dir" SPINDLE_BIN="$PWD/$dir/spindle" \
    .venv/bin/python -m pytest -q -p no:cacheprovider "${@:4}"
}

EXACT_ALL="tests/parity --ignore-glob=tests/parity/test_*_gguf.py
  --ignore=tests/parity/test_engine.py --ignore=tests/parity/test_seq_state.py
  --ignore=tests/parity/test_spec.py"
run_suite build "-DCMAKE_BUILD_TYPE=Release" "$EXACT_ALL" tests

# The tree builds with clang as well (its own warnings and its code
# generation for the SIMD kernels): its C tests and the mlx-lm parity suites
# whose kernels differ (the base set, the hybrid's DeltaNet, gpt-oss's
# MXFP4), in the default precision.
stage "building build-clang (clang-16, Release)"
CC=clang-16 cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-clang -j "$JOBS" 2>&1 | grep -E "error|warning" || true
cmake --build build-clang -j "$JOBS" >/dev/null
stage "C unit tests (build-clang)"
ctest --test-dir build-clang --output-on-failure -j "$JOBS"
stage "mlx-lm parity (build-clang)"
SPINDLE_BUILD="$PWD/build-clang" SPINDLE_BUILD_DIR="$PWD/build-clang" \
  SPINDLE_BIN="$PWD/build-clang/spindle" .venv/bin/python -m pytest -q \
  -p no:cacheprovider tests/parity/test_parity.py \
  tests/parity/test_hybrid_parity.py tests/parity/test_gptoss_parity.py

# The parsers under libFuzzer (tests/fuzz): each harness once over its
# committed corpus (seeds and bug reproducers), then FUZZ_SECONDS of fuzzing.
stage "fuzzing (scripts/fuzz.sh ${FUZZ_SECONDS:-30})"
scripts/fuzz.sh "${FUZZ_SECONDS:-30}"

# The AArch64 kernels (NEON, dotprod, i8mm), cross-compiled and tested under
# qemu-user at every level.
stage "AArch64 (qemu-user)"
scripts/test_arm64.sh

if [ -z "${SPINDLE_SKIP_SANITIZERS:-}" ]; then
  # The sanitizer build runs the same C tests and the Python suites that
  # drive the binary, ASan's leak checker on. Not here (the release build
  # runs them; CI's time is bounded): the exact-mode rerun, the cases marked
  # slow, and the llama.cpp GGUF comparisons (test_*_gguf.py: their time is
  # llama.cpp's; Spindle's GGUF reading is fuzzed under ASan above).
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_suite build-asan "-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPINDLE_SANITIZE=ON" \
    "" tests -m "not slow" --ignore-glob='tests/parity/test_*_gguf.py'
fi
stage "done"
