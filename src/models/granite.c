/* IBM Granite (3.x dense): the Llama layer with four scalars, as mlx-lm's
 * granite.py applies them:
 *  - embeddings times embedding_multiplier;
 *  - attention scores scaled by attention_multiplier (not head_dim^-0.5);
 *  - each block's output times residual_multiplier before it joins the
 *    residual stream;
 *  - logits divided by logits_scaling.
 * head_dim is hidden_size / num_attention_heads; RoPE is rotate-half.
 * mlx-lm requires all four keys.
 *
 * GGUF (llama.cpp's "granite"): Llama's tensors, q/k permuted for the
 * interleaved RoPE; the scalars are {embedding,residual,logit}_scale and
 * attention.scale, of which only logit_scale is required (llama.cpp:
 * absent ones leave that step out, attention.scale absent is
 * head_dim^-0.5). */
#include "models/blocks.h"
#include "base/error.h"

#include <math.h>
#include <stdlib.h>

/* What spindle_model.family holds for Granite. */
typedef struct granite {
    sp_layer_scales scales;      /* attention_multiplier, residual */
    float embed_scale;
    float logits_scale;          /* logits are divided by it */
} granite;

static void granite_free(void *family) { free(family); }

static spindle_status granite_load(spindle_model *m, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    if (c->head_dim * c->n_heads != c->hidden_size)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: granite's head size is hidden_size / "
                       "num_attention_heads, not head_dim %d", m->dir,
                       c->head_dim);
    /* NAN: required (mlx-lm's ModelArgs has no defaults for them). */
    double req = m->gguf ? 1.0 : NAN;
    double attn_dflt = m->gguf ? 1.0 / sqrt((double)c->head_dim) : NAN;
    double emb = 0, attn = 0, res = 0, logits = 0;
    spindle_status st;
    if ((st = sp_model_positive(m, "embedding_multiplier", req, &emb, err)) ||
        (st = sp_model_positive(m, "attention_multiplier", attn_dflt, &attn,
                                err)) ||
        (st = sp_model_positive(m, "residual_multiplier", req, &res, err)) ||
        (st = sp_model_positive(m, "logits_scaling", NAN, &logits, err)))
        return st;
    granite *g = calloc(1, sizeof *g);
    if (!g) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    m->family = g;
    g->scales = (sp_layer_scales){.attn = (float)attn,
                                  .residual = (float)res};
    g->embed_scale = (float)emb;
    g->logits_scale = (float)logits;
    if (!m->gguf) m->rope_interleaved = false; /* mlx-lm: traditional off */
    sp_decoder_options opt = {.qkv_bias = c->attention_bias,
                              .o_bias = c->attention_bias};
    return sp_bind_decoder_layers(m, &opt, err);
}

static void granite_layer(sp_forward *f, int l) {
    sp_decoder_layer(f, l, &((const granite *)f->m->family)->scales);
}

static void granite_embed_rows(const spindle_model *m, float *x, int n_rows) {
    float s = ((const granite *)m->family)->embed_scale;
    size_t n = (size_t)n_rows * m->cfg.hidden_size;
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void granite_logits(const spindle_model *m, float *logits, size_t n) {
    float s = ((const granite *)m->family)->logits_scale;
    for (size_t i = 0; i < n; i++) logits[i] /= s;
}

static const sp_gguf_key_map granite_gguf_keys[] = {
    {"embedding_scale", "embedding_multiplier", SP_GGUF_KEY_REAL},
    {"attention.scale", "attention_multiplier", SP_GGUF_KEY_REAL},
    {"residual_scale", "residual_multiplier", SP_GGUF_KEY_REAL},
    {"logit_scale", "logits_scaling", SP_GGUF_KEY_REAL},
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

static const sp_gguf_family granite_gguf = {
    .arch = "granite",
    .model_type = "granite",
    .hf_class = "GraniteForCausalLM",
    .keys = granite_gguf_keys,
    .rope_interleaved = true,
};

const sp_arch sp_arch_granite = {.model_type = "granite",
                                 .gguf = &granite_gguf,
                                 .load = granite_load,
                                 .layer = granite_layer,
                                 .embed_rows = granite_embed_rows,
                                 .logits = granite_logits,
                                 .free_family = granite_free};
