"""The multi-token-prediction head (src/models/mtp.h) against its
reference (mtp_numpy_ref.py, on make_mtp_models.py's tiny Qwen3.5 whose
checkpoint carries mtp.* weights), through tests/tools/mtp_harness:

  * the target's hidden-state taps (last layer, before the final norm);
  * the head's logits, teacher-forced over the prompt and then recursive
    over its own drafts (the head's KV across calls, its own output hidden
    fed back), within TOL_F32_REL of the reference's scale;
  * the check can fail: the same comparison against the reference with the
    fusion's halves exchanged (concat(hidden, embed)) is off by far more;
  * the drafter (generation/drafter_mtp.c): its drafts are the reference's
    recursive picks, and after accepted rows its incrementally caught-up
    head equals a fresh one (the recursion rows are dropped: keeping them
    moves the logits by 0.87 of their std, 2e-6 when dropped);
  * a model without mtp.* weights is refused with one line.

Environment: SPINDLE_BUILD_DIR (the harness; default beside SPINDLE_BIN),
SPINDLE_MTP_PARITY_DIR (default tests/.work/parity-mtp).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_mtp_models as gen  # noqa: E402  (cheap: no mlx at import)
import parity_common as pc  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)

OUT = Path(os.environ.get("SPINDLE_MTP_PARITY_DIR", gen.DEFAULT_OUT))
MODEL = gen.SPECS[0]["name"]


@pytest.fixture(scope="session")
def mtp_models(spindle_bin):  # noqa: F811
    return pc.ensure_models(OUT, gen)


def harness(spindle_bin):  # noqa: F811
    build = Path(os.environ.get("SPINDLE_BUILD_DIR", spindle_bin.parent))
    path = build / "mtp_harness"
    if not path.is_file():
        pytest.skip(f"mtp_harness not found at {path}")
    return path


def run_head(spindle_bin, model_dir, tokens, prompt_len, out):  # noqa: F811
    return subprocess.run(
        [str(harness(spindle_bin)), str(model_dir),
         "--tokens", ",".join(map(str, tokens)),
         "--prompt-len", str(prompt_len), "--out", str(out)],
        capture_output=True, text=True, timeout=120)


def rel_err(got, want):
    return float(np.abs(got - want).max() / want.std())


@pytest.mark.parametrize("prompt", list(gen.PROMPTS))
def test_mtp_logits(spindle_bin, mtp_models, tmp_path, prompt):  # noqa: F811
    d = mtp_models / MODEL
    entry = json.loads((d / "reference.json").read_text())["prompts"][prompt]
    r = run_head(spindle_bin, d, entry["tokens"], entry["prompt_len"],
                 tmp_path / "out.bin")
    assert r.returncode == 0, r.stderr
    shape = json.loads(r.stdout)
    hidden = np.load(d / f"hidden_{prompt}.npy")
    logits = np.load(d / f"logits_{prompt}.npy")
    assert (shape["hidden_rows"], shape["hidden_size"]) == hidden.shape
    assert (shape["logit_rows"], shape["vocab"]) == logits.shape
    # One head KV row per target position it has seen.
    assert shape["mtp_length"] == len(entry["tokens"]) - 1
    raw = np.fromfile(tmp_path / "out.bin", dtype=np.float32)
    got_h = raw[:hidden.size].reshape(hidden.shape)
    got_l = raw[hidden.size:].reshape(logits.shape)
    assert rel_err(got_h, hidden) < pc.TOL_F32_REL, "target hidden taps"
    for row in range(logits.shape[0]):
        err = rel_err(got_l[row], logits[row])
        assert err < pc.TOL_F32_REL, f"{prompt}: MTP row {row} off by {err:.2e}"
    # The comparison can fail: the wrong fusion order is far outside it.
    swapped = np.load(d / f"logits_{prompt}_swapped.npy")
    assert rel_err(got_l, swapped) > 100 * pc.TOL_F32_REL


def test_mtp_absent_is_refused(spindle_bin, tmp_path):  # noqa: F811
    import make_hybrid_models as hm
    plain = pc.ensure_models(hm.DEFAULT_OUT, hm) / "qwen3_5-f32"
    r = run_head(spindle_bin, plain, [1, 2, 3], 2, tmp_path / "out.bin")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "multi-token-prediction head" in lines[0], r.stderr


@pytest.mark.parametrize("prompt", list(gen.PROMPTS))
def test_mtp_drafter(spindle_bin, mtp_models, prompt):  # noqa: F811
    """The drafter (generation/drafter_mtp.c) on the target's taps: its
    first round's drafts are the reference's recursive argmax picks; after
    three more target rows (two drafts accepted) its head (caught up
    incrementally, the first round's recursion rows dropped) drafts what a
    fresh one fed every tap at once drafts, with the same logits within
    TOL_F32_REL."""
    d = mtp_models / MODEL
    entry = json.loads((d / "reference.json").read_text())["prompts"][prompt]
    P, tokens = entry["prompt_len"], entry["tokens"]
    k = len(tokens) - P - 1
    r = subprocess.run(
        [str(harness(spindle_bin)), str(d), "--tokens", ",".join(map(str, tokens)),
         "--prompt-len", str(P), "--propose", str(k)],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["drafts"] == tokens[P + 1:]
    assert len(out["drafts_after"]) == k
    assert out["drafts_after"] == out["drafts_fresh"]
    assert out["after_vs_fresh"] < pc.TOL_F32_REL
