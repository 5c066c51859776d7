/* The int8-activation row kernels of MLX affine 4/8-bit and mxfp4 rows,
 * each one the CPU runs: sp_mm_rows_vnni (AVX-512 VNNI, matmul_vnni.c),
 * sp_mm_rows_int8_avx2 and sp_mm_rows_int8_avxvnni (ymm,
 * matmul_int8_avx2.c); on AArch64 sp_mm_rows_dotprod (SDOT,
 * matmul_int8_neon.c, held to the same bounds), times int8 activation levels, against a double-precision reference of
 * sum_j (s q_j + b) x_j built here from the codes, scales and biases (for
 * mxfp4, the affine form of its values).
 *
 * Tolerance, per output (derived from the kernel's representation):
 *   representation: each activation block (the 128 columns of 64 bytes of
 *     4-bit codes, 64 for 8-bit) with scale S moves each term s q_j x_j by
 *     at most |s q_j| S u, u = 1/2 (+2^-15 for the rounded 127 / max|x|)
 *     for one level, 2^-8 for two, 2^-15 for three (S is max|x| / 127 for
 *     one level, else the smallest power of two with 127 S >= max|x|); one
 *     level sums X_g from the quantized activations, so there the bound is
 *     |s q_j + b| S u per column;
 *   f32: the integer dot products are exact; what rounds is their
 *     conversion, the lane factors, the fma chain (cols / 64 + groups / 16
 *     steps), the 16-lane reduction and the f32 group sums X_g (gs terms):
 *     (cols / 32 + gs + 16) 2^-24 sum_j (|s q_j| + |b|) |x_j| bounds them.
 * A wrong code, nibble order, scale, group or block scale is an O(1) error
 * in units of the f32 term (the worst-case bounds above are far larger than
 * the typical error, but still ~2^-15 of sum |terms| at three levels). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/cpu_features.h"
#include "compute/matmul/matmul.h"
#include "compute/matmul/matmul_simd.h"

#define TEST_RNG_SEED 0x5bd1e9955bd1e995ull
#include "test_util.h"

typedef bool rows_fn(const sp_weight *w, const float *x, int n_tokens,
                     float *y, int64_t r0, int64_t r1, int levels);

static bool have_avx2(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           sp_cpu_features_get()->f16c;
#else
    return false;
#endif
}

static inline bool have_avx512vnni(void) {
#if defined(__x86_64__)
    return have_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
#elif defined(__aarch64__)
    return sp_simd_available(SP_SIMD_DOTPROD);
#else
    return false;
#endif
}

#if defined(__aarch64__)
static inline bool have_dotprod(void) { return sp_simd_available(SP_SIMD_DOTPROD); }
#endif

/* (CPUID 7.1 EAX bit 4: the builtin's name for it varies by compiler) */
static inline bool have_avxvnni(void) { return have_avx2() && sp_cpu_features_get()->avxvnni; }

/* The kernels, each with what it needs of the CPU. */
static const struct kernel {
    const char *name;
    rows_fn *rows;
    bool (*runs)(void);
} kernels[] = {
#if defined(__aarch64__)
    {"dotprod", sp_mm_rows_dotprod, have_dotprod},
#else
    {"avx512 vnni", sp_mm_rows_vnni, have_avx512vnni},
    {"avx2", sp_mm_rows_int8_avx2, have_avx2},
    {"avxvnni", sp_mm_rows_int8_avxvnni, have_avxvnni},
#endif
};
#define N_KERNELS (sizeof kernels / sizeof *kernels)

static const char *cur_kernel = "?";

/* Runs the statement for each kernel this CPU has (`kernel`: its function),
 * printing which ran; skips the test when none. */
#define FOR_EACH_KERNEL(body)                                                  \
    do {                                                                       \
        int ran_ = 0;                                                          \
        for (size_t ki_ = 0; ki_ < N_KERNELS; ki_++) {                         \
            if (!kernels[ki_].runs()) continue;                         \
            rows_fn *const kernel = kernels[ki_].rows;                           \
            cur_kernel = kernels[ki_].name;                                    \
            ran_++;                                                            \
            body                                                               \
        }                                                                      \
        if (!ran_) {                                                           \
            print_message("skipped: no int8 row kernel on this CPU\n");        \
            skip();                                                            \
        }                                                                      \
    } while (0)


/* A random affine weight; buffers are offset by `skew` bytes (tensors sit
 * unaligned in mapped files). */
typedef struct tw {
    sp_weight w;
    uint8_t *buf[3];
    int16_t *codes;   /* [rows][cols]: each code (mxfp4: its signed value) */
    double *s, *b;    /* [rows][groups], as the kernel reads them */
} tw;

static double qparam_put(sp_dtype t, uint8_t *p, size_t i, float v) {
    if (t == SP_DTYPE_F32) {
        memcpy(p + 4 * i, &v, 4);
        return v;
    }
    uint16_t h = t == SP_DTYPE_F16 ? sp_f32_to_f16(v) : sp_f32_to_bf16(v);
    memcpy(p + 2 * i, &h, 2);
    if (t == SP_DTYPE_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    /* f16 by hand: sign, 5-bit exponent, 10-bit mantissa */
    const int e = (h >> 10) & 31, m = h & 1023;
    const double mag = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return h >> 15 ? -mag : mag;
}

static void make_weight(tw *t, int64_t rows, int64_t cols, int bits, int gs,
                        sp_dtype qt, int skew) {
    const size_t groups = (size_t)(rows * (cols / gs));
    const size_t qs = qt == SP_DTYPE_F32 ? 4 : 2;
    const size_t row_bytes = (size_t)cols * (size_t)bits / 8;
    t->buf[0] = calloc(row_bytes * (size_t)rows + 8, 1);
    t->buf[1] = malloc(groups * qs + 8);
    t->buf[2] = malloc(groups * qs + 8);
    t->codes = malloc((size_t)(rows * cols) * sizeof *t->codes);
    t->s = malloc(groups * sizeof(double));
    t->b = malloc(groups * sizeof(double));
    assert_true(t->buf[0] && t->buf[1] && t->buf[2] && t->codes && t->s && t->b);
    uint8_t *d = t->buf[0] + skew, *sc = t->buf[1] + skew, *bi = t->buf[2] + skew;
    for (size_t g = 0; g < groups; g++) {
        t->s[g] = qparam_put(qt, sc, g, frand(0.002f, 0.05f) * (rng_u32() % 2 ? 1 : -1));
        t->b[g] = qparam_put(qt, bi, g, frand(-0.3f, 0.3f));
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const uint8_t q = (uint8_t)(rng_u32() & ((1u << bits) - 1u));
            t->codes[r * cols + c] = q;
            /* MLX's bit stream: 4-bit code 2i in the low nibble of byte i */
            uint8_t *row = d + (size_t)r * row_bytes;
            if (bits == 8) row[c] = q;
            else row[c / 2] |= (uint8_t)(q << (4 * (c % 2)));
        }
    t->w = (sp_weight){.type = SP_W_AFFINE, .rows = rows, .cols = cols,
                       .data = d, .bits = bits, .group_size = gs,
                       .qparam_dtype = qt, .scales = sc, .biases = bi};
}

/* A random MLX mxfp4 weight in check()'s terms: code q as v = 2 e2m1(q)
 * (from the E2M1 definition, not the library's table), s = 2^(e - 128),
 * b = 0. Exponents around 2^-5 keep the terms comparable to the affine
 * weights'. */
static void make_mxfp4_weight(tw *t, int64_t rows, int64_t cols, int skew) {
    const size_t groups = (size_t)(rows * (cols / 32)), row_bytes = (size_t)cols / 2;
    t->buf[0] = calloc(row_bytes * (size_t)rows + 8, 1);
    t->buf[1] = malloc(groups + 8);
    t->buf[2] = NULL;
    t->codes = malloc((size_t)(rows * cols) * sizeof *t->codes);
    t->s = malloc(groups * sizeof(double));
    t->b = malloc(groups * sizeof(double));
    assert_true(t->buf[0] && t->buf[1] && t->codes && t->s && t->b);
    uint8_t *d = t->buf[0] + skew, *sc = t->buf[1] + skew;
    for (size_t g = 0; g < groups; g++) {
        sc[g] = (uint8_t)(118 + rng_u32() % 8);
        t->s[g] = ldexp(1.0, sc[g] - 128);
        t->b[g] = 0;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const int q = (int)(rng_u32() & 15u), ex = (q >> 1) & 3, m = q & 1;
            const int twice = ex ? (2 + m) << (ex - 1) : m; /* 2 |e2m1(q)| */
            t->codes[r * cols + c] = (int16_t)(q & 8 ? -twice : twice);
            d[(size_t)r * row_bytes + (size_t)c / 2] |= (uint8_t)(q << (4 * (c % 2)));
        }
    t->w = (sp_weight){.type = SP_W_MXFP4, .rows = rows, .cols = cols,
                       .data = d, .bits = 4, .group_size = 32,
                       .qparam_dtype = SP_DTYPE_U8, .scales = sc};
}

static void free_weight(tw *t) {
    for (int i = 0; i < 3; i++) free(t->buf[i]);
    free(t->codes);
    free(t->s);
    free(t->b);
}

/* Activations with outliers, exact zeros, an all-zero 64-column block and
 * (with several tokens) an all-zero token. */
static void make_x(float *x, int nt, int64_t cols) {
    for (int64_t i = 0; i < nt * cols; i++) {
        const uint32_t k = rng_u32() % 64;
        x[i] = k == 0 ? 0.0f : k == 1 ? 40.0f * rng_unit() : rng_unit();
    }
    for (int64_t c = 64; c < 128 && c < cols; c++) x[c] = 0.0f;
    if (nt > 1)
        for (int64_t c = 0; c < cols; c++) x[cols + c] = 0.0f;
}

/* The activation-block scale the kernel uses (see the header). */
static double block_scale(double amax, int levels) {
    if (amax == 0) return 0;
    if (levels == 1) return amax / 127;
    int e;
    frexp(amax / 127, &e); /* amax / 127 <= 2^e */
    double s = ldexp(1, e);
    if (127 * (s / 2) >= amax) s /= 2;
    return s;
}

/* Checks y[t * rows + r] for r in [r0, r1) against the reference. */
static void check(const tw *t, const float *x, int nt, const float *y,
                  int64_t r0, int64_t r1, int levels) {
    const sp_weight *w = &t->w;
    const int64_t cols = w->cols, gs = w->group_size, gpr = cols / gs;
    const int64_t blk = w->bits == 4 ? 128 : 64;
    const double unit = levels == 1 ? 0.5 + 0x1p-15 : levels == 2 ? 0x1p-8 : 0x1p-15;
    for (int k = 0; k < nt; k++) {
        const float *xt = x + k * cols;
        for (int64_t r = r0; r < r1; r++) {
            double ref = 0, mag = 0, rep = 0;
            for (int64_t c0 = 0; c0 < cols; c0 += blk) {
                double amax = 0, sq = 0;
                for (int64_t c = c0; c < c0 + blk; c++) amax = fmax(amax, fabs(xt[c]));
                for (int64_t c = c0; c < c0 + blk; c++) {
                    const int64_t g = r * gpr + c / gs;
                    const double wsq = t->s[g] * t->codes[r * cols + c];
                    ref += (wsq + t->b[g]) * xt[c];
                    mag += (fabs(wsq) + fabs(t->b[g])) * fabs(xt[c]);
                    /* one level: the bias takes the quantized activations
                     * too, so the error follows the weight s q + b */
                    sq += fabs(levels == 1 ? wsq + t->b[g] : wsq);
                }
                rep += sq * block_scale(amax, levels) * unit;
            }
            const double tol = rep + (double)(cols / 32 + gs + 16) * 0x1p-24 * mag;
            const double got = y[k * w->rows + r];
            if (!(fabs(got - ref) <= tol))
                fail_msg("%s: bits=%d gs=%lld q=%d cols=%lld levels=%d t=%d r=%lld:"
                         " got %.9g want %.9g (err %.3g > tol %.3g)",
                         cur_kernel, w->bits, (long long)gs, (int)w->qparam_dtype,
                         (long long)cols, levels, k, (long long)r, got, ref,
                         fabs(got - ref), tol);
        }
    }
}

static void run_against_reference(rows_fn *kernel) {
    static const int bits_list[] = {4, 8}, gs_list[] = {32, 64, 128};
    static const sp_dtype qts[] = {SP_DTYPE_F32, SP_DTYPE_F16, SP_DTYPE_BF16};
    static const int64_t cols_list[] = {128, 384, 1024};
    static const int64_t rows_list[] = {1, 7, 37};
    int n = 0;
    for (int bi = 0; bi < 2; bi++)
    for (int gi = 0; gi < 3; gi++)
    for (int qi = 0; qi < 3; qi++)
    for (int ci = 0; ci < 3; ci++) {
        const int64_t rows = rows_list[(n + ci) % 3], cols = cols_list[ci];
        const int nt = 1 + n % SP_MM_DECODE_TOKENS; /* 1..8 per bit width */
        tw t;
        make_weight(&t, rows, cols, bits_list[bi], gs_list[gi], qts[qi], n % 3);
        n++;
        float *x = malloc(sizeof(float) * (size_t)(nt * cols));
        float *y = malloc(sizeof(float) * (size_t)(nt * rows));
        assert_true(x && y);
        make_x(x, nt, cols);
        for (int levels = 1; levels <= 3; levels++) {
            for (int64_t i = 0; i < nt * rows; i++) y[i] = NAN;
            /* two calls over a split range, as two pool threads make */
            const int64_t mid = rows / 2;
            assert_true(kernel(&t.w, x, nt, y, 0, mid, levels));
            assert_true(kernel(&t.w, x, nt, y, mid, rows, levels));
            check(&t, x, nt, y, 0, rows, levels);
            if (nt > 1) /* the all-zero token gives exactly 0 */
                for (int64_t r = 0; r < rows; r++) assert_true(y[rows + r] == 0.0f);
        }
        free(x);
        free(y);
        free_weight(&t);
    }
}

/* mxfp4 rows (read as affine 4-bit through a table): the same reference
 * and bound, every level, 1..8 tokens, split ranges. */
static void run_mxfp4(rows_fn *kernel) {
    static const int64_t cols_list[] = {128, 640, 2048};
    for (int ci = 0; ci < 3; ci++)
        for (int nt = 1; nt <= SP_MM_DECODE_TOKENS; nt++) {
            const int64_t rows = 5 + 8 * ci, cols = cols_list[ci];
            tw t;
            make_mxfp4_weight(&t, rows, cols, nt % 2);
            float *x = malloc(sizeof(float) * (size_t)(nt * cols));
            float *y = malloc(sizeof(float) * (size_t)(nt * rows));
            assert_true(x && y);
            make_x(x, nt, cols);
            for (int levels = 1; levels <= 3; levels++) {
                for (int64_t i = 0; i < nt * rows; i++) y[i] = NAN;
                assert_true(kernel(&t.w, x, nt, y, 0, rows / 2, levels));
                assert_true(kernel(&t.w, x, nt, y, rows / 2, rows, levels));
                check(&t, x, nt, y, 0, rows, levels);
            }
            free(x);
            free(y);
            free_weight(&t);
        }
    tw t;
    make_mxfp4_weight(&t, 3, 96, 0); /* not a whole 64-byte load */
    float x[96], y[3];
    assert_false(kernel(&t.w, x, 1, y, 0, 3, 3));
    free_weight(&t);
}

/* Three levels against the exact f32 path on typical data (activations of
 * comparable size, no outliers): within 1e-5 of the output's scale. */
static void run_three_levels_match_f32(rows_fn *kernel) {
    const int64_t rows = 64, cols = 2048;
    const int nt = 2;
    for (int bits = 4; bits <= 8; bits += 4) {
        tw t;
        make_weight(&t, rows, cols, bits, 64, SP_DTYPE_BF16, 1);
        float x[2 * 2048], y3[2 * 64], yf[2 * 64];
        for (int64_t i = 0; i < nt * cols; i++) x[i] = rng_unit();
        assert_true(kernel(&t.w, x, nt, y3, 0, rows, 3));
        sp_mm_int8_force(false);
        sp_mm_precision_force(SP_PRECISION_EXACT);
        sp_matmul(NULL, &t.w, x, nt, yf);
        sp_mm_precision_force(SP_PRECISION_HIGH);
        double rms = 0, worst = 0;
        for (int i = 0; i < nt * rows; i++) rms += (double)yf[i] * yf[i];
        rms = sqrt(rms / (nt * rows));
        for (int i = 0; i < nt * rows; i++)
            worst = fmax(worst, fabs((double)y3[i] - yf[i]) / (fabs(yf[i]) + rms));
        print_message("bits %d: 3 levels vs f32: max |diff| / (|y| + rms y) = %.2g\n",
                      bits, worst);
        assert_true(worst <= 1e-5);
        free_weight(&t);
    }
}

/* Formats outside the kernel are refused without writing; an empty range
 * only probes; rows outside [r0, r1) are left alone. */
static void run_coverage_and_range(rows_fn *kernel) {
    tw t;
    make_weight(&t, 5, 256, 4, 64, SP_DTYPE_F16, 0);
    float x[9 * 256], y[9 * 5];
    for (int i = 0; i < 9 * 256; i++) x[i] = rng_unit();
    for (int i = 0; i < 45; i++) y[i] = -7.0f;
    assert_true(kernel(&t.w, x, SP_MM_DECODE_TOKENS, y, 0, 0, 3));
    assert_false(kernel(&t.w, x, SP_MM_DECODE_TOKENS + 1, y, 0, 5, 3));
    assert_false(kernel(&t.w, x, 0, y, 0, 5, 3));
    assert_false(kernel(&t.w, x, 1, y, 0, 5, 0));
    assert_false(kernel(&t.w, x, 1, y, 0, 5, 4));
    sp_weight bad = t.w;
    bad.bits = 3;
    assert_false(kernel(&bad, x, 1, y, 0, 0, 1));
    bad = t.w;
    bad.cols = 192; /* not a whole 64-byte load of 4-bit codes */
    assert_false(kernel(&bad, x, 1, y, 0, 0, 1));
    bad = t.w;
    bad.cols = 65536; /* with 2 tokens, more than the scratch holds */
    assert_true(kernel(&bad, x, 1, y, 0, 0, 1));
    assert_false(kernel(&bad, x, 2, y, 0, 0, 1));
    bad = t.w;
    bad.type = SP_W_BF16;
    assert_false(kernel(&bad, x, 1, y, 0, 0, 1));
    for (int i = 0; i < 20; i++) assert_true(y[i] == -7.0f);
    assert_true(kernel(&t.w, x, 4, y, 1, 3, 2));
    for (int k = 0; k < 4; k++)
        for (int r = 0; r < 5; r++)
            assert_true((y[k * 5 + r] == -7.0f) == (r < 1 || r >= 3));
    check(&t, x, 4, y, 1, 3, 2);
    free_weight(&t);
}

static void test_against_reference(void **state) {
    (void)state;
    FOR_EACH_KERNEL(run_against_reference(kernel););
}

static void test_mxfp4(void **state) {
    (void)state;
    FOR_EACH_KERNEL(run_mxfp4(kernel););
}

static void test_three_levels_match_f32(void **state) {
    (void)state;
    FOR_EACH_KERNEL(run_three_levels_match_f32(kernel););
}

/* 8 tokens in one pass give each token the bits of two 4-token passes
 * (every token's sums are its own; only the pass count changes). */
static void run_eight_as_two_fours(rows_fn *kernel) {
    for (int bits = 4; bits <= 8; bits += 4) {
        tw t;
        make_weight(&t, 13, 512, bits, 64, SP_DTYPE_BF16, 1);
        float x[8 * 512], one[8 * 13], two[8 * 13];
        make_x(x, 8, 512);
        for (int levels = 1; levels <= 3; levels++) {
            assert_true(kernel(&t.w, x, 8, one, 0, 13, levels));
            float half[4 * 13];
            for (int h = 0; h < 2; h++) {
                assert_true(kernel(&t.w, x + h * 4 * 512, 4, half, 0, 13, levels));
                for (int k = 0; k < 4; k++)
                    memcpy(two + (h * 4 + k) * 13, half + k * 13, 13 * sizeof(float));
            }
            assert_memory_equal(one, two, sizeof one);
        }
        free_weight(&t);
    }
}

/* MLX-shaped groups: codes around the middle of the range and the bias
 * near -mid s, so that the weights s q + b are small while s q is not, and
 * activations whose one-level rounding errors all have the same sign
 * (x = n + 3/8 with a block maximum of 127, S = 1). The error of one level
 * must follow the weights (check()'s bound), not s q: a bias term taken
 * from the exact activations would be off by mid s sum (x~ - x), several
 * times that bound here (scales all positive, so nothing cancels). */
static void run_centered_groups(rows_fn *kernel) {
    for (int bits = 4; bits <= 8; bits += 4) {
        const int64_t rows = 9, cols = 1024, gs = 64, mid = 1 << (bits - 1);
        tw t;
        make_weight(&t, rows, cols, bits, gs, SP_DTYPE_BF16, 0);
        uint8_t *codes = (uint8_t *)t.w.data;
        memset(codes, 0, (size_t)(rows * cols * bits / 8));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                const int q = (int)mid - 1 + (int)(rng_u32() % 3);
                t.codes[r * cols + c] = (int16_t)q;
                if (bits == 8) codes[r * cols + c] = (uint8_t)q;
                else codes[(r * cols + c) / 2] |= (uint8_t)(q << (4 * (c % 2)));
            }
        for (int64_t g = 0; g < rows * (cols / gs); g++) { /* exact in bf16 */
            t.s[g] = qparam_put(SP_DTYPE_BF16, (uint8_t *)t.w.scales, (size_t)g,
                                (float)fabs(t.s[g]));
            t.b[g] = qparam_put(SP_DTYPE_BF16, (uint8_t *)t.w.biases, (size_t)g,
                                (float)(-(double)mid * t.s[g]));
        }
        const int64_t blk = bits == 4 ? 128 : 64;
        float x[1024], y[9];
        for (int64_t c = 0; c < cols; c++)
            x[c] = c % blk == 0 ? 127.0f : (float)((int)(rng_u32() % 201) - 100) + 0.375f;
        assert_true(kernel(&t.w, x, 1, y, 0, rows, 1));
        check(&t, x, 1, y, 0, rows, 1);
        free_weight(&t);
    }
}

static void test_centered_groups(void **state) {
    (void)state;
    FOR_EACH_KERNEL(run_centered_groups(kernel););
}

static void test_eight_as_two_fours(void **state) {
    (void)state;
    FOR_EACH_KERNEL(run_eight_as_two_fours(kernel););
}

static void test_coverage_and_range(void **state) {
    (void)state;
    FOR_EACH_KERNEL(run_coverage_and_range(kernel););
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_three_levels_match_f32),
        cmocka_unit_test(test_mxfp4),
        cmocka_unit_test(test_coverage_and_range),
        cmocka_unit_test(test_eight_as_two_fours),
        cmocka_unit_test(test_centered_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
