#!/usr/bin/env python3
"""Build tiny random-weight Qwen3-MoE models and their mlx-lm references.

Same method and CLI as make_models.py, whose helpers build everything: each
model is created by mlx-lm's own qwen3_moe Model (8 experts, 2 per token),
cast / quantized / saved by mlx-lm's code (its quantize_model applies the
family's quant_predicate, which keeps the router mlp.gate at 8 bits g64),
reloaded from disk with mlx_lm.utils.load_model and run by
mlx_lm.generate.generate_step in its stored dtype and upcast to float32
(unquantized bf16 only upcast: mlx's CPU gather_mm multiplies float32
only).

The set covers norm_topk_prob true and false, f32 / bf16 / MLX 4-bit and
8-bit experts, dense layers next to MoE ones (decoder_sparse_step 2 and
mlp_only_layers), and the Hugging Face layout: "-hf" stores the experts
unstacked (mlp.experts.N.{gate,up,down}_proj.weight, as transformers
checkpoints do), which mlx-lm's sanitize stacks again when it loads the
directory; its references come from that reload.

The 7- and 40-token prompts route several rows to each expert in one
forward pass (Spindle's grouped prefill); decoding routes one.

Usage: python tests/parity/make_moe_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-moe"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = mm.PROMPTS          # lengths 1, 7, 40; ids < 500

BASE = {
    # Every in-dimension (hidden 128, moe_intermediate 64, intermediate 192)
    # is a multiple of 64 (MLX groups) and of 32 (GGUF blocks).
    "qwen3_moe": dict(
        model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"],
        hidden_size=128, num_hidden_layers=3, intermediate_size=192,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rms_norm_eps=1e-6, rope_theta=1000000.0, vocab_size=512,
        max_position_embeddings=4096,
    ),
}

# decoder_sparse_step 2 makes layers 0 and 2 dense; mlp_only_layers [0]
# makes layer 0 dense.
SPARSE = {"decoder_sparse_step": 2}
MLP_ONLY = {"mlp_only_layers": [0]}
NO_NORM = {"norm_topk_prob": False}


def _spec(name, dtype, tied=False, quant=None, cfg=None, layout="stacked"):
    s = mm._spec(name, "qwen3_moe", dtype, tied=tied, quant=quant, cfg=cfg)
    s["layout"] = layout
    return s


SPECS = [
    _spec("qmoe-f32", "float32"),
    _spec("qmoe-f32-hf", "float32", cfg=NO_NORM, layout="hf"),
    _spec("qmoe-bf16", "bfloat16", tied=True, cfg=NO_NORM),
    _spec("qmoe-q4g64", "bfloat16", quant=mm._q(4, 64), cfg=MLP_ONLY),
    _spec("qmoe-q8g64", "bfloat16", tied=True, quant=mm._q(8, 64),
          cfg=NO_NORM),
    _spec("qmoe-sparse-f32", "float32", tied=True, cfg={**SPARSE, **NO_NORM}),
]


def source_hash():
    """Identity of this generator and of the helpers it borrows."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(mm.__file__).read_bytes())
    return h.hexdigest()


def unstack_experts(path):
    """Rewrite the saved model with every switch_mlp.<proj>.weight [E, out,
    in] split into mlp.experts.<e>.<proj>.weight, in one file."""
    mx = mm.mx
    weights, index = mm.take_saved_weights(path)
    out = {}
    for name, w in weights.items():
        if ".mlp.switch_mlp." in name:
            layer, rest = name.split(".mlp.switch_mlp.")
            for e in range(w.shape[0]):
                out[f"{layer}.mlp.experts.{e}.{rest}"] = w[e]
        else:
            out[name] = w
    mx.save_safetensors(str(path / "model.safetensors"), out,
                        metadata={"format": "mlx"})
    index["weight_map"] = {n: "model.safetensors" for n in sorted(out)}
    (path / "model.safetensors.index.json").write_text(
        json.dumps(index, indent=4) + "\n")


def build_one(spec, out):
    rewrite = unstack_experts if spec["layout"] == "hf" else None
    # mlx's CPU gather_mm multiplies float32 only (gather_qmm takes bf16):
    # unquantized bf16 experts run upcast.
    native = spec["dtype"] == "float32" or spec["quant"] is not None
    return mm.build_one(spec, out, base=BASE, rewrite=rewrite,
                        native=native)


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
