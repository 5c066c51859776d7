"""Batched decode: `spindle batched-bench` vs llama.cpp's `llama-batched-bench`,
side by side, on the same random Qwen3-0.6B weights (MLX 4-bit g64 vs Q4_0).

Run through bench/batched_compare (which picks the project's venv). Steps:
  1. build llama-bench + llama-batched-bench from the llama-cpp-python sdist
     (bench/build_llama.sh) and spindle into build-compare (compare.py);
  2. write the models once (bench/make_model.py, bench/make_gguf.py): the
     bf16 dir, its MLX 4-bit g64 quantization, and the Q4_0 GGUF of the same
     bf16 weights;
  3. run both engines -r times, alternately (spindle, llama.cpp, spindle,
     ...) so that both see the same background load, each over every B of
     -npl in one process; report the mean per B of S_TG (aggregate decode
     tok/s) and S_PP, their ratios, and each engine's scaling over its B=1.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as cmp  # noqa: E402


def spindle_rows(exe, model, a):
    env = dict(os.environ)
    if a.simd:
        env["SPINDLE_SIMD"] = a.simd
    cmd = [exe, "batched-bench", "-m", model, "-npp", str(a.npp), "-ntg",
           str(a.ntg), "-npl", a.npl, "-t", str(a.threads), "-b", str(a.batch),
           "--kv-type", a.kv_type, "--json"]
    out = cmp.run(cmd, timeout=a.timeout, env=env)
    if a.simd:
        cmd = [f"SPINDLE_SIMD={a.simd}"] + cmd
    return cmd, [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def llama_rows(exe, gguf, a):
    n_ctx = max(int(b) for b in a.npl.split(",")) * (a.npp + a.ntg)
    cmd = [exe, "-m", gguf, "-c", str(n_ctx), "-b", str(a.batch), "-ub", "512",
           "-npp", str(a.npp), "-ntg", str(a.ntg), "-npl", a.npl,
           "-t", str(a.threads), "--output-format", "jsonl"]
    env = dict(os.environ)
    if a.llama_omp == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    out = cmp.run(cmd, timeout=a.timeout, stderr=subprocess.DEVNULL, env=env)
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    # llama-batched-bench's keys -> the table's (lower case) names.
    return cmd, [{"pp": r["pp"], "tg": r["tg"], "b": r["pl"], "n_kv": r["n_kv"],
                  "t_pp": r["t_pp"], "s_pp": r["speed_pp"], "t_tg": r["t_tg"],
                  "s_tg": r["speed_tg"], "t": r["t"], "s": r["speed"]}
                 for r in rows]


def by_b(runs, key):
    """{B: (mean, stdev)} of `key` over the repetitions."""
    vals = {}
    for rows in runs:
        for r in rows:
            vals.setdefault(r["b"], []).append(r[key])
    return {b: (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
            for b, v in sorted(vals.items())}


def table(res, baseline=False):
    ours = res["baseline" if baseline else "spindle"]  # same columns
    s_tg, l_tg = by_b(ours, "s_tg"), by_b(res["llama"], "s_tg")
    s_pp, l_pp = by_b(ours, "s_pp"), by_b(res["llama"], "s_pp")
    lines = ["| B | spindle S_TG t/s | llama.cpp S_TG t/s | ratio S_TG | "
             "spindle S_TG / its B=1 | llama.cpp S_TG / its B=1 | "
             "spindle S_PP t/s | llama.cpp S_PP t/s | ratio S_PP |",
             "|---|---|---|---|---|---|---|---|---|"]
    s1, l1 = s_tg[min(s_tg)][0], l_tg[min(l_tg)][0]
    for b in s_tg:
        if b not in l_tg:
            continue
        lines.append(
            f"| {b} | {s_tg[b][0]:.2f} ± {s_tg[b][1]:.2f} | "
            f"{l_tg[b][0]:.2f} ± {l_tg[b][1]:.2f} | {s_tg[b][0] / l_tg[b][0]:.2f} | "
            f"{s_tg[b][0] / s1:.2f} | {l_tg[b][0] / l1:.2f} | "
            f"{s_pp[b][0]:.1f} ± {s_pp[b][1]:.1f} | {l_pp[b][0]:.1f} ± {l_pp[b][1]:.1f} | "
            f"{s_pp[b][0] / l_pp[b][0]:.2f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--npp", type=int, default=128)
    ap.add_argument("--ntg", type=int, default=128)
    ap.add_argument("--npl", default="1,2,4,8,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2048,
                    help="tokens per forward pass (-b of both tools)")
    ap.add_argument("--kv-type", default="f16",
                    help="spindle's KV cache type (llama.cpp's default is f16)")
    ap.add_argument("-r", type=int, default=3, help="repetitions of each engine")
    ap.add_argument("--llama-omp", choices=("active", "passive"), default="active")
    ap.add_argument("--spindle", help="use this spindle binary (skip the build)")
    ap.add_argument("--baseline", help="a second spindle binary (e.g. the "
                    "commit before a change), run alternately with the others")
    ap.add_argument("--gguf", help="run both engines on this GGUF instead of "
                    "the generated MLX 4-bit / Q4_0 pair")
    ap.add_argument("--simd", help="SPINDLE_SIMD for the spindle runs (avx2, ...)")
    ap.add_argument("--llama-bin", help="directory holding an already built "
                    "llama-batched-bench (skip bench/build_llama.sh)")
    ap.add_argument("--build-dir", default="build-compare")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--json-out", help="also write the raw rows here")
    a = ap.parse_args()
    py = sys.executable
    os.makedirs(cmp.WORK, exist_ok=True)
    llama_dir = a.llama_bin or os.path.dirname(cmp.build_llama(py))
    llama = os.path.join(llama_dir, "llama-batched-bench")
    spindle_src = a.spindle or cmp.build_spindle(a.build_dir)
    spindle = cmp.snapshot(spindle_src)
    baseline = None
    if a.baseline:
        baseline = os.path.join(cmp.WORK, "spindle-baseline")
        shutil.copy2(a.baseline, baseline)
    if a.gguf:
        sdir = gguf = a.gguf
    else:
        cmp.make_models(py, cmp.PAIRINGS[:1], "dense")   # MLX 4-bit vs Q4_0
        sdir = os.path.join(cmp.MODELS, "mlx4-g64")
        gguf = os.path.join(cmp.MODELS, "q4_0.gguf")

    res = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
           "cpus": os.cpu_count(), "args": vars(a), "load_start": cmp.loadavg(),
           "spindle": [], "llama": [], "baseline": [], "per_run": []}
    engines = [("spindle", spindle_rows, spindle, sdir),
               ("llama", llama_rows, llama, gguf)]
    if baseline:
        engines.insert(0, ("baseline", spindle_rows, baseline, sdir))
    for rep in range(a.r):
        for name, fn, exe, model in engines:
            before = cmp.loadavg()
            cmd, rows = fn(exe, model, a)
            res[name].append(rows)
            res["per_run"].append(f"{name} #{rep + 1} load {before} -> {cmp.loadavg()}")
            res.setdefault("commands", {})[name] = " ".join(cmd)
            cmp.log(f"  -> {name}: " + ", ".join(
                f"B={r['b']} S_TG={r['s_tg']:.1f}" for r in rows))
    res["load_end"] = cmp.loadavg()
    print(f"# Batched decode, spindle vs llama.cpp — {res['date']}, "
          f"{res['cpus']} CPUs, {a.threads} threads, PP {a.npp}, TG {a.ntg}, "
          f"-r {a.r} (alternating)")
    if a.gguf:
        print(f"Model: {gguf} on both; spindle KV {a.kv_type}, llama.cpp KV f16")
    else:
        print(f"Models: MLX 4-bit g64 ({sdir}) vs Q4_0 ({gguf}), the same random "
              f"Qwen3-0.6B-shaped weights; spindle KV {a.kv_type}, llama.cpp KV f16")
    for name in res["commands"]:
        print(f"{name}: `{res['commands'][name]}`")
    print(f"Load average (1/5/15 min): start {res['load_start']}, end {res['load_end']}")
    print()
    print(table(res))
    print()
    if baseline:
        print(f"Baseline ({a.baseline}) against the same llama.cpp runs:")
        print()
        print(table(res, baseline=True))
        print()
    print("Per run: " + "; ".join(res["per_run"]))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
