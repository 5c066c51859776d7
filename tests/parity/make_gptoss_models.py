#!/usr/bin/env python3
"""Build tiny random-weight gpt-oss models and their mlx-lm references.

Same method and CLI as make_models.py (whose helpers this reuses): every
model is built by mlx-lm's own gpt_oss Model, cast / quantized / saved by
mlx-lm's own code, reloaded from disk with mlx_lm.utils.load_model, and run by
mlx_lm.generate.generate_step both in its stored dtype and upcast to float32.

What the configs make occur: alternating sliding (window 8, shorter than the
40-token prompt and the 32 generated tokens) and full attention layers
(layer_types), non-zero attention sinks, biases on q/k/v/o, the router and
every expert, top-2-of-4 routing with a softmax over the chosen, gate and up
projections large enough that the clamped SwiGLU's limit of 7 is reached,
and gpt-oss's YaRN rope_scaling (factor 32 over 4096 positions).

mlx's CPU gather_mm (float experts) runs only in float32, so the bf16
model's native reference is its float32 upcast (quantized experts run in
bf16 through gather_qmm). Quantized sets, as mlx-lm writes them: "-mxfp4-q8" keeps the experts in
MXFP4 (mode mxfp4, group 32, as mlx-community's gpt-oss conversions do) and
the rest in 8-bit affine; "-q8" is MLX 8-bit everywhere; "-mxfp4" quantizes
everything in mxfp4 mode except the router (gpt-oss's own quant_predicate:
8-bit affine, group 64), so config.json's default mode is mxfp4 with one
affine override per layer. "-hf-mxfp4" is the layout of the Hugging Face
checkpoints (openai/gpt-oss-20b): MXFP4 experts as transformers stores
them (gate_up_proj_blocks / _scales / _bias with the gate and up rows
interleaved, down_proj_blocks ..., the codes as uint8 [.., rows, cols/32,
16]), everything else bf16, and quantization_config {"quant_method":
"mxfp4"}; its reference is mlx-lm loading that directory (its gpt_oss
sanitize splits the interleaved rows).

Usage: python tests/parity/make_gptoss_models.py [--out DIR] [--only NAME ...]
"""

import json
import shutil
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-gptoss"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = mm.PROMPTS          # lengths 1, 7, 40; ids < 500
EXPERT_GAIN = 4.0             # gate/up pre-activations of std ~4: past 7
SINK_STD = 1.5

BASE = dict(
    model_type="gpt_oss", architectures=["GptOssForCausalLM"],
    hidden_size=128, num_hidden_layers=4, intermediate_size=128,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-5,
    vocab_size=512, sliding_window=8,
    layer_types=["sliding_attention", "full_attention"] * 2,
    rope_theta=150000.0, max_position_embeddings=131072,
    rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                  "beta_slow": 1.0, "original_max_position_embeddings": 4096,
                  "truncate": False},
    attention_bias=True, swiglu_limit=7.0,
)

MXFP4 = {"group_size": 32, "bits": 4, "mode": "mxfp4"}

# "-chat": the gpt-oss tokenizer's vocabulary (201088 ids) on a smaller
# model, with its tokenizer files and the harmony chat template (llama.cpp's
# copy of openai/gpt-oss-120b's, unpacked by scripts/setup.sh), for
# `spindle run --chat` (test_gptoss_parity.test_gptoss_chat).
CHAT_CFG = dict(vocab_size=201088, hidden_size=64, intermediate_size=64,
                num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16,
                layer_types=["sliding_attention", "full_attention"])
TOKENIZER_DIR = HERE.parents[0] / "node_modules" / "@lenml" / \
    "tokenizer-gptoss" / "models"
CHAT_TEMPLATE = HERE.parents[0] / "templates" / "models" / \
    "openai-gpt-oss-120b.jinja"


def _spec(name, dtype, quant=None, chat=False):
    return dict(name=name, dtype=dtype, quant=quant, chat=chat)


SPECS = [
    _spec("gptoss-f32", "float32"),
    _spec("gptoss-bf16", "bfloat16"),
    _spec("gptoss-mxfp4-q8", "bfloat16", quant="mxfp4-experts"),
    _spec("gptoss-q8", "bfloat16", quant="q8"),
    _spec("gptoss-mxfp4", "bfloat16", quant="mxfp4"),
    _spec("gptoss-chat", "bfloat16", quant="mxfp4-experts", chat=True),
    _spec("gptoss-hf-mxfp4", "bfloat16", quant="hf-mxfp4"),
]


def source_hash():
    return mm.generator_source_hash(__file__)


def make_config(spec):
    cfg = json.loads(json.dumps(BASE))
    if spec["chat"]:
        cfg.update(CHAT_CFG)
    cfg["tie_word_embeddings"] = False
    cfg["torch_dtype"] = spec["dtype"]
    cfg["eos_token_id"] = cfg["vocab_size"] - 1
    cfg["bos_token_id"] = 1
    return cfg


def init_weights(model, seed):
    """make_models' seeded weights, then louder expert gates/ups and sinks."""
    np, mx = mm.np, mm.mx
    mm.init_weights(model, seed)
    rng = np.random.default_rng(seed + 1)
    new = []
    for name, p in mm.tree_flatten(model.parameters()):
        if name.endswith("sinks"):
            new.append((name, mx.array(
                (SINK_STD * rng.standard_normal(p.shape)).astype(np.float32))))
        elif ".experts." in name and name.endswith("_proj.weight") and \
                "down_proj" not in name:
            new.append((name, p * EXPERT_GAIN))
    model.update(mm.tree_unflatten(new))


def quant_predicate(kind, model):
    own = model.quant_predicate           # the router: 8-bit affine g64

    def pred(path, module):
        if kind == "hf-mxfp4":
            return dict(MXFP4) if ".experts." in path else False
        if path.endswith("router"):
            return own(path, module)
        if kind == "mxfp4-experts" and ".experts." in path:
            return dict(MXFP4)
        return True
    return pred


def save_hf_mxfp4(model, cfg, path):
    """The model (experts in mxfp4, the rest bf16) in the Hugging Face
    checkpoint layout: per layer, mlx-lm's split gate/up experts become
    transformers' fused gate_up_proj with interleaved rows (gate row i at
    2i, up row i at 2i + 1), the packed codes its uint8 blocks."""
    mx = mm.mx
    flat = dict(mm.tree_flatten(model.parameters()))
    out = {}

    def blocks(w):  # uint32 [.., rows, cols/8] -> uint8 [.., rows, cols/32, 16]
        u8 = w.view(mx.uint8)
        return u8.reshape(*u8.shape[:-1], u8.shape[-1] // 16, 16)

    def interleave(g, u):  # [.., rows, ...] x 2 -> [.., 2 rows, ...]
        both = mx.stack([g, u], axis=2)
        return both.reshape(g.shape[0], 2 * g.shape[1], *g.shape[2:])

    for k, v in flat.items():
        if ".experts.up_proj." in k:
            continue
        if ".experts.gate_proj." in k:
            base = k.split(".experts.")[0] + ".experts.gate_up_proj"
            u = flat[k.replace("gate_proj", "up_proj")]
            if k.endswith(".weight"):
                out[base + "_blocks"] = blocks(interleave(v, u))
            elif k.endswith(".scales"):
                out[base + "_scales"] = interleave(v, u)
            else:
                out[base + "_bias"] = interleave(v, u)
        elif ".experts.down_proj." in k:
            base = k.split(".experts.")[0] + ".experts.down_proj"
            suffix = {"weight": "_blocks", "scales": "_scales",
                      "bias": "_bias"}[k.rsplit(".", 1)[1]]
            out[base + suffix] = blocks(v) if suffix == "_blocks" else v
        else:
            out[k] = v
    mx.eval(out)
    mx.save_safetensors(str(path / "model.safetensors"), out,
                        metadata={"format": "pt"})
    cfg = dict(cfg)
    cfg.pop("quantization", None)
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn",
                                   "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]}
    mm.mlu.save_config(cfg, path / "config.json")


def build_model(spec, path):
    cfg = make_config(spec)
    model_cls, args_cls = mm.get_model_classes(cfg)
    model = model_cls(args_cls.from_dict(cfg))
    init_weights(model, zlib.crc32(spec["name"].encode()))
    mm.cast_like_convert(model, spec["dtype"])
    q = spec["quant"]
    if q:
        mode = "mxfp4" if q in ("mxfp4", "hf-mxfp4") else "affine"
        bits, group = (4, 32) if mode == "mxfp4" else (8, 64)
        model, cfg = mm.mlu.quantize_model(
            model, cfg, group, bits, mode=mode,
            quant_predicate=quant_predicate(q, model))
    mm.mx.eval(model.parameters())
    if q == "hf-mxfp4":
        save_hf_mxfp4(model, cfg, path)
        return model
    mm.mlu.save_model(path, model)
    mm.mlu.save_config(dict(cfg), path / "config.json")
    if spec["chat"]:
        # copies, not links: the models live in a cache shared by checkouts
        # (tests/.work), where a link into this one would dangle once it goes
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(TOKENIZER_DIR / f, path / f)
        shutil.copyfile(CHAT_TEMPLATE, path / "chat_template.jinja")
    return model


def build_one(spec, out):
    mx, mlu = mm.mx, mm.mlu
    path = out / spec["name"]
    mm.fresh_dir(path)
    mem_model = build_model(spec, path)
    model, cfg = mlu.load_model(path)
    eos_ids = mm.eos_set(cfg)
    model32, _ = mlu.load_model(path)
    model32.set_dtype(mx.float32)  # floating params only; packed ints stay
    if spec["dtype"] != "float32" and not spec["quant"]:
        # mlx's CPU gather_mm (the float experts) runs only in float32: the
        # native reference of a bf16 model is its float32 upcast.
        model = model32
        mem_model.set_dtype(mx.float32)

    ref = {"model": spec["name"], "arch": "gpt_oss", "dtype": spec["dtype"],
           "quantization": cfg.get("quantization"), "tied": False,
           "eos_token_ids": sorted(eos_ids), "max_tokens": MAX_TOKENS,
           "mlx_version": mx.__version__, "prompts": {}}
    ref["prompts"], ref["gap_rel_native_vs_f32"] = mm.record_references(
        spec["name"], path, model, model32, mem_model, eos_ids)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
