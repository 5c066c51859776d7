/* Qwen3-MoE (model_type "qwen3_moe", Qwen3-30B-A3B and kin): Qwen3's layer
 * (q/k norms, no attention biases unless attention_bias says so) with a
 * routed-experts MLP (models/moe.h) as mlx-lm's qwen3_moe computes it:
 * softmax over the num_experts router logits, the num_experts_per_tok
 * largest, renormalized when norm_topk_prob; each expert a SwiGLU of
 * moe_intermediate_size. A layer l is MoE unless l is in mlp_only_layers
 * or (l + 1) is not a multiple of decoder_sparse_step; the others keep the
 * dense MLP of intermediate_size.
 *
 * Weights: mlx-lm's stacked mlp.switch_mlp.{gate,up,down}_proj (float or
 * MLX affine; mlx-lm keeps the router mlp.gate at 8 bits when quantizing),
 * or the Hugging Face layout mlp.experts.N.*_proj that mlx-lm's sanitize
 * stacks.
 *
 * GGUF (llama.cpp's "qwen3moe", src/models/qwen3moe.cpp): every layer is
 * MoE, the k weights are always renormalized (the converter records no
 * norm_topk_prob), and a file without expert_feed_forward_length sizes the
 * experts feed_forward_length / expert_used_count, as llama.cpp does. */
#include "models/blocks.h"
#include "models/moe.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>

/* What spindle_model.family holds: the MoE layers' experts. */
typedef struct qwen3_moe {
    sp_moe *moe;       /* [n_layers]; unbound (zeroed) on dense layers */
    int n_layers;
} qwen3_moe;

static void qwen3_moe_free(void *family) {
    qwen3_moe *q = family;
    for (int l = 0; l < q->n_layers; l++) sp_moe_free(&q->moe[l]);
    free(q->moe);
    free(q);
}

static spindle_status qwen3_moe_load(spindle_model *m, spindle_error *err) {
    const int n = m->cfg.n_layers;
    sp_moe_spec spec;
    spindle_status st = sp_moe_qwen_spec(m, &spec, err);
    if (st) return st;
    qwen3_moe *q = calloc(1, sizeof *q);
    bool *is_moe = calloc((size_t)n, sizeof *is_moe);
    if (q) q->moe = calloc((size_t)n, sizeof *q->moe);
    if (!q || !q->moe || !is_moe) {
        if (q) free(q->moe);
        free(q);
        free(is_moe);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    q->n_layers = n;
    m->family = q;
    st = sp_moe_qwen_layers(m, is_moe, err);
    sp_decoder_options opt = {.qkv_bias = m->cfg.attention_bias,
                              .o_bias = m->cfg.attention_bias,
                              .qk_norm = true,
                              .own_mlp = is_moe};
    if (!st) st = sp_bind_decoder_layers(m, &opt, err);
    char prefix[64];
    for (int l = 0; l < n && !st; l++) {
        if (!is_moe[l]) continue;
        snprintf(prefix, sizeof prefix, "model.layers.%d.mlp", l);
        st = sp_moe_bind(m, prefix, &spec, &q->moe[l], err);
        if (!st) m->layers[l].moe = &q->moe[l];
    }
    free(is_moe);
    return st;
}

static const sp_gguf_name_map qwen3_moe_gguf_layers[] = {
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_exps", "mlp.switch_mlp.gate_proj"},
    {"ffn_up_exps", "mlp.switch_mlp.up_proj"},
    {"ffn_down_exps", "mlp.switch_mlp.down_proj"},
    {NULL, NULL},
};

static const sp_gguf_key_map qwen3_moe_gguf_keys[] = {
    {"expert_count", "num_experts", SP_GGUF_KEY_HF_COUNT},
    {"expert_used_count", "num_experts_per_tok", SP_GGUF_KEY_HF_COUNT},
    {"expert_feed_forward_length", "moe_intermediate_size",
     SP_GGUF_KEY_HF_COUNT},
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

static const sp_gguf_family qwen3_moe_gguf = {
    .arch = "qwen3moe",
    .model_type = "qwen3_moe",
    .hf_class = "Qwen3MoeForCausalLM",
    .layer_names = qwen3_moe_gguf_layers,
    .keys = qwen3_moe_gguf_keys,
    .implied_config = "{\"decoder_sparse_step\": 1, \"mlp_only_layers\": [], "
                      "\"norm_topk_prob\": true}",
};

const sp_arch sp_arch_qwen3_moe = {.model_type = "qwen3_moe",
                                   .gguf = &qwen3_moe_gguf,
                                   .load = qwen3_moe_load,
                                   .layer = sp_prenorm_decoder_layer,
                                   .free_family = qwen3_moe_free};
