#!/usr/bin/env python3
"""Build tiny random-weight multi-head latent attention models (DeepSeek-V3,
GLM-4.7-Flash) and their mlx-lm references.

Same method and CLI as make_models.py, whose helpers build everything: each
model is created by mlx-lm's own deepseek_v3 / glm4_moe_lite Model, cast /
quantized / saved by mlx-lm's code, reloaded from disk with
mlx_lm.utils.load_model and run by mlx_lm.generate.generate_step in its
stored dtype and upcast to float32 (unquantized bf16 only upcast: mlx's CPU
gather_mm multiplies float32 only).

mlx-lm saves the attention's kv_b_proj already split, as self_attn.embed_q
[heads][kv_lora_rank][qk_nope_head_dim] and self_attn.unembed_out
[heads][v_head_dim][kv_lora_rank] (its sanitize's form, quantized per head
by its QuantizedMultiLinear); "-hf" joins them back into the Hugging Face
kv_b_proj [heads * (qk_nope + v)][kv_lora_rank], which mlx-lm's sanitize
splits again when it reloads the directory.

The set covers q_lora_rank present and null, group-limited routing (8
experts in 4 groups, 2 groups kept) and plain top-k, norm_topk_prob true
and false, routed_scaling_factor, a shared expert, first_k_dense_replace,
YaRN with mscale / mscale_all_dim (a scale on the scores and on cos/sin),
f32 / bf16 / MLX 4-bit, glm4_moe_lite (its latent norms take
rms_norm_eps) and kimi_k2 (deepseek_v3 under another name).

Usage: python tests/parity/make_mla_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-mla"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = mm.PROMPTS          # lengths 1, 7, 40; ids < 500

_COMMON = dict(
    hidden_size=128, num_hidden_layers=3, intermediate_size=192,
    num_attention_heads=4, num_key_value_heads=4,
    # every in-dimension a multiple of 64 (MLX groups): embed_q reads
    # qk_nope (64), unembed_out kv_lora_rank (64), o_proj heads * v (256)
    kv_lora_rank=64, q_lora_rank=64, qk_nope_head_dim=64,
    qk_rope_head_dim=32, v_head_dim=64,
    n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
    n_shared_experts=1, routed_scaling_factor=2.5, n_group=4, topk_group=2,
    topk_method="noaux_tc", scoring_func="sigmoid", norm_topk_prob=True,
    first_k_dense_replace=1, moe_layer_freq=1,
    rms_norm_eps=1e-6, rope_theta=10000.0, vocab_size=512,
    max_position_embeddings=4096, attention_bias=False,
)

BASE = {
    "deepseek_v3": dict(model_type="deepseek_v3",
                        architectures=["DeepseekV3ForCausalLM"], **_COMMON),
    # mlx-lm maps model_type kimi_k2 to its deepseek_v3 class
    "kimi_k2": dict(model_type="kimi_k2",
                    architectures=["DeepseekV3ForCausalLM"], **_COMMON),
    "glm4_moe_lite": dict(model_type="glm4_moe_lite",
                          architectures=["Glm4MoeLiteForCausalLM"],
                          **{**_COMMON, "rms_norm_eps": 1e-5}),
}

YARN = {"rope_scaling": {"type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 1024,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                         "mscale_all_dim": 0.707}}
PLAIN = {"q_lora_rank": None, "n_group": 1, "topk_group": 1,
         "norm_topk_prob": False, "first_k_dense_replace": 0,
         "n_shared_experts": None}


def _spec(name, arch, dtype, tied=False, quant=None, cfg=None, layout="mlx"):
    s = mm._spec(name, arch, dtype, tied=tied, quant=quant, cfg=cfg)
    s["layout"] = layout
    return s


SPECS = [
    _spec("dsv3-f32", "deepseek_v3", "float32"),
    _spec("dsv3-plain-yarn-f32", "deepseek_v3", "float32",
          cfg={**PLAIN, **YARN}),
    _spec("dsv3-f32-hf", "deepseek_v3", "float32", cfg=YARN, layout="hf"),
    _spec("dsv3-bf16", "deepseek_v3", "bfloat16"),
    _spec("dsv3-q4g64", "deepseek_v3", "bfloat16", quant=mm._q(4, 64)),
    _spec("glm-lite-f32", "glm4_moe_lite", "float32"),
    _spec("kimi-k2-f32", "kimi_k2", "float32", cfg=PLAIN),
]


def source_hash():
    """Identity of this generator and of the helpers it borrows."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(mm.__file__).read_bytes())
    return h.hexdigest()


def join_kv_b(path):
    """Rewrite the saved model with each layer's self_attn.embed_q and
    unembed_out joined into the Hugging Face kv_b_proj.weight (float)."""
    mx = mm.mx
    weights, index = mm.take_saved_weights(path)
    out = {}
    for name, w in weights.items():
        if name.endswith("self_attn.embed_q.weight"):
            prefix = name[: -len("embed_q.weight")]
            wk = w.swapaxes(-1, -2)                       # [H][nope][R]
            wv = weights[prefix + "unembed_out.weight"]   # [H][v][R]
            kv_b = mx.concatenate([wk, wv], axis=1)
            out[prefix + "kv_b_proj.weight"] = kv_b.reshape(-1, w.shape[1])
        elif not name.endswith("self_attn.unembed_out.weight"):
            out[name] = w
    mx.save_safetensors(str(path / "model.safetensors"), out,
                        metadata={"format": "mlx"})
    index["weight_map"] = {n: "model.safetensors" for n in sorted(out)}
    (path / "model.safetensors.index.json").write_text(
        json.dumps(index, indent=4) + "\n")


def build_one(spec, out):
    rewrite = join_kv_b if spec["layout"] == "hf" else None
    native = spec["dtype"] == "float32" or spec["quant"] is not None
    return mm.build_one(spec, out, base=BASE, rewrite=rewrite,
                        native=native)


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
