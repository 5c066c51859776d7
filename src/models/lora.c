/* LoRA adapters in the forward pass: the low-rank terms of each adapter
 * over its group of rows, after the one base product over all rows (for
 * routed experts, per expert and adapter after the grouped expert
 * products); the adapter's slots and reference count. Loading is in
 * lora_load.c. */
#include "models/lora.h"
#include "base/error.h"
#include "compute/matmul/matmul.h"
#include "models/moe.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* A group of rows multiplied by one pair: rows[off .. off + n) of the
 * scratch, gathered into x, t and u at the same row offsets. */
typedef struct lora_group {
    const sp_lora_pair *pr;
    int off, n;
} lora_group;

struct sp_lora_scratch {
    float *x, *t, *u, *row_scale;
    int *rows;                 /* the rows (or grouped positions) to adapt */
    int *row_seq;              /* [T] each row's sequence */
    const spindle_adapter **adapters; /* the pass's distinct adapters */
    lora_group *groups;
    size_t cap_x, cap_t, cap_u, cap_scale, cap_rows, cap_seq, cap_ads,
        cap_groups;
};

void sp_lora_scratch_free(sp_lora_scratch *s) {
    if (!s) return;
    free(s->x); free(s->t); free(s->u); free(s->row_scale);
    free(s->rows); free(s->row_seq); free(s->adapters); free(s->groups);
    free(s);
}

/* Grow array p (capacity cap) to n elements; false when out of memory,
 * p unchanged. Needs `void *tmp` in scope. */
#define GROW(p, cap, n)                                                    \
    ((size_t)(n) <= (cap) ||                                               \
     ((tmp = realloc((p), (size_t)(n) * sizeof *(p))) != NULL &&           \
      ((p) = tmp, (cap) = (size_t)(n), true)))

/* ------------------------------------------------------------- the adapter */

static int max_experts(const spindle_model *m) {
    int n = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const sp_moe *moe = sp_lora_moe(m, l);
        if (moe && moe->spec.n_experts > n) n = moe->spec.n_experts;
    }
    return n;
}

/* The slot blocks, in sp_lora_slot's order: q..down of each layer, the
 * routers, 3 projections per routed expert, then per layer the shared
 * expert's gate, up and down and the shared-expert gate, then per layer
 * the DeltaNet's projections. */
enum { OWN_PER_LAYER = SP_LORA_ROUTER, SHARED_PER_LAYER = 4 };

static int routers_start(const spindle_adapter *a) {
    return a->model->cfg.n_layers * OWN_PER_LAYER;
}
static int experts_start(const spindle_adapter *a) {
    return routers_start(a) + a->model->cfg.n_layers;
}
static int shared_start(const spindle_adapter *a) {
    return experts_start(a) + a->model->cfg.n_layers * 3 * a->max_experts;
}
static int linear_start(const spindle_adapter *a) {
    return shared_start(a) + a->model->cfg.n_layers * SHARED_PER_LAYER;
}

spindle_adapter *sp_adapter_new(const spindle_model *m) {
    spindle_adapter *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->model = m;
    atomic_init(&a->refs, 1);
    a->max_experts = max_experts(m);
    const int64_t L = m->cfg.n_layers;
    const int64_t n = L * (OWN_PER_LAYER + 1 + SHARED_PER_LAYER +
                           SP_LORA_N_LINEAR) +
                      L * 3 * a->max_experts;
    if (n > INT32_MAX / 2) {
        free(a);
        return NULL;
    }
    a->n_slots = (int)n;
    a->pairs = calloc((size_t)n, sizeof *a->pairs);
    a->expert_layers = calloc((size_t)L, sizeof *a->expert_layers);
    if (!a->pairs || !a->expert_layers) {
        free(a->pairs);
        free(a->expert_layers);
        free(a);
        return NULL;
    }
    return a;
}

int sp_lora_slot(const spindle_adapter *a, int l, sp_lora_module m, int e) {
    const int L = a->model->cfg.n_layers;
    if (l < 0 || l >= L || (int)m < 0 || m >= SP_LORA_N_MODULES) return -1;
    if (e == SP_LORA_OWN && m < SP_LORA_ROUTER) return l * OWN_PER_LAYER + (int)m;
    if (e == SP_LORA_OWN && m == SP_LORA_ROUTER) return routers_start(a) + l;
    if (e == SP_LORA_OWN && m == SP_LORA_SHARED_GATE)
        return shared_start(a) + l * SHARED_PER_LAYER + 3;
    if (e == SP_LORA_OWN && m >= SP_LORA_LINEAR_FIRST)
        return linear_start(a) + l * SP_LORA_N_LINEAR +
               (int)(m - SP_LORA_LINEAR_FIRST);
    if (m < SP_LORA_GATE || m > SP_LORA_DOWN) return -1;
    if (e == SP_LORA_SHARED)
        return shared_start(a) + l * SHARED_PER_LAYER + (int)(m - SP_LORA_GATE);
    if (e < 0 || e >= a->max_experts) return -1;
    return experts_start(a) +
           (l * 3 + (int)(m - SP_LORA_GATE)) * a->max_experts + e;
}

void sp_lora_slot_place(const spindle_adapter *a, int i, int *l,
                        sp_lora_module *m, int *e) {
    *e = SP_LORA_OWN;
    if (i < routers_start(a)) {
        *l = i / OWN_PER_LAYER;
        *m = (sp_lora_module)(i % OWN_PER_LAYER);
    } else if (i < experts_start(a)) {
        *l = i - routers_start(a);
        *m = SP_LORA_ROUTER;
    } else if (i < shared_start(a)) {
        i -= experts_start(a);
        *e = i % a->max_experts;
        i /= a->max_experts;
        *m = (sp_lora_module)(SP_LORA_GATE + i % 3);
        *l = i / 3;
    } else if (i >= linear_start(a)) {
        i -= linear_start(a);
        *l = i / SP_LORA_N_LINEAR;
        *m = (sp_lora_module)(SP_LORA_LINEAR_FIRST + i % SP_LORA_N_LINEAR);
    } else {
        i -= shared_start(a);
        *l = i / SHARED_PER_LAYER;
        i %= SHARED_PER_LAYER;
        *m = i == 3 ? SP_LORA_SHARED_GATE : (sp_lora_module)(SP_LORA_GATE + i);
        *e = i == 3 ? SP_LORA_OWN : SP_LORA_SHARED;
    }
}

void sp_adapter_retain(const spindle_adapter *a) {
    if (a) atomic_fetch_add(&((spindle_adapter *)a)->refs, 1);
}

void sp_adapter_release(const spindle_adapter *ca) {
    spindle_adapter *a = (spindle_adapter *)ca;
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
    for (int i = 0; a->pairs && i < a->n_slots; i++) {
        free((void *)a->pairs[i].a.data);
        free((void *)a->pairs[i].b.data);
    }
    free(a->pairs);
    free(a->expert_layers);
    free(a);
}

void spindle_adapter_unload(spindle_adapter *a) { sp_adapter_release(a); }

size_t spindle_adapter_key(const spindle_adapter *a, float scale,
                           unsigned char out[SPINDLE_ADAPTER_KEY_BYTES]) {
    if (!a) return 0;
    if (scale == 0) scale = 1.0f;
    memcpy(out, a->identity, sizeof a->identity);
    memcpy(out + sizeof a->identity, &scale, sizeof scale);
    return SPINDLE_ADAPTER_KEY_BYTES;
}

static void identity(spindle_adapter *a) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) {               /* no identity to compare: every byte 0xff */
        memset(a->identity, 0xff, sizeof a->identity);
        return;
    }
    XXH3_128bits_reset(h);
    XXH3_128bits_update(h, &a->scale, sizeof a->scale);
    for (int32_t i = 0; i < a->n_slots; i++) {
        const sp_lora_pair *p = &a->pairs[i];
        if (!p->a.data) continue;
        const int64_t shape[3] = {p->a.rows, p->a.cols, p->b.rows};
        XXH3_128bits_update(h, &i, sizeof i);
        XXH3_128bits_update(h, shape, sizeof shape);
        XXH3_128bits_update(h, p->a.data, (size_t)(p->a.rows * p->a.cols) * sizeof(float));
        XXH3_128bits_update(h, p->b.data, (size_t)(p->b.rows * p->b.cols) * sizeof(float));
    }
    XXH128_canonicalFromHash((XXH128_canonical_t *)a->identity, XXH3_128bits_digest(h));
    XXH3_freeState(h);
}

void sp_adapter_finish(spindle_adapter *a) {
    identity(a);
    for (int i = 0; i < a->n_slots; i++) {
        int l, e;
        sp_lora_module m;
        sp_lora_slot_place(a, i, &l, &m, &e);
        if (e >= 0 && a->pairs[i].a.data) a->expert_layers[l] = true;
    }
}

float spindle_adapter_scale(const spindle_adapter *a) { return a ? a->scale : 0; }
int spindle_adapter_rank(const spindle_adapter *a) { return a ? a->cfg.rank : 0; }

const sp_lora_pair *sp_adapter_pair(const spindle_adapter *a, int l,
                                    sp_lora_module m, int e) {
    int i = a ? sp_lora_slot(a, l, m, e) : -1;
    return i >= 0 && a->pairs[i].a.data ? &a->pairs[i] : NULL;
}

/* ------------------------------------------------------------ the forward */

/* Which layer, projection and expert (SP_LORA_OWN or SP_LORA_SHARED)
 * `lin` is: one of m->layers' own, an MoE layer's router, shared expert
 * projection or shared-expert gate, or one the family keeps (the
 * DeltaNet's, through its lora_linear hook). */
static bool locate(const spindle_model *m, const sp_linear *lin, int *l,
                   sp_lora_module *mod, int *e) {
    /* Integers: comparing pointers into different objects is undefined. */
    uintptr_t base = (uintptr_t)m->layers, p = (uintptr_t)lin;
    size_t span = (size_t)m->cfg.n_layers * sizeof *m->layers;
    *e = SP_LORA_OWN;
    if (p >= base && p - base < span) {
        size_t off = (size_t)(p - base) % sizeof *m->layers;
        static const size_t fields[SP_LORA_ROUTER] = {
            offsetof(sp_layer, q),    offsetof(sp_layer, k),
            offsetof(sp_layer, v),    offsetof(sp_layer, o),
            offsetof(sp_layer, gate), offsetof(sp_layer, up),
            offsetof(sp_layer, down),
        };
        for (int i = 0; i < SP_LORA_ROUTER; i++)
            if (off == fields[i]) {
                *l = (int)((p - base) / sizeof *m->layers);
                *mod = (sp_lora_module)i;
                return true;
            }
        return false;
    }
    for (int i = 0; i < m->cfg.n_layers && m->arch->lora_linear; i++)
        for (int j = SP_LORA_LINEAR_FIRST; j < SP_LORA_N_MODULES; j++)
            if (lin == m->arch->lora_linear(m, i, (sp_lora_module)j)) {
                *l = i;
                *mod = (sp_lora_module)j;
                return true;
            }
    for (int i = 0; i < m->cfg.n_layers; i++) {
        const sp_moe *moe = sp_lora_moe(m, i);
        if (!moe) continue;
        const struct { const sp_linear *lin; sp_lora_module mod; int e; } own[] = {
            {&moe->router, SP_LORA_ROUTER, SP_LORA_OWN},
            {&moe->shared_gate_proj, SP_LORA_GATE, SP_LORA_SHARED},
            {&moe->shared_up, SP_LORA_UP, SP_LORA_SHARED},
            {&moe->shared_down, SP_LORA_DOWN, SP_LORA_SHARED},
            {&moe->shared_expert_gate, SP_LORA_SHARED_GATE, SP_LORA_OWN},
        };
        for (size_t j = 0; j < sizeof own / sizeof *own; j++)
            if (lin == own[j].lin) {
                *l = i;
                *mod = own[j].mod;
                *e = own[j].e;
                return true;
            }
    }
    return false;
}

/* The pass's distinct adapters into s->adapters; their count, -1 when out
 * of memory. */
static int pass_adapters(sp_forward *f) {
    sp_lora_scratch *s = f->lora;
    void *tmp;
    if (!GROW(s->adapters, s->cap_ads, f->n_seqs)) return -1;
    int n = 0;
    for (int q = 0; q < f->n_seqs; q++) {
        const spindle_adapter *a = f->seqs[q].adapter;
        bool seen = !a;
        for (int i = 0; i < n && !seen; i++) seen = s->adapters[i] == a;
        if (!seen) s->adapters[n++] = a;
    }
    return n;
}

/* Room for n gathered rows of width in, rank and out, and for the pass's
 * per-row and per-sequence arrays. */
static bool reserve(sp_forward *f, int n, int in, int rank, int out) {
    if (!f->lora && !(f->lora = calloc(1, sizeof *f->lora))) return false;
    sp_lora_scratch *s = f->lora;
    void *tmp;
    return GROW(s->x, s->cap_x, (size_t)n * in) &&
           GROW(s->t, s->cap_t, (size_t)n * rank) &&
           GROW(s->u, s->cap_u, (size_t)n * out) &&
           GROW(s->row_scale, s->cap_scale, n) &&
           GROW(s->rows, s->cap_rows, n) &&
           GROW(s->row_seq, s->cap_seq, f->n_rows);
}

static void fail_memory(sp_forward *f) {
    if (!f->status)
        f->status = sp_fail(f->err, SPINDLE_ERR_MEMORY,
                            "out of memory for LoRA scratch");
}

/* y[rows[i]] += row_scale[i] * B (A x[rows[i]]) for the n rows listed:
 * gathered into gx, multiplied (on pool's threads; NULL: the caller's
 * alone) through gt into gu, added back in place. */
static void lowrank(sp_pool *pool, const sp_lora_pair *pr, const int *rows,
                    const float *row_scale, int n, const float *x, float *y,
                    float *gx, float *gt, float *gu) {
    const size_t in = (size_t)pr->a.cols, rank = (size_t)pr->a.rows,
                 out = (size_t)pr->b.rows;
    for (int i = 0; i < n; i++)
        memcpy(gx + i * in, x + (size_t)rows[i] * in, in * sizeof *x);
    sp_matmul(pool, &pr->a, gx, n, gt);
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < rank; j++) gt[i * rank + j] *= row_scale[i];
    sp_matmul(pool, &pr->b, gt, n, gu);
    for (int i = 0; i < n; i++) {
        float *dst = y + (size_t)rows[i] * out;
        const float *src = gu + i * out;
        for (size_t o = 0; o < out; o++) dst[o] += src[o];
    }
}

void sp_lora_apply(sp_forward *f, const sp_linear *lin, const float *x,
                   float *y) {
    int l, e;
    sp_lora_module mod;
    if (f->status || !locate(f->m, lin, &l, &mod, &e)) return;
    if (!reserve(f, 0, 0, 0, 0)) return fail_memory(f);
    int n_ads = pass_adapters(f);
    if (n_ads < 0) return fail_memory(f);
    for (int i = 0; i < n_ads; i++) {
        const spindle_adapter *a = f->lora->adapters[i];
        const sp_lora_pair *pr = sp_adapter_pair(a, l, mod, e);
        if (!pr) continue;
        int n = 0;
        for (int q = 0; q < f->n_seqs; q++)
            if (f->seqs[q].adapter == a) n += f->seqs[q].n_rows;
        if (!reserve(f, n, (int)pr->a.cols, (int)pr->a.rows, (int)pr->b.rows))
            return fail_memory(f);
        sp_lora_scratch *s = f->lora;
        n = 0;
        for (int q = 0; q < f->n_seqs; q++) {
            const sp_forward_seq *sq = &f->seqs[q];
            if (sq->adapter != a) continue;
            for (int t = 0; t < sq->n_rows; t++, n++) {
                s->rows[n] = sq->first_row + t;
                s->row_scale[n] = a->scale * sq->adapter_scale;
            }
        }
        lowrank(f->pool, pr, s->rows, s->row_scale, n, x, y, s->x, s->t, s->u);
    }
}

/* ----------------------------------------------------- the routed experts */

bool sp_lora_adapts_experts(const sp_forward *f, int l) {
    for (int q = 0; q < f->n_seqs; q++) {
        const spindle_adapter *a = f->seqs[q].adapter;
        if (a && l >= 0 && l < a->model->cfg.n_layers && a->expert_layers[l])
            return true;
    }
    return false;
}

/* The (expert, adapter) groups of module m over the routed positions:
 * rows and scales into the scratch, groups into s->groups; their count
 * (-1: out of memory), the largest rank into *rank. */
static int expert_groups(sp_forward *f, const sp_lora_routed *r,
                         sp_lora_module m, int *rank) {
    sp_lora_scratch *s = f->lora;
    void *tmp;
    for (int q = 0; q < f->n_seqs; q++)
        for (int t = 0; t < f->seqs[q].n_rows; t++)
            s->row_seq[f->seqs[q].first_row + t] = q;
    int n_ads = pass_adapters(f);
    if (n_ads < 0 || !GROW(s->groups, s->cap_groups, (size_t)r->n_experts * n_ads))
        return -1;
    int n = 0, at = 0;
    *rank = 0;
    for (int e = 0; e < r->n_experts; e++)
        for (int i = 0; i < n_ads; i++) {
            const spindle_adapter *a = s->adapters[i];
            const sp_lora_pair *pr = sp_adapter_pair(a, r->layer, m, e);
            if (!pr) continue;
            lora_group g = {pr, at, 0};
            for (int p = r->first[e]; p < r->first[e + 1]; p++) {
                const sp_forward_seq *sq =
                    &f->seqs[s->row_seq[r->order[p] / r->top_k]];
                if (sq->adapter != a) continue;
                s->rows[at] = p;
                s->row_scale[at++] = a->scale * sq->adapter_scale;
            }
            if ((g.n = at - g.off) == 0) continue;
            s->groups[n++] = g;
            if (pr->a.rows > *rank) *rank = (int)pr->a.rows;
        }
    return n;
}

typedef struct expert_ctx {
    sp_lora_scratch *s;
    const float *x;
    float *y;
    int in, rank, out;
} expert_ctx;

/* Groups [g0, g1) on this thread; each writes only its own positions. */
static void run_groups(void *ctx, int64_t g0, int64_t g1, int thread_id) {
    (void)thread_id;
    const expert_ctx *c = ctx;
    sp_lora_scratch *s = c->s;
    for (int64_t i = g0; i < g1; i++) {
        const lora_group *g = &s->groups[i];
        const size_t off = (size_t)g->off;
        lowrank(NULL, g->pr, s->rows + off, s->row_scale + off, g->n, c->x,
                c->y, s->x + off * c->in, s->t + off * c->rank,
                s->u + off * c->out);
    }
}

void sp_lora_apply_experts(sp_forward *f, const sp_lora_routed *r,
                           sp_lora_module m, const float *x, float *y) {
    if (f->status) return;
    const sp_lora_pair *any = NULL;
    for (int q = 0; q < f->n_seqs && !any; q++)
        for (int e = 0; e < r->n_experts && !any; e++)
            any = sp_adapter_pair(f->seqs[q].adapter, r->layer, m, e);
    if (!any) return;
    /* Every pair of this module has the same in and out; ranks differ
     * between adapters, so the scratch is sized for the largest. */
    const int positions = r->first[r->n_experts];
    const int in = (int)any->a.cols, out = (int)any->b.rows;
    int rank = 0;
    if (!reserve(f, positions, in, 0, out)) return fail_memory(f);
    int n = expert_groups(f, r, m, &rank);
    if (n < 0 || !reserve(f, positions, in, rank, out)) return fail_memory(f);
    expert_ctx c = {f->lora, x, y, in, rank, out};
    sp_pool_for(f->pool, n, 1, run_groups, &c);
}
