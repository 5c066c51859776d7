"""Time to first token for a long shared prefix: cold, warm in memory (the
same process's prefix index), and from the on-disk prompt cache after a
restart (a second process over --prompt-cache-dir). Alternates the three
per round so that the machine's load hits them alike; prints each round and
the median ratios.

  python3 bench/prompt_cache_bench.py MODEL [--prefix 4096] [--rounds 3]

Each prompt is the shared prefix plus a 32-token suffix of its own, so every
warm run prefills that suffix (and, from disk, reads 128 block files; for a
hybrid or sliding-window model also the boundary state at the prefix's end,
which the first run's prefill left there)."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("SPINDLE_BIN", REPO / "build" / "spindle"))
HARNESS = Path(os.environ.get("SPINDLE_BUILD", REPO / "build")) / "engine_harness"


def ids(n, salt, vocab):
    return [(i * 7919 + salt * 104729 + 17) % (vocab - 10) + 5 for i in range(n)]


def checked(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{cmd[0]} {cmd[1]}: exit {r.returncode}: "
                         f"{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def run_ttft(model, prompt, threads, cache=None):
    cmd = [str(BIN), "run", "-m", str(model), "--json", "-t", str(threads),
           "--ctx", str(len(prompt) + 64),
           "--prompt-tokens", ",".join(map(str, prompt)), "-n", "1",
           "--ignore-eos"]
    if cache:
        cmd += ["--prompt-cache-dir", str(cache)]
    out = checked(cmd)["stats"]
    return out["ttft_seconds"], out["cached_tokens"]


def memory_ttft(model, first, second, threads, tmp):
    scenario = {"model": str(model), "threads": threads, "mode": "step",
                "max_context": len(second) + 64,
                "max_seqs": 1, "requests": [
                    {"prompt": first, "max_tokens": 1, "ignore_eos": True},
                    {"prompt": second, "max_tokens": 1, "ignore_eos": True,
                     "after": 0}]}
    path = Path(tmp) / "scenario.json"
    path.write_text(json.dumps(scenario))
    out = checked([str(HARNESS), str(path)])
    st = out["requests"][1]["stats"]
    return st["ttft_seconds"], st["cached_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    vocab = json.loads((Path(a.model) / "config.json").read_text())["vocab_size"] \
        if Path(a.model).is_dir() else 32000
    prefix = ids(a.prefix, 0, vocab)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            sa, sb = ids(32, 2 * r + 1, vocab), ids(32, 2 * r + 2, vocab)
            cold, c0 = run_ttft(a.model, prefix + sa, a.threads)
            mem, c1 = memory_ttft(a.model, prefix + sa, prefix + sb,
                                  a.threads, tmp)
            cache = Path(tmp) / f"cache{r}"
            run_ttft(a.model, prefix + sa, a.threads, cache)   # fills it
            disk, c2 = run_ttft(a.model, prefix + sb, a.threads, cache)
            shutil.rmtree(cache)
            rows.append((cold, mem, disk))
            print(f"round {r + 1}: cold {cold:.3f} s (cached {c0}) | memory "
                  f"{mem:.3f} s (cached {c1}) | disk {disk:.3f} s (cached "
                  f"{c2}) | cold/memory {cold / mem:.1f}x cold/disk "
                  f"{cold / disk:.1f}x", flush=True)
    med = [statistics.median(x) for x in zip(*rows)]
    print(f"median: cold {med[0]:.3f} s, memory {med[1]:.3f} s, disk "
          f"{med[2]:.3f} s; median ratios cold/memory "
          f"{statistics.median(c / m for c, m, _ in rows):.1f}x, cold/disk "
          f"{statistics.median(c / d for c, _, d in rows):.1f}x")


if __name__ == "__main__":
    main()
