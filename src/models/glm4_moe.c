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
 * them.
 *
 * GGUF (llama.cpp's "glm4moe", conversion/glm.py, src/models/glm4-moe.cpp):
 * block_count counts the MTP layers too (nextn_predict_layers of them,
 * last; their tensors are not read); the rotary part is
 * rope.dimension_count of key_length; q/k/v biases and the q/k norms are
 * there when their tensors are; the pre-MLP norm is post_attention_norm;
 * a file without expert_gating_func is
 * sigmoid, as llama.cpp assumes for this architecture. */
#include "models/blocks.h"
#include "models/moe.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (!st && m->gguf) spec.score_bias = SP_MOE_GGUF_SCORE_BIAS;
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

static const sp_gguf_name_map glm4moe_gguf_layers[] = {
    /* the pre-MLP norm (gguf-py's tensor map for this architecture) */
    {"post_attention_norm", "post_attention_layernorm"},
    SP_MOE_GROUPED_GGUF_LAYERS,
    {NULL, NULL},
};

static const sp_gguf_key_map glm4moe_gguf_keys[] = {
    SP_MOE_GROUPED_GGUF_KEYS,
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

static bool has_tensor(const sp_gguf_weights *w, const char *name) {
    return sp_gguf_weights_find(w, name) != NULL;
}

/* sp_gguf_family.config: what glm4moe files do not spell key for key. */
static spindle_status glm4moe_gguf_config(const sp_gguf_weights *w,
                                          cJSON *json, spindle_error *err) {
    const sp_gguf *g = sp_gguf_weights_file(w);
    double nextn = 0;
    bool found;
    spindle_status st = sp_gguf_arch_real(g, "glm4moe", "nextn_predict_layers",
                                          &nextn, &found, err);
    if (st) return st;
    cJSON *layers = cJSON_GetObjectItemCaseSensitive(json, "num_hidden_layers");
    if (nextn != floor(nextn) || nextn < 0 ||
        !cJSON_IsNumber(layers) || nextn >= layers->valuedouble)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: 'glm4moe.nextn_predict_layers' must be a count "
                       "below block_count", sp_gguf_path(g));
    cJSON_SetNumberValue(layers, layers->valuedouble - nextn);
    if ((st = sp_moe_gguf_routing(g, "glm4moe", true, json, err)))
        return st;
    /* the common reading writes it only for a partial rotary part */
    if (!cJSON_GetObjectItemCaseSensitive(json, "partial_rotary_factor") &&
        !cJSON_AddNumberToObject(json, "partial_rotary_factor", 1.0))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    /* GLM has q/k/v biases without an o bias (which the common reading
     * looks for) */
    bool bias = has_tensor(w, "model.layers.0.self_attn.q_proj.bias");
    bool qk_norm = has_tensor(w, "model.layers.0.self_attn.q_norm.weight");
    if ((st = sp_json_replace(json, "attention_bias", cJSON_CreateBool(bias),
                              err)))
        return st;
    return sp_json_replace(json, "use_qk_norm", cJSON_CreateBool(qk_norm),
                           err);
}

static const sp_gguf_family glm4moe_gguf = {
    .arch = "glm4moe",
    .model_type = "glm4_moe",
    .hf_class = "Glm4MoeForCausalLM",
    .layer_names = glm4moe_gguf_layers,
    .keys = glm4moe_gguf_keys,
    .config = glm4moe_gguf_config,
};

const sp_arch sp_arch_glm4_moe = {.model_type = "glm4_moe",
                                  .gguf = &glm4moe_gguf,
                                  .load = glm4_moe_load,
                                  .layer = sp_prenorm_decoder_layer,
                                  .free_family = glm4_moe_free};
