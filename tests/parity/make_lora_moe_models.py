#!/usr/bin/env python3
"""Tiny random Qwen3-MoE models with random LoRA adapters on their routed
experts, and mlx-lm's outputs with each adapter applied.

The bases are make_moe_models.py's own specs (mlx-lm's qwen3_moe: 8
experts, 2 per token; f32, the Hugging Face per-expert layout, 4-bit with a
dense layer 0). The adapters are made as make_lora_models.py makes them:
mlx-lm's tuner (linear_to_lora_layers) turns each SwitchLinear of
mlp.switch_mlp.{gate,up,down}_proj into a LoRASwitchLinear, whose lora_a
[experts, r, in] and lora_b [experts, out, r] are per-expert stacks (its
forward adds scale * b_e (a_e x) for the expert e the router picked), and
every nn.Linear into a LoRALinear (with keys None that includes the
router mlp.gate and the dense MLP of a dense layer); lora_b is then
randomized and the adapter saved as mlx_lm.lora saves it. The references
are mlx_lm.utils.load_adapters on the reloaded model, then make_models'
greedy generation and logits (native and f32-upcast).

Each adapter is also written in PEFT's layout for transformers 4.x's
Qwen3-MoE, whose experts were separate modules: mlp.experts.E.X.lora_A
.weight = lora_a[E] [r, in], lora_B = lora_b[E] [out, r] (the other
modules transposed as make_lora_models.py does), with PEFT's scale equal
to mlx-lm's, so the same mlx-lm reference checks both. (transformers 5
fuses the experts into 3-D parameters, which PEFT adapts differently;
peft + transformers would need torch, too heavy for CI.)

A tiny random Qwen3-Next (make_hybrid_models.py's "qwen3_next-f32": a
sigmoid-gated shared expert beside the routed ones in every layer) gets
adapters of its shared expert: mlx-lm's shared_expert.{gate,up,down}_proj
and shared_expert_gate are plain nn.Linear, so its tuner makes each a
LoRALinear as it does attention's (lora_a [in, r], lora_b [r, out]).

A tiny random gpt-oss (make_gptoss_models.py's "gptoss-f32": biased
stacked experts, mlx-lm's sanitized layout mlp.experts.{gate,up,down}_proj,
its clamped SwiGLU, a biased router mlp.router) gets the same two kinds of
adapter: mlx-lm's tuner makes its SwitchLinear experts LoRASwitchLinear
(the base keeps its biases) and the router and attention LoRALinear. It
has no PEFT form: transformers' gpt-oss experts are fused 3-D parameters.
"gptoss-hf-mxfp4" is the Hugging Face checkpoint layout (MXFP4 experts
with gate and up rows interleaved in one gate_up_proj), which mlx-lm's
sanitize splits, so the same adapter names apply to it.

Usage: python tests/parity/make_lora_moe_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gptoss_models as mg  # noqa: E402
import make_hybrid_models as mh  # noqa: E402
import make_lora_models as ml  # noqa: E402
import make_models as mm  # noqa: E402
import make_moe_models as mo  # noqa: E402

DEFAULT_OUT = HERE.parents[0] / ".work" / "lora-moe"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = ml.PROMPTS

_by_name = {s["name"]: s for s in mo.SPECS + mh.SPECS + mg.SPECS}
SPECS = [_by_name[n] for n in ("qmoe-f32", "qmoe-f32-hf", "qmoe-q4g64",
                               "qwen3_next-f32", "gptoss-f32",
                               "gptoss-hf-mxfp4")]

EXPERT_KEYS = ["mlp.switch_mlp.gate_proj", "mlp.switch_mlp.up_proj",
               "mlp.switch_mlp.down_proj"]
# name: rank, mlx scale, keys (None: every linear and switch linear of a
# layer, the router included), num_layers (-1: all), PEFT variant.
ADAPTERS = {
    "all8": dict(rank=8, scale=10.0, keys=None, num_layers=-1, rslora=False),
    "experts4": dict(rank=4, scale=2.5, keys=EXPERT_KEYS, num_layers=2,
                     rslora=True),
}
SHARED_KEYS = ["mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
               "mlp.shared_expert.down_proj", "mlp.shared_expert_gate"]
# Qwen3-Next's: the shared expert and its gate alone, and with the routed
# experts and the router in the last 2 layers.
SHARED_ADAPTERS = {
    "shared8": dict(rank=8, scale=10.0, keys=SHARED_KEYS, num_layers=-1,
                    rslora=False),
    "moe4": dict(rank=4, scale=2.5, keys=SHARED_KEYS + EXPERT_KEYS
                 + ["mlp.gate"], num_layers=2, rslora=True),
}


GPTOSS_KEYS = ["mlp.experts.gate_proj", "mlp.experts.up_proj",
               "mlp.experts.down_proj", "mlp.router"]
# gpt-oss's: every linear and switch linear (keys None), and its experts
# and router in the last 2 layers.
GPTOSS_ADAPTERS = {
    "all8": ADAPTERS["all8"],
    "experts4": dict(ADAPTERS["experts4"], keys=GPTOSS_KEYS),
}


def family(spec):
    """The generator module of the base of `spec`, and its adapters."""
    if spec in mh.SPECS:
        return mh, SHARED_ADAPTERS
    if spec in mg.SPECS:
        return mg, GPTOSS_ADAPTERS
    return mo, ADAPTERS


def adapters_of(spec):
    """The adapters made for the base of `spec`."""
    return family(spec)[1]


def layouts_of(spec):
    """The layouts its adapters are written in."""
    return ("mlx",) if spec in mg.SPECS else ("mlx", "peft")


def source_hash():
    h = hashlib.sha256(Path(__file__).read_bytes())
    for mod in (ml, mm, mo, mh, mg):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()


def write_peft_adapter(weights, a, path):
    """The same matrices in PEFT's layout: switch_mlp stacks as per-expert
    modules mlp.experts.E.X."""
    np = mm.np
    tensors, targets = {}, set()
    for k, v in weights.items():
        base, leaf = k.rsplit(".", 1)
        targets.add(base.rsplit(".", 1)[1])
        peft = "lora_A" if leaf == "lora_a" else "lora_B"
        v = np.array(v)
        if ".switch_mlp." in base:
            layer, proj = base.split(".switch_mlp.")
            for e in range(v.shape[0]):
                tensors[f"base_model.model.{layer}.experts.{e}.{proj}."
                        f"{peft}.weight"] = mm.mx.array(v[e].copy())
        else:
            tensors[f"base_model.model.{base}.{peft}.weight"] = mm.mx.array(
                v.T.copy())
    ml.save_peft(tensors, targets, a, path)


def build(spec, out):
    gen, adapters = family(spec)
    ref = gen.build_one(spec, out)
    path = out / spec["name"]
    native = spec["dtype"] == "float32" or spec["quant"] is not None
    write_peft = (write_peft_adapter if "peft" in layouts_of(spec)
                  else lambda *args: None)
    ref["adapters"] = {}
    for name, a in adapters.items():
        (path / "_scratch").mkdir()   # (the HF writer does not make it)
        mem = (mm.build_model(spec, path / "_scratch", base=mo.BASE)
               if gen is mo else gen.build_model(spec, path / "_scratch"))
        mm.shutil.rmtree(path / "_scratch")
        ref["adapters"][name] = ml.record_adapter(
            spec, path, name, a, mem, write_peft, native)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build, source_hash)


if __name__ == "__main__":
    main()
