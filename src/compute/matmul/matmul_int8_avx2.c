/* Decode kernels for MLX affine 4/8-bit and mxfp4 rows with integer
 * activations on ymm registers, for CPUs without AVX-512 VNNI: the same
 * activation split, blocks and scratch as matmul_vnni.c
 * (matmul_int8_rows.h), so the integers of every block are those of the
 * AVX-512 kernel; each 64-byte chunk of codes is read as two 32-byte
 * halves. The row kernel (matmul_int8_rows.inc) is compiled twice:
 *
 *   avx2     vpmaddubsw (u8 x s8 pairs to i16) + vpmaddwd (to i32). No pair
 *            may saturate: 4-bit and mxfp4 codes are at most 15, so even the
 *            low- plus high-nibble i16 sum stays below 4 * 15 * 127 = 7620;
 *            8-bit codes q are read, for the first level (|a| <= 127), as
 *            w = q - 128 by ggml's sign trick (|w| <= 128 times sign(a, w):
 *            pairs <= 32512), 128 times that level's lane sums (lane_sum)
 *            added back in int32, exactly; the other levels (|a| <= 64)
 *            take q as it is (pairs <= 2 * 255 * 64 = 32640). vpmaddwd
 *            weights each level by 128^(levels-1-l), in place of shifts.
 *   avxvnni  VEX vpdpbusd on ymm: the AVX-512 kernel's integer chain.
 *
 * The int32 lanes then hold exactly the AVX-512 kernel's values (same
 * Horner chain, same bound: < 2^31), and are scaled and summed in f32. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "compute/matmul/matmul_int8_rows.h"
#include "compute/matmul/matmul_internal.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/scratch.h"
#include "compute/simd_target.h"
#include "compute/simd_dpbusd.h"

typedef struct sp_i8_plan {
    const sp_weight *w;
    const sp_vnni_scratch *sc;
    int64_t xsum_stride; /* floats per token in sc->xsum */
} sp_i8_plan;

SP_TARGET_BEGIN(SP_TARGET_AVX2)
#include "compute/simd_reduce_avx2.h"

/* ------------------------------------------------ activation quantization */

#define SP_ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* 32 int32 (four vectors, in order) as 32 int8 in order (|v| <= 127). */
static inline __attribute__((always_inline)) __m256i
sp_pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b); /* a0-3 b0-3 | a4-7 b4-7 */
    const __m256i cd = _mm256_packs_epi32(c, d);
    const __m256i abcd = _mm256_packs_epi16(ab, cd); /* a0-3 b0-3 c0-3 d0-3 | ... */
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Levels of 32 activations y = x / S (exactly, for 2 and 3 levels) as
 * int8, each level's 32 bytes stored `level_stride` apart (matmul_vnni.c's
 * sp_quant16, 32 at a time). */
static inline __attribute__((always_inline)) void
sp_quant32(__m256 y[4], int levels, int8_t *out, int level_stride) {
    for (int l = 0; l < levels; l++) {
        __m256i q[4];
        for (int i = 0; i < 4; i++) {
            if (l > 0) y[i] = _mm256_mul_ps(y[i], _mm256_set1_ps(128.0f));
            const __m256 a = _mm256_round_ps(y[i], SP_ROUND_NEAREST);
            q[i] = _mm256_cvtps_epi32(a);
            y[i] = _mm256_sub_ps(y[i], a);
        }
        _mm256_storeu_si256((__m256i *)(out + l * level_stride),
                            sp_pack32(q[0], q[1], q[2], q[3]));
    }
}

/* The even (*ev) and odd (*od) elements of the 16 floats at p. */
static inline __attribute__((always_inline)) void
sp_deinterleave16(const float *p, __m256 *ev, __m256 *od, __m256 inv) {
    const __m256 v0 = _mm256_mul_ps(_mm256_loadu_ps(p), inv);
    const __m256 v1 = _mm256_mul_ps(_mm256_loadu_ps(p + 8), inv);
    /* shuffle_ps works per 128-bit lane: v0 0 2 v1 0 2 | v0 4 6 v1 4 6 */
    *ev = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(v0, v1, 0x88)), 0xD8));
    *od = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(v0, v1, 0xDD)), 0xD8));
}

/* The 16 lane sums of an 8-bit record's level-1 bytes (64 columns), times
 * 128 (the sign trick's offset) and level 1's weight 128^(levels-1):
 * |sum| <= 4 * 127 * 2^21 < 2^30. */
static void sp_lane_sums8(const int8_t *act, int levels, int32_t *out) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; h++) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(act + 32 * h));
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, a), ones16);
        _mm256_storeu_si256((__m256i *)(out + 8 * h),
                            _mm256_slli_epi32(s, 7 + 7 * (levels - 1)));
    }
}

/* Fill the scratch for one token (matmul_vnni.c's layout and values). */
static void sp_i8_quantize_token(const sp_weight *w, const float *x, int t,
                                 int nt, int levels, sp_vnni_scratch *sc,
                                 int64_t xsum_stride) {
    const int bits = w->bits, gs = w->group_size;
    const int cpc = bits == 4 ? 128 : 64; /* columns per chunk and block */
    const int64_t cols = w->cols;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t k = 0; k < cols / cpc; k++) {
        const size_t rec = (size_t)(k * nt + t);
        int8_t *act = sc->act + rec * (size_t)(levels * cpc);
        const float *xb = x + k * cpc;
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < cpc; j += 8)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)));
        float s, inv;
        sp_block_scale(sp_hmax8(m), levels, &s, &inv);
        sc->factor[rec] = s * sp_level_unit(levels);
        const __m256 vinv = _mm256_set1_ps(inv);
        if (bits == 4) {
            for (int j = 0; j < cpc; j += 64) {
                __m256 ev[4], od[4];
                for (int i = 0; i < 4; i++)
                    sp_deinterleave16(xb + j + 16 * i, &ev[i], &od[i], vinv);
                sp_quant32(ev, levels, act + j / 2, cpc);
                sp_quant32(od, levels, act + 64 + j / 2, cpc);
            }
        } else {
            for (int j = 0; j < cpc; j += 32) {
                __m256 v[4];
                for (int i = 0; i < 4; i++)
                    v[i] = _mm256_mul_ps(_mm256_loadu_ps(xb + j + 8 * i), vinv);
                sp_quant32(v, levels, act + j, cpc);
            }
            sp_lane_sums8(act, levels, sc->lane_sum + 16 * rec);
        }
    }
    float *xs = sc->xsum + t * xsum_stride;
    const int64_t gpr = cols / gs;
    for (int64_t g = 0; g < gpr; g++) {
        __m256 a = _mm256_loadu_ps(x + g * gs);
        for (int j = 8; j < gs; j += 8)
            a = _mm256_add_ps(a, _mm256_loadu_ps(x + g * gs + j));
        xs[g] = sp_hsum8(a);
    }
    if (levels == 1) sp_int8_quantized_group_sums(x, cols, gs, cpc, xs);
    for (int64_t g = gpr; g < xsum_stride; g++) xs[g] = 0.0f;
}

/* Build the scratch for n_tokens tokens; NULL when out of memory. */
static const sp_vnni_scratch *sp_i8_prepare(const sp_weight *w,
                                            const float *x, int n_tokens,
                                            int levels, int64_t *xsum_stride) {
    /* ~264 KiB: too much for worker stacks; built once per call */
    sp_vnni_scratch *sc = sp_scratch_get(SP_SCRATCH_AFFINE_ROWS, sizeof *sc);
    if (!sc) return NULL;
    *xsum_stride = (w->cols / w->group_size + 15) / 16 * 16;
    for (int t = 0; t < n_tokens; t++)
        sp_i8_quantize_token(w, x + (int64_t)t * w->cols, t, n_tokens, levels,
                             sc, *xsum_stride);
    return sc;
}

#define SP_I8_VNNI 0
#define SP_I8(name) name##_avx2
#include "compute/matmul/matmul_int8_rows.inc"
#undef SP_I8_VNNI
#undef SP_I8
SP_TARGET_END

SP_TARGET_BEGIN(SP_TARGET_AVXVNNI)
#define SP_I8_VNNI 1
#define SP_I8(name) name##_avxvnni
#include "compute/matmul/matmul_int8_rows.inc"
#undef SP_I8_VNNI
#undef SP_I8
SP_TARGET_END

#else
#include "compute/matmul/matmul_simd.h"

bool sp_mm_rows_int8_avx2(const sp_weight *w, const float *x, int n_tokens,
                          float *y, int64_t r0, int64_t r1, int levels) {
    (void)w, (void)x, (void)n_tokens, (void)y, (void)r0, (void)r1, (void)levels;
    return false;
}
bool sp_mm_rows_int8_avxvnni(const sp_weight *w, const float *x, int n_tokens,
                             float *y, int64_t r0, int64_t r1, int levels) {
    (void)w, (void)x, (void)n_tokens, (void)y, (void)r0, (void)r1, (void)levels;
    return false;
}
#endif
