/* The inner step of the AVX-512 VNNI GEMM micro-kernels (MLX affine:
 * matmul_vnni_gemm.c; ggml blocks: ggml_gemm_vnni.c): 4 columns of a
 * 32-row u8 panel (two vectors, rows in the int32 lanes, 4 consecutive
 * columns in each lane's bytes) against 4 s8 activations of each token.
 * Include only from a file compiled for AVX-512 VNNI (target pragma). */
#ifndef SP_COMPUTE_MATMUL_VNNI_STEP_H
#define SP_COMPUTE_MATMUL_VNNI_STEP_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* acc + the dot products of w's u8 and b's s8 quadruples, per int32 lane.
 * In asm because gcc 12 wraps the intrinsic in two register copies per
 * call, which doubled the micro-kernels' instruction count. */
static inline __attribute__((always_inline)) __m512i
sp_vnni_dpbusd(__m512i acc, __m512i w, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(b));
    return acc;
}

/* acc[t][0 / 1] += panel rows 0-15 / 16-31 (w0 / w1) dotted with the 4
 * activations at x + t * ldx, for t < mt (a literal after inlining, so the
 * accumulators stay in registers). */
static inline __attribute__((always_inline)) void
sp_vnni_step(__m512i (*acc)[2], const int mt, __m512i w0, __m512i w1,
             const int8_t *x, int64_t ldx) {
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++) {
        int32_t q4;
        memcpy(&q4, x + t * ldx, 4);
        const __m512i b = _mm512_set1_epi32(q4);
        acc[t][0] = sp_vnni_dpbusd(acc[t][0], w0, b);
        acc[t][1] = sp_vnni_dpbusd(acc[t][1], w1, b);
    }
}

/* y[t * ldy + r] (+)= out[t][r / 16][r % 16] for t < mt, r < nr (<= 32):
 * a 32-row f32 tile written back, rows past nr left alone. */
static inline __attribute__((always_inline)) void
sp_vnni_store_tile(__m512 (*out)[2], const int mt, float *y, int64_t ldy, int nr,
                   bool accumulate) {
    const int lo = nr < 16 ? nr : 16, hi = nr - lo;
    const __mmask16 m0 = (__mmask16)((1u << lo) - 1u);
    const __mmask16 m1 = (__mmask16)((1u << hi) - 1u);
    for (int t = 0; t < mt; t++) {
        float *o = y + (int64_t)t * ldy;
        if (accumulate) {
            out[t][0] = _mm512_add_ps(out[t][0], _mm512_maskz_loadu_ps(m0, o));
            out[t][1] = _mm512_add_ps(out[t][1], _mm512_maskz_loadu_ps(m1, o + 16));
        }
        _mm512_mask_storeu_ps(o, m0, out[t][0]);
        _mm512_mask_storeu_ps(o + 16, m1, out[t][1]);
    }
}

#endif
