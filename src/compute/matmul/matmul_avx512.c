/* AVX-512 (F/BW/DQ/VL) instance of the SIMD matmul kernels: 16 f32 lanes.
 * Compiled for that target whatever the build flags; only called after
 * cpu_features.c has checked the CPU. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "compute/matmul/matmul_internal.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512)

#define VW 16
#define VF __m512
#define K(name) name##_avx512
#define K_NAME "avx512"
#define VZERO() _mm512_setzero_ps()
#define VSET1(v) _mm512_set1_ps(v)
#define VLOADU(p) _mm512_loadu_ps(p)
#define VSTOREU(p, v) _mm512_storeu_ps((p), (v))
#define VADD(a, b) _mm512_add_ps((a), (b))
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VHSUM(v) _mm512_reduce_add_ps(v)
#define VBF16(p) _mm512_castsi512_ps(_mm512_slli_epi32(                   \
    _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define VF16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define VU8(p) _mm512_cvtepi32_ps(                                         \
    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))))

#define VU8R(r) _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(r))

#define VS8R(r) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(r))
#include "compute/matmul/matmul_simd.inc"
SP_TARGET_END
#else
typedef int sp_no_x86_kernels; /* ISO C wants a non-empty file */
#endif
