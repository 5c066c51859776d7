"""The on-disk prompt cache (`--prompt-cache-dir`, `--prompt-cache-disk-bytes`
on `spindle run`), on the tiny mlx-lm parity models of make_models.

Checks:
  * restart: a second process whose prompt starts like the first one's
    reads those full 32-token blocks back from disk (cached_tokens) and
    prefills only the rest; its tokens equal a cold run's token for token,
    and for the reference prompt also mlx-lm's greedy tokens;
  * corruption: a flipped byte (payload or header), a truncated or empty
    file and another model's block under our block's name are refused with
    a warning, deleted and never loaded: the output stays the cold run's;
  * the directory stays under --prompt-cache-disk-bytes while different
    prompts churn through it, oldest files deleted first, and a smaller
    budget at the next start shrinks it.
Hybrid and sliding-window models (their boundary states on disk beside
the blocks): test_prompt_cache_disk_states.py.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

DENSE_OUT = Path(os.environ.get("SPINDLE_PARITY_DIR", mm.DEFAULT_OUT))
B = 32                       # positions per KV block
HEADER = 224                 # a block file's header (runtime/prefix_block.h)
N_GEN = 16


@pytest.fixture(scope="session")
def dense(spindle_bin):  # noqa: F811
    return pc.ensure_models(DENSE_OUT, mm)


def model_of(dense, name="qwen3-f32"):
    return dense / name


def prompt_of(n, salt=0):
    """n token ids inside both tiny vocabularies (768, 512), distinct per
    salt."""
    return [(7 * i + 13 * salt + 1) % 500 + 3 for i in range(n)]


def run(model, prompt, cache=None, budget=None, n=N_GEN, extra=()):
    cmd = [str(pc.SPINDLE_BIN), "run", "-m", str(model), "--json",
           "--prompt-tokens", ",".join(map(str, prompt)), "-n", str(n),
           "--ignore-eos", *extra]
    if os.environ.get("SPINDLE_THREADS"):
        cmd += ["-t", os.environ["SPINDLE_THREADS"]]
    if cache is not None:
        cmd += ["--prompt-cache-dir", str(cache)]
    if budget is not None:
        cmd += ["--prompt-cache-disk-bytes", str(budget)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{' '.join(cmd)}\nexit {r.returncode}\n{r.stderr}"
    out = json.loads(r.stdout)
    return out["tokens"], out["stats"], r.stderr


def block_files(cache):
    return sorted(cache.glob("*.kvb"))


def file_of_block(cache, prompt, k):
    """The file holding block k of prompt (its header's tokens say so)."""
    want = b"".join(t.to_bytes(4, "little", signed=True)
                    for t in prompt[k * B:(k + 1) * B])
    hits = [f for f in block_files(cache)
            if f.read_bytes()[80:80 + 4 * B] == want]
    assert len(hits) == 1, f"block {k}: {len(hits)} files"
    return hits[0]


def test_restart_reads_the_prefix_back_from_disk(dense, tmp_path):
    model = model_of(dense)
    cache = tmp_path / "cache"
    prompt = prompt_of(200)
    cold, st, _ = run(model, prompt)
    assert st["cached_tokens"] == 0
    first, st, _ = run(model, prompt, cache)
    assert first == cold and st["cached_tokens"] == 0
    # 200 prompt + 15 fed generated positions fill 6 blocks, all written
    # by the time the process has ended.
    assert len(block_files(cache)) == 6
    again, st, err = run(model, prompt, cache)
    assert "warning" not in err, err
    assert st["cached_tokens"] == (len(prompt) - 1) // B * B == 192
    assert st["prompt_cache"]["loaded"] == 6
    assert again == cold, f"from disk\n  {again}\ncold\n  {cold}"
    # Another prompt with the first 160 tokens in common: 5 blocks from disk.
    other = prompt[:160] + prompt_of(70, salt=5)
    cold_other, _, _ = run(model, other)
    warm_other, st, _ = run(model, other, cache)
    assert st["cached_tokens"] == 160
    assert warm_other == cold_other


def test_restart_matches_mlx_reference(dense, tmp_path):
    """The reference prompt of 40 tokens: its first block comes from disk
    in the second process, and the greedy tokens still agree with mlx-lm."""
    model = model_of(dense)
    ref = pc.load_ref(model.parent, model.name)
    entry = ref["prompts"]["len40"]
    prompt = entry["prompt_tokens"]
    n = len(entry["f32"]["tokens"])
    cache = tmp_path / "cache"
    run(model, prompt, cache, n=n)
    tokens, st, _ = run(model, prompt, cache, n=n)
    assert st["cached_tokens"] == B
    pc.assert_greedy_tokens({"tokens": tokens}, ref, entry)


def flip(path, at):
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


def truncate(path, keep):
    path.write_bytes(path.read_bytes()[:keep])


CORRUPTIONS = {
    "payload_flip": lambda f: flip(f, HEADER + 1000),
    "header_token_flip": lambda f: flip(f, 80 + 4 * 3),
    "checksum_flip": lambda f: flip(f, 208),
    "truncated": lambda f: truncate(f, f.stat().st_size - 100),
    "header_only": lambda f: truncate(f, HEADER),
    "empty": lambda f: truncate(f, 0),
}


@pytest.fixture(scope="module")
def pristine(dense, tmp_path_factory):
    """A cache dir filled by one run of PROMPT, and the cold run's tokens."""
    model = model_of(dense)
    cache = tmp_path_factory.mktemp("pristine") / "cache"
    prompt = prompt_of(200, salt=1)
    run(model, prompt, cache)
    cold, _, _ = run(model, prompt)
    return cache, prompt, cold


def assert_refused_at(model, cache, prompt, cold, k, victim, needle):
    tokens, st, err = run(model, prompt, cache)
    lines = [ln for ln in err.splitlines() if "prompt cache" in ln]
    assert len(lines) == 1 and "warning" in lines[0] and \
        victim.name in lines[0] and needle in lines[0], err
    assert st["cached_tokens"] == k * B, "a refused block was used"
    assert st["prompt_cache"]["refused"] == 1
    assert tokens == cold
    # Refused and deleted; the next run rewrote it and now reads it back.
    tokens, st, err = run(model, prompt, cache)
    assert "warning" not in err
    assert st["cached_tokens"] == (len(prompt) - 1) // B * B
    assert tokens == cold


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupted_block_files_refused(dense, pristine, kind, tmp_path):
    src, prompt, cold = pristine
    cache = tmp_path / "cache"
    shutil.copytree(src, cache)
    k = 2                                  # blocks 0 and 1 stay usable
    victim = file_of_block(cache, prompt, k)
    CORRUPTIONS[kind](victim)
    needle = {"payload_flip": "checksum", "checksum_flip": "checksum",
              "header_token_flip": "checksum", "empty": "truncated",
              "truncated": "truncated", "header_only": "truncated"}[kind]
    assert_refused_at(model_of(dense), cache, prompt, cold, k, victim, needle)


def test_foreign_fingerprint_block_refused(dense, pristine, tmp_path):
    """Another model's block (same layout, other weights) under the name of
    this model's block 1: refused as another model's, never loaded."""
    src, prompt, cold = pristine
    cache, foreign = tmp_path / "cache", tmp_path / "foreign"
    shutil.copytree(src, cache)
    other = model_of(dense, "qwen3-q8g64")   # its KV blocks: the same f32 shape
    run(other, prompt, foreign)
    theirs = file_of_block(foreign, prompt, 1)
    ours = file_of_block(cache, prompt, 1)
    shutil.copyfile(theirs, ours)
    assert_refused_at(model_of(dense), cache, prompt, cold, 1, ours,
                      "another model")


def dir_bytes(cache):
    return sum(f.stat().st_size for f in block_files(cache))


def test_budget_respected_under_churn(dense, tmp_path):
    model = model_of(dense)
    cache = tmp_path / "cache"
    run(model, prompt_of(40), cache)        # learn one file's size
    one = block_files(cache)[0].stat().st_size
    shutil.rmtree(cache)
    budget = 10 * one + one // 2            # room for 10 files
    prompts = [prompt_of(150, salt=10 + i) for i in range(6)]   # 5 blocks
    for p in prompts:
        _, st, _ = run(model, p, cache, budget)
        assert dir_bytes(cache) <= budget
    assert len(block_files(cache)) == 10
    # The two most recent prompts survived whole, the older ones did not.
    _, st, _ = run(model, prompts[-1], cache, budget)
    assert st["cached_tokens"] == 128
    _, st, _ = run(model, prompts[-2], cache, budget)
    assert st["cached_tokens"] == 128
    _, st, _ = run(model, prompts[0], cache, budget)
    assert st["cached_tokens"] == 0
    assert dir_bytes(cache) <= budget
    # A smaller budget at start deletes the least recently used first.
    _, st, _ = run(model, prompt_of(20), cache, 3 * one)
    assert dir_bytes(cache) <= 3 * one and len(block_files(cache)) == 3


def test_unusable_cache_dir_and_bad_budget(dense, tmp_path):
    model = model_of(dense)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    base = [str(pc.SPINDLE_BIN), "run", "-m", str(model), "--prompt-tokens",
            "5,6,7", "-n", "2"]
    r = subprocess.run(base + ["--prompt-cache-dir", str(blocker / "sub")],
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "cannot create the prompt cache directory" in lines[0]
    for bad in ("0", "-1", "12X"):
        r = subprocess.run(base + ["--prompt-cache-dir", str(tmp_path / "c"),
                                   "--prompt-cache-disk-bytes", bad],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2
        assert "--prompt-cache-disk-bytes expects a positive byte count" \
            in r.stderr
