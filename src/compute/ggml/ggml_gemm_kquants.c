/* Prefill GEMM of ggml k-quant weights (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) with
 * q8_K activations (sp_ggml_quantize_acts, precision fast), on AVX-512 VNNI
 * and on AVX2 (the AVX2 kernel also serves the AVX-VNNI level).
 *
 * Every super-block's value is llama.cpp's integer arithmetic, as the
 * decode kernels compute it (ggml_dot.c dot_q2_K .. dot_q6_K): per
 * 256-column super-block the exact int32 sums, with u the unsigned code
 * and groups of 32 (Q4_K, Q5_K: 6-bit scale sc_j, min m_j) or 16 columns
 * (Q2_K: 4-bit scale and min; Q3_K: 6-bit signed scale; Q6_K: int8 scale),
 *   Q4_K, Q5_K, Q2_K  (u: the nibble, the nibble + 16 * fifth bit, the 2 bits)
 *         isum = sum_j sc_j sum_l u q_x,   summs = sum_j m_j sum_x,j
 *         fma(float(isum), d_w d_x, acc), -fma(float(summs), dmin_w d_x, acc)
 *   Q6_K, Q3_K  (u = q + offset, offset 32 or 4)
 *         isum = sum_g sc_g sum_l u q_x - offset sum_g sc_g bsum_x,g
 *         (= sum_g sc_g sum_l q q_x), fma(float(isum), d_w d_x, acc)
 * so prefill and decode add the same terms and differ only in the order
 * they are summed (and fma's single rounding). Bounds: a Q6_K super-block's
 * |isum| <= 16 * 128 * 16 * 63 * 127 < 2^31, the others' less.
 *
 * Layout (ggml_gemm_vnni.c's): a panel of MP rows (two vectors of int32
 * lanes) by up to KC_K columns is unpacked once per call to the u bytes,
 * rows in the lanes and 4 consecutive columns in each lane's bytes, plus
 * per row and super-block the scales, the correction pairs and d, dmin as
 * f32; its cost is shared by every token of the call.
 *
 * AVX-512 VNNI: vpdpbusd per 4 columns into a per-group int32 sum (at most
 * 32 * 63 * 127), times the group's scale (vpmulld) into the super-block's
 * isum: one multiply per 8 (32-column groups) or 4 vpdpbusd. AVX2:
 * vpmaddubsw pairs (at most 2 * umax * 127) added in i16 over kq_run
 * steps (Q4_K 8 x 3810, Q5_K 4 x 7874, Q6_K 2 x 16002, Q3_K 4 x 1778,
 * Q2_K 4 x 762: no saturation); then one vpmaddwd with the (sc, sc) pair
 * widens and scales them at once. The corrections: vpdpwssd / vpmaddwd of
 * the rows' int16 pairs (the mins, or the scales of the offset types) with
 * the token's pairs of activation sums (32- or 16-column). */
#include "compute/ggml/ggml_dot.h"

#include <string.h>

#include "compute/cpu_features.h"

#if defined(__x86_64__) /* (up to the entry points) */
#include <immintrin.h>

#include "compute/ggml/ggml_panel_prefetch.h"
#include "compute/simd_target.h"

#define KC_K 512 /* columns per panel: two super-blocks */
#define SB_PER_PANEL (KC_K / SP_QK_K)
#define KQ_GROUPS_MAX 16 /* scaled groups per super-block */

/* The types, as kinds the kernels are instantiated for. */
enum { KQ_Q2, KQ_Q3, KQ_Q4, KQ_Q5, KQ_Q6 };

static inline int kq_kind(uint32_t type) {
    return type == SP_GGML_Q2_K   ? KQ_Q2
           : type == SP_GGML_Q3_K ? KQ_Q3
           : type == SP_GGML_Q4_K ? KQ_Q4
           : type == SP_GGML_Q5_K ? KQ_Q5
           : type == SP_GGML_Q6_K ? KQ_Q6
                                  : -1;
}

static inline size_t kq_block_bytes(int kind) {
    return kind == KQ_Q2   ? sizeof(sp_block_q2_K)
           : kind == KQ_Q3 ? sizeof(sp_block_q3_K)
           : kind == KQ_Q4 ? sizeof(sp_block_q4_K)
           : kind == KQ_Q5 ? sizeof(sp_block_q5_K)
                           : sizeof(sp_block_q6_K);
}

/* Q4_K, Q5_K: 8 groups of 32 columns; the others 16 of 16. */
static inline int kq_groups(int kind) { return kind == KQ_Q4 || kind == KQ_Q5 ? 8 : 16; }

/* log2 of the codes' offset (Q3_K 4, Q6_K 32); 0: the type has mins. */
static inline int kq_offset_shift(int kind) {
    return kind == KQ_Q6 ? 5 : kind == KQ_Q3 ? 2 : 0;
}

/* Scales of a panel of `mp` rows, per super-block s of the panel and row i
 * (rows past nr: zeros, so they add nothing):
 *   sc[(s * groups + g) * mp + i]  group g's scale, as an int32 (or with
 *                                  `pairs` as the int16 pair (sc, sc));
 *   cpair[(s * groups / 2 + p) * mp + i]  the int16 pair of the correction
 *                                  terms' weights: Q4_K (m_2p, m_2p+1),
 *                                  Q6_K (sc_2p, sc_2p+1);
 *   dw / dmw[s * mp + i]           d (and Q4_K's dmin) as f32. */
/* Super-block blk's group scales sc, correction weights cv (the mins, or
 * the scales of the offset types), d and dmin. */
static void kq_block_scales(int kind, const uint8_t *blk, int *sc, int *cv,
                            float *d, float *dmin) {
    const int groups = kq_groups(kind);
    if (kind == KQ_Q6) {
        const sp_block_q6_K *b = (const sp_block_q6_K *)blk;
        for (int g = 0; g < groups; g++) sc[g] = cv[g] = b->scales[g];
        *d = sp_f16_to_f32(b->d);
    } else if (kind == KQ_Q3) {
        const sp_block_q3_K *b = (const sp_block_q3_K *)blk;
        for (int g = 0; g < groups; g++) sc[g] = cv[g] = sp_get_scale_k3(b->scales, g);
        *d = sp_f16_to_f32(b->d);
    } else if (kind == KQ_Q2) {
        const sp_block_q2_K *b = (const sp_block_q2_K *)blk;
        for (int g = 0; g < groups; g++) {
            sc[g] = b->scales[g] & 0xF;
            cv[g] = b->scales[g] >> 4;
        }
        *d = sp_f16_to_f32(b->d);
        *dmin = sp_f16_to_f32(b->dmin);
    } else { /* Q4_K and Q5_K share d, dmin and scales[12] at the start */
        const sp_block_q4_K *b = (const sp_block_q4_K *)blk;
        for (int g = 0; g < groups; g++) {
            uint8_t scale, min;
            sp_get_scale_min_k4(g, b->scales, &scale, &min);
            sc[g] = scale;
            cv[g] = min;
        }
        *d = sp_f16_to_f32(b->d);
        *dmin = sp_f16_to_f32(b->dmin);
    }
}

static void kq_pack_scales(int kind, const uint8_t *data, size_t row_bytes,
                           int64_t r, int nr, int mp, int64_t sb0, int nsb,
                           bool pairs, int32_t *restrict sc,
                           int32_t *restrict cpair, float *restrict dw,
                           float *restrict dmw) {
    const int groups = kq_groups(kind);
    const size_t bsz = kq_block_bytes(kind);
    for (int s = 0; s < nsb; s++)
        for (int i = 0; i < mp; i++) {
            int scv[KQ_GROUPS_MAX] = {0}, cv[KQ_GROUPS_MAX] = {0};
            float d = 0.0f, dmin = 0.0f;
            if (i < nr)
                kq_block_scales(kind, data + (size_t)(r + i) * row_bytes + (size_t)(sb0 + s) * bsz,
                                scv, cv, &d, &dmin);
            for (int g = 0; g < groups; g++)
                sc[(s * groups + g) * mp + i] =
                    pairs ? (int32_t)(((uint32_t)scv[g] & 0xFFFFu) | (uint32_t)scv[g] << 16)
                          : scv[g];
            for (int p = 0; p < groups / 2; p++)
                cpair[(s * groups / 2 + p) * mp + i] =
                    (int32_t)(((uint32_t)cv[2 * p] & 0xFFFFu) | (uint32_t)cv[2 * p + 1] << 16);
            dw[s * mp + i] = d;
            dmw[s * mp + i] = dmin;
        }
}

/* Arguments of a micro-kernel call: one packed panel, every token. */
typedef struct kq_args {
    const uint8_t *panel;
    const int32_t *sc, *cpair;
    const float *dw, *dmw;
    int nsb;               /* super-blocks in the panel */
    const int8_t *q;       /* token 0, the panel's first column */
    const float *d;        /* token 0, the panel's first super-block */
    const int32_t *sum32;  /* token 0, the panel's first 32 columns */
    const int16_t *bsums;  /* token 0, the panel's first 16 columns */
    int64_t ldq, ldb, ldbs; /* token strides of q, d / sum32 and bsums */
    float *y;              /* token 0, the panel's first row */
    int64_t ldy;
    int nr;
    bool accumulate;
    sp_panel_prefetch *pf; /* the next panel's weights, a step per call */
} kq_args;

/* Token t's activation sums that pair p of super-block s's correction
 * weights multiplies, as an int16 pair (each at most 32 * 127 in
 * magnitude): the sums of groups 2p, 2p + 1, of 32 columns (Q4_K, Q5_K)
 * or 16 (bsums). */
static inline int32_t kq_act_pair(const kq_args *a, int kind, int t, int s, int p) {
    if (kq_groups(kind) == 16) {
        int32_t v;
        memcpy(&v, a->bsums + t * a->ldbs + 16 * s + 2 * p, 4);
        return v;
    }
    const int32_t *sum32 = a->sum32 + t * a->ldb + 8 * s;
    return (int32_t)(((uint32_t)sum32[2 * p] & 0xFFFFu) | (uint32_t)sum32[2 * p + 1] << 16);
}

/* The panels of rows r0..r1, each packed by `pack` (the level's
 * nibble-lane layout, `mp` rows) and run through `tokens` for every token
 * (mt per micro-kernel call). */
typedef void (*kq_pack_fn)(int kind, const uint8_t *data, size_t row_bytes,
                           int64_t r, int nr, int64_t sb0, int nsb, uint8_t *panel);
typedef void (*kq_tokens_fn)(const kq_args *a, int kind, int nt);

static void kq_rows(const sp_weight *w, const sp_ggml_acts *x, float *y,
                    int64_t r0, int64_t r1, int mp, int mt, kq_pack_fn pack,
                    kq_tokens_fn tokens, bool pairs, uint8_t *panel,
                    int32_t *sc, int32_t *cpair, float *dw, float *dmw) {
    const int kind = kq_kind(w->ggml_type);
    const int64_t nsb_row = w->cols / SP_QK_K;
    const size_t row_bytes = sp_ggml_row_size(w->ggml_type, w->cols);
    kq_args a = {.panel = panel, .sc = sc, .cpair = cpair, .dw = dw, .dmw = dmw,
                 .ldq = x->cols, .ldb = x->cols / 32, .ldbs = x->cols / 16,
                 .ldy = w->rows};
    for (int64_t r = r0; r < r1; r += mp) {
        const int nr = r1 - r < mp ? (int)(r1 - r) : mp;
        for (int64_t sb0 = 0; sb0 < nsb_row; sb0 += SB_PER_PANEL) {
            const int nsb = nsb_row - sb0 < SB_PER_PANEL ? (int)(nsb_row - sb0) : SB_PER_PANEL;
            pack(kind, w->data, row_bytes, r, nr, sb0, nsb, panel);
            kq_pack_scales(kind, w->data, row_bytes, r, nr, mp, sb0, nsb, pairs,
                           sc, cpair, dw, dmw);
            a.nsb = nsb;
            a.q = x->q + SP_QK_K * sb0;
            a.d = x->d + sb0;
            a.sum32 = x->sum32 + 8 * sb0;
            a.bsums = x->bsums ? x->bsums + 16 * sb0 : NULL;
            a.y = y + r;
            a.nr = nr;
            a.accumulate = sb0 > 0;
            sp_panel_prefetch pf = sp_panel_prefetch_next(
                w->data, row_bytes, r, r1, mp, sb0, nsb_row, SB_PER_PANEL,
                kq_block_bytes(kind), x->n_tokens / mt);
            a.pf = &pf;
            tokens(&a, kind, x->n_tokens);
        }
    }
}

/* ------------------------------------------------------ AVX-512 VNNI */

SP_TARGET_BEGIN(SP_TARGET_AVX512_VNNI)
#include "compute/ggml/ggml_dot_x86.h"
#include "compute/matmul/matmul_transpose.h"
#include "compute/matmul/matmul_vnni_step.h"

#define KV_MP 32 /* rows per panel */
#define KV_MT 4  /* tokens per micro-kernel call: 3 x 2 x 4 live vectors */

/* Columns 64 c .. 64 c + 63 of a super-block as unsigned bytes: Q4_K the
 * low then the high nibbles of qs[32c..32c+32) (sub-blocks 2c, 2c + 1),
 * Q5_K with bits 2c, 2c + 1 of qh[0..32) as their fifth; Q2_K, Q3_K bits
 * 2s, 2s + 1 of qs[32 (c / 2) ..] for s = 2 (c % 2) and the next (Q3_K:
 * plus bit 4 (c / 2) + s of hmask[0..32) as bit 2); Q6_K ql[64 (c / 2) ..]
 * (low nibbles for even c, high for odd) with 2 bits of qh[32 (c / 2) ..]
 * on top (shifted by 4 (c % 2), +2 for the second 32 columns). */
SP_INLINE __m512i kv_cols64(const uint8_t *blk, const int kind, int c) {
    const __m512i m = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    if (kind == KQ_Q4 || kind == KQ_Q5) {
        const uint8_t *qs = kind == KQ_Q4 ? ((const sp_block_q4_K *)blk)->qs
                                          : ((const sp_block_q5_K *)blk)->qs;
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        const __m512i v = _mm512_and_si512(
            _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), m);
        if (kind == KQ_Q4) return v;
        const __m256i qh = _mm256_loadu_si256((const __m256i *)((const sp_block_q5_K *)blk)->qh);
        const __m512i hb = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c))),
            _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), 1);
        return _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(hb, one), 4));
    }
    if (kind == KQ_Q2 || kind == KQ_Q3) {
        const uint8_t *qs = kind == KQ_Q2 ? ((const sp_block_q2_K *)blk)->qs
                                          : ((const sp_block_q3_K *)blk)->qs;
        const int n = c / 2, s0 = 2 * (c % 2);
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * n));
        const __m512i v = _mm512_and_si512(
            _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * s0))),
                _mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * s0 + 2)), 1),
            _mm512_set1_epi8(3));
        if (kind == KQ_Q2) return v;
        const __m256i hm = _mm256_loadu_si256((const __m256i *)((const sp_block_q3_K *)blk)->hmask);
        const __m512i hb = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * n + s0))),
            _mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * n + s0 + 1)), 1);
        return _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(hb, one), 2));
    }
    const sp_block_q6_K *b = (const sp_block_q6_K *)blk;
    const int half = c / 2, shift = 4 * (c % 2);
    __m512i lo = _mm512_loadu_si512(b->ql + 64 * half);
    if (shift) lo = _mm512_srli_epi16(lo, 4);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * half));
    const __m512i hi = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift))),
        _mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift + 2)), 1);
    return _mm512_or_si512(_mm512_and_si512(lo, m),
                           _mm512_slli_epi16(_mm512_and_si512(hi, _mm512_set1_epi8(3)), 4));
}

/* panel[((s * 64 + k4) * KV_MP + i) * 4 + j] = the unsigned code of row
 * r + i, column 256 s + 4 k4 + j of super-blocks sb0.. (rows >= nr: zero);
 * 16 rows' 64-column vectors are transposed at a time. */
SP_INLINE void kv_pack_of(const int kind, const uint8_t *data, size_t row_bytes,
                          int64_t r, int nr, int64_t sb0, int nsb,
                          uint8_t *restrict panel) {
    const size_t bsz = kq_block_bytes(kind);
    for (int s = 0; s < nsb; s++)
        for (int c = 0; c < 4; c++)
            for (int v = 0; v < KV_MP / 16; v++) {
                __m512 q[16];
                for (int i = 0; i < 16; i++) {
                    const int row = 16 * v + i;
                    q[i] = row >= nr ? _mm512_setzero_ps()
                                     : _mm512_castsi512_ps(kv_cols64(
                                           data + (size_t)(r + row) * row_bytes +
                                               (size_t)(sb0 + s) * bsz,
                                           kind, c));
                }
                sp_transpose16(q); /* q[j]: columns 4j..4j+3 of the 16 rows */
                for (int j = 0; j < 16; j++)
                    _mm512_store_ps(panel + ((s * 64 + c * 16 + j) * KV_MP + 16 * v) * 4, q[j]);
            }
}

/* kv_pack_of with the kind a literal (its unpacking inlined). */
static void kv_pack(int kind, const uint8_t *data, size_t row_bytes, int64_t r,
                    int nr, int64_t sb0, int nsb, uint8_t *restrict panel) {
#define KV_PACK(k) kv_pack_of(k, data, row_bytes, r, nr, sb0, nsb, panel)
    switch (kind) {
    case KQ_Q2: KV_PACK(KQ_Q2); break;
    case KQ_Q3: KV_PACK(KQ_Q3); break;
    case KQ_Q4: KV_PACK(KQ_Q4); break;
    case KQ_Q5: KV_PACK(KQ_Q5); break;
    default: KV_PACK(KQ_Q6); break;
    }
#undef KV_PACK
}

/* mt tokens from t0 against the panel; kind and mt are literals after
 * inlining. Per group, vpdpbusd into a fresh int32 sum, times the group's
 * scale into isum. Per super-block, the correction pairs by vpdpwssd: the
 * offset types' offset * sum_g sc_g bsum_g off isum as an integer, the
 * mins times dmin_w d_x off the output. */
SP_INLINE void kv_micro(const kq_args *a, const int kind, const int mt, int t0) {
    const int groups = kq_groups(kind), steps = 64 / groups;
    const int shift = kq_offset_shift(kind);
    __m512 out[KV_MT][2];
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++) out[t][0] = out[t][1] = _mm512_setzero_ps();
    const int8_t *qt = a->q + t0 * a->ldq;
    for (int s = 0; s < a->nsb; s++) {
        __m512i isum[KV_MT][2], acc[KV_MT][2];
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) isum[t][0] = isum[t][1] = _mm512_setzero_si512();
        for (int g = 0; g < groups; g++) {
            const uint8_t *pg = a->panel + (s * 64 + g * steps) * KV_MP * 4;
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) acc[t][0] = acc[t][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < steps; k++)
                sp_vnni_step(acc, mt, _mm512_load_si512(pg + k * KV_MP * 4),
                             _mm512_load_si512(pg + k * KV_MP * 4 + 64),
                             qt + 256 * s + 4 * (g * steps + k), a->ldq);
            const int32_t *sc = a->sc + (s * groups + g) * KV_MP;
            const __m512i sc0 = _mm512_loadu_si512(sc), sc1 = _mm512_loadu_si512(sc + 16);
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) {
                isum[t][0] = _mm512_add_epi32(isum[t][0], _mm512_mullo_epi32(acc[t][0], sc0));
                isum[t][1] = _mm512_add_epi32(isum[t][1], _mm512_mullo_epi32(acc[t][1], sc1));
            }
        }
        const __m512 dw0 = _mm512_loadu_ps(a->dw + s * KV_MP);
        const __m512 dw1 = _mm512_loadu_ps(a->dw + s * KV_MP + 16);
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) {
            __m512i c0 = _mm512_setzero_si512(), c1 = _mm512_setzero_si512();
            for (int p = 0; p < groups / 2; p++) {
                const __m512i xs = _mm512_set1_epi32(kq_act_pair(a, kind, t0 + t, s, p));
                const int32_t *cp = a->cpair + (s * groups / 2 + p) * KV_MP;
                c0 = _mm512_dpwssd_epi32(c0, _mm512_loadu_si512(cp), xs);
                c1 = _mm512_dpwssd_epi32(c1, _mm512_loadu_si512(cp + 16), xs);
            }
            const __m512 dx = _mm512_set1_ps(a->d[(t0 + t) * a->ldb + s]);
            if (shift) {
                isum[t][0] = _mm512_sub_epi32(isum[t][0], _mm512_slli_epi32(c0, shift));
                isum[t][1] = _mm512_sub_epi32(isum[t][1], _mm512_slli_epi32(c1, shift));
            } else {
                out[t][0] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(c0),
                                             _mm512_mul_ps(_mm512_loadu_ps(a->dmw + s * KV_MP), dx), out[t][0]);
                out[t][1] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(c1),
                                             _mm512_mul_ps(_mm512_loadu_ps(a->dmw + s * KV_MP + 16), dx), out[t][1]);
            }
            out[t][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t][0]), _mm512_mul_ps(dw0, dx), out[t][0]);
            out[t][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t][1]), _mm512_mul_ps(dw1, dx), out[t][1]);
        }
    }
    sp_vnni_store_tile(out, mt, a->y + (int64_t)t0 * a->ldy, a->ldy, a->nr, a->accumulate);
}

SP_INLINE void kv_tokens_of(const kq_args *a, const int kind, int nt) {
    int t = 0;
    for (; t + KV_MT <= nt; t += KV_MT) {
        kv_micro(a, kind, KV_MT, t);
        sp_panel_prefetch_step(a->pf);
    }
    switch (nt - t) {
    case 3: kv_micro(a, kind, 3, t); break;
    case 2: kv_micro(a, kind, 2, t); break;
    case 1: kv_micro(a, kind, 1, t); break;
    default: break;
    }
}

static void kv_tokens(const kq_args *a, int kind, int nt) {
    switch (kind) {
    case KQ_Q2: kv_tokens_of(a, KQ_Q2, nt); break;
    case KQ_Q3: kv_tokens_of(a, KQ_Q3, nt); break;
    case KQ_Q4: kv_tokens_of(a, KQ_Q4, nt); break;
    case KQ_Q5: kv_tokens_of(a, KQ_Q5, nt); break;
    default: kv_tokens_of(a, KQ_Q6, nt); break;
    }
}

static void kv_rows(const sp_weight *w, const sp_ggml_acts *x, float *y,
                    int64_t r0, int64_t r1) {
    _Alignas(64) uint8_t panel[KC_K * KV_MP];
    _Alignas(64) int32_t sc[SB_PER_PANEL * KQ_GROUPS_MAX * KV_MP];
    _Alignas(64) int32_t cpair[SB_PER_PANEL * KQ_GROUPS_MAX / 2 * KV_MP];
    _Alignas(64) float dw[SB_PER_PANEL * KV_MP], dmw[SB_PER_PANEL * KV_MP];
    kq_rows(w, x, y, r0, r1, KV_MP, KV_MT, kv_pack, kv_tokens, false, panel, sc,
            cpair, dw, dmw);
}
SP_TARGET_END

/* ------------------------------------------------------------- AVX2 */

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/simd_transpose_avx2.h"

#define KA_MP 16 /* rows per panel */
#define KA_MT 2  /* tokens per call: 3 x 2 x 2 live vectors of 8 */

/* Sub-block c (32 columns) of a super-block as unsigned bytes (as
 * kv_cols64). */
static inline __attribute__((always_inline)) __m256i
ka_cols32(const uint8_t *blk, const int kind, int c) {
    const __m256i m = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    if (kind == KQ_Q4 || kind == KQ_Q5) {
        const uint8_t *qs = kind == KQ_Q4 ? ((const sp_block_q4_K *)blk)->qs
                                          : ((const sp_block_q5_K *)blk)->qs;
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * (c / 2)));
        const __m256i v = _mm256_and_si256(c % 2 ? _mm256_srli_epi16(raw, 4) : raw, m);
        if (kind == KQ_Q4) return v;
        const __m256i qh = _mm256_loadu_si256((const __m256i *)((const sp_block_q5_K *)blk)->qh);
        const __m256i hb = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(c));
        return _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
    }
    if (kind == KQ_Q2 || kind == KQ_Q3) {
        const uint8_t *qs = kind == KQ_Q2 ? ((const sp_block_q2_K *)blk)->qs
                                          : ((const sp_block_q3_K *)blk)->qs;
        const int n = c / 4, sh = c % 4;
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * n));
        const __m256i v = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * sh)),
                                           _mm256_set1_epi8(3));
        if (kind == KQ_Q2) return v;
        const __m256i hm = _mm256_loadu_si256((const __m256i *)((const sp_block_q3_K *)blk)->hmask);
        const __m256i hb = _mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * n + sh));
        return _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(hb, one), 2));
    }
    const sp_block_q6_K *b = (const sp_block_q6_K *)blk;
    const int half = c / 4, quarter = c % 4;
    __m256i lo = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * half + 32 * (quarter & 1)));
    if (quarter >= 2) lo = _mm256_srli_epi16(lo, 4);
    const __m256i qh = _mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * half)),
                                        _mm_cvtsi32_si128(2 * quarter));
    return _mm256_or_si256(_mm256_and_si256(lo, m),
                           _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4));
}

/* kv_pack's layout with KA_MP rows, one sub-block of 8 rows per 8 x 8
 * transpose. */
static inline __attribute__((always_inline)) void
ka_pack_of(const int kind, const uint8_t *data, size_t row_bytes, int64_t r,
           int nr, int64_t sb0, int nsb, uint8_t *restrict panel) {
    const size_t bsz = kq_block_bytes(kind);
    for (int s = 0; s < nsb; s++)
        for (int c = 0; c < 8; c++)
            for (int i0 = 0; i0 < KA_MP; i0 += 8) {
                __m256 v[8];
                for (int i = 0; i < 8; i++)
                    v[i] = i0 + i >= nr ? _mm256_setzero_ps()
                                        : _mm256_castsi256_ps(ka_cols32(
                                              data + (size_t)(r + i0 + i) * row_bytes +
                                                  (size_t)(sb0 + s) * bsz,
                                              kind, c));
                sp_transpose8(v);
                for (int k4 = 0; k4 < 8; k4++)
                    _mm256_store_ps((float *)(panel + ((s * 64 + c * 8 + k4) * KA_MP + i0) * 4), v[k4]);
            }
}

/* ka_pack_of with the kind a literal (its unpacking inlined). */
static void ka_pack(int kind, const uint8_t *data, size_t row_bytes, int64_t r,
                    int nr, int64_t sb0, int nsb, uint8_t *restrict panel) {
#define KA_PACK(k) ka_pack_of(k, data, row_bytes, r, nr, sb0, nsb, panel)
    switch (kind) {
    case KQ_Q2: KA_PACK(KQ_Q2); break;
    case KQ_Q3: KA_PACK(KQ_Q3); break;
    case KQ_Q4: KA_PACK(KQ_Q4); break;
    case KQ_Q5: KA_PACK(KQ_Q5); break;
    default: KA_PACK(KQ_Q6); break;
    }
#undef KA_PACK
}

/* vpmaddubsw steps added in i16 before widening (see the top). */
static inline int kq_run(int kind) {
    return kind == KQ_Q4 ? 8 : kind == KQ_Q6 ? 2 : 4;
}

static inline __attribute__((always_inline)) __m256i ka_bcast(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* kv_micro on 8-lane vectors without vpdpbusd: vpmaddubsw pairs added in
 * i16 over as many steps as cannot saturate (kq_run), then vpmaddwd by the
 * (sc, sc) pair widens and scales them. */
static inline __attribute__((always_inline)) void
ka_micro(const kq_args *a, const int kind, const int mt, int t0) {
    const int groups = kq_groups(kind), steps = 64 / groups, run = kq_run(kind);
    const int shift = kq_offset_shift(kind);
    __m256 out[KA_MT][2];
#pragma GCC unroll 2
    for (int t = 0; t < mt; t++) out[t][0] = out[t][1] = _mm256_setzero_ps();
    const int8_t *qt = a->q + t0 * a->ldq;
    for (int s = 0; s < a->nsb; s++) {
        __m256i isum[KA_MT][2];
#pragma GCC unroll 2
        for (int t = 0; t < mt; t++) isum[t][0] = isum[t][1] = _mm256_setzero_si256();
        for (int g = 0; g < groups; g++) {
            const int32_t *sc = a->sc + (s * groups + g) * KA_MP;
            const __m256i sc0 = _mm256_loadu_si256((const __m256i *)sc);
            const __m256i sc1 = _mm256_loadu_si256((const __m256i *)(sc + 8));
            for (int k0 = 0; k0 < steps; k0 += run) {
                __m256i s16[KA_MT][2];
#pragma GCC unroll 2
                for (int t = 0; t < mt; t++) s16[t][0] = s16[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int k = k0; k < k0 + run; k++) {
                    const uint8_t *pk = a->panel + (s * 64 + g * steps + k) * KA_MP * 4;
                    const __m256i w0 = _mm256_load_si256((const __m256i *)pk);
                    const __m256i w1 = _mm256_load_si256((const __m256i *)(pk + 32));
#pragma GCC unroll 2
                    for (int t = 0; t < mt; t++) {
                        const __m256i xb = ka_bcast(qt + t * a->ldq + 256 * s + 4 * (g * steps + k));
                        /* adds, never saturating (see above): gcc would
                         * reassociate wrapping adds into a spilled tree */
                        s16[t][0] = _mm256_adds_epi16(s16[t][0], _mm256_maddubs_epi16(w0, xb));
                        s16[t][1] = _mm256_adds_epi16(s16[t][1], _mm256_maddubs_epi16(w1, xb));
                    }
                }
#pragma GCC unroll 2
                for (int t = 0; t < mt; t++) {
                    isum[t][0] = _mm256_add_epi32(isum[t][0], _mm256_madd_epi16(s16[t][0], sc0));
                    isum[t][1] = _mm256_add_epi32(isum[t][1], _mm256_madd_epi16(s16[t][1], sc1));
                }
            }
        }
        const __m256 dw0 = _mm256_loadu_ps(a->dw + s * KA_MP);
        const __m256 dw1 = _mm256_loadu_ps(a->dw + s * KA_MP + 8);
#pragma GCC unroll 2
        for (int t = 0; t < mt; t++) {
            __m256i c0 = _mm256_setzero_si256(), c1 = _mm256_setzero_si256();
            for (int p = 0; p < groups / 2; p++) {
                const __m256i xs = _mm256_set1_epi32(kq_act_pair(a, kind, t0 + t, s, p));
                const int32_t *cp = a->cpair + (s * groups / 2 + p) * KA_MP;
                c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)cp), xs));
                c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(cp + 8)), xs));
            }
            const __m256 dx = _mm256_set1_ps(a->d[(t0 + t) * a->ldb + s]);
            if (shift) {
                isum[t][0] = _mm256_sub_epi32(isum[t][0], _mm256_slli_epi32(c0, shift));
                isum[t][1] = _mm256_sub_epi32(isum[t][1], _mm256_slli_epi32(c1, shift));
            } else {
                out[t][0] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(c0),
                                             _mm256_mul_ps(_mm256_loadu_ps(a->dmw + s * KA_MP), dx), out[t][0]);
                out[t][1] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(c1),
                                             _mm256_mul_ps(_mm256_loadu_ps(a->dmw + s * KA_MP + 8), dx), out[t][1]);
            }
            out[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][0]), _mm256_mul_ps(dw0, dx), out[t][0]);
            out[t][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][1]), _mm256_mul_ps(dw1, dx), out[t][1]);
        }
    }
    for (int t = 0; t < mt; t++) {
        float *o = a->y + (int64_t)(t0 + t) * a->ldy;
        float v[KA_MP];
        _mm256_storeu_ps(v, out[t][0]);
        _mm256_storeu_ps(v + 8, out[t][1]);
        for (int i = 0; i < a->nr; i++) o[i] = a->accumulate ? v[i] + o[i] : v[i];
    }
}

static inline __attribute__((always_inline)) void
ka_tokens_of(const kq_args *a, const int kind, int nt) {
    int t = 0;
    for (; t + KA_MT <= nt; t += KA_MT) {
        ka_micro(a, kind, KA_MT, t);
        sp_panel_prefetch_step(a->pf);
    }
    if (t < nt) ka_micro(a, kind, 1, t);
}

static void ka_tokens(const kq_args *a, int kind, int nt) {
    switch (kind) {
    case KQ_Q2: ka_tokens_of(a, KQ_Q2, nt); break;
    case KQ_Q3: ka_tokens_of(a, KQ_Q3, nt); break;
    case KQ_Q4: ka_tokens_of(a, KQ_Q4, nt); break;
    case KQ_Q5: ka_tokens_of(a, KQ_Q5, nt); break;
    default: ka_tokens_of(a, KQ_Q6, nt); break;
    }
}

static void ka_rows(const sp_weight *w, const sp_ggml_acts *x, float *y,
                    int64_t r0, int64_t r1) {
    _Alignas(64) uint8_t panel[KC_K * KA_MP];
    _Alignas(64) int32_t sc[SB_PER_PANEL * KQ_GROUPS_MAX * KA_MP];
    _Alignas(64) int32_t cpair[SB_PER_PANEL * KQ_GROUPS_MAX / 2 * KA_MP];
    _Alignas(64) float dw[SB_PER_PANEL * KA_MP], dmw[SB_PER_PANEL * KA_MP];
    kq_rows(w, x, y, r0, r1, KA_MP, KA_MT, ka_pack, ka_tokens, true, panel, sc,
            cpair, dw, dmw);
}
SP_TARGET_END
#endif /* __x86_64__ */

bool sp_ggml_gemm_kquants_covered(uint32_t type, int64_t cols,
                                  sp_simd_level level) {
#if defined(__x86_64__)
    if (kq_kind(type) < 0 || cols <= 0 || cols % SP_QK_K ||
        !sp_ggml_dot_covered(type, cols) || !sp_simd_available(level))
        return false;
    if (level == SP_SIMD_AVX512) return sp_cpu_features_get()->avx512vnni;
    return level == SP_SIMD_AVX2 || level == SP_SIMD_AVXVNNI;
#else
    (void)type, (void)cols, (void)level;
    return false;
#endif
}

bool sp_ggml_gemm_kquants(const sp_weight *w, const sp_ggml_acts *x, float *y,
                          int64_t r0, int64_t r1, sp_simd_level level) {
    if (!w || !x || !y || w->type != SP_W_GGML || !w->data ||
        !sp_ggml_gemm_kquants_covered(w->ggml_type, w->cols, level) ||
        x->cols != w->cols || x->n_tokens < 1 || x->levels != 1 || r0 < 0 ||
        !x->bsums ||
        r1 > w->rows || r0 > r1)
        return false;
#if defined(__x86_64__)
    if (level == SP_SIMD_AVX512) kv_rows(w, x, y, r0, r1);
    else ka_rows(w, x, y, r0, r1);
    return true;
#else
    return false;
#endif
}
