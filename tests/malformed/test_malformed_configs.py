"""`spindle info -m DIR` on config.json values the dense families add.

For each family (smollm3, phi3, olmo2/olmo3, granite, ministral3) a tiny
valid model directory is written by hand (numpy + the safetensors byte
layout of test_malformed_models.py) and must load; each case then breaks
one of the family's own keys (a list of the wrong length, a factor out of
range, a missing required multiplier...). Spindle must exit non-zero
without a signal and print exactly one stderr line naming config.json and
the key.
"""
import copy
import json
import os
import subprocess

import numpy as np
import pytest
from test_malformed_models import SPINDLE_BIN, TIMEOUT_S, safetensors_bytes

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(SPINDLE_BIN) and os.access(SPINDLE_BIN, os.X_OK)),
    reason=f"spindle binary not found at {SPINDLE_BIN} (set SPINDLE_BIN)")

HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 64, 4, 4, 2, 128, 128
HEAD_DIM = HIDDEN // HEADS

COMMON = {
    "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
    "intermediate_size": INTER, "vocab_size": VOCAB, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "max_position_embeddings": 256,
    "tie_word_embeddings": True, "torch_dtype": "float32",
}

CONFIGS = {
    "smollm3": {"no_rope_layer_interval": 2},
    "phi3": {"partial_rotary_factor": 0.5,
             "original_max_position_embeddings": 64,
             "rope_scaling": {"type": "longrope", "long_factor": [1.5] * 4,
                              "short_factor": [1.0] * 4}},
    "olmo2": {},
    "olmo3": {"sliding_window": 8,
              "layer_types": ["sliding_attention", "full_attention"] * 2},
    "granite": {"embedding_multiplier": 12.0, "attention_multiplier": 0.1,
                "residual_multiplier": 0.2, "logits_scaling": 4.0},
    "ministral3": {"rope_parameters": {
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
        "original_max_position_embeddings": 32,
        "llama_4_scaling_beta": 0.1}},
}


def tensors(family):
    """The family's Hugging Face tensor names and shapes, random f32."""
    rng = np.random.default_rng(0)
    qw, kw = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM

    def w(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    t = {"model.embed_tokens.weight": w(VOCAB, HIDDEN),
         "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        olmo = family.startswith("olmo")
        if not olmo:
            t[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        if olmo:
            t[p + "post_feedforward_layernorm.weight"] = np.ones(
                HIDDEN, np.float32)
            t[p + "self_attn.q_norm.weight"] = np.ones(qw, np.float32)
            t[p + "self_attn.k_norm.weight"] = np.ones(kw, np.float32)
        if family == "phi3":
            t[p + "self_attn.qkv_proj.weight"] = w(qw + 2 * kw, HIDDEN)
            t[p + "mlp.gate_up_proj.weight"] = w(2 * INTER, HIDDEN)
        else:
            t[p + "self_attn.q_proj.weight"] = w(qw, HIDDEN)
            t[p + "self_attn.k_proj.weight"] = w(kw, HIDDEN)
            t[p + "self_attn.v_proj.weight"] = w(kw, HIDDEN)
            t[p + "mlp.gate_proj.weight"] = w(INTER, HIDDEN)
            t[p + "mlp.up_proj.weight"] = w(INTER, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = w(HIDDEN, qw)
        t[p + "mlp.down_proj.weight"] = w(HIDDEN, INTER)
    return t


def config(family):
    return dict(COMMON, model_type=family, **copy.deepcopy(CONFIGS[family]))


def write(d, family, cfg):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    (d / "model.safetensors").write_bytes(safetensors_bytes(tensors(family)))
    return d


def run_info(d):
    return subprocess.run([SPINDLE_BIN, "info", "-m", str(d)],
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          errors="replace")


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_valid_family_model_is_accepted(tmp_path, family):
    r = run_info(write(tmp_path / family, family, config(family)))
    assert r.returncode == 0, r.stderr


def _set(key, value):
    """An edit of config.json: key := value (None: removed); "a.b" reaches
    into block a."""
    def edit(cfg):
        block = cfg
        *outer, last = key.split(".")
        for k in outer:
            block = block[k]
        if value is None:
            block.pop(last, None)
        else:
            block[last] = value
    return edit


CASES = [
    ("smollm3", "no_rope_layers", [1, 0, 1], "no_rope_layers"),
    ("smollm3", "no_rope_layers", [1, 0, 2, 1], "no_rope_layers[2]"),
    ("smollm3", "no_rope_layers", "all", "no_rope_layers"),
    ("smollm3", "no_rope_layer_interval", 0, "no_rope_layer_interval"),
    ("phi3", "partial_rotary_factor", 1.5, "partial_rotary_factor"),
    ("phi3", "partial_rotary_factor", 0.01, "partial_rotary_factor"),
    ("phi3", "rope_scaling.long_factor", [1.0] * 5, "long_factor"),
    ("phi3", "rope_scaling.long_factor", [1.0] * 3 + [-2], "long_factor[3]"),
    ("phi3", "rope_scaling.long_factor", None, "long_factor"),
    ("phi3", "original_max_position_embeddings", -4,
     "original_max_position_embeddings"),
    ("phi3", "rope_scaling", {"rope_type": "yarn", "factor": 2.0},
     "rope_scaling"),
    ("olmo3", "sliding_window", None, "sliding_window"),
    ("olmo3", "sliding_window", 0, "sliding_window"),
    ("olmo3", "layer_types", ["full_attention"] * 3, "layer_types"),
    ("olmo3", "layer_types", ["full_attention"] * 3 + ["local"],
     "layer_types[3]"),
    ("granite", "residual_multiplier", None, "residual_multiplier"),
    ("granite", "logits_scaling", 0, "logits_scaling"),
    ("granite", "attention_multiplier", "x", "attention_multiplier"),
    ("granite", "head_dim", 8, "head_dim"),
    ("ministral3", "rope_parameters", None, "rope_parameters"),
    ("ministral3", "rope_parameters.llama_4_scaling_beta", None,
     "llama_4_scaling_beta"),
    ("ministral3", "rope_parameters.original_max_position_embeddings", 0.5,
     "original_max_position_embeddings"),
    ("ministral3", "rope_parameters.rope_theta", None, "rope_theta"),
    ("ministral3", "rope_parameters.rope_type", "dynamic", "dynamic"),
]


@pytest.mark.parametrize("family,key,value,needle", CASES,
                         ids=[f"{f}-{k}-{v!r}"[:60] for f, k, v, _ in CASES])
def test_malformed_family_config(tmp_path, family, key, value, needle):
    cfg = config(family)
    _set(key, value)(cfg)
    r = run_info(write(tmp_path / family, family, cfg))
    assert r.returncode >= 0, f"killed by signal {-r.returncode}: {r.stderr!r}"
    assert r.returncode > 0, f"accepted; stdout: {r.stdout[:300]!r}"
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"want one stderr line, got: {r.stderr!r}"
    assert "config.json" in lines[0] and needle in lines[0], lines[0]
