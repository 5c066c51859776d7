#!/usr/bin/env bash
# The project's test command (README): installs what the tests need, builds
# a release and a sanitizer (ASan + UBSan, invariant walkers on)
# configuration, and runs the C unit tests (ctest) and the Python parity
# suites (pytest) against each; and the engine with an embedder under
# ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
# SPINDLE_TEST_FULL=1 (make test-full) also runs what CI's time leaves out:
# the exact-mode rerun of every parity suite, the clang build's whole parity
# set, and every Python suite (the slow cases too) under the sanitizers.
FULL=${SPINDLE_TEST_FULL:-}
START=$SECONDS
TIMES=$(mktemp)
stage() {
  echo "== [$(( (SECONDS - START) / 60 )) min] $*"
  echo "$(( SECONDS - START )) $*" >>"$TIMES"
}
# Each stage's duration, printed last (CI keeps the end of the output).
stage_times() {
  echo "$(( SECONDS - START )) (end)" >>"$TIMES"
  echo "== stage times (seconds):"
  awk 'NR > 1 { printf "%6d  %s\n", $1 - t, name } { t = $1; $1 = ""; name = $0 }' "$TIMES"
  rm -f "$TIMES"
}
trap stage_times EXIT

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
  # on the lower paths so the portable fallback, AVX2 and (where the CPU
  # has it: SPINDLE_SIMD names no level it lacks) AVX-VNNI stay tested.
  local levels="scalar avx2"
  if grep -qw avx_vnni /proc/cpuinfo 2>/dev/null; then levels="$levels avxvnni"; fi
  for level in $levels; do
    stage "C unit tests ($dir, SPINDLE_SIMD=$level)"
    SPINDLE_SIMD=$level ctest --test-dir "$dir" --output-on-failure -j "$JOBS" \
      -R "test_matmul|test_attention|test_ops"
  done
  # Without AVX-VNNI the avxvnni level's kernels once more with vpdpbusd
  # emulated exactly in AVX2 (SPINDLE_EMULATE_AVXVNNI: simd_dpbusd.h), only
  # the integer kernel tests built; CI's pass does it in the release build
  # only (the sanitizer build's second configuration took two minutes).
  if ! grep -qw avx_vnni /proc/cpuinfo 2>/dev/null && grep -qw avx2 /proc/cpuinfo 2>/dev/null &&
     { [ -n "$FULL" ] || [ "$dir" = build ]; }; then
    stage "C unit tests ($dir-emuvnni, SPINDLE_SIMD=avxvnni, vpdpbusd emulated)"
    cmake -S . -B "$dir-emuvnni" $flags -DSPINDLE_EMULATE_AVXVNNI=ON >/dev/null
    cmake --build "$dir-emuvnni" -j "$JOBS" --target test_ggml_dot test_matmul \
      test_matmul_ggml test_matmul_vnni >/dev/null
    SPINDLE_SIMD=avxvnni ctest --test-dir "$dir-emuvnni" --output-on-failure -j "$JOBS" \
      -R "test_ggml_dot|test_matmul\$|test_matmul_ggml|test_matmul_vnni\$"
  fi
  # The mlx-lm parity suites once more with f32 activations everywhere (the
  # pass below runs them in high, which tests/parity/conftest.py pins, so
  # its int8 kernels are held to the same tolerances). The
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
    .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "${@:4}"
}

# CI's pass: every suite, and the exact-mode rerun on the base parity set
# and the hybrid's (the other families' kernels are the same products). The
# full pass reruns every mlx-lm parity suite in exact mode.
if [ -n "$FULL" ]; then
  EXACT="tests/parity --ignore-glob=tests/parity/test_*_gguf.py
    --ignore=tests/parity/test_engine.py --ignore=tests/parity/test_seq_state.py
    --ignore=tests/parity/test_spec.py"
  SELECT=(tests)
  CLANG_PARITY=(tests/parity/test_parity.py tests/parity/test_hybrid_parity.py
                tests/parity/test_gptoss_parity.py)
else
  EXACT="tests/parity/test_parity.py tests/parity/test_hybrid_parity.py"
  SELECT=(tests)
  CLANG_PARITY=(tests/parity/test_parity.py)
  # CI's time: the soak test's load runs 20 s instead of a minute, and the
  # longest parametrized slow suites (marker ci_half, tests/conftest.py)
  # run every other case
  export SOAK_SECONDS=${SOAK_SECONDS:-20}
fi
run_suite build "-DCMAKE_BUILD_TYPE=Release" "$EXACT" "${SELECT[@]}"

# The tree builds with clang as well (its own warnings and its code
# generation for the SIMD kernels): its C tests and the mlx-lm parity suites
# whose kernels differ, in high (their conftest's pin): the base set (the full
# pass adds the hybrid's DeltaNet and gpt-oss's MXFP4).
stage "building build-clang (clang-16, Release)"
CC=clang-16 cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-clang -j "$JOBS" 2>&1 | grep -E "error|warning" || true
cmake --build build-clang -j "$JOBS" >/dev/null
stage "C unit tests (build-clang)"
ctest --test-dir build-clang --output-on-failure -j "$JOBS"
stage "mlx-lm parity (build-clang)"
SPINDLE_BUILD="$PWD/build-clang" SPINDLE_BUILD_DIR="$PWD/build-clang" \
  SPINDLE_BIN="$PWD/build-clang/spindle" .venv/bin/python -m pytest -q \
  -p no:cacheprovider "${CLANG_PARITY[@]}"

# The engine and an embedder running passes over one hybrid model at once
# (tests/tools/engine_embed_race.c) under ThreadSanitizer: model data must
# stay read-only during a pass. Only that program is built (the library
# under -fsanitize=thread, about a minute).
stage "ThreadSanitizer: engine + embedder on one hybrid model (build-tsan)"
HYBRID_MODEL=tests/.work/parity-hybrid/qwen3_5-f32
if [ ! -f "$HYBRID_MODEL/config.json" ]; then
  .venv/bin/python tests/parity/make_hybrid_models.py -q --only qwen3_5-f32
fi
CC=clang-16 cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPINDLE_TSAN=ON >/dev/null
cmake --build build-tsan -j "$JOBS" --target engine_embed_race 2>&1 | grep -E "error|warning" || true
cmake --build build-tsan -j "$JOBS" --target engine_embed_race >/dev/null
TSAN_OPTIONS=halt_on_error=1 build-tsan/engine_embed_race "$HYBRID_MODEL"

# `serve --kv-events` under ThreadSanitizer: the pool's hook on the step
# thread, the queue, the publisher thread and /metrics reading its counters.
stage "ThreadSanitizer: serve --kv-events (build-tsan)"
cmake --build build-tsan -j "$JOBS" --target spindle 2>&1 | grep -E "error|warning" || true
cmake --build build-tsan -j "$JOBS" --target spindle >/dev/null
TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
  SPINDLE_BIN="$PWD/build-tsan/spindle" .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/server/test_kv_events.py

# The parsers under libFuzzer (tests/fuzz): each harness once over its
# committed corpus (seeds and bug reproducers), then a fixed number of
# inputs from seed 1 (tests/fuzz/ci_runs.txt); FUZZ_SECONDS=N fuzzes each
# for N seconds instead.
if [ -n "${FUZZ_SECONDS:-}" ]; then
  stage "fuzzing (scripts/fuzz.sh $FUZZ_SECONDS)"
  scripts/fuzz.sh "$FUZZ_SECONDS"
else
  stage "fuzzing (scripts/fuzz.sh --ci)"
  scripts/fuzz.sh --ci
fi

# The AArch64 kernels (NEON, dotprod, i8mm), cross-compiled and tested under
# qemu-user at every level.
stage "AArch64 (qemu-user)"
scripts/test_arm64.sh

if [ -z "${SPINDLE_SKIP_SANITIZERS:-}" ]; then
  # The sanitizer build runs the same C tests, ASan's leak checker on, and
  # the Python suites that drive the code the C tests reach least: the
  # server, the CLI, bad input, the step engine and its sequence state,
  # speculation, durable state, adapters, embeddings, grammars, templates,
  # and the base and hybrid parity sets (every model family's forward shares
  # their blocks; the kernels themselves are in the C tests). Not here in
  # CI's pass (the release build runs them): the other parity matrices, the
  # cases marked slow, and the llama.cpp GGUF comparisons (their time is
  # llama.cpp's; GGUF reading is fuzzed under ASan above). The full pass
  # runs every suite but the GGUF comparisons.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  if [ -n "$FULL" ]; then
    ASAN_SELECT=(tests --ignore-glob='tests/parity/test_*_gguf.py')
  else
    ASAN_SELECT=(tests/server tests/cli tests/malformed tests/embeddings
      tests/grammar tests/templates tests/tokenizer/test_tokenizer_components.py
      tests/parity/test_parity.py tests/parity/test_hybrid_parity.py
      # The newer families: one long greedy case per weight kind and their
      # state and error paths (the release pass runs the whole matrices).
      "tests/parity/test_hybrid_moe_parity.py::test_qwen3_5_moe_greedy_tokens[qwen3_5_moe-q4g64-len100]"
      tests/parity/test_hybrid_moe_parity.py::test_qwen3_5_moe_rollback_and_snapshot
      tests/parity/test_hybrid_moe_parity.py::test_qwen3_5_moe_bad_config
      "tests/parity/test_lfm2_parity.py::test_lfm2_greedy_tokens[lfm2-bias-q4g32-len100]"
      tests/parity/test_lfm2_parity.py::test_lfm2_rollback_and_snapshot
      tests/parity/test_lfm2_parity.py::test_lfm2_bad_config
      "tests/parity/test_mla_parity.py::test_mla_greedy_tokens[dsv3-q4g64-len40]"
      "tests/parity/test_mla_parity.py::test_mla_greedy_tokens[dsv3-f32-hf-len40]"
      tests/parity/test_mla_parity.py::test_mla_prefill_chunks
      tests/parity/test_engine.py tests/parity/test_engine_prefix.py
      tests/parity/test_engine_prefix_hybrid.py tests/parity/test_seq_state.py
      tests/parity/test_spec.py tests/parity/test_spec_resume.py
      tests/parity/test_mtp_companion.py tests/parity/test_durable.py
      tests/parity/test_spans.py tests/parity/test_mla_state.py
      tests/diffusion/test_llada_diffusion.py tests/diffusion/test_llama_diffusion.py
      tests/vision/test_image_preprocess.py tests/vision/test_serve_images.py
      tests/vision/test_serve_image_apis.py tests/vision/test_serve_remote_images.py
      tests/parity/test_prompt_cache_disk.py
      tests/parity/test_prompt_cache_disk_states.py tests/parity/test_lora.py
      tests/parity/test_lora_engine.py tests/parity/test_lora_moe.py
      tests/parity/test_lora_hybrid.py
      # the Hub client's C parsing: references, GGUF names, headers, resumes
      tests/hub/test_pull.py::test_gguf_quant_selection
      tests/hub/test_pull.py::test_dropped_connection_resumes
      tests/hub/test_pull.py::test_corrupted_body_is_refused
      tests/hub/test_pull.py::test_token_and_hub_errors -m "not slow"
      # What they check is numerics against llama.cpp and pool sizes, which
      # the release pass covers; under ASan they took three minutes.
      --ignore=tests/server/test_kv_default.py
      -k "not (test_perplexity_matches_llama_cpp or test_kl_divergence_against_a_llama_cpp_base_file or test_windows_start_with_bos)")
  fi
  # SPINDLE_INVARIANTS: after every engine step the KV pool, its prefix
  # index, boundary states and disk tier, and each running sequence's slot
  # roles and block table are walked (src/generation/engine_sched.c); a
  # violation aborts the step that caused it.
  run_suite build-asan \
    "-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPINDLE_SANITIZE=ON -DSPINDLE_INVARIANTS=ON" \
    "" "${ASAN_SELECT[@]}"
fi
stage "done"
