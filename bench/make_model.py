"""Write a random-weight model with Qwen3-0.6B's shapes for benchmarks.

usage: python bench/make_model.py OUT_DIR [--dtype bfloat16|float16|float32]
                                 [--bits 4|8 --group-size 64] [--moe | --hybrid]

--moe: Qwen3-30B-A3B's layer shape (hidden 2048, 32 heads / 4 KV heads,
head_dim 128, 128 experts of 768, 8 per token, vocab 151936, untied head)
but 8 layers instead of 48, as mlx-lm's qwen3_moe; quantized by mlx-lm's
quantize_model, whose qwen3_moe predicate keeps the router at 8 bits.

--hybrid: a Qwen3.5-style hybrid of 1.09 G parameters (mlx-lm's qwen3_5, the
text_config form mlx-community ships): hidden 1536, 24 layers, every 4th
gated attention (8 heads / 2 KV heads of 256, partial rotary 0.25), the
others gated DeltaNet (16 key and 16 value heads of 128, conv kernel 4),
SwiGLU of 4608, Qwen3's vocabulary of 151936, tied embeddings.

The weights are random (speed does not depend on them); the layout, dtypes
and MLX quantization are written by mlx / mlx-lm's own code. They stay lazy
until save_model writes them shard by shard, so the 8-layer MoE (4.8 G
parameters) never needs all of its bf16 weights in memory at once.
"""
import argparse
import os

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map
from mlx_lm.models import qwen3, qwen3_5, qwen3_moe
from mlx_lm.utils import quantize_model, save_config, save_model

QWEN3_06B = dict(
    model_type="qwen3", hidden_size=1024, num_hidden_layers=28,
    intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8,
    head_dim=128, rms_norm_eps=1e-6, vocab_size=151936, rope_theta=1000000.0,
    max_position_embeddings=40960, tie_word_embeddings=True,
    eos_token_id=151645,
)

QWEN3_30B_A3B_8L = dict(
    model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=8,
    intermediate_size=6144, num_attention_heads=32, num_key_value_heads=4,
    head_dim=128, num_experts=128, num_experts_per_tok=8,
    moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1,
    mlp_only_layers=[], rms_norm_eps=1e-6, vocab_size=151936,
    rope_theta=1000000.0, max_position_embeddings=40960,
    tie_word_embeddings=False, eos_token_id=151645,
)

QWEN35_1B_TEXT = dict(
    model_type="qwen3_5_text", hidden_size=1536, num_hidden_layers=24,
    intermediate_size=4608, num_attention_heads=8, num_key_value_heads=2,
    head_dim=256, rms_norm_eps=1e-6, vocab_size=151936,
    max_position_embeddings=40960, full_attention_interval=4,
    linear_num_key_heads=16, linear_num_value_heads=16,
    linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                     "partial_rotary_factor": 0.25,
                     "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    eos_token_id=151645,
)
QWEN35_1B = dict(model_type="qwen3_5", text_config=QWEN35_1B_TEXT,
                 tie_word_embeddings=True, vocab_size=151936,
                 eos_token_id=151645)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--bits", type=int, default=0)
    ap.add_argument("--group-size", type=int, default=64)
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--moe", action="store_true",
                      help="Qwen3-30B-A3B's layer shape, 8 layers (qwen3_moe)")
    kind.add_argument("--hybrid", action="store_true",
                      help="a Qwen3.5-style 1.09 G hybrid (qwen3_5)")
    a = ap.parse_args()
    family, base = ((qwen3_moe, QWEN3_30B_A3B_8L) if a.moe else
                    (qwen3_5, QWEN35_1B) if a.hybrid else (qwen3, QWEN3_06B))
    cfg = dict(base, torch_dtype=a.dtype)
    mx.random.seed(0)
    model = family.Model(family.ModelArgs.from_dict(cfg))
    dtype = getattr(mx, a.dtype)
    model.update(tree_map(lambda p: (mx.random.normal(p.shape) * 0.02).astype(dtype),
                          model.parameters()))
    if a.bits and (a.moe or a.hybrid):
        model, cfg = quantize_model(model, cfg, a.group_size, a.bits)
    elif a.bits:
        nn.quantize(model, group_size=a.group_size, bits=a.bits)
        cfg["quantization"] = {"group_size": a.group_size, "bits": a.bits}
    if not a.moe:
        mx.eval(model.parameters())
    os.makedirs(a.out, exist_ok=True)
    save_model(a.out, model)
    save_config(cfg, os.path.join(a.out, "config.json"))
    print(a.out)


if __name__ == "__main__":
    main()
