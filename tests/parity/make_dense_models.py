#!/usr/bin/env python3
"""Build tiny random-weight models of the Llama-like dense families and
their mlx-lm references: smollm3, phi3, olmo2, olmo3, granite, ministral3
and the mistral3 wrapper.

Same method, helpers and CLI as make_models.py (build_one): each model is
built by mlx-lm's own Model class for its model_type, seeded, cast /
quantized / saved by mlx-lm's code, reloaded from disk with
mlx_lm.utils.load_model and run by mlx_lm.generate.generate_step in its
stored dtype and upcast to float32.

Each family's distinguishing feature is exercised:
  smollm3     NoPE layers, by an explicit no_rope_layers list and by the
              default interval (every 4th layer);
  phi3        fused qkv_proj / gate_up_proj, partial_rotary_factor 0.75
              (1.0 in the 8-bit one), longrope (long_factor per frequency,
              max / original context 16 so the attention scale is not 1)
              and plain RoPE;
  olmo2       post-norms only, q/k norms over the whole projection;
  olmo3       the same with sliding-window layers (window 8 < the 40-token
              prompt), by layer_types and by the default pattern, yarn RoPE
              on the full layers;
  granite     the four multipliers;
  ministral3  yarn rope_parameters and the Llama 4 attention temperature
              (period 16, so prompt and generation cross several periods),
              one model with sliding layers;
  mistral3    the multimodal wrapper (text_config, weights under
              "language_model.").

Usage: python tests/parity/make_dense_models.py [--out DIR] [--only NAME ...]
"""

import copy
import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402  (cheap: no mlx at import time)

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-dense"
STAMP_FILE = mm.STAMP_FILE
MAX_TOKENS = mm.MAX_TOKENS
PROMPTS = mm.PROMPTS          # lengths 1, 7, 40; ids < 500

_COMMON = dict(hidden_size=128, num_hidden_layers=4, intermediate_size=256,
               num_attention_heads=4, num_key_value_heads=2,
               rms_norm_eps=1e-5, vocab_size=512,
               max_position_embeddings=2048)

BASE = {
    "smollm3": dict(_COMMON, model_type="smollm3",
                    architectures=["SmolLM3ForCausalLM"], head_dim=32,
                    rope_theta=100000.0),
    # head_dim is hidden / heads (32); partial rotary 0.75 rotates 24.
    "phi3": dict(_COMMON, model_type="phi3",
                 architectures=["Phi3ForCausalLM"], rope_theta=10000.0,
                 partial_rotary_factor=0.75, max_position_embeddings=8192,
                 original_max_position_embeddings=512),
    "olmo2": dict(_COMMON, model_type="olmo2",
                  architectures=["Olmo2ForCausalLM"], rope_theta=500000.0),
    "olmo3": dict(_COMMON, model_type="olmo3",
                  architectures=["Olmo3ForCausalLM"], rope_theta=500000.0,
                  sliding_window=8),
    "granite": dict(_COMMON, model_type="granite",
                    architectures=["GraniteForCausalLM"], rope_theta=10000.0,
                    attention_bias=False, mlp_bias=False,
                    embedding_multiplier=3.0, attention_multiplier=0.09,
                    residual_multiplier=0.5, logits_scaling=2.5),
    "ministral3": dict(_COMMON, model_type="ministral3",
                       architectures=["Ministral3ForCausalLM"], head_dim=32,
                       rope_parameters={
                           "rope_type": "yarn", "rope_theta": 1000000.0,
                           "factor": 4.0, "original_max_position_embeddings":
                           16, "beta_fast": 32.0, "beta_slow": 1.0,
                           "mscale": 1.0, "mscale_all_dim": 0.0,
                           "llama_4_scaling_beta": 0.1}),
}

# longrope: one factor per rotated frequency (24 / 2).
LONG_FACTOR = [1.0, 1.05, 1.1, 1.2, 1.35, 1.5, 1.8, 2.2, 2.8, 3.5, 4.5, 6.0]
LONGROPE = {"rope_scaling": {"type": "longrope", "long_factor": LONG_FACTOR,
                             "short_factor": [1.0] * 12}}
OLMO3_TYPES = ["sliding_attention", "full_attention"] * 2
YARN = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 256}}


def _spec(name, arch, dtype="float32", tied=True, quant=None, cfg=None,
          wrap=None):
    s = mm._spec(name, arch, dtype, tied=tied, quant=quant, cfg=cfg)
    s["wrap"] = wrap
    return s


SPECS = [
    _spec("smollm3-f32", "smollm3", cfg={"no_rope_layers": [1, 0, 1, 1]}),
    _spec("smollm3-bf16", "smollm3", "bfloat16", tied=False),
    _spec("smollm3-q4g64", "smollm3", "bfloat16", quant=mm._q(4, 64)),
    _spec("phi3-f32", "phi3", tied=False, cfg=LONGROPE),
    _spec("phi3-bf16", "phi3", "bfloat16"),
    _spec("phi3-q4g64", "phi3", "bfloat16", tied=False, quant=mm._q(4, 64),
          cfg=LONGROPE),
    _spec("phi3-q8g64", "phi3", "bfloat16", quant=mm._q(8, 64),
          cfg={"partial_rotary_factor": 1.0}),
    _spec("olmo2-f32", "olmo2", tied=False),
    _spec("olmo2-q4g64", "olmo2", "bfloat16", quant=mm._q(4, 64)),
    _spec("olmo3-f32-yarn", "olmo3", tied=False,
          cfg=dict(YARN, layer_types=OLMO3_TYPES)),
    _spec("olmo3-bf16", "olmo3", "bfloat16"),
    _spec("olmo3-q4g64", "olmo3", "bfloat16", tied=False, quant=mm._q(4, 64),
          cfg=YARN),
    _spec("granite-f32", "granite", tied=False),
    _spec("granite-bf16", "granite", "bfloat16"),
    _spec("granite-q4g64", "granite", "bfloat16", quant=mm._q(4, 64)),
    _spec("ministral3-f32", "ministral3", tied=False),
    _spec("ministral3-bf16", "ministral3", "bfloat16",
          cfg={"layer_types": ["sliding_attention", "full_attention"] * 2,
               "sliding_window": 8}),
    _spec("ministral3-q4g64", "ministral3", "bfloat16", quant=mm._q(4, 64)),
    _spec("mistral3-f32", "ministral3", tied=False, wrap="mistral3"),
]


def source_hash():
    """Identity of this generator and of the helpers it borrows."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(mm.__file__).read_bytes())
    return h.hexdigest()


def make_config(spec):
    """HF-spelled config.json of a spec; a `wrap`ped one nests the text
    model's config as mistral3's text_config (mlx-lm reads tying and the
    dimensions there)."""
    cfg = copy.deepcopy(BASE[spec["arch"]])
    cfg.update(copy.deepcopy(spec["cfg"]))
    cfg["tie_word_embeddings"] = spec["tied"]
    cfg["torch_dtype"] = spec["dtype"]
    cfg["eos_token_id"] = cfg["vocab_size"] - 1
    cfg["bos_token_id"] = 1
    if spec["wrap"] == "mistral3":
        cfg = {"model_type": "mistral3",
               "architectures": ["Mistral3ForConditionalGeneration"],
               "text_config": cfg, "torch_dtype": spec["dtype"],
               "eos_token_id": cfg["eos_token_id"], "bos_token_id": 1}
    return cfg


def build_one(spec, out):
    return mm.build_one(spec, out, make_config(spec))


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
