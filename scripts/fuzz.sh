#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan + UBSan +
# LeakSanitizer) and runs each one: first over its committed corpus
# (tests/fuzz/corpus/<harness>: seeds and the regress-* reproducers of every
# bug found), then fuzzing. Fails if any input crashes, leaks, breaks an
# invariant, times out or runs out of memory.
#   scripts/fuzz.sh --ci [HARNESS...]        what the test command runs
#   scripts/fuzz.sh [SECONDS] [HARNESS...]   a campaign (default 30 s each)
#   scripts/fuzz.sh 600                      a longer campaign
# --ci fuzzes a fixed number of inputs per harness (tests/fuzz/ci_runs.txt,
# about 10-15 s each here) from seed 1 in a fresh scratch corpus, so CI
# explores about what the developer's run of the same command explored
# (coverage feedback still varies a little from run to run). Finding new
# bugs is the campaigns' job (tests/fuzz/README.md): their corpus is kept
# in build-fuzz/run/corpus/<harness> across runs.
# JOBS harnesses run at a time (default 2). A failing input is left in
# build-fuzz/run/artifacts/<harness>/ (add it to the corpus as regress-NAME
# once fixed). A summary line per harness gives executions and coverage.
set -euo pipefail
cd "$(dirname "$0")/.."
ci=no
if [ "${1:-}" = "--ci" ]; then
  ci=yes
  shift
  secs=0
else
  secs=${1:-30}
  shift || true
fi
JOBS=${JOBS:-2}
build=${FUZZ_BUILD:-build-fuzz}
run=$build/run

CC=${FUZZ_CC:-clang-16} cmake -S tests/fuzz -B "$build" >/dev/null
cmake --build "$build" -j "$JOBS" 2>&1 | grep -E "error|warning" || true
cmake --build "$build" -j "$JOBS" >/dev/null

if [ $# -gt 0 ]; then
  harnesses=("$@")
else
  harnesses=()
  for src in tests/fuzz/fuzz_*.c; do harnesses+=("$(basename "$src" .c)"); done
fi

mkdir -p "$run/tmp" "$run/logs"
export TMPDIR; TMPDIR=$(cd "$run/tmp" && pwd)   # the harnesses' scratch files

ci_runs() {   # $1 harness: its --ci input count
  local n
  n=$(awk -v h="$1" '$1 == h { print $2 }' tests/fuzz/ci_runs.txt)
  echo "${n:-10000}"
}

fuzz_one() {   # $1 harness; output to $run/logs/$1.log
  local h=$1 seeds=tests/fuzz/corpus/$1 log=$run/logs/$1.log
  local corpus=$run/corpus/$h artifacts=$run/artifacts/$h/
  local opts=(-timeout=25 -rss_limit_mb=4096 -artifact_prefix="$artifacts" -print_final_stats=1)
  [ -f "tests/fuzz/$h.dict" ] && opts+=(-dict="tests/fuzz/$h.dict")
  if [ $ci = yes ]; then
    corpus=$run/ci-corpus/$h
    rm -rf "$corpus"
    opts+=(-seed=1 -runs="$(ci_runs "$h")")
    echo "== $h: committed corpus, then $(ci_runs "$h") inputs from seed 1" >"$log"
  else
    opts+=(-max_total_time="$secs")
    echo "== $h: committed corpus, then fuzzing for $secs s" >"$log"
  fi
  mkdir -p "$corpus" "$artifacts"
  # libFuzzer first runs every input of both directories (the regression
  # run: a crashing reproducer fails right there), then mutates.
  "$build/$h" "${opts[@]}" "$corpus" "$seeds" >>"$log" 2>&1
}

summary() {   # $1 harness, $2 status
  local log=$run/logs/$1.log
  local execs cov ft
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  printf 'fuzz: %-22s %-6s execs %-9s cov %-6s ft %s\n' "$1" "$2" "${execs:-?}" "${cov:-?}" "${ft:-?}"
}

failed=()
pids=()
names=()
wait_one() {   # waits for the oldest running harness
  local pid=${pids[0]} h=${names[0]}
  pids=("${pids[@]:1}")
  names=("${names[@]:1}")
  if wait "$pid"; then
    summary "$h" ok
  else
    summary "$h" FAILED
    failed+=("$h")
  fi
}
for h in "${harnesses[@]}"; do
  [ -x "$build/$h" ] || { echo "fuzz: no harness $h" >&2; exit 2; }
  fuzz_one "$h" &
  pids+=($!)
  names+=("$h")
  if [ ${#pids[@]} -ge "$JOBS" ]; then wait_one; fi
done
while [ ${#pids[@]} -gt 0 ]; do wait_one; done

if [ ${#failed[@]} -gt 0 ]; then
  for h in "${failed[@]}"; do
    echo "== $h failed; end of $run/logs/$h.log:"
    grep -v '^#[0-9]' "$run/logs/$h.log" | tail -40
  done
  exit 1
fi
