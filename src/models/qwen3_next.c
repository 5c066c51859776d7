/* Qwen3-Next (model_type "qwen3_next"): the hybrid layers of
 * qwen3_hybrid.h with a sparse-MoE MLP (models/moe.h) whose shared expert
 * is gated by sigmoid(shared_expert_gate(x)), as mlx-lm's qwen3_next.py
 * computes them. The DeltaNet's projections are fused per key head
 * (in_proj_qkvz, in_proj_ba) in its own files. MoE layers and routing
 * follow the Qwen MoE keys (sp_moe_qwen_layers, norm_topk_prob default
 * false); the other layers keep a dense SwiGLU of intermediate_size.
 * Hugging Face checkpoints (per-expert tensors, which mlx-lm's sanitize
 * stacks) store the (1 + w) norms as w.
 *
 * GGUF (llama.cpp's "qwen3next"): attn_qkv / attn_gate (the converter
 * regroups in_proj_qkvz; value heads stay grouped by key head), ssm_ba,
 * the experts stacked as ffn_*_exps and the shared expert as
 * ffn_*_shexp, its gate ffn_gate_inp_shexp a vector; every layer MoE. */
#include "models/qwen3_hybrid.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>

/* mlx-lm's sanitize runs (and shifts the norms by 1) when the files hold
 * the experts one by one. */
static bool hf_checkpoint(const spindle_model *m) {
    char name[96];
    for (int l = 0; l < m->cfg.n_layers && !m->gguf; l++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.0.up_proj.weight", l);
        if (sp_model_find_tensor(m, name)) return true;
    }
    return false;
}

static spindle_status qwen3_next_load(spindle_model *m, spindle_error *err) {
    sp_hybrid_moe *q = NULL;
    spindle_status st = sp_hybrid_moe_new(m, true, &q, err);
    if (st) return st;
    bool *is_moe = calloc((size_t)m->cfg.n_layers, sizeof *is_moe);
    if (!is_moe) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    const sp_hybrid_options opt = {.norms_plus_one = hf_checkpoint(m)};
    sp_moe_spec spec;
    if (!(st = sp_hybrid_config(m, &q->hybrid, err)) &&
        !(st = sp_hybrid_bind(m, &q->hybrid, &opt, err)) &&
        !(st = sp_moe_qwen_layers(m, is_moe, err)) &&
        !(st = sp_hybrid_moe_spec(m, &spec, err)))
        st = sp_hybrid_bind_mlps(m, q, "model.layers", is_moe, &spec, err);
    free(is_moe);
    return st;
}

static const sp_gguf_name_map qwen3next_names[] = {
    SP_QWEN_HYBRID_GGUF_NAMES,
    {"ssm_ba", "linear_attn.in_proj_ba"},
    SP_QWEN_HYBRID_MOE_GGUF_NAMES,
    {NULL, NULL},
};

static const sp_gguf_key_map qwen3next_keys[] = {
    SP_QWEN_HYBRID_GGUF_KEYS,
    SP_QWEN_HYBRID_MOE_GGUF_KEYS,
    {NULL, NULL, 0},
};

static const sp_gguf_family qwen3next_gguf = {
    .arch = "qwen3next",
    .model_type = "qwen3_next",
    .hf_class = "Qwen3NextForCausalLM",
    .layer_names = qwen3next_names,
    .keys = qwen3next_keys,
};

const sp_arch sp_arch_qwen3_next = {.model_type = "qwen3_next",
                                    .gguf = &qwen3next_gguf,
                                    .load = qwen3_next_load,
                                    .layer = sp_hybrid_layer,
                                    .free_family = sp_hybrid_moe_free,
                                    .layer_state = sp_hybrid_layer_state,
                                    .layer_extra = sp_hybrid_layer_extra,
                                    .lora_linear = sp_hybrid_lora_linear};
