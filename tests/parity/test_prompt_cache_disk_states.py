"""The on-disk prompt cache (`--prompt-cache-dir` on `spindle run`) for the
models whose layers are not all full KV: the hybrid gated-DeltaNet
families (qwen3_5, qwen3_next), LFM2 (a conv window beside attention) and
the sliding-window ones (gemma3,
gpt-oss), on the tiny mlx-lm parity models.

Beside the full KV blocks (DIR/<hash>.kvb), such a model needs the other
layers' state where a mapped prefix ends (src/runtime/prefix_states.h:
recurrent conv window and state, window layers' last positions); the disk
tier writes each boundary state as DIR/<hash>.kvs, keyed by the block that
ends there (src/runtime/prefix_disk.h). Checks:
  * restart: a second process maps the prompt's blocks and the state at
    its last boundary back from disk (cached_tokens) and prefills only the
    rest; its tokens equal a cold run's token for token and its last
    prompt logits bit for bit;
  * with 32-token prefill chunks every boundary has its state, so another
    prompt sharing 160 tokens maps exactly those; blocks on disk without a
    state at any boundary are not even read;
  * corruption of a state file (a flipped byte in payload, header or
    checksum, a truncated or empty file, another model's state, a block
    file or another boundary's state under its name) is refused with one
    warning, deleted and never used: the prefix falls back to the
    previous boundary's state, the output stays the cold run's, and the
    next run writes the state again;
  * blocks and states together stay under --prompt-cache-disk-bytes while
    prompts churn, the most recent prompt whole, and a smaller budget at
    the next start shrinks the directory.
"""

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gemma3_models as gm  # noqa: E402
import make_gptoss_models as om  # noqa: E402
import make_hybrid_models as hm  # noqa: E402
import make_lfm2_models as lm  # noqa: E402
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from test_prompt_cache_disk import B, CORRUPTIONS, prompt_of, run  # noqa: E402

SETS = {
    "qwen3_5-f32": (hm, "SPINDLE_HYBRID_PARITY_DIR"),
    "qwen3_next-f32": (hm, "SPINDLE_HYBRID_PARITY_DIR"),
    "lfm2-f32": (lm, "SPINDLE_LFM2_PARITY_DIR"),
    "gemma3-f32": (gm, "SPINDLE_GEMMA3_PARITY_DIR"),
    "gptoss-f32": (om, "SPINDLE_GPTOSS_PARITY_DIR"),
}
# Another model with the same state layout, for a foreign state file.
OTHER = {"qwen3_5-f32": "qwen3_5-q8g64", "gptoss-f32": "gptoss-q8"}


def model_dir(name):
    gen, env = SETS[next(k for k, v in OTHER.items() if v == name)] \
        if name in OTHER.values() else SETS[name]
    return pc.ensure_models(Path(os.environ.get(env, gen.DEFAULT_OUT)),
                            gen) / name


def run_logits(model, prompt, tmp_path, tag, cache=None, chunk=None, **kw):
    """run() with --dump-logits (the last prompt position) and an optional
    --prefill-chunk; (tokens, stats, stderr, logits)."""
    out = tmp_path / f"logits-{tag}.npy"
    extra = ["--dump-logits", str(out)]
    if chunk:
        extra += ["--prefill-chunk", str(chunk)]
    tokens, st, err = run(model, prompt, cache, extra=extra, **kw)
    return tokens, st, err, np.load(out)


def files(cache, ext):
    return sorted(cache.glob(f"*{ext}"))


def dir_bytes(cache):
    return sum(f.stat().st_size for f in cache.iterdir())


def state_at(cache, prompt, k):
    """The state file at the end of block k - 1 of prompt (k * B tokens in):
    its header's tokens are that block's."""
    want = b"".join(t.to_bytes(4, "little", signed=True)
                    for t in prompt[(k - 1) * B:k * B])
    hits = [f for f in files(cache, ".kvs")
            if f.read_bytes()[80:80 + 4 * B] == want]
    assert len(hits) == 1, f"state at {k * B}: {len(hits)} files"
    return hits[0]


@pytest.mark.parametrize("name", list(SETS))
def test_restart_maps_blocks_and_state_from_disk(spindle_bin, tmp_path,  # noqa: F811
                                                 name):
    model = model_dir(name)
    cache = tmp_path / "cache"
    prompt = prompt_of(200)
    cold, st, _, cold_logits = run_logits(model, prompt, tmp_path, "cold")
    assert st["cached_tokens"] == 0
    first, st, _, _ = run_logits(model, prompt, tmp_path, "first", cache)
    assert first == cold and st["cached_tokens"] == 0
    # 200 prompt + 15 fed generated positions: 6 full blocks; the prompt's
    # passes end at 192 (its last boundary) and 200, so one state.
    assert len(files(cache, ".kvb")) == 6
    assert len(files(cache, ".kvs")) == 1
    again, st, err, logits = run_logits(model, prompt, tmp_path, "again",
                                        cache)
    assert "warning" not in err, err
    assert st["cached_tokens"] == (len(prompt) - 1) // B * B == 192
    assert st["prompt_cache"]["loaded"] == 7        # 6 blocks, 1 state
    assert again == cold, f"from disk\n  {again}\ncold\n  {cold}"
    assert np.array_equal(logits, cold_logits), \
        f"{name}: logits differ by {np.abs(logits - cold_logits).max()}"


@pytest.mark.parametrize("name", ["qwen3_5-f32", "gptoss-f32"])
def test_every_boundary_with_prefill_chunks(spindle_bin, tmp_path, name):  # noqa: F811
    model = model_dir(name)
    cache = tmp_path / "cache"
    prompt = prompt_of(200)
    run(model, prompt, cache, extra=["--prefill-chunk", "32"])
    assert len(files(cache, ".kvs")) == 6           # 32, 64, .., 192
    other = prompt[:160] + prompt_of(70, salt=5)
    cold, _, _, cold_logits = run_logits(model, other, tmp_path, "cold",
                                         chunk=32)
    warm, st, err, logits = run_logits(model, other, tmp_path, "warm", cache,
                                       chunk=32)
    assert "warning" not in err, err
    assert st["cached_tokens"] == 160
    assert warm == cold and np.array_equal(logits, cold_logits)
    # Blocks without any state: nothing mapped, not one file read.
    for f in files(cache, ".kvs"):
        f.unlink()
    tokens, st, err = run(model, prompt, cache)
    assert "warning" not in err, err
    assert st["cached_tokens"] == 0 and st["prompt_cache"]["loaded"] == 0
    # That run wrote the state at its last boundary again.
    tokens, st, _ = run(model, prompt, cache)
    assert st["cached_tokens"] == 192


def block_file_at(cache, prompt, k):
    want = b"".join(t.to_bytes(4, "little", signed=True)
                    for t in prompt[(k - 1) * B:k * B])
    hits = [f for f in files(cache, ".kvb")
            if f.read_bytes()[80:80 + 4 * B] == want]
    assert len(hits) == 1
    return hits[0]


STATE_CORRUPTIONS = {
    **CORRUPTIONS,
    # A block's file (a sound container of the other kind) as the state.
    "block_as_state": lambda f, cache, prompt: shutil.copyfile(
        block_file_at(cache, prompt, 6), f),
    # The state of the previous boundary under this one's name.
    "another_boundary": lambda f, cache, prompt: shutil.copyfile(
        state_at(cache, prompt, 5), f),
}
NEEDLES = {"payload_flip": "checksum", "checksum_flip": "checksum",
           "header_token_flip": "checksum", "empty": "truncated",
           "truncated": "truncated", "header_only": "truncated",
           "block_as_state": "a block where a boundary state belongs",
           "another_boundary": "holds another prefix",
           "foreign": "another model"}
CASES = [("qwen3_5-f32", k) for k in sorted(STATE_CORRUPTIONS)] + \
    [("qwen3_5-f32", "foreign"), ("gptoss-f32", "payload_flip"),
     ("gptoss-f32", "foreign")]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """Per model: a cache dir with a state at every boundary of PROMPT
    (32-token chunks), and the cold run's tokens."""
    made = {}

    def get(name):
        if name not in made:
            model = model_dir(name)
            cache = tmp_path_factory.mktemp(name) / "cache"
            prompt = prompt_of(200, salt=1)
            run(model, prompt, cache, extra=["--prefill-chunk", "32"])
            cold, _, _ = run(model, prompt, extra=["--prefill-chunk", "32"])
            made[name] = (cache, prompt, cold)
        return made[name]
    return get


@pytest.mark.parametrize("name,kind", CASES)
def test_corrupted_state_files_refused(spindle_bin, pristine, tmp_path,  # noqa: F811
                                       name, kind):
    src, prompt, cold = pristine(name)
    cache = tmp_path / "cache"
    shutil.copytree(src, cache)
    victim = state_at(cache, prompt, 6)
    if kind == "foreign":
        foreign = tmp_path / "foreign"
        run(model_dir(OTHER[name]), prompt, foreign,
            extra=["--prefill-chunk", "32"])
        shutil.copyfile(state_at(foreign, prompt, 6), victim)
    elif kind in CORRUPTIONS:
        CORRUPTIONS[kind](victim)
    else:
        STATE_CORRUPTIONS[kind](victim, cache, prompt)
    bad = victim.read_bytes()
    model = model_dir(name)
    chunk = ["--prefill-chunk", "32"]
    tokens, st, err = run(model, prompt, cache, extra=chunk)
    lines = [ln for ln in err.splitlines() if "prompt cache" in ln]
    assert len(lines) == 1 and "warning" in lines[0] and \
        victim.name in lines[0] and NEEDLES[kind] in lines[0], err
    assert "deleted" in lines[0]
    # The previous boundary's state serves instead.
    assert st["cached_tokens"] == 160, "a refused state was used"
    assert st["prompt_cache"]["refused"] == 1
    assert tokens == cold
    # That run wrote the state again; the next one reads it back.
    assert victim.read_bytes() != bad
    tokens, st, err = run(model, prompt, cache, extra=chunk)
    assert "warning" not in err, err
    assert st["cached_tokens"] == 192
    assert tokens == cold


def test_budget_respected_under_churn(spindle_bin, tmp_path):  # noqa: F811
    model = model_dir("qwen3_5-f32")
    cache = tmp_path / "cache"
    # 150 prompt tokens + 15 fed: 5 blocks, states at 128 (the prompt's
    # last boundary) and 160 (crossed while decoding).
    run(model, prompt_of(150, salt=30), cache)
    assert len(files(cache, ".kvb")) == 5 and len(files(cache, ".kvs")) == 2
    one_prompt = dir_bytes(cache)
    one_state = files(cache, ".kvs")[0].stat().st_size
    shutil.rmtree(cache)
    budget = one_prompt + one_prompt // 2
    prompts = [prompt_of(150, salt=10 + i) for i in range(4)]
    for p in prompts:
        _, st, _ = run(model, p, cache, budget)
        assert dir_bytes(cache) <= budget
    _, st, _ = run(model, prompts[-1], cache, budget)
    assert st["cached_tokens"] == 128
    _, st, _ = run(model, prompts[0], cache, budget)
    assert st["cached_tokens"] == 0
    assert dir_bytes(cache) <= budget
    # A smaller budget at start deletes the least recently used first.
    _, st, _ = run(model, prompt_of(20), cache, one_state)
    assert dir_bytes(cache) <= one_state
