/* Decode-time (few tokens) products of ggml block-quantized weights with
 * activations quantized the way llama.cpp quantizes them.
 *
 * llama.cpp is the reference implementation for GGUF files: for a quantized
 * weight type it quantizes the activations to the type's vec_dot_type
 * (ggml-cpu.c type_traits_cpu: q8_0 for Q4_0/Q5_0/Q8_0, q8_1 for Q4_1/Q5_1,
 * q8_K for the k-quants) and sums integer products per block. Doing the
 * same here makes every block's integer sum identical to llama.cpp's; only
 * the float summation order of the per-block terms differs.
 *
 * The quantized activations are kept in a structure-of-arrays form (int8
 * values contiguous, scales and sums apart) rather than ggml's block structs,
 * so that SIMD kernels can load 64 activations at once; the values are the
 * ones ggml's reference quantizers (ggml-quants.c quantize_row_q8_0_ref,
 * quantize_row_q8_1_ref, quantize_row_q8_K_ref) produce, with the f16 scales
 * already widened to f32. */
#ifndef SP_COMPUTE_GGML_DOT_H
#define SP_COMPUTE_GGML_DOT_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/ggml/ggml_quants.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/tensor.h"
#include "compute/threadpool.h"

/* Widest row the decode kernels take (activation scratch is static). Wider
 * rows use the tiled path. */
#define SP_GGML_DOT_MAX_COLS 32768

/* One token's activations quantized to the vec_dot_type of a weight type. */
typedef struct sp_ggml_act {
    /* q8_0 / q8_1 (32 per block) or q8_K (256 per block) values in column
     * order, each in [-127, 127]. */
    _Alignas(64) int8_t q[SP_GGML_DOT_MAX_COLS];
    /* Sum of q over each group of 4 columns (offset corrections of the
     * integer kernels: vpdpbusd lanes cover 4 columns). */
    _Alignas(64) int32_t sum4[SP_GGML_DOT_MAX_COLS / 4];
    /* Sum of q over each group of 32 columns (the same, per block). */
    _Alignas(64) int32_t sum32[SP_GGML_DOT_MAX_COLS / 32];
    /* Per block: q8_0/q8_1 the f16-rounded scale d as f32 (what ggml's dot
     * products read back); q8_K the f32 scale d. */
    _Alignas(64) float d[SP_GGML_DOT_MAX_COLS / 32];
    /* q8_1 only: the f16-rounded s = sum(q) * d, as f32. */
    float s[SP_GGML_DOT_MAX_COLS / 32];
    /* q8_K only: sum of q over each group of 16 columns. */
    int16_t bsums[SP_GGML_DOT_MAX_COLS / 16];
} sp_ggml_act;

/* The vec_dot_type llama.cpp pairs with weight type `type` (SP_GGML_Q8_0,
 * SP_GGML_Q8_1 or SP_GGML_Q8_K), or 0 when the decode kernels do not cover
 * `type`. */
uint32_t sp_ggml_dot_act_type(uint32_t type);

/* Whether the decode kernels cover weights of `type` with `cols` columns
 * (integer path and f32 path alike). */
bool sp_ggml_dot_covered(uint32_t type, int64_t cols);

/* Whether a decode entry point (sp_ggml_rows_q8_*) takes this call: the
 * weight is covered and 1 <= n_tokens <= SP_MM_DECODE_TOKENS. */
static inline bool sp_ggml_rows_q8_takes(const sp_weight *w, int n_tokens) {
    return sp_ggml_dot_covered(w->ggml_type, w->cols) && n_tokens >= 1 &&
           n_tokens <= SP_MM_DECODE_TOKENS;
}

/* Quantize `cols` activations (a multiple of the block size of act_type,
 * at most SP_GGML_DOT_MAX_COLS) as ggml's reference quantizer of act_type
 * does. Returns false, writing nothing, for a bad act_type or cols. */
bool sp_ggml_quantize_act(uint32_t act_type, const float *x, int64_t cols,
                          sp_ggml_act *out);

/* The same on AVX2 (ggml_quant_act_avx2.c), the same bits; what
 * sp_ggml_quantize_act runs at the x86 SIMD levels. False off x86. */
bool sp_ggml_quantize_act_avx2(uint32_t act_type, const float *x, int64_t cols,
                               sp_ggml_act *out);

/* Fill a->sum4 and a->sum32 from a->q (the first `cols` values). */
void sp_ggml_act_group_sums(sp_ggml_act *a, int64_t cols);

/* Precision high: `cols` activations as `levels` (1..SP_GGML_SPLIT_MAX_LEVELS)
 * int8 parts of act_type, parts[0..levels) (ggml_act_split.c): x is about
 * sum_l parts[l] (value times its block's f32 d), the error of each part
 * quantized by the next; s (q8_1) is exactly sum(q) * d in f32. A product
 * is the sum of the decode kernels' results over the parts. Returns false,
 * writing nothing useful, for a bad act_type, levels or cols. */
#define SP_GGML_SPLIT_MAX_LEVELS 3
bool sp_ggml_quantize_act_split(uint32_t act_type, const float *x,
                                int64_t cols, int levels, sp_ggml_act *parts);

/* The 32-blocks of that split for one row of `cols` (a multiple of 32)
 * activations: part l's values at q[l][0..cols), its per-block f32 d and
 * integer sum at d[l][b], sum32[l][b]. The AVX-512 version (used at that
 * SIMD level) gives the same bits. */
void sp_ggml_split_row32(const float *x, int64_t cols, int levels,
                         int8_t *const q[], float *const d[],
                         int32_t *const sum32[]);
void sp_ggml_split_row32_avx512(const float *x, int64_t cols, int levels,
                                int8_t *const q[], float *const d[],
                                int32_t *const sum32[]);
/* One block of bs (32 or 256) values split into `levels` parts on AVX2:
 * q[l][0..bs), d[l], sum[l], the same bits as the portable split. */
void sp_ggml_split_block_avx2(const float *x, int bs, int levels,
                              int8_t *const q[], float d[], int32_t sum[]);

/* y[t * w->rows + r] for r in [r0, r1), t < n_tokens (1..SP_MM_DECODE_TOKENS): the integer
 * block products of the rows of w with act[t] (quantized to
 * sp_ggml_dot_act_type(w->ggml_type)), with the kernels of `level`. Returns
 * false, writing nothing, when the type is not covered. */
bool sp_ggml_rows_q8(const sp_weight *w, const sp_ggml_act *act, int n_tokens,
                     float *y, int64_t r0, int64_t r1, sp_simd_level level);

/* The portable kernels (ggml_dot.c) and the x86 ones (ggml_dot_avx2.c,
 * ggml_dot_kquants_avx2.c, ggml_dot_vnni.c, ggml_dot_kquants_vnni.c); same
 * contract as sp_ggml_rows_q8. The x86 ones return false for a type they leave to the
 * portable kernels. */
bool sp_ggml_rows_q8_portable(const sp_weight *w, const sp_ggml_act *act,
                              int n_tokens, float *y, int64_t r0, int64_t r1);
bool sp_ggml_rows_q8_avx2(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1);
bool sp_ggml_rows_q8_vnni(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1);
/* ggml_dot_avx2.c's types with VEX vpdpbusd (AVX-VNNI: ggml_dot_avxvnni.c). */
bool sp_ggml_rows_q8_avxvnni(const sp_weight *w, const sp_ggml_act *act,
                             int n_tokens, float *y, int64_t r0, int64_t r1);
/* AVX2 + FMA + F16C: the 32-column block types (ggml_dot_avx2.c) and the
 * k-quants Q2_K .. Q6_K (ggml_dot_kquants_avx2.c). */
bool sp_ggml_rows_q8_kquants_avx2(const sp_weight *w, const sp_ggml_act *act,
                                  int n_tokens, float *y, int64_t r0, int64_t r1);
/* Q4_K, Q5_K and Q6_K (the others: ggml_dot_vnni.c). */
bool sp_ggml_rows_q8_kquants_vnni(const sp_weight *w, const sp_ggml_act *act,
                                  int n_tokens, float *y, int64_t r0, int64_t r1);

/* AArch64 (ggml_dot_neon.c, ggml_dot_kquants_neon.c), same contract; false
 * for a type left to the portable kernels (and everywhere off AArch64).
 * dotprod: SDOT, the 32-column block types (q4_0, q8_0, q4_1, q5_0, q5_1,
 * mxfp4), and the k-quants Q2_K .. Q6_K; i8mm: SMMLA, two rows by two tokens,
 * for the 32-column block types (one token: the dotprod kernel). Only at
 * those levels (sp_simd_available). */
bool sp_ggml_rows_q8_dotprod(const sp_weight *w, const sp_ggml_act *act,
                             int n_tokens, float *y, int64_t r0, int64_t r1);
bool sp_ggml_rows_q8_kquants_dotprod(const sp_weight *w, const sp_ggml_act *act,
                                     int n_tokens, float *y, int64_t r0,
                                     int64_t r1);
bool sp_ggml_rows_q8_i8mm(const sp_weight *w, const sp_ggml_act *act,
                          int n_tokens, float *y, int64_t r0, int64_t r1);

/* out[t] += sum_{k < n} w[k] * x[t * ldx + k] for t < nt (the f32 path of
 * precision exact), n a multiple of 16; the level picks the vector width. */
void sp_ggml_span_dot(const float *w, const float *x, int64_t ldx, int nt,
                      int64_t n, float *out, sp_simd_level level);
void sp_ggml_span_dot_avx512(const float *w, const float *x, int64_t ldx,
                             int nt, int64_t n, float *out);

/* ---- prefill (n_tokens > SP_MM_SMALL_TOKENS): ggml_gemm_vnni.c ---- */

/* Every token of a call quantized to q8_0 or q8_1, compact, as `levels`
 * rows per token: levels 1, llama.cpp's single rounding (values and f16
 * scales those of sp_ggml_quantize_act); levels 2..3, the parts of
 * sp_ggml_quantize_act_split (precision high), part l of token t in row
 * t * levels + l. Row i's values at q + i * cols, its per-block d, s and
 * sum32 at [i * (cols / 32) + block]; for a split token, the s of its part-0
 * row is the sum of its parts' s (the others are not read). */
typedef struct sp_ggml_acts {
    const int8_t *q;
    const float *d, *s;
    const int32_t *sum32;
    const int16_t *bsums; /* q8_K: sums of 16 columns, [t * (cols / 16) + g] */
    int n_tokens, levels;
    int64_t cols;
} sp_ggml_acts;

/* Quantize n_tokens rows of `cols` activations (x[t * cols + c]) to act_type
 * (SP_GGML_Q8_0 or SP_GGML_Q8_1) in `levels` parts (1..
 * SP_GGML_SPLIT_MAX_LEVELS), or to SP_GGML_Q8_K in one part (the token's
 * f32 d of 256-column super-block k at d[t * (cols / 32) + k], sum32 per
 * 32 columns as for the others, bsums per 16, s unused), the tokens split over `pool` (NULL: this
 * thread), into this (the calling) thread's scratch (grown as needed, never
 * shrunk): *out stays valid until this thread's next call. Returns false,
 * writing nothing to *out, for bad arguments or no memory. */
bool sp_ggml_quantize_acts(sp_pool *pool, uint32_t act_type, const float *x,
                           int n_tokens, int64_t cols, int levels,
                           sp_ggml_acts *out);

/* Whether sp_ggml_gemm_vnni covers weights of `type` with `cols` columns on
 * this CPU (AVX-512 VNNI; q4_0, q8_0, q4_1, q5_0, q5_1). */
bool sp_ggml_gemm_covered(uint32_t type, int64_t cols);

/* y[t * w->rows + r] for r in [r0, r1) and t < x->n_tokens (any count): the
 * decode kernels' per-block values (exact integer block sums times
 * d_w * d_x, plus m_w * s_x for q4_1 / q5_1), summed in another order; with
 * x->levels > 1 the sum over each token's parts, as the decode path of
 * precision high adds them (per block here, per row there). x
 * must be quantized to sp_ggml_dot_act_type(w->ggml_type). Safe to run
 * concurrently on disjoint row ranges. Returns false, writing nothing, when
 * not covered or for bad arguments. */
bool sp_ggml_gemm_vnni(const sp_weight *w, const sp_ggml_acts *x, float *y,
                       int64_t r0, int64_t r1);

/* ---- prefill on AVX2 / AVX-VNNI: ggml_gemm_avx2.c ---- */

/* Whether sp_ggml_gemm_int8 takes `type` with `cols` columns at `level`
 * (SP_SIMD_AVX2 or SP_SIMD_AVXVNNI, available on this CPU; q4_0, q8_0,
 * q4_1, q5_0, q5_1). */
bool sp_ggml_gemm_int8_covered(uint32_t type, int64_t cols, sp_simd_level level);

/* sp_ggml_gemm_vnni's contract with the kernels of `level`: vpmaddubsw +
 * vpmaddwd (AVX2) or VEX vpdpbusd (AVX-VNNI), the same exact block sums. */
bool sp_ggml_gemm_int8(const sp_weight *w, const sp_ggml_acts *x, float *y,
                       int64_t r0, int64_t r1, sp_simd_level level);
bool sp_ggml_gemm_avx2(const sp_weight *w, const sp_ggml_acts *x, float *y,
                       int64_t r0, int64_t r1);
bool sp_ggml_gemm_avxvnni(const sp_weight *w, const sp_ggml_acts *x, float *y,
                          int64_t r0, int64_t r1);

/* ---- prefill of the k-quants: ggml_gemm_kquants.c ---- */

/* Whether sp_ggml_gemm_kquants takes `type` with `cols` columns at `level`
 * on this CPU: Q2_K, Q3_K, Q4_K, Q5_K and Q6_K, at SP_SIMD_AVX512 with VNNI, SP_SIMD_AVXVNNI or
 * SP_SIMD_AVX2 (the last two share the AVX2 kernel). */
bool sp_ggml_gemm_kquants_covered(uint32_t type, int64_t cols,
                                  sp_simd_level level);

/* sp_ggml_gemm_vnni's contract for the k-quants, one part per token only
 * (precision fast): x quantized to q8_K by sp_ggml_quantize_acts, y[t *
 * w->rows + r] the decode kernels' per-super-block values (exact integer
 * sums, llama.cpp's float combination per super-block) summed in another
 * order. Safe to run concurrently on disjoint row ranges. Returns false,
 * writing nothing, when not covered or for bad arguments. */
bool sp_ggml_gemm_kquants(const sp_weight *w, const sp_ggml_acts *x, float *y,
                          int64_t r0, int64_t r1, sp_simd_level level);

#endif
