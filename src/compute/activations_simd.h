/* Vector versions of ops.c's gated activations (activations_avx2.c), which
 * ops.c picks at run time; same contracts as sp_silu_mul,
 * sp_gelu_tanh_mul and sp_gelu_erf. */
#ifndef SP_COMPUTE_ACTIVATIONS_SIMD_H
#define SP_COMPUTE_ACTIVATIONS_SIMD_H

#if defined(__x86_64__)
void sp_silu_mul_avx2(float *gate, const float *up, int n);
void sp_gelu_tanh_mul_avx2(float *gate, const float *up, int n);
void sp_gelu_erf_avx2(float *x, int n);
#endif

#endif
