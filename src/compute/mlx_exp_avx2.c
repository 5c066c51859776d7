/* sp_mlx_exp_sum on 8 f32 lanes (mlx_exp.h): the terms as the scalar
 * sp_mlx_exp computes them, step for step (floor of x + 1/2 as its
 * truncation does for |x| < 128, the polynomial with fused multiply-adds),
 * then added to the running sum one lane at a time, in index order. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "compute/mlx_exp.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)

static inline __attribute__((always_inline)) __m256 mlx_exp8(__m256 x_init) {
    const __m256 x = _mm256_mul_ps(x_init, _mm256_set1_ps(1.442695f));
    const __m256 ipart = _mm256_floor_ps(_mm256_add_ps(x, _mm256_set1_ps(0.5f)));
    const __m256 f = _mm256_sub_ps(x, ipart);
    __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    /* Out-of-range lanes are replaced below; clamping keeps the exponent
     * arithmetic of the others from mattering there. */
    const __m256i n = _mm256_cvttps_epi32(
        _mm256_max_ps(_mm256_min_ps(ipart, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-127.0f)));
    const __m256 scale = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
    __m256 r = _mm256_mul_ps(scale, p);
    r = _mm256_blendv_ps(r, _mm256_setzero_ps(),
                         _mm256_cmp_ps(x_init, _mm256_set1_ps(-88.0f), _CMP_LT_OQ));
    r = _mm256_blendv_ps(r, _mm256_set1_ps(INFINITY),
                         _mm256_cmp_ps(x_init, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
    return _mm256_blendv_ps(r, x_init, _mm256_cmp_ps(x_init, x_init, _CMP_UNORD_Q));
}

float sp_mlx_exp_sum_avx2(const float *x, int n, float shift, float *out) {
    const __m256 s = _mm256_set1_ps(shift);
    float sum = 0.0f;
    float e[8];
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = mlx_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
        _mm256_storeu_ps(e, v);
        if (out) _mm256_storeu_ps(out + i, v);
        for (int l = 0; l < 8; l++) sum += e[l];
    }
    for (; i < n; i++) {
        float t = sp_mlx_exp(x[i] - shift);
        if (out) out[i] = t;
        sum += t;
    }
    return sum;
}

SP_TARGET_END
#endif
