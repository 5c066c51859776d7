"""Write a tiny float32 gpt-oss model directory (make_gptoss_models.py's) as
a GGUF the way llama.cpp's converter names it (conversion/gpt_oss.py,
gguf-py constants: architecture "gpt-oss", blk.N.attn_sinks.weight,
post_attention_norm, ffn_gate_inp router, stacked ffn_*_exps experts with
biases), with the expert matrices in MXFP4 (gguf's port of ggml's
quantize_row_mxfp4_ref; or F32) and everything else in f32.

The tokenizer is bench/make_gguf.py's synthetic gpt2-style vocabulary: the
tests feed token ids. llama.cpp takes every other layer as sliding-window
(its gpt-oss swa pattern 2, layer 0 sliding), the layout of layer_types in
make_gptoss_models.py.
"""

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.sinks": "attn_sinks.weight",
    "mlp.router.weight": "ffn_gate_inp.weight",
    "mlp.router.bias": "ffn_gate_inp.bias",
}
for _hf, _gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"),
                 ("v_proj", "attn_v"), ("o_proj", "attn_output")):
    for _kind in ("weight", "bias"):
        LAYER_NAMES[f"self_attn.{_hf}.{_kind}"] = f"{_gg}.{_kind}"
for _p in ("gate", "up", "down"):
    for _kind in ("weight", "bias"):
        LAYER_NAMES[f"mlp.experts.{_p}_proj.{_kind}"] = f"ffn_{_p}_exps.{_kind}"


def gguf_name(hf):
    if hf in GLOBAL_NAMES:
        return GLOBAL_NAMES[hf]
    parts = hf.split(".")
    suffix = ".".join(parts[3:])
    if parts[:2] != ["model", "layers"] or suffix not in LAYER_NAMES:
        raise SystemExit(f"make_gptoss_gguf: no GGUF name for {hf}")
    return f"blk.{int(parts[2])}.{LAYER_NAMES[suffix]}"


def write(model_dir, out, experts_mxfp4=True):
    """model_dir (float32 safetensors, mlx-lm layout) -> the GGUF `out`,
    the experts in MXFP4 unless experts_mxfp4 is false (then F32)."""
    import gguf
    from gguf.quants import quantize
    from safetensors.numpy import load_file
    sys.path.insert(0, str(ROOT / "bench"))
    from make_gguf import add_tokenizer

    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    if cfg.get("model_type") != "gpt_oss" or "quantization" in cfg:
        raise SystemExit("make_gptoss_gguf: expects an unquantized gpt_oss dir")
    w = gguf.GGUFWriter(str(out), "gpt-oss")
    w.add_name("spindle-parity-gpt-oss-tiny")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_sliding_window(cfg["sliding_window"])
    rs = cfg["rope_scaling"]
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(float(rs["factor"]))
    w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])
    w.add_rope_scaling_yarn_beta_fast(float(rs["beta_fast"]))
    w.add_rope_scaling_yarn_beta_slow(float(rs["beta_slow"]))
    add_tokenizer(w, cfg["vocab_size"], cfg["bos_token_id"],
                  cfg["eos_token_id"])
    mxfp4 = gguf.GGMLQuantizationType.MXFP4
    for f in sorted(model_dir.glob("*.safetensors")):
        for hf, arr in sorted(load_file(str(f)).items()):
            arr = arr.astype(np.float32)
            name = gguf_name(hf)
            if name.endswith("_exps.weight") and experts_mxfp4:
                w.add_tensor(name, quantize(arr, mxfp4), raw_dtype=mxfp4)
            else:
                w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(out)
