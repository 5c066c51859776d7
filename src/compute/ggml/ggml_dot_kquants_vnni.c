/* AVX-512 VNNI integer products of the k-quants Q4_K, Q5_K and Q6_K with
 * q8_K activations (ggml_dot.h), one weight row streamed at a time, one
 * 256-column super-block per step.
 *
 * The weights of a super-block are unpacked to unsigned bytes in column
 * order, four vectors of 64 columns. vpmaddubsw multiplies them with the
 * int8 activations into int16 pairs (at most 63 * 127 * 2 = 16002, no
 * saturation), and vpdpwssd multiplies each pair by its sub-block scale,
 * held as an int16 twice per dword, and adds it to int32 lanes of 4 columns.
 * A lane stays inside one sub-block (16 or 32 columns), so the lanes of a
 * super-block add up exactly to ggml's integer sum of scale * sub-block sum.
 *
 * Float combination per super-block, as ggml's x86 code does it
 * (ggml-cpu/arch/x86/quants.c): the int32 lanes times d_w * d_x, and for
 * Q4_K/Q5_K minus dmin_w * d_x times the lanes of m_j * (bsums of sub-block
 * j); the lanes are summed in f32 at the end of the row, which only reorders
 * the generic code's float sums.
 *
 * Q6_K weights are q - 32 with q in 0..63: q is used as the unsigned byte and
 * 32 * sum_g scale_g * bsum_g (the activation sums of the 16 16-column
 * groups) is subtracted from the lanes as an integer. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
#include <stdint.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512_VNNI)
#include "compute/ggml/ggml_dot_x86.h"

/* Dwords of int32 values v (|v| < 2^15) as the int16 pair (v, v), the form
 * vpdpwssd multiplies both halves of a vpmaddubsw dword by. */
SP_INLINE __m512i int16_pairs(__m512i v) {
    return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)),
                           _mm512_slli_epi32(v, 16));
}

/* sum over 64 columns of w * q (w unsigned bytes, q the activations at q8),
 * each dword lane times its scale pair, added to acc. */
SP_INLINE __m512i scaled_dot64(__m512i acc, __m512i w, const int8_t *q8,
                               __m512i scale_pairs) {
    const __m512i pairs = _mm512_maddubs_epi16(w, _mm512_loadu_si512(q8));
    return _mm512_dpwssd_epi32(acc, pairs, scale_pairs);
}

/* ---------------- Q4_K and Q5_K: 8 sub-blocks of 32 ---------------- */

/* One row of q4_K (five = false) or q5_K super-blocks against nt tokens. */
SP_INLINE void vnni_row_q45_K(const uint8_t *row, int64_t nb, bool five,
                              const sp_ggml_act *act, const int nt, float *y,
                              int64_t ystride) {
    const size_t bsz = five ? sizeof(sp_block_q5_K) : sizeof(sp_block_q4_K);
    const size_t qs_off = five ? offsetof(sp_block_q5_K, qs) : offsetof(sp_block_q4_K, qs);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    /* vector p holds sub-blocks 2p (dwords 0..7) and 2p + 1 (dwords 8..15) */
    __m512i scale_idx[4];
    for (int p = 0; p < 4; p++)
        scale_idx[p] = _mm512_set_epi32(2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                        2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                        2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p,
                                        2 * p, 2 * p);
    /* q5_K: bit j of qh[l] is the fifth bit of column l of sub-block j;
     * rotating each qword left by 4 - j (mod 64) moves it to bit 4 */
    __m512i fifth_rot[4];
    for (int p = 0; p < 4; p++) {
        const long long r0 = (4 - 2 * p) & 63, r1 = (4 - 2 * p - 1) & 63;
        fifth_rot[p] = _mm512_set_epi64(r1, r1, r1, r1, r0, r0, r0, r0);
    }
    __m512 acc[SP_MM_DECODE_TOKENS];
    __m256 acc_min[SP_MM_DECODE_TOKENS];
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm512_setzero_ps();
        acc_min[t] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = row + (size_t)i * bsz;
        const float d = f16_at(blk), dmin = f16_at(blk + 2);
        /* dwords 0..7: scale pairs, 8..15: min pairs */
        const __m512i sm = int16_pairs(_mm512_cvtepu8_epi32(k4_scales_mins(blk + 4)));
        const __m256i min_pairs = _mm512_extracti64x4_epi64(sm, 1);
        __m512i w[4];
        for (int c = 0; c < 2; c++) {
            /* qs[64c .. 64c + 63]: low nibbles of bytes 0..31 are sub-block
             * 4c, high nibbles 4c + 1; bytes 32..63 likewise 4c + 2, 4c + 3 */
            const __m512i raw = _mm512_loadu_si512(blk + qs_off + 64 * c);
            const __m512i lo = _mm512_and_si512(raw, nib);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nib);
            w[2 * c] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
            w[2 * c + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
        }
        if (five) {
            const __m512i qh = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(blk + offsetof(sp_block_q5_K, qh))));
            for (int p = 0; p < 4; p++) /* w | (rotated & 0x10) */
                w[p] = _mm512_ternarylogic_epi32(w[p], _mm512_rolv_epi64(qh, fifth_rot[p]),
                                                 _mm512_set1_epi8(0x10), 0xF8);
        }
        __m512i scales[4];
        for (int p = 0; p < 4; p++) scales[p] = _mm512_permutexvar_epi32(scale_idx[p], sm);
        for (int t = 0; t < nt; t++) {
            const sp_ggml_act *a = act + t;
            const int8_t *q8 = a->q + i * SP_QK_K;
            __m512i isum = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) isum = scaled_dot64(isum, w[p], q8 + 64 * p, scales[p]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * a->d[i]),
                                     acc[t]);
            /* m_j * (bsums[2j] + bsums[2j + 1]) in dword j */
            const __m256i mins = _mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(a->bsums + i * 16)), min_pairs);
            acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins),
                                         _mm256_set1_ps(dmin * a->d[i]), acc_min[t]);
        }
    }
    for (int t = 0; t < nt; t++)
        y[t * ystride] = _mm512_reduce_add_ps(acc[t]) - sp_hsum8(acc_min[t]);
}

/* ---------------- Q6_K: 16 sub-blocks of 16 ---------------- */

/* One row of q6_K super-blocks against nt tokens. */
SP_INLINE void vnni_row_q6_K(const uint8_t *row, int64_t nb,
                             const sp_ggml_act *act, const int nt, float *y,
                             int64_t ystride) {
    const __m512i nib = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    /* vector p holds sub-blocks 4p .. 4p + 3, four dwords each */
    __m512i scale_idx[4];
    for (int p = 0; p < 4; p++) {
        const int s = 4 * p;
        scale_idx[p] = _mm512_set_epi32(s + 3, s + 3, s + 3, s + 3, s + 2, s + 2, s + 2,
                                        s + 2, s + 1, s + 1, s + 1, s + 1, s, s, s, s);
    }
    /* The two high bits of column 32 s + l of a 128-column half are bits
     * 2s, 2s + 1 of qh[l]; moved to bits 4, 5 per 32-column quarter:
     * s = 0, 1 shift left by 4, 2; s = 2, 3 shift right by 0, 2. */
    const __m512i left_01 = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);
    const __m512i right_23 = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    __m512 acc[SP_MM_DECODE_TOKENS];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const sp_block_q6_K *blk = (const sp_block_q6_K *)(row + (size_t)i * sizeof(sp_block_q6_K));
        const float d = f16_at((const uint8_t *)&blk->d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)blk->scales);
        const __m512i sc_pairs = int16_pairs(_mm512_cvtepi8_epi32(sc8));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m512i w[4];
        for (int n = 0; n < 2; n++) {
            /* ql[64n ..]: low nibbles are columns 0..63 of half n, high
             * nibbles columns 64..127 */
            const __m512i ql = _mm512_loadu_si512(blk->ql + 64 * n);
            const __m512i qh = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(blk->qh + 32 * n)));
            w[2 * n] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, nib),
                                                 _mm512_sllv_epi64(qh, left_01), bits45, 0xF8);
            w[2 * n + 1] = _mm512_ternarylogic_epi32(
                _mm512_and_si512(_mm512_srli_epi16(ql, 4), nib),
                _mm512_srlv_epi64(qh, right_23), bits45, 0xF8);
        }
        __m512i scales[4];
        for (int p = 0; p < 4; p++) scales[p] = _mm512_permutexvar_epi32(scale_idx[p], sc_pairs);
        for (int t = 0; t < nt; t++) {
            const sp_ggml_act *a = act + t;
            const int8_t *q8 = a->q + i * SP_QK_K;
            __m512i isum = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) isum = scaled_dot64(isum, w[p], q8 + 64 * p, scales[p]);
            /* the offset 32 of the weights: 32 * sum_g scale_g * bsum_g */
            const __m256i off = _mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(a->bsums + i * 16)), sc16);
            isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * a->d[i]),
                                     acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ystride] = _mm512_reduce_add_ps(acc[t]);
}

bool sp_ggml_rows_q8_kquants_vnni(const sp_weight *w, const sp_ggml_act *act,
                                  int n_tokens, float *y, int64_t r0, int64_t r1) {
    const uint32_t type = w->ggml_type;
    if ((type != SP_GGML_Q4_K && type != SP_GGML_Q5_K && type != SP_GGML_Q6_K) ||
        !sp_ggml_rows_q8_takes(w, n_tokens))
        return false;
    const int64_t nb = w->cols / SP_QK_K;
#define ROW(n)                                                                 \
    (type == SP_GGML_Q4_K   ? vnni_row_q45_K(row, nb, false, act, n, y + r, w->rows) \
     : type == SP_GGML_Q5_K ? vnni_row_q45_K(row, nb, true, act, n, y + r, w->rows)  \
                            : vnni_row_q6_K(row, nb, act, n, y + r, w->rows))
    SP_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW);
#undef ROW
    return true;
}

SP_TARGET_END
#else
#include "compute/ggml/ggml_dot.h"
bool sp_ggml_rows_q8_kquants_vnni(const sp_weight *w, const sp_ggml_act *act,
                                  int n_tokens, float *y, int64_t r0, int64_t r1) {
    (void)w, (void)act, (void)n_tokens, (void)y, (void)r0, (void)r1;
    return false;
}
#endif
