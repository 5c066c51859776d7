"""sp_rope_init / sp_rope_apply against the reference libraries.

The C side runs through tests/tools/rope_harness (built by CMake into
$SPINDLE_BUILD_DIR, default <repo>/build). Each realistic config is compared
with:
  * mlx-lm's rope classes (initialize_rope): inverse frequencies and attention
    scale where the class exposes them (Llama3RoPE, YarnRoPE), and the
    rotated output of the mlx module at a few positions for every type;
  * transformers' ROPE_INIT_FUNCTIONS (inv_freq, attention_factor).
mlx-lm is the parity target; where the two references disagree (documented in
src/compute/rope.c) the C code must match mlx-lm, and a test pins the
disagreement so that a change in either library is noticed.

transformers' rope functions are written against torch. When torch is not
installed (it is not in tests/requirements.txt), they are run unchanged with a
minimal numpy stand-in for the handful of torch calls they make (arange,
.to/.float, clamp, where), with float32 semantics as in torch.
"""

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SPINDLE_BUILD_DIR", REPO / "build"))
HARNESS = BUILD / "rope_harness"


# ---------------------------------------------------------------- C side

def run_harness(cfg, apply_pos=None, head_dim=None, n_heads=1):
    if not HARNESS.exists():
        pytest.fail(f"{HARNESS} not built (cmake --build {BUILD})")
    args = [str(HARNESS)] + [f"{k}={v}" for k, v in cfg.items()]
    if apply_pos is not None:
        args += [f"apply_pos={apply_pos}", f"head_dim={head_dim}",
                 f"n_heads={n_heads}"]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


# ---------------------------------------------------------------- configs
# Each: harness arguments, the HF-style rope dict, head_dim and
# partial_rotary_factor. Values are those of the published model configs.

CONFIGS = {
    "qwen3_default": dict(
        c=dict(type="default", rotary_dim=128, theta=1e6),
        hf=dict(rope_type="default", rope_theta=1e6), head_dim=128),
    "phi2_partial_default": dict(
        c=dict(type="default", rotary_dim=32, theta=10000.0),
        hf=dict(rope_type="default", rope_theta=10000.0,
                partial_rotary_factor=0.4), head_dim=80),
    "linear_x4": dict(
        c=dict(type="linear", rotary_dim=128, theta=10000.0, factor=4.0),
        hf=dict(rope_type="linear", rope_theta=10000.0, factor=4.0),
        head_dim=128),
    "llama31_8b": dict(
        c=dict(type="llama3", rotary_dim=128, theta=500000.0, factor=8.0,
               low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position=8192),
        hf=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=8192), head_dim=128),
    "llama32_1b": dict(
        c=dict(type="llama3", rotary_dim=64, theta=500000.0, factor=32.0,
               low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position=8192),
        hf=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0,
                low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=8192), head_dim=64),
    "qwen3_yarn": dict(
        c=dict(type="yarn", rotary_dim=128, theta=1e6, factor=4.0,
               original_max_position=32768),
        hf=dict(rope_type="yarn", rope_theta=1e6, factor=4.0,
                original_max_position_embeddings=32768), head_dim=128),
    "deepseek_v3_yarn": dict(
        c=dict(type="yarn", rotary_dim=64, theta=10000.0, factor=40.0,
               beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0,
               original_max_position=4096),
        hf=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0,
                beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0,
                original_max_position_embeddings=4096), head_dim=64),
    "gpt_oss_yarn_truncated": dict(
        c=dict(type="yarn", rotary_dim=64, theta=150000.0, factor=32.0,
               beta_fast=32, beta_slow=1, original_max_position=4096),
        hf=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0,
                beta_fast=32.0, beta_slow=1.0,
                original_max_position_embeddings=4096), head_dim=64),
}

# mlx-lm and transformers disagree on these (see src/compute/rope.c); the C
# code follows mlx-lm.
MLX_ONLY = {
    # gpt-oss's real config has truncate=false, which mlx-lm ignores.
    "gpt_oss_yarn": dict(
        c=dict(type="yarn", rotary_dim=64, theta=150000.0, factor=32.0,
               beta_fast=32, beta_slow=1, original_max_position=4096),
        hf=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0,
                beta_fast=32.0, beta_slow=1.0, truncate=False,
                original_max_position_embeddings=4096), head_dim=64),
    # mscale without mscale_all_dim: mlx-lm uses it, transformers does not.
    "yarn_mscale_only": dict(
        c=dict(type="yarn", rotary_dim=64, theta=10000.0, factor=16.0,
               mscale=0.707, original_max_position=4096),
        hf=dict(rope_type="yarn", rope_theta=10000.0, factor=16.0,
                mscale=0.707, original_max_position_embeddings=4096),
        head_dim=64),
}

ALL = {**CONFIGS, **MLX_ONLY}


# ---------------------------------------------------------------- mlx-lm

def mlx_rope(spec):
    from mlx_lm.models.rope_utils import initialize_rope
    hf = dict(spec["hf"])
    hf.pop("partial_rotary_factor", None)
    theta = hf.pop("rope_theta")
    scaling = None if hf["rope_type"] == "default" else hf
    return initialize_rope(spec["c"]["rotary_dim"], theta, False, scaling,
                           max_position_embeddings=131072)


def mlx_apply(rope, x, n_heads, head_dim, pos):
    import mlx.core as mx
    a = mx.array(np.asarray(x, dtype=np.float32).reshape(1, n_heads, 1,
                                                         head_dim))
    y = rope(a, offset=pos)
    return np.array(y, dtype=np.float32).reshape(-1)


@pytest.mark.parametrize("name", sorted(ALL))
def test_inv_freq_vs_mlx(name):
    spec = ALL[name]
    rope = mlx_rope(spec)
    got = run_harness(spec["c"])
    inv = np.array(got["inv_freq"], dtype=np.float64)
    if hasattr(rope, "_freqs"):
        want = 1.0 / np.array(rope._freqs, dtype=np.float64)
        np.testing.assert_allclose(inv, want, rtol=1e-6, atol=0)
    want_scale = getattr(rope, "mscale", 1.0)
    assert got["attn_scale"] == pytest.approx(want_scale, rel=1e-6)


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("pos", [0, 1, 37, 4000])
def test_apply_vs_mlx(name, pos):
    spec = ALL[name]
    head_dim, n_heads = spec["head_dim"], 3
    got = run_harness(spec["c"], apply_pos=pos, head_dim=head_dim,
                      n_heads=n_heads)
    want = mlx_apply(mlx_rope(spec), got["x"], n_heads, head_dim, pos)
    y = np.array(got["y"], dtype=np.float32)
    # The angle pos * inv_freq is float32 in both; inverse frequencies that
    # differ by an ulp move it by ~pos * 2^-24 rad, which bounds the error.
    # With |x| <= 2 and attn_scale < 2 that is below pos * 2^-22.
    tol = 1e-5 + pos * 2.0 ** -22
    np.testing.assert_allclose(y, want, rtol=0, atol=tol)


# ---------------------------------------------------------------- transformers

def _torch_standin():
    """numpy with torch's float32 semantics for the calls the rope
    functions make; only used when torch is absent."""

    class T(np.ndarray):
        def to(self, device=None, dtype=None):
            return self if dtype is None else self.astype(dtype).view(T)

        def float(self):
            return self.astype(np.float32).view(T)

    def arange(start, end=None, step=1, dtype=None, device=None):
        if end is None:
            start, end = 0, start
        return np.arange(start, end, step,
                         dtype=dtype or np.int64).view(T)

    t = types.SimpleNamespace(
        float=np.float32, float32=np.float32, int64=np.int64,
        arange=arange,
        clamp=lambda x, lo, hi: np.clip(x, lo, hi).view(T),
        where=lambda c, a, b: np.where(c, a, b).view(T),
        Tensor=T)
    return t


def hf_rope(spec):
    import transformers.modeling_rope_utils as mru
    from transformers import LlamaConfig
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
        mru.torch = _torch_standin()
    hf = dict(spec["hf"])
    # Context length consistent with the scaling, as in the real configs
    # (transformers warns when factor disagrees with it).
    max_pos = 131072
    if "factor" in hf and "original_max_position_embeddings" in hf:
        max_pos = int(hf["factor"] * hf["original_max_position_embeddings"])
    cfg = LlamaConfig(hidden_size=spec["head_dim"] * 4, num_attention_heads=4,
                      head_dim=spec["head_dim"],
                      max_position_embeddings=max_pos, rope_parameters=hf)
    kind = hf["rope_type"]
    if kind == "default":
        if have_torch:
            from transformers.models.llama.modeling_llama import \
                LlamaRotaryEmbedding
            inv, att = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
        else:
            # Without torch the model module cannot be imported; the default
            # parameters are the linear ones at factor 1.
            cfg.rope_parameters["factor"] = 1.0
            inv, att = mru.ROPE_INIT_FUNCTIONS["linear"](cfg, None)
    else:
        inv, att = mru.ROPE_INIT_FUNCTIONS[kind](cfg, None)
    return np.array(inv, dtype=np.float64), float(att)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_inv_freq_vs_transformers(name):
    spec = CONFIGS[name]
    inv, att = hf_rope(spec)
    got = run_harness(spec["c"])
    np.testing.assert_allclose(np.array(got["inv_freq"]), inv, rtol=1e-6,
                               atol=0)
    assert got["attn_scale"] == pytest.approx(att, rel=1e-6)


@pytest.mark.parametrize("name", sorted(MLX_ONLY))
def test_references_disagree_where_documented(name):
    """The C code follows mlx-lm here; this pins that transformers differs,
    so the divergence is known rather than accidental."""
    spec = MLX_ONLY[name]
    inv, att = hf_rope(spec)
    got = run_harness(spec["c"])
    c_inv = np.array(got["inv_freq"])
    same_inv = np.allclose(c_inv, inv, rtol=1e-6, atol=0)
    same_att = math.isclose(got["attn_scale"], att, rel_tol=1e-6)
    assert not (same_inv and same_att)


def test_explicit_attention_factor_matches_transformers():
    """attention_factor given in the config: transformers uses it (mlx-lm
    ignores the key), and so does sp_rope_init when it is > 0."""
    spec = dict(CONFIGS["qwen3_yarn"])
    spec["c"] = dict(spec["c"], attention_factor=0.8)
    spec["hf"] = dict(spec["hf"], attention_factor=0.8)
    inv, att = hf_rope(spec)
    got = run_harness(spec["c"])
    assert att == pytest.approx(0.8)
    assert got["attn_scale"] == pytest.approx(att, rel=1e-7)
    np.testing.assert_allclose(np.array(got["inv_freq"]), inv, rtol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
