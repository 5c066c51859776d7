/* Opt-in decode kernel for MLX affine 4/8-bit rows with int8 activations and
 * AVX-512 VNNI (vpdpbusd: 64 u8 x s8 products per instruction).
 *
 * Per group g of a row:  sum_j (s q_j + b) x_j = s sum_j q_j x_j + b X_g,
 * with X_g = sum_j x_j kept exact in f32 and only sum_j q_j x_j approximated
 * by dx_c sum_j q_j xq_j, xq_j = round(x_j / dx_c) in [-127, 127] with one
 * dx_c = max|x| / 127 per chunk of 128 columns. This rounds each activation
 * by up to dx_c / 2, a relative error of the q.x term of about 0.4% / sqrt(n)
 * typically (like llama.cpp's Q8 activations); tests bound it by
 * sum_j |s q_j| dx_c / 2 plus f32 accumulation. Enabled only with
 * SPINDLE_MATMUL_INT8=1 (matmul_dispatch.c), since it is not exact. */
#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#include <immintrin.h>
#include <math.h>

#include "compute/matmul_internal.h"
#include "compute/matmul_simd.h"

#define CH 128            /* columns per activation chunk (one dx) */
#define MAX_COLS 16384    /* stack scratch bound; wider rows use f32 */

typedef struct xq_buf {
    int8_t q[SP_MM_SMALL_TOKENS][MAX_COLS]; /* per chunk, kernel's order */
    float dx[SP_MM_SMALL_TOKENS][MAX_COLS / CH];
    float xs[SP_MM_SMALL_TOKENS][MAX_COLS / 32]; /* exact group sums */
} xq_buf;

/* Quantize one token's activations. For 4 bits the chunk is stored as the
 * 64 even columns then the 64 odd ones, matching the low / high nibbles of
 * the 64 packed bytes. */
static void sp_quantize_x(const float *x, int64_t cols, int bits, int gs,
                          int8_t *q, float *dx, float *xs) {
    for (int64_t c = 0; c < cols; c += CH) {
        float amax = 0;
        for (int j = 0; j < CH; j++) {
            const float a = fabsf(x[c + j]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f;
        const float inv = d > 0 ? 1.0f / d : 0.0f;
        dx[c / CH] = d;
        for (int j = 0; j < CH; j++) {
            const int v = (int)nearbyintf(x[c + j] * inv);
            const int8_t qv = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
            const int pos = bits == 4 ? (j % 2) * 64 + j / 2 : j;
            q[c + pos] = qv;
        }
    }
    for (int64_t g = 0; g < cols / gs; g++) {
        float s = 0;
        for (int j = 0; j < gs; j++) s += x[g * gs + j];
        xs[g] = s;
    }
}

/* Per-lane group scale of a 128-column chunk: lane L of an accumulator
 * covers columns first + 8 L .. (4-bit) or first + 4 L .. (8-bit half). */
static inline __attribute__((always_inline)) __m512 sp_lane_scales(const sp_weight *w, int64_t r, int64_t first,
                                    int span_per_lane) {
    const int64_t gs = w->group_size, gpr = w->cols / gs;
    const int64_t g0 = first / gs, span = 16 * (int64_t)span_per_lane;
    if (gs >= span) /* (first is a multiple of span) */
        return _mm512_set1_ps(sp_load_float_unaligned(
            w->scales, w->qparam_dtype, (size_t)(r * gpr + g0)));
    /* Scalars into a vector by inserts: storing them to an array and
     * loading that back stalls on store forwarding. */
    const size_t q0 = (size_t)(r * gpr + g0);
    const sp_dtype qt = w->qparam_dtype;
    const float s0 = sp_load_float_unaligned(w->scales, qt, q0);
    const float s1 = sp_load_float_unaligned(w->scales, qt, q0 + 1);
    const bool four = span / gs == 4;
    const __m128 sc = _mm_setr_ps(
        s0, s1, four ? sp_load_float_unaligned(w->scales, qt, q0 + 2) : 0.0f,
        four ? sp_load_float_unaligned(w->scales, qt, q0 + 3) : 0.0f);
    /* lane L takes scale (span_per_lane * L) / gs: a shift of L, as
     * span_per_lane and gs are powers of two */
    const int sh = __builtin_ctz((unsigned)gs) - __builtin_ctz((unsigned)span_per_lane);
    const __m512i idx = _mm512_srli_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        (unsigned)sh);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(sc));
}

static inline __attribute__((always_inline)) void
sp_vnni_row(const sp_weight *w, const xq_buf *xb, const int nt, float *y,
            int64_t r) {
    const int64_t cols = w->cols, gs = w->group_size, gpr = cols / gs;
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * sp_affine_row_bytes(w);
    __m512 acc[SP_MM_SMALL_TOKENS];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m = _mm512_set1_epi8(15);
    for (int64_t c = 0; c < cols; c += CH) {
        __m512i is[SP_MM_SMALL_TOKENS];
        __m512 sl;
        if (w->bits == 4) {
            const __m512i b = _mm512_loadu_si512(row + c / 2);
            const __m512i lo = _mm512_and_si512(b, m);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), m);
            for (int t = 0; t < nt; t++) {
                const int8_t *xq = xb->q[t] + c;
                __m512i i = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo,
                                                _mm512_loadu_si512(xq));
                is[t] = _mm512_dpbusd_epi32(i, hi, _mm512_loadu_si512(xq + 64));
            }
            /* lane L: bytes 4L..4L+3 = columns c + 8L .. c + 8L + 7 */
            sl = sp_lane_scales(w, r, c, 8);
            for (int t = 0; t < nt; t++)
                acc[t] = _mm512_fmadd_ps(
                    _mm512_mul_ps(_mm512_cvtepi32_ps(is[t]), sl),
                    _mm512_set1_ps(xb->dx[t][c / CH]), acc[t]);
        } else {
            for (int h = 0; h < 2; h++) {
                const __m512i b = _mm512_loadu_si512(row + c + 64 * h);
                sl = sp_lane_scales(w, r, c + 64 * h, 4);
                for (int t = 0; t < nt; t++) {
                    const __m512i i = _mm512_dpbusd_epi32(
                        _mm512_setzero_si512(), b,
                        _mm512_loadu_si512(xb->q[t] + c + 64 * h));
                    acc[t] = _mm512_fmadd_ps(
                        _mm512_mul_ps(_mm512_cvtepi32_ps(i), sl),
                        _mm512_set1_ps(xb->dx[t][c / CH]), acc[t]);
                }
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        float bias = 0;
        for (int64_t g = 0; g < gpr; g++)
            bias += sp_load_float_unaligned(w->biases, w->qparam_dtype,
                                            (size_t)(r * gpr + g)) *
                    xb->xs[t][g];
        y[(int64_t)t * w->rows + r] = _mm512_reduce_add_ps(acc[t]) + bias;
    }
}

bool sp_mm_rows_vnni(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels) {
    (void)levels; /* one level for now */
    if (w->type != SP_W_AFFINE || (w->bits != 4 && w->bits != 8) ||
        w->cols % CH || w->cols > MAX_COLS || n_tokens < 1 ||
        n_tokens > SP_MM_SMALL_TOKENS)
        return false;
    if (r0 >= r1) return true;
    static _Thread_local xq_buf xb; /* 66 KiB: too much for worker stacks */
    for (int t = 0; t < n_tokens; t++)
        sp_quantize_x(x + (int64_t)t * w->cols, w->cols, w->bits,
                      w->group_size, xb.q[t], xb.dx[t], xb.xs[t]);
    for (int64_t r = r0; r < r1; r++) {
        switch (n_tokens) {
        case 1: sp_vnni_row(w, &xb, 1, y, r); break;
        case 2: sp_vnni_row(w, &xb, 2, y, r); break;
        case 3: sp_vnni_row(w, &xb, 3, y, r); break;
        default: sp_vnni_row(w, &xb, 4, y, r); break;
        }
    }
    return true;
}
#else
typedef int sp_no_x86_kernels; /* ISO C wants a non-empty file */
#endif
