/* AVX-512 instance of the gated delta rule kernels: 16 f32 lanes. Compiled
 * for that target whatever the build flags; linear_attention.c calls it only
 * while cpu_features.h reports the AVX-512 level. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

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
#define VMUL(a, b) _mm512_mul_ps((a), (b))
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VHSUM(v) _mm512_reduce_add_ps(v)

#include "compute/linear_attention/delta_net_simd.inc"
SP_TARGET_END
#else
typedef int sp_no_x86_delta_kernels; /* ISO C wants a non-empty file */
#endif
