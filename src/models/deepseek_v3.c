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
 * num_hidden_layers) are not read.
 *
 * GGUF (llama.cpp's "deepseek2", conversion/deepseek.py, src/models/
 * deepseek2.cpp): the MLA sizes come from kv_lora_rank, q_lora_rank,
 * rope.dimension_count and key_length_mla / value_length_mla (older files:
 * key_length / value_length, with a whole attn_kv_b, read in a float
 * type only); newer files carry kv_b split as attn_k_b (mlx-lm's embed_q)
 * and attn_v_b (unembed_out).
 * llama.cpp applies rms_norm_eps to the latent norms too, and routes by
 * expert_gating_func (sigmoid only here; a file without it is DeepSeek-V2's
 * softmax, refused), renormalizing only when expert_weights_norm. */
#include "models/blocks.h"
#include "models/mla.h"
#include "models/moe.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a family assumes for absent config keys (mlx-lm's ModelArgs). */
typedef struct deepseek_defaults {
    sp_moe_grouped_defaults moe;
    int first_dense;
    bool latent_eps_from_config;
} deepseek_defaults;

static const deepseek_defaults deepseek_v3_defaults = {
    .moe = {.n_routed = 0, .n_shared = 0, .top_k = 1, .routed_scale = 1.0},
    .first_dense = 0};
static const deepseek_defaults glm4_moe_lite_defaults = {
    .moe = {.n_routed = 64, .n_shared = 1, .top_k = 4, .routed_scale = 1.8},
    .first_dense = 1, .latent_eps_from_config = true};

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
    if (dflt->latent_eps_from_config || m->gguf)
        d->mla.latent_eps = m->cfg.rms_norm_eps;
    if (!st) st = sp_moe_grouped_spec(m, &dflt->moe, &spec, err);
    if (!st && m->gguf) spec.score_bias = SP_MOE_GGUF_SCORE_BIAS;
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

static const sp_gguf_name_map deepseek2_gguf_layers[] = {
    {"attn_q_a", "self_attn.q_a_proj"},
    {"attn_q_a_norm", "self_attn.q_a_layernorm"},
    {"attn_q_b", "self_attn.q_b_proj"},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
    {"attn_kv_b", "self_attn.kv_b_proj"},
    {"attn_k_b", "self_attn.embed_q"},
    {"attn_v_b", "self_attn.unembed_out"},
    SP_MOE_GROUPED_GGUF_LAYERS,
    {NULL, NULL},
};

static const sp_gguf_key_map deepseek2_gguf_keys[] = {
    {"attention.kv_lora_rank", "kv_lora_rank", SP_GGUF_KEY_COUNT},
    {"attention.q_lora_rank", "q_lora_rank", SP_GGUF_KEY_COUNT},
    SP_MOE_GROUPED_GGUF_KEYS,
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

/* The MLA head sizes: the _mla keys where the file has them (then
 * key_length / value_length are the latent row's), else key_length /
 * value_length themselves. */
static spindle_status mla_head_sizes(const sp_gguf *g, cJSON *json,
                                     spindle_error *err) {
    int64_t rope = 0, key = 0, value = 0;
    const bool mla = sp_gguf_arch_value(g, "deepseek2", "attention.key_length_mla");
    spindle_status st;
    if ((st = sp_gguf_arch_count(g, "deepseek2", "rope.dimension_count", true,
                                 &rope, err)) ||
        (st = sp_gguf_arch_count(g, "deepseek2",
                                 mla ? "attention.key_length_mla"
                                     : "attention.key_length",
                                 true, &key, err)) ||
        (st = sp_gguf_arch_count(g, "deepseek2",
                                 mla ? "attention.value_length_mla"
                                     : "attention.value_length",
                                 true, &value, err)))
        return st;
    if (key <= rope)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: the key length %lld leaves no room beside "
                       "rope.dimension_count %lld", sp_gguf_path(g),
                       (long long)key, (long long)rope);
    if (!cJSON_AddNumberToObject(json, "qk_rope_head_dim", (double)rope) ||
        !cJSON_AddNumberToObject(json, "qk_nope_head_dim",
                                 (double)(key - rope)) ||
        !cJSON_AddNumberToObject(json, "v_head_dim", (double)value))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

/* sp_gguf_family.config: what deepseek2 files do not spell key for key. */
static spindle_status deepseek2_gguf_config(const sp_gguf_weights *w,
                                            cJSON *json, spindle_error *err) {
    const sp_gguf *g = sp_gguf_weights_file(w);
    /* MLA is multi-head once decompressed (the file says 1 KV head: the
     * latent row) */
    const cJSON *heads = cJSON_GetObjectItemCaseSensitive(json,
                                                          "num_attention_heads");
    /* llama.cpp takes a file without expert_gating_func for DeepSeek-V2's
     * softmax */
    spindle_status st = mla_head_sizes(g, json, err);
    if (!st) st = sp_moe_gguf_routing(g, "deepseek2", false, json, err);
    if (!st) st = sp_json_replace(json, "num_key_value_heads",
                                  cJSON_CreateNumber(heads ? heads->valuedouble
                                                           : 1), err);
    if (st) return st;
    /* llama.cpp's deepseek2 stores 0.1 mscale_all_dim as the YaRN log
     * multiplier and takes mscale to equal it */
    cJSON *rs = cJSON_GetObjectItemCaseSensitive(json, "rope_scaling");
    cJSON *all = cJSON_GetObjectItemCaseSensitive(rs, "mscale_all_dim");
    if (cJSON_IsNumber(all)) {
        cJSON_SetNumberValue(all, all->valuedouble / 0.1);
        if (!cJSON_AddNumberToObject(rs, "mscale", all->valuedouble))
            return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    return SPINDLE_OK;
}

static const sp_gguf_family deepseek2_gguf = {
    .arch = "deepseek2",
    .model_type = "deepseek_v3",
    .hf_class = "DeepseekV3ForCausalLM",
    .layer_names = deepseek2_gguf_layers,
    .keys = deepseek2_gguf_keys,
    .config = deepseek2_gguf_config,
    .own_head_dims = true,
};

const sp_arch sp_arch_deepseek_v3 = {.model_type = "deepseek_v3",
                                     .gguf = &deepseek2_gguf,
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
