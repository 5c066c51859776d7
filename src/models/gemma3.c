/* Gemma 3 text models (model_type "gemma3_text"; "gemma3" multimodal
 * configs reach this through their text_config, which names gemma3_text).
 *
 * Differences from the Llama layer, as mlx-lm's gemma3_text computes them:
 *  - embeddings times sqrt(hidden_size), that factor rounded to bf16 first;
 *  - RMSNorm scales by (1 + w), with 1 + w rounded to the weight's dtype;
 *  - "sandwich" norms: each block's output is normalized again before it
 *    joins the residual stream;
 *  - per-head q/k norms, GeGLU MLP (tanh GELU);
 *  - local layers attend to a sliding window and use their own RoPE base
 *    (rope_local_base_freq, unscaled); global layers use rope_theta with
 *    rope_scaling;
 *  - score scale query_pre_attn_scalar^-0.5, optional logit softcaps.
 *
 * GGUF (llama.cpp's "gemma3"): norm weights carry the 1 already, ffn_norm
 * is the pre-MLP norm, and queries scale by key_length^-0.5. */
#include "models/blocks.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What spindle_model.family holds for Gemma 3. */
typedef struct gemma3 {
    sp_gemma_io io;              /* first: the embedding factor and the
                                    final softcap (0: none) */
    sp_rope rope_local;          /* the sliding-window layers' rope */
    sp_layer_scales scales;      /* query_pre_attn_scalar^-0.5, softcap */
} gemma3;

static void gemma3_free(void *family) {
    gemma3 *g = family;
    sp_rope_free(&g->rope_local);
    free(g);
}

static spindle_status init_ropes(spindle_model *m, gemma3 *g,
                                 spindle_error *err) {
    double theta = 0, local_theta = 0;
    spindle_status st;
    /* mlx-lm's and transformers' Gemma 3 default, not the generic 10000. */
    if ((st = sp_model_positive(m, "rope_theta", 1000000.0, &theta, err)) ||
        (st = sp_model_positive(m, "rope_local_base_freq", 10000.0,
                                &local_theta, err)))
        return st;
    sp_rope_config global = m->cfg.rope;
    global.theta = theta;
    sp_rope_config local = m->cfg.rope;
    local.type = SP_ROPE_DEFAULT;
    local.factor = 1.0;
    local.theta = local_theta;
    sp_rope_free(&m->rope);
    if (sp_rope_init(&m->rope, &global) || sp_rope_init(&g->rope_local, &local))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

static spindle_status bind_layers(spindle_model *m, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    sp_decoder_options opt = {.qkv_bias = c->attention_bias,
                              .o_bias = c->attention_bias,
                              .qk_norm = true,
                              .geglu = true,
                              .norms = SP_NORMS_SANDWICH};
    spindle_status st = sp_bind_decoder_layers(m, &opt, err);
    char p[256];
    for (int l = 0; l < c->n_layers && !st; l++) {
        sp_layer *L = &m->layers[l];
        int d = c->hidden_size, hd = c->head_dim;
#define FOLD(fmt, w, n)                                                       \
    (snprintf(p, sizeof p, "model.layers.%d." fmt, l),                       \
     sp_fold_norm_plus_one(m, p, w, n))
        FOLD("input_layernorm.weight", L->attn_norm, d);
        FOLD("post_attention_layernorm.weight", L->post_attn_norm, d);
        FOLD("pre_feedforward_layernorm.weight", L->mlp_norm, d);
        FOLD("post_feedforward_layernorm.weight", L->post_mlp_norm, d);
        FOLD("self_attn.q_norm.weight", L->q_norm, hd);
        FOLD("self_attn.k_norm.weight", L->k_norm, hd);
#undef FOLD
    }
    return st;
}

static spindle_status gemma3_load(spindle_model *m, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    spindle_status st = sp_gemma_check_head_dim(m, err);
    if (st) return st;
    if (c->rope.rotary_dim != c->head_dim)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s/config.json: gemma3 with partial rotary "
                       "embeddings is not supported", m->dir);
    double qscalar = 0, attn_cap = 0, final_cap = 0;
    /* llama.cpp scales GGUF queries by key_length^-0.5; mlx-lm defaults
     * to 256. */
    double qscalar_default = m->gguf ? (double)c->head_dim : 256.0;
    if ((st = sp_model_positive(m, "query_pre_attn_scalar", qscalar_default,
                                &qscalar, err)) ||
        (st = sp_model_positive(m, "attn_logit_softcapping", 0.0, &attn_cap,
                                err)) ||
        (st = sp_model_positive(m, "final_logit_softcapping", 0.0,
                                &final_cap, err)))
        return st;
    /* Without layer_types, mlx-lm makes every sliding_window_pattern-th
     * layer global. */
    int pattern = sp_config_int(c, "sliding_window_pattern", 6);
    if (pattern < 1)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: sliding_window_pattern %d is not "
                       "positive", m->dir, pattern);
    gemma3 *g = calloc(1, sizeof *g);
    if (!g) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    m->family = g;
    if ((st = init_ropes(m, g, err))) return st;

    g->scales = (sp_layer_scales){.attn = (float)(1.0 / sqrt(qscalar)),
                                  .attn_softcap = (float)attn_cap,
                                  .residual = 1.0f};
    g->io.final_softcap = (float)final_cap;
    /* mlx-lm: h *= mx.array(hidden ** 0.5, bfloat16).astype(h.dtype). */
    g->io.embed_scale =
        sp_bf16_to_f32(sp_f32_to_bf16(sqrtf((float)c->hidden_size)));
    /* llama.cpp (the reference for GGUF files) scales by the f32 value. */
    if (m->gguf) g->io.embed_scale = sqrtf((float)c->hidden_size);
    /* The 1 of (1 + w) is folded into every norm weight. */
    sp_fold_norm_plus_one(m, "model.norm.weight", m->final_norm, c->hidden_size);

    if ((st = bind_layers(m, err))) return st;

    return sp_model_sliding_layers(m, pattern, 512.0, &g->rope_local, err);
}

static void gemma3_layer(sp_forward *f, int l) {
    sp_decoder_layer(f, l, &((const gemma3 *)f->m->family)->scales);
}

static const sp_gguf_name_map gemma3_gguf_layers[] = {
    /* The sandwich layers' pre-MLP norm is not the post-attention one. */
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
    {NULL, NULL},
};

/* Absent ones take gemma3_load's defaults, which are llama.cpp's. */
static const sp_gguf_key_map gemma3_gguf_keys[] = {
    {"attention.sliding_window", "sliding_window", SP_GGUF_KEY_COUNT},
    {"attention.sliding_window_pattern", "sliding_window_pattern",
     SP_GGUF_KEY_COUNT},
    {"final_logit_softcapping", "final_logit_softcapping", SP_GGUF_KEY_REAL},
    {"attn_logit_softcapping", "attn_logit_softcapping", SP_GGUF_KEY_REAL},
    {"rope.freq_base_swa", "rope_local_base_freq", SP_GGUF_KEY_REAL},
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

static const sp_gguf_family gemma3_gguf = {
    .arch = "gemma3",
    .model_type = "gemma3_text",
    .hf_class = "Gemma3ForCausalLM",
    .layer_names = gemma3_gguf_layers,
    .keys = gemma3_gguf_keys,
    .norm_plus_one = true,
};

const sp_arch sp_arch_gemma3_text = {
    .model_type = "gemma3_text",
    .gguf = &gemma3_gguf,
    .load = gemma3_load,
    .layer = gemma3_layer,
    .embed_rows = sp_gemma_embed_rows,
    .logits = sp_gemma_logits,
    .free_family = gemma3_free,
};
