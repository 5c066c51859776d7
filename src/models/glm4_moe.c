/* GLM-4.5 / 4.6 / 4.7 (model_type "glm4_moe") as mlx-lm's glm4_moe
 * computes it: pre-norm layers of grouped-query attention (q/k/v biases
 * when attention_bias, per-head q/k RMS norms when use_qk_norm, rotate-half
 * RoPE over the first head_dim * partial_rotary_factor dimensions of each
 * head, no rope_scaling) and an MLP that is dense (intermediate_size) on
 * the first first_k_dense_replace layers and otherwise DeepSeek-V3's
 * routed experts beside n_shared_experts shared ones: sigmoid scores with
 * e_score_correction_bias, group-limited top-k, renormalized when
 * norm_topk_prob, scaled by routed_scaling_factor (models/moe.h,
 * sp_moe_grouped_spec).
 *
 * partial_rotary_factor is required: mlx-lm has no default for it, and the
 * generic default (1, full rotary) would silently give another model.
 * The multi-token-prediction layers (num_nextn_predict_layers, stored as
 * layers past num_hidden_layers) are not read, as mlx-lm's sanitize drops
 * them. */
#include "models/blocks.h"
#include "models/moe.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>

/* mlx-lm's ModelArgs requires every MoE key; none has a family default. */
static const sp_moe_grouped_defaults glm4_moe_defaults = {
    .n_routed = 0, .n_shared = 0, .top_k = 1, .routed_scale = 1.0};

/* What spindle_model.family holds: the MoE layers' experts. */
typedef struct glm4_moe {
    sp_moe *moe;       /* [n_layers]; unbound (zeroed) on dense layers */
    int n_layers;
} glm4_moe;

static void glm4_moe_free(void *family) {
    glm4_moe *g = family;
    for (int l = 0; l < g->n_layers; l++) sp_moe_free(&g->moe[l]);
    free(g->moe);
    free(g);
}

static spindle_status check_rope(const spindle_model *m, spindle_error *err) {
    if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(
            m->cfg.json, "partial_rotary_factor")))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: glm4_moe needs a numeric "
                       "'partial_rotary_factor'", m->dir);
    if (m->cfg.rope.type != SP_ROPE_DEFAULT)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s/config.json: glm4_moe applies no rope_scaling "
                       "(as mlx-lm's glm4_moe)", m->dir);
    return SPINDLE_OK;
}

static spindle_status glm4_moe_load(spindle_model *m, spindle_error *err) {
    const int n = m->cfg.n_layers;
    sp_moe_spec spec;
    int first_dense = 0;
    spindle_status st = check_rope(m, err);
    if (!st) st = sp_moe_grouped_spec(m, &glm4_moe_defaults, &spec, err);
    if (!st) st = sp_model_int(m, "first_k_dense_replace", false, 0, 0,
                               1 << 20, &first_dense, err);
    if (st) return st;
    glm4_moe *g = calloc(1, sizeof *g);
    bool *is_moe = calloc((size_t)n, sizeof *is_moe);
    if (g) g->moe = calloc((size_t)n, sizeof *g->moe);
    if (!g || !g->moe || !is_moe) {
        if (g) free(g->moe);
        free(g);
        free(is_moe);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    g->n_layers = n;
    m->family = g;
    for (int l = 0; l < n; l++)
        is_moe[l] = spec.n_experts > 0 && l >= first_dense;
    sp_decoder_options opt = {
        .qkv_bias = m->cfg.attention_bias,
        .qk_norm = sp_config_bool(&m->cfg, "use_qk_norm", false),
        .own_mlp = is_moe};
    st = sp_bind_decoder_layers(m, &opt, err);
    char prefix[64];
    for (int l = 0; l < n && !st; l++) {
        if (!is_moe[l]) continue;
        snprintf(prefix, sizeof prefix, "model.layers.%d.mlp", l);
        st = sp_moe_bind(m, prefix, &spec, &g->moe[l], err);
        if (!st) m->layers[l].moe = &g->moe[l];
    }
    free(is_moe);
    return st;
}

const sp_arch sp_arch_glm4_moe = {.model_type = "glm4_moe",
                                  .load = glm4_moe_load,
                                  .layer = sp_prenorm_decoder_layer,
                                  .free_family = glm4_moe_free};
