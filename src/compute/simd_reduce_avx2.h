/* Horizontal reductions of one 8-lane AVX2 vector, shared by the AVX2
 * kernels. Include inside an SP_TARGET_AVX2 (or wider) region
 * (simd_target.h), after <immintrin.h>. */
#ifndef SP_COMPUTE_SIMD_REDUCE_AVX2_H
#define SP_COMPUTE_SIMD_REDUCE_AVX2_H

#include <stdint.h>

/* The largest lane (a NaN lane may or may not be skipped). */
static inline __attribute__((always_inline)) float sp_hmax8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The sum of the lanes, as ((0+4)+(2+6)) + ((1+5)+(3+7)). */
static inline __attribute__((always_inline)) float sp_hsum8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The sum of the int32 lanes (wrapping as int32 addition does). */
static inline __attribute__((always_inline)) int32_t sp_hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

#endif
