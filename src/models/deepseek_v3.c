/* DeepSeek-V3 (model_type "deepseek_v3": DeepSeek-V3 / R1; "kimi_k2",
 * which mlx-lm maps to the same class) as mlx-lm's deepseek_v3 computes it: pre-norm layers of
 * multi-head latent attention (models/mla.h) and an MLP that is dense
 * (intermediate_size) on the first first_k_dense_replace layers and on
 * layers l with l % moe_layer_freq != 0, and otherwise routed experts
 * (moe_intermediate_size each) beside n_shared_experts shared ones (one
 * SwiGLU of n_shared_experts * moe_intermediate_size), routed by sigmoid
 * scores with e_score_correction_bias, group-limited top-k (n_group,
 * topk_group), renormalized when norm_topk_prob and scaled by
 * routed_scaling_factor (compute/routing.h, SP_ROUTE_SIGMOID_GROUPED).
 *
 * GLM-4.7-Flash (model_type "glm4_moe_lite", mlx-lm's glm4_moe_lite) is
 * the same model with its own defaults for absent keys (64 routed experts,
 * one shared, 4 per token, routed_scaling_factor 1.8, one dense layer)
 * and rms_norm_eps in its latent norms; its MTP layers (past
 * num_hidden_layers) are not read. */
#include "models/blocks.h"
#include "models/mla.h"
#include "models/moe.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a family assumes for absent config keys (mlx-lm's ModelArgs). */
typedef struct deepseek_defaults {
    int n_routed, n_shared, top_k, first_dense;
    double routed_scale;
    bool latent_eps_from_config;
} deepseek_defaults;

static const deepseek_defaults deepseek_v3_defaults = {
    .n_routed = 0, .n_shared = 0, .top_k = 1, .first_dense = 0,
    .routed_scale = 1.0};
static const deepseek_defaults glm4_moe_lite_defaults = {
    .n_routed = 64, .n_shared = 1, .top_k = 4, .first_dense = 1,
    .routed_scale = 1.8, .latent_eps_from_config = true};

/* What spindle_model.family holds. */
typedef struct deepseek {
    sp_mla_config mla;
    sp_mla_layer *attn;  /* [n_layers] */
    sp_moe *moe;         /* [n_layers]; unbound (zeroed) on dense layers */
    int n_layers;
} deepseek;

static void deepseek_free(void *family) {
    deepseek *d = family;
    for (int l = 0; l < d->n_layers; l++) {
        sp_mla_layer_free(&d->attn[l]);
        sp_moe_free(&d->moe[l]);
    }
    sp_mla_config_free(&d->mla);
    free(d->attn);
    free(d->moe);
    free(d);
}

/* A config value that mlx-lm accepts only in one spelling. */
static spindle_status expect_string(const spindle_model *m, const char *key,
                                    const char *want, spindle_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->cfg.json, key);
    if (!v || cJSON_IsNull(v) ||
        (cJSON_IsString(v) && !strcmp(v->valuestring, want)))
        return SPINDLE_OK;
    return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                   "%s/config.json: %s '%s' is not supported (only '%s')",
                   m->dir, key, cJSON_IsString(v) ? v->valuestring : "?",
                   want);
}

/* The routed experts' spec; spec->n_experts 0 when the config has none
 * (n_routed_experts absent or null: every layer dense). */
static spindle_status moe_spec(const spindle_model *m,
                               const deepseek_defaults *dflt,
                               sp_moe_spec *spec, spindle_error *err) {
    memset(spec, 0, sizeof *spec);
    int experts, used = 0, inter = 0, shared, groups, topk_groups;
    spindle_status st;
    if ((st = sp_model_int(m, "n_routed_experts", false, dflt->n_routed, 1,
                           1 << 16, &experts, err)) || !experts)
        return st;
    if ((st = sp_model_int(m, "num_experts_per_tok", false, dflt->top_k, 1,
                           experts, &used, err)) ||
        (st = sp_model_int(m, "moe_intermediate_size", true, 0, 1, 1 << 30,
                           &inter, err)) ||
        (st = sp_model_int(m, "n_shared_experts", false, dflt->n_shared, 0,
                           1 << 10, &shared, err)) ||
        (st = sp_model_int(m, "n_group", false, 1, 1, experts, &groups,
                           err)) ||
        (st = sp_model_int(m, "topk_group", false, 1, 1, groups,
                           &topk_groups, err)) ||
        (st = expect_string(m, "topk_method", "noaux_tc", err)) ||
        (st = expect_string(m, "scoring_func", "sigmoid", err)))
        return st;
    if (experts % groups || (groups > 1 && experts / groups < 2) ||
        used > topk_groups * (experts / groups))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: %d experts in n_group %d groups, "
                       "topk_group %d, cannot give num_experts_per_tok %d",
                       m->dir, experts, groups, topk_groups, used);
    *spec = (sp_moe_spec){
        .n_experts = experts,
        .top_k = used,
        .inter = inter,
        .routing = SP_ROUTE_SIGMOID_GROUPED,
        .norm_topk = sp_config_bool(&m->cfg, "norm_topk_prob", true),
        .router = "gate",
        .score_bias = "gate.e_score_correction_bias",
        .groups = {.n_group = groups, .topk_group = topk_groups,
                   .scale = (float)sp_config_num(&m->cfg,
                                                 "routed_scaling_factor",
                                                 dflt->routed_scale)},
        .stacked = "switch_mlp",
        .per_expert = "experts",
        .shared_inter = (int64_t)shared * inter,
        .shared = "shared_experts",
    };
    return SPINDLE_OK;
}

/* Layer l's norms and dense MLP, or its experts. */
static spindle_status bind_mlp(spindle_model *m, deepseek *d,
                               const sp_moe_spec *spec, int first_dense,
                               int freq, int l, spindle_error *err) {
    sp_layer *L = &m->layers[l];
    const int64_t h = m->cfg.hidden_size, inter = m->cfg.intermediate_size;
    char p[128];
#define NAME(fmt) (snprintf(p, sizeof p, "model.layers.%d." fmt, l), p)
    spindle_status st;
    if ((st = sp_bind_vector(m, NAME("input_layernorm.weight"), h,
                             &L->attn_norm, err)) ||
        (st = sp_bind_vector(m, NAME("post_attention_layernorm.weight"), h,
                             &L->mlp_norm, err)))
        return st;
    if (spec->n_experts && l >= first_dense && l % freq == 0) {
        st = sp_moe_bind(m, NAME("mlp"), spec, &d->moe[l], err);
        if (!st) L->moe = &d->moe[l];
        return st;
    }
    if ((st = sp_bind_linear(m, NAME("mlp.gate_proj"), inter, h, false,
                             &L->gate, err)) ||
        (st = sp_bind_linear(m, NAME("mlp.up_proj"), inter, h, false, &L->up,
                             err)))
        return st;
    return sp_bind_linear(m, NAME("mlp.down_proj"), h, inter, false, &L->down,
                          err);
#undef NAME
}

static spindle_status load_with(spindle_model *m,
                                const deepseek_defaults *dflt,
                                spindle_error *err) {
    const int n = m->cfg.n_layers;
    deepseek *d = calloc(1, sizeof *d);
    if (d) {
        d->attn = calloc((size_t)n, sizeof *d->attn);
        d->moe = calloc((size_t)n, sizeof *d->moe);
    }
    if (!d || !d->attn || !d->moe) {
        if (d) { free(d->attn); free(d->moe); }
        free(d);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    d->n_layers = n;
    m->family = d;
    sp_moe_spec spec;
    int first_dense = 0, freq = 1;
    spindle_status st = sp_mla_config_read(m, &d->mla, err);
    if (dflt->latent_eps_from_config) d->mla.latent_eps = m->cfg.rms_norm_eps;
    if (!st) st = moe_spec(m, dflt, &spec, err);
    if (!st) st = sp_model_int(m, "first_k_dense_replace", false,
                               dflt->first_dense, 0, 1 << 20, &first_dense,
                               err);
    if (!st) st = sp_model_int(m, "moe_layer_freq", false, 1, 1, 1 << 20,
                               &freq, err);
    for (int l = 0; l < n && !st; l++) {
        st = sp_mla_bind(m, &d->mla, l, &d->attn[l], err);
        if (!st) st = bind_mlp(m, d, &spec, first_dense, freq, l, err);
    }
    return st;
}

static spindle_status deepseek_load(spindle_model *m, spindle_error *err) {
    return load_with(m, &deepseek_v3_defaults, err);
}

static spindle_status glm4_moe_lite_load(spindle_model *m,
                                         spindle_error *err) {
    return load_with(m, &glm4_moe_lite_defaults, err);
}

static void deepseek_layer(sp_forward *f, int l) {
    const deepseek *d = f->m->family;
    const sp_layer *L = &f->m->layers[l];
    sp_norm_rows(f, f->x, L->attn_norm, f->xn);
    sp_mla_attention(f, l, &d->mla, &d->attn[l]);
    if (f->status) return;
    sp_add_rows(f, f->x, f->out);
    sp_norm_rows(f, f->x, L->mlp_norm, f->xn);
    if (L->moe)
        sp_moe_block(f, L->moe);
    else
        sp_mlp_swiglu(f, l);
    sp_add_rows(f, f->x, f->out);
}

static int deepseek_extra(const spindle_model *m, int l,
                          const sp_linear **out, int max,
                          int64_t *vector_floats) {
    const deepseek *d = m->family;
    return sp_mla_matrices(&d->mla, &d->attn[l], out, max, vector_floats);
}

static void deepseek_state(const spindle_model *m, int l,
                           sp_layer_state_desc *out) {
    const deepseek *d = m->family;
    sp_mla_state(&d->mla, out);
}

const sp_arch sp_arch_deepseek_v3 = {.model_type = "deepseek_v3",
                                     .load = deepseek_load,
                                     .layer = deepseek_layer,
                                     .free_family = deepseek_free,
                                     .layer_state = deepseek_state,
                                     .layer_extra = deepseek_extra};

const sp_arch sp_arch_glm4_moe_lite = {.model_type = "glm4_moe_lite",
                                       .load = glm4_moe_lite_load,
                                       .layer = deepseek_layer,
                                       .free_family = deepseek_free,
                                       .layer_state = deepseek_state,
                                     .layer_extra = deepseek_extra};

const sp_arch sp_arch_kimi_k2 = {.model_type = "kimi_k2",
                                 .load = deepseek_load,
                                 .layer = deepseek_layer,
                                 .free_family = deepseek_free,
                                 .layer_state = deepseek_state,
                                 .layer_extra = deepseek_extra};
