#!/usr/bin/env python3
"""Build tiny random-weight GLM-4.5-family (glm4_moe) models and their
mlx-lm references.

Same method and CLI as make_models.py, whose helpers build everything: each
model is created by mlx-lm's own glm4_moe Model, cast / quantized / saved
by mlx-lm's code, reloaded from disk with mlx_lm.utils.load_model and run
by mlx_lm.generate.generate_step in its stored dtype and upcast to float32
(unquantized bf16 only upcast: mlx's CPU gather_mm multiplies float32
only).

The set covers partial rotary (half and a quarter of each head),
attention_bias and use_qk_norm on and off, group-limited routing (8
experts in 4 groups, 2 groups kept) and plain top-k, norm_topk_prob true
and false, routed_scaling_factor, a shared expert and none,
first_k_dense_replace 1 and 0, f32 / bf16 / MLX 4-bit, and ("-hf") the
Hugging Face layout: one tensor per expert (mlp.experts.N.*, which
mlx-lm's sanitize stacks) and a multi-token-prediction layer past
num_hidden_layers (which its sanitize drops, as Spindle does not read it).

Usage: python tests/parity/make_glm4moe_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-glm4moe"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = mm.PROMPTS          # lengths 1, 7, 40; ids < 500

BASE = {
    "glm4_moe": dict(
        model_type="glm4_moe", architectures=["Glm4MoeForCausalLM"],
        # every in-dimension a multiple of 64 (MLX groups): o_proj reads
        # heads * head_dim (128), the experts moe_intermediate_size (64)
        hidden_size=128, num_hidden_layers=3, intermediate_size=192,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        partial_rotary_factor=0.5, attention_bias=True, use_qk_norm=True,
        n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
        n_shared_experts=1, routed_scaling_factor=2.5, n_group=4,
        topk_group=2, topk_method="noaux_tc", scoring_func="sigmoid",
        norm_topk_prob=True, first_k_dense_replace=1,
        num_nextn_predict_layers=1, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling=None, vocab_size=512, max_position_embeddings=4096),
}

PLAIN = {"partial_rotary_factor": 0.25, "attention_bias": False,
         "use_qk_norm": False, "n_group": 1, "topk_group": 1,
         "norm_topk_prob": False, "first_k_dense_replace": 0,
         "n_shared_experts": None}

def _spec(name, dtype, quant=None, cfg=None, layout="mlx"):
    s = mm._spec(name, "glm4_moe", dtype, tied=False, quant=quant, cfg=cfg)
    s["layout"] = layout
    return s


SPECS = [
    _spec("glm4moe-f32", "float32"),
    _spec("glm4moe-f32-hf", "float32", layout="hf"),
    _spec("glm4moe-plain-f32", "float32", cfg=PLAIN),
    _spec("glm4moe-bf16", "bfloat16"),
    _spec("glm4moe-q4g64", "bfloat16", quant=mm._q(4, 64)),
]


def source_hash():
    """Identity of this generator and of the helpers it borrows."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(mm.__file__).read_bytes())
    return h.hexdigest()


def to_hf_layout(path):
    """Rewrite the saved (float) model with each stacked
    mlp.switch_mlp.*_proj split into mlp.experts.N.*_proj, plus an MTP
    layer's tensors at layer num_hidden_layers."""
    mx = mm.mx
    weights, index = mm.take_saved_weights(path)
    out = {}
    for name, w in weights.items():
        if ".mlp.switch_mlp." in name:
            head, tail = name.split(".switch_mlp.")
            for e in range(w.shape[0]):
                out[f"{head}.experts.{e}.{tail}"] = w[e]
        else:
            out[name] = w
    mtp = "model.layers.%d." % BASE["glm4_moe"]["num_hidden_layers"]
    hidden = BASE["glm4_moe"]["hidden_size"]
    out[mtp + "eh_proj.weight"] = mx.ones((hidden, 2 * hidden))
    out[mtp + "enorm.weight"] = mx.ones((hidden,))
    mx.save_safetensors(str(path / "model.safetensors"), out,
                        metadata={"format": "pt"})
    index["weight_map"] = {n: "model.safetensors" for n in sorted(out)}
    (path / "model.safetensors.index.json").write_text(
        json.dumps(index, indent=4) + "\n")


def build_one(spec, out):
    rewrite = to_hf_layout if spec["layout"] == "hf" else None
    native = spec["dtype"] == "float32" or spec["quant"] is not None
    return mm.build_one(spec, out, base=BASE, rewrite=rewrite,
                        native=native)


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
