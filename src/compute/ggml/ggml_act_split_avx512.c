/* sp_ggml_split_row32 on AVX-512: ggml_act_split.c's split_block for
 * 32-blocks, two vectors per block, bit for bit (the same max, the same
 * scale and reciprocal, the same round-to-nearest-even through the 1.5 * 2^23
 * trick, so non-finite inputs give the same codes, the same fused residual).
 * The scalar loop calls libm's fmaxf / fmaf per value and was half of a
 * precision-high prefill. */
#include "compute/ggml/ggml_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512)

/* nearest(v) of ggml_act_split.c, per lane. */
static inline __m512i split_nearest(__m512 v) {
    const __m512 t = _mm512_add_ps(v, _mm512_set1_ps(12582912.f));
    return _mm512_sub_epi32(
        _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(0x007fffff)),
        _mm512_set1_epi32(0x00400000));
}

void sp_ggml_split_row32_avx512(const float *x, int64_t cols, int levels,
                                int8_t *const q[], float *const d[],
                                int32_t *const sum32[]) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    for (int64_t b = 0; b < cols / 32; b++) {
        __m512 r[2] = {_mm512_loadu_ps(x + 32 * b), _mm512_loadu_ps(x + 32 * b + 16)};
        for (int l = 0; l < levels; l++) {
            /* max_ps returns its second operand when the first is NaN:
             * NaNs are skipped as fmaxf skips them */
            __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, r[0]), _mm512_setzero_ps());
            m = _mm512_max_ps(_mm512_andnot_ps(sign, r[1]), m);
            const float amax = _mm512_reduce_max_ps(m);
            const float dl = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
            int32_t sum = 0;
            for (int h = 0; h < 2; h++) {
                __m512i v = split_nearest(_mm512_mul_ps(r[h], _mm512_set1_ps(id)));
                v = _mm512_max_epi32(_mm512_min_epi32(v, hi), lo);
                _mm_storeu_si128((__m128i *)(q[l] + 32 * b + 16 * h), _mm512_cvtepi32_epi8(v));
                sum += _mm512_reduce_add_epi32(v);
                r[h] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(dl), r[h]);
            }
            d[l][b] = dl;
            sum32[l][b] = sum;
        }
    }
}
SP_TARGET_END

#endif /* (off x86 sp_ggml_split_row32 never calls it) */
