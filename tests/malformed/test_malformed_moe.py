"""`spindle info -m DIR` on broken Qwen3-MoE models (config and tensors).

A tiny qwen3_moe directory (2 layers, 8 experts, 2 per token, stacked
switch_mlp experts as mlx-lm stores them) is written by hand with numpy and
the safetensors byte layout of test_malformed_models.py; each case breaks
one thing: expert counts that do not match the tensors, top-k above the
expert count, zero experts, a wrong expert size or rank, a missing expert
of the per-expert (Hugging Face) layout, bad decoder_sparse_step /
mlp_only_layers, and a GGUF whose expert_count disagrees with its tensors.
Spindle must exit non-zero without a signal and print exactly one line on
stderr naming the key or tensor at fault.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[0]))
import test_malformed_models as tm  # noqa: E402

pytestmark = tm.pytestmark

HIDDEN, LAYERS, HEADS, KV, HEAD_DIM, VOCAB = 64, 2, 2, 1, 32, 64
EXPERTS, USED, MOE_INTER, INTER = 8, 2, 32, 96

CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS, "num_key_value_heads": KV,
    "head_dim": HEAD_DIM, "intermediate_size": INTER, "vocab_size": VOCAB,
    "num_experts": EXPERTS, "num_experts_per_tok": USED,
    "moe_intermediate_size": MOE_INTER, "norm_topk_prob": True,
    "decoder_sparse_step": 1, "mlp_only_layers": [],
    "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "max_position_embeddings": 256,
    "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}


def tensors(layout="stacked"):
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    t = {"model.embed_tokens.weight": w(VOCAB, HIDDEN),
         "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        t[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "self_attn.q_proj.weight"] = w(HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = w(KV * HEAD_DIM, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = w(KV * HEAD_DIM, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = w(HIDDEN, HEADS * HEAD_DIM)
        t[p + "self_attn.q_norm.weight"] = np.ones(HEAD_DIM, np.float32)
        t[p + "self_attn.k_norm.weight"] = np.ones(HEAD_DIM, np.float32)
        t[p + "mlp.gate.weight"] = w(EXPERTS, HIDDEN)
        shapes = {"gate_proj": (MOE_INTER, HIDDEN),
                  "up_proj": (MOE_INTER, HIDDEN),
                  "down_proj": (HIDDEN, MOE_INTER)}
        for proj, shape in shapes.items():
            if layout == "stacked":
                t[p + f"mlp.switch_mlp.{proj}.weight"] = w(EXPERTS, *shape)
            else:
                for e in range(EXPERTS):
                    t[p + f"mlp.experts.{e}.{proj}.weight"] = w(*shape)
    return t


def write(d: Path, t, cfg=None):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg or CONFIG, indent=2))
    (d / "model.safetensors").write_bytes(tm.safetensors_bytes(t))
    return d


def config_with(**changes):
    cfg = dict(CONFIG)
    for k, v in changes.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    return cfg


def run_info(path):
    return subprocess.run([tm.SPINDLE_BIN, "info", "-m", str(path)],
                          capture_output=True, text=True,
                          timeout=tm.TIMEOUT_S, errors="replace")


@pytest.mark.parametrize("layout", ["stacked", "hf"])
def test_valid_moe_model_is_accepted(tmp_path, layout):
    proc = run_info(write(tmp_path / "m", tensors(layout)))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["experts"]["count"] == EXPERTS
    assert info["experts"]["used_per_token"] == USED


def _drop(name):
    def edit(t):
        del t[name]
    return edit


def _replace(name, arr):
    def edit(t):
        t[name] = arr
    return edit


L0 = "model.layers.0.mlp."
# (id, config changes, layout, tensor edit, what the line must name)
CASES = [
    ("experts_fewer_than_tensors", {"num_experts": 4}, "stacked", None,
     L0 + "gate.weight"),
    ("stacked_expert_count", {}, "stacked",
     _replace(L0 + "switch_mlp.up_proj.weight",
              np.zeros((EXPERTS - 1, MOE_INTER, HIDDEN), np.float32)),
     L0 + "switch_mlp.up_proj.weight"),
    ("stacked_rank_2", {}, "stacked",
     _replace(L0 + "switch_mlp.down_proj.weight",
              np.zeros((EXPERTS * HIDDEN, MOE_INTER), np.float32)),
     L0 + "switch_mlp.down_proj.weight"),
    ("expert_size", {"moe_intermediate_size": 16}, "stacked", None,
     L0 + "switch_mlp.gate_proj.weight"),
    ("top_k_above_experts", {"num_experts_per_tok": EXPERTS + 1}, "stacked",
     None, "num_experts_per_tok"),
    ("zero_experts", {"num_experts": 0}, "stacked", None, "num_experts"),
    ("no_num_experts", {"num_experts": None}, "stacked", None, "num_experts"),
    ("zero_top_k", {"num_experts_per_tok": 0}, "stacked", None,
     "num_experts_per_tok"),
    ("no_moe_intermediate_size", {"moe_intermediate_size": None}, "stacked",
     None, "moe_intermediate_size"),
    ("sparse_step_zero", {"decoder_sparse_step": 0}, "stacked", None,
     "decoder_sparse_step"),
    ("mlp_only_not_a_list", {"mlp_only_layers": "0"}, "stacked", None,
     "mlp_only_layers"),
    ("mlp_only_not_an_index", {"mlp_only_layers": [0.5]}, "stacked", None,
     "mlp_only_layers"),
    # a layer made dense by mlp_only_layers must have the dense MLP
    ("dense_layer_without_mlp", {"mlp_only_layers": [1]}, "stacked", None,
     "model.layers.1.mlp.gate_proj.weight"),
    ("hf_missing_expert", {}, "hf",
     _drop("model.layers.1.mlp.experts.3.up_proj.weight"),
     "model.layers.1.mlp.experts.3.up_proj.weight"),
]


@pytest.mark.parametrize("changes,layout,edit,needle",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_moe(tmp_path, changes, layout, edit, needle):
    t = tensors(layout)
    if edit:
        edit(t)
    proc = run_info(write(tmp_path / "m", t, config_with(**changes)))
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"
    assert proc.returncode > 0, f"accepted; stdout: {proc.stdout[:300]!r}"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"want one stderr line, got: {proc.stderr!r}"
    assert needle in lines[0], f"does not name {needle}: {lines[0]}"


def test_gguf_expert_count_mismatch(tmp_path):
    """A GGUF whose expert_count says 4 for tensors of 8 experts."""
    import gguf_writer
    src = write(tmp_path / "m", tensors(), config_with(num_experts=4))
    gguf = gguf_writer.write_gguf(str(src), str(tmp_path / "m.gguf"), "f32")
    proc = run_info(gguf)
    assert proc.returncode > 0, f"accepted; stdout: {proc.stdout[:300]!r}"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"want one stderr line, got: {proc.stderr!r}"
    assert "m.gguf" in lines[0] and "mlp.gate.weight" in lines[0], lines[0]
