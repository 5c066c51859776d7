#!/usr/bin/env python3
"""A tiny random Qwen3.5 model whose checkpoint carries a
multi-token-prediction head (mtp.* weights), and the head's reference.

The target is make_hybrid_models' "small" qwen3_5 (float32, tied), built
and saved by mlx-lm's own code. mlx-lm drops mtp.* on load (its sanitize),
so the head's tensors are added beside it, in model-mtp.safetensors (listed
in the index), under vLLM's names for Qwen3.5 / Qwen3-Next MTP:
  mtp.fc.weight [hidden, 2 * hidden], mtp.pre_fc_norm_embedding.weight,
  mtp.pre_fc_norm_hidden.weight, mtp.norm.weight, and one full-attention
  decoder layer mtp.layers.0.* (input_layernorm, self_attn.{q,k,v,o}_proj,
  self_attn.{q,k}_norm, post_attention_layernorm, mlp.{gate,up,down}_proj),
whose parameter names and shapes come from mlx-lm's own qwen3_5
DecoderLayer for a full-attention layer. The weights are in the converted
form mlx-lm writes (effective RMSNorm weights, like the target's).

The reference (mtp_numpy_ref.py): the target's last-layer hidden states
BEFORE the final norm by mlx-lm's own layers, then the head: the fusion,
norms and lm_head in float64 numpy, the decoder layer by mlx-lm's own
DecoderLayer (with its KV cache), teacher-forced over the prompt and then
recursive over its own drafts (argmax), as mtp_numpy_ref.py documents.

Usage: python tests/parity/make_mtp_models.py [--out DIR] [--only NAME ...]
"""

import hashlib
import json
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_hybrid_models as hm  # noqa: E402  (cheap: no mlx at import time)
import make_models as mm  # noqa: E402
import mtp_numpy_ref as ref_mtp  # noqa: E402

DEFAULT_OUT = HERE.parents[0] / ".work" / "parity-mtp"
STAMP_FILE = mm.STAMP_FILE
PROMPTS = {"len7": mm.PROMPTS["len7"], "len40": mm.PROMPTS["len40"]}
N_DRAFTS = 4    # recursive steps after the teacher-forced rows
SPECS = [hm._spec("qwen3_5-mtp-f32", "small", "float32", True)]


def source_hash():
    h = hashlib.sha256(Path(__file__).read_bytes())
    for f in (hm.__file__, mm.__file__, ref_mtp.__file__):
        h.update(Path(f).read_bytes())
    return h.hexdigest()


def mtp_weights(text_args, seed):
    """The head's tensors {name: float32 array}: the decoder layer's from
    mlx-lm's DecoderLayer (names, shapes), values drawn as make_models
    draws a layer's."""
    np, mx = mm.np, mm.mx
    from mlx_lm.models import qwen3_5 as q35
    layer = q35.DecoderLayer(text_args, text_args.full_attention_interval - 1)
    assert not layer.is_linear
    rng = np.random.default_rng(seed)
    d = text_args.hidden_size
    out = {}
    for name, p in sorted(mm.tree_flatten(layer.parameters())):
        shape = p.shape
        if name.endswith("norm.weight"):
            w = 1.0 + 0.2 * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / np.sqrt(shape[-1])
        out["mtp.layers.0." + name] = w
    out["mtp.fc.weight"] = rng.standard_normal((d, 2 * d)) / np.sqrt(2 * d)
    out["mtp.pre_fc_norm_embedding.weight"] = 1.0 + 0.2 * rng.standard_normal(d)
    out["mtp.pre_fc_norm_hidden.weight"] = 1.0 + 0.2 * rng.standard_normal(d)
    # The logit scale of the target's own final norm (make_models).
    gain = mm.LOGIT_STD / (mm.EMB_SCALE * np.sqrt(d))
    out["mtp.norm.weight"] = gain * (1.0 + 0.2 * rng.standard_normal(d))
    return {k: mx.array(v.astype(np.float32)) for k, v in out.items()}


def add_to_checkpoint(path, tensors):
    mx = mm.mx
    mx.save_safetensors(str(path / "model-mtp.safetensors"), tensors,
                        metadata={"format": "mlx"})
    index = path / "model.safetensors.index.json"
    if index.exists():
        idx = json.loads(index.read_text())
        idx["weight_map"].update({k: "model-mtp.safetensors" for k in tensors})
        index.write_text(json.dumps(idx, indent=2))


def build_one(spec, out):
    np, mlu = mm.np, mm.mlu
    path = out / spec["name"]
    mm.fresh_dir(path)
    hm.build_model(spec, path)
    model, cfg = mlu.load_model(path)
    text_args = model.language_model.args
    heads = mtp_weights(text_args, zlib.crc32(spec["name"].encode()) + 7)
    add_to_checkpoint(path, heads)
    ref = {"model": spec["name"], "n_drafts": N_DRAFTS, "prompts": {}}
    for pname, prompt in PROMPTS.items():
        r = ref_mtp.reference(model, heads, prompt, N_DRAFTS)
        np.save(path / f"hidden_{pname}.npy", r["hidden"].astype(np.float32))
        np.save(path / f"logits_{pname}.npy", r["logits"].astype(np.float32))
        np.save(path / f"logits_{pname}_swapped.npy",
                ref_mtp.reference(model, heads, prompt, N_DRAFTS,
                                  tokens=r["tokens"], swap_concat=True)
                ["logits"].astype(np.float32))
        ref["prompts"][pname] = {"tokens": r["tokens"],
                                 "prompt_len": len(prompt)}
    (path / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    return ref


def main(argv=None):
    mm.generator_main(argv, __doc__, DEFAULT_OUT, SPECS, build_one,
                      source_hash)


if __name__ == "__main__":
    main()
