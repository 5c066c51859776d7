/* Multi-head latent attention (mla.h): config, weights, the absorbed
 * attention over the latent cache. */
#include "models/mla.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- config */

/* A positive integer dimension `key` (required, or dflt when absent). */
static spindle_status dim(spindle_model *m, const char *key, bool required,
                          int dflt, int *out, spindle_error *err) {
    return sp_model_int(m, key, required, dflt, 1, 1 << 16, out, err);
}

spindle_status sp_mla_config_read(spindle_model *m, sp_mla_config *c,
                                  spindle_error *err) {
    memset(c, 0, sizeof *c);
    c->n_heads = m->cfg.n_heads;
    spindle_status st;
    if ((st = dim(m, "kv_lora_rank", true, 0, &c->kv_lora_rank, err)) ||
        (st = dim(m, "qk_nope_head_dim", true, 0, &c->qk_nope, err)) ||
        (st = dim(m, "qk_rope_head_dim", true, 0, &c->qk_rope, err)) ||
        (st = dim(m, "v_head_dim", true, 0, &c->v_head_dim, err)) ||
        (st = dim(m, "q_lora_rank", false, 0, &c->q_lora_rank, err)))
        return st;
    if (c->qk_rope % 2)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: qk_rope_head_dim %d is odd (RoPE "
                       "rotates pairs)", m->dir, c->qk_rope);
    c->bias = m->cfg.attention_bias;
    c->latent_eps = 1e-6f;
    double scale = 1.0 / sqrt((double)(c->qk_nope + c->qk_rope));
    sp_rope_config rc = m->cfg.rope;
    rc.rotary_dim = c->qk_rope;
    if (rc.type == SP_ROPE_YARN && rc.mscale_all_dim != 0.0 &&
        rc.factor > 1.0) {
        const double s = 0.1 * rc.mscale_all_dim * log(rc.factor) + 1.0;
        scale *= s * s;
    }
    c->scale = (float)scale;
    if (sp_rope_init(&c->rope, &rc) != 0)
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    return SPINDLE_OK;
}

void sp_mla_config_free(sp_mla_config *c) { sp_rope_free(&c->rope); }

void sp_mla_state(const sp_mla_config *c, sp_layer_state_desc *out) {
    *out = (sp_layer_state_desc){.kind = SP_STATE_LATENT_KV,
                                 .n_kv_heads = 1,
                                 .head_dim = c->kv_lora_rank + c->qk_rope};
}

/* ------------------------------------------------------------ weights */

#define NAME(fmt) (snprintf(p, sizeof p, "model.layers.%d.self_attn." fmt, l), p)

/* The Hugging Face kv_b_proj [heads][qk_nope + v][kv_lora_rank]: the key
 * half transposed per head into embed_q's [kv_lora_rank][qk_nope], the
 * value half copied as unembed_out, both f32 views of L->owned. */
static spindle_status bind_kv_b(spindle_model *m, const sp_mla_config *c,
                                const char *name, sp_mla_layer *L,
                                spindle_error *err) {
    const int64_t H = c->n_heads, R = c->kv_lora_rank, dn = c->qk_nope,
                  dv = c->v_head_dim;
    const float *w = NULL;
    spindle_status st = sp_bind_float_matrix(m, name, H * (dn + dv), R, &w,
                                             err);
    if (st) return st;
    L->owned = malloc((size_t)(H * R * (dn + dv)) * sizeof *L->owned);
    if (!L->owned) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    for (int64_t h = 0; h < H; h++) {
        const float *wh = w + h * (dn + dv) * R;
        float *uk = L->owned + h * R * dn;
        float *uv = L->owned + H * R * dn + h * dv * R;
        for (int64_t n = 0; n < dn; n++)
            for (int64_t r = 0; r < R; r++) uk[r * dn + n] = wh[n * R + r];
        memcpy(uv, wh + dn * R, (size_t)(dv * R) * sizeof *uv);
        L->embed_q[h].w = (sp_weight){.type = SP_W_F32, .rows = R,
                                      .cols = dn, .data = uk};
        L->unembed_out[h].w = (sp_weight){.type = SP_W_F32, .rows = dv,
                                          .cols = R, .data = uv};
    }
    return SPINDLE_OK;
}

static spindle_status bind_queries(spindle_model *m, const sp_mla_config *c,
                                   int l, sp_mla_layer *L,
                                   spindle_error *err) {
    const int64_t d = m->cfg.hidden_size,
                  qw = (int64_t)c->n_heads * (c->qk_nope + c->qk_rope);
    char p[128];
    if (!c->q_lora_rank)
        return sp_bind_linear(m, NAME("q_proj"), qw, d, false, &L->q, err);
    spindle_status st;
    if ((st = sp_bind_linear(m, NAME("q_a_proj"), c->q_lora_rank, d, c->bias,
                             &L->q_a, err)) ||
        (st = sp_bind_vector(m, NAME("q_a_layernorm.weight"), c->q_lora_rank,
                             &L->q_a_norm, err)))
        return st;
    return sp_bind_linear(m, NAME("q_b_proj"), qw, c->q_lora_rank, false,
                          &L->q_b, err);
}

spindle_status sp_mla_bind(spindle_model *m, const sp_mla_config *c, int l,
                           sp_mla_layer *out, spindle_error *err) {
    memset(out, 0, sizeof *out);
    const int64_t d = m->cfg.hidden_size, H = c->n_heads,
                  R = c->kv_lora_rank;
    char p[128];
    out->embed_q = calloc(2 * (size_t)H, sizeof *out->embed_q);
    if (!out->embed_q) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    out->unembed_out = out->embed_q + H;
    spindle_status st = bind_queries(m, c, l, out, err);
    if (!st) st = sp_bind_linear(m, NAME("kv_a_proj_with_mqa"), R + c->qk_rope,
                                 d, c->bias, &out->kv_a, err);
    if (!st) st = sp_bind_vector(m, NAME("kv_a_layernorm.weight"), R,
                                 &out->kv_a_norm, err);
    if (!st && sp_model_find_tensor(m, NAME("kv_b_proj.weight")))
        st = bind_kv_b(m, c, NAME("kv_b_proj.weight"), out, err);
    else if (!st) {
        st = sp_bind_stacked_linear(m, NAME("embed_q"), H, R, c->qk_nope,
                                    false, out->embed_q, err);
        if (!st) st = sp_bind_stacked_linear(m, NAME("unembed_out"), H,
                                             c->v_head_dim, R, false,
                                             out->unembed_out, err);
    }
    if (!st) st = sp_bind_linear(m, NAME("o_proj"), d, H * c->v_head_dim,
                                 c->bias, &out->o, err);
    if (st) sp_mla_layer_free(out);
    return st;
}

#undef NAME

void sp_mla_layer_free(sp_mla_layer *L) {
    free(L->embed_q);
    free(L->owned);
    L->embed_q = L->unembed_out = NULL;
    L->owned = NULL;
}

int sp_mla_matrices(const sp_mla_config *c, const sp_mla_layer *L,
                    const sp_linear **out, int max, int64_t *vector_floats) {
    int n = 0;
    const sp_linear *fixed[] = {&L->q, &L->q_a, &L->q_b, &L->kv_a, &L->o};
    for (int i = 0; i < 5; i++)
        if (fixed[i]->w.rows && n < max) out[n++] = fixed[i];
    for (int h = 0; h < 2 * c->n_heads && n < max; h++)
        out[n++] = &L->embed_q[h];   /* unembed_out follows in the array */
    *vector_floats += c->kv_lora_rank + (L->q_a_norm ? c->q_lora_rank : 0);
    return n;
}

/* ------------------------------------------------------------ forward */

/* The pass's rows (sp_forward.family_scratch), cap_rows of each width. */
typedef struct mla_rows {
    int cap_rows;
    float *qa;      /* [T][q_lora_rank] */
    float *q;       /* [T][heads][qk_nope + qk_rope] */
    float *ckv;     /* [T][kv_lora_rank + qk_rope]: the cache rows */
    float *head_in; /* [T][max(qk_nope, kv_lora_rank)]: one head's input */
    float *head_out;/* [T][max(kv_lora_rank, v_head_dim)] */
    float *qfull;   /* [T][heads][kv_lora_rank + qk_rope] absorbed queries */
    float *olat;    /* [T][heads][kv_lora_rank] their latent outputs */
    float *o;       /* [T][heads * v_head_dim] */
    float *partials;/* the attention's per-unit state, cap_partials floats */
    size_t cap_partials;
} mla_rows;

static void rows_free(void *p) {
    mla_rows *r = p;
    free(r->qa); free(r->q); free(r->ckv); free(r->head_in);
    free(r->head_out); free(r->qfull); free(r->olat); free(r->o);
    free(r->partials);
    free(r);
}

static bool grow(float **p, size_t n) {
    float *q = realloc(*p, (n ? n : 1) * sizeof(float));
    if (!q) return false;
    *p = q;
    return true;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static mla_rows *reserve(sp_forward *f, const sp_mla_config *c) {
    if (!f->family_scratch) {
        f->family_scratch = calloc(1, sizeof(mla_rows));
        f->family_scratch_free = rows_free;
    }
    mla_rows *r = f->family_scratch;
    const size_t T = (size_t)f->n_rows, H = (size_t)c->n_heads,
                 R = (size_t)c->kv_lora_rank, kd = R + (size_t)c->qk_rope;
    bool ok = r != NULL;
    if (ok && (int)T > r->cap_rows) {
        ok = grow(&r->qa, T * (size_t)c->q_lora_rank) &&
             grow(&r->q, T * H * (size_t)(c->qk_nope + c->qk_rope)) &&
             grow(&r->ckv, T * kd) &&
             grow(&r->head_in, T * max_sz(R, (size_t)c->qk_nope)) &&
             grow(&r->head_out, T * max_sz(R, (size_t)c->v_head_dim)) &&
             grow(&r->qfull, T * H * kd) && grow(&r->olat, T * H * R) &&
             grow(&r->o, T * H * (size_t)c->v_head_dim);
        if (ok) r->cap_rows = (int)T;
    }
    if (ok) return r;
    if (!f->status)
        f->status = sp_fail(f->err, SPINDLE_ERR_MEMORY,
                            "out of memory for a forward pass of %d tokens",
                            f->n_rows);
    return NULL;
}

/* Queries [T][heads][qk_nope + qk_rope], their rotary part rotated. */
static void project_queries(sp_forward *f, const sp_mla_config *c,
                            const sp_mla_layer *L, mla_rows *r) {
    const int qhd = c->qk_nope + c->qk_rope;
    if (c->q_lora_rank) {
        sp_linear_forward(f, &L->q_a, f->xn, r->qa);
        for (int t = 0; t < f->n_rows; t++) {
            float *row = r->qa + (size_t)t * c->q_lora_rank;
            sp_rmsnorm(row, row, L->q_a_norm, c->q_lora_rank,
                       c->latent_eps, 0.0f);
        }
        sp_linear_rows(f->pool, &L->q_b, r->qa, f->n_rows, r->q);
    } else {
        sp_linear_forward(f, &L->q, f->xn, r->q);
    }
    for (int t = 0; t < f->n_rows; t++)
        for (int h = 0; h < c->n_heads; h++)
            sp_rope_apply_interleaved(
                &c->rope, r->q + ((size_t)t * c->n_heads + h) * qhd + c->qk_nope,
                1, c->qk_rope, f->pos[t]);
}

/* The cache rows [T][kv_lora_rank + qk_rope]: the normed latent and the
 * rotated key. */
static void project_latents(sp_forward *f, const sp_mla_config *c,
                            const sp_mla_layer *L, mla_rows *r) {
    const int R = c->kv_lora_rank, kd = R + c->qk_rope;
    sp_linear_forward(f, &L->kv_a, f->xn, r->ckv);
    for (int t = 0; t < f->n_rows; t++) {
        float *row = r->ckv + (size_t)t * kd;
        sp_rmsnorm(row, row, L->kv_a_norm, R, c->latent_eps, 0.0f);
        sp_rope_apply_interleaved(&c->rope, row + R, 1, c->qk_rope, f->pos[t]);
    }
}

/* A pass of at most this many rows runs the per-head products of
 * embed_q and unembed_out in parallel over heads, row by row, each product
 * on one thread: a decode step would otherwise open one pool region per
 * head and matrix (256 for DeepSeek-V3's 128 heads), each too small to
 * spread. Larger passes gather a head's rows and use the whole pool. */
#define FEW_ROWS 8

/* y[t] = w[h] x[t] for every row t and head h: x[t][h] at
 * x + t * x_row + h * x_head, y[t][h] at y + t * y_row + h * y_head. */
typedef struct head_products {
    const sp_linear *w;
    const float *x;
    float *y;
    size_t x_row, x_head, y_row, y_head;
    int n_rows;
} head_products;

static void heads_range(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const head_products *p = ctx;
    for (int64_t h = begin; h < end; h++)
        for (int t = 0; t < p->n_rows; t++)
            sp_linear_rows(NULL, &p->w[h],
                           p->x + (size_t)t * p->x_row + (size_t)h * p->x_head,
                           1, p->y + (size_t)t * p->y_row +
                                  (size_t)h * p->y_head);
}

/* qfull[t][h] = [embed_q[h] q_nope[t][h] ; q_pe[t][h]]. */
static void absorb_queries(sp_forward *f, const sp_mla_config *c,
                           const sp_mla_layer *L, mla_rows *r) {
    const size_t T = (size_t)f->n_rows, H = (size_t)c->n_heads,
                 dn = (size_t)c->qk_nope, dr = (size_t)c->qk_rope,
                 R = (size_t)c->kv_lora_rank, qhd = dn + dr, kd = R + dr;
    if (T <= FEW_ROWS) {
        head_products p = {L->embed_q, r->q, r->qfull, H * qhd, qhd,
                           H * kd, kd, (int)T};
        sp_pool_for(f->pool, (int64_t)H, 1, heads_range, &p);
        for (size_t t = 0; t < T; t++)
            for (size_t h = 0; h < H; h++)
                memcpy(r->qfull + (t * H + h) * kd + R,
                       r->q + (t * H + h) * qhd + dn, dr * sizeof(float));
        return;
    }
    for (size_t h = 0; h < H; h++) {
        for (size_t t = 0; t < T; t++)
            memcpy(r->head_in + t * dn, r->q + (t * H + h) * qhd,
                   dn * sizeof(float));
        sp_linear_rows(f->pool, &L->embed_q[h], r->head_in, (int)T,
                       r->head_out);
        for (size_t t = 0; t < T; t++) {
            float *dst = r->qfull + (t * H + h) * kd;
            memcpy(dst, r->head_out + t * R, R * sizeof(float));
            memcpy(dst + R, r->q + (t * H + h) * qhd + dn, dr * sizeof(float));
        }
    }
}

/* o[t][h] = unembed_out[h] olat[t][h]. */
static void unabsorb_outputs(sp_forward *f, const sp_mla_config *c,
                             const sp_mla_layer *L, mla_rows *r) {
    const size_t T = (size_t)f->n_rows, H = (size_t)c->n_heads,
                 R = (size_t)c->kv_lora_rank, dv = (size_t)c->v_head_dim;
    if (T <= FEW_ROWS) {
        head_products p = {L->unembed_out, r->olat, r->o, H * R, R, H * dv,
                           dv, (int)T};
        sp_pool_for(f->pool, (int64_t)H, 1, heads_range, &p);
        return;
    }
    for (size_t h = 0; h < H; h++) {
        for (size_t t = 0; t < T; t++)
            memcpy(r->head_in + t * R, r->olat + (t * H + h) * R,
                   R * sizeof(float));
        sp_linear_rows(f->pool, &L->unembed_out[h], r->head_in, (int)T,
                       r->head_out);
        for (size_t t = 0; t < T; t++)
            memcpy(r->o + (t * H + h) * dv, r->head_out + t * dv,
                   dv * sizeof(float));
    }
}

void sp_mla_attention(sp_forward *f, int l, const sp_mla_config *c,
                      const sp_mla_layer *L) {
    if (f->status) return;
    const sp_layer_state_desc *sd = &f->m->state_desc[l];
    const int kd = c->kv_lora_rank + c->qk_rope;
    if (sd->kind != SP_STATE_LATENT_KV || sd->head_dim != kd) {
        f->status = sp_fail(f->err, SPINDLE_ERR_INTERNAL,
                            "layer %d: latent attention of rows of %d over a "
                            "%s state of %d", l, kd,
                            sp_state_kind_name(sd->kind), sd->head_dim);
        return;
    }
    mla_rows *r = reserve(f, c);
    if (!r) return;
    project_queries(f, c, L, r);
    project_latents(f, c, L, r);
    absorb_queries(f, c, L, r);
    const size_t qw = (size_t)c->n_heads * kd;
    for (int s = 0; s < f->n_seqs && !f->status; s++) {
        const sp_forward_seq *sq = &f->seqs[s];
        if (sq->sees_ahead) {
            f->status = sp_fail(f->err, SPINDLE_ERR_UNSUPPORTED,
                                "layer %d: latent attention takes no "
                                "bidirectional spans", l);
            return;
        }
        for (int i = 0; i < sq->n_rows; i++)
            sp_seq_state_kv_store(sq->state, l, sq->first_pos + i,
                                  r->ckv + (size_t)(sq->first_row + i) * kd,
                                  NULL);
        sp_attention_args a = {
            .q = r->qfull + (size_t)sq->first_row * qw,
            .out = r->olat + (size_t)sq->first_row * c->n_heads *
                                 (size_t)c->kv_lora_rank,
            .n_q = sq->n_rows,
            .first_pos = sq->first_pos,
            .n_heads = c->n_heads,
            .n_kv_heads = 1,
            .head_dim = kd,
            .kv = sp_seq_state_kv_view(sq->state, l),
            .scale = c->scale,
        };
        const size_t need = sp_attention_latent_partials(&a, c->kv_lora_rank);
        if (need > r->cap_partials) {
            const size_t cap = need > 2 * r->cap_partials ? need
                                                          : 2 * r->cap_partials;
            if (!grow(&r->partials, cap)) {
                f->status = sp_fail(f->err, SPINDLE_ERR_MEMORY,
                                    "out of memory for a forward pass of %d "
                                    "tokens", f->n_rows);
                return;
            }
            r->cap_partials = cap;
        }
        f->status = sp_attention_latent(f->pool, &a, c->kv_lora_rank,
                                        r->partials, f->err);
    }
    if (f->status) return;
    unabsorb_outputs(f, c, L, r);
    sp_linear_forward(f, &L->o, r->o, f->out);
}
