"""Before/after mask times of grammar_harness builds on the same recorded
command streams (a change to the matcher is measured with this, not with
grammar_masks.py, whose walks would follow whatever the build allows).

    # record: WALKS random walks of STEPS tokens per case, as grammar_masks.py
    # walks (a new matcher per walk: "reset"), from one build's masks
    .venv/bin/python bench/grammar_replay.py record DIR HARNESS [WALKS] [STEPS]
    # replay DIR through each harness in turn, ROUNDS times alternating
    .venv/bin/python bench/grammar_replay.py replay DIR ROUNDS [--skip K] HARNESS...

Replay prints, per case and harness, the median / p90 / p99 / total of the
masks' thread CPU time (µs) for each round, and checks that every harness
answered every line the same (masks byte-identical); it exits 1 if not.
--skip K leaves the first K walks out of the numbers (they still run): the
masks of later requests on a grammar whose matchers share a cache.
"""
import hashlib
import random
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "grammar"))
from grammar_common import QWEN3, SCHEMAS, Harness, pick_walk_token, solid_tokens  # noqa: E402

CASES = ["schemas/github_issue.json", "schemas/invoice.json", "schemas/stripe_charge.json",
         "schemas/petstore_pet.json", "gbnf/json.gbnf", "gbnf/arithmetic.gbnf",
         "schemas/recursive_tree.json", "schemas/person.json"]


def kind_of(path):
    return "json_schema" if path.suffix == ".json" else "gbnf"


def record(out_dir, harness, walks, steps):
    from transformers import PreTrainedTokenizerFast
    import grammar_common
    grammar_common.HARNESS = Path(harness)
    hf = PreTrainedTokenizerFast(tokenizer_file=str(QWEN3 / "tokenizer.json"))
    solid = solid_tokens(hf)
    out_dir.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        path = SCHEMAS.parent / case
        h = Harness(QWEN3, kind_of(path), path)
        lines = []
        for seed in range(walks):
            rng = random.Random(seed)
            h.reset()
            lines.append("reset")
            for _ in range(steps):
                _, allowed = h.mask()
                lines.append("mask")
                t = pick_walk_token(allowed, solid, rng)
                if t is None:
                    break
                assert h.accept(t)
                lines.append(f"accept {t}")
        h.close()
        (out_dir / (path.name + ".cmds")).write_text("\n".join(lines) + "\n")
        print(f"{case}: {lines.count('mask')} masks", flush=True)


def replay_one(harness, path, cmds, skip):
    p = subprocess.run([harness, str(QWEN3), kind_of(path), str(path)], input=cmds,
                       capture_output=True, text=True, check=True)
    cpu, digest = [], hashlib.md5()
    walk = -1
    for line, cmd in zip(p.stdout.splitlines(), cmds.splitlines()):
        words = line.split()
        walk += cmd == "reset"
        if words[0] == "mask":
            if walk >= skip:
                cpu.append(int(words[4]) / 1000)
            digest.update((" ".join(words[:3]) + "\n").encode())
        else:
            digest.update((line + "\n").encode())
    return np.array(cpu), digest.hexdigest()


def replay(in_dir, rounds, harnesses, skip=0):
    same = True
    print("| grammar | masks | build | median µs | p90 µs | p99 µs | total ms |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        path = SCHEMAS.parent / case
        cmds = (in_dir / (path.name + ".cmds")).read_text()
        res = {h: [] for h in harnesses}
        digests = set()
        for _ in range(rounds):
            for h in harnesses:
                cpu, d = replay_one(h, path, cmds, skip)
                res[h].append(cpu)
                digests.add(d)
        same = same and len(digests) == 1
        for i, h in enumerate(harnesses):
            def col(f):
                return " / ".join(f(c) for c in res[h])
            print(f"| {case} | {len(res[h][0])} | {i} {Path(h).parent.name} | "
                  f"{col(lambda c: f'{np.median(c):.1f}')} | "
                  f"{col(lambda c: f'{np.percentile(c, 90):.0f}')} | "
                  f"{col(lambda c: f'{np.percentile(c, 99):.0f}')} | "
                  f"{col(lambda c: f'{c.sum() / 1000:.1f}')} |", flush=True)
        if len(digests) != 1:
            print(f"MASKS DIFFER on {case}", flush=True)
    return 0 if same else 1


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "record":
        walks = int(sys.argv[4]) if len(sys.argv) > 4 else 3
        steps = int(sys.argv[5]) if len(sys.argv) > 5 else 40
        record(Path(sys.argv[2]), sys.argv[3], walks, steps)
        return 0
    if len(sys.argv) >= 5 and sys.argv[1] == "replay":
        rest, skip = sys.argv[4:], 0
        if rest[0] == "--skip":
            rest, skip = rest[2:], int(rest[1])
        return replay(Path(sys.argv[2]), int(sys.argv[3]), rest, skip)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
