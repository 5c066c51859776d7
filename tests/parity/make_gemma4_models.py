#!/usr/bin/env python3
"""Build tiny random-weight Gemma 4 text models and their mlx-lm references.

Same method and CLI as make_gemma3_models.py (whose helpers this reuses):
every model is built by mlx-lm's own gemma4_text Model, cast / quantized /
saved by mlx-lm's own code, reloaded with mlx_lm.utils.load_model, and run
by mlx_lm.generate.generate_step in its stored dtype and upcast to float32.

The configs are the subset Spindle supports: both attention kinds occur
with a sliding window of 8 (shorter than the prompts and the generation),
the full-attention layers use the
"proportional" partial RoPE (one with a factor), layer_types is given
explicitly in one base and derived from sliding_window_pattern in the
other, and layer_scalar, the value norm and the final logit softcap (mlx-lm
applies it: default 30, 10 in "wide") are all in play; "global" gives the
full-attention layers a global_head_dim twice head_dim, and "shared" adds
KV sharing between layers with double-wide MLPs, "per-layer" the per-layer
inputs of Gemma 4 E2B / E4B on top, "k-eq-v" K = V full attention ("-gkv":
with num_global_key_value_heads of its own), "moe"
Gemma 4 26B's routed experts beside every layer's MLP (8 experts, 2 per
token; router weights drawn wide enough that the chosen experts are not
near ties).  Gemma 4's norms scale by w (not 1 + w), so norm weights are
drawn around 1.

"moe-hf" ("moe" with experts of 96, so that no expert matrix is square
and a transposed one fails the shape check) stores its weights in
transformers' layout, which mlx-lm's
gemma4_text sanitize undoes at load: each layer's experts as the fused
experts.gate_up_proj [E, 2 inter, hidden] (gate rows first) and
experts.down_proj [E, hidden, inter], bare parameters; "moe-hf-mm" as a
Gemma4ForConditionalGeneration checkpoint on top (model_type gemma4, the
text settings in text_config, the language model under
"model.language_model.", beside vision tensors mlx-lm drops).  Their
references come from mlx-lm's reload of those files, which must equal the
in-memory model built in mlx-lm's layout.

Usage: python tests/parity/make_gemma4_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)
import make_gemma3_models as g3  # noqa: E402

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-gemma4"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = mm.PROMPTS
SUBSET = dict(hidden_size_per_layer_input=0, num_kv_shared_layers=0,
              enable_moe_block=False, attention_k_eq_v=False)

BASE = {
    # 5 layers, pattern 3: layers 0,1,3,4 sliding, layer 2 full.
    "small": dict(
        model_type="gemma4_text", architectures=["Gemma4ForCausalLM"],
        hidden_size=128, num_hidden_layers=5, intermediate_size=256,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        global_head_dim=32, rms_norm_eps=1e-6, vocab_size=512,
        sliding_window=8, sliding_window_pattern=3,
        max_position_embeddings=4096,
        rope_parameters={
            "full_attention": {"partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0,
                               "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10000.0,
                                  "rope_type": "default"}},
        **SUBSET,
    ),
    # 4 layers listed by layer_types, head_dim 64 with heads * head_dim !=
    # hidden, a proportional factor, softcap 10.
    "wide": dict(
        model_type="gemma4_text", architectures=["Gemma4ForCausalLM"],
        hidden_size=192, num_hidden_layers=4, intermediate_size=384,
        num_attention_heads=4, num_key_value_heads=1, head_dim=64,
        global_head_dim=64, rms_norm_eps=1e-6, vocab_size=512,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention",
                     "sliding_attention", "full_attention"],
        max_position_embeddings=4096, final_logit_softcapping=10.0,
        rope_parameters={
            "full_attention": {"partial_rotary_factor": 0.5,
                               "rope_theta": 1000000.0, "factor": 4.0,
                               "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 20000.0,
                                  "rope_type": "default"}},
        **SUBSET,
    ),
}
# The full-attention layers' heads twice as wide as the sliding ones'
# (Gemma 4's global_head_dim), with their own rope over 64 dimensions.
BASE["global"] = dict(BASE["small"], global_head_dim=64)
# 6 layers (s s F s s F), the last 3 sharing KV: layers 3 and 4 attend
# layer 1's keys and values, layer 5 layer 2's; their MLPs double-wide.
BASE["shared"] = dict(BASE["global"], num_hidden_layers=6,
                      num_kv_shared_layers=3, use_double_wide_mlp=True)
# Gemma 4 E2B/E4B's layout in small: per-layer inputs (64 floats per token
# and layer, from a table of its own vocabulary size) on top of "shared".
# attention_k_eq_v: the full-attention layers' values are their keys.
BASE["k-eq-v"] = dict(BASE["global"], attention_k_eq_v=True)
# ... with a KV head count of their own (num_global_key_value_heads, as the
# 26B / 31B have): one KV head on the full layers, two on the sliding ones.
BASE["k-eq-v-gkv"] = dict(BASE["k-eq-v"], num_global_key_value_heads=1)
BASE["per-layer"] = dict(BASE["shared"], hidden_size_per_layer_input=64,
                         vocab_size_per_layer_input=512)
BASE["moe"] = dict(BASE["small"], enable_moe_block=True, num_experts=8,
                   top_k_experts=2, moe_intermediate_size=64)
BASE["moe-hf"] = dict(BASE["moe"], moe_intermediate_size=96)


def _spec(name, base, dtype, quant=None, layout="mlx"):
    return dict(name=name, base=base, dtype=dtype, quant=quant, cfg={},
                layout=layout)


SPECS = [
    _spec("gemma4-f32", "small", "float32"),
    _spec("gemma4-bf16", "small", "bfloat16"),
    _spec("gemma4-q4g64", "small", "bfloat16", quant=(4, 64)),
    _spec("gemma4-wide-f32", "wide", "float32"),
    _spec("gemma4-wide-bf16", "wide", "bfloat16"),
    _spec("gemma4-wide-q4g64", "wide", "bfloat16", quant=(4, 64)),
    _spec("gemma4-global-f32", "global", "float32"),
    _spec("gemma4-global-bf16", "global", "bfloat16"),
    _spec("gemma4-global-q4g64", "global", "bfloat16", quant=(4, 64)),
    _spec("gemma4-shared-f32", "shared", "float32"),
    _spec("gemma4-shared-bf16", "shared", "bfloat16"),
    _spec("gemma4-shared-q4g64", "shared", "bfloat16", quant=(4, 64)),
    _spec("gemma4-k-eq-v-f32", "k-eq-v", "float32"),
    _spec("gemma4-k-eq-v-q4g64", "k-eq-v", "bfloat16", quant=(4, 64)),
    _spec("gemma4-k-eq-v-gkv-f32", "k-eq-v-gkv", "float32"),
    _spec("gemma4-k-eq-v-gkv-q4g64", "k-eq-v-gkv", "bfloat16", quant=(4, 64)),
    _spec("gemma4-per-layer-f32", "per-layer", "float32"),
    _spec("gemma4-per-layer-bf16", "per-layer", "bfloat16"),
    _spec("gemma4-per-layer-q4g64", "per-layer", "bfloat16", quant=(4, 64)),
    _spec("gemma4-moe-f32", "moe", "float32"),
    _spec("gemma4-moe-bf16", "moe", "bfloat16"),
    _spec("gemma4-moe-q4g64", "moe", "bfloat16", quant=(4, 64)),
    _spec("gemma4-moe-hf-f32", "moe-hf", "float32", layout="hf"),
    _spec("gemma4-moe-hf-bf16", "moe-hf", "bfloat16", layout="hf"),
    _spec("gemma4-moe-hf-mm-f32", "moe-hf", "float32", layout="hf-mm"),
    _spec("gemma4-moe-hf-mm-bf16", "moe-hf", "bfloat16", layout="hf-mm"),
]


def source_hash():
    # gemma3's build_model is part of this generator too.
    h = hashlib.sha256(mm.generator_source_hash(__file__).encode())
    h.update(g3.source_hash().encode())
    return h.hexdigest()


def make_config(spec):
    cfg = dict(BASE[spec["base"]])
    cfg["tie_word_embeddings"] = True
    cfg["torch_dtype"] = spec["dtype"]
    cfg["eos_token_id"] = cfg["vocab_size"] - 1
    cfg["bos_token_id"] = 2
    return cfg


def init_weights(model, seed):
    """Seeded numpy weights: norms around 1 (the final one around the gain
    that sets the logit scale; q/k norms scaled down), layer scalars in [0.5, 1.5], embedding rows
    with log-normal norms for peaky logits."""
    np, mx = mm.np, mm.mx
    rng = np.random.default_rng(seed)
    new = []
    for name, p in sorted(mm.tree_flatten(model.parameters())):
        shape = p.shape
        if name == "model.norm.weight":
            gain = g3.LOGIT_STD / (g3.EMB_SCALE * np.sqrt(shape[0]))
            w = gain * (1.0 + 0.2 * rng.standard_normal(shape))
        elif name.endswith(("q_norm.weight", "k_norm.weight")):
            # Scores are not scaled (scale 1): norms of head_dim^-1/4 give
            # them the usual head_dim^-1/2, so attention is not one-hot.
            w = shape[0] ** -0.25 * (1.0 + 0.3 * rng.standard_normal(shape))
        elif name.endswith("norm.weight"):
            w = 1.0 + 0.3 * rng.standard_normal(shape)
        elif name.endswith(("layer_scalar", "per_expert_scale")):
            w = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("router.scale"):
            w = 1.0 + 0.3 * rng.standard_normal(shape)
        elif name.endswith("router.proj.weight"):
            # logits with a standard deviation of 3: the top 2 of 8 stand
            # clear of the rest, so rounding cannot swap an expert
            w = 3.0 * rng.standard_normal(shape)
        elif "embed_tokens" in name:
            rows = np.exp(mm.ROW_SIGMA * rng.standard_normal((shape[0], 1)))
            w = g3.EMB_SCALE * rows * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[-1])
        new.append((name, mx.array(w.astype(np.float32))))
    model.update(mm.tree_unflatten(new))


def hf_expert_weights(weights):
    """mlx-lm's gemma4_text sanitize inverted: each layer's
    experts.switch_glu.{gate,up}_proj.weight [E, inter, hidden] joined into
    experts.gate_up_proj [E, 2 inter, hidden] (gate first, as sanitize's
    split along axis -2 takes them) and down_proj.weight renamed
    experts.down_proj; the other names as they are."""
    mx = mm.mx
    out = {}
    for name, w in weights.items():
        if ".experts.switch_glu." not in name:
            out[name] = w
            continue
        layer, proj = name.split(".experts.switch_glu.")
        if proj == "down_proj.weight":
            out[f"{layer}.experts.down_proj"] = w
        elif proj == "gate_proj.weight":
            up = weights[f"{layer}.experts.switch_glu.up_proj.weight"]
            out[f"{layer}.experts.gate_up_proj"] = mx.concatenate([w, up],
                                                                  axis=-2)
        elif proj != "up_proj.weight":
            raise SystemExit(f"{name}: no Hugging Face name for it")
    return out


def multimodal_weights(weights, cfg):
    """Gemma4ForConditionalGeneration's names: the language model under
    model.language_model., beside vision tensors (mlx-lm's gemma4
    sanitize drops them)."""
    np, mx = mm.np, mm.mx
    out = {f"model.language_model.{k.removeprefix('model.')}": w
           for k, w in weights.items()}
    d = cfg["hidden_size"]
    out["model.vision_tower.encoder.layers.0.mlp.down_proj.linear.weight"] = \
        mx.array(np.ones((d, 2 * d), np.float32)).astype(
            weights["model.norm.weight"].dtype)
    out["model.embed_vision.embedding_projection.weight"] = \
        mx.array(np.ones((d, d), np.float32))
    return out


def save_hf_layout(spec, path):
    """Rewrite the saved model in transformers' layout (module docstring)."""
    mx = mm.mx
    weights, index = mm.take_saved_weights(path)
    weights = hf_expert_weights(weights)
    cfg = json.loads((path / "config.json").read_text())
    if spec["layout"] == "hf-mm":
        weights = multimodal_weights(weights, cfg)
        outer = {k: cfg[k] for k in ("tie_word_embeddings", "torch_dtype",
                                     "eos_token_id", "bos_token_id",
                                     "vocab_size")}
        cfg = dict(outer, model_type="gemma4",
                   architectures=["Gemma4ForConditionalGeneration"],
                   text_config=cfg,
                   vision_config={"model_type": "gemma4_vision"})
        (path / "config.json").write_text(json.dumps(cfg, indent=4) + "\n")
    mx.save_safetensors(str(path / "model.safetensors"), weights,
                        metadata={"format": "pt"})
    index["weight_map"] = {n: "model.safetensors" for n in sorted(weights)}
    (path / "model.safetensors.index.json").write_text(
        json.dumps(index, indent=4) + "\n")


def build_one(spec, out):
    mx, mlu = mm.mx, mm.mlu
    path = out / spec["name"]
    mm.fresh_dir(path)
    mem_model = g3.build_model(spec, path, make_config, init_weights)
    if spec["layout"] != "mlx":
        save_hf_layout(spec, path)
    model, cfg = mlu.load_model(path)
    if not getattr(model, "language_model", model).tie_word_embeddings:
        raise SystemExit(f"{spec['name']}: reloaded model is not tied")
    eos_ids = mm.eos_set(cfg)
    model32, _ = mlu.load_model(path)
    model32.set_dtype(mx.float32)
    text_cfg = cfg.get("text_config", cfg)
    if text_cfg.get("enable_moe_block") and spec["dtype"] != "float32" and \
            not spec["quant"]:
        # mlx's CPU gather_mm multiplies float32 only (gather_qmm takes
        # bf16): unquantized bf16 experts run upcast, as in make_moe_models.
        model = model32
        mem_model.set_dtype(mx.float32)
    ref = {"model": spec["name"], "arch": "gemma4_text",
           "dtype": spec["dtype"], "quantization": cfg.get("quantization"),
           "tied": True, "eos_token_ids": sorted(eos_ids),
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
