/* Decode kernels of ggml block-quantized weights (ggml_dot.h, matmul_ggml.c
 * for n_tokens <= SP_MM_DECODE_TOKENS).
 *
 * (a) sp_ggml_quantize_act equals a plain transcription, written here, of
 *     the quantizers llama.cpp's CPU backend runs on this architecture, bit
 *     for bit: values, f16-rounded scales, s, bsums. q8_K: ggml-quants.c
 *     quantize_row_q8_K_ref (what every CPU build uses); q8_0 / q8_1: the
 *     SIMD quantize_row_q8_0 / quantize_row_q8_1 of ggml-cpu/arch/x86 (and
 *     arm) quants.c, which differ from the _ref ones in the multiplier
 *     (x86: 127 / amax, not 1 / d) and the rounding (ties to even). Inputs
 *     include a tie and a value where the two multipliers round apart.
 * (b) precision fast: sp_matmul equals, on every SIMD level, a double
 *     reference built from those reference-quantized activations (d * q)
 *     and the bit-exact dequantized weights (plus, for q8_1 partners, ggml's
 *     m * s term, which uses the f16-rounded s rather than d * sum(q)).
 * (c) precision exact and high: sp_matmul equals the double product of the
 *     dequantized weights with the f32 activations; high (3 int8 parts per
 *     activation block, ggml_act_split.c) with an added 2^-23 of
 *     sum |w| * (the block's largest |x|) (single-level q8 is off by ~2^-8).
 * (d) prefill on AVX-512 VNNI (ggml_gemm_vnni.c): fast as (b), 5..40
 *     tokens; high (the same 3 parts through the GEMM) as (c). The same on
 *     AVX2 / AVX-VNNI (ggml_gemm_avx2.c), through sp_matmul and called
 *     directly for 1..16 tokens.
 *
 * Tolerance: integer block sums are exact, so the kernels differ from the
 * double reference only by f32 rounding: a product per block (d_w * d_x, then
 * times the integer) and a sum of at most cols / 4 lane terms (vpdpbusd
 * lanes cover 4 columns), each step off by at most 2^-24 of the running
 * magnitude. The worst-case bound is (cols / 4 + 8) * 2^-24 * M with M the
 * sum of the absolute values of every term the kernels add (including the
 * separately summed min / offset terms of q4_1, q5_1 and the k-quants).
 * A wrong value, block, scale, row or token is off by O(M / sqrt(cols))
 * and fails; so does using d * sum(q) for q8_1's s (off by 2^-11 of a term). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/ggml/ggml_dot.h"
#include "compute/ggml/ggml_quants.h"
#include "compute/matmul/matmul.h"
#include "compute/matmul/matmul_simd.h"
#include "compute/tensor.h"
#include "compute/threadpool.h"

#define TEST_RNG_SEED 0x13198a2e03707344ull
#include "test_util.h"

/* ---- (a) ggml's reference quantizers, transcribed (ggml-quants.c) ---- */

static float fp16_round(float f) { return sp_f16_to_f32(sp_f32_to_f16(f)); }

/* quantize_row_q8_0 and quantize_row_q8_1 (block of 32) as llama.cpp's
 * CPU build runs them: x86 AVX/AVX2 code (id = 127 / max, _mm256_round_ps
 * to nearest even), arm NEON (id = 1 / d, vcvtnq: nearest even), otherwise
 * the _ref code (id = 1 / d, roundf). */
static void ref_q8_01(const float *x, int8_t *qs, float *d_out, float *s_out) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / ((1 << 7) - 1);
#if defined(__x86_64__)
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
#else
    const float id = d ? 1.0f / d : 0.0f;
#endif
    int sum = 0;
    for (int j = 0; j < 32; j++) {
#if defined(__x86_64__) || defined(__aarch64__)
        qs[j] = (int8_t)nearbyintf(x[j] * id); /* default mode: ties even */
#else
        qs[j] = (int8_t)roundf(x[j] * id);
#endif
        sum += qs[j];
    }
    *d_out = fp16_round(d);       /* y[i].d = GGML_FP32_TO_FP16(d) */
    *s_out = fp16_round(sum * d); /* y[i].s = GGML_FP32_TO_FP16(sum*d) */
}

static int ref_nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* quantize_row_q8_K_ref (block of 256). */
static void ref_q8_K(const float *x, int8_t *qs, float *d_out, int16_t *bsums) {
    float max = 0, amax = 0;
    for (int j = 0; j < 256; ++j) {
        float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (!amax) {
        *d_out = 0;
        memset(qs, 0, 256);
        memset(bsums, 0, 16 * sizeof(int16_t)); /* ggml leaves them stale */
        return;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < 256; ++j) {
        int v = ref_nearest_int(iscale * x[j]);
        qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int ii = 0; ii < 16; ++ii) sum += qs[j * 16 + ii];
        bsums[j] = (int16_t)sum;
    }
    *d_out = 1 / iscale;
}

/* Reference-quantized activations of one token. */
typedef struct ref_act {
    int8_t q[4096];
    float d[4096 / 32], s[4096 / 32];
    int16_t bsums[4096 / 16];
} ref_act;

static void ref_quantize(uint32_t at, const float *x, int64_t cols, ref_act *r) {
    if (at == SP_GGML_Q8_K)
        for (int64_t b = 0; b < cols / 256; b++)
            ref_q8_K(x + 256 * b, r->q + 256 * b, &r->d[b], r->bsums + 16 * b);
    else
        for (int64_t b = 0; b < cols / 32; b++)
            ref_q8_01(x + 32 * b, r->q + 32 * b, &r->d[b], &r->s[b]);
}

/* Activations with edge cases: an all-zero block, a block of tiny values
 * (f16-subnormal scale), a block of large values, ties at .5 steps (block 0
 * of variant 2: max 127, so x * id is x itself), and a block where
 * x * (127 / max) is 0.5 but x * (1 / (max / 127)) is just above it. */
static void fill_acts(float *x, int64_t cols, int variant) {
    for (int64_t c = 0; c < cols; c++) x[c] = rng_unit();
    if (variant == 1 && cols >= 64) {
        for (int j = 0; j < 32; j++) x[j] = 0.0f;
        for (int j = 32; j < 64; j++) x[j] *= 1e-6f;
    }
    if (variant == 2) {
        for (int64_t c = 0; c < cols; c++) x[c] *= (c / 32) % 2 ? 1e3f : 1e-3f;
        for (int j = 0; j < 8 && j < cols; j++) x[j] = (float)(j - 4) * 0.5f;
        if (cols >= 64) {
            x[8] = 127.0f;
            for (int j = 34; j < 64; j++) x[j] *= 1e-3f; /* below the max */
            x[32] = 0x1.4b852p+1f;  /* max 2.5900002 */
            x[33] = 0x1.4e2164p-7f; /* 0.010196852 */
        }
    }
}

/* (a) at the level in use (the x86 levels run ggml_quant_act_avx2.c). */
static void check_quantizers(void) {
    static sp_ggml_act got;
    static ref_act want;
    const uint32_t kinds[] = {SP_GGML_Q8_0, SP_GGML_Q8_1, SP_GGML_Q8_K};
    float x[2048];
    for (size_t k = 0; k < 3; k++)
        for (int variant = 0; variant < 3; variant++)
            for (int64_t cols = 256; cols <= 2048; cols *= 2) {
                fill_acts(x, cols, variant);
                assert_true(sp_ggml_quantize_act(kinds[k], x, cols, &got));
                ref_quantize(kinds[k], x, cols, &want);
                assert_memory_equal(got.q, want.q, (size_t)cols);
                const int64_t bs = kinds[k] == SP_GGML_Q8_K ? 256 : 32;
                for (int64_t b = 0; b < cols / bs; b++) {
                    assert_memory_equal(&got.d[b], &want.d[b], sizeof(float));
                    if (kinds[k] == SP_GGML_Q8_1)
                        assert_memory_equal(&got.s[b], &want.s[b], sizeof(float));
                }
                if (kinds[k] == SP_GGML_Q8_K)
                    assert_memory_equal(got.bsums, want.bsums,
                                        sizeof(int16_t) * (size_t)(cols / 16));
                for (int64_t g = 0; g < cols / 4; g++) {
                    int sum = 0;
                    for (int j = 0; j < 4; j++) sum += want.q[4 * g + j];
                    assert_int_equal(got.sum4[g], sum);
                }
                for (int64_t g = 0; g < cols / 32; g++) {
                    int sum = 0;
                    for (int j = 0; j < 32; j++) sum += want.q[32 * g + j];
                    assert_int_equal(got.sum32[g], sum);
                }
            }
    assert_false(sp_ggml_quantize_act(SP_GGML_Q8_K, x, 32, &got));
    assert_false(sp_ggml_quantize_act(SP_GGML_Q4_0, x, 32, &got));
}

static void test_quantizers(void **s) {
    (void)s;
    for (int lv = 0; lv < SP_SIMD_COUNT; lv++)
        if (sp_simd_force((sp_simd_level)lv)) check_quantizers();
    sp_simd_force(sp_simd_supported());
}

/* ---- weights ---- */

static void put16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }

typedef struct wtype {
    uint32_t type;
    size_t off[2]; /* f16 scale fields: d and (if any) m / dmin */
    int n;
} wtype;

static const wtype types[] = {
    {SP_GGML_Q4_0, {offsetof(sp_block_q4_0, d)}, 1},
    {SP_GGML_Q8_0, {offsetof(sp_block_q8_0, d)}, 1},
    {SP_GGML_Q4_1, {offsetof(sp_block_q4_1, d), offsetof(sp_block_q4_1, m)}, 2},
    {SP_GGML_Q5_0, {offsetof(sp_block_q5_0, d)}, 1},
    {SP_GGML_Q5_1, {offsetof(sp_block_q5_1, d), offsetof(sp_block_q5_1, m)}, 2},
    {SP_GGML_Q4_K, {offsetof(sp_block_q4_K, d), offsetof(sp_block_q4_K, dmin)}, 2},
    {SP_GGML_Q6_K, {offsetof(sp_block_q6_K, d)}, 1},
    {SP_GGML_Q5_K, {offsetof(sp_block_q5_K, d), offsetof(sp_block_q5_K, dmin)}, 2},
    {SP_GGML_Q2_K, {offsetof(sp_block_q2_K, d), offsetof(sp_block_q2_K, dmin)}, 2},
    {SP_GGML_Q3_K, {offsetof(sp_block_q3_K, d)}, 1},
    {SP_GGML_MXFP4, {0}, 0}, /* its E8M0 byte: make_weights */
};

/* Random blocks; unless `tame_scales`, every 7th block has zero scales and
 * every 5th extreme ones. (Extreme blocks dominate the error bound of their
 * row, which would hide a wrong min term of the ordinary blocks: the tame
 * rows keep the bound at the scale of every term.) */
static bool tame_scales;

static unsigned char *make_weights(const wtype *wt, int64_t rows, int64_t cols,
                                   size_t *row_bytes) {
    const sp_ggml_type_traits *tr = sp_ggml_traits(wt->type);
    *row_bytes = sp_ggml_row_size(wt->type, cols);
    const size_t n = *row_bytes * (size_t)rows;
    unsigned char *d = aligned_alloc(64, (n + 63) / 64 * 64);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) d[i] = (unsigned char)rng_u32();
    for (size_t b = 0; b < n / tr->type_size; b++)
        for (int j = 0; j < wt->n; j++) {
            uint16_t h = rng_f16_bits(5, 12);
            if (!tame_scales && b % 7 == 3) h = 0;
            if (!tame_scales && b % 5 == 1) h = rng_f16_bits(j ? 1 : 26, j ? 3 : 28);
            put16(d + b * tr->type_size + wt->off[j], h);
        }
    if (wt->type == SP_GGML_MXFP4) /* exponents 2^-9..2^6; extremes 2^-127, 2^73 */
        for (size_t b = 0; b < n / tr->type_size; b++)
            d[b * tr->type_size] = !tame_scales && b % 5 == 1 ? (b % 2 ? 0 : 200)
                                                              : 118 + rng_u32() % 16;
    return d;
}

/* |min term| of element j of block blk (the part the kernels sum apart). */
static double min_part(uint32_t type, const unsigned char *blk, int j) {
    uint16_t h;
    switch (type) {
    case SP_GGML_Q4_1:
    case SP_GGML_Q5_1:
        memcpy(&h, blk + 2, 2);
        return fabs(sp_f16_to_f32(h));
    case SP_GGML_Q2_K: {
        const sp_block_q2_K *b = (const sp_block_q2_K *)blk;
        return fabs((double)sp_f16_to_f32(b->dmin) * (b->scales[j / 16] >> 4));
    }
    case SP_GGML_Q4_K:
    case SP_GGML_Q5_K: {
        const sp_block_q4_K *b4 = (const sp_block_q4_K *)blk;
        uint8_t sc, m;
        sp_get_scale_min_k4(j / 32, b4->scales, &sc, &m);
        return fabs((double)sp_f16_to_f32(b4->dmin) * m);
    }
    default: return 0;
    }
}

/* check_matmul: sp_ggml_gemm_int8 on all rows in one call, in place of
 * sp_matmul's dispatch (3 parts for an exact check, else 1). */
static bool direct_int8_gemm;

/* Token counts up to this one are checked (the prefill path's 5..40). */
#define MAX_TEST_TOKENS 40

static void check_matmul(const wtype *wt, int64_t rows, int64_t cols, int nt,
                         sp_pool *pool, bool exact) {
    const uint32_t type = wt->type, at = sp_ggml_dot_act_type(type);
    const sp_ggml_type_traits *tr = sp_ggml_traits(type);
    size_t rb;
    unsigned char *data = make_weights(wt, rows, cols, &rb);
    sp_weight w = {.type = SP_W_GGML, .rows = rows, .cols = cols,
                   .data = data, .ggml_type = type};
    float *x = malloc(sizeof(float) * (size_t)(nt * cols));
    float *y = malloc(sizeof(float) * (size_t)(nt * rows));
    float *row = malloc(sizeof(float) * (size_t)cols);
    static ref_act ra[MAX_TEST_TOKENS];
    assert_true(nt <= MAX_TEST_TOKENS);
    assert_true(x && y && row);
    for (int t = 0; t < nt; t++) {
        fill_acts(x + t * cols, cols, t % 3);
        ref_quantize(at, x + t * cols, cols, &ra[t]);
    }
    if (direct_int8_gemm) { /* the AVX2 / AVX-VNNI GEMM itself, any count */
        sp_ggml_acts acts;
        const int levels = exact ? 3 : 1;
        assert_true(sp_ggml_quantize_acts(pool, at, x, nt, cols, levels, &acts));
        const sp_simd_level lv = sp_simd_current();
        assert_true(sp_ggml_gemm_kquants_covered(type, cols, lv)
                        ? sp_ggml_gemm_kquants(&w, &acts, y, 0, rows, lv)
                        : sp_ggml_gemm_int8(&w, &acts, y, 0, rows, lv));
    } else {
        sp_matmul(pool, &w, x, nt, y);
    }
    const int64_t bs = tr->block_size;
    /* precision high splits each activation block into 3 int8 parts: off
     * by at most 2^-24 of the block's largest |x| (plus f32 rounding) */
    const bool split = exact && sp_mm_precision() == SP_PRECISION_HIGH;
    const int64_t abs_ = at == SP_GGML_Q8_K ? 256 : 32;
    for (int64_t r = 0; r < rows; r++) {
        const unsigned char *wr = data + (size_t)r * rb;
        tr->to_f32(wr, row, cols);
        for (int t = 0; t < nt; t++) {
            double acc = 0, mag = 0, split_err = 0, amax = 0;
            for (int64_t c = 0; c < cols; c++) {
                const unsigned char *blk = wr + (size_t)(c / bs) * tr->type_size;
                if (split && c % abs_ == 0) {
                    amax = 0;
                    for (int64_t j = c; j < c + abs_; j++)
                        amax = fmax(amax, fabs(x[t * cols + j]));
                }
                if (exact) {
                    const double p = (double)row[c] * x[t * cols + c];
                    acc += p;
                    mag += fabs(p);
                    split_err += split ? fabs(row[c]) * amax * 0x1p-23 : 0;
                    continue;
                }
                const double xq =
                    (double)ra[t].d[c / (at == SP_GGML_Q8_K ? 256 : 32)] *
                    ra[t].q[c];
                acc += (double)row[c] * xq;
                mag += fabs((double)row[c] * xq) +
                       min_part(type, blk, (int)(c % bs)) * fabs(xq);
            }
            if (!exact && at == SP_GGML_Q8_1)
                for (int64_t b = 0; b < cols / 32; b++) {
                    /* ggml adds m * s with s = f16(d * sum(q)) */
                    uint16_t h;
                    memcpy(&h, wr + (size_t)b * tr->type_size + 2, 2);
                    const double m = sp_f16_to_f32(h);
                    long qsum = 0;
                    for (int j = 0; j < 32; j++) qsum += ra[t].q[32 * b + j];
                    acc += m * ((double)ra[t].s[b] - (double)ra[t].d[b] * qsum);
                    mag += fabs(m * ra[t].s[b]);
                }
            const double g = y[t * rows + r];
            const double tol =
                (double)(cols / 4 + 8) * 0x1p-24 * mag + split_err + 1e-30;
            if (!(fabs(g - acc) <= tol))
                fail_msg("%s %s simd=%s %lldx%lld t=%d r=%lld: got %.9g want "
                         "%.9g (tol %.3g)",
                         tr->name, exact ? "exact" : "q8",
                         sp_simd_name(sp_simd_current()), (long long)rows,
                         (long long)cols, t, (long long)r, g, acc, tol);
        }
    }
    free(x); free(y); free(row); free(data);
}

static void run_types(sp_pool *pool, bool exact) {
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const int64_t bs = sp_ggml_traits(types[i].type)->block_size;
        /* one block; an odd block count (pair tails); more than 16 blocks
         * (the 16-block groups) with a remainder; 1..8 tokens */
        check_matmul(&types[i], 3, bs, 1, pool, exact);
        check_matmul(&types[i], 5, bs * 3, 2, pool, exact);
        check_matmul(&types[i], 7, bs == 256 ? 1024 : 32 * 37, 3, pool, exact);
        check_matmul(&types[i], 11, bs == 256 ? 2048 : 1024, 4, pool, exact);
        check_matmul(&types[i], 4, bs * 2, 1, pool, exact);
        /* a batched decode step: 5..8 tokens, still one pass per row */
        for (int nt = SP_MM_SMALL_TOKENS + 1; nt <= SP_MM_DECODE_TOKENS; nt++)
            check_matmul(&types[i], 3 + nt,
                         nt % 2 ? bs * 3 : (bs == 256 ? 1024 : 32 * 37), nt,
                         pool, exact);
        tame_scales = true;
        check_matmul(&types[i], 6, bs == 256 ? 1024 : 32 * 37, 3, pool, exact);
        tame_scales = false;
    }
}

static void test_levels(void **s) {
    (void)s;
    sp_pool *pools[2] = {NULL, sp_pool_create(2)};
    assert_non_null(pools[1]);
    const sp_simd_level top = sp_simd_supported();
    const sp_precision modes[] = {SP_PRECISION_HIGH, SP_PRECISION_FAST,
                                  SP_PRECISION_EXACT};
    for (int lv = 0; lv < SP_SIMD_COUNT; lv++) {
        if (!sp_simd_available((sp_simd_level)lv)) continue;
        assert_true(sp_simd_force((sp_simd_level)lv));
        for (size_t m = 0; m < 3; m++) {
            sp_mm_precision_force(modes[m]);
            for (int p = 0; p < 2; p++)
                run_types(pools[p], modes[m] != SP_PRECISION_FAST);
        }
    }
    sp_simd_force(top);
    sp_mm_precision_force(SP_PRECISION_HIGH);
    sp_pool_destroy(pools[1]);
}

/* (d) Prefill (n_tokens > SP_MM_SMALL_TOKENS: the GEMM also takes 5..8
 * tokens where it covers the type), precision fast and high, on
 * the AVX-512 level with VNNI: ggml_gemm_vnni.c must give the decode
 * kernels' per-block values, so the same double reference and tolerance
 * apply (fast: the f32 tiles would miss it by the activations' quantization
 * error, far more than the tolerance; high: two parts instead of three miss
 * it by ~4x). Rows not multiples of the 32-row panel, columns with
 * an odd block count and more than one 512-column panel, token counts that
 * are and are not multiples of the 6-token micro-kernel, 1 and 2 threads. */
static void test_prefill(void **s) {
    (void)s;
    if (!sp_simd_available(SP_SIMD_AVX512) ||
        !sp_ggml_gemm_covered(SP_GGML_Q4_0, 256)) {
        skip();
        return;
    }
    sp_pool *pools[2] = {NULL, sp_pool_create(2)};
    assert_non_null(pools[1]);
    assert_true(sp_simd_force(SP_SIMD_AVX512));
    const sp_precision modes[] = {SP_PRECISION_HIGH, SP_PRECISION_FAST};
    const uint32_t covered[] = {SP_GGML_Q4_0, SP_GGML_Q8_0, SP_GGML_Q4_1,
                                SP_GGML_Q5_0, SP_GGML_Q5_1, SP_GGML_MXFP4};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        sp_mm_precision_force(modes[m]);
        for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
            bool is_covered = false;
            for (size_t c = 0; c < sizeof covered / sizeof *covered; c++)
                is_covered |= types[i].type == covered[c];
            if (!is_covered) continue;
            assert_true(sp_ggml_gemm_covered(types[i].type, 1024));
            const bool hi = modes[m] == SP_PRECISION_HIGH;
            for (int p = 0; p < 2; p++) {
                check_matmul(&types[i], 37, 32 * 37, 5, pools[p], hi);
                check_matmul(&types[i], 70, 32, 12, pools[p], hi);
                check_matmul(&types[i], 33, 1024, 40, pools[p], hi);
                check_matmul(&types[i], 5, 64 * 9, 7, pools[p], hi);
                tame_scales = true;
                check_matmul(&types[i], 45, 32 * 21, 23, pools[p], hi);
                tame_scales = false;
            }
        }
    }
    sp_mm_precision_force(SP_PRECISION_HIGH);
    sp_pool_destroy(pools[1]);
}

/* (d) the same on AVX2 and AVX-VNNI (ggml_gemm_avx2.c) through sp_matmul:
 * precision fast (from 5 tokens) and high (2..5 tokens, the f32 tiles
 * above, checked by test_levels' tolerance); rows not multiples of the
 * 16-row panel, token counts around the 2-token micro-kernel, 1 and 2
 * threads. A saturating vpmaddubsw sum (q8_0's 255 * 127 pairs, or too many
 * q5 steps in i16) or a lost offset misses the tolerance by far. */
static void test_prefill_avx2(void **s) {
    (void)s;
    static const sp_simd_level levels[] = {SP_SIMD_AVX2, SP_SIMD_AVXVNNI};
    sp_pool *pools[2] = {NULL, sp_pool_create(2)};
    assert_non_null(pools[1]);
    int checked = 0;
    sp_mm_precision_force(SP_PRECISION_FAST);
    for (size_t lv = 0; lv < sizeof levels / sizeof *levels; lv++) {
        if (!sp_simd_available(levels[lv])) continue;
        assert_true(sp_simd_force(levels[lv]));
        for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
            if (!sp_ggml_gemm_int8_covered(types[i].type, 1024, levels[lv])) continue;
            checked++;
            for (int p = 0; p < 2; p++) {
                sp_mm_precision_force(SP_PRECISION_HIGH);
                check_matmul(&types[i], 37, 32 * 37, 2, pools[p], true);
                check_matmul(&types[i], 45, 32 * 21, 5, pools[p], true);
                sp_mm_precision_force(SP_PRECISION_FAST);
                check_matmul(&types[i], 37, 32 * 37, 9, pools[p], false);
                check_matmul(&types[i], 20, 32, 12, pools[p], false);
                check_matmul(&types[i], 33, 1024, 40, pools[p], false);
                check_matmul(&types[i], 5, 64 * 9, 7, pools[p], false);
                tame_scales = true;
                check_matmul(&types[i], 45, 32 * 21, 23, pools[p], false);
                tame_scales = false;
            }
        }
    }
    sp_simd_force(sp_simd_supported());
    sp_mm_precision_force(SP_PRECISION_HIGH);
    sp_pool_destroy(pools[1]);
    if (!checked) skip();
}

/* The AVX2 / AVX-VNNI GEMM called directly for every count it may take
 * (sp_matmul gives it 2..5 tokens at precision high, 5 and more at fast):
 * 1..16 tokens, precision high's 3 parts (as (c)) and fast's 1 (as (b)),
 * rows that are not multiples of the 16-row panel, an odd block count of
 * columns in one panel and across a second one. A lost part, token, row or
 * block misses the tolerance by far. */
static void test_gemm_int8_few_rows(void **s) {
    (void)s;
    static const sp_simd_level levels[] = {SP_SIMD_AVX2, SP_SIMD_AVXVNNI};
    int checked = 0;
    direct_int8_gemm = true;
    for (size_t lv = 0; lv < sizeof levels / sizeof *levels; lv++) {
        if (!sp_simd_available(levels[lv])) continue;
        assert_true(sp_simd_force(levels[lv]));
        for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
            if (!sp_ggml_gemm_int8_covered(types[i].type, 1024, levels[lv])) continue;
            checked++;
            for (int nt = 1; nt <= 16; nt++)
                for (int hi = 0; hi < 2; hi++) {
                    sp_mm_precision_force(hi ? SP_PRECISION_HIGH : SP_PRECISION_FAST);
                    check_matmul(&types[i], 21 + nt, 32 * 3, nt, NULL, hi);
                    check_matmul(&types[i], 16 + nt % 3, 32 * 19, nt, NULL, hi);
                }
        }
    }
    direct_int8_gemm = false;
    sp_simd_force(sp_simd_supported());
    sp_mm_precision_force(SP_PRECISION_HIGH);
    if (!checked) skip();
}

/* (d) the k-quants' prefill GEMM (ggml_gemm_kquants.c) at every level
 * that has one, for each of Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (all five must
 * be covered there), precision fast: through sp_matmul from 17 tokens
 * (below, the decode kernels), and called directly for 1..9 tokens (the
 * micro-kernels' token tails). Rows not multiples of the 16- and 32-row panels, one
 * super-block, an odd count (a half-filled second panel), several panels,
 * token counts around the 2- and 4-token micro-kernels, 1 and 2 threads.
 * The f32 tiles miss the reference by the activations' quantization error;
 * a lost scale, min, sub-block, row or token misses it by far. */
static void test_prefill_kquants(void **s) {
    (void)s;
    static const sp_simd_level levels[] = {SP_SIMD_AVX512, SP_SIMD_AVXVNNI,
                                           SP_SIMD_AVX2};
    sp_pool *pools[2] = {NULL, sp_pool_create(2)};
    assert_non_null(pools[1]);
    int checked = 0;
    sp_mm_precision_force(SP_PRECISION_FAST);
    static const uint32_t kquants[] = {SP_GGML_Q2_K, SP_GGML_Q3_K, SP_GGML_Q4_K,
                                       SP_GGML_Q5_K, SP_GGML_Q6_K};
    for (size_t lv = 0; lv < sizeof levels / sizeof *levels; lv++) {
        if (!sp_simd_available(levels[lv])) continue;
        /* (the AVX-512 kernel needs VNNI, as the block GEMM does) */
        if (levels[lv] != SP_SIMD_AVX512 || sp_ggml_gemm_covered(SP_GGML_Q4_0, 256))
            for (size_t k = 0; k < sizeof kquants / sizeof *kquants; k++)
                if (!sp_ggml_gemm_kquants_covered(kquants[k], 1024, levels[lv]))
                    fail_msg("%s has no prefill GEMM at %s",
                             sp_ggml_traits(kquants[k])->name, sp_simd_name(levels[lv]));
        assert_true(sp_simd_force(levels[lv]));
        for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
            if (!sp_ggml_gemm_kquants_covered(types[i].type, 1024, levels[lv])) continue;
            checked++;
            for (int p = 0; p < 2; p++) {
                check_matmul(&types[i], 37, 256 * 3, 17, pools[p], false);
                check_matmul(&types[i], 70, 256, 18, pools[p], false);
                check_matmul(&types[i], 33, 2048, 40, pools[p], false);
                check_matmul(&types[i], 5, 1024, 25, pools[p], false);
                tame_scales = true;
                check_matmul(&types[i], 45, 256 * 5, 17, pools[p], false);
                tame_scales = false;
            }
            direct_int8_gemm = true;
            for (int nt = 1; nt <= 9; nt++) {
                check_matmul(&types[i], 16 + nt, 256 * 3, nt, NULL, false);
                check_matmul(&types[i], 31 + nt % 3, 512, nt, NULL, false);
            }
            direct_int8_gemm = false;
        }
    }
    sp_simd_force(sp_simd_supported());
    sp_mm_precision_force(SP_PRECISION_HIGH);
    sp_pool_destroy(pools[1]);
    if (!checked) skip();
}

/* The vector splits (ggml_act_split_avx2.c for 32- and 256-blocks,
 * ggml_act_split_avx512.c for 32-blocks) give the scalar split's bits at
 * every part: the decode path (any level) and the prefill GEMM read the
 * same parts. Inputs: fill_acts' ties, zeros and scale jumps, plus a block
 * with an inf and a NaN. */
static void test_split_levels_agree(void **s) {
    (void)s;
    const sp_simd_level levels[] = {SP_SIMD_AVX2, SP_SIMD_AVX512};
    static sp_ggml_act scalar[3], vector[3];
    float x[1024];
    bool checked = false;
    for (int variant = 0; variant < 4; variant++) {
        fill_acts(x, 1024, variant % 3);
        if (variant == 3) x[100] = INFINITY, x[200] = NAN, x[201] = -INFINITY;
        const uint32_t ats[] = {SP_GGML_Q8_0, SP_GGML_Q8_1, SP_GGML_Q8_K};
        for (size_t a = 0; a < 3; a++) {
            const int nb = ats[a] == SP_GGML_Q8_K ? 4 : 32;
            assert_true(sp_simd_force(SP_SIMD_SCALAR));
            assert_true(sp_ggml_quantize_act_split(ats[a], x, 1024, 3, scalar));
            for (size_t v = 0; v < 2; v++) {
                if (!sp_simd_force(levels[v])) continue;
                checked = true;
                assert_true(sp_ggml_quantize_act_split(ats[a], x, 1024, 3, vector));
                for (int l = 0; l < 3; l++) {
                    assert_memory_equal(scalar[l].q, vector[l].q, 1024);
                    assert_memory_equal(scalar[l].d, vector[l].d, nb * sizeof(float));
                    if (ats[a] == SP_GGML_Q8_K) {
                        assert_memory_equal(scalar[l].bsums, vector[l].bsums,
                                            64 * sizeof(int16_t));
                        continue;
                    }
                    assert_memory_equal(scalar[l].s, vector[l].s, nb * sizeof(float));
                    assert_memory_equal(scalar[l].sum32, vector[l].sum32,
                                        nb * sizeof(int32_t));
                }
            }
        }
    }
    sp_simd_force(sp_simd_supported());
    if (!checked) skip();
}

/* Every kernel level gives the portable kernel's result up to f32 order
 * (checked above) and covers the same types; rows wider than the scratch
 * are left to the tiled path. */
static void test_coverage(void **s) {
    (void)s;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        assert_true(sp_ggml_dot_covered(types[i].type, 256));
        assert_false(sp_ggml_dot_covered(types[i].type, SP_GGML_DOT_MAX_COLS + 256));
    }
    assert_false(sp_ggml_dot_covered(SP_GGML_Q4_0, 48));
    assert_false(sp_ggml_dot_covered(SP_GGML_F16, 256));
    assert_false(sp_ggml_dot_covered(SP_GGML_Q8_K, 256));
}

/* Every SIMD level with integer kernels has its own kernel for every type
 * (none falls back to the portable loop, which test_levels could not
 * tell): AVX2 on x86-64; dotprod on AArch64, and i8mm for the 32-column
 * block types (the k-quants stay on SDOT there). 1..8 tokens (the i8mm
 * kernels leave one token to SDOT). */
static bool level_kernel(sp_simd_level level, const sp_weight *w,
                         const sp_ggml_act *act, int nt, float *y) {
    switch (level) {
    case SP_SIMD_AVX2:
        return sp_ggml_rows_q8_avx2(w, act, nt, y, 0, 1) ||
               sp_ggml_rows_q8_kquants_avx2(w, act, nt, y, 0, 1);
    case SP_SIMD_DOTPROD:
        return sp_ggml_rows_q8_dotprod(w, act, nt, y, 0, 1) ||
               sp_ggml_rows_q8_kquants_dotprod(w, act, nt, y, 0, 1);
    case SP_SIMD_I8MM:
        return sp_ggml_rows_q8_i8mm(w, act, nt, y, 0, 1) ||
               (sp_ggml_traits(w->ggml_type)->block_size == 256 &&
                sp_ggml_rows_q8_kquants_dotprod(w, act, nt, y, 0, 1));
    default: return true;
    }
}

static void test_levels_cover_all(void **s) {
    (void)s;
    static const sp_simd_level levels[] = {SP_SIMD_AVX2, SP_SIMD_DOTPROD,
                                           SP_SIMD_I8MM};
    static sp_ggml_act act[SP_MM_DECODE_TOKENS];
    float x[256], y[SP_MM_DECODE_TOKENS];
    fill_acts(x, 256, 0);
    int checked = 0;
    for (size_t l = 0; l < sizeof levels / sizeof *levels; l++) {
        if (!sp_simd_available(levels[l])) continue;
        checked++;
        for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
            size_t rb;
            unsigned char *data = make_weights(&types[i], 1, 256, &rb);
            const sp_weight w = {.type = SP_W_GGML, .rows = 1, .cols = 256,
                                 .data = data, .ggml_type = types[i].type};
            for (int t = 0; t < SP_MM_DECODE_TOKENS; t++)
                assert_true(sp_ggml_quantize_act(
                    sp_ggml_dot_act_type(types[i].type), x, 256, &act[t]));
            for (int nt = 1; nt <= SP_MM_DECODE_TOKENS; nt++)
                if (!level_kernel(levels[l], &w, act, nt, y))
                    fail_msg("no %s kernel for %s (%d tokens)",
                             sp_simd_name(levels[l]),
                             sp_ggml_traits(types[i].type)->name, nt);
            free(data);
        }
    }
    if (!checked) skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantizers),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_prefill),
        cmocka_unit_test(test_prefill_avx2),
        cmocka_unit_test(test_gemm_int8_few_rows),
        cmocka_unit_test(test_prefill_kquants),
        cmocka_unit_test(test_split_levels_agree),
        cmocka_unit_test(test_coverage),
        cmocka_unit_test(test_levels_cover_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
