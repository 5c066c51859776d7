"""DeepSeek-V3-style MLA models as llama.cpp's converter writes them
(conversion/deepseek.py DeepseekV2Model; loaded by src/models/deepseek2.cpp
as architecture "deepseek2"), and GLM-4.5-style MoE models (glm4moe,
below). Registers ARCHS["deepseek_v3"], ["glm4_moe_lite"], ["kimi_k2"]
and ["glm4_moe"] in tests/gguf_writer.py, which imports this module.

From mlx-lm's sanitized layout, or Hugging Face's kv_b_proj, split here
as the converter splits it:
  * self_attn.embed_q [heads][kv_lora_rank][qk_nope] is exactly the
    converter's attn_k_b (kv_b_proj's key half, transposed per head), and
    self_attn.unembed_out [heads][v_head_dim][kv_lora_rank] its attn_v_b;
  * the low-rank paths attn_q_a / attn_q_a_norm / attn_q_b and
    attn_kv_a_mqa / attn_kv_a_norm;
  * the router ffn_gate_inp (F32), its correction bias exp_probs_b.bias,
    the stacked experts ffn_*_exps and the shared ones ffn_*_shexp.
Keys as set_gguf_parameters writes them: one KV head, key_length /
value_length the latent row's (kv_lora_rank + qk_rope, kv_lora_rank),
the per-head sizes in key_length_mla / value_length_mla, the expert keys
with gating func sigmoid, expert_weights_norm only when true; YaRN's
log multiplier as 0.1 mscale_all_dim (mscale itself has no key).
"""
import gguf

import gguf_writer as gw

LAYER_NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_a_proj.weight": "attn_q_a.weight",
    "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn_q_b.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
    "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
    "self_attn.embed_q.weight": "attn_k_b.weight",
    "self_attn.unembed_out.weight": "attn_v_b.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "mlp.switch_mlp.gate_proj.weight": "ffn_gate_exps.weight",
    "mlp.switch_mlp.up_proj.weight": "ffn_up_exps.weight",
    "mlp.switch_mlp.down_proj.weight": "ffn_down_exps.weight",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
}


def keys(w, cfg, ftype, context_length):
    rope, nope = cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"]
    r = cfg["kv_lora_rank"]
    w.add_context_length(context_length or cfg.get("max_position_embeddings",
                                                   4096))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(1)
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_file_type(ftype)
    w.add_leading_dense_block_count(cfg.get("first_k_dense_replace", 0))
    w.add_vocab_size(cfg["vocab_size"])
    if cfg.get("q_lora_rank"):
        w.add_q_lora_rank(cfg["q_lora_rank"])
    w.add_kv_lora_rank(r)
    w.add_key_length(r + rope)
    w.add_value_length(r)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(cfg["v_head_dim"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_shared_count(cfg.get("n_shared_experts") or 0)
    w.add_expert_weights_scale(float(cfg.get("routed_scaling_factor", 1.0)))
    if cfg.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    w.add_expert_group_count(cfg.get("n_group") or 1)
    w.add_expert_group_used_count(cfg.get("topk_group") or 1)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_rope_dimension_count(rope)
    rs = cfg.get("rope_scaling")
    if rs:
        # the common yarn keys, then deepseek2's own log multiplier:
        # 0.1 mscale_all_dim, and mscale is not written
        gw._rope_scaling(w, cfg, {**rs, "mscale": 1.0,
                                  "mscale_all_dim": None})
        if rs.get("mscale_all_dim"):
            w.add_rope_scaling_yarn_log_mul(0.1 * rs["mscale_all_dim"])


def check(cfg):
    if cfg.get("scoring_func", "softmax") != "sigmoid":
        raise gw.WriterError("only sigmoid-routed models (DeepSeek-V3)")
    if cfg.get("moe_layer_freq", 1) != 1:
        raise gw.WriterError("llama.cpp's deepseek2 has no moe_layer_freq")
    if not cfg.get("q_lora_rank"):
        raise gw.WriterError("llama.cpp's deepseek2 reads q_lora_rank except "
                             "for the layer counts of DeepSeek-V2-Lite")


def split_kv_b(cfg, hf, arr):
    """DeepseekV2Model.modify_tensors on Hugging Face's kv_b_proj
    [heads * (qk_nope + v)][kv_lora_rank]: per head the key rows,
    transposed (attn_k_b), and the value rows (attn_v_b)."""
    if not hf.endswith("self_attn.kv_b_proj.weight"):
        return [(hf, arr)]
    nope, v = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    kv_b = arr.reshape(cfg["num_attention_heads"], nope + v, arr.shape[-1])
    prefix = hf[:-len("kv_b_proj.weight")]
    return [(prefix + "embed_q.weight",
             kv_b[:, :nope, :].transpose(0, 2, 1).copy()),
            (prefix + "unembed_out.weight", kv_b[:, nope:, :].copy())]


# GLM-4.7-Flash (glm4_moe_lite) converts to the same architecture.
for _model_type in ("deepseek_v3", "glm4_moe_lite", "kimi_k2"):
    gw.ARCHS[_model_type] = gw.Arch(
        "deepseek2", layer_names=LAYER_NAMES, keys=keys, check=check,
        common_keys=False, f32_names=("ffn_gate_inp.weight",),
        tensors=split_kv_b)


# GLM-4.5 / 4.6 / 4.7 (conversion/glm.py Glm4MoeModel; src/models/
# glm4-moe.cpp as "glm4moe"): the common keys with block_count counting
# the MTP layers too (nextn_predict_layers of them; llama.cpp's loader
# finds the trunk without their tensors, which mlx-lm's layout has
# dropped), the rotary part as rope.dimension_count (head_dim *
# partial_rotary_factor), the expert keys as deepseek2's with gating
# func sigmoid; tensors in the common spelling plus the experts'.
GLM4MOE_NAMES = {k: v for k, v in LAYER_NAMES.items()
                 if not k.startswith("self_attn.")}
GLM4MOE_NAMES.update({
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    # the pre-MLP norm, as gguf-py's tensor map spells it for glm4moe
    "post_attention_layernorm.weight": "post_attention_norm.weight",
})


def glm4moe_keys(w, cfg, ftype, context_length):
    nextn = cfg.get("num_nextn_predict_layers") or 0
    arch = gw.ARCHS["glm4_moe"]
    gw._common_keys(w, {**cfg, "num_hidden_layers":
                        cfg["num_hidden_layers"] + nextn},
                    arch, ftype, context_length)
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_count(cfg.get("n_shared_experts") or 0)
    w.add_leading_dense_block_count(cfg.get("first_k_dense_replace", 0))
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(float(cfg.get("routed_scaling_factor", 1.0)))
    if cfg.get("norm_topk_prob") is not None:
        w.add_expert_weights_norm(bool(cfg["norm_topk_prob"]))
    w.add_expert_group_count(cfg.get("n_group") or 1)
    w.add_expert_group_used_count(cfg.get("topk_group") or 1)
    if nextn:
        w.add_nextn_predict_layers(nextn)


def glm4moe_check(cfg):
    if not cfg.get("n_shared_experts"):
        # glm4-moe.cpp builds the shared-expert FFN on every MoE layer
        raise gw.WriterError("llama.cpp's glm4moe needs shared experts")
    if cfg.get("scoring_func", "sigmoid") != "sigmoid":
        raise gw.WriterError("llama.cpp's glm4moe routes by sigmoid")
    if cfg.get("rope_scaling"):
        raise gw.WriterError("glm4_moe applies no rope_scaling")


gw.ARCHS["glm4_moe"] = gw.Arch(
    "glm4moe", layer_names=GLM4MOE_NAMES, keys=glm4moe_keys,
    check=glm4moe_check, common_keys=False,
    f32_names=("ffn_gate_inp.weight",))
