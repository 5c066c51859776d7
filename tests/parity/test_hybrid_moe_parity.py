"""Oracle parity for Qwen3.5 MoE (qwen3_5_moe / qwen3_5_moe_text): Spindle
against mlx-lm's qwen3_5_moe.

Models and references come from make_hybrid_moe_models.py (mlx / mlx-lm's
own code, f32 / bf16 / MLX 4- and 8-bit); the checks are test_parity.py's
(parity_common.py): greedy tokens identical up to a near-tie, and
last-prompt-position logits within TOL_F32_REL of the float32 reference (and
of the native one within NATIVE_FACTOR times mlx's own native-vs-f32 gap).
The 100-token prompt takes the chunked delta rule across a chunk boundary.

Besides: malformed expert configs fail with one line naming the key; the
sequence state rolls back exactly and snapshots restore bit for bit
(tests/tools/seq_state_harness); a Hugging Face checkpoint (fused
experts.gate_up_proj, (1 + w) norms stored as w) computes what mlx-lm
computes after its sanitize. Prefix reuse is test_engine_prefix_hybrid.py's.

Environment: SPINDLE_BIN (default build/spindle), SPINDLE_THREADS,
SPINDLE_HYBRID_MOE_PARITY_DIR (default tests/.work/parity-hybrid-moe).
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
import make_hybrid_moe_models as qm  # noqa: E402  (cheap: no mlx at import)
import parity_common as tp  # noqa: E402
from parity_common import spindle_bin  # noqa: E402,F401  (fixture)
from test_hybrid_parity import (NORMS_PLUS_ONE, _copy_with_config,  # noqa: E402
                                _harness, file_parameters)

OUT = Path(os.environ.get("SPINDLE_HYBRID_MOE_PARITY_DIR", qm.DEFAULT_OUT))
N_TOKENS = qm.MAX_TOKENS
moe_models, case = tp.parity_fixtures(qm, OUT, "moe_models")
CASES, IDS = tp.parity_cases(qm)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_qwen3_5_moe_greedy_tokens(case, moe_models, model, prompt):
    ref, entry, out, _ = case
    tp.assert_greedy_tokens(out, ref, entry)


@pytest.mark.parametrize("model,prompt", CASES, ids=IDS)
def test_qwen3_5_moe_last_logits(case, moe_models, model, prompt):
    ref, entry, _, dump = case
    tp.assert_last_logits(dump, moe_models / model, ref, entry,
                          f"{model}/{prompt}")


@pytest.mark.parametrize("key,value,needle", [
    ("num_experts", None, "num_experts"),
    ("num_experts_per_tok", 9, "num_experts_per_tok"),
    ("moe_intermediate_size", 48, "switch_mlp"),
    ("shared_expert_intermediate_size", None,
     "shared_expert_intermediate_size"),
    ("linear_num_value_heads", 3, "multiple of"),
])
def test_qwen3_5_moe_bad_config(spindle_bin, moe_models, tmp_path,  # noqa: F811
                                key, value, needle):
    def edit(cfg):
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    d = _copy_with_config(moe_models / "qwen3_5_moe-f32", tmp_path / "m", edit)
    r = subprocess.run([str(spindle_bin), "run", "-m", str(d),
                        "--prompt-tokens", "1,2", "-n", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, "a malformed config was accepted"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


@pytest.mark.parametrize("model,k", [("qwen3_5_moe-f32", 0),
                                     ("qwen3_5_moe-q4g64", 3)])
def test_qwen3_5_moe_rollback_and_snapshot(spindle_bin, moe_models,  # noqa: F811
                                           model, k):
    """As test_hybrid_rollback_and_snapshot: exact truncation within
    max_rollback, refusal beyond it, snapshots bit for bit."""
    out, rc = _harness(spindle_bin, moe_models / model,
                       *(["--max-rollback", k] if k else []))
    assert out["failures"] == [] and rc == 0, out["failures"]
    assert out["recurrent_refused"] > 0 and out["beyond_k_accepted"] == 0
    assert out["checks"] > 100


def test_qwen3_5_moe_info(spindle_bin, moe_models):  # noqa: F811
    """spindle info: the state kinds, every parameter of the f32 files, and
    fewer active ones (4 of 16 experts a token)."""
    d = moe_models / "qwen3_5_moe-wide-f32"
    r = subprocess.run([str(spindle_bin), "info", "-m", str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["state"] == {
        "full_kv": 2, "window_kv": 0, "recurrent": 4, "max_rollback": 8}
    assert info["parameters"] == file_parameters(d)
    assert 0 < info["active_parameters"] < info["parameters"]


def test_qwen3_5_moe_hf_layout(spindle_bin, moe_models, tmp_path):  # noqa: F811
    """transformers' Qwen3_5Moe checkpoint (model.language_model.* names,
    conv1d [C, 1, K], (1 + w) norms stored as w, each layer's experts one
    bare gate_up_proj [E, 2 inter, hidden] of gate rows then up rows and
    one down_proj), written from the MLX model: Spindle must compute what
    mlx-lm computes after its qwen3_5_moe sanitize."""
    mx = pytest.importorskip("mlx.core")
    mlu = pytest.importorskip("mlx_lm.utils")
    src = moe_models / "qwen3_5_moe-f32"
    weights = {}
    for f in sorted(src.glob("*.safetensors")):
        weights.update(mx.load(str(f)))
    hf = {}
    for k, v in weights.items():
        k = k.replace("language_model.model.", "model.language_model.")
        if "conv1d.weight" in k:
            v = v.moveaxis(2, 1)
        elif k.endswith(NORMS_PLUS_ONE):
            v = v - 1.0
        if ".switch_mlp.up_proj." in k:
            continue
        if ".switch_mlp.gate_proj." in k:
            up = weights[k.replace("model.language_model.",
                                   "language_model.model.")
                         .replace("gate_proj", "up_proj")]
            k = k.replace("switch_mlp.gate_proj.weight", "experts.gate_up_proj")
            v = mx.concatenate([v, up], axis=1)
        elif ".switch_mlp.down_proj." in k:
            k = k.replace("switch_mlp.down_proj.weight", "experts.down_proj")
        hf[k] = v
    d = tmp_path / "hf"
    d.mkdir()
    mx.save_safetensors(str(d / "model.safetensors"), hf)
    (d / "config.json").write_text((src / "config.json").read_text())
    prompt = qm.PROMPTS["len40"]
    model, _ = mlu.load_model(d)
    model.set_dtype(mx.float32)
    want = np.array(model(mx.array([prompt]))[0, -1])
    _, dump = tp.run_spindle(spindle_bin, d, prompt, tmp_path, 1)
    err = float(np.max(np.abs(np.load(dump) - want)) / np.std(want))
    assert err <= tp.TOL_F32_REL, f"max|err|/std {err:.4g}"
