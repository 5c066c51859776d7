"""Durable generations: `spindle run --checkpoint/--resume` and the model
fingerprint, on the tiny mlx-lm parity models (dense make_models, hybrid
make_hybrid_models: gated DeltaNet layers, whose recurrent state cannot be
rewound, so a resume has to restore it; LFM2's conv windows likewise).

Checks:
  * kill -9 mid-generation, then --resume: what the killed run printed up
    to its last checkpoint followed by what the resume prints equals an
    uninterrupted run token for token (greedy, and seeded sampling at
    temperature 0.8), and the greedy tokens agree with mlx-lm's reference;
  * kills while a checkpoint is being written (SPINDLE_TEST_CHECKPOINT_PAUSE_MS
    holds the writer between fsync and rename): the previous checkpoint
    survives and resumes; kills at random times in a bounded loop, resumed
    and killed again in a chain;
  * a resume whose prompt the disk prompt cache holds (--prompt-cache-dir,
    kept across runs) restores its checkpoint all the same (dense, hybrid;
    greedy, seeded);
  * a resume with --spec ngram drafts (its --json counts), and continues
    the uninterrupted run;
  * corrupted checkpoints (byte flips, truncations, empty), another model's
    checkpoint and a changed model: refused with one line, exit 1, no crash;
  * fingerprints: stable, the content hash cached beside the weights,
    distinct for other quantizations, changed by an edited weight file.
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_hybrid_models as hm  # noqa: E402
import make_lfm2_models as lm  # noqa: E402
import make_models as mm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

DENSE_OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
HYBRID_OUT = Path(os.environ.get("SPINDLE_HYBRID_DIR", hm.DEFAULT_OUT))
LFM2_OUT = Path(os.environ.get("SPINDLE_LFM2_PARITY_DIR", lm.DEFAULT_OUT))
N_TOKENS = 32          # the references' max_tokens
PROMPT = "len7"
PAUSE_ENV = "SPINDLE_TEST_CHECKPOINT_PAUSE_MS"


@pytest.fixture(scope="session")
def dense(spindle_bin):  # noqa: F811
    return pc.ensure_models(DENSE_OUT, mm)


@pytest.fixture(scope="session")
def hybrid(spindle_bin):  # noqa: F811
    return pc.ensure_models(HYBRID_OUT, hm)


def model_dir(dense, hybrid, kind):
    """kind "conv": LFM2, whose short-convolution windows a resume has to
    restore."""
    if kind == "conv":
        return pc.ensure_models(LFM2_OUT, lm) / "lfm2-f32"
    return dense / "qwen3-f32" if kind == "dense" else hybrid / "qwen3_5-f32"


def base_cmd(model, threads=True):
    cmd = [str(pc.SPINDLE_BIN), "run", "-m", str(model)]
    if threads and os.environ.get("SPINDLE_THREADS"):
        cmd += ["-t", os.environ["SPINDLE_THREADS"]]
    return cmd


def gen_cmd(model, sampling):
    ref = pc.load_ref(model.parent, model.name)
    prompt = ref["prompts"][PROMPT]["prompt_tokens"]
    cmd = base_cmd(model) + ["--prompt-tokens", ",".join(map(str, prompt)),
                             "-n", str(N_TOKENS), "--ignore-eos"]
    if sampling == "seeded":
        cmd += ["--temp", "0.8", "--seed", "1234"]
    return cmd


def ids(text):
    return [int(t) for t in text.split()]


def run_ok(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, f"{' '.join(cmd)}\nexit {r.returncode}\n{r.stderr}"
    return r


def resume(model, ckpt, extra=()):
    return ids(run_ok(base_cmd(model) + ["--resume", str(ckpt), *extra]).stdout)


def run_until_killed(cmd, n_seen, pause_ms, may_finish=False, settle=0.0):
    """Start cmd (which prints token ids as it goes), SIGKILL it once it has
    printed n_seen ids (and `settle` seconds more); the ids it printed.
    may_finish: a run that ends first is no failure."""
    env = dict(os.environ, **{PAUSE_ENV: str(pause_ms)})
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env)
    out, deadline = b"", time.monotonic() + 60
    try:
        while out.count(b" ") < n_seen and time.monotonic() < deadline:
            ch = p.stdout.read(1)
            if not ch:
                break
            out += ch
        time.sleep(settle)
        p.send_signal(signal.SIGKILL)
    finally:
        p.kill()
        p.wait(timeout=30)
        p.stdout.close()
        p.stderr.close()
    assert may_finish or p.returncode == -signal.SIGKILL, \
        "the run ended before the kill"
    return ids(out[:out.rfind(b" ") + 1].decode())   # whole ids only


def check_joined(full, printed, resumed):
    """printed (the killed run's ids, possibly beyond its checkpoint) and
    resumed (what follows the checkpoint) make up the uninterrupted run."""
    k = len(full) - len(resumed)
    assert 0 < k <= len(printed), (
        f"resume restarted after {k} tokens, the killed run printed "
        f"{len(printed)}")
    assert printed == full[:len(printed)], "the killed run itself diverged"
    assert full[:k] + resumed == full, (
        f"resumed after {k}:\n  full    {full}\n  joined  {full[:k] + resumed}")
    return k


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
@pytest.mark.parametrize("kind", ["dense", "hybrid", "conv"])
def test_kill_during_checkpoint_write_then_resume(dense, hybrid, kind,
                                                  sampling, tmp_path):
    model = model_dir(dense, hybrid, kind)
    cmd = gen_cmd(model, sampling)
    full = ids(run_ok(cmd).stdout)
    assert len(full) == N_TOKENS
    if sampling == "greedy":   # the uninterrupted run against mlx-lm
        ref = pc.load_ref(model.parent, model.name)
        pc.assert_greedy_tokens({"tokens": full}, ref, ref["prompts"][PROMPT])
    ckpt = tmp_path / "run.ckpt"
    # Checkpoints after 8 tokens (renamed) and 16 (held 0.8 s before its
    # rename, killed there).
    printed = run_until_killed(cmd + ["--checkpoint", str(ckpt),
                                      "--checkpoint-every", "8"], 16, 800,
                               settle=0.3)
    strays = list(tmp_path.glob("run.ckpt.tmp-*"))
    assert strays, "the kill was meant to hit a checkpoint write"
    resumed = resume(model, ckpt)
    assert check_joined(full, printed, resumed) == 8, \
        "the half-written checkpoint replaced the good one"


@pytest.mark.parametrize("kind", ["dense", "hybrid", "conv"])
def test_random_kills_chained_resumes(dense, hybrid, kind, tmp_path):
    """Kill at random points (some inside a checkpoint write), resume with
    checkpoints still on and kill again, a bounded number of rounds; every
    resume continues the uninterrupted run."""
    model = model_dir(dense, hybrid, kind)
    cmd = gen_cmd(model, "seeded")
    full = ids(run_ok(cmd).stdout)
    rng = random.Random(16)
    ckpt = tmp_path / "chain.ckpt"
    keep = ["--checkpoint", str(ckpt), "--checkpoint-every", "3"]
    for _ in range(4):
        if not ckpt.exists():
            printed = run_until_killed(cmd + keep, rng.randrange(4, 12), 40,
                                       may_finish=True)
            assert printed == full[:len(printed)]
            continue
        resumed = resume(model, ckpt)
        k = check_joined(full, full, resumed)
        more = run_until_killed(base_cmd(model) + ["--resume", str(ckpt)]
                                + keep, rng.randrange(1, 6), 40,
                                may_finish=True)
        assert more == full[k:k + len(more)]
    assert ckpt.exists()
    check_joined(full, full, resume(model, ckpt))


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_speculative_kill_then_resume(dense, hybrid, kind, tmp_path):
    """n-gram speculation adds several tokens a round: a checkpoint follows
    the round that reaches or crosses each multiple of --checkpoint-every,
    and a resumed run (speculating too, with the resume's own --spec: the
    checkpoint does not hold it; the drafter's history is the tokens)
    continues the uninterrupted one, which is plain greedy's."""
    model = model_dir(dense, hybrid, kind)
    spec = ["--spec", "ngram", "--num-draft-tokens", "4"]
    plain = ids(run_ok(gen_cmd(model, "greedy")).stdout)
    cmd = gen_cmd(model, "greedy") + spec
    full = ids(run_ok(cmd).stdout)
    assert full == plain, "speculation changed the greedy tokens"
    ckpt = tmp_path / "spec.ckpt"
    printed = run_until_killed(cmd + ["--checkpoint", str(ckpt),
                                      "--checkpoint-every", "5"], 12, 40)
    assert ckpt.exists(), "no checkpoint before the kill"
    out = json.loads(run_ok(base_cmd(model) + ["--resume", str(ckpt), "--json",
                                               *spec]).stdout)
    k = check_joined(full, printed, out["tokens"])
    assert k >= 5
    drafts = out["stats"]["spec"]
    assert drafts["mode"] == "ngram", drafts
    assert drafts["drafted"] > 0, f"the resumed run did not draft: {drafts}"
    # The dense model's greedy tokens repeat, so some drafts hold; the
    # hybrid one's never repeat a drafted continuation (its uninterrupted
    # run accepts none either).
    assert kind == "hybrid" or drafts["accepted"] > 0, drafts


# Three full 32-token KV blocks and a few more tokens: what the disk prompt
# cache keeps of a prompt.
LONG_PROMPT = [(i * 37 + 11) % 400 + 5 for i in range(100)]


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_resume_with_prompt_cache_dir(dense, hybrid, kind, sampling, tmp_path):
    """--prompt-cache-dir keeps the prompt's blocks across runs, so a
    resume finds its prompt cached: it restores its checkpoint's state
    all the same, and continues the uninterrupted run."""
    model = model_dir(dense, hybrid, kind)
    cache = ["--prompt-cache-dir", str(tmp_path / "pc")]
    cmd = gen_cmd(model, sampling)
    at = cmd.index("--prompt-tokens") + 1
    cmd[at] = ",".join(map(str, LONG_PROMPT))
    full = ids(run_ok(cmd + cache).stdout)
    assert list((tmp_path / "pc").iterdir()), "nothing in the prompt cache"
    ckpt = tmp_path / "run.ckpt"
    printed = run_until_killed(cmd + cache + ["--checkpoint", str(ckpt),
                                              "--checkpoint-every", "8"], 12, 40)
    check_joined(full, printed, resume(model, ckpt, cache))


def checkpoint_of(model, tmp_path, name="good.ckpt"):
    ckpt = tmp_path / name
    run_ok(gen_cmd(model, "seeded") + ["--checkpoint", str(ckpt),
                                       "--checkpoint-every", "10"])
    return ckpt


def assert_refused(model, ckpt, needle):
    r = subprocess.run(base_cmd(model) + ["--resume", str(ckpt)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, f"exit {r.returncode} for {ckpt.name}: {r.stderr}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spindle: checkpoint "), \
        r.stderr
    assert needle in lines[0], lines[0]
    assert r.stdout.strip() == "", "a refused checkpoint printed tokens"


def test_corrupted_checkpoints_refused(dense, tmp_path):
    model = dense / "qwen3-f32"
    good = checkpoint_of(model, tmp_path)
    data = good.read_bytes()
    rng = random.Random(7)
    cases = {"empty": b"", "magic-only": data[:8]}
    for at in [0, 9, 20, 40, 100, len(data) // 2, len(data) - 20, len(data) - 1]:
        flipped = bytearray(data)
        flipped[at] ^= 1 << rng.randrange(8)
        cases[f"flip-{at}"] = bytes(flipped)
    for n in [16, 31, 200, len(data) // 2, len(data) - 16, len(data) - 1]:
        cases[f"truncated-{n}"] = data[:n]
    cases["appended"] = data + b"\0"
    for name, blob in cases.items():
        bad = tmp_path / f"{name}.ckpt"
        bad.write_bytes(blob)
        needle = "truncated" if name in ("empty", "magic-only") or \
            name.startswith("truncated-16") else ""
        assert_refused(model, bad, needle)
    assert_refused(model, tmp_path / "missing.ckpt", "no such file")
    # The good one (the last checkpoint: after 30) still resumes.
    assert len(resume(model, good)) == N_TOKENS - 30


def test_foreign_and_changed_models_refused(dense, tmp_path):
    model = dense / "qwen3-f32"
    good = checkpoint_of(model, tmp_path)
    # Same architecture and shapes, other quantization: same state layout,
    # refused by the fingerprint alone.
    assert_refused(dense / "qwen3-bf16", good, "another model")
    changed = tmp_path / "changed"
    shutil.copytree(model, changed)
    cfg = (changed / "config.json").read_text()
    (changed / "config.json").write_text(cfg.replace("{", '{"_edit": 1, ', 1))
    assert_refused(changed, good, "fingerprint")


def fingerprint(model, env=None):
    r = run_ok([str(pc.SPINDLE_BIN), "info", "-m", str(model),
                "--fingerprint"], env=env)
    fp = r.stdout.strip()
    assert len(fp) == 32 and all(c in "0123456789abcdef" for c in fp), fp
    return fp


def test_fingerprint(dense, tmp_path):
    names = ["qwen3-f32", "qwen3-bf16", "qwen3-q4g64", "qwen3-q8g64"]
    fps = {n: fingerprint(dense / n) for n in names}
    assert len(set(fps.values())) == len(names), fps
    copy = tmp_path / "copy"
    shutil.copytree(dense / "qwen3-f32", copy,
                    ignore=shutil.ignore_patterns("*.xxh3"))
    assert fingerprint(copy) == fps["qwen3-f32"], "a copy is the same model"
    cache = [p for p in copy.iterdir() if p.name.endswith(".xxh3")]
    assert cache, "the content hash is cached beside the weight file"
    assert fingerprint(copy) == fps["qwen3-f32"]
    # One weight byte changed (same size, same header): another model,
    # although the cached entry sits beside it.
    weights = copy / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-3] ^= 0x40
    weights.write_bytes(bytes(blob))
    assert fingerprint(copy) != fps["qwen3-f32"]
