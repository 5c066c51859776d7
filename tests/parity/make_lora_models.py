#!/usr/bin/env python3
"""Tiny random models with random LoRA adapters, and mlx-lm's outputs with
each adapter applied.

Base models come from make_models.py's own specs (built by mlx-lm's code).
Adapters are made by mlx-lm's tuner (linear_to_lora_layers, the code
`mlx_lm.lora` trains with), their lora_b set to random values (training
starts it at zero, which would test nothing), and saved as mlx_lm.lora
saves them: adapters.safetensors (the trainable parameters) and
adapter_config.json (fine_tune_type, num_layers, lora_parameters). The
references are mlx_lm.utils.load_adapters on the model reloaded from disk,
then make_models' greedy generation and logits (native and f32-upcast).

Each adapter is also written in PEFT's layout (adapter_model.safetensors
with base_model.model.<module>.lora_A.weight [r, in] / lora_B.weight
[out, r], adapter_config.json with r, lora_alpha, use_rslora,
target_modules), with lora_alpha chosen so that PEFT's scale (alpha / r,
or alpha / sqrt(r) with rsLoRA) equals mlx-lm's: PEFT's forward,
y = W x + scale * B (A x), is mlx-lm's with a = A^T, b = B^T, so the same
mlx-lm reference checks both. (peft + transformers would need torch, too
heavy for CI.)

Usage: python tests/parity/make_lora_models.py [--out DIR] [--only NAME ...]
"""

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_models as mm  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parents[1] / ".work" / "lora"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = {k: mm.PROMPTS[k] for k in ("len7", "len40")}

_by_name = {s["name"]: s for s in mm.SPECS}
# f32, a quantized base (bf16 activations), a bf16 one with biases; and an
# f32 Llama whose GGUF form has llama.cpp's permuted q/k rows.
SPECS = [_by_name[n] for n in ("qwen3-f32", "llama-q4g64", "qwen2-bf16",
                               "llama-f32")]

# name: rank, mlx scale, keys (None: every linear of a layer), num_layers
# (-1: all), PEFT variant.
ADAPTERS = {
    "all8": dict(rank=8, scale=10.0, keys=None, num_layers=-1, rslora=False),
    "qvd4": dict(rank=4, scale=2.5, num_layers=1, rslora=True,
                 keys=["self_attn.q_proj", "self_attn.v_proj",
                       "mlp.down_proj"]),
}


def source_hash():
    return mm.generator_source_hash(Path(__file__))


def _randomize_b(model, seed, scale, rank):
    """lora_b ~ N(0, sigma): the adapter moves each projection by ~30% of
    its base output (|A x| ~ |x| / sqrt(3) per rank component)."""
    rng = mm.np.random.default_rng(seed)
    sigma = 0.3 * math.sqrt(3.0) / (scale * math.sqrt(rank))
    new = []
    for name, p in sorted(mm.tree_flatten(model.trainable_parameters())):
        if name.endswith("lora_b"):
            p = mm.mx.array(sigma * rng.standard_normal(p.shape)
                            .astype(mm.np.float32))
        new.append((name, p))
    model.update(mm.tree_unflatten(new))


def write_mlx_adapter(model, n_layers, name, a, path):
    from mlx_lm.tuner.utils import linear_to_lora_layers
    model.freeze()
    params = {"rank": a["rank"], "scale": a["scale"], "dropout": 0.0}
    if a["keys"]:
        params["keys"] = a["keys"]
    num_layers = n_layers if a["num_layers"] < 0 else a["num_layers"]
    linear_to_lora_layers(model, num_layers, params)
    _randomize_b(model, mm.zlib.crc32(name.encode()), a["scale"], a["rank"])
    weights = dict(mm.tree_flatten(model.trainable_parameters()))
    path.mkdir(parents=True)
    mm.mx.save_safetensors(str(path / "adapters.safetensors"), weights)
    (path / "adapter_config.json").write_text(json.dumps({
        "fine_tune_type": "lora", "num_layers": num_layers,
        "lora_parameters": params}, indent=1) + "\n")
    return weights


def write_peft_adapter(weights, a, path):
    """The same matrices in PEFT's layout and names."""
    tensors, targets = {}, set()
    for k, v in weights.items():
        base, leaf = k.rsplit(".", 1)
        targets.add(base.rsplit(".", 1)[1])
        peft = "lora_A" if leaf == "lora_a" else "lora_B"
        tensors[f"base_model.model.{base}.{peft}.weight"] = mm.mx.array(
            mm.np.array(v).T.copy())
    save_peft(tensors, targets, a, path)


def save_peft(tensors, targets, a, path):
    """adapter_model.safetensors and adapter_config.json, lora_alpha making
    PEFT's scale mlx-lm's."""
    r = a["rank"]
    alpha = a["scale"] * (math.sqrt(r) if a["rslora"] else r)
    path.mkdir(parents=True)
    mm.mx.save_safetensors(str(path / "adapter_model.safetensors"), tensors,
                           metadata={"format": "pt"})
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r,
        "lora_alpha": alpha, "use_rslora": a["rslora"], "lora_dropout": 0.0,
        "bias": "none", "target_modules": sorted(targets),
        "base_model_name_or_path": None}, indent=1) + "\n")


def record_adapter(spec, path, name, a, mem, write_peft, native=True):
    """Adapter `name` written for the base model in `path` (mlx-lm's layout,
    and PEFT's by write_peft), and mlx-lm's references with it loaded: the
    model's own dtype and f32 (native False: f32 for both, mem upcast)."""
    from mlx_lm.tuner.utils import load_adapters
    weights = write_mlx_adapter(mem, len(mem.layers), name, a, path / name)
    write_peft(weights, a, path / f"{name}-peft")
    model, cfg = mm.mlu.load_model(path)
    load_adapters(model, str(path / name))
    model32, _ = mm.mlu.load_model(path)
    load_adapters(model32, str(path / name))
    model32.set_dtype(mm.mx.float32)
    if not native:
        model = model32
        mem.set_dtype(mm.mx.float32)
    prompts, gap = mm.record_references(
        f"{spec['name']}/{name}", path / name, model, model32, mem,
        mm.eos_set(cfg), PROMPTS)
    for entry in prompts.values():
        for kind in ("native", "f32"):
            entry[kind]["logits_file"] = f"{name}/{entry[kind]['logits_file']}"
    return {"prompts": prompts, "gap_rel_native_vs_f32": gap}


def build(spec, out):
    ref = mm.build_one(spec, out, native=True)
    path = out / spec["name"]
    ref["adapters"] = {}
    for name, a in ADAPTERS.items():
        mem = mm.build_model(spec, path / "_scratch")
        mm.shutil.rmtree(path / "_scratch")
        ref["adapters"][name] = record_adapter(spec, path, name, a, mem,
                                               write_peft_adapter)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build, source_hash)


if __name__ == "__main__":
    main()
