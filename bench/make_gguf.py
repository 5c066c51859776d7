"""Convert bench/make_model.py's bf16 safetensors dir to a GGUF for llama.cpp.

usage: python bench/make_gguf.py SRC_DIR OUT.gguf --type f32|f16|bf16|q8_0|q4_0

Used by bench/compare so that Spindle and llama.cpp run the SAME random
weights, and by tests/parity/test_moe_gguf.py (write_gguf). Architecture
"qwen3", or "qwen3moe" for a qwen3_moe dir (every layer MoE: llama.cpp's
loader has no dense layers; mlx-lm's stacked switch_mlp experts become
ffn_*_exps, the router ffn_gate_inp stays F32 as llama.cpp's converter
keeps it, expert_count / expert_used_count / expert_feed_forward_length
metadata); tensor names follow llama.cpp's loaders (src/models/qwen3.cpp,
qwen3moe.cpp, LLM_TENSOR_NAMES); qwen3 needs no Q/K row permutation
(convert_hf_to_gguf.py only permutes for the llama arch). Tied embeddings: only
token_embd is written and llama.cpp reuses it as the output head.

The tokenizer is a synthetic gpt2-style vocabulary (llama.cpp refuses a model
without one): the 256 GPT-2 byte symbols, filler tokens, and Qwen's three
special tokens at their real ids. Benchmarks feed token ids, so its contents
do not matter; only that it loads and has vocab_size entries.

Quantization uses gguf-py's numpy ports of ggml's reference quantizers. The
1-D norm weights stay F32, as llama.cpp's converter keeps them.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import gguf
from gguf.quants import quantize

QTYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}

# HF suffix -> GGUF suffix, per layer.
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def read_safetensors(path):
    """Yield (name, float32 array) from one safetensors file (bf16/f16/f32)."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        if hlen > 100 * 1024 * 1024:
            sys.exit(f"make_gguf: {path}: header length {hlen} is implausible")
        header = json.loads(f.read(hlen))
        base = 8 + hlen
        size = os.fstat(f.fileno()).st_size
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            shape = info["shape"]
            if not (0 <= start <= end and base + end <= size):
                sys.exit(f"make_gguf: {path}: {name} lies outside the file")
            f.seek(base + start)
            raw = f.read(end - start)
            dt = info["dtype"]
            if dt == "BF16":
                bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
                arr = bits.view(np.float32)
            elif dt == "F16":
                arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
            elif dt == "F32":
                arr = np.frombuffer(raw, dtype="<f4").copy()
            else:
                sys.exit(f"make_gguf: {path}: {name} has dtype {dt}; "
                         "convert the unquantized (bf16) model")
            if arr.size != int(np.prod(shape)):
                sys.exit(f"make_gguf: {path}: {name} size does not match shape")
            yield name, arr.reshape(shape)


def gguf_name(hf):
    if hf in GLOBAL_NAMES:
        return GLOBAL_NAMES[hf]
    parts = hf.split(".")
    if len(parts) >= 4 and parts[0] == "model" and parts[1] == "layers":
        suffix = ".".join(parts[3:])
        if suffix in LAYER_NAMES or suffix in MOE_LAYER_NAMES:
            gg = LAYER_NAMES.get(suffix) or MOE_LAYER_NAMES[suffix]
            return f"blk.{int(parts[2])}.{gg}"
    sys.exit(f"make_gguf: no GGUF name for tensor {hf}")


def gpt2_byte_symbols():
    """GPT-2's bytes_to_unicode(): the 256 printable stand-ins for bytes."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def add_tokenizer(w, vocab_size, bos_id, eos_id):
    specials = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>"}
    tokens = gpt2_byte_symbols() + ["ĠĠ"]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for i in range(len(tokens), vocab_size):
        if i in specials:
            tokens.append(specials[i])
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(f"[tok{i}]")
            types.append(gguf.TokenType.NORMAL)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    # The loader requires the merges key; one merge whose result is in the
    # vocabulary keeps the array typed and the tokenizer consistent.
    w.add_token_merges(["Ġ Ġ"])
    w.add_bos_token_id(bos_id)
    w.add_eos_token_id(eos_id)
    w.add_add_bos_token(False)


# Per-layer names of qwen3_moe's MoE layers (llama.cpp's qwen3moe loader:
# src/models/qwen3moe.cpp); mlx-lm's stacked experts are already GGUF's
# [n_expert][rows][cols] layout.
MOE_LAYER_NAMES = {
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.switch_mlp.gate_proj.weight": "ffn_gate_exps.weight",
    "mlp.switch_mlp.up_proj.weight": "ffn_up_exps.weight",
    "mlp.switch_mlp.down_proj.weight": "ffn_down_exps.weight",
}
# llama.cpp's converter keeps the router in F32 (convert_hf_to_gguf.py:
# FFN_GATE_INP is among the tensors always written as float32).
F32_ALWAYS = ("ffn_gate_inp.weight",)


def check_config(cfg):
    mt = cfg.get("model_type")
    if mt not in ("qwen3", "qwen3_moe") or "quantization" in cfg:
        sys.exit("make_gguf: expects an unquantized qwen3 or qwen3_moe model dir")
    if mt == "qwen3_moe":
        n = cfg["num_hidden_layers"]
        step = cfg.get("decoder_sparse_step", 1)
        if cfg.get("mlp_only_layers") or any((l + 1) % step for l in range(n)):
            sys.exit("make_gguf: llama.cpp's qwen3moe has no dense layers "
                     "(mlp_only_layers / decoder_sparse_step)")
        if not cfg.get("norm_topk_prob", False):
            sys.exit("make_gguf: llama.cpp's qwen3moe always renormalizes "
                     "the top-k weights (norm_topk_prob true only)")


def add_moe_metadata(w, cfg):
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])


def write_gguf(src, out, type_name):
    """Write the model directory `src` as a GGUF at `out`, its matrices of
    type `type_name` (a QTYPES key); returns out."""
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    check_config(cfg)
    moe = cfg["model_type"] == "qwen3_moe"
    qtype, ftype = QTYPES[type_name]
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads

    w = gguf.GGUFWriter(out, "qwen3moe" if moe else "qwen3")
    w.add_name(f"spindle-bench-{cfg['model_type']}-random")
    w.add_context_length(cfg.get("max_position_embeddings", 40960))
    w.add_embedding_length(hidden)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    if moe:
        add_moe_metadata(w, cfg)
    w.add_file_type(ftype)
    eos = cfg.get("eos_token_id", 151645)
    add_tokenizer(w, cfg["vocab_size"], cfg.get("bos_token_id", 151643),
                  eos if isinstance(eos, int) else eos[0])

    files = sorted(p for p in os.listdir(src) if p.endswith(".safetensors"))
    if not files:
        sys.exit(f"make_gguf: no .safetensors in {src}")
    seen = set()
    for fn in files:
        for hf, arr in read_safetensors(os.path.join(src, fn)):
            if hf == "lm_head.weight" and cfg.get("tie_word_embeddings"):
                continue
            name = gguf_name(hf)
            seen.add(name)
            if arr.ndim == 1 or name.endswith(F32_ALWAYS) or \
                    qtype == gguf.GGMLQuantizationType.F32:
                w.add_tensor(name, arr.astype(np.float32))
            elif qtype == gguf.GGMLQuantizationType.F16:
                w.add_tensor(name, arr.astype(np.float16))
            else:
                w.add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)
            del arr
    if "token_embd.weight" not in seen:
        sys.exit("make_gguf: the model has no embedding")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--type", choices=sorted(QTYPES), required=True)
    a = ap.parse_args()
    print(write_gguf(a.src, a.out, a.type))


if __name__ == "__main__":
    main()
