/* Causal grouped-query attention over one sequence's KV cache.
 *
 * Each (query token, head) pair is independent and is one unit of parallel
 * work. A pair makes a single pass over its key range with an online softmax
 * (running max m and normalizer l; the accumulator is rescaled by
 * exp(m_old - m_new) when the max grows), so nothing proportional to the
 * context length is allocated. Keys are taken a tile at a time: scores of a
 * tile sit in a small stack array, the running max is updated once per tile,
 * and the accumulator is rescaled at most once per tile.
 *
 * The accumulator is the pair's own slice of `out`, so `out` must not alias
 * `q`. All math is f32 with precise expf/tanhf. A bf16/f16 cache is widened
 * to f32 a chunk of a row at a time (exactly), keeping the lane order of the
 * f32 dot product, so an f32 cache and a cache holding the same values in
 * bf16 give the same bits. */
#include "compute/ops.h"
#include "compute/attention/attention_simd.h"
#include "compute/cpu_features.h"
#include "compute/tensor.h"
#include "base/error.h"

#include <math.h>
#include <stddef.h>

#define SP_ATTN_TILE 32
#define SP_LANES 8

static float dot_f32(const float *a, const float *b, int n) {
    float acc[SP_LANES] = {0};
    int i = 0;
    for (; i + SP_LANES <= n; i += SP_LANES)
        for (int l = 0; l < SP_LANES; l++) acc[l] += a[i + l] * b[i + l];
    float s = 0.0f;
    for (int l = 0; l < SP_LANES; l++) s += acc[l];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Elements of a cache row widened per step: a multiple of SP_LANES, so the
 * chunked dot product assigns every element to the same lane as dot_f32. */
#define SP_WIDEN_CHUNK 64

static void widen(float *dst, const void *row, sp_kv_dtype type, int from,
                  int n) {
    const uint16_t *h = (const uint16_t *)row + from;
    if (type == SP_KV_BF16)
        for (int i = 0; i < n; i++) dst[i] = sp_bf16_to_f32(h[i]);
    else
        for (int i = 0; i < n; i++) dst[i] = sp_f16_to_f32(h[i]);
}

/* q . row for a cache row of any type; the same lanes and order as
 * dot_f32 (the body in SP_LANES lanes, then the tail after their sum). */
static float dot_kv(const float *q, const void *row, sp_kv_dtype type,
                    int n) {
    if (type == SP_KV_F32) return dot_f32(q, row, n);
    const int body = n / SP_LANES * SP_LANES;
    float acc[SP_LANES] = {0}, buf[SP_WIDEN_CHUNK];
    for (int c = 0; c < body; c += SP_WIDEN_CHUNK) {
        const int m = body - c < SP_WIDEN_CHUNK ? body - c : SP_WIDEN_CHUNK;
        widen(buf, row, type, c, m);
        for (int i = 0; i < m; i += SP_LANES)
            for (int l = 0; l < SP_LANES; l++) acc[l] += q[c + i + l] * buf[i + l];
    }
    float s = 0.0f;
    for (int l = 0; l < SP_LANES; l++) s += acc[l];
    if (body < n) {
        widen(buf, row, type, body, n - body);
        for (int i = body; i < n; i++) s += q[i] * buf[i - body];
    }
    return s;
}

/* acc += e * row for a cache row of any type. */
static void axpy_kv(float *acc, float e, const void *row, sp_kv_dtype type,
                    int n) {
    if (type == SP_KV_F32) {
        const float *v = row;
        for (int d = 0; d < n; d++) acc[d] += e * v[d];
        return;
    }
    float buf[SP_WIDEN_CHUNK];
    for (int c = 0; c < n; c += SP_WIDEN_CHUNK) {
        const int m = n - c < SP_WIDEN_CHUNK ? n - c : SP_WIDEN_CHUNK;
        widen(buf, row, type, c, m);
        for (int d = 0; d < m; d++) acc[c + d] += e * buf[d];
    }
}

static void attend_one(const sp_attention_args *a, int t, int h) {
    const int hd = a->head_dim;
    const int group = a->n_heads / a->n_kv_heads;
    const int kvh = h / group;
    /* p: the last key this query sees */
    const int own = a->first_pos + t;
    const int p = a->bidirectional ? a->first_pos + a->n_q - 1
                                   : own + (a->ahead ? a->ahead[t] : 0);
    int lo = 0;
    if (!a->bidirectional && a->window > 0 && own - a->window + 1 > 0)
        lo = own - a->window + 1;

    const size_t row = (size_t)a->n_heads * (size_t)hd;
    const float *q = a->q + (size_t)t * row + (size_t)h * hd;
    float *acc = a->out + (size_t)t * row + (size_t)h * hd;
    const sp_kv_dtype type = a->kv.type;
    const size_t es = type == SP_KV_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t row_bytes = (size_t)hd * es;
    const unsigned char *kall = a->kv.k, *vall = a->kv.v;

    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    /* A sink is a score whose value row is zero: the softmax starts from it
     * (running max sink, normalizer exp(0)). */
    float m = a->sinks ? a->sinks[h] : -INFINITY, l = a->sinks ? 1.0f : 0.0f;
    float s[SP_ATTN_TILE];

    /* Tiles never cross a block of a paged view (they are cut at its
     * end), so each tile's rows are contiguous; the loops run over
     * positions, so a view that starts later gives the same bits. */
    for (int j0 = lo, n; j0 <= p; j0 += n) {
        int run;
        const size_t at = (size_t)sp_kv_view_row(&a->kv, kvh, j0, hd, &run) * es;
        n = p + 1 - j0 < SP_ATTN_TILE ? p + 1 - j0 : SP_ATTN_TILE;
        if (n > run) n = run;
        const unsigned char *kbase = kall + at, *vbase = vall + at;
        float tmax = -INFINITY;
        for (int j = 0; j < n; j++) {
            float v = a->scale *
                      dot_kv(q, kbase + (size_t)j * row_bytes, type, hd);
            if (a->softcap > 0.0f) v = a->softcap * tanhf(v / a->softcap);
            s[j] = v;
            if (v > tmax) tmax = v;
        }
        if (tmax > m) {
            /* First tile without a sink: m = -inf, l = 0, acc = 0; the
             * factor is 0 and harmless. */
            float c = expf(m - tmax);
            l *= c;
            for (int d = 0; d < hd; d++) acc[d] *= c;
            m = tmax;
        }
        for (int j = 0; j < n; j++) {
            float e = expf(s[j] - m);
            l += e;
            axpy_kv(acc, e, vbase + (size_t)j * row_bytes, type, hd);
        }
    }
    /* l >= 1 (the max term contributes exp(0)) unless every score was NaN. */
    float inv = 1.0f / l;
    for (int d = 0; d < hd; d++) acc[d] *= inv;
}

static void attention_range(void *ctx, int64_t begin, int64_t end,
                            int thread_id) {
    (void)thread_id;
    const sp_attention_args *a = ctx;
    for (int64_t i = begin; i < end; i++)
        attend_one(a, (int)(i / a->n_heads), (int)(i % a->n_heads));
}

/* What is wrong with a (a short phrase), or NULL: the checks that keep
 * every read and write in bounds. */
static const char *attention_args_problem(const sp_attention_args *a) {
    if (!a) return "no arguments";
    if (!a->q || !a->out || !a->kv.k || !a->kv.v) return "a NULL buffer";
    if (a->n_q <= 0) return "no query tokens";
    if (a->n_heads <= 0 || a->n_kv_heads <= 0 || a->head_dim <= 0)
        return "a non-positive head count or head size";
    if (a->n_heads % a->n_kv_heads != 0)
        return "query heads not a multiple of the KV heads";
    if (a->first_pos < 0) return "a negative first position";
    for (int t = 0; a->ahead && t < a->n_q; t++)
        if (a->ahead[t] < 0 || a->ahead[t] > a->n_q - 1 - t)
            return "a query that sees beyond the last query";
    if (a->kv.type != SP_KV_F32 && a->kv.type != SP_KV_BF16 &&
        a->kv.type != SP_KV_F16)
        return "an unknown KV cache type";
    /* the cache must hold every position from the first query's first key
     * up to the last query's own */
    const int64_t first_key = !a->bidirectional && a->window > 0 && a->first_pos - a->window + 1 > 0
                                  ? a->first_pos - a->window + 1 : 0;
    if (a->kv.first_key_pos < 0 || a->kv.first_key_pos > first_key)
        return "keys before the start of the KV view";
    const int64_t rows = (int64_t)a->first_pos + a->n_q - a->kv.first_key_pos;
    if (a->kv.blocks ? a->kv.block_rows <= 0 ||
                           rows > (int64_t)a->kv.n_blocks * a->kv.block_rows
                     : rows * a->head_dim > a->kv.head_stride)
        return "positions beyond the KV cache";
    return NULL;
}

spindle_status sp_attention(sp_pool *pool, const sp_attention_args *args,
                            spindle_error *err) {
    const sp_attention_args *a = args;
    const char *problem = attention_args_problem(a);
    if (problem)
        return sp_fail(err, SPINDLE_ERR_ARGUMENT, "attention: %s", problem);
#if defined(__x86_64__)
    if (sp_simd_avx512_active() && sp_attention_avx512_covers(a)) {
        sp_attention_avx512(pool, a);
        return SPINDLE_OK;
    }
    const sp_simd_level level = sp_simd_current();
    if ((level == SP_SIMD_AVX2 || level == SP_SIMD_AVXVNNI) &&
        sp_attention_avx2_covers(a)) {
        sp_attention_avx2(pool, a);
        return SPINDLE_OK;
    }
#endif
    int64_t n = (int64_t)a->n_q * a->n_heads;
    if (!pool) {
        attention_range((void *)a, 0, n, 0);
        return SPINDLE_OK;
    }
    /* Pairs late in a prefill see more keys than early ones: small ranges
     * let the pool balance them. */
    sp_pool_for(pool, n, 1, attention_range, (void *)a);
    return SPINDLE_OK;
}
