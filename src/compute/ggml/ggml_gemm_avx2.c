/* Prefill GEMM of ggml q4_0 / q8_0 / q4_1 / q5_0 / q5_1 weights on AVX2
 * (vpmaddubsw + vpmaddwd) and AVX-VNNI (VEX vpdpbusd on ymm), with the
 * activations of sp_ggml_quantize_acts: ggml_gemm_vnni.c's scheme on
 * 256-bit vectors, for CPUs without AVX-512.
 *
 * Every block's value is the decode kernels': the exact integer block sum
 * sumi, then fma(float(sumi), d_w * d_x, acc) (+ fma(m_w, s_x, acc) for
 * q4_1 / q5_1), and for precision high the same per part; prefill and
 * decode differ only in the order the per-block terms are summed.
 *
 * The sums are exact: weights are unsigned bytes u = q + offset (as
 * ggml_gemm_vnni.c) with offset * sum32_x taken off, except q8_0 without
 * vpdpbusd, kept signed (|q| <= 128) and multiplied as |q| times x with q's
 * sign moved onto x (vpsignb; x is never -128). vpmaddubsw adds two
 * products into a saturating i16: at most 2 * 15 * 127 (q4), 2 * 31 * 127
 * (q5) or 2 * 128 * 127 (q8) per 4 columns, so 8, 4 or 1 of those 4-column
 * steps are added in i16 before vpmaddwd widens them: no sum saturates.
 *
 * Layout: a panel of GA_MP = 16 rows (the int32 lanes of two vectors, 4
 * consecutive columns in each lane's bytes) by up to GA_KC columns,
 * unpacked (vector nibble splits, 8 x 8 transposes) once and shared by
 * every token; the micro-kernel broadcasts 4 activation bytes per
 * activation row (a token, or one of its parts: precision high's 3 parts of
 * a token go through one pass over the block's weight vectors) and keeps 2
 * block sums per row in registers. sp_matmul gives it 2..5 tokens at
 * precision high (a speculative verify, a small batch) and 5 or more at
 * fast (matmul_ggml.c gg_use_gemm).
 *
 * ggml_gemm_avxvnni.c compiles this file again with SP_GGML_AVXVNNI 1. */
#include "compute/ggml/ggml_dot.h"

#include <string.h>

#include "compute/cpu_features.h"

#ifndef SP_GGML_AVXVNNI
#define SP_GGML_AVXVNNI 0
#endif

#if defined(__x86_64__)
#include <immintrin.h>

#include "compute/simd_target.h"
#include "compute/simd_dpbusd.h"

#if SP_GGML_AVXVNNI
#define GA_TARGET SP_TARGET_AVXVNNI
#define GA_GEMM sp_ggml_gemm_avxvnni
#else
#define GA_TARGET SP_TARGET_AVX2
#define GA_GEMM sp_ggml_gemm_avx2
#endif

SP_TARGET_BEGIN(GA_TARGET)
#include "compute/ggml/ggml_dot_x86.h"
#include "compute/ggml/ggml_panel_prefetch.h"
#include "compute/simd_transpose_avx2.h"

#define GA_MP 16  /* rows per panel: two vectors of int32 lanes */
/* Tokens per micro-kernel call with one part (with 3 parts: one token, 3
 * activation rows, GA_ROWS): as many as keep the i16 / i32 block sums and
 * the float sums in the 16 ymm registers (4 tokens spilled the i16 sums
 * inside the innermost loop). */
#define GA_MT 2
#define GA_ROWS (GA_MT > SP_GGML_SPLIT_MAX_LEVELS ? GA_MT : SP_GGML_SPLIT_MAX_LEVELS)
#define GA_KC 512 /* columns per panel: 8 KiB of bytes */
#define GA_PB (GA_KC / 32)

/* q8_0 without vpdpbusd: signed bytes, no offset. */
SP_INLINE bool ga_signed(int kind) { return kind == 1 && !SP_GGML_AVXVNNI; }
SP_INLINE int ga_offset(int kind) {
    return ga_signed(kind) || KIND_MIN(kind) ? 0 : 1 << KIND_SHIFT(kind);
}
/* 4-column steps added in i16 before widening (see the top). */
SP_INLINE int ga_group(int kind) {
    return kind == 0 || kind == 2 ? 8 : kind == 1 ? 1 : 4;
}

/* The 32 weight bytes of block p in column order, as the micro-kernel
 * reads them (q8_0: signed, or offset by 128 for vpdpbusd). */
SP_INLINE __m256i ga_unpack(const uint8_t *p, const int kind) {
    if (kind == 1) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(p + 2));
        return ga_signed(kind) ? q : _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
    }
    const __m256i u = nibbles_one(p + KIND_QS(kind));
    return KIND_FIVE(kind) ? _mm256_or_si256(u, fifth_bits(qh_at(p, kind))) : u;
}

/* panel[((b * 8 + k4) * GA_MP + i) * 4 + j] = u of row r + i, column
 * 32 (b0 + b) + 4 k4 + j; dw / mw[b * GA_MP + i] the row's d / m (rows past
 * nr: zero bytes and scales, so they add 0). Eight rows' blocks are
 * unpacked into vectors and transposed as 8 x 8 lanes of 4 columns: the
 * scalar byte-by-byte packing cost as much as the whole micro-kernel at
 * precision high's 3 parts for ten tokens. */
SP_INLINE void ga_pack(const uint8_t *data, size_t row_bytes, size_t bs,
                       const int kind, int64_t r, int nr, int64_t b0, int nblk,
                       uint8_t *restrict panel, float *restrict dw,
                       float *restrict mw) {
    for (int b = 0; b < nblk; b++) {
        const uint8_t *blk = data + (size_t)r * row_bytes + (size_t)(b0 + b) * bs;
        for (int i0 = 0; i0 < GA_MP; i0 += 8) {
            __m256 v[8];
            for (int i = 0; i < 8; i++)
                v[i] = i0 + i < nr ? _mm256_castsi256_ps(ga_unpack(
                                         blk + (size_t)(i0 + i) * row_bytes, kind))
                                   : _mm256_setzero_ps();
            sp_transpose8(v);
            for (int k4 = 0; k4 < 8; k4++)
                _mm256_store_ps((float *)(panel + ((b * 8 + k4) * GA_MP + i0) * 4), v[k4]);
        }
        for (int i = 0; i < GA_MP; i++) {
            const uint8_t *p = blk + (size_t)i * row_bytes;
            dw[b * GA_MP + i] = i < nr ? f16_at(p) : 0.0f;
            mw[b * GA_MP + i] = i < nr && KIND_MIN(kind) ? f16_at(p + 2) : 0.0f;
        }
    }
}

typedef struct ga_args {
    const uint8_t *panel;
    const float *dw, *mw; /* [b][GA_MP] */
    int nblk;
    const int8_t *q;      /* token 0, the panel's first column */
    const float *d, *s;   /* token 0, the panel's first block */
    const int32_t *sum32;
    int64_t ldq, ldb;     /* token strides of q and of the per-block arrays */
    int64_t ldlq, ldlb;   /* part strides of the same (levels > 1) */
    float *y;             /* token 0, the panel's first row */
    int64_t ldy;
    int nr;
    bool accumulate;
} ga_args;

SP_INLINE __m256i ga_bcast(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* acc[j][h] = the 8 steps of one block against the activation rows qb[j]
 * (a token's part each), j < mt (exact int32 sums). */
SP_INLINE void ga_block_sums(__m256i acc[][2], const uint8_t *pb,
                             const int8_t *const qb[], const int kind,
                             const int mt) {
#if SP_GGML_AVXVNNI
    (void)kind;
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++) acc[t][0] = acc[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(pb + k * GA_MP * 4));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(pb + k * GA_MP * 4 + 32));
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) {
            const __m256i x = ga_bcast(qb[t] + 4 * k);
            acc[t][0] = sp_dpbusd256(acc[t][0], w0, x);
            acc[t][1] = sp_dpbusd256(acc[t][1], w1, x);
        }
    }
#else
    const int g = ga_group(kind);
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int k0 = 0; k0 < 8; k0 += g) {
        __m256i s16[GA_ROWS][2];
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) s16[t][0] = s16[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = k0; k < k0 + g; k++) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(pb + k * GA_MP * 4));
            const __m256i w1 = _mm256_loadu_si256((const __m256i *)(pb + k * GA_MP * 4 + 32));
            const __m256i a0 = ga_signed(kind) ? _mm256_abs_epi8(w0) : w0;
            const __m256i a1 = ga_signed(kind) ? _mm256_abs_epi8(w1) : w1;
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                const __m256i x = ga_bcast(qb[t] + 4 * k);
                const __m256i x0 = ga_signed(kind) ? _mm256_sign_epi8(x, w0) : x;
                const __m256i x1 = ga_signed(kind) ? _mm256_sign_epi8(x, w1) : x;
                /* adds (saturating, never reached: see the top) rather
                 * than add: gcc reassociates the wrapping adds into a tree
                 * of every step's products, spilled to the stack */
                s16[t][0] = _mm256_adds_epi16(s16[t][0], _mm256_maddubs_epi16(a0, x0));
                s16[t][1] = _mm256_adds_epi16(s16[t][1], _mm256_maddubs_epi16(a1, x1));
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) { /* the first group assigns: no live zeros */
            const __m256i s0 = _mm256_madd_epi16(s16[t][0], ones);
            const __m256i s1 = _mm256_madd_epi16(s16[t][1], ones);
            acc[t][0] = k0 ? _mm256_add_epi32(acc[t][0], s0) : s0;
            acc[t][1] = k0 ? _mm256_add_epi32(acc[t][1], s1) : s1;
        }
    }
#endif
}

/* mt tokens from t0 against the panel (ggml_gemm_vnni.c's gg_micro on
 * 8-lane vectors): one part, acc * (d_w d_x) added as decode does; several,
 * sum_l acc_l d_x,l first, then times d_w. The integer sums of all mt x
 * levels activation rows come from one pass over the block's weight
 * vectors (loaded once, not once per part: gcc kept every part's copies
 * live and spilled the sums). */
SP_INLINE void ga_micro(const ga_args *a, const int kind, const int levels,
                        const int mt, int t0) {
    __m256 out[GA_MT][2];
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++) out[t][0] = out[t][1] = _mm256_setzero_ps();
    for (int b = 0; b < a->nblk; b++) {
        const uint8_t *pb = a->panel + b * 8 * GA_MP * 4;
        const __m256 dw0 = _mm256_loadu_ps(a->dw + b * GA_MP);
        const __m256 dw1 = _mm256_loadu_ps(a->dw + b * GA_MP + 8);
        const int8_t *qr[GA_ROWS];
        int64_t at[GA_ROWS]; /* row j's index into the per-block arrays */
#pragma GCC unroll 8
        for (int j = 0; j < mt * levels; j++) {
            const int t = t0 + j / levels, l = j % levels;
            qr[j] = a->q + t * a->ldq + l * a->ldlq + 32 * b;
            at[j] = t * a->ldb + l * a->ldlb + b;
        }
        __m256i acc[GA_ROWS][2];
        ga_block_sums(acc, pb, qr, kind, mt * levels);
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) {
            __m256 part0 = _mm256_setzero_ps(), part1 = _mm256_setzero_ps();
#pragma GCC unroll 4
            for (int l = 0; l < levels; l++) {
                const int j = t * levels + l;
                if (ga_offset(kind)) { /* the weights' offset share */
                    const __m256i off = _mm256_set1_epi32(a->sum32[at[j]] * ga_offset(kind));
                    acc[j][0] = _mm256_sub_epi32(acc[j][0], off);
                    acc[j][1] = _mm256_sub_epi32(acc[j][1], off);
                }
                const __m256 dx = _mm256_set1_ps(a->d[at[j]]);
                const __m256 f0 = _mm256_cvtepi32_ps(acc[j][0]);
                const __m256 f1 = _mm256_cvtepi32_ps(acc[j][1]);
                if (levels == 1) {
                    out[t][0] = _mm256_fmadd_ps(f0, _mm256_mul_ps(dw0, dx), out[t][0]);
                    out[t][1] = _mm256_fmadd_ps(f1, _mm256_mul_ps(dw1, dx), out[t][1]);
                } else if (l == 0) {
                    part0 = _mm256_mul_ps(f0, dx);
                    part1 = _mm256_mul_ps(f1, dx);
                } else {
                    part0 = _mm256_fmadd_ps(f0, dx, part0);
                    part1 = _mm256_fmadd_ps(f1, dx, part1);
                }
            }
            if (levels > 1) {
                out[t][0] = _mm256_fmadd_ps(part0, dw0, out[t][0]);
                out[t][1] = _mm256_fmadd_ps(part1, dw1, out[t][1]);
            }
        }
        if (KIND_MIN(kind)) { /* ggml's m_w * s_x per block */
            const __m256 mw0 = _mm256_loadu_ps(a->mw + b * GA_MP);
            const __m256 mw1 = _mm256_loadu_ps(a->mw + b * GA_MP + 8);
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                const __m256 sx = _mm256_set1_ps(a->s[(t0 + t) * a->ldb + b]);
                out[t][0] = _mm256_fmadd_ps(mw0, sx, out[t][0]);
                out[t][1] = _mm256_fmadd_ps(mw1, sx, out[t][1]);
            }
        }
    }
    for (int t = 0; t < mt; t++) {
        float *o = a->y + (int64_t)(t0 + t) * a->ldy;
        float v[GA_MP];
        _mm256_storeu_ps(v, out[t][0]);
        _mm256_storeu_ps(v + 8, out[t][1]);
        for (int i = 0; i < a->nr; i++) o[i] = a->accumulate ? v[i] + o[i] : v[i];
    }
}

/* Every token through micro-kernel calls: one part, GA_MT tokens per call
 * (then 2 or 1); several, one token per call; the next panel's weights
 * fetched meanwhile (pf). */
#define GA_TOKENS(kind, levels)                                          \
    do {                                                                 \
        int t = 0;                                                       \
        if ((levels) > 1) {                                              \
            for (; t < nt; t++) {                                        \
                ga_micro(a, kind, levels, 1, t);                         \
                sp_panel_prefetch_step(&pf);                             \
            }                                                            \
            break;                                                       \
        }                                                                \
        for (; t + GA_MT <= nt; t += GA_MT) {                            \
            ga_micro(a, kind, 1, GA_MT, t);                              \
            sp_panel_prefetch_step(&pf);                                 \
        }                                                                \
        if (nt - t == 2) ga_micro(a, kind, 1, 2, t);                     \
        else if (nt - t == 1) ga_micro(a, kind, 1, 1, t);                \
    } while (0)

SP_INLINE void ga_rows(const sp_weight *w, const sp_ggml_acts *x, float *y,
                       int64_t r0, int64_t r1, const int kind) {
    const int64_t nb = w->cols / 32;
    const size_t row_bytes = sp_ggml_row_size(w->ggml_type, w->cols);
    const size_t bs = sp_ggml_traits(w->ggml_type)->type_size;
    _Alignas(64) uint8_t panel[GA_KC * GA_MP];
    _Alignas(64) float dw[GA_PB * GA_MP], mw[GA_PB * GA_MP];
    const int levels = x->levels, nt = x->n_tokens;
    ga_args args = {.panel = panel, .dw = dw, .mw = mw,
                    .ldq = levels * x->cols, .ldb = levels * nb,
                    .ldlq = x->cols, .ldlb = nb, .ldy = w->rows};
    const ga_args *a = &args;
    for (int64_t r = r0; r < r1; r += GA_MP) {
        const int nr = r1 - r < GA_MP ? (int)(r1 - r) : GA_MP;
        for (int64_t b0 = 0; b0 < nb; b0 += GA_PB) {
            const int nblk = nb - b0 < GA_PB ? (int)(nb - b0) : GA_PB;
            ga_pack(w->data, row_bytes, bs, kind, r, nr, b0, nblk, panel, dw, mw);
            sp_panel_prefetch pf = sp_panel_prefetch_next(
                w->data, row_bytes, r, r1, GA_MP, b0, nb, GA_PB, bs,
                levels > 1 ? nt : nt / GA_MT);
            args.nblk = nblk;
            args.q = x->q + 32 * b0;
            args.d = x->d + b0;
            args.s = x->s + b0;
            args.sum32 = x->sum32 + b0;
            args.y = y + r;
            args.nr = nr;
            args.accumulate = b0 > 0;
            /* levels as a constant: the part loop unrolls, its sums stay
             * in registers */
            if (levels == 1) GA_TOKENS(kind, 1);
            else if (levels == 2) GA_TOKENS(kind, 2);
            else GA_TOKENS(kind, 3);
        }
    }
}

bool GA_GEMM(const sp_weight *w, const sp_ggml_acts *x, float *y, int64_t r0,
             int64_t r1) {
    const int kind = w ? block_kind(w->ggml_type) : -1;
    if (kind < 0 || !x || !y || w->type != SP_W_GGML || !w->data ||
        !sp_ggml_dot_covered(w->ggml_type, w->cols) || x->cols != w->cols ||
        x->n_tokens < 1 || x->levels < 1 ||
        x->levels > SP_GGML_SPLIT_MAX_LEVELS || r0 < 0 || r1 > w->rows || r0 > r1 ||
        sp_ggml_dot_act_type(w->ggml_type) != (KIND_MIN(kind) ? SP_GGML_Q8_1 : SP_GGML_Q8_0))
        return false;
    switch (kind) {
    case 0: ga_rows(w, x, y, r0, r1, 0); break;
    case 1: ga_rows(w, x, y, r0, r1, 1); break;
    case 2: ga_rows(w, x, y, r0, r1, 2); break;
    case 3: ga_rows(w, x, y, r0, r1, 3); break;
    default: ga_rows(w, x, y, r0, r1, 4); break;
    }
    return true;
}
SP_TARGET_END
#endif /* __x86_64__ */

#if !SP_GGML_AVXVNNI
bool sp_ggml_gemm_int8_covered(uint32_t type, int64_t cols, sp_simd_level level) {
#if defined(__x86_64__)
    return (level == SP_SIMD_AVX2 || level == SP_SIMD_AVXVNNI) &&
           sp_simd_available(level) &&
           (type == SP_GGML_Q4_0 || type == SP_GGML_Q8_0 || type == SP_GGML_Q4_1 ||
            type == SP_GGML_Q5_0 || type == SP_GGML_Q5_1) &&
           sp_ggml_dot_covered(type, cols);
#else
    (void)type, (void)cols, (void)level;
    return false;
#endif
}

bool sp_ggml_gemm_int8(const sp_weight *w, const sp_ggml_acts *x, float *y,
                       int64_t r0, int64_t r1, sp_simd_level level) {
    if (!w || !sp_ggml_gemm_int8_covered(w->ggml_type, w->cols, level)) return false;
#if defined(__x86_64__)
    return level == SP_SIMD_AVXVNNI ? sp_ggml_gemm_avxvnni(w, x, y, r0, r1)
                                    : sp_ggml_gemm_avx2(w, x, y, r0, r1);
#else
    (void)x, (void)y, (void)r0, (void)r1;
    return false;
#endif
}
#endif
