/* sp_mm_gemm_vnni (matmul_vnni_gemm.c): the int8-activation prefill GEMM for
 * MLX affine 4/8-bit weights, against a double-precision reference written
 * here (codes packed by an independent bit-by-bit packer, f16/bf16 scales
 * decoded with ldexp).
 *
 * Tolerance, per output y[t][r] (rigorous, so the test cannot flake):
 *   representation: each activation is carried by `levels` int8 parts of its
 *     group's power-of-two scale S_g = 2^ceil(log2(max|x| / 127)), so
 *     |x - x~| <= S_g 2^(-7 (levels - 1)) / 2 and the q.x term is off by at
 *     most  R = sum_g S_g 2^(-7 (levels-1)) / 2 sum_{j in g} |s_g q_j|;
 *     one level: S_g = max|x| / 127 (u = 1/2 + 2^-15 for the rounded
 *     127 / max|x|) and X_g summed from the quantized activations, so the
 *     error is sum_j (s q_j + b) (x~_j - x_j): R with |s_g q_j + b_g|;
 *   f32: float(int dot) once per group and level run, <= 3 FMAs per group
 *     into the output, X_g summed in f32 (gs / 16 + 4 roundings):
 *     F = 2^-22 (3 groups + gs / 16 + 8) (sum_j (|s q_j| + |b|) |x_j| + R)
 *     (2^-24 per rounding, times a margin of 4).
 * A wrong code, scale, bias, group, row or token is an O(1) error. A level
 * that does nothing would stay inside R of the level below, so a second
 * check asks each extra level to cut the summed squared error by the factor
 * it must give (ideally 2^14; required 2^7 for level 2, since one level's
 * scale max|x| / 127 is up to 2x finer than the power of two the others
 * share, and 2^8 for level 3, whose error is partly f32 rounding already).
 *
 * Skipped when the CPU lacks AVX-512 VNNI (the kernel then reports that it
 * does not cover anything). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/matmul/matmul_vnni_gemm.h"

#define TEST_RNG_SEED 0x5eed0f9e77a11ce5ull
#include "test_util.h"

static bool cpu_has_vnni(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

/* ------------------------------------------------------- reference values */

static double ref_f16(uint16_t h) {
    const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return sign ? -v : v;
}

static double ref_bf16(uint16_t h) {
    const int sign = h >> 15, e = (h >> 7) & 255, m = h & 127;
    const double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    return sign ? -v : v;
}

/* A weight with its intended codes, scales and biases. */
typedef struct test_weight {
    sp_weight w;
    uint32_t *packed;
    uint8_t *scale_buf, *bias_buf;
    int *codes;         /* [rows][cols] */
    double *s, *b;      /* [rows][groups] */
} test_weight;

/* A qparam of type t with a value near +-2^e2 (e2 in [-10, 2]). */
static double put_qparam(sp_dtype t, uint8_t *buf, size_t i, int e2) {
    switch (t) {
    case SP_DTYPE_F16: {
        const uint16_t h = rng_f16_bits(15 + e2 - 1, 15 + e2);
        memcpy(buf + 2 * i, &h, 2);
        return ref_f16(h);
    }
    case SP_DTYPE_BF16: {
        const uint16_t h = rng_bf16_bits(127 + e2 - 1, 127 + e2);
        memcpy(buf + 2 * i, &h, 2);
        return ref_bf16(h);
    }
    default: {
        const float f = ldexpf(frand(-2.0f, 2.0f), e2);
        memcpy(buf + 4 * i, &f, 4);
        return f;
    }
    }
}

static void make_weight(test_weight *tw, int rows, int cols, int bits,
                        int gs, sp_dtype qt) {
    const int groups = cols / gs;
    const size_t words = (size_t)rows * (size_t)cols * (size_t)bits / 32;
    const size_t qsize = qt == SP_DTYPE_F32 ? 4 : 2;
    tw->packed = calloc(words, 4);
    tw->scale_buf = malloc(qsize * (size_t)(rows * groups));
    tw->bias_buf = malloc(qsize * (size_t)(rows * groups));
    tw->codes = malloc(sizeof(int) * (size_t)(rows * cols));
    tw->s = malloc(sizeof(double) * (size_t)(rows * groups));
    tw->b = malloc(sizeof(double) * (size_t)(rows * groups));
    assert_non_null(tw->packed);
    assert_non_null(tw->scale_buf);
    assert_non_null(tw->bias_buf);
    assert_non_null(tw->codes);
    assert_non_null(tw->s);
    assert_non_null(tw->b);
    /* MLX packing: code c of a row at bit c * bits of the row's little-endian
     * uint32 stream, set here bit by bit. */
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const int q = (int)(rng_u32() % (1u << bits));
            tw->codes[r * cols + c] = q;
            const size_t bit0 = ((size_t)r * (size_t)cols + (size_t)c) * (size_t)bits;
            for (int k = 0; k < bits; k++)
                if (q >> k & 1)
                    tw->packed[(bit0 + (size_t)k) / 32] |= 1u << ((bit0 + (size_t)k) % 32);
        }
    for (int i = 0; i < rows * groups; i++) {
        tw->s[i] = put_qparam(qt, tw->scale_buf, (size_t)i, -6);
        tw->b[i] = put_qparam(qt, tw->bias_buf, (size_t)i, -3);
    }
    tw->w = (sp_weight){
        .type = SP_W_AFFINE, .rows = rows, .cols = cols, .data = tw->packed,
        .bits = bits, .group_size = gs, .qparam_dtype = qt,
        .scales = tw->scale_buf, .biases = tw->bias_buf,
    };
}

static void free_weight(test_weight *tw) {
    free(tw->packed);
    free(tw->scale_buf);
    free(tw->bias_buf);
    free(tw->codes);
    free(tw->s);
    free(tw->b);
}

/* Activations with a per-token size, outliers, scattered zeros and, for
 * several tokens, one all-zero group (token 0) and one group with a single
 * nonzero (last token). */
static float *make_x(int nt, int cols, int gs) {
    float *x = malloc(sizeof(float) * (size_t)(nt * cols));
    assert_non_null(x);
    for (int t = 0; t < nt; t++) {
        const float size = powf(10.0f, frand(-2.0f, 1.0f));
        for (int c = 0; c < cols; c++) {
            float v = frand(-1.0f, 1.0f) * size;
            const uint32_t u = rng_u32() % 100;
            if (u < 3) v *= 300.0f;
            else if (u < 13) v = 0.0f;
            x[t * cols + c] = v;
        }
    }
    if (nt > 1) { /* (one token keeps random values: the level checks
                   * need something that levels improve) */
        const int g = cols / gs > 1 ? 1 : 0;
        for (int j = 0; j < gs; j++) x[g * gs + j] = 0.0f;
        for (int j = 0; j < gs; j++) x[(nt - 1) * cols + j] = j == 5 ? -3.25f : 0.0f;
    }
    return x;
}

/* Smallest power of two S with 127 S >= max |x| over the group (1 for a zero
 * group, where the codes are zero whatever S is); one level: max|x| / 127. */
static double group_scale(const float *xg, int gs, int levels) {
    double amax = 0;
    for (int j = 0; j < gs; j++) amax = fmax(amax, fabs((double)xg[j]));
    if (amax == 0) return 1.0;
    if (levels == 1) return amax / 127;
    int k = -140;
    while (127.0 * ldexp(1.0, k) < amax) k++;
    return ldexp(1.0, k);
}

typedef struct check_result {
    double sq_err; /* sum of squared errors over all outputs */
} check_result;

/* Runs the kernel on rows [0, rows) in two calls (split at `split`) and
 * checks every output against the reference and the bound. */
static check_result run_and_check(const test_weight *tw, const float *x,
                                  int nt, int levels, int split) {
    const sp_weight *w = &tw->w;
    const int rows = (int)w->rows, cols = (int)w->cols, gs = w->group_size;
    const int groups = cols / gs;
    float *y = malloc(sizeof(float) * (size_t)(nt * rows));
    assert_non_null(y);
    for (int i = 0; i < nt * rows; i++) y[i] = 12345.0f;
    assert_true(sp_mm_gemm_vnni(w, x, nt, y, 0, split, levels));
    assert_true(sp_mm_gemm_vnni(w, x, nt, y, split, rows, levels));
    check_result res = {0};
    /* (one level: + 2^-15 for the rounded 127 / max|x|) */
    const double lev = levels == 1 ? 0.5 + 0x1p-15 : ldexp(1.0, -7 * (levels - 1)) / 2;
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < rows; r++) {
            double want = 0, terms = 0, repr = 0;
            for (int g = 0; g < groups; g++) {
                const float *xg = x + t * cols + g * gs;
                const double s = tw->s[r * groups + g], b = tw->b[r * groups + g];
                double sq = 0;
                for (int j = 0; j < gs; j++) {
                    const double q = tw->codes[r * cols + g * gs + j];
                    want += (s * q + b) * xg[j];
                    terms += (fabs(s * q) + fabs(b)) * fabs((double)xg[j]);
                    /* one level: the bias term takes the quantized
                     * activations too, so the error follows s q + b */
                    sq += fabs(levels == 1 ? s * q + b : s * q);
                }
                repr += group_scale(xg, gs, levels) * lev * sq;
            }
            const double f32 = ldexp(1.0, -22) * (3.0 * groups + gs / 16 + 8) * (terms + repr);
            const double got = y[t * rows + r];
            const double err = fabs(got - want);
            if (!(err <= repr + f32))
                fail_msg("bits %d gs %d levels %d rows %d cols %d nt %d: y[%d][%d] "
                         "= %.9g, want %.9g (err %.3g, bound %.3g + %.3g)",
                         w->bits, gs, levels, rows, cols, nt, t, r, got, want,
                         err, repr, f32);
            res.sq_err += err * err;
        }
    free(y);
    return res;
}

/* ----------------------------------------------------------------- tests */

static void test_against_reference(void **state) {
    (void)state;
    if (!cpu_has_vnni()) skip();
    static const sp_dtype qts[] = {SP_DTYPE_F32, SP_DTYPE_F16, SP_DTYPE_BF16};
    static const int row_counts[] = {1, 31, 33, 70, 45};
    static const int token_counts[] = {1, 5, 6, 7, 13, 37};
    int n = 0;
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gi = 0; gi < 3; gi++)
            for (int qi = 0; qi < 3; qi++, n++) {
                const int gs = 32 << gi;
                const int rows = row_counts[n % 5];
                const int nt = token_counts[n % 6];
                /* 96 (a 32-column block at the end), one and two panels of
                 * 512 columns with a remainder, a single group */
                const int col_choices[] = {gs == 32 ? 96 : 2 * gs, 640, 1152, gs};
                const int cols = col_choices[n % 4];
                test_weight tw;
                make_weight(&tw, rows, cols, bits, gs, qts[qi]);
                float *x = make_x(nt, cols, gs);
                const int split = rows > 1 ? (int)(rng_u32() % (uint32_t)rows) : 0;
                double e[4];
                for (int levels = 1; levels <= 3; levels++)
                    e[levels] = run_and_check(&tw, x, nt, levels, split).sq_err;
                /* each level must do its share (see the header) */
                if (!(e[2] <= e[1] / 128) || !(e[3] <= e[2] / 256))
                    fail_msg("bits %d gs %d rows %d cols %d nt %d: squared "
                             "errors by level %.3g %.3g %.3g",
                             bits, gs, rows, cols, nt, e[1], e[2], e[3]);
                free(x);
                free_weight(&tw);
            }
}

/* Activations that three levels represent exactly: only f32 rounding is
 * left, far below one level's step, for every bits / group combination. */
/* MLX-shaped groups (as test_matmul_vnni.c's centered groups): codes
 * around the middle of the range, positive scales and the bias -mid s, so
 * the weights s q + b are small while s q is not; activations whose
 * one-level rounding errors share a sign (n + 3/8 in groups whose maximum
 * is 127, S = 1). One level's error must follow the weights (the bound of
 * run_and_check): a bias term from the exact activations would be off by
 * mid s sum (x~ - x), several times that. */
static void test_centered_groups(void **state) {
    (void)state;
    if (!cpu_has_vnni()) skip();
    for (int bits = 4; bits <= 8; bits += 4) {
        const int rows = 33, cols = 640, gs = 64, nt = 3, mid = 1 << (bits - 1);
        test_weight tw;
        make_weight(&tw, rows, cols, bits, gs, SP_DTYPE_F32);
        memset(tw.packed, 0, (size_t)rows * (size_t)cols * (size_t)bits / 8);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
                const int q = mid - 1 + (int)(rng_u32() % 3);
                tw.codes[r * cols + c] = q;
                const size_t bit0 = ((size_t)r * (size_t)cols + (size_t)c) * (size_t)bits;
                tw.packed[bit0 / 32] |= (uint32_t)q << (bit0 % 32);
            }
        for (int g = 0; g < rows * (cols / gs); g++) {
            const float s = fabsf((float)tw.s[g]), b = -(float)mid * s;
            memcpy(tw.scale_buf + 4 * (size_t)g, &s, 4);
            memcpy(tw.bias_buf + 4 * (size_t)g, &b, 4);
            tw.s[g] = s;
            tw.b[g] = b;
        }
        float *x = malloc(sizeof(float) * (size_t)(nt * cols));
        assert_non_null(x);
        for (int i = 0; i < nt * cols; i++)
            x[i] = i % gs == 0 ? 127.0f : (float)((int)(rng_u32() % 201) - 100) + 0.375f;
        run_and_check(&tw, x, nt, 1, rows / 2);
        free(x);
        free_weight(&tw);
    }
}

static void test_exact_levels(void **state) {
    (void)state;
    if (!cpu_has_vnni()) skip();
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gs = 32; gs <= 128; gs *= 2) {
            const int rows = 40, cols = 4 * gs, nt = 9;
            test_weight tw;
            make_weight(&tw, rows, cols, bits, gs, SP_DTYPE_F32);
            float *x = malloc(sizeof(float) * (size_t)(nt * cols));
            assert_non_null(x);
            for (int i = 0; i < nt * cols; i++) {
                const int scale_exp = (i / gs) % 5 - 2; /* S = 2^-2 .. 2^2 */
                const int a1 = (int)(rng_u32() % 253) - 126; /* |x| < 127 S */
                const int a2 = (int)(rng_u32() % 127) - 63;
                const int a3 = (int)(rng_u32() % 127) - 63;
                x[i] = ldexpf((float)a1 + a2 / 128.0f + a3 / 16384.0f, scale_exp);
                if (i % gs == 0) x[i] = ldexpf(127.0f, scale_exp); /* pins S */
            }
            /* representation term is zero here: compare with the f32 bound
             * alone by asking for a bound 2^-14 times smaller than R */
            const sp_weight *w = &tw.w;
            float *y = malloc(sizeof(float) * (size_t)(nt * rows));
            assert_non_null(y);
            assert_true(sp_mm_gemm_vnni(w, x, nt, y, 0, rows, 3));
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < rows; r++) {
                    double want = 0, terms = 0;
                    for (int c = 0; c < cols; c++) {
                        const int g = r * (cols / gs) + c / gs;
                        const double v = tw.s[g] * tw.codes[r * cols + c] + tw.b[g];
                        want += v * x[t * cols + c];
                        terms += (fabs(tw.s[g] * tw.codes[r * cols + c]) + fabs(tw.b[g])) *
                                 fabs((double)x[t * cols + c]);
                    }
                    const double f32 = ldexp(1.0, -22) * (3.0 * (cols / gs) + gs / 16 + 8) * terms;
                    assert_close(y[t * rows + r], want, f32, 0, t * rows + r);
                }
            free(y);
            free(x);
            free_weight(&tw);
        }
}

/* A sub-range writes its rows only, for every token. */
static void test_row_range_only(void **state) {
    (void)state;
    if (!cpu_has_vnni()) skip();
    const int rows = 100, cols = 256, nt = 11;
    test_weight tw;
    make_weight(&tw, rows, cols, 4, 64, SP_DTYPE_BF16);
    float *x = make_x(nt, cols, 64);
    float *y = malloc(sizeof(float) * (size_t)(nt * rows));
    assert_non_null(y);
    for (int i = 0; i < nt * rows; i++) y[i] = 7.0f;
    assert_true(sp_mm_gemm_vnni(&tw.w, x, nt, y, 37, 71, 2));
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < rows; r++) {
            const bool inside = r >= 37 && r < 71;
            if (!inside) assert_true(y[t * rows + r] == 7.0f);
        }
    free(y);
    free(x);
    free_weight(&tw);
}

/* Non-finite activations give non-finite outputs for that token. */
static void test_non_finite(void **state) {
    (void)state;
    if (!cpu_has_vnni()) skip();
    const int rows = 20, cols = 128, nt = 3;
    test_weight tw;
    make_weight(&tw, rows, cols, 8, 32, SP_DTYPE_F16);
    float *x = make_x(nt, cols, 32);
    x[1 * cols + 40] = NAN;
    x[2 * cols + 3] = INFINITY;
    float y[3 * 20];
    assert_true(sp_mm_gemm_vnni(&tw.w, x, nt, y, 0, rows, 3));
    for (int r = 0; r < rows; r++) {
        assert_true(isfinite(y[r]));
        assert_false(isfinite(y[rows + r]));
        assert_false(isfinite(y[2 * rows + r]));
    }
    free(x);
    free_weight(&tw);
}

/* Uncovered formats and arguments return false and write nothing; an empty
 * range of a covered one returns true. */
static void test_coverage(void **state) {
    (void)state;
    const bool cpu = cpu_has_vnni();
    test_weight tw;
    make_weight(&tw, 8, 128, 4, 64, SP_DTYPE_F32);
    float x[2 * 128] = {0}, y[2 * 8];
    for (int i = 0; i < 16; i++) y[i] = 3.0f;
    assert_int_equal(sp_mm_gemm_vnni(&tw.w, x, 2, y, 0, 0, 1), cpu);
    assert_int_equal(sp_mm_gemm_vnni(&tw.w, x, 2, y, 4, 4, 3), cpu);
    sp_weight w = tw.w;
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, 0, 8, 0));  /* levels */
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, 0, 8, 4));
    assert_false(sp_mm_gemm_vnni(&w, x, 0, y, 0, 8, 1));  /* tokens */
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, 0, 9, 1));  /* past rows */
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, 5, 4, 1));
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, -1, 4, 1));
    w.bits = 3;
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, 0, 8, 1));
    w = tw.w;
    w.group_size = 16;
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, 0, 8, 1));
    w = tw.w;
    w.cols = 96; /* not a multiple of the group */
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, 0, 8, 1));
    w = tw.w;
    w.type = SP_W_BF16;
    assert_false(sp_mm_gemm_vnni(&w, x, 2, y, 0, 8, 1));
    assert_false(sp_mm_gemm_vnni(NULL, x, 2, y, 0, 8, 1));
    for (int i = 0; i < 16; i++) assert_true(y[i] == 3.0f);
    free_weight(&tw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_exact_levels),
        cmocka_unit_test(test_centered_groups),
        cmocka_unit_test(test_row_range_only),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_coverage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
