/* AVX-512 causal attention: the same online softmax as attention.c, but a
 * unit of work is one KV head times a block of query tokens, so that every
 * key and value row read from the cache serves all the query heads of the
 * group and all the tokens of the block (a prefill of 512 tokens spent a
 * quarter of its time in the one-pair-at-a-time loop).
 *
 * Per tile of 16 keys the keys are transposed once (dimension-major), so a
 * query row's 16 scores are one vector built by FMAs with no horizontal sums
 * (with fewer than TRANSPOSE_ROWS rows, as in a decode step, each row's
 * partial sums are transposed instead, which costs less than the keys);
 * the values are then accumulated with one broadcast weight per key. The
 * exponential is a vector polynomial (Cephes expf, about 1 ulp) instead of
 * libm's expf; everything else is f32 as in the portable path, in a
 * different summation order.
 *
 * A bf16 or f16 cache is widened to f32 as it is loaded (bf16: zero-extend
 * to 32 bits and shift left 16; f16: vcvtph2ps), both exact, so the math
 * after the load is the f32 path's. The unit is instantiated once per cache
 * type so that the load is not a branch in the inner loops. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compute/attention/attention_simd.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512)
#include "compute/matmul/matmul_transpose.h"

#define KT 16            /* keys per tile: one vector of scores */
#define MAX_ROWS 32      /* query rows (token, head) per unit */

bool sp_attention_avx512_covers(const sp_attention_args *a) {
    return !a->bidirectional && a->softcap <= 0.0f && a->head_dim % 16 == 0 &&
           a->head_dim <= SP_ATTN_MAX_HD &&
           a->n_heads / a->n_kv_heads <= MAX_ROWS;
}

/* e^x, x <= 0 (a score minus the running max) or -inf. Cephes expf: x =
 * n ln2 + r, |r| <= ln2 / 2, e^r by its minimax polynomial, times 2^n. */
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f)); /* e^-104 is 0 in f32 */
    const __m512 n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 16 cache elements from element index i of `base`, as f32. */
static inline __attribute__((always_inline)) __m512
load_kv16(const void *base, size_t i, sp_kv_dtype type) {
    if (type == SP_KV_F32) return _mm512_loadu_ps((const float *)base + i);
    const __m256i h = _mm256_loadu_si256(
        (const __m256i *)((const uint16_t *)base + i));
    if (type == SP_KV_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

typedef struct unit_geometry {
    int group, tokens_per_unit, blocks;
} unit_geometry;

static unit_geometry geometry(const sp_attention_args *a) {
    unit_geometry g;
    g.group = a->n_heads / a->n_kv_heads;
    g.tokens_per_unit = MAX_ROWS / g.group;
    if (g.tokens_per_unit > 8) g.tokens_per_unit = 8;
    g.blocks = (a->n_q + g.tokens_per_unit - 1) / g.tokens_per_unit;
    return g;
}

/* Scores of one query row against a transposed tile: kt[d * KT + j]. Four
 * chains so the FMA latency is hidden. */
static inline __m512 tile_scores(const float *q, const float *kt, int hd) {
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int d = 0; d < hd; d += 4)
        for (int u = 0; u < 4; u++)
            s[u] = _mm512_fmadd_ps(_mm512_set1_ps(q[d + u]),
                                   _mm512_load_ps(kt + (d + u) * KT), s[u]);
    return _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]));
}

/* Scores of one query row against n <= 16 keys read in place: a vector of
 * partial products per key, then one 16 x 16 transpose to add them up.
 * Cheaper than transposing the keys when few query rows share the tile
 * (a decode step: one token, a group of 2-8 heads). */
static inline __attribute__((always_inline)) __m512
row_scores(const float *q, const void *k, size_t first, int n, int hd,
           const sp_kv_dtype type) {
    __m512 r[16];
    for (int j = 0; j < 16; j++) {
        __m512 s = _mm512_setzero_ps();
        if (j < n)
            for (int c = 0; c < hd / 16; c++)
                s = _mm512_fmadd_ps(
                    _mm512_loadu_ps(q + 16 * c),
                    load_kv16(k, first + (size_t)j * hd + 16 * (size_t)c, type), s);
        r[j] = s;
    }
    sp_transpose16(r);
    for (int w = 8; w >= 1; w /= 2)
        for (int d = 0; d < w; d++) r[d] = _mm512_add_ps(r[d], r[d + w]);
    return r[0];
}

/* Below this many query rows per unit the keys are not transposed. */
#define TRANSPOSE_ROWS 8

static inline __attribute__((always_inline)) void
attend_unit(const sp_attention_args *a, const unit_geometry *g, int kvh,
            int block, const sp_kv_dtype type) {
    const int hd = a->head_dim, nv = hd / 16;
    const int t0 = block * g->tokens_per_unit;
    const int nt = a->n_q - t0 < g->tokens_per_unit ? a->n_q - t0
                                                    : g->tokens_per_unit;
    const int rows = nt * g->group;
    if (rows <= 0) return;
    const size_t qrow = (size_t)a->n_heads * (size_t)hd;

    float m[MAX_ROWS], l[MAX_ROWS];
    int lo[MAX_ROWS], hi[MAX_ROWS];
    const float *q[MAX_ROWS];
    float *acc[MAX_ROWS];
    for (int i = 0; i < rows; i++) {
        const int t = t0 + i / g->group, h = kvh * g->group + i % g->group;
        const int p = a->first_pos + t;
        hi[i] = p;
        lo[i] = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        q[i] = a->q + (size_t)t * qrow + (size_t)h * hd;
        acc[i] = a->out + (size_t)t * qrow + (size_t)h * hd;
        for (int d = 0; d < hd; d++) acc[i][d] = 0.0f;
        m[i] = a->sinks ? a->sinks[h] : -INFINITY; /* (attention.c) */
        l[i] = a->sinks ? 1.0f : 0.0f;
    }
    const int first = lo[0], last = hi[rows - 1];
    _Alignas(64) float kt[SP_ATTN_MAX_HD * KT];
    _Alignas(64) float e[KT];

    /* A tile is cut at the end of a block of a paged view, so its rows
     * are contiguous; tile: its element offset (bytes depend on the type). */
    for (int j0 = first, n; j0 <= last; j0 += n) {
        int run;
        const size_t tile = (size_t)sp_kv_view_row(&a->kv, kvh, j0, hd, &run);
        n = last + 1 - j0 < KT ? last + 1 - j0 : KT;
        if (n > run) n = run;
        /* Transpose the tile's keys; rows past n are zeros (the cache
         * beyond the last position may hold anything). */
        for (int c = 0; c < nv && rows >= TRANSPOSE_ROWS; c++) {
            __m512 r[16];
            for (int j = 0; j < 16; j++)
                r[j] = j < n ? load_kv16(a->kv.k, tile + (size_t)j * hd + 16 * c,
                                         type)
                             : _mm512_setzero_ps();
            sp_transpose16(r);
            for (int d = 0; d < 16; d++)
                _mm512_store_ps(kt + (16 * c + d) * KT, r[d]);
        }
        for (int i = 0; i < rows; i++) {
            const int from = lo[i] > j0 ? lo[i] : j0;
            const int to = hi[i] < j0 + n - 1 ? hi[i] : j0 + n - 1;
            if (from > to) continue;
            const __mmask16 valid =
                (__mmask16)((((1u << (to - j0 + 1)) - 1u) >> (from - j0)) << (from - j0));
            __m512 s = _mm512_mul_ps(
                rows >= TRANSPOSE_ROWS
                    ? tile_scores(q[i], kt, hd)
                    : row_scores(q[i], a->kv.k, tile, n, hd, type),
                _mm512_set1_ps(a->scale));
            s = _mm512_mask_blend_ps(valid, _mm512_set1_ps(-INFINITY), s);
            const float tmax = _mm512_reduce_max_ps(s);
            float rescale = 1.0f;
            if (tmax > m[i]) {
                rescale = expf(m[i] - tmax); /* 0 on a first tile, no sink */
                l[i] *= rescale;
                m[i] = tmax;
            }
            const __m512 p = _mm512_maskz_mov_ps(
                valid, exp_ps(_mm512_sub_ps(s, _mm512_set1_ps(m[i]))));
            l[i] += _mm512_reduce_add_ps(p);
            _mm512_store_ps(e, p);
            __m512 o[SP_ATTN_MAX_HD / 16];
            for (int c = 0; c < nv; c++)
                o[c] = _mm512_mul_ps(_mm512_loadu_ps(acc[i] + 16 * c),
                                     _mm512_set1_ps(rescale));
            for (int j = from - j0; j <= to - j0; j++) {
                const __m512 w = _mm512_set1_ps(e[j]);
                const size_t v = tile + (size_t)j * hd;
                for (int c = 0; c < nv; c++)
                    o[c] = _mm512_fmadd_ps(
                        w, load_kv16(a->kv.v, v + 16 * (size_t)c, type), o[c]);
            }
            for (int c = 0; c < nv; c++) _mm512_storeu_ps(acc[i] + 16 * c, o[c]);
        }
    }
    /* l >= 1 (the max term contributes e^0) unless every score was NaN. */
    for (int i = 0; i < rows; i++) {
        const __m512 inv = _mm512_set1_ps(1.0f / l[i]);
        for (int c = 0; c < nv; c++)
            _mm512_storeu_ps(acc[i] + 16 * c,
                             _mm512_mul_ps(_mm512_loadu_ps(acc[i] + 16 * c), inv));
    }
}

/* One instance of attend_unit per cache type (the type is a constant in
 * each, so the loads compile to a single instruction sequence). */
#define UNITS_RANGE(name, kv_type)                                           \
    static void name(const sp_attention_args *a, int64_t begin,             \
                     int64_t end) {                                         \
        const unit_geometry g = geometry(a);                                \
        /* Late blocks see the most keys: hand them out first. */           \
        for (int64_t u = begin; u < end; u++) {                             \
            const int64_t rev = (int64_t)g.blocks * a->n_kv_heads - 1 - u;  \
            attend_unit(a, &g, (int)(rev % a->n_kv_heads),                  \
                        (int)(rev / a->n_kv_heads), kv_type);               \
        }                                                                   \
    }
UNITS_RANGE(units_f32, SP_KV_F32)
UNITS_RANGE(units_bf16, SP_KV_BF16)
UNITS_RANGE(units_f16, SP_KV_F16)

static void units_range(void *ctx, int64_t begin, int64_t end, int thread_id) {
    (void)thread_id;
    const sp_attention_args *a = ctx;
    switch (a->kv.type) {
    case SP_KV_F32: units_f32(a, begin, end); break;
    case SP_KV_BF16: units_bf16(a, begin, end); break;
    case SP_KV_F16: units_f16(a, begin, end); break;
    }
}

void sp_attention_avx512(sp_pool *pool, const sp_attention_args *a) {
    const unit_geometry g = geometry(a);
    const int64_t units = (int64_t)g.blocks * a->n_kv_heads;
    if (!pool) {
        units_range((void *)a, 0, units, 0);
        return;
    }
    sp_pool_for(pool, units, 1, units_range, (void *)a);
}
SP_TARGET_END
#else
typedef int sp_no_x86_kernels; /* ISO C wants a non-empty file */
#endif
