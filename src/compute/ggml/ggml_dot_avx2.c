/* AVX2 integer block products of the ggml decode kernels (ggml_dot.h), for
 * CPUs without AVX-512 VNNI: vpmaddubsw (u8 x s8 pairs to i16) + vpmaddwd
 * (pairs of i16 to i32), one 32-block per vector, one row streamed at a time.
 * q4_0 weights are read as unsigned nibbles and the offset 8 * sum(q) is
 * subtracted per 4-column lane (exact); signed q8_0 weights use ggml's sign
 * trick |w| * sign(q, w); q4_1 nibbles need no offset, its min enters as
 * m_w * s_x per block (ggml_vec_dot_q4_1_q8_1). Lane integers are exact, so
 * each block's integer sum equals ggml's; lanes are scaled by d_w * d_x and
 * summed in f32. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
#include <stdint.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/ggml/ggml_dot_x86.h"

/* Exact lane sums (4 columns each) of u * q for unsigned u (< 128 so the
 * pairwise i16 sums cannot saturate) and signed q. */
SP_INLINE __m256i madd_us(__m256i u, __m256i q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}

SP_INLINE float hsum8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

enum { KIND_Q4_0, KIND_Q8_0, KIND_Q4_1 };

SP_INLINE void avx2_row_q4q8(const uint8_t *row, int64_t nb, int kind,
                             const sp_ggml_act *act, const int nt, float *y,
                             int64_t ystride) {
    const size_t bs = kind == KIND_Q4_0   ? sizeof(sp_block_q4_0)
                      : kind == KIND_Q8_0 ? sizeof(sp_block_q8_0)
                                          : sizeof(sp_block_q4_1);
    __m256 acc[SP_MM_SMALL_TOKENS];
    float mins[SP_MM_SMALL_TOKENS] = {0};
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = row + (size_t)b * bs;
        const float dw = f16_at(p);
        __m256i u, wsgn = _mm256_setzero_si256();
        if (kind != KIND_Q8_0) {
            const __m128i raw = _mm_loadu_si128(
                (const __m128i *)(p + (kind == KIND_Q4_1 ? 4 : 2)));
            u = _mm256_and_si256(
                _mm256_inserti128_si256(_mm256_castsi128_si256(raw),
                                        _mm_srli_epi16(raw, 4), 1),
                _mm256_set1_epi8(0x0F));
        } else {
            wsgn = _mm256_loadu_si256((const __m256i *)(p + 2));
            u = _mm256_sign_epi8(wsgn, wsgn); /* |w| (128 stays 0x80) */
        }
        for (int t = 0; t < nt; t++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(act[t].q + 32 * b));
            __m256i i;
            if (kind == KIND_Q4_1) {
                i = madd_us(u, q);
                mins[t] += f16_at(p + 2) * act[t].s[b];
            } else if (kind == KIND_Q4_0) {
                i = _mm256_sub_epi32(
                    madd_us(u, q),
                    _mm256_slli_epi32(_mm256_loadu_si256(
                                          (const __m256i *)(act[t].sum4 + 8 * b)),
                                      3));
            } else {
                /* |w| may be 128: pair sums stay <= 2 * 128 * 127 < 2^15 */
                i = madd_us(u, _mm256_sign_epi8(q, wsgn));
            }
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i),
                                     _mm256_set1_ps(dw * act[t].d[b]), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ystride] = hsum8(acc[t]) + mins[t];
}

bool sp_ggml_rows_q8_avx2(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1) {
    const uint32_t type = w->ggml_type;
    if ((type != SP_GGML_Q4_0 && type != SP_GGML_Q8_0 &&
         type != SP_GGML_Q4_1) ||
        !sp_ggml_dot_covered(type, w->cols) || n_tokens < 1 ||
        n_tokens > SP_MM_SMALL_TOKENS)
        return false;
    const int kind = type == SP_GGML_Q4_0   ? KIND_Q4_0
                     : type == SP_GGML_Q8_0 ? KIND_Q8_0
                                            : KIND_Q4_1;
    const int64_t nb = w->cols / 32;
    const size_t row_bytes = sp_ggml_row_size(type, w->cols);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * row_bytes;
#define ROW(n)                                                                 \
    (kind == KIND_Q4_0                                                         \
         ? avx2_row_q4q8(row, nb, KIND_Q4_0, act, n, y + r, w->rows)           \
     : kind == KIND_Q8_0                                                       \
         ? avx2_row_q4q8(row, nb, KIND_Q8_0, act, n, y + r, w->rows)           \
         : avx2_row_q4q8(row, nb, KIND_Q4_1, act, n, y + r, w->rows))
        SP_NT_SWITCH(ROW, n_tokens)
#undef ROW
    }
    return true;
}
SP_TARGET_END
#else
#include "compute/ggml/ggml_dot.h"
bool sp_ggml_rows_q8_avx2(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1) {
    (void)w, (void)act, (void)n_tokens, (void)y, (void)r0, (void)r1;
    return false;
}
#endif
