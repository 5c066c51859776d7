/* Prefill GEMM for MLX affine 4/8-bit weights with AVX-512 VNNI: vpdpbusd
 * does 64 u8 x s8 multiply-adds per instruction where the f32 tile path
 * (matmul.c + matmul_simd.inc) does 16 FMAs.
 *
 * Per weight group g of a row r and token t:
 *   sum_j (s q_j + b) x_j = s sum_j q_j x_j + b X_g,   X_g = sum_j x_j (f32).
 * Only sum_j q_j x_j goes through integers. The group's activations get a
 * power-of-two scale S = 2^ceil(log2(max|x| / 127)) and are split into
 * `levels` int8 parts, all steps exact in f32:
 *   a1 = round(x / S),     r1 = x / S - a1         |a1| <= 127, |r1| <= 1/2
 *   a2 = round(128 r1),    r2 = 128 r1 - a2        |a2| <= 64
 *   a3 = round(128 r2)                             |a3| <= 64
 * so x = S (a1 + a2 / 2^7 + a3 / 2^14) up to |x err| <= S 2^(-7 (levels-1)) / 2.
 * One level (precision fast) takes llama.cpp's Q8 scale S = max|x| / 127
 * instead, and X_g = S sum_j a1_j, the sum of the quantized activations
 * (matmul_int8_rows.h, sp_int8_quantized_group_sums, says why).
 * The integer dot of a group accumulates exactly in int32:
 *   d = dpbusd(0, q, a1); d <<= 7; d = dpbusd(d, q, a2); d <<= 7; ...
 * and y += (s S 2^(-7 l)) float(d) + b X_g, where l is the last level in d.
 * Overflow: |d| <= gs qmax sum_levels |a_l| 2^(7 (l_last - l)); with gs 128,
 * qmax 255 and three levels that is 6.8e10 > 2^31, so the levels are cut
 * into runs whose bound stays below 2^31 (gv_flush_mask): each run is
 * converted to f32 on its own (one or two levels: 128*255*(127*128+64) =
 * 5.3e8 < 2^31 always fits; 4-bit groups of 32/64 keep all three together:
 * 64*15*(127*2^14+64*129) = 2.005e9 < 2^31). float(d) rounds by at most
 * 2^-24 relative, i.e. within the f32 accumulation error the exact path has.
 *
 * Layout: a panel of GV_MP = 32 rows by up to GV_KC columns is unpacked once
 * to u8 codes (nibbles split while packing) with the rows in the int32 lanes
 * and 4 consecutive columns in each lane's bytes; its cost is shared by all
 * tokens. The micro-kernel broadcasts 4 activation bytes per token
 * (vpbroadcastd) and keeps 2 x GV_MT int32 accumulators plus as many f32
 * outputs in registers; the scale epilogue (cvt, fma with the per-lane
 * scale) runs once per group and level run. Activations are quantized once
 * per call for all tokens into this thread's scratch (scratch.h). */
#include "compute/matmul/matmul_vnni_gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "compute/cpu_features.h"
#include "compute/matmul/matmul_int8_rows.h"
#include "compute/matmul/matmul_internal.h"
#include "compute/scratch.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512_VNNI)
#include "compute/matmul/matmul_transpose.h"
#include "compute/matmul/matmul_vnni_step.h"

#define GV_MP 32     /* rows per panel: two vectors of int32 lanes */
#define GV_MT 6      /* tokens per micro-kernel call */
#define GV_KC 512    /* columns per panel: 16 KiB of codes, stays in L1 */
#define GV_MAX_LEVELS 3

/* ------------------------------------------------------------ coverage */

bool sp_mm_gemm_vnni_covers(const sp_weight *w, int n_tokens, int levels) {
    if (!sp_cpu_features_get()->avx512vnni || !w || w->type != SP_W_AFFINE || n_tokens < 1 ||
        levels < 1 || levels > GV_MAX_LEVELS)
        return false;
    if ((w->bits != 4 && w->bits != 8) ||
        (w->group_size != 32 && w->group_size != 64 && w->group_size != 128))
        return false;
    if (w->qparam_dtype != SP_DTYPE_F32 && w->qparam_dtype != SP_DTYPE_F16 &&
        w->qparam_dtype != SP_DTYPE_BF16)
        return false;
    /* (the column bound keeps the scratch size far from overflowing) */
    return w->rows > 0 && w->cols > 0 && w->cols % w->group_size == 0 &&
           w->cols <= ((int64_t)1 << 24) && w->data && w->scales && w->biases;
}

/* Bit l set: convert the int32 accumulators to f32 after level l, because
 * adding one more level (d <<= 7, += q.a) could exceed 2^31 (see the top of
 * the file). The last level always converts. */
static unsigned gv_flush_mask(int bits, int gs, int levels) {
    const int64_t qmax = (1 << bits) - 1;
    const int64_t limit = INT32_MAX;
    unsigned mask = 0;
    int64_t run = 0; /* bound of |d| for the levels since the last flush */
    for (int l = 0; l < levels; l++) {
        const int64_t level = (int64_t)gs * qmax * (l == 0 ? 127 : 64);
        int64_t next = run * 128 + level;
        if (l > 0 && next > limit) {
            mask |= 1u << (l - 1);
            next = level;
        }
        run = next;
    }
    return mask | 1u << (levels - 1);
}

/* --------------------------------------------------- activation levels */

static inline float gv_pow2(int k) { /* 2^k for -126 <= k <= 127 */
    const uint32_t u = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Levels of every token's activations: aq[l * ldl + t * cols + j] (int8),
 * ssc[(t * gpr + g) * levels + l] = S 2^(-7 l), xs[t * gpr + g] = X_g.
 * A group with a non-finite value gets S = NaN (and zero codes), so that
 * its outputs come out NaN as the f32 path's would be non-finite. */
static void gv_quantize(const float *x, int nt, int64_t cols, int gs,
                        int levels, int8_t *aq, int64_t ldl, float *ssc,
                        float *xs) {
    const int64_t gpr = cols / gs;
    const int nv = gs / 16;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int t = 0; t < nt; t++)
        for (int64_t g = 0; g < gpr; g++) {
            const float *xg = x + (int64_t)t * cols + g * gs;
            int8_t *ag = aq + (int64_t)t * cols + g * gs;
            float *sg = ssc + ((int64_t)t * gpr + g) * levels;
            __m512 vmax = _mm512_setzero_ps(), vsum = _mm512_setzero_ps();
            for (int j = 0; j < nv; j++) {
                const __m512 v = _mm512_loadu_ps(xg + 16 * j);
                vmax = _mm512_max_ps(vmax, _mm512_andnot_ps(sign, v));
                vsum = _mm512_add_ps(vsum, v);
            }
            const float sum = _mm512_reduce_add_ps(vsum);
            xs[t * gpr + g] = sum;
            /* inf or NaN anywhere makes the sum non-finite (and max_ps
             * would drop a NaN) */
            if (!(sum - sum == 0.0f)) {
                for (int l = 0; l < levels; l++) {
                    memset(ag + l * ldl, 0, (size_t)gs);
                    sg[l] = __builtin_nanf("");
                }
                continue;
            }
            const float amax = _mm512_reduce_max_ps(vmax);
            /* Smallest k with 127 * 2^k >= amax: amax = m 2^e, m in
             * [1/2, 1), gives k = e - 7 or e - 6. Tiny blocks (and zeros)
             * take k = -100: a coarser scale only drops bits below 1e-28,
             * and keeps S 2^-14 times a weight scale a normal float. */
            uint32_t bits;
            memcpy(&bits, &amax, 4);
            const int e = (int)(bits >> 23) - 126;
            int k = e - 7;
            if (k < -100) k = -100;
            else if (amax > 127.0f * gv_pow2(k)) k++;
            float inv_s = gv_pow2(-k);
            for (int l = 0; l < levels; l++) sg[l] = gv_pow2(k - 7 * l);
            if (levels == 1) /* llama.cpp's Q8 rounding, as the row kernels */
                sp_block_scale(amax, 1, &sg[0], &inv_s);
            const __m512 inv = _mm512_set1_ps(inv_s);
            __m512 qsum = _mm512_setzero_ps();
            for (int j = 0; j < nv; j++) {
                __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xg + 16 * j), inv);
                for (int l = 0; l < levels; l++) {
                    const __m512i a = _mm512_cvt_roundps_epi32(
                        v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                    _mm_storeu_si128((__m128i *)(ag + l * ldl + 16 * j),
                                     _mm512_cvtsepi32_epi8(a));
                    if (levels == 1) qsum = _mm512_add_ps(qsum, _mm512_cvtepi32_ps(a));
                    /* exact: v and its nearest integer are close */
                    v = _mm512_mul_ps(_mm512_sub_ps(v, _mm512_cvtepi32_ps(a)),
                                      _mm512_set1_ps(128.0f));
                }
            }
            /* one level: the bias multiplies the quantized activations, as
             * sp_int8_quantized_group_sums says why (integers: exact) */
            if (levels == 1) xs[t * gpr + g] = sg[0] * _mm512_reduce_add_ps(qsum);
        }
}

/* --------------------------------------------------------------- packing */

/* Codes of columns [c, c + n) of row r as bytes, n = 64 or 32 (the upper
 * half then zero). 4-bit: byte i holds codes 2i (low nibble) and 2i + 1. */
static inline __m512i gv_codes(const sp_weight *w, int64_t r, int64_t c,
                               int n) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * sp_affine_row_bytes(w);
    if (w->bits == 8)
        return n == 64 ? _mm512_loadu_si512(row + c)
                       : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, row + c);
    const __m256i b = n == 64 ? _mm256_loadu_si256((const __m256i *)(row + c / 2))
                              : _mm256_maskz_loadu_epi8(0xFFFFu, row + c / 2);
    const __m512i x = _mm512_cvtepu8_epi16(b);
    return _mm512_or_si512(
        _mm512_and_si512(x, _mm512_set1_epi16(0x000F)),
        _mm512_slli_epi16(_mm512_and_si512(x, _mm512_set1_epi16(0x00F0)), 4));
}

/* panel[(k4 * GV_MP + i) * 4 + b] = code of row r + i, column k0 + 4 k4 + b
 * (rows >= nr are zero), for kc columns; sv / bv[g * GV_MP + i] = scale /
 * bias of row r + i in the chunk's group g. */
static void gv_pack(const sp_weight *w, int64_t r, int nr, int64_t k0,
                    int64_t kc, uint8_t *restrict panel, float *restrict sv,
                    float *restrict bv) {
    for (int64_t kb = 0; kb < kc; kb += 64) {
        const int n = kc - kb >= 64 ? 64 : 32;
        for (int v = 0; v < GV_MP / 16; v++) {
            __m512 q[16];
            for (int i = 0; i < 16; i++) {
                const int row = 16 * v + i;
                q[i] = row < nr ? _mm512_castsi512_ps(gv_codes(w, r + row, k0 + kb, n))
                                : _mm512_setzero_ps();
            }
            sp_transpose16(q); /* q[j]: columns 4j..4j+3 of the 16 rows */
            for (int j = 0; j < n / 4; j++)
                _mm512_storeu_ps(panel + ((kb / 4 + j) * GV_MP + 16 * v) * 4, q[j]);
        }
    }
    const int64_t gs = w->group_size, gpr = w->cols / gs;
    for (int64_t g = 0; g < kc / gs; g++)
        for (int i = 0; i < GV_MP; i++) {
            const size_t qi = (size_t)((r + i) * gpr + k0 / gs + g);
            sv[g * GV_MP + i] = i < nr ? sp_load_float_unaligned(w->scales, w->qparam_dtype, qi) : 0.0f;
            bv[g * GV_MP + i] = i < nr ? sp_load_float_unaligned(w->biases, w->qparam_dtype, qi) : 0.0f;
        }
}

/* ----------------------------------------------------------- micro-kernel */

typedef struct gv_args {
    const uint8_t *panel;   /* gv_pack's layout */
    const float *sv, *bv;   /* [g][GV_MP] */
    int ng, k4g;            /* groups in the panel, 4-column steps per group */
    const int8_t *aq;       /* level 0, token 0, the panel's first column */
    int64_t ldq, ldl;       /* strides of a token and of a level */
    const float *ssc, *xs;  /* token 0, the panel's first group */
    int64_t lds, ldx;       /* token strides of ssc and xs */
    unsigned flush;         /* gv_flush_mask */
    float *y;               /* token 0, the panel's first row */
    int64_t ldy;
    int nr;                 /* real rows (lanes) of the panel */
    bool accumulate;        /* add to y instead of storing */
} gv_args;

/* mt tokens from t0 (both literals at each call site after inlining, so the
 * accumulator arrays live in registers). */
static inline __attribute__((always_inline)) void
gv_micro(const gv_args *a, const int levels, const int mt, int t0) {
    __m512 out[GV_MT][2];
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++) out[t][0] = out[t][1] = _mm512_setzero_ps();
    const int8_t *aqt = a->aq + t0 * a->ldq;
    const float *sst = a->ssc + t0 * a->lds, *xst = a->xs + t0 * a->ldx;
    const int64_t gbytes = (int64_t)a->k4g * GV_MP * 4;
    for (int g = 0; g < a->ng; g++) {
        const uint8_t *pg = a->panel + g * gbytes;
        const int8_t *ag = aqt + (int64_t)g * a->k4g * 4;
        __m512i acc[GV_MT][2];
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) acc[t][0] = acc[t][1] = _mm512_setzero_si512();
#pragma GCC unroll 3
        for (int l = 0; l < levels; l++) {
            if (l > 0) { /* (a flushed run left zeros: shifting is harmless) */
#pragma GCC unroll 8
                for (int t = 0; t < mt; t++) {
                    acc[t][0] = _mm512_slli_epi32(acc[t][0], 7);
                    acc[t][1] = _mm512_slli_epi32(acc[t][1], 7);
                }
            }
            const int8_t *al = ag + l * a->ldl;
            for (int k = 0; k < a->k4g; k++) {
                const __m512i w0 = _mm512_loadu_si512(pg + k * GV_MP * 4);
                const __m512i w1 = _mm512_loadu_si512(pg + k * GV_MP * 4 + 64);
                sp_vnni_step(acc, mt, w0, w1, al + 4 * k, a->ldq);
            }
            if (l == levels - 1 || (a->flush >> l & 1u)) {
                const __m512 s0 = _mm512_loadu_ps(a->sv + g * GV_MP);
                const __m512 s1 = _mm512_loadu_ps(a->sv + g * GV_MP + 16);
#pragma GCC unroll 8
                for (int t = 0; t < mt; t++) {
                    const __m512 sc = _mm512_set1_ps(sst[t * a->lds + g * levels + l]);
                    out[t][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][0]),
                                                _mm512_mul_ps(s0, sc), out[t][0]);
                    out[t][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][1]),
                                                _mm512_mul_ps(s1, sc), out[t][1]);
                    acc[t][0] = acc[t][1] = _mm512_setzero_si512();
                }
            }
        }
        const __m512 b0 = _mm512_loadu_ps(a->bv + g * GV_MP);
        const __m512 b1 = _mm512_loadu_ps(a->bv + g * GV_MP + 16);
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) {
            const __m512 xb = _mm512_set1_ps(xst[t * a->ldx + g]);
            out[t][0] = _mm512_fmadd_ps(b0, xb, out[t][0]);
            out[t][1] = _mm512_fmadd_ps(b1, xb, out[t][1]);
        }
    }
    const int lo = a->nr < 16 ? a->nr : 16, hi = a->nr - lo;
    const __mmask16 m0 = (__mmask16)((1u << lo) - 1u);
    const __mmask16 m1 = (__mmask16)((1u << hi) - 1u);
    for (int t = 0; t < mt; t++) {
        float *o = a->y + (int64_t)(t0 + t) * a->ldy;
        if (a->nr == GV_MP) {
            if (a->accumulate) {
                out[t][0] = _mm512_add_ps(out[t][0], _mm512_loadu_ps(o));
                out[t][1] = _mm512_add_ps(out[t][1], _mm512_loadu_ps(o + 16));
            }
            _mm512_storeu_ps(o, out[t][0]);
            _mm512_storeu_ps(o + 16, out[t][1]);
        } else {
            if (a->accumulate) {
                out[t][0] = _mm512_add_ps(out[t][0], _mm512_maskz_loadu_ps(m0, o));
                out[t][1] = _mm512_add_ps(out[t][1], _mm512_maskz_loadu_ps(m1, o + 16));
            }
            _mm512_mask_storeu_ps(o, m0, out[t][0]);
            _mm512_mask_storeu_ps(o + 16, m1, out[t][1]);
        }
    }
}

#define GV_TAIL(L)                                                        \
    switch (nt - t) {                                                     \
    case 0: break;                                                        \
    case 1: gv_micro(a, L, 1, t); break;                                  \
    case 2: gv_micro(a, L, 2, t); break;                                  \
    case 3: gv_micro(a, L, 3, t); break;                                  \
    case 4: gv_micro(a, L, 4, t); break;                                  \
    default: gv_micro(a, L, 5, t); break;                                 \
    }

/* Every token against one packed panel. */
static void gv_panel_tokens(const gv_args *a, int nt, int levels) {
    int t = 0;
    switch (levels) {
    case 1:
        for (; t + GV_MT <= nt; t += GV_MT) gv_micro(a, 1, GV_MT, t);
        GV_TAIL(1);
        break;
    case 2:
        for (; t + GV_MT <= nt; t += GV_MT) gv_micro(a, 2, GV_MT, t);
        GV_TAIL(2);
        break;
    default:
        for (; t + GV_MT <= nt; t += GV_MT) gv_micro(a, 3, GV_MT, t);
        GV_TAIL(3);
        break;
    }
}

/* ------------------------------------------------------------ entry point */

bool sp_mm_gemm_vnni(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels) {
    if (!sp_mm_gemm_vnni_covers(w, n_tokens, levels) || r0 < 0 || r1 > w->rows || r0 > r1)
        return false;
    if (r0 == r1) return true;
    if (!x || !y) return false;
    const int64_t cols = w->cols, gs = w->group_size, gpr = cols / gs;
    const int nt = n_tokens;
    /* scratch: levels x [nt][cols] codes, then ssc and xs */
    const size_t codes = (size_t)levels * (size_t)nt * (size_t)cols;
    const size_t codes_padded = (codes + 63) / 64 * 64;
    const size_t nscale = (size_t)nt * (size_t)gpr;
    uint8_t *buf = sp_scratch_get(SP_SCRATCH_AFFINE_GEMM, codes_padded + sizeof(float) * nscale * ((size_t)levels + 1));
    if (!buf) return false;
    int8_t *aq = (int8_t *)buf;
    float *ssc = (float *)(buf + codes_padded);
    float *xs = ssc + nscale * (size_t)levels;
    const int64_t ldl = (int64_t)nt * cols;
    gv_quantize(x, nt, cols, (int)gs, levels, aq, ldl, ssc, xs);

    _Alignas(64) uint8_t panel[GV_KC * GV_MP];
    _Alignas(64) float sv[GV_KC / 32 * GV_MP], bv[GV_KC / 32 * GV_MP];
    gv_args a = {
        .panel = panel, .sv = sv, .bv = bv, .k4g = (int)(gs / 4),
        .ldq = cols, .ldl = ldl, .lds = gpr * levels, .ldx = gpr,
        .flush = gv_flush_mask(w->bits, (int)gs, levels), .ldy = w->rows,
    };
    for (int64_t r = r0; r < r1; r += GV_MP) {
        const int nr = r1 - r < GV_MP ? (int)(r1 - r) : GV_MP;
        for (int64_t k0 = 0; k0 < cols; k0 += GV_KC) {
            const int64_t kc = cols - k0 < GV_KC ? cols - k0 : GV_KC;
            gv_pack(w, r, nr, k0, kc, panel, sv, bv);
            a.ng = (int)(kc / gs);
            a.aq = aq + k0;
            a.ssc = ssc + k0 / gs * levels;
            a.xs = xs + k0 / gs;
            a.y = y + r;
            a.nr = nr;
            a.accumulate = k0 > 0;
            gv_panel_tokens(&a, nt, levels);
        }
    }
    return true;
}
SP_TARGET_END

#else
bool sp_mm_gemm_vnni_covers(const sp_weight *w, int n_tokens, int levels) {
    (void)w; (void)n_tokens; (void)levels;
    return false;
}
bool sp_mm_gemm_vnni(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels) {
    (void)w; (void)x; (void)n_tokens; (void)y; (void)r0; (void)r1; (void)levels;
    return false; /* no VNNI off x86: the caller keeps the f32 path */
}
#endif
