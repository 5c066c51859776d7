/* The routed mixture-of-experts MLP (moe.h): binding and the forward pass. */
#include "models/moe.h"
#include "models/blocks.h"
#include "models/lora.h"
#include "base/error.h"
#include "compute/matmul/matmul.h"
#include "compute/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- binding */

/* The experts' gate/up/down under `prefix`: stacked when
 * <prefix>.<stacked>.gate_proj.weight exists, else one tensor per expert. */
static spindle_status bind_experts(spindle_model *m, const char *prefix,
                                   sp_moe *moe, spindle_error *err) {
    const sp_moe_spec *s = &moe->spec;
    const int64_t d = moe->hidden, n = s->n_experts;
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    sp_linear *const dst[3] = {moe->gate, moe->up, moe->down};
    char name[320];
    snprintf(name, sizeof name, "%s.%s.gate_proj.weight", prefix, s->stacked);
    bool stacked = !s->per_expert || sp_model_find_tensor(m, name);
    spindle_status st = SPINDLE_OK;
    int p = 0;
    if (s->gate_up && !sp_model_find_tensor(m, name)) {
        snprintf(name, sizeof name, "%s.%s.%s", prefix, s->stacked,
                 s->gate_up);
        moe->fused = !s->gate_up_halves;
        st = sp_bind_stacked_linear(m, name, n, 2 * s->inter, d,
                                    s->expert_bias, moe->gate, err);
        for (int64_t e = 0; s->gate_up_halves && e < n && !st; e++) {
            const sp_linear both = moe->gate[e];
            moe->gate[e].w = sp_weight_row_block(&both.w, 0, s->inter);
            moe->up[e].w = sp_weight_row_block(&both.w, s->inter, s->inter);
            moe->up[e].bias = both.bias ? both.bias + s->inter : NULL;
        }
        p = 2;
    }
    for (; p < 3 && !st; p++) {
        const int64_t rows = p < 2 ? s->inter : d, cols = p < 2 ? d : s->inter;
        if (stacked) {
            snprintf(name, sizeof name, "%s.%s.%s", prefix, s->stacked,
                     proj[p]);
            st = sp_bind_stacked_linear(m, name, n, rows, cols,
                                        s->expert_bias, dst[p], err);
            continue;
        }
        for (int64_t e = 0; e < n && !st; e++) {
            snprintf(name, sizeof name, "%s.%s.%lld.%s", prefix,
                     s->per_expert, (long long)e, proj[p]);
            st = sp_bind_linear(m, name, rows, cols, s->expert_bias,
                                &dst[p][e], err);
        }
    }
    return st;
}

static spindle_status bind_shared(spindle_model *m, const char *prefix,
                                  sp_moe *moe, spindle_error *err) {
    const sp_moe_spec *s = &moe->spec;
    const int64_t d = moe->hidden, i = s->shared_inter;
    char name[320];
    spindle_status st;
#define NAME(what) (snprintf(name, sizeof name, "%s.%s%s", prefix, s->shared, \
                             what), name)
    if ((st = sp_bind_linear(m, NAME(".gate_proj"), i, d, false,
                             &moe->shared_gate_proj, err)) ||
        (st = sp_bind_linear(m, NAME(".up_proj"), i, d, false, &moe->shared_up,
                             err)) ||
        (st = sp_bind_linear(m, NAME(".down_proj"), d, i, false,
                             &moe->shared_down, err)))
        return st;
#undef NAME
    if (!s->shared_gate) return SPINDLE_OK;
    snprintf(name, sizeof name, "%s.%s", prefix, s->shared_gate);
    return sp_bind_linear(m, name, 1, d, false, &moe->shared_expert_gate, err);
}

static spindle_status bind_router_scales(spindle_model *m, const char *prefix,
                                         sp_moe *moe, spindle_error *err) {
    const sp_moe_spec *s = &moe->spec;
    char name[320];
    spindle_status st = SPINDLE_OK;
    if (s->expert_scale) {
        snprintf(name, sizeof name, "%s.%s", prefix, s->expert_scale);
        st = sp_bind_vector(m, name, s->n_experts, &moe->expert_scale, err);
    }
    if (!st && s->score_bias) {
        snprintf(name, sizeof name, "%s.%s", prefix, s->score_bias);
        st = sp_bind_vector(m, name, s->n_experts, &moe->score_bias, err);
        moe->spec.groups.bias = moe->score_bias;
    }
    if (st || !s->router_norm) return st;
    const float *w = NULL;
    snprintf(name, sizeof name, "%s.%s", prefix, s->router_norm);
    if ((st = sp_bind_vector(m, name, moe->hidden, &w, err))) return st;
    moe->router_norm = malloc((size_t)moe->hidden * sizeof *moe->router_norm);
    if (!moe->router_norm) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    /* mlx-lm's scale * hidden_size**-0.5, in float32 */
    const float root = (float)(1.0 / sqrt((double)moe->hidden));
    for (int64_t i = 0; i < moe->hidden; i++) moe->router_norm[i] = w[i] * root;
    return SPINDLE_OK;
}

spindle_status sp_moe_bind(spindle_model *m, const char *prefix,
                           const sp_moe_spec *spec, sp_moe *out,
                           spindle_error *err) {
    memset(out, 0, sizeof *out);
    if (spec->n_experts < 1 || spec->top_k < 1 ||
        spec->top_k > spec->n_experts || spec->inter < 1)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: %s: %d of %d experts per token (size %lld) is "
                       "not a valid mixture of experts", m->dir, prefix,
                       spec->top_k, spec->n_experts, (long long)spec->inter);
    out->spec = *spec;
    out->hidden = m->cfg.hidden_size;
    size_t n = (size_t)spec->n_experts;
    out->gate = calloc(3 * n, sizeof *out->gate);
    if (!out->gate) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    out->up = out->gate + n;
    out->down = out->up + n;
    char name[320];
    snprintf(name, sizeof name, "%s.%s", prefix, spec->router);
    spindle_status st = sp_bind_linear(m, name, spec->n_experts, out->hidden,
                                       false, &out->router, err);
    if (!st) st = bind_router_scales(m, prefix, out, err);
    if (!st) st = bind_experts(m, prefix, out, err);
    if (!st && spec->shared_inter > 0) st = bind_shared(m, prefix, out, err);
    if (st) sp_moe_free(out);
    return st;
}

void sp_moe_free(sp_moe *moe) {
    if (!moe) return;
    free(moe->gate); /* up and down share its allocation */
    moe->gate = moe->up = moe->down = NULL;
    free(moe->router_norm);
    moe->router_norm = NULL;
}

static void add_linear(const sp_linear *l, int64_t *params, int64_t *bytes) {
    if (l->w.rows == 0) return;
    *params += l->w.rows * l->w.cols + (l->bias ? l->w.rows : 0);
    *bytes += (int64_t)sp_weight_nbytes(&l->w) +
              (l->bias ? l->w.rows * (int64_t)sizeof(float) : 0);
}

sp_moe_size sp_moe_measure(const sp_moe *moe) {
    sp_moe_size z = {0};
    int64_t ep = 0, eb = 0; /* all experts */
    for (int e = 0; e < moe->spec.n_experts; e++) {
        add_linear(&moe->gate[e], &ep, &eb);
        add_linear(&moe->up[e], &ep, &eb);
        add_linear(&moe->down[e], &ep, &eb);
    }
    const sp_linear *always[] = {&moe->router, &moe->shared_gate_proj,
                                 &moe->shared_up, &moe->shared_down,
                                 &moe->shared_expert_gate};
    for (size_t i = 0; i < sizeof always / sizeof *always; i++)
        add_linear(always[i], &z.active_params, &z.active_bytes);
    /* Every expert has the same shapes and storage type. */
    z.params = z.active_params + ep;
    z.bytes = z.active_bytes + eb;
    z.active_params += ep / moe->spec.n_experts * moe->spec.top_k;
    z.active_bytes += eb / moe->spec.n_experts * moe->spec.top_k;
    return z;
}

/* ---------------------------------------------------------------- scratch */

/* The experts run in two parallel phases (gate/up and activation, then
 * down), each over units: output rows [r0, r1) of one expert's projection
 * for its n grouped rows starting at position `first`. A decode step has
 * top_k experts of one row each; their rows are cut into blocks so that
 * every thread gets about UNITS_PER_THREAD units. */
#define UNITS_PER_THREAD 4

typedef struct unit {
    int expert, first, n;
    int64_t r0, r1;
} unit;

struct sp_moe_scratch {
    size_t cap_rows, cap_experts, cap_x, cap_h;
    float *logits;   /* [T][n_experts] router logits; [T] shared gates */
    float *route_work; /* [2 n_experts] sp_route_grouped's */
    int *idx;        /* [T][k] chosen experts, best first */
    float *weight;   /* [T][k] their weights */
    int *order;      /* [T*k] assignment t*k+j at each grouped position */
    int *pos;        /* [T*k] grouped position of assignment t*k+j */
    int *first;      /* [n_experts + 1] first grouped position per expert */
    int *fill;       /* [n_experts] next free position while grouping */
    float *x;        /* [T*k][hidden] gathered rows, then expert outputs */
    float *gate, *up;/* [T*k][inter] */
    float *fused;    /* [T*k][2 inter] interleaved gate_up outputs */
    struct unit *units; /* [cap_units] work items of one parallel phase */
    size_t cap_units;
};

void sp_moe_scratch_free(sp_moe_scratch *s) {
    if (!s) return;
    free(s->logits); free(s->route_work); free(s->idx); free(s->weight); free(s->order);
    free(s->pos); free(s->first); free(s->fill); free(s->x);
    free(s->gate); free(s->up); free(s->fused); free(s->units);
    free(s);
}

/* Grow array p to n elements (false: out of memory, p unchanged). */
#define GROW(p, n) \
    ((tmp = realloc((p), (n) * sizeof *(p))) != NULL ? ((p) = tmp, true) \
                                                     : false)

static spindle_status reserve(sp_forward *f, const sp_moe *moe) {
    const sp_moe_spec *sp = &moe->spec;
    const size_t T = (size_t)f->n_rows;
    size_t E = (size_t)sp->n_experts;
    const size_t assigned = T * (size_t)sp->top_k;
    size_t rows = assigned > T ? assigned : T;
    size_t h = assigned * (size_t)sp->inter;
    if (T * (size_t)sp->shared_inter > h) h = T * (size_t)sp->shared_inter;
    const size_t x = rows * (size_t)moe->hidden;
    void *tmp;
    if (!f->moe && !(f->moe = calloc(1, sizeof *f->moe))) goto oom;
    sp_moe_scratch *s = f->moe;
    if (rows > s->cap_rows || E > s->cap_experts) {
        if (rows < s->cap_rows) rows = s->cap_rows;
        if (E < s->cap_experts) E = s->cap_experts;
        if (!GROW(s->logits, rows * E) || !GROW(s->route_work, 2 * E) ||
            !GROW(s->idx, rows) ||
            !GROW(s->weight, rows) || !GROW(s->order, rows) ||
            !GROW(s->pos, rows) || !GROW(s->first, E + 1) ||
            !GROW(s->fill, E))
            goto oom;
        s->cap_rows = rows;
        s->cap_experts = E;
    }
    if (x > s->cap_x) {
        if (!GROW(s->x, x)) goto oom;
        s->cap_x = x;
    }
    if (h > s->cap_h || (moe->fused && !s->fused)) {
        if (h < s->cap_h) h = s->cap_h;
        if (!GROW(s->gate, h) || !GROW(s->up, h) ||
            ((moe->fused || s->fused) && !GROW(s->fused, 2 * h)))
            goto oom;
        s->cap_h = h;
    }
    /* At most every expert once plus the extra blocks plan_units adds. */
    const size_t units = E + UNITS_PER_THREAD * (size_t)sp_pool_size(f->pool);
    if (units > s->cap_units) {
        if (!GROW(s->units, units)) goto oom;
        s->cap_units = units;
    }
    return SPINDLE_OK;
oom:
    return sp_fail(f->err, SPINDLE_ERR_MEMORY,
                   "out of memory for the experts of %d tokens", f->n_rows);
}

/* ---------------------------------------------------------------- forward */

/* Counting sort of the T*k assignments by expert, stable in row order. */
static void group_by_expert(sp_moe_scratch *s, int n_assigned, int E) {
    memset(s->first, 0, (size_t)(E + 1) * sizeof *s->first);
    for (int a = 0; a < n_assigned; a++) s->first[s->idx[a] + 1]++;
    for (int e = 0; e < E; e++) {
        s->first[e + 1] += s->first[e];
        s->fill[e] = s->first[e];
    }
    for (int a = 0; a < n_assigned; a++) {
        int p = s->fill[s->idx[a]]++;
        s->order[p] = a;
        s->pos[a] = p;
    }
}

/* Rows [r0, r1) of lin (its bias with them). */
static sp_linear row_block(const sp_linear *lin, int64_t r0, int64_t r1) {
    return (sp_linear){.w = sp_weight_row_block(&lin->w, r0, r1 - r0),
                       .bias = lin->bias ? lin->bias + r0 : NULL};
}

static sp_moe_act_fn activation(const sp_moe *moe) {
    return moe->spec.act ? moe->spec.act : sp_silu_mul;
}

/* The gate and up rows [r0, r1) of a unit from the interleaved gate_up
 * projection: its fused rows [2 r0, 2 r1) in one product, split into the
 * usual gate and up outputs, then the activation. */
static void run_fused_gate_up(const sp_moe *moe, sp_moe_scratch *s,
                              const unit *u, const float *x, bool act) {
    const size_t I = (size_t)moe->spec.inter, w = (size_t)(u->r1 - u->r0);
    const size_t h = (size_t)u->first * I;
    float *fused = s->fused + 2 * h + 2 * (size_t)u->r0;
    sp_linear gu = row_block(&moe->gate[u->expert], 2 * u->r0, 2 * u->r1);
    sp_linear_rows(NULL, &gu, x, u->n, fused);
    /* n == 1 or whole rows (plan_units): each row's outputs are w wide
     * in gate/up and 2w wide in fused. */
    for (int t = 0; t < u->n; t++) {
        float *g = s->gate + h + u->r0 + (size_t)t * w;
        float *up = s->up + h + u->r0 + (size_t)t * w;
        const float *f = fused + (size_t)t * 2 * w;
        for (size_t i = 0; i < w; i++) {
            g[i] = f[2 * i];
            up[i] = f[2 * i + 1];
        }
    }
    if (act)
        activation(moe)(s->gate + h + u->r0, s->up + h + u->r0,
                        u->n * (int)w);
}

typedef struct phase {
    const sp_moe *moe;
    sp_moe_scratch *s;
    bool down;          /* phase 2: down(h); else gate/up and activation */
    bool act;           /* phase 1 applies the activation (no LoRA terms
                           must join gate and up first) */
} phase;

/* One thread's units; the products inside run on that thread alone. */
static void run_units(void *ctx, int64_t u0, int64_t u1, int thread_id) {
    (void)thread_id;
    const phase *ph = ctx;
    const sp_moe *moe = ph->moe;
    sp_moe_scratch *s = ph->s;
    const size_t D = (size_t)moe->hidden, I = (size_t)moe->spec.inter;
    for (int64_t i = u0; i < u1; i++) {
        const unit *u = &s->units[i];
        /* n == 1 or the whole rows: the block's outputs are contiguous. */
        const size_t h = (size_t)u->first * I;
        if (ph->down) {
            sp_linear d = row_block(&moe->down[u->expert], u->r0, u->r1);
            sp_linear_rows(NULL, &d, s->gate + h, u->n,
                           s->x + (size_t)u->first * D + u->r0);
            continue;
        }
        const float *x = s->x + (size_t)u->first * D;
        if (moe->fused) {
            run_fused_gate_up(moe, s, u, x, ph->act);
            continue;
        }
        sp_linear g = row_block(&moe->gate[u->expert], u->r0, u->r1);
        sp_linear up = row_block(&moe->up[u->expert], u->r0, u->r1);
        sp_linear_rows(NULL, &g, x, u->n, s->gate + h + u->r0);
        sp_linear_rows(NULL, &up, x, u->n, s->up + h + u->r0);
        if (ph->act)
            activation(moe)(s->gate + h + u->r0, s->up + h + u->r0,
                            u->n * (int)(u->r1 - u->r0));
    }
}

/* The units of one phase over `rows` output rows per expert: one unit per
 * expert with several rows (a prefill), row blocks of whole 32-row tiles
 * for one-row experts when there are too few units for the threads. */
static int plan_units(sp_moe_scratch *s, int E, int64_t rows, int threads) {
    int active = 0, n_units = 0;
    for (int e = 0; e < E; e++) active += s->first[e + 1] > s->first[e];
    int64_t blocks = (UNITS_PER_THREAD * threads + active - 1) / active;
    int64_t block = (rows + blocks - 1) / blocks;
    block = (block + 31) / 32 * 32;
    for (int e = 0; e < E; e++) {
        int first = s->first[e], n = s->first[e + 1] - first;
        if (!n) continue;
        int64_t step = n == 1 && threads > 1 ? block : rows;
        for (int64_t r0 = 0; r0 < rows; r0 += step)
            s->units[n_units++] = (unit){e, first, n, r0,
                                         r0 + step < rows ? r0 + step : rows};
    }
    return n_units;
}

/* The layer whose routed experts moe is, or -1. */
static int layer_of(const spindle_model *m, const sp_moe *moe) {
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (sp_lora_moe(m, l) == moe) return l;
    return -1;
}

/* Every routed expert over its grouped rows in s->x; the outputs replace
 * the inputs there (phase 2 starts once phase 1 has read them all). The
 * LoRA terms of the sequences' adapters (mlx-lm's LoRASwitchLinear) join
 * each expert's gate and up products before the activation and its down
 * product after, grouped per expert as the base products are. */
static void run_experts(sp_forward *f, const sp_moe *moe, sp_moe_scratch *s) {
    const int E = moe->spec.n_experts, threads = sp_pool_size(f->pool);
    const sp_lora_routed lr = {
        .layer = f->any_adapter ? layer_of(f->m, moe) : -1,
        .n_experts = E, .top_k = moe->spec.top_k,
        .first = s->first, .order = s->order};
    const bool lora = lr.layer >= 0 && sp_lora_adapts_experts(f, lr.layer);
    phase ph = {.moe = moe, .s = s, .act = !lora};
    int n = plan_units(s, E, moe->spec.inter, threads);
    sp_pool_for(f->pool, n, 1, run_units, &ph);
    if (lora) {
        sp_lora_apply_experts(f, &lr, SP_LORA_GATE, s->x, s->gate);
        sp_lora_apply_experts(f, &lr, SP_LORA_UP, s->x, s->up);
        activation(moe)(s->gate, s->up, s->first[E] * (int)moe->spec.inter);
    }
    ph.down = true;
    n = plan_units(s, E, moe->hidden, threads);
    sp_pool_for(f->pool, n, 1, run_units, &ph);
    if (lora) sp_lora_apply_experts(f, &lr, SP_LORA_DOWN, s->gate, s->x);
}

/* out += sigmoid(shared_expert_gate(xn)) * shared_expert(xn), every row
 * through one pooled product at a time. Its projections and gate are
 * plain linears to LoRA (mlx-lm's LoRALinear), so sp_linear_forward adds
 * the adapters' terms to each product, to gate and up before the
 * activation. */
static void add_shared_expert(sp_forward *f, const sp_moe *moe) {
    sp_moe_scratch *s = f->moe;
    const int T = f->n_rows;
    const size_t D = (size_t)moe->hidden;
    sp_linear_forward(f, &moe->shared_gate_proj, f->xn, s->gate);
    sp_linear_forward(f, &moe->shared_up, f->xn, s->up);
    activation(moe)(s->gate, s->up, T * (int)moe->shared_gate_proj.w.rows);
    sp_linear_forward(f, &moe->shared_down, s->gate, s->x);
    const bool gated = moe->shared_expert_gate.w.rows > 0;
    if (gated) sp_linear_forward(f, &moe->shared_expert_gate, f->xn, s->logits);
    for (int t = 0; t < T; t++) {
        float g = gated ? 1.0f / (1.0f + expf(-s->logits[t])) : 1.0f;
        const float *y = s->x + (size_t)t * D;
        float *o = f->out + (size_t)t * D;
        for (size_t i = 0; i < D; i++) o[i] += g * y[i];
    }
}

void sp_moe_block(sp_forward *f, const sp_moe *moe) {
    sp_moe_block_routed(f, moe, f->xn);
}

/* Each row's top_k experts and weights from the router over router_in. */
static void route_rows(sp_forward *f, const sp_moe *moe, const float *router_in) {
    sp_moe_scratch *s = f->moe;
    const sp_moe_spec *sp = &moe->spec;
    const int T = f->n_rows, E = sp->n_experts, k = sp->top_k;
    const size_t D = (size_t)moe->hidden;
    if (moe->router_norm) { /* s->x is free until the rows are gathered */
        for (int t = 0; t < T; t++)
            sp_rmsnorm(s->x + (size_t)t * D, router_in + (size_t)t * D,
                       moe->router_norm, (int)D, f->m->cfg.rms_norm_eps, 0.0f);
        router_in = s->x;
    }
    sp_linear_forward(f, &moe->router, router_in, s->logits);
    for (int t = 0; t < T; t++) {
        int *idx = s->idx + (size_t)t * k;
        float *w = s->weight + (size_t)t * k;
        if (sp->routing == SP_ROUTE_SIGMOID_GROUPED)
            sp_route_grouped(s->logits + (size_t)t * E, E, k, &sp->groups,
                             sp->norm_topk, s->route_work, idx, w);
        else
            sp_route(s->logits + (size_t)t * E, E, k, sp->routing,
                     sp->norm_topk, idx, w);
        if (moe->expert_scale)
            for (int j = 0; j < k; j++) w[j] *= moe->expert_scale[idx[j]];
    }
}

void sp_moe_block_routed(sp_forward *f, const sp_moe *moe, const float *router_in) {
    if (f->status) return;
    if ((f->status = reserve(f, moe))) return;
    sp_moe_scratch *s = f->moe;
    const sp_moe_spec *sp = &moe->spec;
    const int T = f->n_rows, k = sp->top_k;
    const size_t D = (size_t)moe->hidden;

    route_rows(f, moe, router_in);
    group_by_expert(s, T * k, sp->n_experts);
    for (int p = 0; p < T * k; p++)
        memcpy(s->x + (size_t)p * D, f->xn + (size_t)(s->order[p] / k) * D,
               D * sizeof(float));
    run_experts(f, moe, s);
    for (int t = 0; t < T; t++) {
        float *o = f->out + (size_t)t * D;
        memset(o, 0, D * sizeof(float));
        for (int j = 0; j < k; j++) {
            const float w = s->weight[(size_t)t * k + j];
            const float *y = s->x + (size_t)s->pos[(size_t)t * k + j] * D;
            for (size_t i = 0; i < D; i++) o[i] += w * y[i];
        }
    }
    if (sp->shared_inter > 0) add_shared_expert(f, moe);
}

/* ---- Qwen-style MoE configs (qwen3_moe, qwen3_next) ---- */

spindle_status sp_moe_qwen_layers(const spindle_model *m, bool *is_moe,
                                  spindle_error *err) {
    int step;
    spindle_status st = sp_model_int(m, "decoder_sparse_step", false, 1, 1,
                                1 << 30, &step, err);
    if (st) return st;
    for (int l = 0; l < m->cfg.n_layers; l++) is_moe[l] = (l + 1) % step == 0;
    const cJSON *only =
        cJSON_GetObjectItemCaseSensitive(m->cfg.json, "mlp_only_layers");
    if (!only || cJSON_IsNull(only)) return SPINDLE_OK;
    if (!cJSON_IsArray(only))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: 'mlp_only_layers' must be a list of "
                       "layer indices", m->dir);
    const cJSON *e;
    cJSON_ArrayForEach(e, only) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
            return sp_fail(err, SPINDLE_ERR_FORMAT,
                           "%s/config.json: 'mlp_only_layers' holds a value "
                           "that is not a layer index", m->dir);
        /* (an index past the last layer names no layer, as in mlx-lm) */
        if (e->valuedouble >= 0 && e->valuedouble < m->cfg.n_layers)
            is_moe[(int)e->valuedouble] = false;
    }
    return SPINDLE_OK;
}

spindle_status sp_moe_qwen_spec(const spindle_model *m, sp_moe_spec *spec,
                                spindle_error *err) {
    const sp_model_config *c = &m->cfg;
    int experts = 0, used = 0, inter = 0;
    spindle_status st;
    if ((st = sp_model_int(m, "num_experts", true, 0, 1, 1 << 16, &experts, err)) ||
        (st = sp_model_int(m, "num_experts_per_tok", true, 0, 1, 1 << 16, &used,
                      err)))
        return st;
    if (used > experts)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: num_experts_per_tok %d exceeds "
                       "num_experts %d", m->dir, used, experts);
    /* llama.cpp's n_ff_exp fallback for GGUF files without the key. */
    bool derive = m->gguf && !cJSON_GetObjectItemCaseSensitive(
                                 c->json, "moe_intermediate_size");
    if (derive) inter = c->intermediate_size / used;
    else if ((st = sp_model_int(m, "moe_intermediate_size", true, 0, 1, 1 << 30,
                           &inter, err)))
        return st;
    if (inter < 1)
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: no expert feed-forward length", m->dir);
    *spec = (sp_moe_spec){
        .n_experts = experts,
        .top_k = used,
        .inter = inter,
        .routing = SP_ROUTE_SOFTMAX_TOPK,
        .norm_topk = m->gguf || sp_config_bool(c, "norm_topk_prob", false),
        .router = "gate",
        .stacked = "switch_mlp",
        .per_expert = "experts",
    };
    return SPINDLE_OK;
}

/* A config value that mlx-lm accepts only in one spelling. */
static spindle_status expect_string(const spindle_model *m, const char *key,
                                    const char *want, spindle_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->cfg.json, key);
    if (!v || cJSON_IsNull(v) ||
        (cJSON_IsString(v) && !strcmp(v->valuestring, want)))
        return SPINDLE_OK;
    return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                   "%s/config.json: %s '%s' is not supported (only '%s')",
                   m->dir, key, cJSON_IsString(v) ? v->valuestring : "?",
                   want);
}

spindle_status sp_moe_grouped_spec(const spindle_model *m,
                                   const sp_moe_grouped_defaults *dflt,
                                   sp_moe_spec *spec, spindle_error *err) {
    memset(spec, 0, sizeof *spec);
    int experts, used = 0, inter = 0, shared, groups, topk_groups;
    spindle_status st;
    if ((st = sp_model_int(m, "n_routed_experts", false, dflt->n_routed, 1,
                           1 << 16, &experts, err)) || !experts)
        return st;
    if ((st = sp_model_int(m, "num_experts_per_tok", false, dflt->top_k, 1,
                           experts, &used, err)) ||
        (st = sp_model_int(m, "moe_intermediate_size", true, 0, 1, 1 << 30,
                           &inter, err)) ||
        (st = sp_model_int(m, "n_shared_experts", false, dflt->n_shared, 0,
                           1 << 10, &shared, err)) ||
        (st = sp_model_int(m, "n_group", false, 1, 1, experts, &groups,
                           err)) ||
        (st = sp_model_int(m, "topk_group", false, 1, 1, groups,
                           &topk_groups, err)) ||
        (st = expect_string(m, "topk_method", "noaux_tc", err)) ||
        (st = expect_string(m, "scoring_func", "sigmoid", err)))
        return st;
    if (experts % groups || (groups > 1 && experts / groups < 2) ||
        used > topk_groups * (experts / groups))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s/config.json: %d experts in n_group %d groups, "
                       "topk_group %d, cannot give num_experts_per_tok %d",
                       m->dir, experts, groups, topk_groups, used);
    *spec = (sp_moe_spec){
        .n_experts = experts,
        .top_k = used,
        .inter = inter,
        .routing = SP_ROUTE_SIGMOID_GROUPED,
        .norm_topk = sp_config_bool(&m->cfg, "norm_topk_prob", true),
        .router = "gate",
        .score_bias = "gate.e_score_correction_bias",
        .groups = {.n_group = groups, .topk_group = topk_groups,
                   .scale = (float)sp_config_num(&m->cfg,
                                                 "routed_scaling_factor",
                                                 dflt->routed_scale)},
        .stacked = "switch_mlp",
        .per_expert = "experts",
        .shared_inter = (int64_t)shared * inter,
        .shared = "shared_experts",
    };
    return SPINDLE_OK;
}

spindle_status sp_json_replace(cJSON *json, const char *key, cJSON *item,
                               spindle_error *err) {
    cJSON_DeleteItemFromObjectCaseSensitive(json, key);
    if (!item || !cJSON_AddItemToObject(json, key, item)) {
        cJSON_Delete(item);
        return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    }
    return SPINDLE_OK;
}

/* A count that may be 0 (`{arch}.key`, absent: 0) into json[name]. */
static spindle_status put_count0(const sp_gguf *g, const char *arch,
                                 const char *key, const char *name,
                                 cJSON *json, spindle_error *err) {
    double x = 0;
    bool found;
    spindle_status st = sp_gguf_arch_real(g, arch, key, &x, &found, err);
    if (st) return st;
    if (x != floor(x) || x < 0 || x > (double)(1 << 20))
        return sp_fail(err, SPINDLE_ERR_FORMAT, "%s: '%s.%s' is not a count",
                       sp_gguf_path(g), arch, key);
    return sp_json_replace(json, name, cJSON_CreateNumber(x), err);
}

spindle_status sp_moe_gguf_routing(const sp_gguf *g, const char *arch,
                                   bool absent_sigmoid, cJSON *json,
                                   spindle_error *err) {
    double gating = absent_sigmoid ? 2 : 1;
    bool norm = false, found;
    spindle_status st = put_count0(g, arch, "leading_dense_block_count",
                                   "first_k_dense_replace", json, err);
    if (!st) st = put_count0(g, arch, "expert_shared_count",
                             "n_shared_experts", json, err);
    if (!st) st = sp_gguf_arch_real(g, arch, "expert_gating_func", &gating,
                                    &found, err);
    if (st) return st;
    if (gating != 2)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "%s: '%s.expert_gating_func' %s is not supported "
                       "(only 2, sigmoid)", sp_gguf_path(g), arch,
                       found ? (gating == 1 ? "1 (softmax)" : "(other)")
                             : "absent (softmax)");
    const sp_gguf_value *v = sp_gguf_arch_value(g, arch, "expert_weights_norm");
    if (v && !sp_gguf_value_bool(v, &norm))
        return sp_fail(err, SPINDLE_ERR_FORMAT,
                       "%s: '%s.expert_weights_norm' is not a bool",
                       sp_gguf_path(g), arch);
    if ((st = sp_json_replace(json, "scoring_func",
                              cJSON_CreateString("sigmoid"), err)))
        return st;
    return sp_json_replace(json, "norm_topk_prob", cJSON_CreateBool(norm),
                           err);
}
