/* Prefill GEMM for MLX affine 4/8-bit weights with int8-split activations
 * and AVX-512 VNNI (matmul_vnni_gemm.c). */
#ifndef SP_COMPUTE_MATMUL_VNNI_GEMM_H
#define SP_COMPUTE_MATMUL_VNNI_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/tensor.h"

/* y[t * w->rows + r] = sum_j (s_g q_rj + b_g) x[t * w->cols + j] for r in
 * [r0, r1) and every t < n_tokens, with each activation represented by
 * `levels` (1..3) int8 parts per weight group: |error of x_j| <=
 * S_g 2^(-7 (levels - 1)) / 2, S_g = 2^ceil(log2(max_group |x| / 127)),
 * plus f32 rounding (see the .c file). Called per thread on a block of
 * rows; safe to run concurrently on disjoint row blocks.
 *
 * Returns false, writing nothing, when not covered: not an AVX-512 VNNI CPU,
 * not SP_W_AFFINE with 4 or 8 bits and group 32/64/128, levels outside 1..3,
 * a bad row range, or no scratch memory. An empty range (r0 == r1) only
 * reports whether the call would be covered. */
bool sp_mm_gemm_vnni(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels);

/* Whether sp_mm_gemm_vnni covers w, n_tokens and levels on this CPU. */
bool sp_mm_gemm_vnni_covers(const sp_weight *w, int n_tokens, int levels);

#endif
