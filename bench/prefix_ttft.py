#!/usr/bin/env python3
"""Time to first token of a 2048-token prompt whose first 1920 tokens a
previous request shared, against the same prompt cold (the prefix index
off), through tests/tools/engine_harness (max_seqs 1, 2 threads).

    .venv/bin/python bench/prefix_ttft.py MODEL_DIR MAX_BATCH_TOKENS

Three alternating pairs; the warm request's tokens must equal the cold
one's. Prompt ids: one seeded list, % 500 into the tiny vocabularies.
"""
import json, os, random, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = Path(os.environ.get("SPINDLE_BUILD_DIR", ROOT / "build")) / "engine_harness"
TMP = tempfile.mkdtemp(prefix="prefix_ttft-")
model = sys.argv[1]
rng = random.Random(0)
ids = [rng.randrange(1 << 30) % 500 for _ in range(2048)]
other = [rng.randrange(1 << 30) % 500 for _ in range(128)]
first = ids[:1920] + other
def scen(reqs, **kw):
    d = dict(model=model, mode="step", requests=reqs, logits_dir=TMP,
             max_seqs=1, max_batch_tokens=int(sys.argv[2]), threads=2, **kw)
    open(f"{TMP}/s.json", "w").write(json.dumps(d))
    out = subprocess.run([str(HARNESS), f"{TMP}/s.json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["requests"]
q = lambda p, **kw: dict(prompt=p, max_tokens=2, ignore_eos=True, **kw)
for pair in range(3):
    cold = scen([q(ids)], no_prefix_cache=True)[0]
    warm = scen([q(first), q(ids, after=0)])[1]
    assert warm["tokens"] == cold["tokens"], (warm["tokens"], cold["tokens"])
    print(f"pair {pair}: cold {cold['stats']['ttft_seconds']:.3f} s, warm "
          f"{warm['stats']['ttft_seconds']:.3f} s (cached {warm['stats']['cached_tokens']}), "
          f"ratio {cold['stats']['ttft_seconds'] / warm['stats']['ttft_seconds']:.1f}x", flush=True)
