/* AVX2 integer products of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) with
 * q8_K activations (ggml_dot.h), for CPUs without AVX-512 VNNI; one weight
 * row streamed at a time, one 256-column super-block per step.
 *
 * A super-block's weights are unpacked to unsigned bytes in column order,
 * eight vectors of 32 columns, together with one int16 scale vector per
 * vector (a 32-column sub-block's scale in all 16 words for Q4_K / Q5_K; the
 * scales of two 16-column sub-blocks, one per 128-bit lane, for the others).
 * vpmaddubsw multiplies the bytes by the int8 activations into int16 pairs
 * (at most 63 * 127 * 2 = 16002: no saturation), vpmaddwd multiplies each
 * pair by its scale into int32 lanes. A lane stays inside one sub-block, so
 * the lanes add up exactly to ggml's integer sum of scale * sub-block sum.
 *
 * The codes' offsets and the mins are integer sums over the 16-column
 * activation sums bsums: Q6_K codes are q + 32 and Q3_K codes q + 4, so
 * offset * sum_g scale_g * bsum_g is subtracted from the lanes (exact);
 * Q4_K / Q5_K / Q2_K have a min per sub-block, whose integer sum
 * sum_g m_g * bsum_g is scaled by dmin_w * d_x apart, as ggml's x86 code
 * does (ggml-cpu/arch/x86/quants.c). The float lanes are summed at the end of
 * the row, which only reorders ggml's float sum over super-blocks. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/ggml/ggml_dot_x86.h"

/* Per byte: the bits of v at `from` moved to `to` (0..7 both), masked by
 * `mask` (a 16-bit shift of whole words is exact per byte for such moves:
 * the bits kept never come from the neighbouring byte). */
SP_INLINE __m256i move_bits(__m256i v, int from, int to, int mask) {
    const __m256i s = from <= to ? _mm256_slli_epi16(v, to - from)
                                 : _mm256_srli_epi16(v, from - to);
    return _mm256_and_si256(s, _mm256_set1_epi8((char)mask));
}

/* Per byte: the bits of v from `shift` on, moved down to bit 0, masked. */
SP_INLINE __m256i low_bits(__m256i v, int shift, int mask) {
    return move_bits(v, shift, 0, mask);
}

/* For 16-column sub-blocks with int16 scales sc16 (word g: sub-block g):
 * the scale vector of columns 32k .. 32k + 31, scale 2k in the low 128-bit
 * lane and 2k + 1 in the high one. */
SP_INLINE __m256i sub16_scale(__m256i sc16, int k) {
    /* (immediate operands: clang wants them literal) */
    const __m256i half = k < 4 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                               : _mm256_permute2x128_si256(sc16, sc16, 0x11);
    const int w0 = (2 * k) % 8, w1 = w0 + 1;
    const __m256i idx = _mm256_setr_m128i(_mm_set1_epi16((short)((2 * w0 + 1) << 8 | 2 * w0)),
                                          _mm_set1_epi16((short)((2 * w1 + 1) << 8 | 2 * w1)));
    return _mm256_shuffle_epi8(half, idx);
}

/* One super-block unpacked: codes u[k] of columns 32k .. 32k + 31, their
 * scales sc[k], the int16 factors of bsums (bias: the mins, or the scales
 * when the codes carry an offset 1 << offset_shift), d and dmin. */
typedef struct k_block {
    __m256i u[8], sc[8], bias;
    float d, dmin;
} k_block;

enum { K2, K3, K4, K5, K6 };

#define K_BYTES(kt) ((kt) == K2   ? sizeof(sp_block_q2_K)                      \
                     : (kt) == K3 ? sizeof(sp_block_q3_K)                      \
                     : (kt) == K4 ? sizeof(sp_block_q4_K)                      \
                     : (kt) == K5 ? sizeof(sp_block_q5_K)                      \
                                  : sizeof(sp_block_q6_K))
/* log2 of the codes' offset (Q3_K, Q6_K), 0 for the types with mins */
#define K_OFFSET_SHIFT(kt) ((kt) == K3 ? 2 : (kt) == K6 ? 5 : 0)

/* q4_K / q5_K: 8 sub-blocks of 32, 6-bit scales and mins (k4_scales_mins);
 * sub-block 2c is the low nibbles of qs[32c ..], 2c + 1 the high ones; q5_K
 * adds bit j of qh[l] as bit 4 of column l of sub-block j. */
SP_INLINE void unpack_q45_K(const uint8_t *blk, bool five, k_block *kb) {
    const size_t qs_off = five ? offsetof(sp_block_q5_K, qs) : offsetof(sp_block_q4_K, qs);
    kb->d = f16_at(blk);
    kb->dmin = f16_at(blk + 2);
    const __m128i sm = k4_scales_mins(blk + 4);
    const __m256i sc2 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    for (int j = 0; j < 8; j++)
        kb->sc[j] = _mm256_shuffle_epi8(sc2, _mm256_set1_epi16((short)((2 * j + 1) << 8 | 2 * j)));
    /* (m_j, m_j) in dword j: times bsums[2j], bsums[2j + 1] */
    const __m256i m32 = _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8));
    kb->bias = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));
    for (int c = 0; c < 4; c++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + qs_off + 32 * c));
        kb->u[2 * c] = low_bits(raw, 0, 0x0F);
        kb->u[2 * c + 1] = low_bits(raw, 4, 0x0F);
    }
    if (five) {
        const __m256i qh =
            _mm256_loadu_si256((const __m256i *)(blk + offsetof(sp_block_q5_K, qh)));
        for (int j = 0; j < 8; j++)
            kb->u[j] = _mm256_or_si256(kb->u[j], move_bits(qh, j, 4, 0x10));
    }
}

/* q6_K: column 128n + 32s + l is the low (s < 2) or high nibble of
 * ql[64n + 32(s & 1) + l] with bits 2s, 2s + 1 of qh[32n + l] on top; int8
 * scales per 16 columns; codes q + 32. */
SP_INLINE void unpack_q6_K(const uint8_t *blk, k_block *kb) {
    const sp_block_q6_K *b = (const sp_block_q6_K *)blk;
    kb->d = f16_at((const uint8_t *)&b->d);
    kb->dmin = 0;
    kb->bias = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    for (int k = 0; k < 8; k++) kb->sc[k] = sub16_scale(kb->bias, k);
    for (int n = 0; n < 2; n++) {
        const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * n));
        const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * n + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * n));
        for (int s = 0; s < 4; s++)
            kb->u[4 * n + s] = _mm256_or_si256(low_bits(s & 1 ? ql1 : ql0, s < 2 ? 0 : 4, 0x0F),
                                               move_bits(qh, 2 * s, 4, 0x30));
    }
}

/* q2_K: column 128n + 32j + l is bits 2j, 2j + 1 of qs[32n + l]; 4-bit scale
 * (low nibble) and min (high nibble) per 16 columns. */
SP_INLINE void unpack_q2_K(const uint8_t *blk, k_block *kb) {
    const sp_block_q2_K *b = (const sp_block_q2_K *)blk;
    kb->d = f16_at((const uint8_t *)&b->d);
    kb->dmin = f16_at((const uint8_t *)&b->dmin);
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales);
    const __m128i nib = _mm_set1_epi8(0x0F);
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, nib));
    kb->bias = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), nib));
    for (int k = 0; k < 8; k++) kb->sc[k] = sub16_scale(sc16, k);
    for (int n = 0; n < 2; n++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * n));
        for (int j = 0; j < 4; j++) kb->u[4 * n + j] = low_bits(raw, 2 * j, 0x03);
    }
}

/* q3_K: column 128n + 32s + l is bits 2s, 2s + 1 of qs[32n + l] plus bit
 * 4n + s of hmask[l] as bit 2 (codes q + 4); 6-bit scales (s - 32) packed as
 * sp_get_scale_k3 (ggml_quants.h) unpacks them, four at a time here. */
SP_INLINE void unpack_q3_K(const uint8_t *blk, k_block *kb) {
    const sp_block_q3_K *b = (const sp_block_q3_K *)blk;
    kb->d = f16_at((const uint8_t *)&b->d);
    kb->dmin = 0;
    uint32_t w0, w1, hi;
    memcpy(&w0, b->scales, 4);
    memcpy(&w1, b->scales + 4, 4);
    memcpy(&hi, b->scales + 8, 4);
    const uint32_t nib = 0x0f0f0f0fu, two = 0x03030303u;
    const __m128i sc8 = _mm_sub_epi8(
        _mm_set_epi32((int)(((w1 >> 4) & nib) | ((hi >> 6) & two) << 4),
                      (int)(((w0 >> 4) & nib) | ((hi >> 4) & two) << 4),
                      (int)((w1 & nib) | ((hi >> 2) & two) << 4),
                      (int)((w0 & nib) | (hi & two) << 4)),
        _mm_set1_epi8(32));
    kb->bias = _mm256_cvtepi8_epi16(sc8);
    for (int k = 0; k < 8; k++) kb->sc[k] = sub16_scale(kb->bias, k);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    for (int n = 0; n < 2; n++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * n));
        for (int s = 0; s < 4; s++)
            kb->u[4 * n + s] = _mm256_or_si256(low_bits(raw, 2 * s, 0x03),
                                               move_bits(hm, 4 * n + s, 2, 0x04));
    }
}

SP_INLINE void unpack_k(const uint8_t *blk, int kt, k_block *kb) {
    switch (kt) {
    case K2: unpack_q2_K(blk, kb); break;
    case K3: unpack_q3_K(blk, kb); break;
    case K4: unpack_q45_K(blk, false, kb); break;
    case K5: unpack_q45_K(blk, true, kb); break;
    default: unpack_q6_K(blk, kb); break;
    }
}

/* One row of kt super-blocks against nt tokens. */
SP_INLINE void avx2_row_k(int kt, const uint8_t *row, int64_t nb,
                          const sp_ggml_act *act, const int nt, float *y,
                          int64_t ystride) {
    const int shift = K_OFFSET_SHIFT(kt);
    __m256 acc[SP_MM_DECODE_TOKENS], acc_min[SP_MM_DECODE_TOKENS];
    for (int t = 0; t < nt; t++) acc[t] = acc_min[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        k_block kb;
        unpack_k(row + (size_t)i * K_BYTES(kt), kt, &kb);
        for (int t = 0; t < nt; t++) {
            const sp_ggml_act *a = act + t;
            const int8_t *q8 = a->q + i * SP_QK_K;
            __m256i isum = _mm256_setzero_si256();
            for (int k = 0; k < 8; k++)
                isum = _mm256_add_epi32(
                    isum, _mm256_madd_epi16(_mm256_maddubs_epi16(
                                                kb.u[k], _mm256_loadu_si256((const __m256i *)(q8 + 32 * k))),
                                            kb.sc[k]));
            const __m256i bsum_terms = _mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(a->bsums + i * 16)), kb.bias);
            if (shift) {
                isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(bsum_terms, shift));
            } else {
                acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(bsum_terms),
                                             _mm256_set1_ps(kb.dmin * a->d[i]), acc_min[t]);
            }
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(kb.d * a->d[i]),
                                     acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ystride] = sp_hsum8(acc[t]) - sp_hsum8(acc_min[t]);
}

bool sp_ggml_rows_q8_kquants_avx2(const sp_weight *w, const sp_ggml_act *act,
                                  int n_tokens, float *y, int64_t r0, int64_t r1) {
    const uint32_t type = w->ggml_type;
    const int kt = type == SP_GGML_Q2_K   ? K2
                   : type == SP_GGML_Q3_K ? K3
                   : type == SP_GGML_Q4_K ? K4
                   : type == SP_GGML_Q5_K ? K5
                   : type == SP_GGML_Q6_K ? K6
                                          : -1;
    if (kt < 0 || !sp_ggml_rows_q8_takes(w, n_tokens)) return false;
    const int64_t nb = w->cols / SP_QK_K;
#define ROW(n) SP_CONST_KIND5(kt, avx2_row_k, row, nb, act, n, y + r, w->rows)
    SP_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW);
#undef ROW
    return true;
}

SP_TARGET_END
#else
#include "compute/ggml/ggml_dot.h"
bool sp_ggml_rows_q8_kquants_avx2(const sp_weight *w, const sp_ggml_act *act,
                                  int n_tokens, float *y, int64_t r0, int64_t r1) {
    (void)w, (void)act, (void)n_tokens, (void)y, (void)r0, (void)r1;
    return false;
}
#endif
