/* SIMD kernel tables of sp_matmul. Which table is in use follows the
 * level chosen by cpu_features.h (the portable path, the table-less
 * fallback in matmul.c, at SP_SIMD_SCALAR). */
#ifndef SP_COMPUTE_MATMUL_SIMD_H
#define SP_COMPUTE_MATMUL_SIMD_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/cpu_features.h"
#include "compute/tensor.h"

/* Up to this many tokens the fused row kernels stream the weights once and
 * never build an f32 tile; above it the tiled GEMM path runs. */
#define SP_MM_SMALL_TOKENS 4
/* The integer-activation row kernels (MLX affine / mxfp4 int8 rows, and the
 * ggml block kernels of ggml_dot.h) take up to this many tokens in one pass
 * over each weight row: a batched decode step of 8 sequences reads every
 * weight once, not twice in two 4-token passes. 8 accumulators fit the 32
 * zmm registers; on AVX2's 16 ymm some accumulators spill to L1, which
 * still costs far less than streaming the weights a second time (measured:
 * bench/history/until-2026-12-07.md, "Batched decode"). The f32 row kernels
 * stop at SP_MM_SMALL_TOKENS. */
#define SP_MM_DECODE_TOKENS 8

typedef struct sp_mm_kernels {
    const char *name;
    /* Whether `rows` covers w's format for n_tokens tokens. */
    bool (*covers)(const sp_weight *w, int n_tokens);
    /* y[t * rows + r] for r in [r0, r1), t < n_tokens <= SP_MM_SMALL_TOKENS.
     * Returns false, writing nothing, when w's format is not covered; an
     * empty range (r0 == r1) only reports whether it is. */
    bool (*rows)(const sp_weight *w, const float *x, int n_tokens, float *y,
                 int64_t r0, int64_t r1);
    /* Decode columns [c0, c0 + n) of row r to f32 (same contract as
     * sp_decode_span); false, writing nothing, when the format is not
     * covered. */
    bool (*decode)(const sp_weight *w, int64_t r, int64_t c0, int64_t n,
                   float *out);
    /* y[t * ldy + i] (+)= sum_k tile[i * ldt + k] * x[t * ldx + k] for
     * i < nr, t < nt, k < kn; `accumulate` false stores instead. */
    void (*tile)(const float *tile, int64_t ldt, int nr, const float *x,
                 int64_t ldx, int nt, int64_t kn, float *y, int64_t ldy,
                 bool accumulate);
} sp_mm_kernels;

#if defined(__x86_64__)
extern const sp_mm_kernels sp_mm_kernels_avx2;
extern const sp_mm_kernels sp_mm_kernels_avxvnni; /* AVX2's f32 kernels */
extern const sp_mm_kernels sp_mm_kernels_avx512;
#elif defined(__aarch64__)
extern const sp_mm_kernels sp_mm_kernels_neon;
#endif

/* Integer-activation decode kernel for 4/8-bit affine rows (AVX-512 VNNI,
 * matmul_vnni.c); same contract as sp_mm_kernels.rows, plus `levels` = 1,
 * 2 or 3 int8 parts per activation (sp_mm_act_levels(): about 8, 15 or 22
 * significant bits of each block's largest |x|). Returns false, writing
 * nothing, for other formats, levels, or n_tokens * cols > 65536. Not
 * exact: see that file for the error bound. x86-64 only; call it only when
 * the CPU has AVX-512 VNNI. */
bool sp_mm_rows_vnni(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels);
/* Whether sp_mm_rows_vnni covers w for n_tokens tokens and `levels`. */
bool sp_mm_rows_vnni_covers(const sp_weight *w, int n_tokens, int levels);
/* The same kernel on AArch64 dotprod (matmul_int8_neon.c: SDOT, the same
 * activation blocks and levels, so the same bounds), same contract; false
 * off AArch64. */
bool sp_mm_rows_dotprod(const sp_weight *w, const float *x, int n_tokens,
                        float *y, int64_t r0, int64_t r1, int levels);
bool sp_mm_rows_dotprod_covers(const sp_weight *w, int n_tokens, int levels);

/* The same products on ymm (matmul_int8_avx2.c), covering the same formats
 * with the same integers per block: _avx2 with vpmaddubsw + vpmaddwd (call
 * only on an AVX2 CPU), _avxvnni with VEX vpdpbusd (only with AVX-VNNI). */
bool sp_mm_rows_int8_avx2(const sp_weight *w, const float *x, int n_tokens,
                          float *y, int64_t r0, int64_t r1, int levels);
bool sp_mm_rows_int8_avxvnni(const sp_weight *w, const float *x, int n_tokens,
                             float *y, int64_t r0, int64_t r1, int levels);

/* Opt-in prefill tile for bf16 weights (AVX-512 BF16, matmul_bf16dot.c);
 * same contract as sp_mm_kernels.tile, but the activations are rounded to
 * bf16: |error| <= 2^-8 sum_k |tile x| plus f32 accumulation. */
void sp_mm_tile_bf16(const float *tile, int64_t ldt, int nr, const float *x,
                     int64_t ldx, int nt, int64_t kn, float *y, int64_t ldy,
                     bool accumulate);

/* Portable C version of sp_mm_kernels.tile (matmul.c), used when no SIMD
 * level is active. */
void sp_mm_tile_portable(const float *tile, int64_t ldt, int nr,
                         const float *x, int64_t ldx, int nt, int64_t kn,
                         float *y, int64_t ldy, bool accumulate);

/* Kernels of the level in use (NULL: portable path). Thread-safe. */
const sp_mm_kernels *sp_mm_active(void);

#endif
