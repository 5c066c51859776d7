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

Usage: python tests/parity/make_lora_moe_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_lora_models as ml  # noqa: E402
import make_models as mm  # noqa: E402
import make_moe_models as mo  # noqa: E402

DEFAULT_OUT = HERE.parents[0] / ".work" / "lora-moe"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = ml.PROMPTS

_by_name = {s["name"]: s for s in mo.SPECS}
SPECS = [_by_name[n] for n in ("qmoe-f32", "qmoe-f32-hf", "qmoe-q4g64")]

EXPERT_KEYS = ["mlp.switch_mlp.gate_proj", "mlp.switch_mlp.up_proj",
               "mlp.switch_mlp.down_proj"]
# name: rank, mlx scale, keys (None: every linear and switch linear of a
# layer, the router included), num_layers (-1: all), PEFT variant.
ADAPTERS = {
    "all8": dict(rank=8, scale=10.0, keys=None, num_layers=-1, rslora=False),
    "experts4": dict(rank=4, scale=2.5, keys=EXPERT_KEYS, num_layers=2,
                     rslora=True),
}


def source_hash():
    h = hashlib.sha256(Path(__file__).read_bytes())
    for mod in (ml, mm, mo):
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
    ref = mo.build_one(spec, out)
    path = out / spec["name"]
    native = spec["dtype"] == "float32" or spec["quant"] is not None
    ref["adapters"] = {}
    for name, a in ADAPTERS.items():
        mem = mm.build_model(spec, path / "_scratch", base=mo.BASE)
        mm.shutil.rmtree(path / "_scratch")
        ref["adapters"][name] = ml.record_adapter(
            spec, path, name, a, mem, write_peft_adapter, native)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build, source_hash)


if __name__ == "__main__":
    main()
