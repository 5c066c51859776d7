#!/usr/bin/env python3
"""Build tiny random-weight Gemma 3 text models and their mlx-lm references.

Same method and CLI as make_models.py (whose helpers this reuses): every
model is built by mlx-lm's own gemma3_text Model, cast / quantized / saved by
mlx-lm's own code, reloaded from disk with mlx_lm.utils.load_model, and run by
mlx_lm.generate.generate_step both in its stored dtype and upcast to float32.

The configs make both attention kinds occur (sliding_window_pattern 2 or 3)
with a sliding window of 8, shorter than the 40-token prompt and than the 32
generated tokens, a query_pre_attn_scalar different from head_dim, a linear
rope_scaling on the global layers, and tied embeddings as Gemma has.

The float32 reference upcasts the stored weights and then gives each norm
the scale 1 + w rounded to the stored dtype, as the native model computes
it (fold_native_norm_rounding): that rounding is a property of the weights,
which Spindle reproduces, not of mlx's low-precision activations.

"-softcap" models add final_logit_softcapping to config.json.  mlx-lm's
gemma3_text ignores that key, so their references are the plain mlx outputs
and test_gemma3_parity.py applies cap * tanh(logits / cap) itself.

Usage: python tests/parity/make_gemma3_models.py [--out DIR] [--only NAME ...]
"""

import json
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-gemma3"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = mm.PROMPTS          # lengths 1, 7, 40; ids < 500
EMB_SCALE = 0.05
LOGIT_STD = 4.0

BASE = {
    # 5 layers, pattern 3: layers 0,1,3,4 local, layer 2 global.
    "small": dict(
        model_type="gemma3_text", architectures=["Gemma3ForCausalLM"],
        hidden_size=128, num_hidden_layers=5, intermediate_size=256,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        query_pre_attn_scalar=48, rms_norm_eps=1e-6, vocab_size=512,
        rope_theta=1000000.0, rope_local_base_freq=10000.0,
        sliding_window=8, sliding_window_pattern=3,
        max_position_embeddings=4096, hidden_activation="gelu_pytorch_tanh",
    ),
    # 4 layers, pattern 2 (odd layers global), head_dim 64 with
    # heads * head_dim != hidden, linear RoPE scaling on global layers.
    "wide": dict(
        model_type="gemma3_text", architectures=["Gemma3ForCausalLM"],
        hidden_size=192, num_hidden_layers=4, intermediate_size=384,
        num_attention_heads=4, num_key_value_heads=1, head_dim=64,
        query_pre_attn_scalar=144, rms_norm_eps=1e-6, vocab_size=512,
        rope_theta=1000000.0, rope_local_base_freq=10000.0,
        rope_scaling={"factor": 8.0, "rope_type": "linear"},
        sliding_window=8, sliding_window_pattern=2,
        max_position_embeddings=4096, hidden_activation="gelu_pytorch_tanh",
    ),
}


def _spec(name, base, dtype, quant=None, cfg=None):
    return dict(name=name, base=base, dtype=dtype, quant=quant, cfg=cfg or {})


SPECS = [
    _spec("gemma3-f32", "small", "float32"),
    _spec("gemma3-bf16", "small", "bfloat16"),
    _spec("gemma3-q4g64", "small", "bfloat16", quant=(4, 64)),
    _spec("gemma3-wide-f32", "wide", "float32"),
    _spec("gemma3-wide-bf16", "wide", "bfloat16"),
    _spec("gemma3-wide-q4g64", "wide", "bfloat16", quant=(4, 64)),
    _spec("gemma3-f32-softcap", "small", "float32",
          cfg={"final_logit_softcapping": 10.0}),
]


def source_hash():
    return mm.generator_source_hash(__file__)


def make_config(spec):
    cfg = dict(BASE[spec["base"]])
    cfg.update(spec["cfg"])
    cfg["tie_word_embeddings"] = True
    cfg["torch_dtype"] = spec["dtype"]
    cfg["eos_token_id"] = cfg["vocab_size"] - 1
    cfg["bos_token_id"] = 2
    return cfg


def init_weights(model, seed):
    """Seeded numpy weights.  Gemma norms scale by (1 + w), so their weights
    are drawn around 0 (around gain - 1 for the final norm, which sets the
    logit scale); embedding rows get log-normal norms for peaky logits."""
    np, mx = mm.np, mm.mx
    rng = np.random.default_rng(seed)
    new = []
    for name, p in sorted(mm.tree_flatten(model.parameters())):
        shape = p.shape
        if name == "model.norm.weight":
            gain = LOGIT_STD / (EMB_SCALE * np.sqrt(shape[0]))
            w = gain * (1.0 + 0.2 * rng.standard_normal(shape)) - 1.0
        elif name.endswith("norm.weight"):
            w = 0.3 * rng.standard_normal(shape)
        elif "embed_tokens" in name:
            rows = np.exp(mm.ROW_SIGMA * rng.standard_normal((shape[0], 1)))
            w = EMB_SCALE * rows * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[-1])
        new.append((name, mx.array(w.astype(np.float32))))
    model.update(mm.tree_unflatten(new))


def build_model(spec, path, config=None, init=None):
    """Build, cast, quantize and save; `config` and `init` default to this
    family's make_config and init_weights (Gemma 4 passes its own)."""
    cfg = (config or make_config)(spec)
    model_cls, args_cls = mm.get_model_classes(cfg)
    model = model_cls(args_cls.from_dict(cfg))
    model.sanitize({})     # no lm_head.weight: tied, as load_model decides
    (init or init_weights)(model, zlib.crc32(spec["name"].encode()))
    mm.cast_like_convert(model, spec["dtype"])
    if spec["quant"]:
        bits, group = spec["quant"]
        model, cfg = mm.mlu.quantize_model(model, cfg, group, bits)
    mm.mx.eval(model.parameters())
    mm.mlu.save_model(path, model)
    mm.mlu.save_config(dict(cfg), path / "config.json")
    return model


def fold_native_norm_rounding(model32, dtype):
    """The native model's RMSNorm scales by `1.0 + weight` computed in the
    weight's dtype, a rounding of the weights rather than of activations.
    Give the float32 reference the same effective scales: w' = round(1 + w)
    - 1 in float32, so that its own 1 + w' is exactly the rounded value.
    (mlx does the rounding; float32 models are left untouched.)"""
    mx = mm.mx
    if dtype == mx.float32:
        return
    new = []
    for name, p in mm.tree_flatten(model32.parameters()):
        if name.endswith("norm.weight"):
            scale = (1.0 + p.astype(dtype)).astype(mx.float32)
            new.append((name, scale - 1.0))
    model32.update(mm.tree_unflatten(new))


def build_one(spec, out):
    mx, mlu = mm.mx, mm.mlu
    path = out / spec["name"]
    mm.fresh_dir(path)
    mem_model = build_model(spec, path)
    model, cfg = mlu.load_model(path)
    if "lm_head" in dict(mm.tree_flatten(model.parameters())) or \
            not model.tie_word_embeddings:
        raise SystemExit(f"{spec['name']}: reloaded model is not tied")
    eos_ids = mm.eos_set(cfg)
    model32, _ = mlu.load_model(path)
    model32.set_dtype(mx.float32)
    fold_native_norm_rounding(model32, getattr(mx, spec["dtype"]))

    ref = {"model": spec["name"], "arch": "gemma3_text",
           "dtype": spec["dtype"], "quantization": cfg.get("quantization"),
           "tied": True, "eos_token_ids": sorted(eos_ids),
           "final_logit_softcapping": cfg.get("final_logit_softcapping"),
           "max_tokens": MAX_TOKENS, "mlx_version": mx.__version__,
           "prompts": {}}
    ref["prompts"], ref["gap_rel_native_vs_f32"] = mm.record_references(
        spec["name"], path, model, model32, mem_model, eos_ids)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
