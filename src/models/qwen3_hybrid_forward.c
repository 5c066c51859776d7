/* The hybrid families' token mixers over a forward pass (qwen3_hybrid.h):
 * gated attention, and the gated DeltaNet over each sequence's recurrent
 * state.
 *
 * A DeltaNet layer's projections run once over all T rows of the pass; the
 * convolution and the delta rule then run per sequence, on its own conv
 * window and state (the work copy of runtime/seq_state.h). The tokens up to
 * the sequence's first checkpoint go through as one run (the chunked delta
 * rule); those after it one at a time, each followed by its checkpoint, so
 * that truncation back to any of them restores that state exactly. */
#include "models/qwen3_hybrid.h"
#include "models/moe.h"
#include "base/error.h"
#include "compute/linear_attention/linear_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The pass's own rows (sp_forward.family_scratch), cap_rows of each
 * width: the model's sp_hybrid is shared by every pass over it. */
typedef struct hybrid_rows {
    int cap_rows;
    float *proj, *conv_in, *conv_out, *z, *a, *b, *core, *q_full, *gate;
} hybrid_rows;

static void rows_free(void *p) {
    hybrid_rows *r = p;
    free(r->proj); free(r->conv_in); free(r->conv_out); free(r->z);
    free(r->a); free(r->b); free(r->core); free(r->q_full); free(r->gate);
    free(r);
}

static bool grow(float **p, size_t n) {
    float *q = realloc(*p, n * sizeof(float));
    if (!q) return false;
    *p = q;
    return true;
}

static bool grow_rows(hybrid_rows *r, const sp_forward *f,
                      const sp_hybrid *h) {
    const int T = f->n_rows;
    if (T <= r->cap_rows) return true;
    const sp_model_config *c = &f->m->cfg;
    const size_t t = (size_t)T, qw = (size_t)c->n_heads * c->head_dim;
    size_t proj = (size_t)(2 * h->key_dim + 2 * h->value_dim);
    if (proj < 2 * (size_t)h->n_v_heads) proj = 2 * (size_t)h->n_v_heads;
    if (!grow(&r->proj, t * proj) || !grow(&r->conv_in, t * h->conv_dim) ||
        !grow(&r->conv_out, t * h->conv_dim) || !grow(&r->z, t * h->value_dim) ||
        !grow(&r->a, t * h->n_v_heads) || !grow(&r->b, t * h->n_v_heads) ||
        !grow(&r->core, t * h->value_dim) || !grow(&r->q_full, t * 2 * qw) ||
        !grow(&r->gate, t * qw))
        return false;
    r->cap_rows = T;
    return true;
}

/* The pass's rows for T rows; NULL (f->status set) when out of memory. */
static hybrid_rows *reserve(sp_forward *f, const sp_hybrid *h) {
    if (!f->family_scratch) {
        f->family_scratch = calloc(1, sizeof(hybrid_rows));
        f->family_scratch_free = rows_free;
    }
    hybrid_rows *r = f->family_scratch;
    if (r && grow_rows(r, f, h)) return r;
    if (!f->status)
        f->status = sp_fail(f->err, SPINDLE_ERR_MEMORY,
                            "out of memory for a forward pass of %d tokens",
                            f->n_rows);
    return NULL;
}

/* ---------------------------------------------------------- gated attention */

static void gated_attention(sp_forward *f, int l, hybrid_rows *r) {
    const sp_model_config *c = &f->m->cfg;
    const sp_layer *L = &f->m->layers[l];
    const size_t hd = (size_t)c->head_dim, qw = (size_t)c->n_heads * hd;
    sp_linear_forward(f, &L->q, f->xn, r->q_full);
    /* mlx-lm splits each head's 2 * head_dim outputs into query and gate. */
    for (size_t t = 0; t < (size_t)f->n_rows; t++)
        for (size_t hh = 0; hh < (size_t)c->n_heads; hh++) {
            const float *src = r->q_full + t * 2 * qw + hh * 2 * hd;
            memcpy(f->q + t * qw + hh * hd, src, hd * sizeof(float));
            memcpy(r->gate + t * qw + hh * hd, src + hd, hd * sizeof(float));
        }
    sp_linear_forward(f, &L->k, f->xn, f->k);
    sp_linear_forward(f, &L->v, f->xn, f->v);
    sp_attention_core(f, l, 1.0f / sqrtf((float)c->head_dim), 0.0f);
    const size_t n = (size_t)f->n_rows * qw;
    for (size_t i = 0; i < n; i++)
        f->attn[i] *= 1.0f / (1.0f + expf(-r->gate[i]));
    sp_linear_forward(f, &L->o, f->attn, f->out);
}

/* ---------------------------------------------------------------- DeltaNet */

/* Qwen3-Next's fused projections, grouped per key head ([q, k, v, z] and
 * [b, a] of each), regrouped into the convolution's q | k | v rows, z, b
 * and a, as mlx-lm's fix_query_key_value_ordering splits them. */
static void regroup_qkvz(const sp_hybrid *h, hybrid_rows *r, int T) {
    const int64_t dk = h->k_dim, r_dv = h->value_dim / h->n_k_heads;
    const int64_t group = 2 * dk + 2 * r_dv, width = group * h->n_k_heads;
    for (int64_t t = 0; t < T; t++)
        for (int64_t g = 0; g < h->n_k_heads; g++) {
            const float *src = r->proj + t * width + g * group;
            float *row = r->conv_in + t * h->conv_dim;
            memcpy(row + g * dk, src, sizeof(float) * (size_t)dk);
            memcpy(row + h->key_dim + g * dk, src + dk, sizeof(float) * (size_t)dk);
            memcpy(row + 2 * h->key_dim + g * r_dv, src + 2 * dk,
                   sizeof(float) * (size_t)r_dv);
            memcpy(r->z + t * h->value_dim + g * r_dv, src + 2 * dk + r_dv,
                   sizeof(float) * (size_t)r_dv);
        }
}

static void regroup_ba(const sp_hybrid *h, hybrid_rows *r, int T) {
    const int64_t per = h->n_v_heads / h->n_k_heads, hv = h->n_v_heads;
    for (int64_t t = 0; t < T; t++)
        for (int64_t g = 0; g < h->n_k_heads; g++) {
            const float *src = r->proj + t * 2 * hv + g * 2 * per;
            memcpy(r->b + t * hv + g * per, src, sizeof(float) * (size_t)per);
            memcpy(r->a + t * hv + g * per, src + per,
                   sizeof(float) * (size_t)per);
        }
}

static void delta_projections(sp_forward *f, const sp_hybrid *h,
                              hybrid_rows *r, const sp_delta_net *D) {
    if (D->qkvz.w.rows) {
        sp_linear_forward(f, &D->qkvz, f->xn, r->proj);
        regroup_qkvz(h, r, f->n_rows);
    } else {
        sp_linear_forward(f, &D->qkv, f->xn, r->conv_in);
        sp_linear_forward(f, &D->z, f->xn, r->z);
    }
    if (D->ba.w.rows) {
        sp_linear_forward(f, &D->ba, f->xn, r->proj);
        regroup_ba(h, r, f->n_rows);
    } else {
        sp_linear_forward(f, &D->b, f->xn, r->b);
        sp_linear_forward(f, &D->a, f->xn, r->a);
    }
}

/* What delta_run reads besides the pass. */
typedef struct delta_ctx {
    const sp_hybrid *h;
    hybrid_rows *r;
    const sp_delta_net *D;
} delta_ctx;

/* Rows r0 .. r0 + n - 1 (of one sequence) through the convolution and the
 * delta rule, continuing its conv window and state (sp_recurrent_run_fn). */
static spindle_status delta_run(sp_forward *f, void *ctx,
                                const sp_recurrent_state *rs, int r0, int n) {
    const delta_ctx *c = ctx;
    const sp_hybrid *h = c->h;
    hybrid_rows *r = c->r;
    const sp_delta_net *D = c->D;
    const int64_t C = h->conv_dim, hv = h->n_v_heads;
    float *conv = r->conv_out + r0 * C;
    const sp_conv1d_args ca = {
        .n_tokens = n, .channels = (int)C, .kernel = h->conv_kernel,
        .x = r->conv_in + r0 * C, .x_stride = C, .w_t = D->conv_w,
        .window = rs->conv, .out = conv, .out_stride = C};
    spindle_status st = sp_conv1d_silu(f->pool, &ca, f->err);
    if (st) return st;
    const sp_delta_prepare_args pa = {
        .n_tokens = n, .n_k_heads = h->n_k_heads, .k_dim = h->k_dim,
        .q = conv, .k = conv + h->key_dim, .qk_stride = C,
        .n_v_heads = (int)hv, .a = r->a + r0 * hv, .b = r->b + r0 * hv,
        .a_scale = D->a_scale, .dt_bias = D->dt_bias};
    sp_gated_delta_prepare(&pa);
    const sp_gated_delta_args da = {
        .n_tokens = n, .n_k_heads = h->n_k_heads, .n_v_heads = (int)hv,
        .k_dim = h->k_dim, .v_dim = h->v_dim, .heads_tiled = h->heads_tiled,
        .q = conv, .k = conv + h->key_dim, .qk_stride = C,
        .v = conv + 2 * h->key_dim, .v_stride = C, .log_g = r->a + r0 * hv,
        .beta = r->b + r0 * hv, .state = rs->state,
        .out = r->core + r0 * h->value_dim, .out_stride = h->value_dim};
    return sp_gated_delta(f->pool, &da, f->err);
}

static void delta_net(sp_forward *f, int l, const sp_hybrid *h,
                      hybrid_rows *r) {
    const sp_delta_net *D = &h->delta[l];
    delta_projections(f, h, r, D);
    delta_ctx ctx = {.h = h, .r = r, .D = D};
    sp_recurrent_runs(f, l, delta_run, &ctx);
    if (f->status) return;
    const float eps = f->m->cfg.rms_norm_eps;
    for (int64_t t = 0; t < f->n_rows; t++) {
        float *row = r->core + t * h->value_dim;
        sp_rmsnorm_gated(row, row, r->z + t * h->value_dim, D->norm,
                         h->n_v_heads, h->v_dim, eps);
    }
    sp_linear_forward(f, &D->out, r->core, f->out);
}

void sp_hybrid_mixer(sp_forward *f, int l) {
    const sp_hybrid *h = f->m->family;
    hybrid_rows *r = f->status ? NULL : reserve(f, h);
    if (!r) return;
    if (h->linear[l])
        delta_net(f, l, h, r);
    else
        gated_attention(f, l, r);
}

void sp_hybrid_layer(sp_forward *f, int l) {
    const sp_layer *L = &f->m->layers[l];
    sp_norm_rows(f, f->x, L->attn_norm, f->xn);
    sp_hybrid_mixer(f, l);
    sp_add_rows(f, f->x, f->out);
    sp_norm_rows(f, f->x, L->mlp_norm, f->xn);
    if (L->moe)
        sp_moe_block(f, L->moe);
    else
        sp_mlp_swiglu(f, l);
    sp_add_rows(f, f->x, f->out);
}
