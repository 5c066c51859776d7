"""Latent-KV sequence state (multi-head latent attention) on the tiny
DeepSeek-V3 models of make_mla_models.py: the compressed latent and the
rotary key of each position live in the pool's blocks like full KV, so
everything full KV does must hold for them.

  * rollback, snapshots, failed forwards (tests/tools/seq_state_harness):
    a truncated sequence against one that never saw the dropped tokens, a
    restored snapshot against the continuation it was taken before, bit
    for bit; truncation reaches every length, as for full KV;
  * the prefix index through the step engine (tests/tools/engine_harness):
    the same requests with and without it give the same tokens and logits,
    with whole shared blocks mapped (cached_tokens);
  * copy-on-write: a sequence truncated into a block it shares, then
    continued, leaves the other requests' results unchanged;
  * durable checkpoints: kill -9, then --resume continues the run;
  * the on-disk prompt cache: a second process reads the prompt's blocks
    back and prints what a cold run prints, mlx-lm's tokens.
The parity of these models with mlx-lm is test_mla_parity.py's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_mla_models as gen  # noqa: E402
import parity_common as pc  # noqa: E402
import test_engine as te  # noqa: E402
import test_engine_prefix as tep  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_MLA_PARITY_DIR", gen.DEFAULT_OUT))
B = 32  # SP_KV_BLOCK_TOKENS


@pytest.fixture(scope="session")
def mla_models(spindle_bin):  # noqa: F811
    return pc.ensure_models(OUT, gen)


@pytest.mark.parametrize("model", ["dsv3-f32", "dsv3-q4g64"])
def test_rollback_snapshot_failed_forward(spindle_bin, mla_models,  # noqa: F811
                                          model):
    harness = Path(os.environ.get("SPINDLE_BUILD_DIR", spindle_bin.parent)) \
        / "seq_state_harness"
    if not harness.is_file():
        pytest.skip(f"seq_state_harness not found at {harness}")
    r = subprocess.run([str(harness), str(mla_models / model)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    assert out["failures"] == [] and r.returncode == 0, out["failures"]
    assert out["checks"] > 100
    assert out["beyond_k_accepted"] > 0   # every length, as full KV


@pytest.mark.parametrize("model", ["dsv3-f32", "dsv3-q4g64"])
def test_prefix_index_changes_nothing_but_the_work(mla_models, tmp_path,
                                                   model):
    if not te.HARNESS.is_file():
        pytest.skip(f"engine harness not found at {te.HARNESS}")
    mdir = mla_models / model
    reqs = tep.prefix_requests()
    on = te.run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                         max_batch_tokens=16)
    off = te.run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                          max_batch_tokens=16, no_prefix_cache=True)
    te.check_finished_once(on["requests"])
    published = []
    for i, (got, want) in enumerate(zip(on["requests"], off["requests"])):
        label = f"{model} request {i}"
        assert want["stats"]["cached_tokens"] == 0, label
        assert got["stats"]["cached_tokens"] == \
            tep.cached_expected(reqs[i]["prompt"], published), label
        published.append(reqs[i]["prompt"] + got["tokens"][:-1])
        te.assert_same_tokens(got, want, label)
        te.assert_close_logits(got, want, label)
    assert sum(q["stats"]["cached_tokens"] for q in on["requests"]) > 0
    tep.assert_pool_accounted(on, model)
    tep.assert_pool_accounted(off, model)


def test_copy_on_write_through_truncation(mla_models, tmp_path):
    if not te.HARNESS.is_file():
        pytest.skip(f"engine harness not found at {te.HARNESS}")
    mdir = mla_models / "dsv3-f32"
    shared = tep.SHARED

    def q(prompt, **kw):
        return dict(prompt=prompt, max_tokens=10, logits=True,
                    ignore_eos=True, **kw)
    reqs = [
        q(shared, own_seq=True),
        q(shared[:70] + [3], after=0),
        q([11, 12, 13], after=1, seq_of=0, truncate_to=40),
        q(shared[:70] + [3], after=2),
    ]
    ans = te.run_scenario(mdir, tmp_path, "step", reqs, max_seqs=4,
                          max_batch_tokens=16)
    out = ans["requests"]
    te.check_finished_once(out)
    assert [q["stats"]["cached_tokens"] for q in out] == [0, 64, 0, 64]
    alone = te.run(mdir, tmp_path, "step", [
        q(shared[:70] + [3]),
        q(shared[:40] + [11, 12, 13]),
    ], max_seqs=1, no_prefix_cache=True)
    for got, want, label in ((out[1], alone[0], "mapped"),
                             (out[3], alone[0], "mapped after the write"),
                             (out[2], alone[1], "truncated and continued")):
        te.assert_same_tokens(got, want, label)
        te.assert_close_logits(got, want, label)
    tep.assert_pool_accounted(ans, "copy-on-write")


def _run(spindle_bin, model, prompt, cache=None):  # noqa: F811
    cmd = [str(spindle_bin), "run", "-m", str(model), "--prompt-tokens",
           ",".join(map(str, prompt)), "-n", str(gen.MAX_TOKENS), "--json"]
    if cache is not None:
        cmd += ["--prompt-cache-dir", str(cache)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_prompt_cache_on_disk(spindle_bin, mla_models, tmp_path):  # noqa: F811
    """A second process maps the 40-token prompt's first block from disk
    and still gives mlx-lm's tokens (its latent rows must be the ones a
    cold prefill stores, split where the attention reads them)."""
    model = mla_models / "dsv3-q4g64"
    ref = pc.load_ref(mla_models, "dsv3-q4g64")
    entry = ref["prompts"]["len40"]
    prompt = entry["prompt_tokens"]
    first, _ = _run(spindle_bin, model, prompt, tmp_path)
    assert first["stats"]["cached_tokens"] == 0
    again, err = _run(spindle_bin, model, prompt, tmp_path)
    assert "warning" not in err, err
    assert again["stats"]["cached_tokens"] == B
    assert again["tokens"] == first["tokens"]
    pc.assert_greedy_tokens(again, ref, entry)


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_kill_then_resume_from_checkpoint(mla_models, tmp_path, sampling):
    """kill -9 after a checkpoint: the resume continues with the tokens of
    the uninterrupted run (the latent rows restored from the file)."""
    import test_durable as td
    model = mla_models / "dsv3-q4g64"
    cmd = td.gen_cmd(model, sampling)
    full = td.ids(td.run_ok(cmd).stdout)
    ckpt = tmp_path / "run.ckpt"
    # each checkpoint write held 0.3 s, so the kill lands after the second
    printed = td.run_until_killed(cmd + ["--checkpoint", str(ckpt),
                                        "--checkpoint-every", "8"], 12, 300)
    resumed = td.resume(model, ckpt)
    assert td.check_joined(full, printed, resumed) >= 8
