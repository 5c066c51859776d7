/* AVX2 + FMA + F16C instance of the SIMD matmul kernels: 8 f32 lanes.
 * Compiled for that target whatever the build flags; only called after
 * cpu_features.c has checked the CPU. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "compute/matmul/matmul_internal.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)

#define VW 8
#define VF __m256
#define K(name) name##_avx2
#define K_NAME "avx2"
#define VZERO() _mm256_setzero_ps()
#define VSET1(v) _mm256_set1_ps(v)
#define VLOADU(p) _mm256_loadu_ps(p)
#define VSTOREU(p, v) _mm256_storeu_ps((p), (v))
#define VADD(a, b) _mm256_add_ps((a), (b))
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VBF16(p) _mm256_castsi256_ps(_mm256_slli_epi32(                   \
    _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define VF16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define VU8(p) _mm256_cvtepi32_ps(                                         \
    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p))))

static inline float sp_hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define VHSUM(v) sp_hsum_avx2(v)

#define VU8R(r) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(r))

#define VS8R(r) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(r))
#include "compute/matmul/matmul_simd.inc"

/* The avxvnni level's f32 kernels are AVX2's (its int8 rows differ:
 * matmul_int8_avx2.c). */
const sp_mm_kernels sp_mm_kernels_avxvnni = {
    .name = "avxvnni",
    .covers = K(covers),
    .rows = K(rows),
    .decode = K(decode),
    .tile = K(tile),
};
SP_TARGET_END
#else
typedef int sp_no_x86_kernels; /* ISO C wants a non-empty file */
#endif
