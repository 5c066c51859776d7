/* Shared transformer blocks: the math of one decoder layer, written once. */
#include "models/blocks.h"
#include "models/lora.h"
#include "models/moe.h"
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
        (*fp)->pool = m->pool;
    }
    sp_forward *f = *fp;
    const sp_model_config *c = &m->cfg;
    if (rows > f->cap_rows) {
        size_t T = (size_t)rows;
        int hd = c->head_dim, inter = c->intermediate_size;
        size_t kw = (size_t)c->n_kv_heads * hd;
        for (int l = 0; l < c->n_layers; l++) {
            if (sp_layer_head_dim(m, l) > hd) hd = sp_layer_head_dim(m, l);
            if (sp_layer_intermediate(m, l) > inter)
                inter = sp_layer_intermediate(m, l);
            size_t lkw = (size_t)sp_layer_kv_heads(m, l) * sp_layer_head_dim(m, l);
            if (lkw > kw) kw = lkw;
        }
        size_t qw = (size_t)c->n_heads * hd;
        int *pos = realloc(f->pos, T * sizeof *pos);
        if (pos) f->pos = pos;
        int32_t *tokens = realloc(f->tokens, T * sizeof *tokens);
        if (tokens) f->tokens = tokens;
        uint64_t *keys = realloc(f->keys, T * sizeof *keys);
        if (keys) f->keys = keys;
        uint32_t *flags = realloc(f->row_flags, T * sizeof *flags);
        if (flags) f->row_flags = flags;
        int *ahead = realloc(f->ahead, T * sizeof *ahead);
        if (ahead) f->ahead = ahead;
        if (!pos || !tokens || !keys || !flags || !ahead || !grow(&f->x, T * c->hidden_size) ||
            !grow(&f->xn, T * c->hidden_size) ||
            !grow(&f->out, T * c->hidden_size) || !grow(&f->q, T * qw) ||
            !grow(&f->k, T * kw) || !grow(&f->v, T * kw) ||
            !grow(&f->attn, T * qw) ||
            !grow(&f->gate, T * inter) || !grow(&f->up, T * inter))
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
    free(f->tokens);
    free(f->keys);
    free(f->row_flags);
    free(f->ahead);
    free(f->family_rows);
    free(f->seqs);
    free(f->x); free(f->xn); free(f->out);
    free(f->q); free(f->k); free(f->v); free(f->attn);
    free(f->gate); free(f->up);
    sp_moe_scratch_free(f->moe);
    sp_lora_scratch_free(f->lora);
    if (f->family_scratch) f->family_scratch_free(f->family_scratch);
    free(f);
}

bool sp_forward_family_rows(sp_forward *f, size_t n) {
    if (n <= f->family_cap) return true;
    if (!grow(&f->family_rows, n)) return false;
    f->family_cap = n;
    return true;
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

void sp_linear_rows(sp_pool *pool, const sp_linear *lin, const float *x,
                    int n, float *y) {
    sp_matmul(pool, &lin->w, x, n, y);
    if (!lin->bias) return;
    size_t rows = (size_t)lin->w.rows;
    for (int t = 0; t < n; t++)
        for (size_t i = 0; i < rows; i++) y[(size_t)t * rows + i] += lin->bias[i];
}

void sp_linear_forward(sp_forward *f, const sp_linear *lin, const float *x,
                       float *y) {
    sp_linear_rows(f->pool, lin, x, f->n_rows, y);
    if (f->any_adapter) sp_lora_apply(f, lin, x, y);
}

/* ----------------------------------------------------------- attention */

/* Llama 4's attention temperature of position pos (1: none). */
static float attn_temperature(const sp_layer *L, int pos) {
    if (L->attn_temp_beta == 0.0f) return 1.0f;
    float period = (float)L->attn_temp_period;
    return 1.0f + L->attn_temp_beta * logf(1.0f + floorf((float)pos / period));
}

/* The q or k norm of one row (per head, or over all n_heads heads), then
 * RoPE, then (queries only) the attention temperature, on every row. */
static void norm_and_rotate(sp_forward *f, int l, float *rows, int n_heads,
                            const float *head_norm, bool queries) {
    const sp_model_config *c = &f->m->cfg;
    const sp_layer *L = &f->m->layers[l];
    int hd = sp_layer_head_dim(f->m, l);
    int width = L->qk_norm_full ? n_heads * hd : hd;
    for (int t = 0; t < f->n_rows; t++) {
        float *row = rows + (size_t)t * n_heads * hd;
        if (head_norm)
            for (int h = 0; h < n_heads * hd; h += width)
                sp_rmsnorm(row + h, row + h, head_norm, width,
                           c->rms_norm_eps, 0.0f);
        if (L->rope)
            (f->m->rope_interleaved ? sp_rope_apply_interleaved
                                    : sp_rope_apply)(L->rope, row, n_heads,
                                                     hd, f->pos[t]);
        float temp = queries ? attn_temperature(L, f->pos[t]) : 1.0f;
        if (temp != 1.0f)
            for (int i = 0; i < n_heads * hd; i++) row[i] *= temp;
    }
}

void sp_attention_core(sp_forward *f, int l, float scale, float softcap) {
    const sp_model_config *c = &f->m->cfg;
    const sp_layer *L = &f->m->layers[l];
    /* This block computes the config's heads: the layer's state must be
     * KV of that shape (a family's layer_state hook could say otherwise). */
    /* A layer sharing another's KV attends that layer's state. */
    const int kv_layer = L->shares_kv ? L->kv_layer : l;
    const sp_layer_state_desc *sd = &f->m->state_desc[kv_layer];
    const int hd = sp_layer_head_dim(f->m, l), kvh = sp_layer_kv_heads(f->m, l);
    if ((sd->kind != SP_STATE_FULL_KV && sd->kind != SP_STATE_WINDOW_KV) ||
        sd->n_kv_heads != kvh || sd->head_dim != hd) {
        if (!f->status)
            f->status = sp_fail(f->err, SPINDLE_ERR_INTERNAL,
                                "layer %d: attention of %d KV heads of %d "
                                "over a %s state of %d heads of %d", l,
                                kvh, hd,
                                sp_state_kind_name(sd->kind), sd->n_kv_heads,
                                sd->head_dim);
        return;
    }
    norm_and_rotate(f, l, f->q, c->n_heads, L->q_norm, true);
    if (!L->shares_kv) norm_and_rotate(f, l, f->k, kvh, L->k_norm, false);
    if (L->v_norm && !L->shares_kv)
        for (size_t h = 0; h < (size_t)f->n_rows * kvh; h++)
            sp_rmsnorm(f->v + h * hd, f->v + h * hd, NULL, hd,
                       c->rms_norm_eps, 0.0f);

    size_t qw = (size_t)c->n_heads * hd;
    size_t kw = (size_t)kvh * hd;
    for (int s = 0; s < f->n_seqs; s++) {
        const sp_forward_seq *sq = &f->seqs[s];
        /* The new keys/values join the cache before attending, so each
         * token sees itself and everything before it. */
        for (int i = 0; i < sq->n_rows && !L->shares_kv; i++) {
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
            .n_kv_heads = kvh,
            .head_dim = hd,
            .kv = sp_seq_state_kv_view(sq->state, kv_layer),
            .scale = scale,
            .window = L->window,
            .softcap = softcap,
            .sinks = L->sinks,
            .ahead = sq->sees_ahead ? f->ahead + sq->first_row : NULL,
        };
        if (!f->status) f->status = sp_attention(f->pool, &a, f->err);
    }
}

void sp_attention_block(sp_forward *f, int l, float scale, float softcap) {
    const sp_layer *L = &f->m->layers[l];
    sp_linear_forward(f, &L->q, f->xn, f->q);
    if (!L->shares_kv) {
        sp_linear_forward(f, &L->k, f->xn, f->k);
        if (L->v_is_k)
            memcpy(f->v, f->k, (size_t)f->n_rows * sp_layer_kv_heads(f->m, l) *
                                   sp_layer_head_dim(f->m, l) * sizeof *f->v);
        else
            sp_linear_forward(f, &L->v, f->xn, f->v);
    }
    sp_attention_core(f, l, scale, softcap);
    sp_linear_forward(f, &L->o, f->attn, f->out);
}

/* ----------------------------------------------------------------- MLP */

void sp_recurrent_runs(sp_forward *f, int l, sp_recurrent_run_fn run,
                       void *ctx) {
    for (int s = 0; s < f->n_seqs && !f->status; s++) {
        const sp_forward_seq *sq = &f->seqs[s];
        const sp_recurrent_state rs = sp_seq_state_recurrent(sq->state, l);
        const int first = sp_seq_state_first_checkpoint(sq->state);
        for (int t = 0; t < sq->n_rows && !f->status;) {
            const int n = t == 0 ? first + 1 : 1;
            f->status = run(f, ctx, &rs, sq->first_row + t, n);
            t += n;
            sp_seq_state_checkpoint(sq->state, l, t - 1);
        }
    }
}

void sp_mlp_swiglu(sp_forward *f, int l) {
    const sp_layer *L = &f->m->layers[l];
    sp_linear_forward(f, &L->gate, f->xn, f->gate);
    sp_linear_forward(f, &L->up, f->xn, f->up);
    sp_silu_mul(f->gate, f->up, f->n_rows * sp_layer_intermediate(f->m, l));
    sp_linear_forward(f, &L->down, f->gate, f->out);
}

void sp_mlp_geglu(sp_forward *f, int l) {
    const sp_layer *L = &f->m->layers[l];
    sp_linear_forward(f, &L->gate, f->xn, f->gate);
    sp_linear_forward(f, &L->up, f->xn, f->up);
    sp_gelu_tanh_mul(f->gate, f->up,
                     f->n_rows * sp_layer_intermediate(f->m, l));
    sp_linear_forward(f, &L->down, f->gate, f->out);
}

/* --------------------------------------------------- the common layer */

/* out = norm(in) where the layer has that norm, else a copy of in. */
static void norm_or_copy(sp_forward *f, const float *in, const float *w,
                         float *out) {
    if (w) sp_norm_rows(f, in, w, out);
    else memcpy(out, in, (size_t)f->n_rows * f->m->cfg.hidden_size *
                             sizeof *out);
}

/* x += scale * post_norm(out): a block's output joins the residual. */
static void join_residual(sp_forward *f, const float *post_norm,
                          float scale) {
    if (post_norm) sp_norm_rows(f, f->out, post_norm, f->out);
    if (scale == 1.0f) {
        sp_add_rows(f, f->x, f->out);
        return;
    }
    size_t n = (size_t)f->n_rows * f->m->cfg.hidden_size;
    for (size_t i = 0; i < n; i++) f->x[i] += f->out[i] * scale;
}

void sp_decoder_attention(sp_forward *f, int l, const sp_layer_scales *s) {
    const sp_layer *L = &f->m->layers[l];
    norm_or_copy(f, f->x, L->attn_norm, f->xn);
    sp_attention_block(f, l, s->attn, s->attn_softcap);
    join_residual(f, L->post_attn_norm, s->residual);
}

void sp_decoder_layer(sp_forward *f, int l, const sp_layer_scales *s) {
    const sp_layer *L = &f->m->layers[l];
    sp_decoder_attention(f, l, s);
    norm_or_copy(f, f->x, L->mlp_norm, f->xn);
    if (L->moe)
        sp_moe_block(f, L->moe);
    else
        (L->mlp_geglu ? sp_mlp_geglu : sp_mlp_swiglu)(f, l);
    join_residual(f, L->post_mlp_norm, s->residual);
}

void sp_prenorm_decoder_layer(sp_forward *f, int l) {
    sp_layer_scales s = {.attn = 1.0f / sqrtf((float)f->m->cfg.head_dim),
                         .residual = 1.0f};
    sp_decoder_layer(f, l, &s);
}

#define NAME(fmt) (snprintf(p, sizeof p, "model.layers.%d." fmt, l), p)

static spindle_status bind_norms(spindle_model *m, int l,
                                 const sp_decoder_options *opt,
                                 spindle_error *err) {
    sp_layer *L = &m->layers[l];
    int64_t d = m->cfg.hidden_size;
    char p[256];
    spindle_status st = SPINDLE_OK;
    if (opt->norms != SP_NORMS_POST &&
        (st = sp_bind_vector(m, NAME("input_layernorm.weight"), d,
                             &L->attn_norm, err)))
        return st;
    if (opt->norms == SP_NORMS_PRE)
        return sp_bind_vector(m, NAME("post_attention_layernorm.weight"), d,
                              &L->mlp_norm, err);
    if ((st = sp_bind_vector(m, NAME("post_attention_layernorm.weight"), d,
                             &L->post_attn_norm, err)) ||
        (st = sp_bind_vector(m, NAME("post_feedforward_layernorm.weight"), d,
                             &L->post_mlp_norm, err)))
        return st;
    if (opt->norms == SP_NORMS_SANDWICH)
        st = sp_bind_vector(m, NAME("pre_feedforward_layernorm.weight"), d,
                            &L->mlp_norm, err);
    return st;
}

/* The n matrices of one input (q/k/v, gate/up) of layer l: rows[i] x cols
 * each, under their own names, or as parts of the one `fused` matrix. */
static spindle_status bind_inputs(spindle_model *m, int l, bool fused,
                                  const char *fused_name,
                                  const char *const *names, int n,
                                  const int64_t *rows, int64_t cols,
                                  bool bias, sp_linear *const *out,
                                  spindle_error *err) {
    char p[256];
    if (fused) {
        snprintf(p, sizeof p, "model.layers.%d.%s", l, fused_name);
        return sp_bind_linear_parts(m, p, n, rows, cols, bias, out, err);
    }
    spindle_status st = SPINDLE_OK;
    for (int i = 0; i < n && !st; i++) {
        snprintf(p, sizeof p, "model.layers.%d.%s", l, names[i]);
        st = sp_bind_linear(m, p, rows[i], cols, bias, out[i], err);
    }
    return st;
}

static spindle_status bind_attention(spindle_model *m, int l,
                                     const sp_decoder_options *opt,
                                     spindle_error *err) {
    static const char *const names[] = {"self_attn.q_proj", "self_attn.k_proj",
                                        "self_attn.v_proj"};
    const sp_model_config *c = &m->cfg;
    sp_layer *L = &m->layers[l];
    int64_t d = c->hidden_size, hd = sp_layer_head_dim(m, l);
    int64_t qw = (int64_t)c->n_heads * hd, kw = (int64_t)sp_layer_kv_heads(m, l) * hd;
    int64_t rows[3] = {qw, kw, kw};
    sp_linear *qkv[3] = {&L->q, &L->k, &L->v};
    char p[256];
    spindle_status st;
    /* A layer sharing another's keys and values has only q (and o); one
     * whose values are its keys, q and k. */
    int n_inputs = L->shares_kv ? 1 : L->v_is_k ? 2 : 3;
    if ((st = bind_inputs(m, l, opt->fused_qkv && n_inputs == 3,
                          "self_attn.qkv_proj", names, n_inputs, rows, d,
                          opt->qkv_bias, qkv, err)) ||
        (st = sp_bind_linear(m, NAME("self_attn.o_proj"), d, qw, opt->o_bias,
                             &L->o, err)))
        return st;
    L->qk_norm_full = opt->qk_norm_full;
    if (!opt->qk_norm && !opt->qk_norm_full) return SPINDLE_OK;
    if ((st = sp_bind_vector(m, NAME("self_attn.q_norm.weight"),
                             opt->qk_norm_full ? qw : hd, &L->q_norm, err)) ||
        L->shares_kv)
        return st;
    return sp_bind_vector(m, NAME("self_attn.k_norm.weight"),
                          opt->qk_norm_full ? kw : hd, &L->k_norm, err);
}

static spindle_status bind_mlp(spindle_model *m, int l,
                               const sp_decoder_options *opt,
                               spindle_error *err) {
    static const char *const names[] = {"mlp.gate_proj", "mlp.up_proj"};
    const sp_model_config *c = &m->cfg;
    sp_layer *L = &m->layers[l];
    int64_t d = c->hidden_size, inter = sp_layer_intermediate(m, l);
    int64_t rows[2] = {inter, inter};
    sp_linear *gate_up[2] = {&L->gate, &L->up};
    char p[256];
    L->mlp_geglu = opt->geglu;
    spindle_status st = bind_inputs(m, l, opt->fused_gate_up,
                                    "mlp.gate_up_proj", names, 2, rows, d,
                                    c->mlp_bias, gate_up, err);
    if (st) return st;
    return sp_bind_linear(m, NAME("mlp.down_proj"), d, inter, c->mlp_bias,
                          &L->down, err);
}

#undef NAME

spindle_status sp_bind_decoder_layers(spindle_model *m,
                                      const sp_decoder_options *opt,
                                      spindle_error *err) {
    spindle_status st = SPINDLE_OK;
    for (int l = 0; l < m->cfg.n_layers && !st; l++) {
        m->layers[l].rope = &m->rope;
        if (!(st = bind_norms(m, l, opt, err)) &&
            !(st = bind_attention(m, l, opt, err)) &&
            !(opt->own_mlp && opt->own_mlp[l]))
            st = bind_mlp(m, l, opt, err);
    }
    return st;
}

/* ------------------------------------------------ family config values */

spindle_status sp_model_positive(spindle_model *m, const char *key,
                                 double dflt, double *out,
                                 spindle_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->cfg.json, key);
    if (!v || cJSON_IsNull(v)) {
        if (isnan(dflt))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: %s needs '%s'", m->dir,
                           m->cfg.model_type, key);
        *out = dflt;
        return SPINDLE_OK;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) ||
        !isfinite(v->valuedouble))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: '%s' must be a positive number",
                       m->dir, key);
    *out = v->valuedouble;
    return SPINDLE_OK;
}

spindle_status sp_model_int(const spindle_model *m, const char *key,
                            bool required, int dflt, int lo, int hi, int *out,
                            spindle_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->cfg.json, key);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: %s needs '%s'", m->dir,
                           m->cfg.model_type, key);
        *out = dflt;
        return SPINDLE_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: '%s' must be an integer in %d..%d",
                       m->dir, key, lo, hi);
    *out = (int)v->valuedouble;
    return SPINDLE_OK;
}

spindle_status sp_model_layer_kinds(spindle_model *m, const char *kind,
                                    int pattern, bool *is_kind,
                                    spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    const cJSON *types =
        cJSON_GetObjectItemCaseSensitive(c->json, "layer_types");
    if (!types || cJSON_IsNull(types)) {
        for (int l = 0; l < c->n_layers; l++)
            is_kind[l] = pattern > 0 && (l + 1) % pattern != 0;
        return SPINDLE_OK;
    }
    if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != c->n_layers)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: 'layer_types' must list %d layer "
                       "types", m->dir, c->n_layers);
    for (int l = 0; l < c->n_layers; l++) {
        const cJSON *t = cJSON_GetArrayItem(types, l);
        const char *s = cJSON_IsString(t) ? t->valuestring : "";
        if (!strcmp(s, kind)) is_kind[l] = true;
        else if (!strcmp(s, "full_attention")) is_kind[l] = false;
        else
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: layer_types[%d] is neither "
                           "'%s' nor 'full_attention'", m->dir, l, kind);
    }
    return SPINDLE_OK;
}

spindle_status sp_model_sliding_layers(spindle_model *m, int pattern,
                                       double window_dflt,
                                       const sp_rope *sliding_rope,
                                       spindle_error *err) {
    int n = m->cfg.n_layers;
    bool *sliding = calloc((size_t)n, sizeof *sliding);
    if (!sliding) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    spindle_status st =
        sp_model_layer_kinds(m, "sliding_attention", pattern, sliding, err);
    bool any = false;
    for (int l = 0; l < n; l++) any |= sliding[l];
    double window = 0;
    if (!st && any)
        st = sp_model_positive(m, "sliding_window", window_dflt, &window,
                               err);
    if (!st && window > (double)(1 << 30))
        st = sp_fail(err, SPINDLE_ERR_FORMAT,
                     "%s/config.json: sliding_window is too large", m->dir);
    for (int l = 0; l < n && !st; l++) {
        if (!sliding[l]) continue;
        m->layers[l].window = (int)window;
        if (sliding_rope) m->layers[l].rope = sliding_rope;
    }
    free(sliding);
    return st;
}

/* ------------------------------------------------------ Gemma's pieces */

void sp_gemma_embed_rows(const spindle_model *m, float *x, int n_rows) {
    float k = ((const sp_gemma_io *)m->family)->embed_scale;
    size_t n = (size_t)n_rows * m->cfg.hidden_size;
    for (size_t i = 0; i < n; i++) x[i] *= k;
}

void sp_gemma_logits(const spindle_model *m, float *logits, size_t n) {
    float cap = ((const sp_gemma_io *)m->family)->final_softcap;
    if (cap > 0)
        for (size_t i = 0; i < n; i++) logits[i] = cap * tanhf(logits[i] / cap);
}

spindle_status sp_gemma_check_head_dim(const spindle_model *m,
                                       spindle_error *err) {
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(m->cfg.json,
                                                       "head_dim");
    if (!hd || cJSON_IsNull(hd))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s/config.json: %s needs "
                       "'head_dim'", m->dir, m->cfg.model_type);
    return SPINDLE_OK;
}
