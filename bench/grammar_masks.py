"""Mask time per token on the Qwen3 vocabulary (151k) and compile time per
grammar: Spindle's matcher (tests/tools/grammar_harness, timed in-process
around spindle_grammar_matcher_mask) against llguidance's
LLMatcher.compute_bitmask and, when importable, xgrammar's
GrammarMatcher.fill_next_token_bitmask (both timed in Python around the
call), on the same GBNF (a schema goes through Spindle's converter and all
read its GBNF) and the same random token paths, side by side in one run.

Times are thread CPU time (the shared machine preempts often: wall-clock
p99 there is mostly other processes), wall-clock medians printed too.
Compile: Spindle's schema/GBNF -> matcher; llguidance and xgrammar from
the schema with their own converters (their whitespace differs a little)
or from the GBNF.

    PYTHONPATH=<xgrammar> .venv/bin/python bench/grammar_masks.py [WALKS] [STEPS]

xgrammar's package imports torch at load for its tensor helpers only; when
torch is absent the bench stubs it and hands xgrammar numpy bitmasks
(DLPack), which is all fill_next_token_bitmask needs.
"""
import random
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "grammar"))
from grammar_common import (HARNESS, QWEN3, SCHEMAS, Harness, llg_gbnf, pick_walk_token,  # noqa: E402
                            llg_tokenizer, solid_tokens)
import llguidance as llg  # noqa: E402

CASES = ["gbnf/json.gbnf", "gbnf/arithmetic.gbnf", "schemas/github_issue.json",
         "schemas/invoice.json", "schemas/recursive_tree.json", "schemas/stripe_charge.json",
         "schemas/person.json", "schemas/petstore_pet.json"]


def import_xgrammar():
    try:
        import tvm_ffi  # noqa: F401  (first: it probes torch on its own)
        try:
            import torch  # noqa: F401
        except ImportError:
            class Any:
                def __init__(self, *a, **k): pass
                def __call__(self, *a, **k): return Any()
                def __getattr__(self, n): return Any()
                def __getitem__(self, k): return Any()
                def __or__(self, o): return Any()
                __ror__ = __or__
            stub = types.ModuleType("torch")
            stub.__getattr__ = lambda n: Any
            sys.modules["torch"] = stub
        import xgrammar
        return xgrammar
    except ImportError:
        return None


def gbnf_of(path):
    if path.suffix == ".gbnf":
        return path.read_text()
    return subprocess.run([str(HARNESS), str(QWEN3), "json_schema", str(path), "--print"],
                          capture_output=True, text=True, check=True).stdout


def xgrammar_gbnf(text):
    """xgrammar's EBNF reader wants "" for an empty alternative."""
    return re.sub(r"::=\s*\|", '::= "" |', text)


def cpu_us(fn):
    t0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    r = fn()
    return r, (time.thread_time_ns() - t0) / 1000, (time.perf_counter_ns() - w0) / 1000


def compile_times(path, text, h, tok, xgc, reps=3):
    ours = []
    for _ in range(reps):
        words = h.ask("compile").split()
        ours.append(int(words[2]) / 1000)
    is_schema = path.suffix == ".json"
    theirs = []
    for _ in range(reps):
        def build():
            g = (llg.grammar_from("json_schema", path.read_text()) if is_schema
                 else llg_gbnf(text))
            return llg.LLMatcher(tok, g)
        theirs.append(cpu_us(build)[1])
    xg = []
    for _ in range(reps if xgc else 0):
        xgc.clear_cache()
        xg.append(cpu_us(lambda: xgc.compile_json_schema(path.read_text()) if is_schema
                         else xgc.compile_grammar(xgrammar_gbnf(text)))[1])
    return min(ours), min(theirs), (min(xg) if xg else float("nan"))


def stats(v):
    v = np.array(v) if len(v) else np.array([float("nan")])
    return np.median(v), np.percentile(v, 99)


def main():
    walks = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    tok, hf = llg_tokenizer(QWEN3)
    xgr = import_xgrammar()
    xgc = None
    if xgr:
        info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf))
        xgc = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    n_words = (len(hf) + 31) // 32
    solid = solid_tokens(hf)
    head = ("| grammar | masks | Spindle med | Spindle p99 | llg med | llg p99 | xgr med | xgr p99 "
            "| Spindle wall med | compile Spindle | compile llg | compile xgr |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for case in CASES:
        path = SCHEMAS.parent / case
        text = gbnf_of(path)
        with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
            f.write(text)
        h = Harness(QWEN3, "gbnf", f.name)
        hc = Harness(QWEN3, "json_schema" if path.suffix == ".json" else "gbnf", path)
        c_ours, c_llg, c_xg = compile_times(path, text, hc, tok, xgc)
        hc.close()
        xg_cg = xgc.compile_grammar(xgrammar_gbnf(text)) if xgc else None
        ours, wall, theirs, xg = [], [], [], []
        xg_rejects = 0
        for seed in range(walks):
            rng = random.Random(seed)
            m = llg.LLMatcher(tok, llg_gbnf(text))
            xm = xgr.GrammarMatcher(xg_cg) if xg_cg else None
            bm = np.zeros((1, n_words), dtype=np.int32)
            h.reset()
            for _ in range(steps):
                _, allowed = h.mask()
                ours.append(h.last_cpu_ns / 1000)
                wall.append(h.last_ns / 1000)
                theirs.append(cpu_us(m.compute_bitmask)[1])
                if xm:
                    xg.append(cpu_us(lambda: xm.fill_next_token_bitmask(bm))[1])
                t = pick_walk_token(allowed, solid, rng)
                if t is None:
                    break
                h.accept(t)
                m.consume_token(t)
                if xm and not xm.accept_token(t):
                    xg_rejects += 1
                    xm = None
        h.close()
        (om, op), (lm, lp), (xm_, xp) = stats(ours), stats(theirs), stats(xg)
        note = f" (xgrammar rejected {xg_rejects} walks' token)" if xg_rejects else ""
        print(f"| {case}{note} | {len(ours)} | {om:.1f} | {op:.0f} | {lm:.1f} | {lp:.0f} | "
              f"{xm_:.1f} | {xp:.0f} | {np.median(wall):.1f} | {c_ours / 1000:.2f} ms | "
              f"{c_llg / 1000:.2f} ms | {c_xg / 1000:.2f} ms |", flush=True)


if __name__ == "__main__":
    main()
