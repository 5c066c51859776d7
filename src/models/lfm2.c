/* LFM2 (model_type "lfm2"), as mlx-lm's lfm2.py computes it: most layers
 * mix tokens with a gated short convolution, the others (full_attn_idxs,
 * or those layer_types names "full_attention") with attention.
 *
 *   x += mixer(operator_norm(x)); x += w2(silu(w1(y)) * w3(y)), y = ffn_norm(x)
 *   short convolution: B | C | x = in_proj(h); y = C * conv(B * x); out_proj(y)
 *     conv: depthwise, kernel conv_L_cache, optional bias, no activation,
 *     over the last conv_L_cache - 1 inputs B * x and the new ones
 *   attention: q/k RMSNorms per head (q_layernorm, k_layernorm), RoPE over
 *     the whole head (rope_theta, default 1e6), out_proj
 *
 * The convolution's rolling inputs are the layer's sequence state: a
 * recurrent state of a conv window only (SP_STATE_RECURRENT with no
 * recurrent floats), so prefix reuse, snapshots, rollback within
 * max_rollback and checkpoints treat it as they treat the DeltaNet's.
 *
 * Norms use norm_eps; the final norm is model.embedding_norm and the head
 * is always the embeddings. The MLP's width is block_ff_dim (else
 * intermediate_size), adjusted as mlx-lm's MLP does when
 * block_auto_adjust_ff_dim. Hugging Face checkpoints store the conv weight
 * [C, 1, K], MLX ones [C, K, 1]: the same floats.
 *
 * GGUF (llama.cpp's "lfm2"): shortconv.{conv,in_proj,out_proj}, the final
 * norm token_embd_norm, the conv layers those whose entry of the per-layer
 * attention.head_count_kv is 0, the MLP width already adjusted. */
#include "models/blocks.h"
#include "artifacts/gguf_model.h"
#include "base/error.h"
#include "compute/linear_attention/linear_attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One short-convolution layer's weights. */
typedef struct lfm2_conv {
    sp_linear in, out;       /* in_proj [3 hidden][hidden], out_proj */
    float *w_t;              /* [kernel][hidden], transposed at load (owned) */
    const float *bias;       /* [hidden] or NULL */
} lfm2_conv;

/* spindle_model.family. Read-only after loading; the pass's rows live in
 * sp_forward.family_scratch. */
typedef struct lfm2 {
    bool *conv_layer;        /* [n_layers] */
    lfm2_conv *conv;         /* [n_layers], bound where conv_layer */
    int n_layers, kernel;
    bool bias;
} lfm2;

static void lfm2_free(void *family) {
    lfm2 *z = family;
    if (!z) return;
    for (int l = 0; l < z->n_layers && z->conv; l++) free(z->conv[l].w_t);
    free(z->conv);
    free(z->conv_layer);
    free(z);
}

/* ------------------------------------------------------------------ config */

/* rope_parameters' rope_theta over the top-level key (mlx-lm's order). */
static spindle_status lfm2_rope(spindle_model *m, spindle_error *err) {
    const cJSON *rp =
        cJSON_GetObjectItemCaseSensitive(m->cfg.json, "rope_parameters");
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    if (!cJSON_IsNumber(theta))
        theta = cJSON_GetObjectItemCaseSensitive(m->cfg.json, "rope_theta");
    const double th = cJSON_IsNumber(theta) ? theta->valuedouble : 1e6;
    if (!(th > 0) || !isfinite(th))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: 'rope_theta' must be positive", m->dir);
    m->cfg.rope = (sp_rope_config){.type = SP_ROPE_DEFAULT,
                                   .rotary_dim = m->cfg.head_dim,
                                   .theta = th, .factor = 1.0};
    sp_rope_free(&m->rope);
    if (sp_rope_init(&m->rope, &m->cfg.rope))
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

/* Which layers convolve: full_attn_idxs when given (mlx-lm reads it
 * first), else layer_types ("conv" / "full_attention"); a config giving
 * both must agree. */
static spindle_status read_pattern(spindle_model *m, lfm2 *z,
                                   spindle_error *err) {
    const int n = m->cfg.n_layers;
    const cJSON *idx =
        cJSON_GetObjectItemCaseSensitive(m->cfg.json, "full_attn_idxs");
    const cJSON *types =
        cJSON_GetObjectItemCaseSensitive(m->cfg.json, "layer_types");
    const bool has_idx = idx && !cJSON_IsNull(idx);
    const bool has_types = types && !cJSON_IsNull(types);
    if (!has_idx && !has_types)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: neither 'layer_types' nor "
                       "'full_attn_idxs' says which layers are attention",
                       m->dir);
    spindle_status st = SPINDLE_OK;
    if (has_types &&
        (st = sp_model_layer_kinds(m, "conv", 0, z->conv_layer, err)))
        return st;
    if (!has_idx) return SPINDLE_OK;
    if (!cJSON_IsArray(idx))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: 'full_attn_idxs' must be a list of "
                       "layer indices", m->dir);
    bool *attn = calloc((size_t)n, sizeof *attn);
    if (!attn) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, idx) {
        const double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (v != floor(v) || v < 0 || v >= n) {
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s/config.json: full_attn_idxs holds %s, not a "
                         "layer index below %d", m->dir,
                         cJSON_IsNumber(e) ? "a number" : "a non-number", n);
            break;
        }
        attn[(int)v] = true;
    }
    for (int l = 0; l < n && !st; l++) {
        if (has_types && z->conv_layer[l] == attn[l])
            st = sp_fail(err, SPINDLE_ERR_FORMAT,
                         "%s/config.json: layer_types[%d] disagrees with "
                         "full_attn_idxs", m->dir, l);
        z->conv_layer[l] = !attn[l];
    }
    free(attn);
    return st;
}

/* mlx-lm's MLP width: block_ff_dim (else intermediate_size), when
 * block_auto_adjust_ff_dim taken to 2/3, times block_ffn_dim_multiplier,
 * rounded up to block_multiple_of. */
static spindle_status ff_dim(spindle_model *m, spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(c->json, "block_ff_dim");
    int ff = c->intermediate_size;
    spindle_status st;
    if (b && !cJSON_IsNull(b) &&
        (st = sp_model_int(m, "block_ff_dim", true, 0, 1, 1 << 22, &ff, err)))
        return st;
    /* transformers' defaults where mlx-lm requires the keys. */
    if (!sp_config_bool(c, "block_auto_adjust_ff_dim", true)) {
        m->cfg.intermediate_size = ff;
        return SPINDLE_OK;
    }
    int multiple = 0;
    if ((st = sp_model_int(m, "block_multiple_of", false, 256, 1, 1 << 20,
                           &multiple, err)))
        return st;
    double v = (double)(int)(2.0 * ff / 3.0);
    const cJSON *mul =
        cJSON_GetObjectItemCaseSensitive(c->json, "block_ffn_dim_multiplier");
    if (mul && !cJSON_IsNull(mul)) {
        if (!cJSON_IsNumber(mul) || !(mul->valuedouble > 0) ||
            mul->valuedouble > 64)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: 'block_ffn_dim_multiplier' must "
                           "be a positive number", m->dir);
        v = (double)(int64_t)(mul->valuedouble * v);
    }
    v = multiple * ceil(v / multiple);
    if (v < 1 || v > (double)(1 << 22))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: the adjusted MLP width %.0f is out of "
                       "range", m->dir, v);
    m->cfg.intermediate_size = (int)v;
    return SPINDLE_OK;
}

static spindle_status read_config(spindle_model *m, lfm2 *z,
                                  spindle_error *err) {
    double eps = 0;
    spindle_status st;
    if ((st = sp_model_int(m, "conv_L_cache", true, 0, 1, 64, &z->kernel,
                           err)) ||
        (st = sp_model_positive(m, "norm_eps", 1e-5, &eps, err)) ||
        (st = ff_dim(m, err)) || (st = lfm2_rope(m, err)))
        return st;
    m->cfg.rms_norm_eps = (float)eps;
    z->bias = sp_config_bool(&m->cfg, "conv_bias", false);
    return read_pattern(m, z, err);
}

/* ---------------------------------------------------------------- binding */

#define NAME(fmt) (snprintf(name, sizeof name, "model.layers.%d." fmt, l), name)

static spindle_status bind_conv(spindle_model *m, lfm2 *z, int l,
                                spindle_error *err) {
    lfm2_conv *C = &z->conv[l];
    const int64_t d = m->cfg.hidden_size, K = z->kernel;
    char name[128];
    const float *w;
    spindle_status st;
    if ((st = sp_bind_linear(m, NAME("conv.in_proj"), 3 * d, d, z->bias,
                             &C->in, err)) ||
        (st = sp_bind_linear(m, NAME("conv.out_proj"), d, d, z->bias,
                             &C->out, err)) ||
        (st = sp_bind_float_matrix(m, NAME("conv.conv.weight"), d, K, &w,
                                   err)))
        return st;
    /* Biases the files hold are used as the projections' are, conv_bias
     * or not; conv_bias makes them required. */
    if ((st = z->bias ? sp_bind_vector(m, NAME("conv.conv.bias"), d,
                                       &C->bias, err)
                      : sp_bind_vector_opt(m, NAME("conv.conv.bias"), d,
                                           &C->bias, err)))
        return st;
    C->w_t = malloc(sizeof(float) * (size_t)(d * K));
    if (!C->w_t) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int64_t c = 0; c < d; c++)
        for (int64_t j = 0; j < K; j++) C->w_t[j * d + c] = w[c * K + j];
    return SPINDLE_OK;
}

static spindle_status bind_attention(spindle_model *m, int l,
                                     spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    sp_layer *L = &m->layers[l];
    const int64_t d = c->hidden_size, hd = c->head_dim;
    const int64_t qw = (int64_t)c->n_heads * hd, kw = (int64_t)c->n_kv_heads * hd;
    char name[128];
    spindle_status st;
    L->rope = &m->rope;
    if ((st = sp_bind_linear(m, NAME("self_attn.q_proj"), qw, d, false, &L->q, err)) ||
        (st = sp_bind_linear(m, NAME("self_attn.k_proj"), kw, d, false, &L->k, err)) ||
        (st = sp_bind_linear(m, NAME("self_attn.v_proj"), kw, d, false, &L->v, err)) ||
        (st = sp_bind_linear(m, NAME("self_attn.out_proj"), d, qw, false, &L->o, err)) ||
        (st = sp_bind_vector(m, NAME("self_attn.q_layernorm.weight"), hd,
                             &L->q_norm, err)))
        return st;
    return sp_bind_vector(m, NAME("self_attn.k_layernorm.weight"), hd,
                          &L->k_norm, err);
}

static spindle_status bind_layer(spindle_model *m, lfm2 *z, int l,
                                 spindle_error *err) {
    sp_layer *L = &m->layers[l];
    const int64_t d = m->cfg.hidden_size, ff = m->cfg.intermediate_size;
    char name[128];
    spindle_status st;
    if ((st = sp_bind_vector(m, NAME("operator_norm.weight"), d, &L->attn_norm, err)) ||
        (st = sp_bind_vector(m, NAME("ffn_norm.weight"), d, &L->mlp_norm, err)) ||
        (st = sp_bind_linear(m, NAME("feed_forward.w1"), ff, d, false, &L->gate, err)) ||
        (st = sp_bind_linear(m, NAME("feed_forward.w3"), ff, d, false, &L->up, err)) ||
        (st = sp_bind_linear(m, NAME("feed_forward.w2"), d, ff, false, &L->down, err)))
        return st;
    return z->conv_layer[l] ? bind_conv(m, z, l, err)
                            : bind_attention(m, l, err);
}

#undef NAME

static spindle_status lfm2_load(spindle_model *m, spindle_error *err) {
    const int n = m->cfg.n_layers;
    lfm2 *z = calloc(1, sizeof *z);
    if (!z) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    m->family = z;
    z->conv_layer = calloc((size_t)n, sizeof *z->conv_layer);
    z->conv = calloc((size_t)n, sizeof *z->conv);
    if (!z->conv_layer || !z->conv)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    z->n_layers = n;
    spindle_status st = read_config(m, z, err);
    for (int l = 0; l < n && !st; l++) st = bind_layer(m, z, l, err);
    return st;
}

/* ----------------------------------------------------------------- forward */

/* The pass's rows (sp_forward.family_scratch): in_proj's B | C | x, the
 * convolution's inputs B * x and its outputs. */
typedef struct conv_rows {
    int cap_rows;
    float *bcx, *bx, *y;
} conv_rows;

static void conv_rows_free(void *p) {
    conv_rows *r = p;
    free(r->bcx);
    free(r->bx);
    free(r->y);
    free(r);
}

static conv_rows *reserve(sp_forward *f) {
    if (!f->family_scratch) {
        f->family_scratch = calloc(1, sizeof(conv_rows));
        f->family_scratch_free = conv_rows_free;
    }
    conv_rows *r = f->family_scratch;
    const size_t t = (size_t)f->n_rows, d = (size_t)f->m->cfg.hidden_size;
    if (r && t > (size_t)r->cap_rows) {
        float *a = realloc(r->bcx, sizeof(float) * 3 * t * d);
        if (a) r->bcx = a;
        float *b = realloc(r->bx, sizeof(float) * t * d);
        if (b) r->bx = b;
        float *c = realloc(r->y, sizeof(float) * t * d);
        if (c) r->y = c;
        if (a && b && c) r->cap_rows = f->n_rows;
    }
    if (r && r->cap_rows >= f->n_rows) return r;
    if (!f->status)
        f->status = sp_fail(f->err, SPINDLE_ERR_MEMORY,
                            "out of memory for a forward pass of %d tokens",
                            f->n_rows);
    return NULL;
}

typedef struct conv_ctx {
    const lfm2 *z;
    const lfm2_conv *C;
    conv_rows *r;
} conv_ctx;

/* Rows r0 .. r0 + n - 1 of one sequence through the convolution,
 * continuing its window (sp_recurrent_run_fn). */
static spindle_status conv_run(sp_forward *f, void *ctx,
                               const sp_recurrent_state *rs, int r0, int n) {
    const conv_ctx *c = ctx;
    const int64_t d = f->m->cfg.hidden_size;
    const sp_conv1d_args a = {
        .n_tokens = n, .channels = (int)d, .kernel = c->z->kernel,
        .x = c->r->bx + r0 * d, .x_stride = d, .w_t = c->C->w_t,
        .window = rs->conv, .out = c->r->y + r0 * d, .out_stride = d,
        .bias = c->C->bias};
    return sp_conv1d(f->pool, &a, f->err);
}

static void short_conv(sp_forward *f, int l) {
    const lfm2 *z = f->m->family;
    conv_rows *r = f->status ? NULL : reserve(f);
    if (!r) return;
    const lfm2_conv *C = &z->conv[l];
    const size_t d = (size_t)f->m->cfg.hidden_size;
    sp_linear_forward(f, &C->in, f->xn, r->bcx);
    for (size_t t = 0; t < (size_t)f->n_rows; t++) {
        const float *B = r->bcx + t * 3 * d, *x = B + 2 * d;
        for (size_t i = 0; i < d; i++) r->bx[t * d + i] = B[i] * x[i];
    }
    conv_ctx ctx = {.z = z, .C = C, .r = r};
    sp_recurrent_runs(f, l, conv_run, &ctx);
    if (f->status) return;
    for (size_t t = 0; t < (size_t)f->n_rows; t++) {
        const float *gate = r->bcx + t * 3 * d + d;
        for (size_t i = 0; i < d; i++) r->y[t * d + i] *= gate[i];
    }
    sp_linear_forward(f, &C->out, r->y, f->out);
}

static void lfm2_layer(sp_forward *f, int l) {
    const lfm2 *z = f->m->family;
    const sp_layer *L = &f->m->layers[l];
    sp_norm_rows(f, f->x, L->attn_norm, f->xn);
    if (z->conv_layer[l])
        short_conv(f, l);
    else
        sp_attention_block(f, l, 1.0f / sqrtf((float)f->m->cfg.head_dim),
                           0.0f);
    sp_add_rows(f, f->x, f->out);
    sp_norm_rows(f, f->x, L->mlp_norm, f->xn);
    sp_mlp_swiglu(f, l);
    sp_add_rows(f, f->x, f->out);
}

/* ------------------------------------------------------------------- hooks */

/* A conv layer's state: its window of the last kernel - 1 inputs, no
 * recurrent floats beside it. */
static void lfm2_layer_state(const spindle_model *m, int l,
                             sp_layer_state_desc *out) {
    const lfm2 *z = m->family;
    if (z->conv_layer[l])
        *out = (sp_layer_state_desc){.kind = SP_STATE_RECURRENT,
                                     .conv_kernel = z->kernel,
                                     .conv_channels = m->cfg.hidden_size};
    else
        *out = (sp_layer_state_desc){.kind = SP_STATE_FULL_KV,
                                     .n_kv_heads = m->cfg.n_kv_heads,
                                     .head_dim = m->cfg.head_dim};
}

static int lfm2_layer_extra(const spindle_model *m, int l,
                            const sp_linear **out, int max,
                            int64_t *vector_floats) {
    const lfm2 *z = m->family;
    if (!z->conv_layer[l] || max < 2) return 0;
    out[0] = &z->conv[l].in;
    out[1] = &z->conv[l].out;
    *vector_floats += (int64_t)m->cfg.hidden_size *
                      (z->kernel + (z->conv[l].bias != NULL));
    return 2;
}

/* ---------------------------------------------------------------- GGUF */

static spindle_status set_json(cJSON *json, const char *key, cJSON *item,
                               spindle_error *err) {
    if (!item) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(json, key);
    if (!cJSON_AddItemToObject(json, key, item)) {
        cJSON_Delete(item);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    return SPINDLE_OK;
}

/* LFM2Model.set_gguf_parameters' spelling back into config.json keys:
 * layer_types and num_key_value_heads from the per-layer KV head counts,
 * norm_eps from the RMS epsilon, the width as it stands. */
static spindle_status lfm2_gguf_config(const sp_gguf_weights *w, cJSON *json,
                                       spindle_error *err) {
    const sp_gguf *g = sp_gguf_weights_file(w);
    const int n = (int)cJSON_GetNumberValue(
        cJSON_GetObjectItemCaseSensitive(json, "num_hidden_layers"));
    const sp_gguf_value *v =
        sp_gguf_arch_value(g, "lfm2", "attention.head_count_kv");
    if (!v || v->type != SP_GGUF_ARRAY || sp_gguf_array_count(v) != (uint64_t)n)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: 'lfm2.attention.head_count_kv' must give each of "
                       "the %d layers' KV heads (0: a conv layer)",
                       sp_gguf_path(g), n);
    cJSON *types = cJSON_CreateArray();
    double kv = 0;
    for (int l = 0; l < n && types; l++) {
        sp_gguf_value e;
        double d = -1;
        if (!sp_gguf_array_at(v, (uint64_t)l, &e) ||
            !sp_gguf_value_number(&e, &d) || d != floor(d) || d < 0 ||
            d > 4096 || (d > 0 && kv > 0 && d != kv)) {
            cJSON_Delete(types);
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s: 'lfm2.attention.head_count_kv'[%d] is not "
                           "0 or the attention layers' KV head count",
                           sp_gguf_path(g), l);
        }
        if (d > 0) kv = d;
        if (!cJSON_AddItemToArray(types, cJSON_CreateString(
                                             d > 0 ? "full_attention" : "conv")))
            break;
    }
    spindle_status st = set_json(json, "layer_types", types, err);
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(json, "rms_norm_eps");
    if (!st && cJSON_IsNumber(eps))
        st = set_json(json, "norm_eps", cJSON_CreateNumber(eps->valuedouble),
                      err);
    if (!st && kv > 0)
        st = set_json(json, "num_key_value_heads", cJSON_CreateNumber(kv), err);
    if (!st)
        st = set_json(json, "block_auto_adjust_ff_dim", cJSON_CreateFalse(),
                      err);
    return st;
}

static const sp_gguf_name_map lfm2_gguf_layers[] = {
    {"shortconv.conv", "conv.conv"},
    {"shortconv.in_proj", "conv.in_proj"},
    {"shortconv.out_proj", "conv.out_proj"},
    {"attn_norm", "operator_norm"},
    {"ffn_norm", "ffn_norm"},
    {"attn_output", "self_attn.out_proj"},
    {"attn_q_norm", "self_attn.q_layernorm"},
    {"attn_k_norm", "self_attn.k_layernorm"},
    {"ffn_gate", "feed_forward.w1"},
    {"ffn_up", "feed_forward.w3"},
    {"ffn_down", "feed_forward.w2"},
    {NULL, NULL},
};

static const sp_gguf_name_map lfm2_gguf_globals[] = {
    {"token_embd_norm", "model.embedding_norm"},
    {NULL, NULL},
};

static const sp_gguf_key_map lfm2_gguf_keys[] = {
    {"shortconv.l_cache", "conv_L_cache", SP_GGUF_KEY_COUNT},
    {NULL, NULL, SP_GGUF_KEY_COUNT},
};

static const sp_gguf_family lfm2_gguf = {
    .arch = "lfm2",
    .model_type = "lfm2",
    .hf_class = "Lfm2ForCausalLM",
    .layer_names = lfm2_gguf_layers,
    .global_names = lfm2_gguf_globals,
    .keys = lfm2_gguf_keys,
    .config = lfm2_gguf_config,
};

const sp_arch sp_arch_lfm2 = {.model_type = "lfm2",
                              .gguf = &lfm2_gguf,
                              .load = lfm2_load,
                              .layer = lfm2_layer,
                              .final_norm = "model.embedding_norm.weight",
                              .free_family = lfm2_free,
                              .layer_state = lfm2_layer_state,
                              .layer_extra = lfm2_layer_extra};
