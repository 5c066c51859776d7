/* AVX2 + FMA + F16C instance of the blocked attention
 * (attention_blocked.inc): 8 keys per tile, for CPUs without AVX-512 (on
 * them the one-pair-at-a-time loop of attention.c took 28 % of a Gemma 3
 * prefill). bf16 is widened by zero-extending to 32 bits and shifting left
 * 16, f16 by vcvtph2ps; e^x is simd_exp_avx2.h's, so inputs below
 * ln(FLT_MIN) ~ -87.3 give 0 (the AVX-512 instance's e^-87..e^-104 are at
 * most 1e-38 of the row's largest term, itself e^0). */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compute/attention/attention_simd.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/simd_exp_avx2.h"
#include "compute/simd_reduce_avx2.h"
#include "compute/simd_transpose_avx2.h"

/* e^x, x <= 0 or -inf; NaN and x below ln(FLT_MIN) give 0. */
static inline __m256 exp_ps(__m256 x) {
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(SP_EXP_MIN_F32), _CMP_GE_OQ);
    return _mm256_and_ps(sp_exp_avx2(x), keep);
}

/* 8 cache elements from element index i of `base`, as f32. */
static inline __attribute__((always_inline)) __m256
load_kv8(const void *base, size_t i, sp_kv_dtype type) {
    if (type == SP_KV_F32) return _mm256_loadu_ps((const float *)base + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + i));
    if (type == SP_KV_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* Lanes from..to of 8 (0 <= from <= to < 8): all-ones lanes. */
static inline __m256 lanes8(int from, int to) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i ge = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(from - 1));
    const __m256i le = _mm256_cmpgt_epi32(_mm256_set1_epi32(to + 1), idx);
    return _mm256_castsi256_ps(_mm256_and_si256(ge, le));
}

#define AB_COVERS sp_attention_avx2_covers
#define AB_RUN sp_attention_avx2
#define AB_W 8
#define VF __m256
#define VM __m256
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_load_ps(p)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_store_ps((p), (v))
#define V_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define V_SUB(a, b) _mm256_sub_ps((a), (b))
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_HMAX(v) sp_hmax8(v)
#define V_HADD(v) sp_hsum8(v)
#define V_TRANSPOSE(r) sp_transpose8(r)
#define V_LANES(from, to) lanes8((from), (to))
#define V_OR_NEG_INF(m, v) _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), (v), (m))
#define V_AND_MASK(m, v) _mm256_and_ps((m), (v))
#define V_LOAD_KV(base, i, type) load_kv8((base), (i), (type))
#define V_EXP(x) exp_ps(x)
#include "compute/attention/attention_blocked.inc"
SP_TARGET_END
#else
typedef int sp_no_x86_kernels; /* ISO C wants a non-empty file */
#endif
