/* AVX2 + FMA instance of the gated delta rule kernels: 8 f32 lanes.
 * Compiled for that target whatever the build flags; linear_attention.c
 * calls it only while cpu_features.h reports the AVX2 level or above. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)

static inline float sp_delta_hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#define VW 8
#define VF __m256
#define K(name) name##_avx2
#define K_NAME "avx2"
#define VZERO() _mm256_setzero_ps()
#define VSET1(v) _mm256_set1_ps(v)
#define VLOADU(p) _mm256_loadu_ps(p)
#define VSTOREU(p, v) _mm256_storeu_ps((p), (v))
#define VADD(a, b) _mm256_add_ps((a), (b))
#define VMUL(a, b) _mm256_mul_ps((a), (b))
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VHSUM(v) sp_delta_hsum_avx2(v)

#include "compute/linear_attention/delta_net_simd.inc"
SP_TARGET_END
#else
typedef int sp_no_x86_delta_kernels; /* ISO C wants a non-empty file */
#endif
