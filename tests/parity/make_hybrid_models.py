#!/usr/bin/env python3
"""Build tiny random-weight hybrid (gated DeltaNet + gated attention) models
and their mlx-lm references: Qwen3.5 text models and Qwen3-Next.

Same method and CLI as make_models.py (whose helpers this reuses): each model
is built by mlx-lm's own qwen3_5 / qwen3_next Model, cast (honouring the
model's cast_predicate, as mlx_lm.convert does: Qwen3.5 keeps A_log in
float32), quantized (the model's own quant_predicate: Qwen3-Next's router
and shared-expert gate in 8 bits) and saved by mlx-lm, reloaded with
mlx_lm.utils.load_model and run by mlx_lm.generate.generate_step in its
stored dtype and upcast to float32.

The configs:
  * "small" (qwen3_5, the text_config form mlx-community ships): 4 layers,
    full_attention_interval 4 (linear, linear, linear, full), 2 key heads
    for 4 value heads, tied embeddings, partial rotary factor 0.25 from
    rope_parameters (whose mrope_section covers the 4 rotated pairs the way
    llama.cpp's interleaved M-RoPE assigns them: pairs 0, 3 / 1 / 2);
  * "wide" (qwen3_5): 6 layers with an explicit layer_types (interval 3),
    as many key as value heads, key head 64 != value head 32, untied;
  * "next" (qwen3_next): 4 layers, interval 4, a sparse-MoE MLP of 8
    experts, top-2 (norm_topk_prob) with a sigmoid-gated shared expert in
    every layer, as the real models (and llama.cpp's GGUF form) have it;
    "next-dense1": the same with one dense layer (mlp_only_layers) and
    unnormalized top-k weights.
Besides make_models' prompts (1, 7 and 40 tokens) a 100-token prompt runs
the chunked delta rule (64-token chunks) over more than one chunk.

Usage: python tests/parity/make_hybrid_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-hybrid"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = dict(mm.PROMPTS)
PROMPTS["len100"] = [(37 * i + 11) % 499 + 1 for i in range(100)]

_LINEAR = dict(linear_num_value_heads=4, linear_num_key_heads=2,
               linear_key_head_dim=32, linear_value_head_dim=32,
               linear_conv_kernel_dim=4)

TEXT = {
    "small": dict(
        model_type="qwen3_5_text", hidden_size=128, num_hidden_layers=4,
        intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, rms_norm_eps=1e-6, vocab_size=512,
        max_position_embeddings=4096, full_attention_interval=4,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0,
                         "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1],
                         "mrope_interleaved": True},
        **_LINEAR),
    "wide": dict(
        model_type="qwen3_5_text", hidden_size=128, num_hidden_layers=6,
        intermediate_size=192, num_attention_heads=2, num_key_value_heads=1,
        head_dim=64, rms_norm_eps=1e-6, vocab_size=512,
        max_position_embeddings=4096, full_attention_interval=3,
        layer_types=["linear_attention", "linear_attention", "full_attention"] * 2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5},
        linear_num_value_heads=2, linear_num_key_heads=2,
        linear_key_head_dim=64, linear_value_head_dim=32,
        linear_conv_kernel_dim=4),
    "next": dict(
        model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"],
        hidden_size=128, num_hidden_layers=4, intermediate_size=192,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        rms_norm_eps=1e-6, vocab_size=512, max_position_embeddings=4096,
        rope_theta=10000.0, partial_rotary_factor=0.25,
        full_attention_interval=4, num_experts=8, num_experts_per_tok=2,
        decoder_sparse_step=1, mlp_only_layers=[], moe_intermediate_size=64,
        shared_expert_intermediate_size=96, norm_topk_prob=True,
        **_LINEAR),
}
# A dense layer (mlp_only_layers) and unnormalized top-k weights, mlx-lm's
# default (llama.cpp's qwen3next has neither: no GGUF form).
TEXT["next-dense1"] = dict(TEXT["next"], mlp_only_layers=[1],
                           norm_topk_prob=False)


def _spec(name, base, dtype, tied, quant=None, eos=None):
    """eos: the EOS id (default the last one; another where greedy decoding
    would otherwise stop within a few tokens)."""
    return dict(name=name, base=base, dtype=dtype, tied=tied, quant=quant,
                eos=eos)


SPECS = [
    _spec("qwen3_5-f32", "small", "float32", True),
    _spec("qwen3_5-bf16", "small", "bfloat16", True),
    _spec("qwen3_5-q4g64", "small", "bfloat16", True, quant=(4, 64)),
    _spec("qwen3_5-q8g64", "small", "bfloat16", True, quant=(8, 64)),
    _spec("qwen3_5-wide-f32", "wide", "float32", False),
    _spec("qwen3_5-wide-q4g32", "wide", "bfloat16", False, quant=(4, 32)),
    _spec("qwen3_next-f32", "next", "float32", False, eos=0),
    _spec("qwen3_next-q4g64", "next-dense1", "bfloat16", False, quant=(4, 64)),
]


def source_hash():
    """Identity of this generator and of the helpers it borrows."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(mm.__file__).read_bytes())
    return h.hexdigest()


def make_config(spec):
    text = dict(TEXT[spec["base"]])
    eos = text["vocab_size"] - 1 if spec["eos"] is None else spec["eos"]
    extra = {"tie_word_embeddings": spec["tied"], "torch_dtype": spec["dtype"],
             "eos_token_id": eos, "bos_token_id": 1}
    if text["model_type"] == "qwen3_next":
        return {**text, **extra}
    text.update(extra)
    return {"model_type": "qwen3_5",
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "vocab_size": text["vocab_size"], "text_config": text, **extra}


V_GAIN = 8.0  # conv taps of the value channels (see init_weights)
QK_NOISE = 0.3  # queries: the keys' weights plus this much of their own


def init_weights(model, seed, text):
    """make_models' weights, then the DeltaNet's own parameters drawn where
    trained checkpoints put them: conv taps ~ 1/sqrt(kernel), slow decays
    (A = exp(A_log) in (0.02, 1); mlx-lm initializes A in (0, 16)), dt_bias
    around 1.

    Two choices keep the delta rule's outputs well conditioned, so that the
    f32 comparison can stay at TOL_F32_REL: each head's output is
    RMS-normalized, which turns a relative error of its input into the same
    relative error of its output.
      * The value channels' conv taps are V_GAIN times larger: otherwise the
        output heads' RMS is ~1e-3, as small as the norm's sqrt(eps).
      * Queries are correlated with keys (their projection and conv rows
        are the keys' plus QK_NOISE of their own), as in trained models:
        with independent random q and k, a token's own term v (k . q) hangs
        on dot products near zero, whose rounding mlx itself does not fix
        (half-ulp noise on the weights moved its logits by 3e-4 of their
        std)."""
    np, mx = mm.np, mm.mx
    mm.init_weights(model, seed)
    rng = np.random.default_rng(seed + 1)
    nk, dk = text["linear_num_key_heads"], text["linear_key_head_dim"]
    kd = nk * dk
    mix = lambda k, q: (k + QK_NOISE * q) / np.sqrt(1 + QK_NOISE ** 2)
    new = []
    for name, p in sorted(mm.tree_flatten(model.parameters())):
        shape = p.shape
        w = np.array(p).astype(np.float64)
        if name.endswith("conv1d.weight"):
            w = rng.standard_normal(shape) / np.sqrt(shape[1])
            w[:kd] = mix(w[kd:2 * kd], w[:kd])
            w[2 * kd:] *= V_GAIN
        elif name.endswith("in_proj_qkv.weight"):
            w[:kd] = mix(w[kd:2 * kd], w[:kd])
        elif name.endswith("in_proj_qkvz.weight"):
            g = w.reshape(nk, -1, shape[-1])      # [q, k, v, z] per key head
            g[:, :dk] = mix(g[:, dk:2 * dk], g[:, :dk])
            w = g.reshape(shape)
        elif name.endswith("A_log"):
            w = np.log(rng.uniform(0.02, 1.0, shape))
        elif name.endswith("dt_bias"):
            w = 1.0 + 0.3 * rng.standard_normal(shape)
        else:
            continue
        new.append((name, mx.array(w.astype(np.float32))))
    model.update(mm.tree_unflatten(new))


def build_model(spec, path, cfg=None, init=None):
    """The spec's model (config `cfg`, default make_config(spec)) built by
    mlx-lm's class, its weights set by `init(model, seed)` (default this
    family's init_weights), cast and quantized (spec["quant"]: (bits, group)
    or None) and saved in `path`; returns the in-memory model. The hybrid
    MoE and LFM2 generators build theirs here too."""
    cfg = cfg if cfg is not None else make_config(spec)
    model_cls, args_cls = mm.get_model_classes(cfg)
    model = model_cls(args_cls.from_dict(cfg))
    seed = zlib.crc32(spec["name"].encode())
    if init is None:
        init_weights(model, seed, TEXT[spec["base"]])
    else:
        init(model, seed)
    mm.cast_like_convert(model, spec["dtype"])
    if spec["quant"]:
        bits, group = spec["quant"]
        model, cfg = mm.mlu.quantize_model(model, cfg, group, bits)
    mm.mx.eval(model.parameters())
    mm.mlu.save_model(path, model)
    mm.mlu.save_config(dict(cfg), path / "config.json")
    return model


def build_one(spec, out):
    mx, mlu = mm.mx, mm.mlu
    path = out / spec["name"]
    mm.fresh_dir(path)
    mem_model = build_model(spec, path)
    model, cfg = mlu.load_model(path)
    eos_ids = mm.eos_set(cfg)
    model32, _ = mlu.load_model(path)
    model32.set_dtype(mx.float32)
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
