"""Write N random PEFT LoRA adapters (all of q/k/v/o/gate/up/down_proj of
every layer) for a Hugging Face / MLX model directory, for the adapter
benchmark in bench/RESULTS.md (speed does not depend on the values).

usage: python bench/make_lora_adapters.py MODEL OUT_DIR [-n 4] [-r 16]
MODEL: a directory with config.json, or a .gguf file (its llama.cpp keys).
"""
import argparse
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def shapes(cfg):
    h = cfg["hidden_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    i = cfg["intermediate_size"]
    return {"self_attn.q_proj": (h, q), "self_attn.k_proj": (h, kv),
            "self_attn.v_proj": (h, kv), "self_attn.o_proj": (q, h),
            "mlp.gate_proj": (h, i), "mlp.up_proj": (h, i),
            "mlp.down_proj": (i, h)}


def gguf_config(path):
    """config.json's size keys from a GGUF file's metadata."""
    from gguf import GGUFReader
    r = GGUFReader(path)

    def val(key):
        f = r.fields[key]
        return int(f.parts[f.data[0]][0])
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    k = lambda s: val(f"{arch}.{s}")  # noqa: E731
    heads = k("attention.head_count")
    hd = (val(f"{arch}.attention.key_length")
          if f"{arch}.attention.key_length" in r.fields
          else k("embedding_length") // heads)
    return {"hidden_size": k("embedding_length"),
            "num_hidden_layers": k("block_count"),
            "num_attention_heads": heads,
            "num_key_value_heads": k("attention.head_count_kv"),
            "head_dim": hd, "intermediate_size": k("feed_forward_length")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("-r", type=int, default=16)
    a = ap.parse_args()
    if a.model.endswith(".gguf"):
        cfg = gguf_config(a.model)
    else:
        cfg = json.loads((Path(a.model) / "config.json").read_text())
        cfg = cfg.get("text_config", cfg)
    rng = np.random.default_rng(0)
    for k in range(a.n):
        t = {}
        for layer in range(cfg["num_hidden_layers"]):
            for mod, (fan_in, fan_out) in shapes(cfg).items():
                key = f"base_model.model.model.layers.{layer}.{mod}"
                t[f"{key}.lora_A.weight"] = (rng.standard_normal((a.r, fan_in)) / np.sqrt(fan_in)).astype(np.float32)
                t[f"{key}.lora_B.weight"] = (0.01 * rng.standard_normal((fan_out, a.r))).astype(np.float32)
        d = Path(a.out) / f"a{k}"
        d.mkdir(parents=True, exist_ok=True)
        save_file(t, str(d / "adapter_model.safetensors"))
        (d / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "r": a.r, "lora_alpha": 2 * a.r,
            "target_modules": [m.split(".")[1] for m in shapes(cfg)]}))


if __name__ == "__main__":
    main()
