/* e^x on 8 f32 lanes (Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, e^r by
 * its minimax polynomial, times 2^n built in the exponent bits; about 1
 * ulp). x is clamped to [ln(FLT_MIN), 88.376], where 2^n is a normal
 * number: below it the result is FLT_MIN-sized instead of smaller, above
 * it 2.4e38 instead of larger (callers that need 0 or inf there mask it).
 * NaN lanes give FLT_MIN-sized values. Include inside an SP_TARGET_AVX2
 * region (simd_target.h), after <immintrin.h>. */
#ifndef SP_COMPUTE_SIMD_EXP_AVX2_H
#define SP_COMPUTE_SIMD_EXP_AVX2_H

#define SP_EXP_MIN_F32 -87.33654f /* ln(FLT_MIN) */
#define SP_EXP_MAX_F32 88.37626f  /* n = 127 at most */

static inline __attribute__((always_inline)) __m256 sp_exp_avx2(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(SP_EXP_MIN_F32));
    x = _mm256_min_ps(x, _mm256_set1_ps(SP_EXP_MAX_F32));
    const __m256 n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    const __m256i e2n = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e2n));
}

#endif
