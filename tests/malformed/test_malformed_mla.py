"""`spindle info -m DIR` on broken DeepSeek-V3 (multi-head latent
attention) models: config keys and tensors.

A tiny deepseek_v3 directory (2 layers: one dense, one with 8 routed
experts in 4 groups and a shared one; q_lora_rank set; mlx-lm's split
embed_q / unembed_out) is written by hand with numpy and the safetensors
byte layout of test_malformed_models.py; each case breaks one thing: a
missing kv_lora_rank or rope dimension, an odd qk_rope_head_dim, a rope
dimension that disagrees with kv_a_proj_with_mqa, groups that cannot give
the top-k, an unknown topk_method or scoring_func, a missing embed_q or
correction bias. Spindle must
exit non-zero without a signal and print exactly one line on stderr
naming the key or tensor at fault.
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import test_malformed_models as tm  # noqa: E402
import test_malformed_moe as tmoe  # noqa: E402

pytestmark = tm.pytestmark

HIDDEN, HEADS, VOCAB, INTER = 64, 2, 64, 96
QLORA, RANK, NOPE, ROPE, VDIM = 32, 32, 32, 16, 32
EXPERTS, USED, MOE_INTER = 8, 2, 32

CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": HIDDEN, "num_hidden_layers": 2,
    "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
    "intermediate_size": INTER, "vocab_size": VOCAB,
    "q_lora_rank": QLORA, "kv_lora_rank": RANK, "qk_nope_head_dim": NOPE,
    "qk_rope_head_dim": ROPE, "v_head_dim": VDIM,
    "n_routed_experts": EXPERTS, "num_experts_per_tok": USED,
    "moe_intermediate_size": MOE_INTER, "n_shared_experts": 1,
    "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid",
    "norm_topk_prob": True, "first_k_dense_replace": 1,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "max_position_embeddings": 256,
    "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}


def tensors():
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    one = lambda n: np.ones(n, np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": w(VOCAB, HIDDEN),
         "lm_head.weight": w(VOCAB, HIDDEN), "model.norm.weight": one(HIDDEN)}
    for layer in range(2):
        p = f"model.layers.{layer}."
        a = p + "self_attn."
        t[p + "input_layernorm.weight"] = one(HIDDEN)
        t[p + "post_attention_layernorm.weight"] = one(HIDDEN)
        t[a + "q_a_proj.weight"] = w(QLORA, HIDDEN)
        t[a + "q_a_layernorm.weight"] = one(QLORA)
        t[a + "q_b_proj.weight"] = w(HEADS * (NOPE + ROPE), QLORA)
        t[a + "kv_a_proj_with_mqa.weight"] = w(RANK + ROPE, HIDDEN)
        t[a + "kv_a_layernorm.weight"] = one(RANK)
        t[a + "embed_q.weight"] = w(HEADS, RANK, NOPE)
        t[a + "unembed_out.weight"] = w(HEADS, VDIM, RANK)
        t[a + "o_proj.weight"] = w(HIDDEN, HEADS * VDIM)
        if layer == 0:
            t[p + "mlp.gate_proj.weight"] = w(INTER, HIDDEN)
            t[p + "mlp.up_proj.weight"] = w(INTER, HIDDEN)
            t[p + "mlp.down_proj.weight"] = w(HIDDEN, INTER)
            continue
        m = p + "mlp."
        t[m + "gate.weight"] = w(EXPERTS, HIDDEN)
        t[m + "gate.e_score_correction_bias"] = w(EXPERTS)
        for proj, shape in {"gate_proj": (MOE_INTER, HIDDEN),
                            "up_proj": (MOE_INTER, HIDDEN),
                            "down_proj": (HIDDEN, MOE_INTER)}.items():
            t[m + f"switch_mlp.{proj}.weight"] = w(EXPERTS, *shape)
            t[m + f"shared_experts.{proj}.weight"] = w(*shape)
    return t


def test_valid_mla_model_is_accepted(tmp_path):
    proc = tmoe.run_info(tmoe.write(tmp_path / "m", tensors(), CONFIG))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["state"]["latent_kv"] == 2, info["state"]


def _drop(name):
    def edit(t):
        del t[name]
    return edit


A0 = "model.layers.0.self_attn."
CASES = [
    ("no_kv_lora_rank", {"kv_lora_rank": None}, None, "kv_lora_rank"),
    ("no_rope_dim", {"qk_rope_head_dim": None}, None, "qk_rope_head_dim"),
    ("odd_rope_dim", {"qk_rope_head_dim": 15}, None, "qk_rope_head_dim"),
    # the queries' rotary part is checked first
    ("rope_dim_vs_tensors", {"qk_rope_head_dim": 8}, None,
     A0 + "q_b_proj.weight"),
    ("rank_vs_embed_q", {"kv_lora_rank": 16}, None,
     A0 + "kv_a_proj_with_mqa.weight"),
    ("zero_rank", {"kv_lora_rank": 0}, None, "kv_lora_rank"),
    ("groups_cannot_give_top_k", {"n_group": 4, "topk_group": 1,
                                  "num_experts_per_tok": 3}, None,
     "num_experts_per_tok"),
    ("experts_not_in_groups", {"n_group": 3}, None, "n_group"),
    ("topk_method", {"topk_method": "greedy"}, None, "topk_method"),
    ("scoring_func", {"scoring_func": "softmax"}, None, "scoring_func"),
    ("no_embed_q", {}, _drop(A0 + "embed_q.weight"), A0 + "embed_q"),
    ("no_correction_bias", {},
     _drop("model.layers.1.mlp.gate.e_score_correction_bias"),
     "e_score_correction_bias"),
]


@pytest.mark.parametrize("changes,edit,needle", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_malformed_mla(tmp_path, changes, edit, needle):
    t = tensors()
    if edit:
        edit(t)
    cfg = tmoe.config_with(CONFIG, **changes)
    proc = tmoe.run_info(tmoe.write(tmp_path / "m", t, cfg))
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"
    assert proc.returncode > 0, f"accepted; stdout: {proc.stdout[:300]!r}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, f"want one stderr line, got: {proc.stderr!r}"
    assert needle in lines[0], f"does not name {needle}: {lines[0]}"
