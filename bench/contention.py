#!/usr/bin/env python3
"""Decode under CPU contention: Spindle vs llama.cpp, 2 threads, with and
without a competing busy loop pinned to core 0 (issue 13, item 4).

    bench/contention.py --spindle build/spindle [--spindle /tmp/before]
        [--model tests/.work/gguf/gemma-3-270m-q4_k_m.gguf] [--rounds 3]

Every round runs each engine once unloaded and once loaded, alternating
(so all share the machine's noise), and prints tg t/s per run and the
ratio loaded / unloaded per engine (median over rounds). The busy loop is
`taskset -c 0 timeout 300 sh -c 'while :; do :; done'`: bounded, and
killed as soon as the run it loads ends.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMA = Path("/work/main/bench/.work/compare/llama-build-0.3.36/bin/llama-bench")


def busy_loop():
    return subprocess.Popen(
        ["taskset", "-c", "0", "timeout", "300", "sh", "-c",
         "while :; do :; done"], start_new_session=True)


def tg_spindle(binary, model, n, reps):
    out = subprocess.run([binary, "bench", "-m", model, "-p", "0", "-n",
                          str(n), "-t", "2", "-r", str(reps), "--json"],
                         capture_output=True, text=True, timeout=900,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["tg_tps"]


def tg_llama(model, n, reps):
    env = dict(os.environ, LD_LIBRARY_PATH=str(LLAMA.parent))
    out = subprocess.run([str(LLAMA), "-m", model, "-p", "0", "-n", str(n),
                          "-t", "2", "-r", str(reps), "-o", "json"],
                         capture_output=True, text=True, timeout=900,
                         check=True, env=env).stdout
    return json.loads(out)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spindle", action="append", required=True)
    ap.add_argument("--model",
                    default=str(ROOT / "tests/.work/gguf/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=2)
    a = ap.parse_args()
    engines = [(f"spindle:{b}", lambda b=b: tg_spindle(b, a.model, a.n, a.r))
               for b in a.spindle]
    engines.append(("llama.cpp", lambda: tg_llama(a.model, a.n, a.r)))
    res = {name: {"none": [], "busy": []} for name, _ in engines}
    print(f"load before: {os.getloadavg()}", flush=True)
    for rnd in range(a.rounds):
        for load in ("none", "busy"):
            for name, fn in engines:
                loop = busy_loop() if load == "busy" else None
                try:
                    tps = fn()
                finally:
                    if loop:
                        os.killpg(loop.pid, signal.SIGTERM)
                        loop.wait()
                res[name][load].append(tps)
                print(f"round {rnd} {load:4s} {name}: {tps:.2f} tok/s",
                      flush=True)
    print(f"load after: {os.getloadavg()}")
    print("| engine | unloaded tg (median) | core 0 busy tg (median) | "
          "busy / unloaded (median of rounds) |")
    print("|---|---|---|---|")
    for name, r in res.items():
        ratios = [b / u for u, b in zip(r["none"], r["busy"])]
        print(f"| {name} | {statistics.median(r['none']):.2f} | "
              f"{statistics.median(r['busy']):.2f} | "
              f"{statistics.median(ratios):.3f} |")


if __name__ == "__main__":
    main()
