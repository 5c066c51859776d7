#!/usr/bin/env python3
"""Build tiny random-weight LFM2 models (gated short convolutions beside
attention) and their mlx-lm references.

Same method and CLI as make_models.py (whose helpers this reuses): each model
is built by mlx-lm's own lfm2 Model, cast, quantized and saved by mlx-lm,
reloaded with mlx_lm.utils.load_model and run by
mlx_lm.generate.generate_step in its stored dtype and upcast to float32.

The configs:
  * "small": 6 layers given as layer_types (conv, conv, attention, conv,
    conv, attention), conv_L_cache 3 without biases, block_ff_dim 384
    adjusted as mlx-lm does (2/3, times block_ffn_dim_multiplier, up to a
    multiple of block_multiple_of: 256), tied embeddings;
  * "bias": 5 layers given as full_attn_idxs [1, 4], conv_L_cache 4 with
    conv_bias (in_proj, conv and out_proj biases), the width as
    intermediate_size 200 unadjusted.
Besides make_models' prompts (1, 7 and 40 tokens) a 100-token prompt runs
longer than the engine's prefill chunks in the state tests.

Usage: python tests/parity/make_lfm2_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_hybrid_models as hm  # noqa: E402  (cheap: no mlx at import time)
import make_models as mm  # noqa: E402

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-lfm2"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = dict(mm.PROMPTS)
PROMPTS["len100"] = [(37 * i + 11) % 499 + 1 for i in range(100)]

_COMMON = dict(model_type="lfm2", architectures=["Lfm2ForCausalLM"],
               vocab_size=512, hidden_size=128, block_dim=128,
               num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=4096, norm_eps=1e-5,
               rope_theta=1000000.0, tie_word_embeddings=True,
               bos_token_id=1)

TEXT = {
    "small": dict(_COMMON, num_hidden_layers=6,
                  layer_types=["conv", "conv", "full_attention"] * 2,
                  conv_L_cache=3, conv_bias=False, block_ff_dim=384,
                  block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0,
                  block_multiple_of=64),
    "bias": dict(_COMMON, num_hidden_layers=5, full_attn_idxs=[1, 4],
                 conv_L_cache=4, conv_bias=True, intermediate_size=200,
                 block_auto_adjust_ff_dim=False,
                 block_ffn_dim_multiplier=1.5, block_multiple_of=256,
                 rope_theta=10000.0),
}


def _spec(name, base, dtype, quant=None):
    return dict(name=name, base=base, dtype=dtype, quant=quant)


SPECS = [
    _spec("lfm2-f32", "small", "float32"),
    _spec("lfm2-bf16", "small", "bfloat16"),
    _spec("lfm2-q4g64", "small", "bfloat16", quant=(4, 64)),
    _spec("lfm2-q8g64", "small", "bfloat16", quant=(8, 64)),
    _spec("lfm2-bias-f32", "bias", "float32"),
    _spec("lfm2-bias-q4g32", "bias", "bfloat16", quant=(4, 32)),
]


def source_hash():
    """Identity of this generator and of the helpers it borrows."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(hm.__file__).read_bytes())
    h.update(Path(mm.__file__).read_bytes())
    return h.hexdigest()


def make_config(spec):
    cfg = dict(TEXT[spec["base"]])
    cfg.update(torch_dtype=spec["dtype"], eos_token_id=cfg["vocab_size"] - 1)
    return cfg


def init_weights(model, seed):
    """make_models' weights; the final norm (LFM2's embedding_norm) carries
    the logit scale make_models gives model.norm, and the conv taps are
    ~ 1/sqrt(kernel) (make_models divides by the last axis, 1 here)."""
    np, mx = mm.np, mm.mx
    mm.init_weights(model, seed)
    rng = np.random.default_rng(seed + 1)
    new = []
    for name, p in sorted(mm.tree_flatten(model.parameters())):
        shape = p.shape
        if name == "model.embedding_norm.weight":
            gain = mm.LOGIT_STD / (mm.EMB_SCALE * np.sqrt(shape[0]))
            w = gain * (1.0 + 0.2 * rng.standard_normal(shape))
        elif name.endswith("conv.conv.weight"):
            w = rng.standard_normal(shape) / np.sqrt(shape[1])
        else:
            continue
        new.append((name, mx.array(w.astype(np.float32))))
    model.update(mm.tree_unflatten(new))


def build_model(spec, path):
    return hm.build_model(spec, path, make_config(spec), init_weights)


def build_one(spec, out):
    mx, mlu = mm.mx, mm.mlu
    path = out / spec["name"]
    mm.fresh_dir(path)
    mem_model = build_model(spec, path)
    model, cfg = mlu.load_model(path)
    eos_ids = mm.eos_set(cfg)
    model32, _ = mlu.load_model(path)
    model32.set_dtype(mx.float32)
    ref = {"model": spec["name"], "arch": "lfm2", "dtype": spec["dtype"],
           "quantization": cfg.get("quantization"), "tied": True,
           "eos_token_ids": sorted(eos_ids), "max_tokens": MAX_TOKENS,
           "mlx_version": mx.__version__, "prompts": {}}
    ref["prompts"], ref["gap_rel_native_vs_f32"] = mm.record_references(
        spec["name"], path, model, model32, mem_model, eos_ids, PROMPTS)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
