/* AVX2 integer block products of the ggml decode kernels (ggml_dot.h), for
 * CPUs without AVX-512 VNNI: vpmaddubsw (u8 x s8 pairs to i16) + vpmaddwd
 * (pairs of i16 to i32), one 32-block per vector, one row streamed at a time.
 * q4_0 / q5_0 weights are read as unsigned codes (q + 8 in 0..15, q + 16 in
 * 0..31) and the offset times sum(q) is subtracted per 4-column lane
 * (exact); signed q8_0 weights use ggml's sign trick |w| * sign(q, w); q4_1
 * / q5_1 codes need no offset, their min enters as m_w * s_x per block
 * (ggml_vec_dot_q4_1_q8_1, _q5_1_q8_1). Lane integers are exact, so each
 * block's integer sum equals ggml's; lanes are scaled by d_w * d_x and
 * summed in f32. MXFP4 looks its codes up as signed bytes and takes the
 * sign trick too (ggml_vec_dot_mxfp4_q8_0). The k-quants are in
 * ggml_dot_kquants_avx2.c (their vpmaddwd multiplies by the sub-block
 * scales: no vpdpbusd form).
 *
 * ggml_dot_avxvnni.c compiles this file again with SP_GGML_AVXVNNI 1: the
 * vpmaddubsw + vpmaddwd pairs become VEX vpdpbusd (the same exact lane
 * sums: no pair here can saturate), the entry point sp_ggml_rows_q8_avxvnni. */
#ifndef SP_GGML_AVXVNNI
#define SP_GGML_AVXVNNI 0
#endif
#if SP_GGML_AVXVNNI
#define SP_GGML_TARGET SP_TARGET_AVXVNNI
#define SP_GGML_ROWS_Q8 sp_ggml_rows_q8_avxvnni
#else
#define SP_GGML_TARGET SP_TARGET_AVX2
#define SP_GGML_ROWS_Q8 sp_ggml_rows_q8_avx2
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
#include <stdint.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/simd_target.h"
#include "compute/simd_dpbusd.h"

SP_TARGET_BEGIN(SP_GGML_TARGET)
#include "compute/ggml/ggml_dot_x86.h"

/* Exact lane sums (4 columns each) of u * q for unsigned u (< 128 so the
 * pairwise i16 sums cannot saturate) and signed q. */
SP_INLINE __m256i madd_us(__m256i u, __m256i q) {
#if SP_GGML_AVXVNNI
    return sp_dpbusd256(_mm256_setzero_si256(), u, q);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
#endif
}

/* One row of kind 0..4 blocks (ggml_dot_x86.h) against nt tokens. */
SP_INLINE void avx2_row_q4q8(int kind, const uint8_t *row, int64_t nb,
                             const sp_ggml_act *act, const int nt, float *y,
                             int64_t ystride) {
    const size_t bs = KIND_BYTES(kind);
    __m256 acc[SP_MM_DECODE_TOKENS];
    float mins[SP_MM_DECODE_TOKENS] = {0};
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = row + (size_t)b * bs;
        const float dw = f16_at(p);
        __m256i u, wsgn = _mm256_setzero_si256();
        if (kind != 1) {
            u = nibbles_one(p + KIND_QS(kind));
            if (KIND_FIVE(kind)) u = _mm256_or_si256(u, fifth_bits(qh_at(p, kind)));
        } else {
            wsgn = _mm256_loadu_si256((const __m256i *)(p + 2));
            u = _mm256_sign_epi8(wsgn, wsgn); /* |w| (128 stays 0x80) */
        }
        for (int t = 0; t < nt; t++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(act[t].q + 32 * b));
            __m256i i;
            if (KIND_MIN(kind)) {
                i = madd_us(u, q);
                mins[t] += f16_at(p + 2) * act[t].s[b];
            } else if (kind != 1) {
                i = _mm256_sub_epi32(
                    madd_us(u, q),
                    _mm256_slli_epi32(_mm256_loadu_si256(
                                          (const __m256i *)(act[t].sum4 + 8 * b)),
                                      KIND_SHIFT(kind)));
            } else {
                /* |w| may be 128: pair sums stay <= 2 * 128 * 127 < 2^15 */
                i = madd_us(u, _mm256_sign_epi8(q, wsgn));
            }
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i),
                                     _mm256_set1_ps(dw * act[t].d[b]), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ystride] = sp_hsum8(acc[t]) + mins[t];
}

/* One row of MXFP4 blocks against nt tokens: the nibbles looked up
 * (pshufb) as the doubled E2M1 values, multiplied with ggml's sign trick
 * (|v| * sign(q, v); |v| <= 12, so no pair sum saturates). */
SP_INLINE void avx2_row_mxfp4(const uint8_t *row, int64_t nb,
                              const sp_ggml_act *act, const int nt, float *y,
                              int64_t ystride) {
    const __m256i lut = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)sp_mxfp4_kvalues));
    __m256 acc[SP_MM_DECODE_TOKENS];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = row + (size_t)b * sizeof(sp_block_mxfp4);
        const __m256i v = _mm256_shuffle_epi8(lut, nibbles_one(p + 1));
        const __m256i u = _mm256_sign_epi8(v, v);
        const float dw = sp_e8m0_half_ggml(p[0]);
        for (int t = 0; t < nt; t++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(act[t].q + 32 * b));
            const __m256i i = madd_us(u, _mm256_sign_epi8(q, v));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i),
                                     _mm256_set1_ps(act[t].d[b] * dw), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ystride] = sp_hsum8(acc[t]);
}

bool SP_GGML_ROWS_Q8(const sp_weight *w, const sp_ggml_act *act,
                     int n_tokens, float *y, int64_t r0, int64_t r1) {
    const uint32_t type = w->ggml_type;
    const int kind = block_kind(type);
    const int64_t nb = w->cols / 32;
    if (type == SP_GGML_MXFP4 && sp_ggml_rows_q8_takes(w, n_tokens)) {
#define ROW(n) avx2_row_mxfp4(row, nb, act, n, y + r, w->rows)
        SP_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW);
#undef ROW
        return true;
    }
    if (kind < 0 || !sp_ggml_rows_q8_takes(w, n_tokens)) return false;
#define ROW(n) SP_CONST_KIND5(kind, avx2_row_q4q8, row, nb, act, n, y + r, w->rows)
    SP_FOR_EACH_ROW(w, r0, r1, n_tokens, ROW);
#undef ROW
    return true;
}
SP_TARGET_END
#else
#include "compute/ggml/ggml_dot.h"
bool SP_GGML_ROWS_Q8(const sp_weight *w, const sp_ggml_act *act,
                     int n_tokens, float *y, int64_t r0, int64_t r1) {
    (void)w, (void)act, (void)n_tokens, (void)y, (void)r0, (void)r1;
    return false;
}
#endif
