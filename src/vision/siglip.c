/* The SigLIP vision tower (siglip.h). Every product is one GEMM over all
 * patches (sp_matmul over the pool): the patch convolution as patch rows
 * times the kernel matrix, then per layer
 *   x += o(attention(q(LN1 x), k(LN1 x), v(LN1 x)))   all patches see all
 *   x += fc2(gelu_tanh(fc1(LN2 x)))
 * and LayerNorm, GELU and the attention's head layout run over the pool in
 * row ranges. */
#include "vision/siglip.h"
#include "base/error.h"
#include "compute/matmul/matmul.h"
#include "compute/ops.h"
#include "models/blocks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOWER "vision_tower.vision_model."

static int config_int(const cJSON *c, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsNumber(v) ? v->valueint : def;
}

static spindle_status read_config(sp_siglip *s, const cJSON *c,
                                  spindle_error *err) {
    s->hidden = config_int(c, "hidden_size", 1152);
    s->intermediate = config_int(c, "intermediate_size", 4304);
    s->n_heads = config_int(c, "num_attention_heads", 16);
    s->n_layers = config_int(c, "num_hidden_layers", 27);
    s->patch = config_int(c, "patch_size", 14);
    s->image_size = config_int(c, "image_size", 896);
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(c, "layer_norm_eps");
    s->eps = cJSON_IsNumber(eps) ? (float)eps->valuedouble : 1e-6f;
    if (s->hidden < 1 || s->intermediate < 1 || s->n_heads < 1 ||
        s->hidden % s->n_heads || s->n_layers < 1 || s->n_layers > 1000 ||
        s->patch < 1 || s->image_size < s->patch ||
        s->image_size % s->patch || s->image_size > 8192)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "config.json: vision_config's sizes are inconsistent "
                       "(hidden_size, num_attention_heads, patch_size, "
                       "image_size)");
    s->side = s->image_size / s->patch;
    return SPINDLE_OK;
}

static spindle_status bind_patch_embed(sp_siglip *s, sp_vision_weights *vw,
                                       spindle_error *err) {
    const int64_t p = s->patch, d = s->hidden;
    const int64_t last[4] = {d, p, p, 3}, first[4] = {d, 3, p, p};
    const char *name = TOWER "embeddings.patch_embedding.weight";
    const sp_tensor_info *t = NULL;
    spindle_error ignored;
    s->channels_last = !sp_vision_tensor(vw, name, 4, last, &t, &ignored);
    spindle_status st = s->channels_last
                            ? SPINDLE_OK
                            : sp_vision_tensor(vw, name, 4, first, &t, err);
    if (st) return st;
    s->patch_embed.w = sp_vision_view(t, d, p * p * 3);
    return sp_vision_floats(vw, TOWER "embeddings.patch_embedding.bias", d,
                            &s->patch_embed.bias, err);
}

static spindle_status bind_layer(sp_siglip *s, sp_vision_weights *vw, int l,
                                 spindle_error *err) {
    sp_siglip_layer *L = &s->layers[l];
    const int64_t d = s->hidden, ff = s->intermediate;
    char p[200];
    const struct {
        const char *name;
        int64_t rows, cols;
        sp_linear *out;
    } lin[] = {{"self_attn.q_proj", d, d, &L->q}, {"self_attn.k_proj", d, d, &L->k},
               {"self_attn.v_proj", d, d, &L->v}, {"self_attn.out_proj", d, d, &L->o},
               {"mlp.fc1", ff, d, &L->fc1},       {"mlp.fc2", d, ff, &L->fc2}};
    spindle_status st = SPINDLE_OK;
    for (size_t i = 0; i < sizeof lin / sizeof *lin && !st; i++) {
        snprintf(p, sizeof p, TOWER "encoder.layers.%d.%s", l, lin[i].name);
        st = sp_vision_linear(vw, p, lin[i].rows, lin[i].cols, true, lin[i].out,
                              err);
    }
    const struct {
        const char *name;
        const float **out;
    } vec[] = {{"layer_norm1.weight", &L->ln1_w}, {"layer_norm1.bias", &L->ln1_b},
               {"layer_norm2.weight", &L->ln2_w}, {"layer_norm2.bias", &L->ln2_b}};
    for (size_t i = 0; i < sizeof vec / sizeof *vec && !st; i++) {
        snprintf(p, sizeof p, TOWER "encoder.layers.%d.%s", l, vec[i].name);
        st = sp_vision_floats(vw, p, d, vec[i].out, err);
    }
    return st;
}

spindle_status sp_siglip_load(sp_siglip *s, sp_vision_weights *vw,
                              const cJSON *vision_config, spindle_error *err) {
    memset(s, 0, sizeof *s);
    spindle_status st = read_config(s, vision_config, err);
    if (!st) st = bind_patch_embed(s, vw, err);
    if (!st)
        st = sp_vision_floats(vw, TOWER "embeddings.position_embedding.weight",
                              (int64_t)s->side * s->side * s->hidden,
                              &s->position, err);
    if (!st) {
        s->layers = calloc((size_t)s->n_layers, sizeof *s->layers);
        if (!s->layers) st = sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    for (int l = 0; l < s->n_layers && !st; l++) st = bind_layer(s, vw, l, err);
    if (!st) st = sp_vision_floats(vw, TOWER "post_layernorm.weight", s->hidden,
                                   &s->post_w, err);
    if (!st) st = sp_vision_floats(vw, TOWER "post_layernorm.bias", s->hidden,
                                   &s->post_b, err);
    return st;
}

void sp_siglip_free(sp_siglip *s) {
    free(s->layers);
    s->layers = NULL;
}

/* ------------------------------------------------------------ row passes */

typedef enum rows_op { OP_PATCHES, OP_NORM, OP_GELU, OP_HEADS } rows_op;

typedef struct rows_pass {
    const sp_siglip *s;
    rows_op op;
    const float *in;        /* OP_NORM: x; OP_PATCHES: pixels; OP_HEADS: k, v */
    const float *in2;
    float *out, *out2;
    const float *w, *b;     /* OP_NORM */
    const float *ones;      /* OP_GELU: the gate's partner */
    int n;                  /* rows in the pass */
} rows_pass;

/* Patch r's pixels in the kernel matrix's column order. */
static void patch_row(const sp_siglip *s, const float *px, int r, float *row) {
    const int p = s->patch, S = s->image_size;
    const int y0 = (r / s->side) * p, x0 = (r % s->side) * p;
    const size_t plane = (size_t)S * S;
    for (int ky = 0; ky < p; ky++)
        for (int kx = 0; kx < p; kx++)
            for (int c = 0; c < 3; c++) {
                const float v = px[c * plane + (size_t)(y0 + ky) * S + x0 + kx];
                if (s->channels_last)
                    row[(ky * p + kx) * 3 + c] = v;
                else
                    row[(c * p + ky) * p + kx] = v;
            }
}

static void rows_range(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const rows_pass *r = ctx;
    const sp_siglip *s = r->s;
    const int d = s->hidden, hd = d / s->n_heads, k = s->patch * s->patch * 3;
    for (int64_t t = begin; t < end; t++) {
        switch (r->op) {
        case OP_PATCHES:
            patch_row(s, r->in, (int)t, r->out + (size_t)t * k);
            break;
        case OP_NORM:
            sp_layernorm(r->out + (size_t)t * d, r->in + (size_t)t * d, r->w,
                         r->b, d, s->eps);
            break;
        case OP_GELU:
            sp_gelu_tanh_mul(r->out + (size_t)t * s->intermediate, r->ones,
                             s->intermediate);
            break;
        case OP_HEADS:   /* token-major k, v -> head-major, what sp_kv_view reads */
            for (int h = 0; h < s->n_heads; h++) {
                const size_t src = (size_t)t * d + (size_t)h * hd;
                const size_t dst = ((size_t)h * r->n + t) * hd;
                memcpy(r->out + dst, r->in + src, (size_t)hd * sizeof(float));
                memcpy(r->out2 + dst, r->in2 + src, (size_t)hd * sizeof(float));
            }
            break;
        }
    }
}

static void run_rows(sp_pool *pool, rows_pass r) {
    sp_pool_for(pool, r.n, 0, rows_range, &r);
}

/* The encoder's scratch: x and five more rows of the widest width. */
typedef struct tower_scratch {
    float *h, *q, *k, *v, *big, *ones;
} tower_scratch;

static spindle_status layer_forward(const sp_siglip *s, const sp_siglip_layer *L,
                                    sp_pool *pool, float *x,
                                    const tower_scratch *w, spindle_error *err) {
    const int n = s->side * s->side, d = s->hidden, hd = d / s->n_heads;
    run_rows(pool, (rows_pass){.s = s, .op = OP_NORM, .in = x, .out = w->h,
                               .w = L->ln1_w, .b = L->ln1_b, .n = n});
    sp_linear_rows(pool, &L->q, w->h, n, w->q);
    sp_linear_rows(pool, &L->k, w->h, n, w->k);
    sp_linear_rows(pool, &L->v, w->h, n, w->v);
    float *kh = w->big, *vh = w->big + (size_t)n * d;
    run_rows(pool, (rows_pass){.s = s, .op = OP_HEADS, .in = w->k, .in2 = w->v,
                               .out = kh, .out2 = vh, .n = n});
    sp_attention_args a = {
        .q = w->q, .out = w->h, .n_q = n, .n_heads = s->n_heads,
        .n_kv_heads = s->n_heads, .head_dim = hd,
        .kv = {.k = kh, .v = vh, .head_stride = (int64_t)n * hd, .type = SP_KV_F32},
        .scale = 1.0f / sqrtf((float)hd), .bidirectional = true};
    spindle_status st = sp_attention(pool, &a, err);
    if (st) return st;
    sp_linear_rows(pool, &L->o, w->h, n, w->q);
    for (size_t i = 0; i < (size_t)n * d; i++) x[i] += w->q[i];
    run_rows(pool, (rows_pass){.s = s, .op = OP_NORM, .in = x, .out = w->h,
                               .w = L->ln2_w, .b = L->ln2_b, .n = n});
    sp_linear_rows(pool, &L->fc1, w->h, n, w->big);
    run_rows(pool, (rows_pass){.s = s, .op = OP_GELU, .out = w->big,
                               .ones = w->ones, .n = n});
    sp_linear_rows(pool, &L->fc2, w->big, n, w->q);
    for (size_t i = 0; i < (size_t)n * d; i++) x[i] += w->q[i];
    return SPINDLE_OK;
}

spindle_status sp_siglip_forward(const sp_siglip *s, sp_pool *pool,
                                 const float *pixels, float *out,
                                 spindle_error *err) {
    const int n = s->side * s->side, d = s->hidden;
    const int k = s->patch * s->patch * 3;
    size_t wide = (size_t)s->intermediate;
    if (wide < 2 * (size_t)d) wide = 2 * (size_t)d;
    if (wide < (size_t)k) wide = (size_t)k;
    tower_scratch w = {0};
    float *block = malloc(((size_t)n * (4 * d + wide) + s->intermediate) *
                          sizeof(float));
    if (!block) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    w.h = block;
    w.q = w.h + (size_t)n * d;
    w.k = w.q + (size_t)n * d;
    w.v = w.k + (size_t)n * d;
    w.big = w.v + (size_t)n * d;
    w.ones = w.big + (size_t)n * wide;
    for (int i = 0; i < s->intermediate; i++) w.ones[i] = 1.0f;
    /* The convolution: patch rows through the kernel matrix, one GEMM. */
    run_rows(pool, (rows_pass){.s = s, .op = OP_PATCHES, .in = pixels,
                               .out = w.big, .n = n});
    sp_linear_rows(pool, &s->patch_embed, w.big, n, out);
    for (size_t i = 0; i < (size_t)n * d; i++) out[i] += s->position[i];
    spindle_status st = SPINDLE_OK;
    for (int l = 0; l < s->n_layers && !st; l++)
        st = layer_forward(s, &s->layers[l], pool, out, &w, err);
    if (!st)
        run_rows(pool, (rows_pass){.s = s, .op = OP_NORM, .in = out, .out = out,
                                   .w = s->post_w, .b = s->post_b, .n = n});
    free(block);
    return st;
}
