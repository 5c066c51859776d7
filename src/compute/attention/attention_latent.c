/* Multi-head latent attention's absorbed form (ops.h,
 * sp_attention_latent): every query head attends the rows of one KV head,
 * whose first v_dim elements are also the values.
 *
 * The generic kernels read a KV head's rows once per query head (the
 * blocked ones also stop at 256-element heads and 32 heads per KV head),
 * which for MLA's 576-element rows and up to 128 heads means the cache is
 * read 128 times per token. Here a unit of work is one query token and a
 * range of LATENT_CHUNK key positions, for all heads at once: each tile of
 * rows is widened to f32 once into the thread's scratch and every head's
 * scores, online-softmax state and value sum are updated from it while it
 * is in L1/L2. A unit leaves per head its running max, normalizer and
 * unnormalized sum in `partials`; a second pass merges a token's units in
 * order (the flash-decoding split), so the bits depend on the positions
 * and never on the thread count. Scores and sums use the portable kernel's
 * f32 arithmetic (8-lane dot products, precise expf). */
#include "compute/ops.h"
#include "compute/scratch.h"
#include "compute/tensor.h"
#include "base/error.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* Key positions per unit: a multiple of the pool's 32-position blocks, so
 * a tile never crosses one; long enough that a unit's partial is small
 * next to its rows, short enough that a decode step over a few hundred
 * positions still spreads over the threads. */
#define LATENT_CHUNK 128
#define LATENT_TILE 16
#define LANES 8

static float dot_f32(const float *a, const float *b, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
    float s = 0.0f;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void widen_row(float *dst, const unsigned char *row, sp_kv_dtype type,
                      int n) {
    if (type == SP_KV_F32) {
        memcpy(dst, row, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *h = (const uint16_t *)row;
    if (type == SP_KV_BF16)
        for (int i = 0; i < n; i++) dst[i] = sp_bf16_to_f32(h[i]);
    else
        for (int i = 0; i < n; i++) dst[i] = sp_f16_to_f32(h[i]);
}

typedef struct latent_job {
    const sp_attention_args *a;
    int v_dim;
    float *partials;
    int n_units;
    int failed;      /* a thread had no scratch for its tile */
} latent_job;

/* Units of token t: its keys 0 .. first_pos + t in chunks. */
static int units_of(const sp_attention_args *a, int t) {
    return (a->first_pos + t) / LATENT_CHUNK + 1;
}

/* Floats of one unit's partial: per head max, normalizer, v_dim sums. */
static size_t partial_floats(const sp_attention_args *a, int v_dim) {
    return (size_t)a->n_heads * (size_t)(v_dim + 2);
}

size_t sp_attention_latent_partials(const sp_attention_args *a, int v_dim) {
    size_t units = 0;
    for (int t = 0; t < a->n_q; t++) units += (size_t)units_of(a, t);
    return units * partial_floats(a, v_dim);
}

/* One tile of n rows (f32 in kt) into every head's partial. */
static void tile_into_heads(const latent_job *job, int t, const float *kt,
                            int n, float *part) {
    const sp_attention_args *a = job->a;
    const int hd = a->head_dim, vd = job->v_dim;
    for (int h = 0; h < a->n_heads; h++) {
        const float *q = a->q + ((size_t)t * a->n_heads + h) * hd;
        float *m = part + (size_t)h * (vd + 2), *l = m + 1, *o = m + 2;
        float s[LATENT_TILE], tmax = -INFINITY;
        for (int j = 0; j < n; j++) {
            s[j] = a->scale * dot_f32(q, kt + (size_t)j * hd, hd);
            if (s[j] > tmax) tmax = s[j];
        }
        if (tmax > *m) {
            const float c = expf(*m - tmax);
            *l *= c;
            for (int d = 0; d < vd; d++) o[d] *= c;
            *m = tmax;
        }
        for (int j = 0; j < n; j++) {
            const float e = expf(s[j] - *m);
            const float *v = kt + (size_t)j * hd;
            *l += e;
            for (int d = 0; d < vd; d++) o[d] += e * v[d];
        }
    }
}

static void run_unit(const latent_job *job, int64_t u, float *kt) {
    const sp_attention_args *a = job->a;
    int t = 0;
    int64_t first = 0;
    while (first + units_of(a, t) <= u) first += units_of(a, t++);
    const int c = (int)(u - first);
    const int last = a->first_pos + t;
    const int lo = c * LATENT_CHUNK;
    const int hi = lo + LATENT_CHUNK - 1 < last ? lo + LATENT_CHUNK - 1 : last;
    float *part = job->partials + (size_t)u * partial_floats(a, job->v_dim);
    for (int h = 0; h < a->n_heads; h++) {
        float *m = part + (size_t)h * (job->v_dim + 2);
        m[0] = -INFINITY;
        memset(m + 1, 0, (size_t)(job->v_dim + 1) * sizeof(float));
    }
    const size_t es = a->kv.type == SP_KV_F32 ? 4 : 2;
    for (int j0 = lo, n; j0 <= hi; j0 += n) {
        int run;
        const int64_t at = sp_kv_view_row(&a->kv, 0, j0, a->head_dim, &run);
        n = hi + 1 - j0 < LATENT_TILE ? hi + 1 - j0 : LATENT_TILE;
        if (n > run) n = run;
        const unsigned char *rows = (const unsigned char *)a->kv.k + at * es;
        for (int j = 0; j < n; j++)
            widen_row(kt + (size_t)j * a->head_dim,
                      rows + (size_t)j * a->head_dim * es, a->kv.type,
                      a->head_dim);
        tile_into_heads(job, t, kt, n, part);
    }
}

static void units_range(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    latent_job *job = ctx;
    float *kt = sp_scratch_get(SP_SCRATCH_LATENT_TILE,
                               (size_t)LATENT_TILE * job->a->head_dim *
                                   sizeof(float));
    if (!kt) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t u = begin; u < end; u++) run_unit(job, u, kt);
}

/* out[t][h] = the merge of token t's units, in order. */
static void merge_range(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const latent_job *job = ctx;
    const sp_attention_args *a = job->a;
    const int vd = job->v_dim;
    const size_t pf = partial_floats(a, vd);
    for (int64_t i = begin; i < end; i++) {
        const int t = (int)(i / a->n_heads), h = (int)(i % a->n_heads);
        int64_t first = 0;
        for (int k = 0; k < t; k++) first += units_of(a, k);
        const int n = units_of(a, t);
        float *out = a->out + ((size_t)t * a->n_heads + h) * vd;
        float big = -INFINITY, l = 0.0f;
        for (int c = 0; c < n; c++) {
            const float *m = job->partials + (size_t)(first + c) * pf +
                             (size_t)h * (vd + 2);
            if (m[0] > big) big = m[0];
        }
        memset(out, 0, (size_t)vd * sizeof(float));
        for (int c = 0; c < n; c++) {
            const float *m = job->partials + (size_t)(first + c) * pf +
                             (size_t)h * (vd + 2);
            if (m[1] == 0.0f) continue;
            const float w = expf(m[0] - big);
            l += m[1] * w;
            for (int d = 0; d < vd; d++) out[d] += m[2 + d] * w;
        }
        const float inv = 1.0f / l;
        for (int d = 0; d < vd; d++) out[d] *= inv;
    }
}

spindle_status sp_attention_latent(sp_pool *pool, const sp_attention_args *a,
                                   int v_dim, float *partials,
                                   spindle_error *err) {
    if (!a || !a->q || !a->out || !a->kv.k || !partials || a->n_q <= 0 ||
        a->n_heads <= 0 || a->n_kv_heads != 1 || a->head_dim <= 0 ||
        v_dim <= 0 || v_dim > a->head_dim || a->first_pos < 0 ||
        a->kv.first_key_pos != 0 || !a->kv.blocks)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "latent attention: inconsistent arguments");
    if (a->window > 0 || a->sinks || a->softcap > 0.0f || a->bidirectional ||
        a->ahead)
        return sp_fail(err, SPINDLE_ERR_UNSUPPORTED,
                       "latent attention: windows, sinks, soft-capping and "
                       "bidirectional rows are not supported");
    const int last = a->first_pos + a->n_q - 1;
    if ((int64_t)(last / a->kv.block_rows) >= a->kv.n_blocks)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT,
                       "latent attention: position %d past the cache", last);
    latent_job job = {a, v_dim, partials, 0, 0};
    for (int t = 0; t < a->n_q; t++) job.n_units += units_of(a, t);
    if (pool) sp_pool_for(pool, job.n_units, 1, units_range, &job);
    else units_range(&job, 0, job.n_units, 0);
    if (__atomic_load_n(&job.failed, __ATOMIC_RELAXED))
        return sp_fail(err, SPINDLE_ERR_MEMORY,
                       "out of memory for the latent attention's tiles");
    if (pool)
        sp_pool_for(pool, (int64_t)a->n_q * a->n_heads, 1, merge_range, &job);
    else
        merge_range(&job, 0, (int64_t)a->n_q * a->n_heads, 0);
    return SPINDLE_OK;
}
