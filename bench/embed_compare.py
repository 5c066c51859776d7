#!/usr/bin/env python3
"""Embedding throughput (sentences/s) on all-MiniLM-L6-v2: `spindle embed`
against llama.cpp's embedding mode (llama-cpp-python, embedding=True, mean
pooling) on the same weights in f32, measured alternately in one run.

The GGUF comes from tests/embeddings/minilm_gguf.py. Spindle's time is a whole process (load included) minus the same
process on one sentence; llama.cpp's is Llama.embed after the load. With
--st-python (a Python with sentence-transformers and torch, kept outside
the repo's venv: torch is large), sentence-transformers' encode (CPU,
torch.set_num_threads(threads), batch 32, after a warm-up) joins each
round in a process of its own. --gguf: Spindle runs the GGUF too.

  .venv/bin/python bench/embed_compare.py [--sentences 256] [--threads 2] [--runs 3]
      [--st-python /path/to/venv/bin/python] [--spindle BINARY]...
"""
import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "embeddings"))
from minilm_gguf import write_gguf  # noqa: E402
MODEL = ROOT / "tests" / ".work" / "all-MiniLM-L6-v2"
GGUF = ROOT / "bench" / ".work" / "all-MiniLM-L6-v2-f32.gguf"
WORDS = ("the of and to in is was for on that with as by at from his her an "
         "which or be are this had not but were have it they their one all "
         "would there when who will more no if out so said what up its about "
         "into than them can only other new some could time these two may "
         "then do first any my now such like our over man me even most made "
         "after also did many before must through back years where much your "
         "way well down should because each just those people how too little "
         "state good very make world still own see men work long get here "
         "between both life being under never day same another know while "
         "last might us great old year off come since against go came right "
         "used take three").split()

def sentences(n):
    rng = random.Random(1)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
            for _ in range(n)]


ST_SCRIPT = """
import json, sys, time, torch
from sentence_transformers import SentenceTransformer
model_dir, threads = sys.argv[1], int(sys.argv[2])
texts = json.load(sys.stdin)
torch.set_num_threads(threads)
m = SentenceTransformer(model_dir, device="cpu")
m.encode(texts[:8], batch_size=32)
t = time.perf_counter()
v = m.encode(texts, batch_size=32, normalize_embeddings=True)
s = time.perf_counter() - t
json.dump({"seconds": s, "embeddings": v.tolist()}, sys.stdout)
"""


def st_seconds(python, texts, threads):
    r = subprocess.run([python, "-c", ST_SCRIPT, str(MODEL), str(threads)],
                       input=json.dumps(texts), capture_output=True, text=True,
                       check=True)
    out = json.loads(r.stdout)
    return out["seconds"], np.array(out["embeddings"])


def cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def spindle_seconds(binary, texts, threads):
    def run(lines):
        t = time.perf_counter()
        r = subprocess.run([binary, "embed", "-m",
                            str(MODEL), "--threads", str(threads)],
                           input="\n".join(lines) + "\n", capture_output=True,
                           text=True, check=True)
        return time.perf_counter() - t, r.stdout
    one, _ = run(texts[:1])
    full, out = run(texts)
    return full - one, np.array([json.loads(l)["embedding"] for l in out.splitlines()])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--st-python", default=None)
    ap.add_argument("--spindle", action="append", default=None,
                    help="spindle binary (repeatable: each one joins every "
                         "round; default build/spindle)")
    a = ap.parse_args()
    GGUF.parent.mkdir(parents=True, exist_ok=True)
    if not GGUF.exists():
        write_gguf(MODEL, GGUF)
    from llama_cpp import Llama
    llm = Llama(str(GGUF), embedding=True, n_ctx=8192, n_batch=2048,
                n_ubatch=2048, n_seq_max=64, n_threads=a.threads,
                n_threads_batch=a.threads, verbose=False)
    texts = sentences(a.sentences)
    n_tokens = sum(len(llm.tokenize(t.encode())) for t in texts)
    binaries = a.spindle or [str(ROOT / "build" / "spindle")]
    ours = {b: [] for b in binaries}
    theirs, st_times = [], []
    for _ in range(a.runs):
        for b in binaries:
            s, ours_vec = spindle_seconds(b, texts, a.threads)
            ours[b].append(s)
        t = time.perf_counter()
        ref = np.array(llm.embed(texts, normalize=True))
        theirs.append(time.perf_counter() - t)
        if a.st_python:
            s, st_vec = st_seconds(a.st_python, texts, a.threads)
            st_times.append(s)
    print(f"{a.sentences} sentences, {n_tokens} tokens (llama.cpp's count), "
          f"{a.threads} threads; min cosine spindle vs llama.cpp "
          f"{cosines(ours_vec, ref).min():.6f}")
    if a.st_python:
        print(f"min cosine spindle vs sentence-transformers "
              f"{cosines(ours_vec, st_vec).min():.6f}")
    sl = a.sentences / min(theirs)
    print(f"llama.cpp {sl:8.1f} sentences/s (best of {a.runs}: {min(theirs):.2f} s)")
    ss = a.sentences / min(st_times) if a.st_python else None
    if ss:
        print(f"sentence-transformers {ss:8.1f} sentences/s (best of {a.runs}: "
              f"{min(st_times):.2f} s)")
    for b, times in ours.items():
        so = a.sentences / min(times)
        vs_st = f", {so / ss:.2f}x sentence-transformers" if ss else ""
        print(f"spindle {b}: {so:8.1f} sentences/s (best of {a.runs}: "
              f"{min(times):.2f} s), {so / sl:.2f}x llama.cpp{vs_st}")


if __name__ == "__main__":
    sys.exit(main())
