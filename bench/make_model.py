"""Write a random-weight model with Qwen3-0.6B's shapes for benchmarks.

usage: python bench/make_model.py OUT_DIR [--dtype bfloat16|float16|float32]
                                 [--bits 4|8 --group-size 64]

The weights are random (speed does not depend on them); the layout, dtypes
and MLX quantization are written by mlx / mlx-lm's own code.
"""
import argparse
import os

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map
from mlx_lm.models import qwen3
from mlx_lm.utils import save_config, save_model

QWEN3_06B = dict(
    model_type="qwen3", hidden_size=1024, num_hidden_layers=28,
    intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8,
    head_dim=128, rms_norm_eps=1e-6, vocab_size=151936, rope_theta=1000000.0,
    max_position_embeddings=40960, tie_word_embeddings=True,
    eos_token_id=151645,
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--bits", type=int, default=0)
    ap.add_argument("--group-size", type=int, default=64)
    a = ap.parse_args()
    cfg = dict(QWEN3_06B, torch_dtype=a.dtype)
    mx.random.seed(0)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(cfg))
    dtype = getattr(mx, a.dtype)
    model.update(tree_map(lambda p: (mx.random.normal(p.shape) * 0.02).astype(dtype),
                          model.parameters()))
    if a.bits:
        nn.quantize(model, group_size=a.group_size, bits=a.bits)
        cfg["quantization"] = {"group_size": a.group_size, "bits": a.bits}
    mx.eval(model.parameters())
    os.makedirs(a.out, exist_ok=True)
    save_model(a.out, model)
    save_config(cfg, os.path.join(a.out, "config.json"))
    print(a.out)


if __name__ == "__main__":
    main()
