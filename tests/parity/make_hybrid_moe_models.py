#!/usr/bin/env python3
"""Build tiny random-weight Qwen3.5 MoE models (model_type qwen3_5_moe, text
config qwen3_5_moe_text) and their mlx-lm references.

Same method and CLI as make_hybrid_models.py, whose weight recipe (the
DeltaNet's conv taps, decays and query/key correlation) and prompts this
reuses: each model is built by mlx-lm's own qwen3_5_moe Model, cast,
quantized (the model's own quant_predicate) and saved by mlx-lm, reloaded
with mlx_lm.utils.load_model and run by mlx_lm.generate.generate_step in its
stored dtype and upcast to float32.

The configs (the layout of Qwen3.5-35B-A3B's config.json, scaled down):
  * "moe": 4 layers, full_attention_interval 4 (linear, linear, linear,
    full), 8 experts top-2 with a sigmoid-gated shared expert in every
    layer, norm_topk_prob left to its default (renormalized), and no
    intermediate_size (the real configs have none);
  * "moe-wide": 6 layers as layer_types (interval 3), key head 64 != value
    head 32, untied, 16 experts top-4 with unnormalized weights.
The 100-token prompt runs the chunked delta rule over more than one chunk.

Usage: python tests/parity/make_hybrid_moe_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_hybrid_models as hm  # noqa: E402  (cheap: no mlx at import time)
import make_models as mm  # noqa: E402

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-hybrid-moe"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = hm.PROMPTS

_EXPERTS = dict(num_experts=8, num_experts_per_tok=2,
                moe_intermediate_size=64, shared_expert_intermediate_size=96)

TEXT = {
    "moe": dict(
        model_type="qwen3_5_moe_text", hidden_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        rms_norm_eps=1e-6, vocab_size=512, max_position_embeddings=4096,
        full_attention_interval=4,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0,
                         "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1],
                         "mrope_interleaved": True},
        **hm._LINEAR, **_EXPERTS),
    "moe-wide": dict(
        model_type="qwen3_5_moe_text", hidden_size=128, num_hidden_layers=6,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        rms_norm_eps=1e-6, vocab_size=512, max_position_embeddings=4096,
        full_attention_interval=3,
        layer_types=["linear_attention", "linear_attention", "full_attention"] * 2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5},
        linear_num_value_heads=2, linear_num_key_heads=2,
        linear_key_head_dim=64, linear_value_head_dim=32,
        linear_conv_kernel_dim=4, num_experts=16, num_experts_per_tok=4,
        moe_intermediate_size=32, shared_expert_intermediate_size=64,
        norm_topk_prob=False),
}

SPECS = [
    hm._spec("qwen3_5_moe-f32", "moe", "float32", True),
    hm._spec("qwen3_5_moe-bf16", "moe", "bfloat16", True),
    hm._spec("qwen3_5_moe-q4g64", "moe", "bfloat16", True, quant=(4, 64)),
    hm._spec("qwen3_5_moe-q8g64", "moe", "bfloat16", True, quant=(8, 64)),
    hm._spec("qwen3_5_moe-wide-f32", "moe-wide", "float32", False),
    hm._spec("qwen3_5_moe-wide-q4g32", "moe-wide", "bfloat16", False,
             quant=(4, 32)),
]


def source_hash():
    """Identity of this generator and of the helpers it borrows."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(hm.__file__).read_bytes())
    h.update(Path(mm.__file__).read_bytes())
    return h.hexdigest()


def make_config(spec):
    """The multimodal form mlx-community and the Qwen checkpoints ship."""
    text = dict(TEXT[spec["base"]])
    eos = text["vocab_size"] - 1 if spec["eos"] is None else spec["eos"]
    extra = {"tie_word_embeddings": spec["tied"], "torch_dtype": spec["dtype"],
             "eos_token_id": eos, "bos_token_id": 1}
    text.update(extra)
    return {"model_type": "qwen3_5_moe",
            "architectures": ["Qwen3_5MoeForConditionalGeneration"],
            "vocab_size": text["vocab_size"], "text_config": text, **extra}


def build_model(spec, path):
    return hm.build_model(spec, path, make_config(spec),
                          lambda model, seed: hm.init_weights(
                              model, seed, TEXT[spec["base"]]))


def build_one(spec, out):
    mx, mlu = mm.mx, mm.mlu
    path = out / spec["name"]
    mm.fresh_dir(path)
    mem_model = build_model(spec, path)
    model, cfg = mlu.load_model(path)
    eos_ids = mm.eos_set(cfg)
    model32, _ = mlu.load_model(path)
    model32.set_dtype(mx.float32)
    if spec["dtype"] != "float32" and not spec["quant"]:
        # mlx's CPU gather_mm multiplies float32 only (gather_qmm takes
        # bf16): unquantized bf16 experts run upcast, as in
        # make_moe_models.py.
        model = model32
        mem_model.set_dtype(mx.float32)
    ref = {"model": spec["name"], "arch": TEXT[spec["base"]]["model_type"],
           "dtype": spec["dtype"], "quantization": cfg.get("quantization"),
           "tied": spec["tied"], "eos_token_ids": sorted(eos_ids),
           "max_tokens": MAX_TOKENS, "mlx_version": mx.__version__,
           "prompts": {}}
    ref["prompts"], ref["gap_rel_native_vs_f32"] = mm.record_references(
        spec["name"], path, model, model32, mem_model, eos_ids, PROMPTS)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
