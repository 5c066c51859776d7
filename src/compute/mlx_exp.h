/* mlx's CPU exponential, and sums of it, for the sampler's log-softmax and
 * probability transforms (src/generation/sample_filters.c).
 *
 * mlx (backend/cpu/simd/math.h) computes e^x as 2^(x log2 e): a power of
 * two built in the exponent bits times a degree-6 polynomial of the
 * fraction, 0 below -88 (and wherever the power of two leaves the normal
 * range), inf above 88. Using the same function keeps the log-softmax
 * bit-identical to mlx's and puts the XTC / top-p cut-offs where mlx puts
 * them; expf differs from it by up to ~8e-7 relative. */
#ifndef SP_COMPUTE_MLX_EXP_H
#define SP_COMPUTE_MLX_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The scalar form does the fused multiply-adds in double: a*b is exact
 * there, so only a double rounding (vanishingly rare) could differ from
 * fmaf, which is a libm call on baseline x86-64. */
static inline float sp_mlx_fma(float a, float b, float c) {
    return (float)((double)a * (double)b + (double)c);
}

static inline float sp_mlx_exp(float x_init) {
    if (isnan(x_init)) return x_init;
    if (x_init > 88.0f) return INFINITY;
    if (x_init < -88.0f) return 0.0f;
    float x = x_init * 1.442695f;
    /* floor(x + 0.5) by truncation (|x| < 128 here): floorf is a libm call
     * on baseline x86-64. */
    float y = x + 0.5f;
    int32_t n = (int32_t)y;
    if ((float)n > y) n--;
    float ipart = (float)n;
    float fpart = x - ipart;
    x = 1.535336188319500e-4f;
    x = sp_mlx_fma(x, fpart, 1.339887440266574e-3f);
    x = sp_mlx_fma(x, fpart, 9.618437357674640e-3f);
    x = sp_mlx_fma(x, fpart, 5.550332471162809e-2f);
    x = sp_mlx_fma(x, fpart, 2.402264791363012e-1f);
    x = sp_mlx_fma(x, fpart, 6.931472028550421e-1f);
    x = sp_mlx_fma(x, fpart, 1.000000000000000f);
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return scale * x;
}

/* sum over i of sp_mlx_exp(x[i] - shift), accumulated in float32 one term
 * at a time in index order, as mlx's logsumexp and softmax sum; when out
 * is not NULL, out[i] receives each term. The terms are computed 8 at a
 * time where AVX2 + FMA run (with one rounding per multiply-add, as mlx's
 * own simd code), which is what makes a 150k-entry vocabulary's
 * log-softmax cheap; the running sum stays serial so that its rounding is
 * mlx's. x may be out. */
float sp_mlx_exp_sum(const float *x, int n, float shift, float *out);

#if defined(__x86_64__)
float sp_mlx_exp_sum_avx2(const float *x, int n, float shift, float *out);
#endif

#endif
