"""Mask time per token on the Qwen3 vocabulary (151k), Spindle's matcher
(tests/tools/grammar_harness, timed inside the process around
spindle_grammar_matcher_mask) against llguidance's LLMatcher.compute_bitmask
(timed in Python around the call) on the same GBNF and the same random
token paths, side by side in one run.

    PYTHONPATH=<llguidance> .venv/bin/python bench/grammar_masks.py [WALKS] [STEPS]
"""
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "grammar"))
from grammar_common import (QWEN3, SCHEMAS, Harness, llg_allowed, llg_tokenizer,  # noqa: E402
                            solid_tokens)
import llguidance as llg  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

from grammar_common import HARNESS  # noqa: E402

CASES = ["gbnf/json.gbnf", "gbnf/arithmetic.gbnf", "schemas/github_issue.json",
         "schemas/invoice.json", "schemas/recursive_tree.json", "schemas/stripe_charge.json"]


def gbnf_of(path):
    if path.suffix == ".gbnf":
        return path.read_text()
    return subprocess.run([str(HARNESS), str(QWEN3), "json_schema", str(path), "--print"],
                          capture_output=True, text=True, check=True).stdout


def main():
    walks = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    tok, hf = llg_tokenizer(QWEN3)
    solid = solid_tokens(hf)
    print(f"{'grammar':28} {'n':>5} {'ours med':>9} {'ours p99':>9} {'llg med':>9} {'llg p99':>9}  (us)")
    for case in CASES:
        path = SCHEMAS.parent / case
        text = gbnf_of(path)
        with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
            f.write(text)
        h = Harness(QWEN3, "gbnf", f.name)
        ours, theirs = [], []
        for seed in range(walks):
            rng = random.Random(seed)
            m = llg.LLMatcher(tok, llg.grammar_from("gbnf", text))
            h.reset()
            for _ in range(steps):
                _, allowed = h.mask()
                ours.append(h.last_ns / 1000)
                t0 = time.perf_counter()
                m.compute_bitmask()
                theirs.append((time.perf_counter() - t0) * 1e6)
                allowed = allowed[:len(hf)]
                cand = np.nonzero(allowed & solid)[0]
                if not len(cand):
                    cand = np.nonzero(allowed)[0]
                if not len(cand):
                    break
                t = int(cand[rng.randrange(len(cand))])
                h.accept(t)
                m.consume_token(t)
        h.close()
        o, t = np.array(ours), np.array(theirs)
        print(f"{case:28} {len(o):5d} {np.median(o):9.1f} {np.percentile(o, 99):9.1f} "
              f"{np.median(t):9.1f} {np.percentile(t, 99):9.1f}")


if __name__ == "__main__":
    main()
