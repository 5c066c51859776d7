/* Shared transformer blocks: the math of one decoder layer, written once. */
#include "models/blocks.h"
#include "base/error.h"
#include "compute/matmul/matmul.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- scratch */

static bool grow(float **p, size_t n) {
    float *q = realloc(*p, n * sizeof(float));
    if (!q) return false;
    *p = q;
    return true;
}

spindle_status sp_forward_reserve(sp_forward **fp, spindle_model *m, int rows,
                                  int seqs, spindle_error *err) {
    if (!*fp) {
        *fp = calloc(1, sizeof **fp);
        if (!*fp) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        (*fp)->m = m;
    }
    sp_forward *f = *fp;
    const sp_model_config *c = &m->cfg;
    if (rows > f->cap_rows) {
        size_t T = (size_t)rows;
        size_t qw = (size_t)c->n_heads * c->head_dim;
        size_t kw = (size_t)c->n_kv_heads * c->head_dim;
        int *pos = realloc(f->pos, T * sizeof *pos);
        if (pos) f->pos = pos;
        if (!pos || !grow(&f->x, T * c->hidden_size) ||
            !grow(&f->xn, T * c->hidden_size) ||
            !grow(&f->out, T * c->hidden_size) || !grow(&f->q, T * qw) ||
            !grow(&f->k, T * kw) || !grow(&f->v, T * kw) ||
            !grow(&f->attn, T * qw) ||
            !grow(&f->gate, T * c->intermediate_size) ||
            !grow(&f->up, T * c->intermediate_size))
            return sp_fail(err, SPINDLE_ERR_MEMORY,
                           "out of memory for a forward pass of %d tokens",
                           rows);
        f->cap_rows = rows;
    }
    if (seqs > f->cap_seqs) {
        sp_forward_seq *s = realloc(f->seqs, (size_t)seqs * sizeof *s);
        if (!s) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
        f->seqs = s;
        f->cap_seqs = seqs;
    }
    return SPINDLE_OK;
}

void sp_forward_free(sp_forward *f) {
    if (!f) return;
    free(f->pos);
    free(f->seqs);
    free(f->x); free(f->xn); free(f->out);
    free(f->q); free(f->k); free(f->v); free(f->attn);
    free(f->gate); free(f->up);
    free(f);
}

/* --------------------------------------------------------- row helpers */

void sp_norm_rows(sp_forward *f, const float *in, const float *w, float *out) {
    int d = f->m->cfg.hidden_size;
    for (int t = 0; t < f->n_rows; t++)
        sp_rmsnorm(out + (size_t)t * d, in + (size_t)t * d, w, d,
                   f->m->cfg.rms_norm_eps, 0.0f);
}

void sp_add_rows(sp_forward *f, float *x, const float *y) {
    size_t n = (size_t)f->n_rows * f->m->cfg.hidden_size;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

void sp_linear_forward(sp_forward *f, const sp_linear *lin, const float *x,
                       float *y) {
    sp_matmul(f->m->pool, &lin->w, x, f->n_rows, y);
    if (!lin->bias) return;
    size_t n = (size_t)lin->w.rows;
    for (int t = 0; t < f->n_rows; t++)
        for (size_t i = 0; i < n; i++) y[(size_t)t * n + i] += lin->bias[i];
}

/* ----------------------------------------------------------- attention */

/* Per-head RMSNorm then RoPE on each row's heads of q or k. */
static void norm_and_rotate(sp_forward *f, const sp_layer *L, float *rows,
                            int n_heads, const float *head_norm) {
    const sp_model_config *c = &f->m->cfg;
    int hd = c->head_dim;
    for (int t = 0; t < f->n_rows; t++) {
        float *row = rows + (size_t)t * n_heads * hd;
        if (head_norm)
            for (int h = 0; h < n_heads; h++)
                sp_rmsnorm(row + (size_t)h * hd, row + (size_t)h * hd,
                           head_norm, hd, c->rms_norm_eps, 0.0f);
        (f->m->rope_interleaved ? sp_rope_apply_interleaved
                                : sp_rope_apply)(L->rope, row, n_heads, hd,
                                                 f->pos[t]);
    }
}

void sp_attention_block(sp_forward *f, int l, float scale, float softcap) {
    const sp_model_config *c = &f->m->cfg;
    const sp_layer *L = &f->m->layers[l];
    /* This block computes the config's heads: the layer's state must be
     * KV of that shape (a family's layer_state hook could say otherwise). */
    const sp_layer_state_desc *sd = &f->m->state_desc[l];
    if ((sd->kind != SP_STATE_FULL_KV && sd->kind != SP_STATE_WINDOW_KV) ||
        sd->n_kv_heads != c->n_kv_heads || sd->head_dim != c->head_dim) {
        if (!f->status)
            f->status = sp_fail(f->err, SPINDLE_ERR_INTERNAL,
                                "layer %d: attention of %d KV heads of %d "
                                "over a %s state of %d heads of %d", l,
                                c->n_kv_heads, c->head_dim,
                                sp_state_kind_name(sd->kind), sd->n_kv_heads,
                                sd->head_dim);
        return;
    }
    sp_linear_forward(f, &L->q, f->xn, f->q);
    sp_linear_forward(f, &L->k, f->xn, f->k);
    sp_linear_forward(f, &L->v, f->xn, f->v);
    norm_and_rotate(f, L, f->q, c->n_heads, L->q_norm);
    norm_and_rotate(f, L, f->k, c->n_kv_heads, L->k_norm);

    size_t qw = (size_t)c->n_heads * c->head_dim;
    size_t kw = (size_t)c->n_kv_heads * c->head_dim;
    for (int s = 0; s < f->n_seqs; s++) {
        const sp_forward_seq *sq = &f->seqs[s];
        /* The new keys/values join the cache before attending, so each
         * token sees itself and everything before it. */
        for (int i = 0; i < sq->n_rows; i++) {
            size_t t = (size_t)(sq->first_row + i);
            sp_seq_state_kv_store(sq->state, l, sq->first_pos + i,
                                  f->k + t * kw, f->v + t * kw);
        }
        sp_attention_args a = {
            .q = f->q + (size_t)sq->first_row * qw,
            .out = f->attn + (size_t)sq->first_row * qw,
            .n_q = sq->n_rows,
            .first_pos = sq->first_pos,
            .n_heads = c->n_heads,
            .n_kv_heads = c->n_kv_heads,
            .head_dim = c->head_dim,
            .kv = sp_seq_state_kv_view(sq->state, l),
            .scale = scale,
            .window = L->window,
            .softcap = softcap,
        };
        if (!f->status) f->status = sp_attention(f->m->pool, &a, f->err);
    }
    sp_linear_forward(f, &L->o, f->attn, f->out);
}

/* ----------------------------------------------------------------- MLP */

void sp_mlp_swiglu(sp_forward *f, int l) {
    const sp_layer *L = &f->m->layers[l];
    sp_linear_forward(f, &L->gate, f->xn, f->gate);
    sp_linear_forward(f, &L->up, f->xn, f->up);
    sp_silu_mul(f->gate, f->up, f->n_rows * f->m->cfg.intermediate_size);
    sp_linear_forward(f, &L->down, f->gate, f->out);
}

void sp_mlp_geglu(sp_forward *f, int l) {
    const sp_layer *L = &f->m->layers[l];
    sp_linear_forward(f, &L->gate, f->xn, f->gate);
    sp_linear_forward(f, &L->up, f->xn, f->up);
    sp_gelu_tanh_mul(f->gate, f->up, f->n_rows * f->m->cfg.intermediate_size);
    sp_linear_forward(f, &L->down, f->gate, f->out);
}

/* --------------------------------------------------- the common layer */

void sp_prenorm_decoder_layer(sp_forward *f, int l) {
    const sp_layer *L = &f->m->layers[l];
    float scale = 1.0f / sqrtf((float)f->m->cfg.head_dim);

    sp_norm_rows(f, f->x, L->attn_norm, f->xn);
    sp_attention_block(f, l, scale, 0.0f);
    sp_add_rows(f, f->x, f->out);

    sp_norm_rows(f, f->x, L->mlp_norm, f->xn);
    sp_mlp_swiglu(f, l);
    sp_add_rows(f, f->x, f->out);
}

spindle_status sp_bind_decoder_layers(spindle_model *m,
                                      const sp_decoder_options *opt,
                                      spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    int64_t d = c->hidden_size, hd = c->head_dim;
    int64_t qw = (int64_t)c->n_heads * hd, kw = (int64_t)c->n_kv_heads * hd;
    int64_t inter = c->intermediate_size;
    char p[256];
    spindle_status st = SPINDLE_OK;
    for (int l = 0; l < c->n_layers && !st; l++) {
        sp_layer *L = &m->layers[l];
        L->rope = &m->rope;
#define NAME(fmt) (snprintf(p, sizeof p, "model.layers.%d." fmt, l), p)
        if ((st = sp_bind_vector(m, NAME("input_layernorm.weight"), d, &L->attn_norm, err)) ||
            (st = sp_bind_vector(m, NAME("post_attention_layernorm.weight"), d, &L->mlp_norm, err)) ||
            (st = sp_bind_linear(m, NAME("self_attn.q_proj"), qw, d, opt->qkv_bias, &L->q, err)) ||
            (st = sp_bind_linear(m, NAME("self_attn.k_proj"), kw, d, opt->qkv_bias, &L->k, err)) ||
            (st = sp_bind_linear(m, NAME("self_attn.v_proj"), kw, d, opt->qkv_bias, &L->v, err)) ||
            (st = sp_bind_linear(m, NAME("self_attn.o_proj"), d, qw, opt->o_bias, &L->o, err)) ||
            (st = sp_bind_linear(m, NAME("mlp.gate_proj"), inter, d, c->mlp_bias, &L->gate, err)) ||
            (st = sp_bind_linear(m, NAME("mlp.up_proj"), inter, d, c->mlp_bias, &L->up, err)) ||
            (st = sp_bind_linear(m, NAME("mlp.down_proj"), d, inter, c->mlp_bias, &L->down, err)))
            break;
        if (opt->qk_norm &&
            ((st = sp_bind_vector(m, NAME("self_attn.q_norm.weight"), hd, &L->q_norm, err)) ||
             (st = sp_bind_vector(m, NAME("self_attn.k_norm.weight"), hd, &L->k_norm, err))))
            break;
#undef NAME
    }
    return st;
}
