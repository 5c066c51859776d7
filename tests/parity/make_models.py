#!/usr/bin/env python3
"""Build tiny random-weight models and their mlx-lm reference outputs.

Every model is created, quantized and saved by mlx / mlx-lm's own code
(ModelArgs + Model, mlx_lm.utils.quantize_model, save_model, save_config), so
the directories carry the real MLX safetensors layout and config.json.  The
references (last-prompt-position logits, 32 greedy tokens, per-step top-1 -
top-2 margins) are then produced by mlx_lm.generate.generate_step on the model
*reloaded* from disk with mlx_lm.utils.load_model, which proves each directory
is self-contained.  The same computation is repeated with the weights upcast
to float32 so the parity test can size its tolerances from mlx's own
native-dtype vs float32 gap.

Importing this module is cheap and does not need mlx: test_parity.py reads
SPECS / PROMPTS at collection time.  Usage:
    python tests/parity/make_models.py [--out DIR] [--only NAME ...]
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
import zlib
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parents[1] / ".work" / "parity"
STAMP_FILE = "STAMP"
MAX_TOKENS = 32
ROW_SIGMA = 0.2     # log-normal spread of lm_head / embedding row norms
EMB_SCALE = 0.05    # small: tied heads must not just repeat the input token
LOGIT_STD = 4.0

# Fixed prompts (token ids < 500 so they fit every vocabulary below).
PROMPTS = {
    "len1": [11],
    "len7": [11, 217, 344, 151, 80, 437, 492],
    "len40": [
        3, 141, 59, 265, 358, 97, 93, 238, 462, 64, 338, 327, 95, 28, 84, 197,
        169, 399, 375, 105, 82, 97, 494, 459, 230, 78, 164, 62, 86, 208, 99, 86,
        280, 348, 253, 421, 170, 67, 98, 214,
    ],
}

# Per-architecture base configs, HF spelling.  hidden 128 keeps every
# in-dimension a multiple of the quantization group sizes used (32/64) except
# where a spec deliberately breaks that.
BASE = {
    "llama": dict(
        model_type="llama", architectures=["LlamaForCausalLM"],
        hidden_size=128, num_hidden_layers=2, intermediate_size=256,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        rms_norm_eps=1e-5, rope_theta=10000.0, vocab_size=512,
        max_position_embeddings=2048, attention_bias=False, mlp_bias=False,
    ),
    # mlx-lm's qwen2 always has q/k/v biases (HF Qwen2 configs carry no
    # attention_bias key) and derives head_dim = hidden / heads.
    "qwen2": dict(
        model_type="qwen2", architectures=["Qwen2ForCausalLM"],
        hidden_size=128, num_hidden_layers=2, intermediate_size=320,
        num_attention_heads=4, num_key_value_heads=2,
        rms_norm_eps=1e-6, rope_theta=1000000.0, vocab_size=640,
        max_position_embeddings=4096,
    ),
    # qwen3: head_dim 64 so heads * head_dim (256) != hidden (128); q/k norms.
    "qwen3": dict(
        model_type="qwen3", architectures=["Qwen3ForCausalLM"],
        hidden_size=128, num_hidden_layers=3, intermediate_size=256,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rms_norm_eps=1e-6, rope_theta=1000000.0, vocab_size=768,
        max_position_embeddings=4096,
    ),
}


def _q(bits, group_size, predicate=None, mode="affine"):
    return {"bits": bits, "group_size": group_size, "predicate": predicate,
            "mode": mode}


def _spec(name, arch, dtype="float32", tied=True, quant=None, cfg=None,
          shards=1, eos="default"):
    return dict(name=name, arch=arch, dtype=dtype, tied=tied, quant=quant,
                cfg=cfg or {}, shards=shards, eos=eos)


def _build_specs():
    specs = []
    for arch in ("llama", "qwen2", "qwen3"):
        # Alternate tied/untied heads so each arch and each quantized kind
        # sees both a QuantizedEmbedding-as-lm_head and a real lm_head.
        t = arch != "llama"
        specs += [
            _spec(f"{arch}-f32", arch, "float32", tied=t),
            _spec(f"{arch}-bf16", arch, "bfloat16", tied=not t, eos="probe"),
            _spec(f"{arch}-f16", arch, "float16", tied=t),
            _spec(f"{arch}-q4g64", arch, "bfloat16", tied=t, quant=_q(4, 64)),
            _spec(f"{arch}-q4g64-untied" if t else f"{arch}-q4g64-tied", arch,
                  "bfloat16", tied=not t, quant=_q(4, 64)),
            _spec(f"{arch}-q8g64", arch, "bfloat16", tied=not t,
                  quant=_q(8, 64), eos="probe"),
            _spec(f"{arch}-q4g32", arch, "float16", tied=t, quant=_q(4, 32)),
            # intermediate 352 is not a multiple of 64, so mlx-lm's default
            # predicate leaves every down_proj unquantized (bf16).
            _spec(f"{arch}-q4g64-skipdown", arch, "bfloat16", tied=not t,
                  quant=_q(4, 64), cfg={"intermediate_size": 352}),
            # mlx_lm.convert's mixed_3_6 recipe: per-module bits in config.
            _spec(f"{arch}-mixed36", arch, "bfloat16", tied=t,
                  quant=_q(3, 64, "mixed_3_6")),
            # Hand-made overrides: other bits and group sizes per module and
            # some modules left in bf16.
            _spec(f"{arch}-overrides", arch, "bfloat16", tied=not t,
                  quant=_q(4, 64, "overrides")),
        ]
    specs += [
        _spec("llama-q2g32", "llama", "bfloat16", tied=True, quant=_q(2, 32)),
        _spec("qwen2-q5g64", "qwen2", "bfloat16", tied=False, quant=_q(5, 64)),
        _spec("qwen3-q6g32", "qwen3", "float32", tied=True, quant=_q(6, 32)),
        _spec("qwen3-q3g64", "qwen3", "bfloat16", tied=False, quant=_q(3, 64)),
        # MLX's mxfp4 mode everywhere (a quantized tied embedding / a
        # separate quantized head).
        _spec("llama-mxfp4", "llama", "bfloat16", tied=True,
              quant=_q(4, 32, mode="mxfp4")),
        _spec("qwen3-mxfp4", "qwen3", "float32", tied=False,
              quant=_q(4, 32, mode="mxfp4")),
        _spec("llama-rope-llama3", "llama", "float32", tied=False, cfg={
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 256},
            "rope_theta": 500000.0, "max_position_embeddings": 2048}),
        _spec("llama-rope-linear", "llama", "float32", tied=True, cfg={
            "rope_scaling": {"type": "linear", "factor": 2.0}}),
        _spec("llama-rope-yarn", "llama", "float32", tied=False, cfg={
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 512},
            "max_position_embeddings": 2048}),
        _spec("llama-attn-bias", "llama", "float32", tied=False,
              cfg={"attention_bias": True}),
        _spec("llama-sharded", "llama", "float32", tied=False, shards=2),
        _spec("llama-q4g64-sharded", "llama", "bfloat16", tied=False,
              quant=_q(4, 64), shards=3),
    ]
    return specs


SPECS = _build_specs()


def source_hash():
    """Identity of this generator, stored in STAMP so stale sets get rebuilt."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def generator_source_hash(path):
    """Identity of a family's generator at `path` and of these helpers it
    borrows, stored in STAMP so stale sets get rebuilt."""
    h = hashlib.sha256(Path(path).read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Everything below needs mlx.

def _imports():
    global mx, nn, np, tree_flatten, tree_unflatten, tree_map_with_path, mlu
    global generate_step, mixed_quant_predicate_builder, get_model_classes
    import numpy as np
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten, tree_unflatten, tree_map_with_path
    import mlx_lm.utils as mlu
    from mlx_lm.generate import generate_step
    from mlx_lm.convert import mixed_quant_predicate_builder
    from mlx_lm.utils import _get_classes as get_model_classes


def make_config(spec, base=BASE):
    cfg = dict(base[spec["arch"]])
    cfg.update(spec["cfg"])
    cfg["tie_word_embeddings"] = spec["tied"]
    cfg["torch_dtype"] = spec["dtype"]
    cfg["eos_token_id"] = cfg["vocab_size"] - 1
    cfg["bos_token_id"] = 1
    return cfg


def init_weights(model, seed):
    """Seeded weights (numpy RNG, independent of mlx's initialisers).

    The lm_head / tied embedding rows get log-normal norms so a few tokens
    dominate each distribution: peaky logits, few near-ties.
    """
    rng = np.random.default_rng(seed)
    new = []
    for name, p in sorted(tree_flatten(model.parameters())):
        shape = p.shape
        # (endswith / "in": a multimodal wrapper nests the names)
        if name.endswith("model.norm.weight") and ".layers." not in name:
            # Sets the logit scale: std ~ LOGIT_STD whatever EMB_SCALE is.
            gain = LOGIT_STD / (EMB_SCALE * np.sqrt(shape[0]))
            w = gain * (1.0 + 0.2 * rng.standard_normal(shape))
        elif name.endswith("norm.weight"):
            w = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            w = 0.1 * rng.standard_normal(shape)
        elif "embed_tokens" in name or "lm_head" in name:
            rows = np.exp(ROW_SIGMA * rng.standard_normal((shape[0], 1)))
            w = EMB_SCALE * rows * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[-1])
        new.append((name, mx.array(w.astype(np.float32))))
    model.update(tree_unflatten(new))


def cast_like_convert(model, dtype):
    """Same cast as mlx_lm.convert: floating parameters only, and only those
    the model's cast_predicate (when it has one) lets through."""
    dt = getattr(mx, dtype)
    cast = getattr(model, "cast_predicate", lambda _: True)

    def f(path, v):
        if cast(path) and mx.issubdtype(v.dtype, mx.floating):
            return v.astype(dt)
        return v

    model.update(tree_map_with_path(f, model.parameters()))


def overrides_predicate(num_layers):
    """Per-module quantization choices recorded by quantize_model in config."""
    def pred(path, module):
        if path.endswith("layers.0.self_attn.o_proj"):
            return False                      # stays in the float dtype
        if path.endswith(f"layers.{num_layers - 1}.mlp.up_proj"):
            return False
        if "v_proj" in path:
            return {"group_size": 32, "bits": 8, "mode": "affine"}
        if "embed_tokens" in path or "lm_head" in path:
            return {"group_size": 32, "bits": 6, "mode": "affine"}
        if "gate_proj" in path:
            return {"group_size": 64, "bits": 2, "mode": "affine"}
        return True                           # default 4 bits, group 64
    return pred


def save_sharded(path, model, shards):
    """mlx_lm.utils.save_model, with make_shards forced to `shards` files."""
    orig = mlu.make_shards
    if shards > 1:
        def make(weights, max_file_size_gb=None):
            items = list(weights.items())
            per = -(-len(items) // shards)
            return [dict(items[i:i + per]) for i in range(0, len(items), per)]
        mlu.make_shards = make
    try:
        mlu.save_model(path, model)
    finally:
        mlu.make_shards = orig


def take_saved_weights(path):
    """Every tensor of a model saved by save_sharded, its shard files
    removed (for makers that rewrite the weights in another layout), and
    the index it had (its metadata is written back with the new map)."""
    index = json.loads((path / "model.safetensors.index.json").read_text())
    weights = {}
    for shard in sorted(set(index["weight_map"].values())):
        weights.update(mx.load(str(path / shard)))
        (path / shard).unlink()
    return weights, index


def build_model(spec, path, cfg=None, base=BASE):
    """The spec's model (config `cfg`, default make_config(spec, base))
    built, seeded, cast and quantized by mlx-lm's code and saved in `path`;
    returns the in-memory model."""
    cfg = cfg if cfg is not None else make_config(spec, base)
    model_cls, args_cls = get_model_classes(cfg)
    model = model_cls(args_cls.from_dict(cfg))
    init_weights(model, zlib.crc32(spec["name"].encode()))
    cast_like_convert(model, spec["dtype"])
    q = spec["quant"]
    if q:
        pred = None
        if q["predicate"] == "overrides":
            pred = overrides_predicate(cfg["num_hidden_layers"])
        elif q["predicate"]:
            pred = mixed_quant_predicate_builder(q["predicate"], model,
                                                 q["group_size"])
        model, cfg = mlu.quantize_model(model, cfg, q["group_size"], q["bits"],
                                        mode=q["mode"], quant_predicate=pred)
    mx.eval(model.parameters())
    save_sharded(path, model, spec["shards"])
    mlu.save_config(dict(cfg), path / "config.json")
    return model


class Recorder:
    """logits processor that keeps the raw logits of every step."""

    def __init__(self):
        self.steps = []

    def __call__(self, tokens, logits):
        self.steps.append(logits[0])
        return logits


def run_reference(model, prompt, eos_ids, max_tokens=MAX_TOKENS):
    """Greedy generation exactly as mlx_lm.stream_generate drives it."""
    rec = Recorder()
    tokens, finish, eos_hit = [], "length", None
    gen = generate_step(mx.array(prompt), model, max_tokens=max_tokens,
                        logits_processors=[rec])
    for n, (tok, _) in enumerate(gen):
        if tok in eos_ids:            # stream_generate's stop rule
            finish, eos_hit = "stop", tok
            break
        tokens.append(tok)
        if n + 1 == max_tokens:
            break
    n_steps = len(tokens) + (1 if eos_hit is not None else 0)
    logits = [np.array(l.astype(mx.float32)) for l in rec.steps[:n_steps]]
    return tokens, finish, eos_hit, logits


def margin(l):
    top = np.partition(l, -2)[-2:]
    return float(top[1] - top[0])


def eos_set(cfg):
    e = cfg.get("eos_token_id")
    return set(e if isinstance(e, list) else [e]) if e is not None else set()


def pick_probe_eos(model):
    """An id greedy decoding reaches mid-way, so the stop rule is exercised."""
    for prompt in (PROMPTS["len40"], PROMPTS["len7"], PROMPTS["len1"]):
        toks, _, _, _ = run_reference(model, prompt, set())
        for k in range(6, len(toks)):
            if toks[k] not in toks[:k] and toks[k] not in prompt:
                return toks[k]
    return None


def rel_gap(a, b):
    return float(np.max(np.abs(a - b)) / np.std(b))


def record_references(name, path, model, model32, mem_model, eos_ids,
                      prompt_set=None):
    """Per prompt of `prompt_set` (default PROMPTS): the native and float32
    references (tokens, finish reason, margins, step std; last-position
    logits saved in `path`), checked against the in-memory model.  Returns
    (prompts entry, max native-vs-f32 gap)."""
    prompts = {}
    for pname, prompt in (prompt_set or PROMPTS).items():
        entry = {"prompt_tokens": prompt}
        for kind, m in (("native", model), ("f32", model32)):
            toks, finish, eos_hit, logits = run_reference(m, prompt, eos_ids)
            fname = f"logits_{pname}_{kind}.npy"
            np.save(path / fname, logits[0])
            entry[kind] = {
                "tokens": toks,
                "finish_reason": finish,
                "eos_token": eos_hit,
                "margins": [margin(l) for l in logits],
                "step_std": [float(np.std(l)) for l in logits],
                "logits_file": fname,
            }
            if kind == "native":
                native_logits = logits[0]
        # Self-containment: the in-memory model must give the same logits.
        _, _, _, mem_logits = run_reference(mem_model, prompt, set(), 1)
        if not np.array_equal(mem_logits[0], native_logits):
            raise SystemExit(f"{name}/{pname}: reloaded model differs "
                             f"from the in-memory one by "
                             f"{np.max(np.abs(mem_logits[0] - native_logits))}")
        entry["gap_rel_native_vs_f32"] = rel_gap(native_logits, logits[0])
        prompts[pname] = entry
    return prompts, max(p["gap_rel_native_vs_f32"] for p in prompts.values())


def fresh_dir(path):
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def build_one(spec, out, cfg=None, base=BASE, rewrite=None, native=True):
    """Build one model of `spec` (config `cfg`, default make_config(spec,
    base)) in out/NAME with its references; returns reference.json's
    content. `rewrite(path)` may change the saved files first (another
    layout of the same weights), which mlx-lm's reload must then turn back
    into the same model. native=False: mlx cannot run the stored dtype (its
    CPU gather_mm takes float32 only), so the "native" reference is the
    float32 one."""
    path = out / spec["name"]
    fresh_dir(path)
    mem_model = build_model(spec, path, cfg, base)
    if rewrite:
        rewrite(path)

    if spec["eos"] == "probe":
        # generation_config.json overrides config.json's eos_token_id in
        # mlx_lm.utils.load_config; use a list to exercise that form.
        probe = pick_probe_eos(mem_model)
        cfgj = json.loads((path / "config.json").read_text())
        ids = [cfgj["eos_token_id"]] + ([probe] if probe is not None else [])
        (path / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": 1, "eos_token_id": ids}, indent=2) + "\n")

    model, cfg = mlu.load_model(path)
    eos_ids = eos_set(cfg)
    model32, _ = mlu.load_model(path)
    model32.set_dtype(mx.float32)  # floating params only; packed ints stay
    if not native:
        model = model32
        mem_model.set_dtype(mx.float32)

    ref = {"model": spec["name"], "arch": cfg.get("model_type"),
           "dtype": spec["dtype"],
           "quantization": cfg.get("quantization"), "tied": spec["tied"],
           "eos_token_ids": sorted(eos_ids), "max_tokens": MAX_TOKENS,
           "mlx_version": mx.__version__, "prompts": {}}
    ref["prompts"], ref["gap_rel_native_vs_f32"] = record_references(
        spec["name"], path, model, model32, mem_model, eos_ids)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def generator_main(argv, doc, default_out, specs, build, stamp_hash):
    """The command line of a generator: build `specs` (or --only NAMEs) with
    build(spec, out) into --out; a full build also removes model
    directories of other names and writes the STAMP (stamp_hash())."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", type=Path, default=default_out)
    ap.add_argument("--only", nargs="*", help="build only these models")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    _imports()
    mx.set_default_device(mx.cpu)  # same numbers on every host
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / STAMP_FILE).unlink(missing_ok=True)
    by_name = {s["name"]: s for s in specs}
    todo = [by_name[n] for n in args.only] if args.only else specs
    if not args.only:
        for d in out.iterdir():
            if (d / "reference.json").exists() and d.name not in by_name:
                shutil.rmtree(d)
    t0 = time.time()
    devnull = open(os.devnull, "w")
    for spec in todo:
        # quantize_model prints an [INFO] line; keep stdout readable.
        so, sys.stdout = sys.stdout, devnull
        try:
            ref = build(spec, out)
        finally:
            sys.stdout = so
        if not args.quiet:
            ms = [m / sd for p in ref["prompts"].values()
                  for m, sd in zip(p["f32"]["margins"], p["f32"]["step_std"])]
            fin = ",".join(p["native"]["finish_reason"][0]
                           for p in ref["prompts"].values())
            print(f"{spec['name']:26s} gap={ref['gap_rel_native_vs_f32']:.2e} "
                  f"min_margin/std(f32)={min(ms):.4f} finish={fin}")
    if not args.only:
        import mlx_lm
        (out / STAMP_FILE).write_text(json.dumps({
            "source_sha256": stamp_hash(), "mlx": mx.__version__,
            "mlx_lm": mlx_lm.__version__,
            "models": [s["name"] for s in specs]}) + "\n")
    if not args.quiet:
        print(f"{len(todo)} models in {time.time() - t0:.1f}s -> {out}")


def main(argv=None):
    generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one, source_hash)


if __name__ == "__main__":
    main()
