"""Gemma 4 text models as llama.cpp's converter writes them
(conversion/gemma.py Gemma4Model over Gemma3Model and TextModel; loaded by
src/models/gemma4.cpp as architecture "gemma4"). Registers
ARCHS["gemma4_text"] in tests/gguf_writer.py, which imports this module.

The hyperparameters are the model's as mlx-lm (and Spindle) read
config.json, with mlx-lm's defaults for absent keys: the tiny parity
models are written by mlx-lm, whose defaults differ from transformers'
Gemma4TextConfig (which the converter would load them through: no
softcap, no double-wide MLP, its own layer pattern), and the file must
hold the model the safetensors hold. What the GGUF form cannot hold
raises WriterError.

The converter's form, from the checkpoint as mlx-lm lays it out:
  * norms as they are (Gemma 4 scales by w, not 1 + w: no +1);
  * sandwich norms post_attention_norm / ffn_norm (pre-MLP) /
    post_ffw_norm, MoE layers' post_ffw_norm_1, pre_ffw_norm_2,
    post_ffw_norm_2; layer_scalar as layer_output_scale.weight [1];
  * the router as ffn_gate_inp.weight (F32) with its scale
    ffn_gate_inp.scale, per_expert_scale as ffn_down_exps.scale, the
    experts as Hugging Face's gate_up_proj ([E][2 inter][hidden], gate rows
    first): ffn_gate_up_exps, and ffn_down_exps;
  * per-layer inputs: per_layer_token_embd, per_layer_model_proj,
    per_layer_proj_norm, and blk.N.inp_gate / proj / post_norm;
  * K = V full-attention layers simply have no attn_v; KV-sharing layers
    have no attn_k / attn_v / attn_k_norm (mlx-lm drops them);
  * rope_freqs.weight [global_head_dim / 2]: 1 for the pairs the
    "proportional" RoPE rotates, 1e30 for the others (the full layers
    rope all global_head_dim dimensions, NeoX pairs, with these frequency
    factors: angle / 1e30 does not rotate);
  * keys: key_length / value_length the full layers' head size
    (global_head_dim), *_swa the sliding layers' (head_dim);
    rope.dimension_count global_head_dim, rope.dimension_count_swa
    head_dim; rope.freq_base / rope.freq_base_swa; feed_forward_length an
    array when use_double_wide_mlp (2 x on the KV-sharing layers);
    attention.head_count_kv an array when num_global_key_value_heads is
    set; attention.shared_kv_layers, embedding_length_per_layer_input (0:
    none), a per-layer attention.sliding_window_pattern,
    attention.sliding_window, final_logit_softcapping when set, and the
    expert counts of MoE models.
"""
import numpy as np

import gguf_writer as gw

LAYER_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
    "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
    "layer_scalar": "layer_output_scale.weight",
    "router.proj.weight": "ffn_gate_inp.weight",
    "router.scale": "ffn_gate_inp.scale",
    "router.per_expert_scale": "ffn_down_exps.scale",
    "experts.gate_up_proj.weight": "ffn_gate_up_exps.weight",
    "experts.switch_glu.down_proj.weight": "ffn_down_exps.weight",
    "per_layer_input_gate.weight": "inp_gate.weight",
    "per_layer_projection.weight": "proj.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight",
}
GLOBAL_NAMES = {
    "model.embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
    "model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
    "model.per_layer_projection_norm.weight": "per_layer_proj_norm.weight",
    "rope_freqs": "rope_freqs.weight",
}


def hparams(cfg):
    """The hyperparameters the file needs, mlx-lm's defaults filled in."""
    n = cfg["num_hidden_layers"]
    pattern = cfg.get("sliding_window_pattern", 5)
    types = cfg.get("layer_types") or [
        "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
        for i in range(n)]
    rope = cfg.get("rope_parameters") or {}
    full = rope.get("full_attention", {"rope_type": "proportional",
                                       "partial_rotary_factor": 0.25,
                                       "rope_theta": 1000000.0})
    sliding = rope.get("sliding_attention", {"rope_type": "default",
                                             "rope_theta": 10000.0})
    return dict(
        types=types,
        window=cfg.get("sliding_window", 512),
        softcap=cfg.get("final_logit_softcapping", 30.0),
        shared=cfg.get("num_kv_shared_layers", 20) or 0,
        wide=bool(cfg.get("use_double_wide_mlp", True)),
        global_hd=cfg.get("global_head_dim", 512) or cfg["head_dim"],
        per_layer=cfg.get("hidden_size_per_layer_input", 256) or 0,
        k_eq_v=bool(cfg.get("attention_k_eq_v", False)),
        global_kv=cfg.get("num_global_key_value_heads"),
        moe=bool(cfg.get("enable_moe_block", False)),
        full=full, sliding=sliding)


def check(cfg):
    """What the converter cannot write, or would write as another model."""
    h = hparams(cfg)
    full, sliding = h["full"], h["sliding"]
    if (full.get("rope_type") or full.get("type")) != "proportional":
        raise gw.WriterError("the converter needs the full layers' RoPE "
                             "'proportional'")
    if full.get("factor", 1.0) != 1.0:
        raise gw.WriterError("the converter drops the proportional RoPE's "
                             "factor")
    if ((sliding.get("rope_type") or sliding.get("type", "default"))
            != "default" or sliding.get("partial_rotary_factor", 1.0) != 1):
        raise gw.WriterError("the converter ropes the sliding layers with "
                             "the default RoPE over the whole head only")
    if h["global_kv"] and not h["k_eq_v"]:
        raise gw.WriterError("num_global_key_value_heads without "
                             "attention_k_eq_v: llama.cpp would give the "
                             "full layers that KV head count")
    if cfg.get("vocab_size_per_layer_input", cfg["vocab_size"]) != \
            cfg["vocab_size"] and h["per_layer"]:
        raise gw.WriterError("llama.cpp's per-layer table has vocab_size "
                             "rows")


def keys(w, cfg, ftype, context_length):
    """Gemma4Model.set_gguf_parameters (with Gemma3Model's and
    TextModel's), every key of the file."""
    h = hparams(cfg)
    n, hd = cfg["num_hidden_layers"], cfg["head_dim"]
    w.add_block_count(n)
    w.add_context_length(context_length
                         or cfg.get("max_position_embeddings", 131072))
    w.add_embedding_length(cfg["hidden_size"])
    ff = cfg["intermediate_size"]
    first_shared = n - h["shared"]
    w.add_feed_forward_length(
        [ff if l < first_shared else 2 * ff for l in range(n)]
        if h["wide"] else ff)
    w.add_head_count(cfg["num_attention_heads"])
    kv = cfg.get("num_key_value_heads", 4)
    swa = [t == "sliding_attention" for t in h["types"]]
    w.add_head_count_kv([kv if s else h["global_kv"] for s in swa]
                        if h["global_kv"] else kv)
    w.add_rope_freq_base(float(h["full"].get("rope_theta", 1000000.0)))
    w.add_rope_freq_base_swa(float(h["sliding"].get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    if h["moe"]:
        w.add_expert_count(cfg["num_experts"])
        w.add_expert_used_count(cfg["top_k_experts"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_key_length(h["global_hd"])
    w.add_value_length(h["global_hd"])
    w.add_key_length_swa(hd)
    w.add_value_length_swa(hd)
    w.add_file_type(ftype)
    if h["softcap"]:
        w.add_final_logit_softcapping(float(h["softcap"]))
    if cfg.get("sliding_window_pattern") != 1:
        w.add_sliding_window(int(h["window"]))
    w.add_shared_kv_layers(h["shared"])
    w.add_embedding_length_per_layer_input(h["per_layer"])
    w.add_sliding_window_pattern(swa)
    w.add_rope_dimension_count(h["global_hd"])
    w.add_rope_dimension_count_swa(hd)


def stream(cfg, items):
    """The experts' gate and up stacks as one gate_up_proj (gate rows
    first, Hugging Face's layout), and Gemma4Model.generate_extra_tensors'
    rope_freqs."""
    gates = {}
    for hf, arr in items:
        if hf.endswith("experts.switch_glu.gate_proj.weight"):
            gates[hf.removesuffix("switch_glu.gate_proj.weight")] = arr
            continue
        if hf.endswith("experts.switch_glu.up_proj.weight"):
            base = hf.removesuffix("switch_glu.up_proj.weight")
            yield (base + "gate_up_proj.weight",
                   np.concatenate([gates.pop(base), arr], axis=1))
            continue
        yield hf, arr
    if gates:
        raise gw.WriterError(f"experts without up_proj: {sorted(gates)}")
    h = hparams(cfg)
    half = h["global_hd"] // 2
    partial = h["full"].get("partial_rotary_factor", 1.0)
    rotated = int(h["global_hd"] * partial / 2)
    yield "rope_freqs", np.array([1.0] * rotated + [1e30] * (half - rotated),
                                 dtype=np.float32)


gw.ARCHS["gemma4_text"] = gw.Arch(
    "gemma4", layer_names=LAYER_NAMES, global_names=GLOBAL_NAMES, keys=keys,
    check=check, common_keys=False, stream=stream, f32_names=("ffn_gate_inp.weight",))
