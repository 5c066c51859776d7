#!/usr/bin/env python3
"""Tiny random Qwen3-Next, Qwen3.5 and Hugging Face-layout Gemma 4 models
with random LoRA adapters made by mlx-lm's tuner, and mlx-lm's outputs with
each adapter applied.

Qwen3-Next and Qwen3.5 (make_hybrid_models.py's "qwen3_next-f32",
"qwen3_5-f32"): mlx-lm's linear_to_lora_layers with no keys adapts every
nn.Linear of the last num_layers layers, the gated DeltaNet's too:
Qwen3-Next's fused linear_attn.in_proj_qkvz and in_proj_ba (the LoRA term
joins the fused product, before mlx-lm's fix_query_key_value_ordering
splits it) and out_proj; Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b,
in_proj_a and out_proj. "all8" is that (keys None, every layer), "lin4" the
DeltaNet's projections alone in the last 2 layers (rsLoRA in PEFT form).

Gemma 4 (make_gemma4_models.py's "gemma4-moe-hf-mm-f32", a
Gemma4ForConditionalGeneration checkpoint: the language model under
model.language_model., experts as transformers' bare experts.gate_up_proj
/ experts.down_proj, which mlx-lm's sanitize splits into
experts.switch_glu.{gate,up,down}_proj): "all8" (keys None: attention,
the MLP, router.proj and the experts' LoRASwitchLinear, under mlx-lm's
names after sanitize) and "lin4" (q_proj, v_proj, down_proj and
router.proj, plain LoRALinear, last 2 layers); the same two on
"gemma4-moe-f32", the same model in mlx-lm's own layout.

The adapters are trained-name files as mlx_lm.lora writes them
(make_lora_models.write_mlx_adapter, lora_b randomized), made on the
model reloaded from disk so their names are the ones mlx-lm loads. Each
one without experts stacked in it is also written in PEFT's layout under
transformers' module names: base_model.model.<HF module>.lora_{A,B}.weight
(mlx-lm's language_model.model. becomes transformers' multimodal
model.language_model.; Qwen3-Next's routed experts per expert as
transformers 4.x named them, make_lora_moe_models.write_peft_adapter).
Gemma 4's experts are 3-D nn.Parameters in transformers, which PEFT's
target_modules cannot adapt, so its "all8" has no PEFT form.

Usage: python tests/parity/make_lora_hybrid_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gemma4_models as mg4  # noqa: E402
import make_hybrid_models as mh  # noqa: E402
import make_lora_models as ml  # noqa: E402
import make_lora_moe_models as mlm  # noqa: E402
import make_models as mm  # noqa: E402

DEFAULT_OUT = HERE.parents[0] / ".work" / "lora-hybrid"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = ml.PROMPTS

_by_name = {s["name"]: s for s in mh.SPECS + mg4.SPECS}
SPECS = [_by_name[n] for n in ("qwen3_next-f32", "qwen3_5-f32",
                               "gemma4-moe-hf-mm-f32", "gemma4-moe-f32")]

DELTA_KEYS = {
    "qwen3_next-f32": ["linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba",
                       "linear_attn.out_proj"],
    "qwen3_5-f32": ["linear_attn.in_proj_qkv", "linear_attn.in_proj_z",
                    "linear_attn.in_proj_b", "linear_attn.in_proj_a",
                    "linear_attn.out_proj"],
    "gemma4-moe-hf-mm-f32": ["self_attn.q_proj", "self_attn.v_proj",
                             "mlp.down_proj", "router.proj"],
}
DELTA_KEYS["gemma4-moe-f32"] = DELTA_KEYS["gemma4-moe-hf-mm-f32"]


def adapters_of(spec):
    """name: rank, mlx scale, keys (None: every linear and switch linear
    of a layer), num_layers (-1: all), PEFT variant."""
    return {
        "all8": dict(rank=8, scale=10.0, keys=None, num_layers=-1,
                     rslora=False),
        "lin4": dict(rank=4, scale=2.5, keys=DELTA_KEYS[spec["name"]],
                     num_layers=2, rslora=True),
    }


def has_peft(spec, adapter):
    """Whether the adapter has a PEFT form (Gemma 4's experts have none)."""
    return not (spec in mg4.SPECS and adapter == "all8")


def source_hash():
    h = hashlib.sha256(Path(__file__).read_bytes())
    for mod in (ml, mlm, mm, mh, mg4):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()


def hf_name(mlx_name):
    """transformers' module path of an mlx-lm one (multimodal models keep
    the language model under model.language_model.)."""
    mlx_lm, hf = "language_model.model.", "model.language_model."
    if mlx_name.startswith(mlx_lm):
        return hf + mlx_name[len(mlx_lm):]
    return mlx_name


def write_peft_adapter(weights, a, path):
    mlm.write_peft_adapter({hf_name(k): v for k, v in weights.items()}, a,
                           path)


def build(spec, out):
    gen = mg4 if spec in mg4.SPECS else mh
    ref = gen.build_one(spec, out)
    path = out / spec["name"]
    ref["adapters"] = {}
    for name, a in adapters_of(spec).items():
        mem, _ = mm.mlu.load_model(path)
        write = (write_peft_adapter if has_peft(spec, name)
                 else lambda *args: None)
        ref["adapters"][name] = ml.record_adapter(spec, path, name, a, mem,
                                                  write)
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build, source_hash)


if __name__ == "__main__":
    main()
