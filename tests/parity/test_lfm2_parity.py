"""Oracle parity for LFM2 (gated short convolutions beside attention):
Spindle against mlx-lm's lfm2.

Models and references come from make_lfm2_models.py (mlx / mlx-lm's own
code, f32 / bf16 / MLX 4- and 8-bit, with and without the conv biases); the
checks are test_parity.py's (parity_common.py): greedy tokens identical up
to a near-tie, and last-prompt-position logits within TOL_F32_REL of the
float32 reference (and of the native one within NATIVE_FACTOR times mlx's
own native-vs-f32 gap).

Besides: the conv layers' rolling state (the last conv_L_cache - 1 inputs)
rolls back exactly within max_rollback, refuses beyond it, and snapshots
restore bit for bit (tests/tools/seq_state_harness); malformed configs fail
with one line naming the key; `spindle info` counts the state kinds and
every parameter; a Hugging Face checkpoint (conv weight [C, 1, K]) gives
the same outputs. Prefix reuse is test_engine_prefix_hybrid.py's.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_LFM2_PARITY_DIR (default tests/.work/parity-lfm2).
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
import make_lfm2_models as lm  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from test_hybrid_parity import (_copy_with_config, _harness,  # noqa: E402
                                file_parameters)

OUT = Path(os.environ.get("SPINDLE_LFM2_PARITY_DIR", lm.DEFAULT_OUT))
N_TOKENS = lm.MAX_TOKENS
lfm2_models, case = tp.parity_fixtures(lm, OUT, "lfm2_models")
CASES, IDS = tp.parity_cases(lm)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_lfm2_greedy_tokens(case, lfm2_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_lfm2_last_logits(case, lfm2_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, lfm2_models / model, ref, entry,
                          f"{model}/{prompt}")


@pytest.mark.parametrize("model,k", [("lfm2-f32", 0), ("lfm2-bias-f32", 2),
                                     ("lfm2-q4g64", 3)])
def test_lfm2_rollback_and_snapshot(spindle_bin, lfm2_models,  # noqa: F811
                                    model, k):
    """Truncation within the last pass of at most max_rollback tokens is
    exact, beyond that a one-line refusal naming the conv layer; snapshots
    restore bit for bit; a failed batch changes nothing."""
    out, rc = _harness(spindle_bin, lfm2_models / model,
                       *(["--max-rollback", k] if k else []))
    assert out["failures"] == [] and rc == 0, out["failures"]
    assert out["max_rollback"] == (k or 8)
    assert out["recurrent_refused"] > 0 and out["beyond_k_accepted"] == 0
    assert out["checks"] > 100


def _drop(key):
    return lambda cfg: cfg.pop(key)


def _set(key, value):
    return lambda cfg: cfg.__setitem__(key, value)


@pytest.mark.parametrize("model,edit,needle", [
    ("lfm2-f32", _drop("conv_L_cache"), "conv_L_cache"),
    ("lfm2-f32", _set("conv_L_cache", 0), "conv_L_cache"),
    ("lfm2-f32", _set("conv_L_cache", 5), "conv.conv.weight"),
    ("lfm2-f32", _drop("layer_types"), "layer_types"),
    ("lfm2-f32", _set("layer_types", ["conv", "mamba"] * 3), "layer_types[1]"),
    ("lfm2-f32", _set("layer_types", ["conv"] * 5), "layer_types"),
    ("lfm2-f32", _set("full_attn_idxs", [2, 4]), "disagrees with full_attn_idxs"),
    ("lfm2-bias-f32", _set("full_attn_idxs", [1, 9]), "full_attn_idxs"),
    ("lfm2-bias-f32", _set("full_attn_idxs", "1,4"), "full_attn_idxs"),
    ("lfm2-f32", _set("conv_bias", True), "conv.in_proj.bias"),
    ("lfm2-f32", _set("norm_eps", -1), "norm_eps"),
    ("lfm2-f32", _set("block_ff_dim", 0), "block_ff_dim"),
])
def test_lfm2_bad_config(spindle_bin, lfm2_models, tmp_path,  # noqa: F811
                         model, edit, needle):
    d = _copy_with_config(lfm2_models / model, tmp_path / "m", edit)
    r = subprocess.run([str(spindle_bin), "run", "-m", str(d),
                        "--prompt-tokens", "1,2", "-n", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, "a malformed config was accepted"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_lfm2_info(spindle_bin, lfm2_models):  # noqa: F811
    """spindle info: the conv layers' state is recurrent (a conv window),
    the attention layers' full KV; parameters count every element of the
    f32 files, read from their headers."""
    d = lfm2_models / "lfm2-bias-f32"
    r = subprocess.run([str(spindle_bin), "info", "-m", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["state"] == {
        "full_kv": 2, "window_kv": 0, "recurrent": 3, "max_rollback": 8}
    assert info["parameters"] == file_parameters(d)


def test_lfm2_hf_layout(spindle_bin, lfm2_models, tmp_path):  # noqa: F811
    """A Hugging Face checkpoint (conv weight [C, 1, K], intermediate_size
    instead of block_ff_dim): mlx-lm's sanitize moves the axis back, and
    Spindle must compute what mlx-lm computes."""
    mx = pytest.importorskip("mlx.core")
    mlu = pytest.importorskip("mlx_lm.utils")
    src = lfm2_models / "lfm2-f32"
    weights = {}
    for f in sorted(src.glob("*.safetensors")):
        weights.update(mx.load(str(f)))
    hf = {k: (v.moveaxis(2, 1) if k.endswith("conv.conv.weight") else v)
          for k, v in weights.items()}
    d = tmp_path / "hf"
    d.mkdir()
    mx.save_safetensors(str(d / "model.safetensors"), hf)
    cfg = json.loads((src / "config.json").read_text())
    cfg["intermediate_size"] = cfg.pop("block_ff_dim")
    (d / "config.json").write_text(json.dumps(cfg))
    prompt = lm.PROMPTS["len40"]
    model, _ = mlu.load_model(d)
    model.set_dtype(mx.float32)
    want = np.array(model(mx.array([prompt]))[0, -1])
    _, dump = tp.run_spindle(spindle_bin, d, prompt, tmp_path, 1)
    err = float(np.max(np.abs(np.load(dump) - want)) / np.std(want))
    assert err <= tp.TOL_F32_REL, f"max|err|/std {err:.4g}"
