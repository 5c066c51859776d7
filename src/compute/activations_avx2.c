/* The gated activations of ops.c on 8 f32 lanes (AVX2 + FMA), with
 * simd_exp_avx2.h's exponential instead of libm's expf / tanhf: a Gemma 3
 * prefill on an AVX2 CPU spent ~17 % of its time in tanhf (GeGLU).
 *
 * GELU's tanh form is computed as the logistic it equals,
 *   0.5 g (1 + tanh(y)) = g / (1 + e^(-2y)),  y = sqrt(2/pi) (g + 0.044715 g^3),
 * which needs one exponential and has no cancellation near y = 0 (1 + tanh
 * is what the product uses, never tanh alone). Results are within a few
 * ulp of libm's; precision exact keeps libm (ops.c). */
#if defined(__x86_64__)
#include <immintrin.h>

#include "compute/ops.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/simd_exp_avx2.h"

/* gate[i] = g / (1 + e^(scale * z(g))) * up[i], z(g) = g + cubic * g^3:
 * SiLU with scale -1, cubic 0; GELU-tanh with scale -2 sqrt(2/pi), cubic
 * 0.044715. The tail takes one masked vector. */
static inline __attribute__((always_inline)) __m256
gated(__m256 g, __m256 u, float scale, float cubic) {
    __m256 z = g;
    if (cubic != 0.0f)
        z = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(cubic), g),
                            _mm256_mul_ps(g, g), g);
    const __m256 e = sp_exp_avx2(_mm256_mul_ps(_mm256_set1_ps(scale), z));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static inline __attribute__((always_inline)) void
gated_mul(float *gate, const float *up, int n, float scale, float cubic) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, gated(_mm256_loadu_ps(gate + i),
                                         _mm256_loadu_ps(up + i), scale, cubic));
    if (i < n) {
        const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - i), idx);
        const __m256 g = _mm256_maskload_ps(gate + i, m);
        const __m256 u = _mm256_maskload_ps(up + i, m);
        _mm256_maskstore_ps(gate + i, m, gated(g, u, scale, cubic));
    }
}

void sp_silu_mul_avx2(float *gate, const float *up, int n) {
    gated_mul(gate, up, n, -1.0f, 0.0f);
}

void sp_gelu_tanh_mul_avx2(float *gate, const float *up, int n) {
    gated_mul(gate, up, n, -2.0f * 0.7978845608028654f, 0.044715f);
}

/* erfc(z) for z >= 0 with a relative error under 1.2e-7 everywhere: the
 * Chebyshev fit of Numerical Recipes' erfcc, t e^(-z^2 + P(t)) with
 * t = 1 / (1 + z / 2). Relative accuracy matters because GELU's negative
 * half is x erfc(|x| / sqrt 2) / 2, a tiny value that 1 + erf would cancel. */
static inline __attribute__((always_inline)) __m256 erfc_nonneg(__m256 z) {
    static const float c[10] = {-1.26551223f, 1.00002368f,  0.37409196f,
                                0.09678418f,  -0.18628806f, 0.27886807f,
                                -1.13520398f, 1.48851587f,  -0.82215223f,
                                0.17087277f};
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 t = _mm256_div_ps(
        one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, one));
    __m256 p = _mm256_set1_ps(c[9]);
    for (int k = 8; k >= 0; k--) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c[k]));
    return _mm256_mul_ps(t, sp_exp_avx2(_mm256_fnmadd_ps(z, z, p)));
}

/* x Phi(x): x (1 - erfc(z) / 2) for x >= 0, x erfc(z) / 2 below, z = |x| / sqrt 2. */
static inline __attribute__((always_inline)) __m256 gelu_erf8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(sign, x),
                                   _mm256_set1_ps(0.70710678118654752f));
    const __m256 half_erfc = _mm256_mul_ps(_mm256_set1_ps(0.5f), erfc_nonneg(z));
    const __m256 below = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 phi = _mm256_blendv_ps(
        _mm256_sub_ps(_mm256_set1_ps(1.0f), half_erfc), half_erfc, below);
    return _mm256_mul_ps(x, phi);
}

void sp_gelu_erf_avx2(float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, gelu_erf8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - i), idx);
        _mm256_maskstore_ps(x + i, m, gelu_erf8(_mm256_maskload_ps(x + i, m)));
    }
}
SP_TARGET_END
#else
typedef int sp_no_x86_kernels; /* ISO C wants a non-empty file */
#endif
