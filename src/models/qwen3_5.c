/* Qwen3.5 text models (model_type "qwen3_5_text"; the "qwen3_5"
 * multimodal configs mlx-community ships reach it through their
 * text_config, their weights under "language_model."): the hybrid layers of
 * qwen3_hybrid.h with a dense SwiGLU MLP, as mlx-lm's qwen3_5.py computes
 * them; Qwen3.5 MoE ("qwen3_5_moe_text", reached from "qwen3_5_moe"
 * configs the same way) with the routed experts and sigmoid-gated shared
 * expert of Qwen3-Next (models/moe.h) in every layer instead.
 *
 * RoPE comes from rope_parameters (rope_theta, partial_rotary_factor;
 * mlx-lm's defaults 100000 and 0.25, and its multimodal rope reduces to the
 * plain one for text). Hugging Face checkpoints (conv1d weights stored
 * [channels, 1, kernel]) hold their norms as w of (1 + w), which mlx-lm's
 * sanitize turns into 1 + w.
 *
 * GGUF (llama.cpp's "qwen35", "qwen35moe"): the DeltaNet tensors are ssm_*
 * and attn_qkv / attn_gate, the pre-MLP norm post_attention_norm, and where
 * key and value heads differ in number the converter tiles the value heads
 * (_LinearAttentionVReorderBase); the MoE tensors are Qwen3-Next's. */
#include "models/qwen3_hybrid.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const sp_arch sp_arch_qwen3_5_moe_text, sp_arch_qwen3_5_moe;

/* mlx-lm's TextModelArgs: rope_parameters replaces the top-level keys,
 * with its defaults when the config has none (GGUF files give theirs at
 * the top level). */
static spindle_status qwen3_5_rope(spindle_model *m, spindle_error *err) {
    sp_rope_config *r = &m->cfg.rope;
    const cJSON *rp =
        cJSON_GetObjectItemCaseSensitive(m->cfg.json, "rope_parameters");
    if (m->gguf && !rp) return SPINDLE_OK;
    if (rp && !cJSON_IsObject(rp))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: 'rope_parameters' must be an object",
                       m->dir);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rp, "type");
    if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
    if (cJSON_IsString(t) && strcmp(t->valuestring, "default") &&
        strcmp(t->valuestring, "mrope"))
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s/config.json: rope_parameters type '%s' is not "
                       "supported (supported: default, mrope)", m->dir,
                       t->valuestring);
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    const cJSON *part =
        cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor");
    const double th = cJSON_IsNumber(theta) ? theta->valuedouble : 100000.0;
    const double p = cJSON_IsNumber(part) ? part->valuedouble : 0.25;
    /* p is checked before it scales head_dim: a huge factor has no int. */
    const bool p_ok = p > 0 && p <= 1;
    const int rotary = p_ok ? (int)(m->cfg.head_dim * p) : 0;
    if (!(th > 0) || !p_ok || rotary < 2 || rotary % 2)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: rope_parameters give an invalid "
                       "rope_theta or rotary dimension", m->dir);
    *r = (sp_rope_config){.type = SP_ROPE_DEFAULT, .rotary_dim = rotary,
                          .theta = th, .factor = 1.0};
    sp_rope_free(&m->rope);
    if (sp_rope_init(&m->rope, r))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

/* mlx-lm's sanitize: conv1d weights of [channels, 1, kernel] mark an
 * unconverted checkpoint, whose norms it shifts by 1. */
static bool hf_checkpoint(const spindle_model *m, const sp_hybrid *h) {
    bool hf = false;
    for (int l = 0; l < m->cfg.n_layers; l++) hf |= sp_hybrid_hf_conv(m, h, l);
    return hf;
}

/* The experts as the files hold them: mlx-lm's switch_mlp.{gate,up,
 * down}_proj, or transformers' bare experts.gate_up_proj (gate rows, then
 * up rows: the halves mlx-lm's qwen3_5_moe sanitize splits) and
 * experts.down_proj. */
static spindle_status moe_spec(spindle_model *m, sp_moe_spec *spec,
                               spindle_error *err) {
    spindle_status st = sp_hybrid_moe_spec(m, spec, err);
    if (st) return st;
    /* mlx-lm's Qwen3.5 renormalizes the top-k weights unless told not to
     * (Qwen3-Next's default is the opposite). */
    spec->norm_topk = m->gguf || sp_config_bool(&m->cfg, "norm_topk_prob", true);
    if (sp_model_find_tensor(m, "model.layers.0.mlp.experts.gate_up_proj")) {
        spec->stacked = "experts";
        spec->gate_up = "gate_up_proj";
        spec->gate_up_halves = true;
        spec->per_expert = NULL;
        spec->adapter_stacked = "switch_mlp";
    }
    return SPINDLE_OK;
}

/* Qwen3.5 MoE: mlx-lm's qwen3_5 makes every layer's MLP the experts
 * whenever num_experts > 0 (decoder_sparse_step and mlp_only_layers are
 * not read), as transformers' Qwen3_5Moe does. */
static bool with_experts(const spindle_model *m) {
    return m->arch == &sp_arch_qwen3_5_moe_text ||
           m->arch == &sp_arch_qwen3_5_moe ||
           cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
               m->cfg.json, "num_experts")) > 0;
}

static spindle_status qwen3_5_load(spindle_model *m, spindle_error *err) {
    const bool moe = with_experts(m);
    sp_hybrid_moe *q = NULL;
    spindle_status st = sp_hybrid_moe_new(m, moe, &q, err);
    if (st) return st;
    sp_hybrid *h = &q->hybrid;
    if ((st = qwen3_5_rope(m, err)) || (st = sp_hybrid_config(m, h, err)))
        return st;
    const sp_hybrid_options opt = {.norms_plus_one = hf_checkpoint(m, h),
                                   .heads_tiled = m->gguf != NULL};
    if ((st = sp_hybrid_bind(m, h, &opt, err))) return st;
    if (!moe) return sp_hybrid_bind_mlps(m, q, "model.layers", NULL, NULL, err);
    bool *all = malloc((size_t)m->cfg.n_layers * sizeof *all);
    if (!all) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int l = 0; l < m->cfg.n_layers; l++) all[l] = true;
    sp_moe_spec spec;
    if (!(st = moe_spec(m, &spec, err)))
        st = sp_hybrid_bind_mlps(m, q, "model.layers", all, &spec, err);
    free(all);
    return st;
}

/* The multi-token-prediction head's layer: the family's gated attention
 * and dense MLP under "mtp.layers.0." (vLLM's qwen3_5_mtp.py names). */
static spindle_status qwen3_5_mtp_load(spindle_model *head,
                                       const spindle_model *target,
                                       int *norms_plus_one,
                                       spindle_error *err) {
    const sp_hybrid_moe *tq = target->family;
    const sp_hybrid *th = &tq->hybrid;
    if (tq->moe)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: the multi-token-prediction head of Qwen3.5 MoE "
                       "is not supported", target->dir);
    sp_hybrid_moe *q = NULL;
    spindle_status st = sp_hybrid_moe_new(head, false, &q, err);
    if (st) return st;
    sp_hybrid *h = &q->hybrid;
    /* The sizes only (the forward's scratch is sized by them); no
     * pointer of the target's is shared. */
    h->n_k_heads = th->n_k_heads;
    h->n_v_heads = th->n_v_heads;
    h->k_dim = th->k_dim;
    h->v_dim = th->v_dim;
    h->conv_kernel = th->conv_kernel;
    h->key_dim = th->key_dim;
    h->value_dim = th->value_dim;
    h->conv_dim = th->conv_dim;
    h->linear = calloc(1, sizeof *h->linear); /* one full-attention layer */
    if (!h->linear) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    if (*norms_plus_one < 0) *norms_plus_one = hf_checkpoint(target, th);
    const sp_hybrid_options opt = {.norms_plus_one = *norms_plus_one,
                                   .heads_tiled = th->heads_tiled};
    st = sp_hybrid_bind_layers_at(head, h, "mtp.layers", &opt, err);
    return st ? st : sp_hybrid_bind_mlps(head, q, "mtp.layers", NULL, NULL, err);
}

/* llama.cpp's qwen35 spelling (gguf-py MODEL_TENSORS[QWEN35]). */
static const sp_gguf_name_map qwen35_names[] = {
    SP_QWEN_HYBRID_GGUF_NAMES,
    {"ssm_beta", "linear_attn.in_proj_b"},
    {"ssm_alpha", "linear_attn.in_proj_a"},
    {NULL, NULL},
};

static const sp_gguf_key_map qwen35_keys[] = {
    SP_QWEN_HYBRID_GGUF_KEYS,
    {NULL, NULL, 0},
};

static const sp_gguf_family qwen35_gguf = {
    .arch = "qwen35",
    .model_type = "qwen3_5_text",
    .hf_class = "Qwen3_5ForCausalLM",
    .layer_names = qwen35_names,
    .keys = qwen35_keys,
};

/* llama.cpp's qwen35moe: qwen35's layers (value heads tiled) with
 * Qwen3-Next's MoE tensors in every layer. */
static const sp_gguf_name_map qwen35moe_names[] = {
    SP_QWEN_HYBRID_GGUF_NAMES,
    {"ssm_beta", "linear_attn.in_proj_b"},
    {"ssm_alpha", "linear_attn.in_proj_a"},
    SP_QWEN_HYBRID_MOE_GGUF_NAMES,
    {NULL, NULL},
};

static const sp_gguf_key_map qwen35moe_keys[] = {
    SP_QWEN_HYBRID_GGUF_KEYS,
    SP_QWEN_HYBRID_MOE_GGUF_KEYS,
    {NULL, NULL, 0},
};

static const sp_gguf_family qwen35moe_gguf = {
    .arch = "qwen35moe",
    .model_type = "qwen3_5_moe_text",
    .hf_class = "Qwen3_5MoeForCausalLM",
    .layer_names = qwen35moe_names,
    .keys = qwen35moe_keys,
};

/* Every Qwen3.5 type runs on the hybrid layer's hooks. */
#define QWEN3_5_HOOKS                                                        \
    .load = qwen3_5_load, .layer = sp_hybrid_layer,                          \
    .free_family = sp_hybrid_moe_free, .layer_state = sp_hybrid_layer_state, \
    .layer_extra = sp_hybrid_layer_extra, .lora_linear = sp_hybrid_lora_linear

const sp_arch sp_arch_qwen3_5_text = {.model_type = "qwen3_5_text", .gguf = &qwen35_gguf,
                                      QWEN3_5_HOOKS, .mtp_load = qwen3_5_mtp_load};

/* A text-only config may name the multimodal type itself (mlx-lm then
 * reads the whole config as the text config). */
const sp_arch sp_arch_qwen3_5 = {.model_type = "qwen3_5", QWEN3_5_HOOKS,
                                 .mtp_load = qwen3_5_mtp_load};

/* Qwen3.5 MoE: the same hooks; the multimodal type stands for the text
 * one as above. */
const sp_arch sp_arch_qwen3_5_moe_text = {.model_type = "qwen3_5_moe_text",
                                          .gguf = &qwen35moe_gguf, QWEN3_5_HOOKS};
const sp_arch sp_arch_qwen3_5_moe = {.model_type = "qwen3_5_moe", QWEN3_5_HOOKS};
