/* AVX-512 instance of the blocked attention (attention_blocked.inc): 16
 * keys per tile. bf16 is widened by zero-extending to 32 bits and shifting
 * left 16, f16 by vcvtph2ps; e^x uses vscalefps for 2^n. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compute/attention/attention_simd.h"
#include "compute/simd_target.h"

SP_TARGET_BEGIN(SP_TARGET_AVX512)
#include "compute/matmul/matmul_transpose.h"

/* e^x, x <= 0 (a score minus the running max) or -inf. Cephes expf: x =
 * n ln2 + r, |r| <= ln2 / 2, e^r by its minimax polynomial, times 2^n. */
static inline __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f)); /* e^-104 is 0 in f32 */
    const __m512 n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 16 cache elements from element index i of `base`, as f32. */
static inline __attribute__((always_inline)) __m512
load_kv16(const void *base, size_t i, sp_kv_dtype type) {
    if (type == SP_KV_F32) return _mm512_loadu_ps((const float *)base + i);
    const __m256i h = _mm256_loadu_si256(
        (const __m256i *)((const uint16_t *)base + i));
    if (type == SP_KV_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Lanes from..to of 16 (0 <= from <= to < 16). */
static inline __mmask16 lanes16(int from, int to) {
    return (__mmask16)((((1u << (to + 1)) - 1u) >> from) << from);
}

#define AB_COVERS sp_attention_avx512_covers
#define AB_RUN sp_attention_avx512
#define AB_W 16
#define VF __m512
#define VM __mmask16
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_load_ps(p)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_store_ps((p), (v))
#define V_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#define V_SUB(a, b) _mm512_sub_ps((a), (b))
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_HMAX(v) _mm512_reduce_max_ps(v)
#define V_HADD(v) _mm512_reduce_add_ps(v)
#define V_TRANSPOSE(r) sp_transpose16(r)
#define V_LANES(from, to) lanes16((from), (to))
#define V_OR_NEG_INF(m, v) _mm512_mask_blend_ps((m), _mm512_set1_ps(-INFINITY), (v))
#define V_AND_MASK(m, v) _mm512_maskz_mov_ps((m), (v))
#define V_LOAD_KV(base, i, type) load_kv16((base), (i), (type))
#define V_EXP(x) exp_ps(x)
#include "compute/attention/attention_blocked.inc"
SP_TARGET_END
#else
typedef int sp_no_x86_kernels; /* ISO C wants a non-empty file */
#endif
