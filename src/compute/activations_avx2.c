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
SP_TARGET_END
#else
typedef int sp_no_x86_kernels; /* ISO C wants a non-empty file */
#endif
