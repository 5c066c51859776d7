/* What the int8-activation row kernels of MLX affine and mxfp4 weights
 * share (AVX-512 VNNI: matmul_vnni.c; AVX2 and AVX-VNNI on ymm:
 * matmul_int8_avx2.c): the activation split, its scratch layout and the
 * formats covered. Both read the same blocks (the columns of one 64-byte
 * load of codes: 128 for 4 bits, 64 for 8 bits) with the same scale, so for
 * one input every level gives the same integers per block; only the f32
 * sums that follow differ in order. See matmul_vnni.c for the split and
 * its bounds. Plain C: include it from any target region. */
#ifndef SP_COMPUTE_MATMUL_INT8_ROWS_H
#define SP_COMPUTE_MATMUL_INT8_ROWS_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "compute/matmul/matmul_simd.h"
#include "compute/tensor.h"

/* Token-columns (n_tokens * cols) the scratch holds: an 8192-wide row for
 * 8 tokens, or a 65536-wide one for a single token. */
#define SP_VNNI_TOKEN_COLS 65536

typedef struct sp_vnni_scratch {
    /* Chunk k (the columns of one 64-byte load of codes), token t: record
     * (k * n_tokens + t) holds, for each level, the int8 activations (for
     * 4 bits the chunk's 64 even columns, then its 64 odd ones, matching
     * the low and high nibbles of the 64 bytes). */
    _Alignas(64) int8_t act[3 * SP_VNNI_TOKEN_COLS];
    /* S 2^-7(levels-1) of record (k * n_tokens + t) */
    float factor[SP_VNNI_TOKEN_COLS / 64];
    /* X_g per token, zero-padded to a multiple of 16 groups */
    _Alignas(64) float xsum[SP_VNNI_TOKEN_COLS / 32 + 16 * SP_MM_DECODE_TOKENS];
    /* AVX2, 8 bits only: per record, the sums over each 4 columns of the
     * first level's integers, times 128 * 128^(levels-1), 16 per record. */
    _Alignas(64) int32_t lane_sum[SP_VNNI_TOKEN_COLS / 4];
} sp_vnni_scratch;

static inline float sp_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Scale S of a block with largest magnitude amax, and 1 / S (both 0 for a
 * block taken as zero); see matmul_vnni.c. */
static inline void sp_block_scale(float amax, int levels, float *s,
                                  float *inv) {
    if (!(amax >= 0x1p-96f && amax <= FLT_MAX)) {
        *s = *inv = 0.0f;
        return;
    }
    if (levels == 1) {
        *s = amax / 127.0f;
        *inv = 127.0f / amax;
        return;
    }
    /* amax = 1.m 2^(E - 127), in [1, 2) 2^(E - 127). 127 * 2^(E - 134) is
     * below 2^(E - 127), and 127 * 2^(E - 132) is above 2^(E - 126): S is
     * 2^(E - 133) if that covers amax, else 2^(E - 132). */
    uint32_t u;
    memcpy(&u, &amax, 4);
    uint32_t e = (u >> 23) - 6; /* biased exponent of 2^(E - 133) */
    if (amax > 127.0f * sp_f32_from_bits(e << 23)) e++;
    *s = sp_f32_from_bits(e << 23);
    *inv = sp_f32_from_bits((254u - e) << 23);
}

/* One level: X_g of each group re-summed from the quantized activations
 * (S round(x / S) per block of `block` columns, as the kernel rounds them),
 * replacing the exact sums in xs that are finite. Then the group's bias
 * multiplies the same activations as its codes, and the product's error is
 * sum_j (s q_j + b) e_j, which is llama.cpp's Q8 error of the dequantized
 * weights (its q8_1 blocks carry the sum of the quantized values for the
 * same reason). With the exact X_g it would be s sum_j q_j e_j: MLX's codes
 * sit around the middle of their range, with b near -8 s (4 bits) or -128 s
 * (8 bits), so that error is 2-3x larger and does not cancel. Several
 * levels keep the exact sums (their e_j are 2^-14 smaller). A non-finite
 * exact sum stays, so non-finite input still gives non-finite output. */
static inline void sp_int8_quantized_group_sums(const float *x, int64_t cols,
                                                int64_t gs, int64_t block,
                                                float *xs) {
    for (int64_t g = 0; g < cols / gs; g++)
        if (xs[g] - xs[g] == 0.0f) xs[g] = 0.0f;
    for (int64_t c0 = 0; c0 < cols; c0 += block) {
        float amax = 0.0f;
        for (int64_t c = c0; c < c0 + block; c++)
            amax = fmaxf(amax, fabsf(x[c]));
        float s, inv;
        sp_block_scale(amax, 1, &s, &inv);
        /* a block inside a group, or groups inside a block */
        const int64_t seg = block < gs ? block : gs;
        for (int64_t c1 = c0; c1 < c0 + block; c1 += seg) {
            float *dst = xs + c1 / gs;
            if (!(*dst - *dst == 0.0f)) continue;
            int32_t isum = 0; /* |isum| <= 127 seg: exact */
            for (int64_t c = c1; c < c1 + seg; c++)
                isum += (int32_t)rintf(x[c] * inv);
            *dst += s * (float)isum;
        }
    }
}

/* S's unit per level: S 2^-7(levels-1) scales the combined integers. */
static inline float sp_level_unit(int levels) {
    return levels == 1 ? 1.0f : levels == 2 ? 0x1p-7f : 0x1p-14f;
}

/* Whether the int8 row kernels cover w for n_tokens tokens and `levels`. */
static inline bool sp_int8_rows_cover(const sp_weight *w, int n_tokens,
                                      int levels) {
    if (w && w->type == SP_W_MXFP4)
        return w->data && w->scales && w->rows > 0 && w->bits == 4 &&
               w->group_size == 32 && w->cols % 128 == 0 && n_tokens >= 1 &&
               n_tokens <= SP_MM_DECODE_TOKENS &&
               (int64_t)n_tokens * w->cols <= SP_VNNI_TOKEN_COLS &&
               levels >= 1 && levels <= 3;
    if (!w || w->type != SP_W_AFFINE || !w->data || !w->scales ||
        !w->biases || w->rows <= 0 || w->cols <= 0)
        return false;
    const int64_t cpc = w->bits == 4 ? 128 : 64;
    return (w->bits == 4 || w->bits == 8) &&
           (w->group_size == 32 || w->group_size == 64 ||
            w->group_size == 128) &&
           w->cols % cpc == 0 && w->cols % w->group_size == 0 &&
           (w->qparam_dtype == SP_DTYPE_F32 ||
            w->qparam_dtype == SP_DTYPE_F16 ||
            w->qparam_dtype == SP_DTYPE_BF16) &&
           n_tokens >= 1 && n_tokens <= SP_MM_DECODE_TOKENS &&
           (int64_t)n_tokens * w->cols <= SP_VNNI_TOKEN_COLS && levels >= 1 &&
           levels <= 3;
}

#endif
