/* LoRA adapters in the forward pass: the low-rank terms of each adapter
 * over its group of rows, after the one base product over all rows; and
 * the adapter's reference count. Loading is in lora_load.c. */
#include "models/lora.h"
#include "base/error.h"
#include "compute/matmul/matmul.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct sp_lora_scratch {
    float *x, *t, *u, *row_scale;
    size_t cap_x, cap_t, cap_u, cap_rows;
};

void sp_lora_scratch_free(sp_lora_scratch *s) {
    if (!s) return;
    free(s->x); free(s->t); free(s->u); free(s->row_scale);
    free(s);
}

static bool grow(float **p, size_t *cap, size_t n) {
    if (n <= *cap) return true;
    float *q = realloc(*p, n * sizeof *q);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

void sp_adapter_retain(const spindle_adapter *a) {
    if (a) atomic_fetch_add(&((spindle_adapter *)a)->refs, 1);
}

void sp_adapter_release(const spindle_adapter *ca) {
    spindle_adapter *a = (spindle_adapter *)ca;
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
    int n = a->model->cfg.n_layers * SP_LORA_N_MODULES;
    for (int i = 0; a->pairs && i < n; i++) {
        free((void *)a->pairs[i].a.data);
        free((void *)a->pairs[i].b.data);
    }
    free(a->pairs);
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

void sp_adapter_identity(spindle_adapter *a) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) {               /* no identity to compare: every byte 0xff */
        memset(a->identity, 0xff, sizeof a->identity);
        return;
    }
    XXH3_128bits_reset(h);
    XXH3_128bits_update(h, &a->scale, sizeof a->scale);
    int n = a->model->cfg.n_layers * SP_LORA_N_MODULES;
    for (int32_t i = 0; i < n; i++) {
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

float spindle_adapter_scale(const spindle_adapter *a) { return a ? a->scale : 0; }
int spindle_adapter_rank(const spindle_adapter *a) { return a ? a->cfg.rank : 0; }

const sp_lora_pair *sp_adapter_pair(const spindle_adapter *a, int l,
                                    sp_lora_module m) {
    if (!a || l < 0 || l >= a->model->cfg.n_layers) return NULL;
    const sp_lora_pair *p = &a->pairs[l * SP_LORA_N_MODULES + m];
    return p->a.data ? p : NULL;
}

/* Which layer and projection `lin` is, when it lives in m->layers. */
static bool locate(const spindle_model *m, const sp_linear *lin, int *l,
                   sp_lora_module *mod) {
    /* Integers: comparing pointers into different objects is undefined. */
    uintptr_t base = (uintptr_t)m->layers, p = (uintptr_t)lin;
    size_t span = (size_t)m->cfg.n_layers * sizeof *m->layers;
    if (p < base || p - base >= span) return false;
    size_t off = (size_t)(p - base) % sizeof *m->layers;
    static const size_t fields[SP_LORA_N_MODULES] = {
        offsetof(sp_layer, q),    offsetof(sp_layer, k),
        offsetof(sp_layer, v),    offsetof(sp_layer, o),
        offsetof(sp_layer, gate), offsetof(sp_layer, up),
        offsetof(sp_layer, down),
    };
    for (int i = 0; i < SP_LORA_N_MODULES; i++)
        if (off == fields[i]) {
            *l = (int)((p - base) / sizeof *m->layers);
            *mod = (sp_lora_module)i;
            return true;
        }
    return false;
}

/* Rows of every sequence from `first` on that uses adapter a. */
static int group_rows(const sp_forward *f, int first, const spindle_adapter *a) {
    int n = 0;
    for (int s = first; s < f->n_seqs; s++)
        if (f->seqs[s].adapter == a) n += f->seqs[s].n_rows;
    return n;
}

static bool reserve(sp_forward *f, int n, int in, int rank, int out) {
    if (!f->lora && !(f->lora = calloc(1, sizeof *f->lora))) return false;
    sp_lora_scratch *s = f->lora;
    return grow(&s->x, &s->cap_x, (size_t)n * in) &&
           grow(&s->t, &s->cap_t, (size_t)n * rank) &&
           grow(&s->u, &s->cap_u, (size_t)n * out) &&
           grow(&s->row_scale, &s->cap_rows, (size_t)n);
}

/* y += scale * B (A x) for the rows of the sequences (from `first` on)
 * that use adapter a: gathered, two products for the whole group, added
 * back in place. */
static void apply_group(sp_forward *f, int first, const spindle_adapter *a,
                        const sp_lora_pair *pr, const float *x, float *y) {
    int in = (int)pr->a.cols, rank = (int)pr->a.rows, out = (int)pr->b.rows;
    int n = group_rows(f, first, a);
    if (!reserve(f, n, in, rank, out)) {
        if (!f->status)
            f->status = sp_fail(f->err, SPINDLE_ERR_MEMORY,
                                "out of memory for LoRA scratch");
        return;
    }
    sp_lora_scratch *s = f->lora;
    int k = 0;
    for (int q = first; q < f->n_seqs; q++) {
        const sp_forward_seq *sq = &f->seqs[q];
        if (sq->adapter != a) continue;
        memcpy(s->x + (size_t)k * in, x + (size_t)sq->first_row * in,
               (size_t)sq->n_rows * in * sizeof *x);
        for (int t = 0; t < sq->n_rows; t++)
            s->row_scale[k + t] = a->scale * sq->adapter_scale;
        k += sq->n_rows;
    }
    sp_matmul(f->pool, &pr->a, s->x, n, s->t);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < rank; i++) s->t[(size_t)r * rank + i] *= s->row_scale[r];
    sp_matmul(f->pool, &pr->b, s->t, n, s->u);
    k = 0;
    for (int q = first; q < f->n_seqs; q++) {
        const sp_forward_seq *sq = &f->seqs[q];
        if (sq->adapter != a) continue;
        for (int t = 0; t < sq->n_rows; t++, k++) {
            float *dst = y + (size_t)(sq->first_row + t) * out;
            const float *src = s->u + (size_t)k * out;
            for (int o = 0; o < out; o++) dst[o] += src[o];
        }
    }
}

void sp_lora_apply(sp_forward *f, const sp_linear *lin, const float *x,
                   float *y) {
    int l;
    sp_lora_module mod;
    if (f->status || !locate(f->m, lin, &l, &mod)) return;
    for (int s = 0; s < f->n_seqs; s++) {
        const spindle_adapter *a = f->seqs[s].adapter;
        bool seen = !a;
        for (int p = 0; p < s && !seen; p++) seen = f->seqs[p].adapter == a;
        if (seen) continue;
        const sp_lora_pair *pr = sp_adapter_pair(a, l, mod);
        if (pr) apply_group(f, s, a, pr, x, y);
    }
}
