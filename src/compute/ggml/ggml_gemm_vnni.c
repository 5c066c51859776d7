/* Prefill GEMM of ggml q4_0 / q8_0 / q4_1 / q5_0 / q5_1 / MXFP4 weights with
 * activations quantized as llama.cpp quantizes them (ggml_dot.h), on
 * AVX-512 VNNI.
 *
 * Every block's value is the decode kernels' (ggml_dot_vnni.c): the exact
 * integer sum sumi = sum_j q_w,j q_x,j of the block, then in f32
 *   fma(float(sumi), d_w * d_x, acc)        (+ fma(m_w, s_x, acc) for q4_1 /
 *                                            q5_1)
 * so prefill and decode give the same per-block terms and differ only in
 * the order the terms are summed. The integer sum uses unsigned weight bytes
 * u = q_w + offset (q4_0: the stored nibble, offset 8; q5_0: nibble + 16 *
 * fifth bit, offset 16; q8_0: q ^ 0x80, offset 128; MXFP4: the doubled E2M1
 * value + 12, offset 12; q4_1 / q5_1: no offset)
 * and subtracts offset * sum32_x, the block's activation sum; vpdpbusd lanes
 * (4 products of at most 255 * 127) cannot overflow within a block.
 *
 * Precision high: each activation block is the decode path's 3 int8 parts
 * (ggml_act_split.c, f32 scales), and every part gets the per-block value
 * above, so prefill and decode again add the same terms. Unlike the MLX
 * affine GEMM the parts are not combined in int32 (a1 2^14 + a2 2^7 + a3
 * with power-of-two scales): that keeps only ~2^-21 of the block's maximum,
 * 4x the decode split's ~2^-24, and q8_0's 255 * 127 products would
 * overflow int32 anyway, so it would save at most one of the three
 * epilogues.
 *
 * Layout, as the MLX affine GEMM (matmul_vnni_gemm.c): a panel of GG_MP = 32
 * rows by up to GG_KC columns is unpacked once to u8 with the rows in the
 * int32 lanes of two vectors and 4 consecutive columns in each lane's bytes,
 * plus the rows' f32 d (and m) per block; its cost is shared by all tokens.
 * The micro-kernel broadcasts 4 activation bytes per token and keeps
 * 2 x GG_MT int32 block accumulators and as many f32 outputs in registers;
 * the block epilogue (offset, cvt, scale, fma) runs once per block. */
#include "compute/ggml/ggml_dot.h"

#include <string.h>

#include "compute/cpu_features.h"
#include "compute/scratch.h"

/* ------------------------------------------------ activations (portable) */

typedef struct gg_quant_job {
    uint32_t act_type;
    const float *x;
    int64_t cols;
    int levels;
    int8_t *q;
    float *d, *s;
    int32_t *sum32;
    int16_t *bsums; /* q8_K: per 16 columns */
    _Atomic int failed;
} gg_quant_job;

/* Tokens [t0, t1): llama.cpp's quantizer (levels 1, through this thread's
 * scratch, copied into the compact arrays) or the decode split written
 * there directly, part l of token t in row t * levels + l. A split token's
 * part-0 s is the sum of its parts' s = sum * d (the kernel adds m_w * s
 * once per block). */
static void gg_quantize_range(void *ctx, int64_t t0, int64_t t1, int thread_id) {
    (void)thread_id;
    gg_quant_job *job = ctx;
    const int levels = job->levels;
    const size_t cols = (size_t)job->cols, nb = cols / 32;
    sp_ggml_act *one = levels > 1 ? NULL : sp_scratch_get(SP_SCRATCH_GGML_PREFILL_PARTS, sizeof *one);
    if (levels == 1 && !one) {
        job->failed = 1;
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        const float *x = job->x + (size_t)t * cols;
        if (one) {
            if (!sp_ggml_quantize_act(job->act_type, x, job->cols, one)) {
                job->failed = 1;
                return;
            }
            /* q8_K: one f32 d per 256 columns */
            const size_t nd = job->act_type == SP_GGML_Q8_K ? cols / SP_QK_K : nb;
            memcpy(job->q + (size_t)t * cols, one->q, cols);
            memcpy(job->d + (size_t)t * nb, one->d, sizeof(float) * nd);
            memcpy(job->s + (size_t)t * nb, one->s, sizeof(float) * nb);
            memcpy(job->sum32 + (size_t)t * nb, one->sum32, sizeof(int32_t) * nb);
            if (job->bsums)
                memcpy(job->bsums + (size_t)t * (cols / 16), one->bsums,
                       sizeof(int16_t) * (cols / 16));
            continue;
        }
        int8_t *q[SP_GGML_SPLIT_MAX_LEVELS];
        float *d[SP_GGML_SPLIT_MAX_LEVELS];
        int32_t *sum32[SP_GGML_SPLIT_MAX_LEVELS];
        for (int l = 0; l < levels; l++) {
            const size_t row = (size_t)t * (size_t)levels + (size_t)l;
            q[l] = job->q + row * cols;
            d[l] = job->d + row * nb;
            sum32[l] = job->sum32 + row * nb;
        }
        sp_ggml_split_row32(x, job->cols, levels, q, d, sum32);
        float *s = job->s + (size_t)t * (size_t)levels * nb;
        for (size_t b = 0; b < nb; b++) {
            float sum = (float)sum32[0][b] * d[0][b];
            for (int l = 1; l < levels; l++) sum += (float)sum32[l][b] * d[l][b];
            s[b] = sum;
        }
    }
}

bool sp_ggml_quantize_acts(sp_pool *pool, uint32_t act_type, const float *x,
                           int n_tokens, int64_t cols, int levels,
                           sp_ggml_acts *out) {
    if (!x || !out || n_tokens < 1 || cols <= 0 || cols % 32 ||
        cols > SP_GGML_DOT_MAX_COLS || levels < 1 ||
        levels > SP_GGML_SPLIT_MAX_LEVELS ||
        (act_type != SP_GGML_Q8_0 && act_type != SP_GGML_Q8_1 &&
         (act_type != SP_GGML_Q8_K || levels != 1 || cols % SP_QK_K)))
        return false;
    /* one row of the arrays per token and part */
    const size_t nt = (size_t)n_tokens * (size_t)levels, nb = (size_t)cols / 32;
    const size_t qbytes = (nt * (size_t)cols + 63) / 64 * 64;
    const size_t bsum_bytes = act_type == SP_GGML_Q8_K ? sizeof(int16_t) * nt * (size_t)cols / 16 : 0;
    uint8_t *buf = sp_scratch_get(SP_SCRATCH_GGML_ACTS,
                                  qbytes + 3 * sizeof(float) * nt * nb + bsum_bytes);
    if (!buf) return false;
    gg_quant_job job = {.act_type = act_type, .x = x, .cols = cols,
                        .levels = levels, .q = (int8_t *)buf,
                        .d = (float *)(buf + qbytes)};
    job.s = job.d + nt * nb;
    job.sum32 = (int32_t *)(job.s + nt * nb);
    job.bsums = bsum_bytes ? (int16_t *)(job.sum32 + nt * nb) : NULL;
    /* the scalar quantizer is a sizeable share of a prefill: split it too */
    const int threads = sp_pool_size(pool);
    sp_pool_for(pool, n_tokens, (n_tokens + threads - 1) / threads,
                gg_quantize_range, &job);
    if (job.failed) return false;
    *out = (sp_ggml_acts){.q = job.q, .d = job.d, .s = job.s,
                          .sum32 = job.sum32, .bsums = job.bsums,
                          .n_tokens = n_tokens,
                          .levels = levels, .cols = cols};
    return true;
}

/* ------------------------------------------------------ kernel (x86 only) */

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512_VNNI)
#include "compute/ggml/ggml_dot_x86.h"
#include "compute/ggml/ggml_panel_prefetch.h"
#include "compute/matmul/matmul_transpose.h"
#include "compute/matmul/matmul_vnni_step.h"

#define GG_MP 32  /* rows per panel: two vectors of int32 lanes */
#define GG_MT 6   /* tokens per micro-kernel call */
#define GG_MT_PARTS 4 /* the same, several parts per token */
#define GG_KC 512 /* columns per panel: 16 KiB of bytes, stays in L1 */
#define GG_PB (GG_KC / 32) /* blocks per panel */

/* (block kinds, KIND_* and qh_at: ggml_dot_x86.h) The GEMM adds kind 5,
 * MXFP4 {e, qs[16]}: its codes looked up as the doubled E2M1 value plus 12
 * (unsigned, offset 12), d the E8M0 byte's half scale. */
#define GG_MXFP4 5
SP_INLINE int gg_kind(uint32_t type) {
    return type == SP_GGML_MXFP4 ? GG_MXFP4 : block_kind(type);
}
/* The weights' offset (u = q + offset): what offset * sum32_x takes off. */
SP_INLINE int gg_offset(int kind) {
    return kind == GG_MXFP4 ? 12 : KIND_MIN(kind) ? 0 : 1 << KIND_SHIFT(kind);
}

bool sp_ggml_gemm_covered(uint32_t type, int64_t cols) {
    return sp_cpu_features_get()->avx512vnni && gg_kind(type) >= 0 &&
           sp_ggml_dot_covered(type, cols);
}

/* The unsigned weight bytes of blocks p0, p1 in column order (as
 * ggml_dot_vnni.c's weights_pair). */
SP_INLINE __m512i gg_weights_pair(const uint8_t *p0, const uint8_t *p1, int kind) {
    if (kind == 1) {
        const __m512i w = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p0 + 2))),
            _mm256_loadu_si256((const __m256i *)(p1 + 2)), 1);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
    const int qs = kind == GG_MXFP4 ? 1 : KIND_QS(kind);
    const __m256i raw = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + qs))),
        _mm_loadu_si128((const __m128i *)(p1 + qs)), 1);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(raw, m);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m);
    const __m512i idx = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i nib = _mm512_permutex2var_epi64(_mm512_castsi256_si512(lo), idx,
                                                  _mm512_castsi256_si512(hi));
    if (kind == GG_MXFP4)
        return _mm512_shuffle_epi8(
            _mm512_broadcast_i32x4(_mm_add_epi8(
                _mm_loadu_si128((const __m128i *)sp_mxfp4_kvalues), _mm_set1_epi8(12))),
            nib);
    if (!KIND_FIVE(kind)) return nib;
    /* bit j of qh is the fifth bit of column j: add 16 there */
    const __mmask64 qh = (__mmask64)qh_at(p0, kind) | (__mmask64)qh_at(p1, kind) << 32;
    return _mm512_mask_add_epi8(nib, qh, nib, _mm512_set1_epi8(16));
}

/* panel[((b * 8 + k4) * GG_MP + i) * 4 + j] = u of row r + i, column
 * 32 (b0 + b) + 4 k4 + j for nblk blocks (rows >= nr are zero); dw / mw
 * [b * GG_MP + i] = the row's f16 d / m of that block as f32 (0 past nr). */
SP_INLINE void gg_pack(const uint8_t *data, size_t row_bytes, size_t bs,
                       int kind, int64_t r, int nr, int64_t b0, int nblk,
                       uint8_t *restrict panel, float *restrict dw,
                       float *restrict mw) {
    for (int b = 0; b < nblk; b += 2) {
        const bool pair = b + 1 < nblk;
        for (int v = 0; v < GG_MP / 16; v++) {
            __m512 q[16];
            for (int i = 0; i < 16; i++) {
                const int row = 16 * v + i;
                if (row >= nr) {
                    q[i] = _mm512_setzero_ps();
                    continue;
                }
                const uint8_t *p = data + (size_t)(r + row) * row_bytes + (size_t)(b0 + b) * bs;
                __m512i u = gg_weights_pair(p, pair ? p + bs : p, kind);
                if (!pair) u = _mm512_zextsi256_si512(_mm512_castsi512_si256(u));
                q[i] = _mm512_castsi512_ps(u);
            }
            sp_transpose16(q); /* q[j]: columns 4j..4j+3 of the 16 rows */
            for (int j = 0; j < (pair ? 16 : 8); j++)
                _mm512_storeu_ps(panel + ((b * 8 + j) * GG_MP + 16 * v) * 4, q[j]);
        }
    }
    for (int b = 0; b < nblk; b++)
        for (int i = 0; i < GG_MP; i++) {
            const uint8_t *p = data + (size_t)(r + i) * row_bytes + (size_t)(b0 + b) * bs;
            dw[b * GG_MP + i] = i >= nr              ? 0.0f
                                : kind == GG_MXFP4 ? sp_e8m0_half_ggml(p[0])
                                                   : f16_at(p);
            mw[b * GG_MP + i] = i < nr && KIND_MIN(kind) ? f16_at(p + 2) : 0.0f;
        }
}

typedef struct gg_args {
    const uint8_t *panel;
    const float *dw, *mw;  /* [b][GG_MP] */
    int nblk;
    const int8_t *q;       /* token 0, the panel's first column */
    const float *d, *s;    /* token 0, the panel's first block */
    const int32_t *sum32;
    int64_t ldq, ldb;      /* token strides of q and of the per-block arrays */
    int64_t ldlq, ldlb;    /* part strides of the same (levels > 1) */
    int levels;
    float *y;              /* token 0, the panel's first row */
    int64_t ldy;
    int nr;
    bool accumulate;
} gg_args;

/* mt tokens from t0; kind, mt and (precision fast) levels are literals
 * after inlining. Each part of a block is one token of the decode kernels:
 * an exact integer sum (so no int32 overflow whatever the part count) and
 * an f32 scaling. One part: acc * (d_w d_x) added to the output, as
 * decode; several: sum_l acc_l d_x,l in f32 first, then times d_w (the
 * same terms, rounded in another order, two multiplies per part fewer). */
SP_INLINE void gg_micro(const gg_args *a, const int kind, const int levels,
                        const int mt, int t0) {
    __m512 out[GG_MT][2], part[GG_MT][2];
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++) out[t][0] = out[t][1] = _mm512_setzero_ps();
    const int8_t *qt = a->q + t0 * a->ldq;
    const int64_t bo = t0 * a->ldb;
    for (int b = 0; b < a->nblk; b++) {
        const uint8_t *pb = a->panel + b * 8 * GG_MP * 4;
        const __m512 dw0 = _mm512_loadu_ps(a->dw + b * GG_MP);
        const __m512 dw1 = _mm512_loadu_ps(a->dw + b * GG_MP + 16);
        for (int l = 0; l < levels; l++) {
            const int8_t *qb = qt + l * a->ldlq + 32 * b;
            __m512i acc[GG_MT][2];
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                const int64_t i = bo + t * a->ldb + l * a->ldlb + b;
                /* the weights' offset share starts the sum (a broadcast
                 * in place of the zeroing, not two subtractions after) */
                acc[t][0] = KIND_MIN(kind)
                    ? _mm512_setzero_si512()
                    : _mm512_set1_epi32(-a->sum32[i] * gg_offset(kind));
                acc[t][1] = acc[t][0];
            }
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i w0 = _mm512_loadu_si512(pb + k * GG_MP * 4);
                const __m512i w1 = _mm512_loadu_si512(pb + k * GG_MP * 4 + 64);
                sp_vnni_step(acc, mt, w0, w1, qb + 4 * k, a->ldq);
            }
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                const int64_t i = bo + t * a->ldb + l * a->ldlb + b;
                const __m512 dx = _mm512_set1_ps(a->d[i]);
                if (levels > 1) {
                    for (int h = 0; h < 2; h++)
                        part[t][h] = l == 0 ? _mm512_mul_ps(_mm512_cvtepi32_ps(acc[t][h]), dx)
                                            : _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][h]), dx, part[t][h]);
                    continue;
                }
                out[t][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][0]),
                                            _mm512_mul_ps(dw0, dx), out[t][0]);
                out[t][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t][1]),
                                            _mm512_mul_ps(dw1, dx), out[t][1]);
            }
        }
        if (levels > 1) {
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                out[t][0] = _mm512_fmadd_ps(part[t][0], dw0, out[t][0]);
                out[t][1] = _mm512_fmadd_ps(part[t][1], dw1, out[t][1]);
            }
        }
        if (KIND_MIN(kind)) { /* ggml's m_w * s_x per block */
            const __m512 mw0 = _mm512_loadu_ps(a->mw + b * GG_MP);
            const __m512 mw1 = _mm512_loadu_ps(a->mw + b * GG_MP + 16);
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                const __m512 sx = _mm512_set1_ps(a->s[bo + t * a->ldb + b]);
                out[t][0] = _mm512_fmadd_ps(mw0, sx, out[t][0]);
                out[t][1] = _mm512_fmadd_ps(mw1, sx, out[t][1]);
            }
        }
    }
    sp_vnni_store_tile(out, mt, a->y + (int64_t)t0 * a->ldy, a->ldy, a->nr, a->accumulate);
}

/* (several parts keep 3 x 2 x mt vectors live: at most 4 tokens) */
#define GG_TOKENS(kind, levels, step)                                   \
    do {                                                                \
        int t = 0;                                                      \
        for (; t + (step) <= nt; t += (step)) {                         \
            gg_micro(a, kind, levels, step, t);                         \
            sp_panel_prefetch_step(pf);                                 \
        }                                                               \
        switch (nt - t) {                                               \
        case 0: break;                                                  \
        case 1: gg_micro(a, kind, levels, 1, t); break;                 \
        case 2: gg_micro(a, kind, levels, 2, t); break;                 \
        case 3: gg_micro(a, kind, levels, 3, t); break;                 \
        case 4: gg_micro(a, kind, levels, 4, t); break;                 \
        default: gg_micro(a, kind, levels, 5, t); break;                \
        }                                                               \
    } while (0)

/* Every token against one packed panel: one part (precision fast) with the
 * part loop gone, or a->levels parts; the next panel's weights fetched
 * meanwhile (pf). */
SP_INLINE void gg_panel_tokens(const gg_args *a, const int kind, int nt,
                               sp_panel_prefetch *pf) {
    if (a->levels == 1) GG_TOKENS(kind, 1, GG_MT);
    else GG_TOKENS(kind, a->levels, GG_MT_PARTS);
}

SP_INLINE void gg_rows(const sp_weight *w, const sp_ggml_acts *x, float *y,
                       int64_t r0, int64_t r1, const int kind) {
    const int64_t nb = w->cols / 32;
    const size_t row_bytes = sp_ggml_row_size(w->ggml_type, w->cols);
    const size_t bs = sp_ggml_traits(w->ggml_type)->type_size;
    _Alignas(64) uint8_t panel[GG_KC * GG_MP];
    _Alignas(64) float dw[GG_PB * GG_MP], mw[GG_PB * GG_MP];
    const int levels = x->levels;
    gg_args a = {.panel = panel, .dw = dw, .mw = mw,
                 .ldq = levels * x->cols, .ldb = levels * nb,
                 .ldlq = x->cols, .ldlb = nb, .levels = levels,
                 .ldy = w->rows};
    const int calls = x->n_tokens / (levels == 1 ? GG_MT : GG_MT_PARTS);
    for (int64_t r = r0; r < r1; r += GG_MP) {
        const int nr = r1 - r < GG_MP ? (int)(r1 - r) : GG_MP;
        for (int64_t b0 = 0; b0 < nb; b0 += GG_PB) {
            const int nblk = nb - b0 < GG_PB ? (int)(nb - b0) : GG_PB;
            gg_pack(w->data, row_bytes, bs, kind, r, nr, b0, nblk, panel, dw, mw);
            sp_panel_prefetch pf = sp_panel_prefetch_next(
                w->data, row_bytes, r, r1, GG_MP, b0, nb, GG_PB, bs, calls);
            a.nblk = nblk;
            a.q = x->q + 32 * b0;
            a.d = x->d + b0;
            a.s = x->s + b0;
            a.sum32 = x->sum32 + b0;
            a.y = y + r;
            a.nr = nr;
            a.accumulate = b0 > 0;
            gg_panel_tokens(&a, kind, x->n_tokens, &pf);
        }
    }
}

bool sp_ggml_gemm_vnni(const sp_weight *w, const sp_ggml_acts *x, float *y,
                       int64_t r0, int64_t r1) {
    if (!w || !x || !y || w->type != SP_W_GGML || !w->data ||
        !sp_ggml_gemm_covered(w->ggml_type, w->cols) || x->cols != w->cols ||
        x->n_tokens < 1 || x->levels < 1 ||
        x->levels > SP_GGML_SPLIT_MAX_LEVELS || r0 < 0 || r1 > w->rows || r0 > r1)
        return false;
    const int kind = gg_kind(w->ggml_type);
    if (sp_ggml_dot_act_type(w->ggml_type) != (KIND_MIN(kind) ? SP_GGML_Q8_1 : SP_GGML_Q8_0))
        return false;
    switch (kind) {
    case 0: gg_rows(w, x, y, r0, r1, 0); break;
    case 1: gg_rows(w, x, y, r0, r1, 1); break;
    case 2: gg_rows(w, x, y, r0, r1, 2); break;
    case 3: gg_rows(w, x, y, r0, r1, 3); break;
    case 4: gg_rows(w, x, y, r0, r1, 4); break;
    default: gg_rows(w, x, y, r0, r1, GG_MXFP4); break;
    }
    return true;
}
SP_TARGET_END

#else
bool sp_ggml_gemm_covered(uint32_t type, int64_t cols) {
    (void)type, (void)cols;
    return false;
}
bool sp_ggml_gemm_vnni(const sp_weight *w, const sp_ggml_acts *x, float *y,
                       int64_t r0, int64_t r1) {
    (void)w, (void)x, (void)y, (void)r0, (void)r1;
    return false; /* no VNNI off x86: the caller keeps the f32 tiles */
}
#endif
