/* spindle_adapter_stack: several adapters as one, their low-rank terms
 * summed: A's rows concatenated, B's columns concatenated and scaled. */
#include "models/lora.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* Slot `slot` of the stack: [sum rank][in] and [out][sum rank]. */
static spindle_status stack_pair(spindle_adapter *out,
                                 const spindle_adapter *const *ads,
                                 const float *scales, int n, int slot,
                                 spindle_error *err) {
    int64_t rank = 0, in = 0, rows = 0;
    for (int i = 0; i < n; i++) {
        const sp_lora_pair *p = &ads[i]->pairs[slot];
        if (!p->a.data) continue;
        rank += p->a.rows;
        in = p->a.cols;
        rows = p->b.rows;
    }
    if (!rank) return SPINDLE_OK;
    float *a = malloc((size_t)(rank * in) * sizeof *a);
    float *b = malloc((size_t)(rank * rows) * sizeof *b);
    sp_lora_pair *dst = &out->pairs[slot];
    dst->a = (sp_weight){.type = SP_W_F32, .rows = rank, .cols = in, .data = a};
    dst->b = (sp_weight){.type = SP_W_F32, .rows = rows, .cols = rank, .data = b};
    if (!a || !b) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const sp_lora_pair *p = &ads[i]->pairs[slot];
        if (!p->a.data) continue;
        int64_t r = p->a.rows;
        float s = ads[i]->scale * (scales && scales[i] != 0 ? scales[i] : 1.0f);
        memcpy(a + at * in, p->a.data, (size_t)(r * in) * sizeof *a);
        const float *pb = p->b.data;
        for (int64_t o = 0; o < rows; o++)
            for (int64_t k = 0; k < r; k++)
                b[o * rank + at + k] = s * pb[o * r + k];
        at += r;
    }
    if (rank > out->cfg.rank) out->cfg.rank = (int)rank;
    out->n_pairs++;
    return SPINDLE_OK;
}

spindle_status spindle_adapter_stack(spindle_model *m,
                                     const spindle_adapter *const *adapters,
                                     const float *scales, int n,
                                     spindle_adapter **out, spindle_error *err) {
    sp_error_clear(err);
    if (!m || !adapters || n < 1 || !out)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "no adapters to stack");
    *out = NULL;
    for (int i = 0; i < n; i++)
        if (!adapters[i] || adapters[i]->model != m)
            return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                           "adapter %d is NULL or of another model", i);
    spindle_adapter *a = sp_adapter_new(m);
    if (!a) return sp_fail(err, SPINDLE_ERR_MEMORY, "out of memory");
    a->cfg = adapters[0]->cfg;
    a->cfg.rank = 0;
    a->scale = 1.0f;
    /* every adapter of m has the same slots */
    spindle_status st = SPINDLE_OK;
    for (int i = 0; i < a->n_slots && !st; i++)
        st = stack_pair(a, adapters, scales, n, i, err);
    if (st) {
        sp_adapter_release(a);
        return st;
    }
    a->cfg.scale = 1.0;
    sp_adapter_finish(a);
    *out = a;
    return SPINDLE_OK;
}
