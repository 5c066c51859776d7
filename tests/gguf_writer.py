"""GGUF files from float safetensors model directories, spelled the way
llama.cpp's converter (convert_hf_to_gguf.py / conversion/*.py) writes each
architecture, with the `gguf` package's writer and quantizers.

Used by the GGUF parity tests (tests/parity/test_dense_gguf.py) and by
bench/make_gguf.py, so that Spindle and llama.cpp run the same weights.

Table-driven: ARCHS maps a config.json model_type to an Arch, which says
  * the GGUF architecture (general.architecture),
  * tensor names beyond llama.cpp's common ones (LAYER_NAMES),
  * whether q/k rows are permuted for llama.cpp's interleaved ("normal")
    RoPE, as LlamaModel.permute does for the archs llama.cpp ropes that way
    (llama_model_rope_type: LLAMA_ROPE_TYPE_NORM),
  * a function adding the architecture's own metadata keys,
  * the converter's tensor transforms: per tensor (`tensors`), or over the
    whole stream (`stream`: fusing, generated tensors such as rope_freqs),
    and extra non-layer names (`global_names`).
Adding an architecture is one entry (Gemma 4's, the largest, lives in
gguf_writer_gemma4.py). Configs are read as mlx-lm / HF write
them; multimodal wrappers (mistral3) are unwrapped to their text_config
and their tensors' "language_model." prefix dropped.

The tokenizer is a synthetic gpt2-style vocabulary (llama.cpp refuses a
model without one): the 256 GPT-2 byte symbols, filler tokens, and
optional special tokens at given ids. The tests feed token ids, so its
contents do not matter; only that it loads and has vocab_size entries.
The 1-D norm weights stay F32, as llama.cpp's converter keeps them.
"""
import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

import numpy as np
import gguf
from gguf.quants import dequantize, quantize

QTYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
    "mxfp4": (gguf.GGMLQuantizationType.MXFP4,
              gguf.LlamaFileType.MOSTLY_MXFP4_MOE),
}

# HF suffix -> GGUF suffix, per layer (llama.cpp's common spelling).
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


class WriterError(Exception):
    """The model cannot be written as GGUF (and why)."""


def read_safetensors(path):
    """Yield (name, float32 array) from one safetensors file (bf16/f16/f32)."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        if hlen > 100 * 1024 * 1024:
            raise WriterError(f"{path}: header length {hlen} is implausible")
        header = json.loads(f.read(hlen))
        base = 8 + hlen
        size = os.fstat(f.fileno()).st_size
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            shape = info["shape"]
            if not (0 <= start <= end and base + end <= size):
                raise WriterError(f"{path}: {name} lies outside the file")
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
                raise WriterError(f"{path}: {name} has dtype {dt}; convert "
                                  "an unquantized model")
            if arr.size != int(np.prod(shape)):
                raise WriterError(f"{path}: {name} size does not match shape")
            yield name, arr.reshape(shape)


def gpt2_byte_symbols():
    """GPT-2's bytes_to_unicode(): the 256 printable stand-ins for bytes."""
    bs = (list(range(ord("!"), ord("~") + 1))
          + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def add_tokenizer(w, vocab_size, bos_id, eos_id, specials=None, pre="qwen2"):
    """A gpt2 tokenizer of vocab_size tokens; `specials` maps ids to
    control-token texts."""
    specials = specials or {}
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
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    # The loader requires the merges key; one merge whose result is in the
    # vocabulary keeps the array typed and the tokenizer consistent.
    w.add_token_merges(["Ġ Ġ"])
    w.add_bos_token_id(bos_id)
    w.add_eos_token_id(eos_id)
    w.add_add_bos_token(False)


def permute(weights, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half pairs to the
    interleaved pairs of llama.cpp's normal RoPE."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2,
                            *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def _rope_scaling(w, cfg, rs):
    """rope.scaling.* of a rope_scaling block (linear, yarn)."""
    if not rs:
        return
    kind = rs.get("type") or rs.get("rope_type", "default")
    if kind == "default":
        return
    if kind == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rs["factor"]))
    elif kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rs["factor"]))
        w.add_rope_scaling_orig_ctx_len(
            int(rs.get("original_max_position_embeddings", 4096)))
        w.add_rope_scaling_yarn_beta_fast(float(rs.get("beta_fast", 32.0)))
        w.add_rope_scaling_yarn_beta_slow(float(rs.get("beta_slow", 1.0)))
        if rs.get("mscale_all_dim"):
            w.add_rope_scaling_yarn_log_mul(float(rs["mscale_all_dim"]))
        if rs.get("mscale", 1.0) != 1.0:
            raise WriterError("llama.cpp assumes yarn mscale 1")
    else:
        raise WriterError(f"rope_scaling {kind} has no GGUF form here")


def _sliding_pattern(w, cfg, default_period):
    """Olmo2Model.set_gguf_parameters: the window and a flag per layer."""
    w.add_sliding_window(int(cfg["sliding_window"]))
    types = cfg.get("layer_types") or [
        "full_attention" if (i + 1) % default_period == 0
        else "sliding_attention" for i in range(cfg["num_hidden_layers"])]
    w.add_sliding_window_pattern([t == "sliding_attention" for t in types])


def _olmo3_keys(w, cfg):
    _sliding_pattern(w, cfg, 4)


def _granite_keys(w, cfg):
    """GraniteModel.set_gguf_parameters: the multipliers as *_scale."""
    w.add_attention_scale(float(cfg["attention_multiplier"]))
    w.add_embedding_scale(float(cfg["embedding_multiplier"]))
    w.add_residual_scale(float(cfg["residual_multiplier"]))
    w.add_logit_scale(float(cfg["logits_scaling"]))


def _ministral3_keys(w, cfg):
    """Mistral3Model.Ministral3Model: rope_parameters' yarn and the Llama 4
    temperature (whose period is the yarn original context)."""
    rp = cfg["rope_parameters"]
    w.add_attn_temperature_scale(float(rp["llama_4_scaling_beta"]))
    if (rp.get("rope_type") or rp.get("type")) != "yarn":
        w.add_rope_scaling_orig_ctx_len(
            int(rp["original_max_position_embeddings"]))


def _phi3_check(cfg):
    rs = cfg.get("rope_scaling") or {}
    if (rs.get("type") or rs.get("rope_type")) in ("longrope", "su"):
        raise WriterError("longrope needs rope_factors_long/short tensors, "
                          "which Spindle refuses")


# ---- the hybrid (gated DeltaNet) families: conversion/qwen.py's
# Qwen3NextModel and _LinearAttentionVReorderBase, from mlx-lm's (already
# converted) layout: norms hold 1 + w already, conv1d is [C, K, 1].

_HYBRID_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.in_proj_ba.weight": "ssm_ba.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
}


def _hybrid_keys(w, cfg):
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    w.add_ssm_conv_kernel(cfg["linear_conv_kernel_dim"])
    w.add_ssm_state_size(cfg["linear_key_head_dim"])
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(cfg["linear_value_head_dim"] * nv)
    w.add_full_attention_interval(cfg.get("full_attention_interval", 4))
    if cfg["linear_key_head_dim"] != cfg["linear_value_head_dim"]:
        raise WriterError("llama.cpp's delta net needs equal key and value "
                          "head sizes")


def _qwen35_keys(w, cfg):
    _hybrid_keys(w, cfg)
    sections = list(cfg.get("rope_parameters", {}).get("mrope_section",
                                                       [11, 11, 10]))
    w.add_rope_dimension_sections((sections + [0, 0, 0, 0])[:4])


def _reorder_v_heads(a, axis, nk, per_k, head):
    """_LinearAttentionVReorderBase._reorder_v_heads: value heads grouped
    by key head -> tiled over the key heads."""
    a = np.moveaxis(a, axis, 0)
    rest = a.shape[1:]
    a = a.reshape(nk, per_k, head, *rest).swapaxes(0, 1).reshape(-1, *rest)
    return np.moveaxis(a, 0, axis)


def _hybrid_tensor(cfg, hf, arr, reorder):
    """Qwen3NextModel.modify_tensors (A_log -> -exp(A_log), conv1d to
    [C, K]; the norms' + 1 is already in mlx-lm's weights) and, for
    qwen35, the value-head reorder."""
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    if hf.endswith(".A_log"):
        arr = -np.exp(arr.astype(np.float64)).astype(np.float32)
    elif hf.endswith("conv1d.weight"):
        arr = arr.reshape(arr.shape[0], -1)
    if not reorder or nk == nv or ".linear_attn." not in hf:
        return arr
    r, kd = nv // nk, 2 * nk * dk
    if hf.endswith("in_proj_qkv.weight") or hf.endswith("conv1d.weight"):
        return np.concatenate([arr[:kd], _reorder_v_heads(arr[kd:], 0, nk, r, dv)])
    if hf.endswith("in_proj_z.weight"):
        return _reorder_v_heads(arr, 0, nk, r, dv)
    if hf.endswith(("in_proj_b.weight", "in_proj_a.weight", ".A_log",
                    ".dt_bias")):
        return _reorder_v_heads(arr, 0, nk, r, 1)
    if hf.endswith("out_proj.weight"):
        return _reorder_v_heads(arr, 1, nk, r, dv)
    return arr


# qwen3_moe's MoE layers (llama.cpp's qwen3moe loader, src/models/
# qwen3moe.cpp): mlx-lm's stacked switch_mlp experts are already GGUF's
# [n_expert][rows][cols] layout; the router stays F32, as llama.cpp's
# converter keeps FFN_GATE_INP.
_QWEN3_MOE_NAMES = {
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.switch_mlp.gate_proj.weight": "ffn_gate_exps.weight",
    "mlp.switch_mlp.up_proj.weight": "ffn_up_exps.weight",
    "mlp.switch_mlp.down_proj.weight": "ffn_down_exps.weight",
}


def _qwen3_moe_check(cfg):
    n = cfg["num_hidden_layers"]
    step = cfg.get("decoder_sparse_step", 1)
    if cfg.get("mlp_only_layers") or any((l + 1) % step for l in range(n)):
        raise WriterError("llama.cpp's qwen3moe has no dense layers "
                          "(mlp_only_layers / decoder_sparse_step)")
    if not cfg.get("norm_topk_prob", False):
        raise WriterError("llama.cpp's qwen3moe always renormalizes the "
                          "top-k weights (norm_topk_prob true only)")


_SHARED_EXPERT_NAMES = {
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}


def _qwen3next_keys(w, cfg):
    _hybrid_keys(w, cfg)
    _qwen3_moe_keys(w, cfg)
    w.add_expert_shared_feed_forward_length(
        cfg["shared_expert_intermediate_size"])


def _qwen3next_tensors(cfg, hf, arr):
    """Qwen3NextModel.modify_tensors: in_proj_qkvz, [q, k, v, z] per key
    head, regrouped into attn_qkv (every q, every k, every v) and
    attn_gate (every z); the shared expert's gate a vector."""
    if hf.endswith("shared_expert_gate.weight"):
        return [(hf, arr.reshape(-1))]
    if not hf.endswith("in_proj_qkvz.weight"):
        return [(hf, _hybrid_tensor(cfg, hf, arr, False))]
    nk, dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
    rv = cfg["linear_num_value_heads"] // nk * cfg["linear_value_head_dim"]
    g = arr.reshape(nk, 2 * dk + 2 * rv, -1)
    q, k = g[:, :dk], g[:, dk:2 * dk]
    v, z = g[:, 2 * dk:2 * dk + rv], g[:, 2 * dk + rv:]
    flat = lambda t: t.reshape(-1, arr.shape[-1])
    base = hf.removesuffix("in_proj_qkvz.weight")
    return [(base + "in_proj_qkv.weight",
             np.concatenate([flat(q), flat(k), flat(v)])),
            (base + "in_proj_z.weight", flat(z))]


def _qwen35moe_keys(w, cfg):
    _qwen35_keys(w, cfg)
    _qwen3_moe_keys(w, cfg)
    w.add_expert_shared_feed_forward_length(
        cfg["shared_expert_intermediate_size"])


def _qwen35moe_check(cfg):
    if not cfg.get("norm_topk_prob", True):
        raise WriterError("llama.cpp's qwen35moe always renormalizes the "
                          "top-k weights (norm_topk_prob true only)")


def _qwen35moe_tensors(cfg, hf, arr):
    """Qwen3.5's tensors (value heads tiled) and the shared expert's gate
    as a vector, as Qwen3NextModel writes it."""
    if hf.endswith("shared_expert_gate.weight"):
        return [(hf, arr.reshape(-1))]
    return [(hf, _hybrid_tensor(cfg, hf, arr, True))]


def _qwen3_moe_keys(w, cfg):
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])


# gpt-oss (llama.cpp's "gpt-oss", conversion/gpt_oss.py, src/models/
# openai-moe.cpp), from mlx-lm's sanitized layout: the pre-MLP norm is
# post_attention_norm, the sinks attn_sinks.weight, the router
# ffn_gate_inp (F32), the stacked experts ffn_*_exps with their biases.
_GPT_OSS_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.sinks": "attn_sinks.weight",
    "mlp.router.weight": "ffn_gate_inp.weight",
    "mlp.router.bias": "ffn_gate_inp.bias",
}
for _hf, _gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"),
                 ("v_proj", "attn_v"), ("o_proj", "attn_output")):
    _GPT_OSS_NAMES[f"self_attn.{_hf}.bias"] = f"{_gg}.bias"
for _p in ("gate", "up", "down"):
    for _kind in ("weight", "bias"):
        _GPT_OSS_NAMES[f"mlp.experts.{_p}_proj.{_kind}"] = f"ffn_{_p}_exps.{_kind}"


def _gpt_oss_keys(w, cfg):
    """GptOssModel.set_gguf_parameters (llama.cpp takes every other layer
    as sliding from layer 0, mlx-lm's default layer_types)."""
    types = cfg.get("layer_types") or []
    if any(t != ("sliding_attention" if i % 2 == 0 else "full_attention")
           for i, t in enumerate(types)):
        raise WriterError("llama.cpp's gpt-oss slides on even layers only")
    w.add_sliding_window(int(cfg["sliding_window"]))
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])


# LFM2 (llama.cpp's "lfm2", conversion's LFM2Model, src/models/lfm2.cpp):
# the short convolution as shortconv.*, the final norm token_embd_norm.
_LFM2_NAMES = {
    "operator_norm.weight": "attn_norm.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "conv.conv.weight": "shortconv.conv.weight",
    "conv.in_proj.weight": "shortconv.in_proj.weight",
    "conv.out_proj.weight": "shortconv.out_proj.weight",
    "self_attn.out_proj.weight": "attn_output.weight",
    "self_attn.q_layernorm.weight": "attn_q_norm.weight",
    "self_attn.k_layernorm.weight": "attn_k_norm.weight",
    "feed_forward.w1.weight": "ffn_gate.weight",
    "feed_forward.w3.weight": "ffn_up.weight",
    "feed_forward.w2.weight": "ffn_down.weight",
}


def _lfm2_ff_dim(cfg):
    """LFM2Model._add_feed_forward_length: mlx-lm's MLP width."""
    ff = cfg.get("block_ff_dim") or cfg["intermediate_size"]
    if cfg.get("block_auto_adjust_ff_dim", True):
        ff = int(2 * ff / 3)
        if cfg.get("block_ffn_dim_multiplier") is not None:
            ff = int(cfg["block_ffn_dim_multiplier"] * ff)
        m = cfg.get("block_multiple_of", 256)
        ff = m * ((ff + m - 1) // m)
    return ff


def _lfm2_check(cfg):
    if cfg.get("conv_bias"):
        raise WriterError("llama.cpp's lfm2 has no conv biases")


def _lfm2_keys(w, cfg, ftype, context_length):
    """LFM2Model.set_gguf_parameters: the KV heads per layer, 0 for the
    conv layers; the conv's L; norm_eps; the adjusted MLP width."""
    n = cfg["num_hidden_layers"]
    types = cfg.get("layer_types") or [
        "full_attention" if i in cfg["full_attn_idxs"] else "conv"
        for i in range(n)]
    w.add_context_length(context_length or cfg.get("max_position_embeddings",
                                                   4096))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(n)
    w.add_feed_forward_length(_lfm2_ff_dim(cfg))
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv([cfg["num_key_value_heads"] if t == "full_attention"
                         else 0 for t in types])
    w.add_rope_freq_base(float(cfg.get("rope_theta", 1000000.0)))
    w.add_layer_norm_rms_eps(float(cfg["norm_eps"]))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_shortconv_l_cache(cfg["conv_L_cache"])
    w.add_file_type(ftype)


@dataclass
class Arch:
    gguf_arch: str
    permute_qk: bool = False
    layer_names: Dict[str, str] = field(default_factory=dict)
    keys: Optional[Callable] = None          # (writer, cfg): own metadata
    check: Optional[Callable] = None         # (cfg): raise WriterError
    rope_block: str = "rope_scaling"         # where the config keeps it
    theta_in_block: bool = False             # rope_theta inside that block
    # (cfg, hf, arr) -> [(hf, arr), ...]: converter transforms and splits
    tensors: Optional[Callable] = None
    f32_names: tuple = ()                    # GGUF name suffixes kept F32
    # only the matrices of these GGUF name suffixes take the qtype, the
    # rest stay F32 (empty: every matrix takes it)
    qtype_names: tuple = ()
    # HF name -> GGUF name of non-layer tensors beyond GLOBAL_NAMES
    global_names: Dict[str, str] = field(default_factory=dict)
    # (cfg, iterator of (hf, arr)) -> iterator of (hf, arr): converter
    # steps that see several tensors (fusing, generated tensors); runs
    # before `tensors`
    stream: Optional[Callable] = None
    # False: `keys` writes every key itself (its converter's own set)
    common_keys: bool = True


_OLMO_NAMES = {"post_attention_layernorm.weight": "post_attention_norm.weight",
               "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}

ARCHS = {
    "qwen3": Arch("qwen3"),
    "gpt_oss": Arch("gpt-oss", layer_names=_GPT_OSS_NAMES, keys=_gpt_oss_keys,
                    f32_names=("ffn_gate_inp.weight", ".bias"),
                    qtype_names=("_exps.weight",)),
    "qwen3_moe": Arch("qwen3moe", layer_names=_QWEN3_MOE_NAMES,
                      keys=_qwen3_moe_keys, check=_qwen3_moe_check,
                      f32_names=("ffn_gate_inp.weight",)),
    "llama": Arch("llama", permute_qk=True),
    "smollm3": Arch("smollm3", permute_qk=True),
    "phi3": Arch("phi3", check=_phi3_check, layer_names={
        "self_attn.qkv_proj.weight": "attn_qkv.weight",
        "mlp.gate_up_proj.weight": "ffn_up.weight"}),
    "olmo2": Arch("olmo2", layer_names=_OLMO_NAMES),
    "olmo3": Arch("olmo2", layer_names=_OLMO_NAMES, keys=_olmo3_keys),
    "granite": Arch("granite", permute_qk=True, keys=_granite_keys),
    "ministral3": Arch("mistral3", permute_qk=True, keys=_ministral3_keys,
                       rope_block="rope_parameters", theta_in_block=True),
    "qwen3_5_text": Arch("qwen35", layer_names=_HYBRID_NAMES,
                         keys=_qwen35_keys, rope_block="rope_parameters",
                         theta_in_block=True, f32_names=("ssm_conv1d.weight",),
                         tensors=lambda c, hf, a: [(hf, _hybrid_tensor(c, hf, a, True))]),
    "qwen3_5_moe_text": Arch("qwen35moe",
                             layer_names={**_HYBRID_NAMES, **_QWEN3_MOE_NAMES,
                                          **_SHARED_EXPERT_NAMES},
                             keys=_qwen35moe_keys, check=_qwen35moe_check,
                             rope_block="rope_parameters", theta_in_block=True,
                             f32_names=("ssm_conv1d.weight",
                                        "ffn_gate_inp.weight"),
                             tensors=_qwen35moe_tensors),
    "lfm2": Arch("lfm2", layer_names=_LFM2_NAMES, keys=_lfm2_keys,
                 check=_lfm2_check, common_keys=False,
                 f32_names=("shortconv.conv.weight",),
                 global_names={"model.embedding_norm.weight":
                               "token_embd_norm.weight"},
                 tensors=lambda c, hf, a: [(hf, a.reshape(a.shape[0], -1)
                                            if hf.endswith("conv.conv.weight")
                                            else a)]),
    "qwen3_next": Arch("qwen3next",
                       layer_names={**_HYBRID_NAMES, **_QWEN3_MOE_NAMES,
                                    **_SHARED_EXPERT_NAMES},
                       keys=_qwen3next_keys, check=_qwen3_moe_check,
                       f32_names=("ssm_conv1d.weight", "ffn_gate_inp.weight"),
                       tensors=_qwen3next_tensors),
}


def _keeps_f32(gname, arr):
    """Tensors llama.cpp's converter never quantizes, whatever the
    architecture (base.py: 1-D ones, norms, names without .weight); an
    Arch's f32_names adds its own kinds (routers, conv kernels)."""
    return (arr.ndim <= 1 or gname.endswith("_norm.weight")
            or not gname.endswith(".weight"))


def text_config(cfg):
    """The language model's config of a (possibly multimodal) config."""
    return cfg["text_config"] if "text_config" in cfg else cfg


def gguf_name(hf, arch):
    if hf in arch.global_names:
        return arch.global_names[hf]
    if hf in GLOBAL_NAMES:
        return GLOBAL_NAMES[hf]
    parts = hf.split(".")
    if len(parts) >= 4 and parts[0] == "model" and parts[1] == "layers":
        suffix = ".".join(parts[3:])
        name = arch.layer_names.get(suffix, LAYER_NAMES.get(suffix))
        if name:
            return f"blk.{int(parts[2])}.{name}"
    raise WriterError(f"no GGUF name for tensor {hf}")


def _common_keys(w, cfg, arch, ftype, context_length):
    hd = head_dim(cfg)
    w.add_context_length(context_length or cfg.get("max_position_embeddings",
                                                   4096))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    if "intermediate_size" in cfg:  # absent where every layer is MoE
        w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads",
                                cfg["num_attention_heads"]))
    w.add_key_length(hd)
    w.add_value_length(hd)
    block = cfg.get(arch.rope_block)
    partial = cfg.get("partial_rotary_factor",
                      (block or {}).get("partial_rotary_factor", 1.0))
    w.add_rope_dimension_count(int(hd * partial))
    theta = block["rope_theta"] if arch.theta_in_block else cfg["rope_theta"]
    w.add_rope_freq_base(float(theta))
    _rope_scaling(w, cfg, block)
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_file_type(ftype)


def write_gguf(src, out, qtype="f32", name=None, specials=None,
               context_length=None, bos_id=None, dequantized=False,
               extra=None):
    """Write model directory `src` (float safetensors, config.json) as GGUF
    file `out` with its matrices in `qtype` (QTYPES); with `dequantized`,
    as F32 holding exactly the values of those qtype blocks (an exact-math
    twin of the qtype file). bos_id defaults to the config's. `extra`, a
    function of the writer, adds one file's own keys and tensors last (a
    reranker's pooling and classifier). Raises WriterError for what has no
    GGUF form."""
    with open(os.path.join(src, "config.json")) as f:
        cfg = text_config(json.load(f))
    if "quantization" in cfg:
        raise WriterError("expects an unquantized model directory")
    arch = ARCHS.get(cfg["model_type"])
    if arch is None:
        raise WriterError(f"no GGUF table for model_type {cfg['model_type']}")
    if arch.check:
        arch.check(cfg)
    qt, ftype = QTYPES[qtype]
    if dequantized:
        ftype = gguf.LlamaFileType.ALL_F32
    w = gguf.GGUFWriter(out, arch.gguf_arch)
    # (llama.cpp changes token attributes by model name: keep it neutral)
    w.add_name(name or "spindle-tiny")
    if arch.common_keys:
        _common_keys(w, cfg, arch, ftype, context_length)
        if arch.keys:
            arch.keys(w, cfg)
    else:
        arch.keys(w, cfg, ftype, context_length)
    eos = cfg.get("eos_token_id", cfg["vocab_size"] - 1)
    if bos_id is None:
        bos_id = cfg.get("bos_token_id", 1)
    add_tokenizer(w, cfg["vocab_size"], bos_id,
                  eos if isinstance(eos, int) else eos[0], specials)

    files = sorted(p for p in os.listdir(src) if p.endswith(".safetensors"))
    if not files:
        raise WriterError(f"no .safetensors in {src}")
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    def source():
        for fn in files:
            for hf, arr in read_safetensors(os.path.join(src, fn)):
                hf = hf.removeprefix("language_model.")
                if hf == "lm_head.weight" and cfg.get("tie_word_embeddings"):
                    continue
                yield hf, arr
    items = arch.stream(cfg, source()) if arch.stream else source()
    seen = set()
    for hf, arr in items:
        if arch.permute_qk and hf.endswith("self_attn.q_proj.weight"):
            arr = permute(arr, heads, heads)
        elif arch.permute_qk and hf.endswith("self_attn.k_proj.weight"):
            arr = permute(arr, heads, kv_heads)
        parts = arch.tensors(cfg, hf, arr) if arch.tensors else [(hf, arr)]
        for hf, arr in parts:
            gname = gguf_name(hf, arch)
            seen.add(gname)
            if (_keeps_f32(gname, arr) or qt == gguf.GGMLQuantizationType.F32
                    or gname.endswith(arch.f32_names) or (
                        arch.qtype_names and
                        not gname.endswith(arch.qtype_names))):
                w.add_tensor(gname, arr.astype(np.float32))
            elif dequantized:
                w.add_tensor(gname, dequantize(quantize(arr, qt), qt))
            elif qt == gguf.GGMLQuantizationType.F16:
                w.add_tensor(gname, arr.astype(np.float16))
            else:
                w.add_tensor(gname, quantize(arr, qt), raw_dtype=qt)
    if "token_embd.weight" not in seen:
        raise WriterError("the model has no embedding")
    if extra:
        extra(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _stack_expert_loras(items):
    """PEFT's per-expert pairs (transformers 4.x's mlp.experts.E.X) stacked
    over E under mlp.switch_mlp.X, whose GGUF name is ffn_X_exps: what
    convert_lora_to_gguf.py writes through the base converter's expert
    stacking (A [E, r, in], B [E, out, r]); the other tensors as they
    are."""
    pat = re.compile(r"(.*\.mlp)\.experts\.(\d+)\.(\w+_proj)\.(lora_[AB]\.weight)$")
    stacks = {}
    for name, arr in items:
        m = pat.match(name)
        if not m:
            yield name, arr
            continue
        key = f"{m[1]}.switch_mlp.{m[3]}.{m[4]}"
        stacks.setdefault(key, {})[int(m[2])] = arr
    for key, per in stacks.items():
        yield key, np.stack([per[e] for e in sorted(per)])


def write_lora_gguf(base_src, peft_dir, out, qtype="f32", alpha=None,
                    edit=None, general_type="adapter", arch_name=None):
    """Write PEFT adapter directory `peft_dir` (adapter_config.json,
    adapter_model.safetensors) of model directory `base_src` as llama.cpp's
    LoRA GGUF, the way convert_lora_to_gguf.py does: general.type
    "adapter", adapter.type "lora", adapter.lora.alpha (PEFT's lora_alpha
    as written, so llama.cpp's scale alpha / r ignores use_rslora, as it
    does), and per target blk.N.<module>.weight.lora_a [r, in] / .lora_b
    [out, r] in llama.cpp's names (routed experts stacked:
    _stack_expert_loras), B's q/k rows permuted as the base's rows are. `alpha` overrides the config's; `edit` (a function of the
    {GGUF name: array} dict), `general_type` and `arch_name` make the
    malformed files of the tests. Shown identical (names, shapes, bytes,
    the four keys) to convert_lora_to_gguf.py --outtype f32 on
    make_lora_models' adapters: tests/parity/check_lora_refs_torch.py."""
    with open(os.path.join(base_src, "config.json")) as f:
        cfg = text_config(json.load(f))
    with open(os.path.join(peft_dir, "adapter_config.json")) as f:
        acfg = json.load(f)
    arch = ARCHS[cfg["model_type"]]
    qt, _ = QTYPES[qtype]
    w = gguf.GGUFWriter(out, arch_name or arch.gguf_arch)
    w.add_type(general_type)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA,
                  float(acfg["lora_alpha"] if alpha is None else alpha))
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    tensors = {}
    for name, arr in _stack_expert_loras(read_safetensors(os.path.join(
            peft_dir, "adapter_model.safetensors"))):
        base, kind, _ = name.removeprefix("base_model.model.").rsplit(".", 2)
        hf = base.removeprefix("language_model.") + ".weight"
        is_b = kind == "lora_B"
        if is_b and arch.permute_qk and hf.endswith("self_attn.q_proj.weight"):
            arr = permute(arr, heads, heads)
        elif is_b and arch.permute_qk and hf.endswith("self_attn.k_proj.weight"):
            arr = permute(arr, heads, kv_heads)
        tensors[gguf_name(hf, arch) + (".lora_b" if is_b else ".lora_a")] = arr
    if edit:
        edit(tensors)
    for gname, arr in tensors.items():
        if qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor(gname, arr.astype(np.float32))
        elif qt == gguf.GGMLQuantizationType.F16:
            w.add_tensor(gname, arr.astype(np.float16))
        else:
            w.add_tensor(gname, quantize(arr, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


# Gemma 4 lives in its own module (its converter differs the most); it
# registers ARCHS["gemma4_text"] on import.
import gguf_writer_gemma4  # noqa: E402,F401
# registers ARCHS["deepseek_v3"], ["glm4_moe_lite"], ["kimi_k2"] and
# ["glm4_moe"] on import.
import gguf_writer_mla  # noqa: E402,F401
